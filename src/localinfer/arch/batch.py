"""Several sequences in one forward pass (continuous batching).

Each sequence brings its own tokens and its own KV cache. Their tokens are stacked row-wise, so
every matmul of a layer runs once for all of them (the GEMM path instead of one GEMV per
sequence). Only attention is per sequence: each query row sees the keys of its own cache.
A single sequence is the batch of one, so there is one forward pass, not two.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np


class Batch:
    def __init__(self, seqs: Sequence[tuple[Sequence[int], object]]):
        """seqs: (tokens, cache) per sequence; tokens go at positions cache.offset.."""
        if not seqs:
            raise ValueError("a batch needs at least one sequence")
        caches = [cache for _, cache in seqs]
        if len({id(c) for c in caches}) != len(caches):
            raise ValueError("two sequences of one batch share a KV cache")
        toks = [np.asarray(t, dtype=np.int64).reshape(-1) for t, _ in seqs]
        if any(t.shape[0] == 0 for t in toks):
            raise ValueError("a sequence of the batch has no tokens")
        for t, cache in zip(toks, caches):
            cache.reserve(t.shape[0])  # every check before any cache is touched
        self.caches = caches
        self.tokens = np.concatenate(toks)  # (n_rows,)
        ends = np.cumsum([t.shape[0] for t in toks])
        self.spans = [slice(int(e - t.shape[0]), int(e)) for t, e in zip(toks, ends)]
        self.positions = np.concatenate(  # (n_rows,) each row's position in its own sequence
            [np.arange(c.offset, c.offset + t.shape[0]) for t, c in zip(toks, caches)])

    @property
    def n_rows(self) -> int:
        return self.tokens.shape[0]

    def attend(self, layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray,
               attention: Callable[..., np.ndarray]) -> np.ndarray:
        """q: (n_rows, n_head, head_dim), k/v: (n_rows, n_head_kv, head_dim) -> (n_rows, n_head, head_dim).
        Stores each sequence's k/v in its cache and calls
        attention(q, keys, values, positions, key_start=, kv_dtype=, kv_types=) once per sequence."""
        if len(self.spans) == 1:
            return self._attend_one(0, layer, q, k, v, attention)
        out = np.empty(q.shape, np.float32)
        for i, s in enumerate(self.spans):
            out[s] = self._attend_one(i, layer, q[s], k[s], v[s], attention)
        return out

    def _attend_one(self, i, layer, q, k, v, attention):
        cache, s = self.caches[i], self.spans[i]
        keys, values = cache.update_and_fetch(layer, k, v)
        n = s.stop - s.start
        return attention(q, keys, values, self.positions[s],
                         key_start=cache.offset + n - keys.shape[0], kv_dtype=cache.dtype, kv_types=cache.kv_types)

    def advance(self) -> None:
        for s, cache in zip(self.spans, self.caches):
            cache.advance(s.stop - s.start)

    def last_rows(self, x: np.ndarray) -> np.ndarray:
        """The row of each sequence's last token: (n_seqs, ...)."""
        return x[[s.stop - 1 for s in self.spans]]

    def split(self, logits: np.ndarray, last_only: bool) -> list[np.ndarray]:
        """Per-sequence logits: (n_i, n_vocab) each, or (1, n_vocab) with `last_only`."""
        if last_only:
            return [logits[i:i + 1] for i in range(len(self.spans))]
        return [logits[s] for s in self.spans]
