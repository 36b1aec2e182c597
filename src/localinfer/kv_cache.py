"""The KV cache: keys and values of every layer for the tokens already processed.

One interface (`update_and_fetch`, `offset`, `trim`, `reset`) so that variants (sliding
window, quantized) can replace it without touching the model code.
"""
from __future__ import annotations

import numpy as np


class ContextFullError(ValueError):
    """More tokens than the context holds."""


class KVCache:
    def __init__(self, n_layers: int, n_ctx: int, n_head_kv: int, head_dim: int, dtype=np.float16):
        self.n_layers, self.n_ctx = n_layers, n_ctx
        self.k = np.zeros((n_layers, n_ctx, n_head_kv, head_dim), dtype)  # (layer, pos, kv_head, head_dim)
        self.v = np.zeros((n_layers, n_ctx, n_head_kv, head_dim), dtype)  # (layer, pos, kv_head, head_dim)
        self.offset = 0  # tokens stored; the next token goes to position `offset`

    @property
    def dtype(self):
        return self.k.dtype

    def reserve(self, n_new: int) -> None:
        """Checks, before any layer is touched, that `n_new` more tokens fit."""
        if self.offset + n_new > self.n_ctx:
            raise ContextFullError(
                f"context is full: {self.offset} tokens cached + {n_new} new > n_ctx {self.n_ctx}")

    def update_and_fetch(self, layer: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Stores k, v: (n, n_head_kv, head_dim) at [offset, offset+n) of `layer` and returns
        all keys and values up to there. The caller advances `offset` once per forward pass."""
        n = k.shape[0]
        end = self.offset + n
        if end > self.n_ctx:
            raise ContextFullError(f"context is full: {end} > n_ctx {self.n_ctx}")
        self.k[layer, self.offset:end] = k
        self.v[layer, self.offset:end] = v
        return self.k[layer, :end], self.v[layer, :end]

    def advance(self, n: int) -> None:
        self.offset += n

    def trim(self, n_keep: int) -> None:
        """Forget every token past the first `n_keep` (used to reuse a common prefix)."""
        if not 0 <= n_keep <= self.offset:
            raise ValueError(f"cannot keep {n_keep} tokens of {self.offset}")
        self.offset = n_keep

    def reset(self) -> None:
        self.offset = 0

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes
