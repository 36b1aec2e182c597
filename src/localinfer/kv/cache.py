"""The KV cache: keys and values of every layer for the tokens already processed.

One interface (`update_and_fetch`, `offset`, `trim`, `can_trim_to`, `reset`) so that variants
(sliding window, quantized) can replace it without touching the model code.
`update_and_fetch` stores the new keys/values and returns the most recent ones in position
order, ending with the new ones: the first returned key is at position offset + n - len(keys).

- KVCache: every position of every layer.
- RotatingKVCache: only the last positions, for sliding-window attention layers.
- InterleavedKVCache: one of each for models that mix global and sliding-window layers
  (gemma3; llama.cpp's llama_kv_cache_iswa).

Each takes `dtype`: a numpy float dtype, or kv_types.KVCacheTypes for keys / values stored as
q8_0 / q4_0 blocks (uint8 rows of head_dim / 32 blocks; `dtype` is then float16, the type the
attention rounds its softmax weights to, and `kv_types` names the row types).
"""
from __future__ import annotations

import mmap
import os

import numpy as np

from .cache_types import cache_rows, cache_types, storage


def zeros(shape: tuple[int, ...], dtype) -> np.ndarray:
    """A zeroed array whose pages become resident only when written, and go back to the OS when
    it is dropped: an anonymous mapping without transparent huge pages. numpy's own large arrays
    ask for huge pages, and a cache laid out (layer, pos, ...) is written at the same positions
    of every layer, so its first tokens would make every 2 MiB of it resident at once; this way
    a cache costs what its tokens use (llama.cpp clears, and so touches, all of it up front)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes == 0:
        return np.zeros(shape, dtype)
    buf = mmap.mmap(-1, nbytes)
    advice = getattr(mmap, "MADV_NOHUGEPAGE", None)
    if advice is not None:
        buf.madvise(advice)
    return np.frombuffer(buf, dtype).reshape(shape)


class ContextFullError(ValueError):
    """More tokens than the context holds."""


class ContextMemoryError(ValueError):
    """A context whose KV cache is larger than the memory there is to hold it."""


def available_memory() -> int | None:
    """Bytes the system can still give: MemAvailable + SwapFree (Linux /proc/meminfo), else the
    physical memory; None where neither can be read."""
    try:
        with open("/proc/meminfo") as f:
            kib = dict(line.split(":", 1) for line in f if ":" in line)  # "MemAvailable:  123 kB"
        return (int(kib["MemAvailable"].split()[0]) + int(kib.get("SwapFree", "0").split()[0])) * 1024
    except (OSError, KeyError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def check_cache_memory(nbytes: int, n_ctx: int) -> None:
    """Refuses a cache the memory cannot hold, before it is mapped: the mapping itself may succeed
    (its pages come as tokens are written) and the process die later, or fail with a bare ENOMEM."""
    available = available_memory()
    if available is not None and nbytes > available:
        raise ContextMemoryError(
            f"a context of {n_ctx} tokens needs {nbytes} bytes ({nbytes / 2**30:.1f} GiB) of KV cache, more than "
            f"the {available / 2**30:.1f} GiB of memory available: use a smaller context (n_ctx / --ctx-size)")


def _cache_bytes(n_layers: int, n_pos: int, n_head_kv: int, storage_kv) -> int:
    """Bytes of K and V for n_pos positions of n_layers layers; storage_kv: kv_types.storage's pair."""
    (kw, kt), (vw, vt) = storage_kv
    return n_layers * n_pos * n_head_kv * (kw * kt.itemsize + vw * vt.itemsize)


class _Layers:
    """What KVCache and RotatingKVCache share: k, v arrays of every layer, in `types` (None: plain
    `dtype` arrays), `offset` tokens stored of at most `n_ctx`."""

    @property
    def dtype(self):
        return np.dtype(np.float16) if self.types is not None else self.k.dtype

    @property
    def kv_types(self):
        return self.types

    def reserve(self, n_new: int) -> None:
        """Checks, before any layer is touched, that `n_new` more tokens fit."""
        if self.offset + n_new > self.n_ctx:
            raise ContextFullError(
                f"context is full: {self.offset} tokens cached + {n_new} new > n_ctx {self.n_ctx}")

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes


class KVCache(_Layers):
    def __init__(self, n_layers: int, n_ctx: int, n_head_kv: int, head_dim: int, dtype=np.float16):
        self.n_layers, self.n_ctx = n_layers, n_ctx
        self.types = cache_types(dtype)  # KVCacheTypes, or None: both in `dtype`
        (kw, kt), (vw, vt) = kv = storage(dtype, head_dim)
        check_cache_memory(_cache_bytes(n_layers, n_ctx, n_head_kv, kv), n_ctx)
        self.k = zeros((n_layers, n_ctx, n_head_kv, kw), kt)  # (layer, pos, kv_head, head_dim or row bytes)
        self.v = zeros((n_layers, n_ctx, n_head_kv, vw), vt)  # (layer, pos, kv_head, head_dim or row bytes)
        self.offset = 0  # tokens stored; the next token goes to position `offset`
        # bumped by whoever rewrites k/v from outside (a restored state, a fork: rewritten()), so that a
        # copy of this cache elsewhere (the CUDA layers' device mirror) knows it is stale
        self.generation = 0

    def update_and_fetch(self, layer: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Stores k, v: (n, n_head_kv, head_dim) at [offset, offset+n) of `layer` and returns
        all keys and values up to there. The caller advances `offset` once per forward pass."""
        n = k.shape[0]
        end = self.offset + n
        if end > self.n_ctx:
            raise ContextFullError(f"context is full: {end} > n_ctx {self.n_ctx}")
        if self.types is not None:
            k, v = cache_rows(k, self.types.k), cache_rows(v, self.types.v)
        self.k[layer, self.offset:end] = k
        self.v[layer, self.offset:end] = v
        return self.k[layer, :end], self.v[layer, :end]

    def advance(self, n: int) -> None:
        self.offset += n

    def can_trim_to(self, n_keep: int) -> bool:
        """Whether trim(n_keep) leaves what the token at position n_keep needs."""
        return 0 <= n_keep <= self.offset

    def trim(self, n_keep: int) -> None:
        """Forget every token past the first `n_keep` (used to reuse a common prefix)."""
        if not 0 <= n_keep <= self.offset:
            raise ValueError(f"cannot keep {n_keep} tokens of {self.offset}")
        self.offset = n_keep

    def reset(self) -> None:
        self.offset = 0

    def rewritten(self) -> None:
        """Called after k, v and offset were written other than through update_and_fetch/advance."""
        self.generation += 1


class RotatingKVCache(_Layers):
    """Keys and values of the last positions only, for sliding-window attention layers.

    A query at position p sees keys p-window+1..p, so after `offset` tokens the next one needs
    the last window-1 positions. The ring holds `window + trim_margin` slots (position p in slot
    p % n_slots): the margin lets a context trim back a few tokens (regenerate, the next chat
    turn) without recomputing. Memory stays bounded whatever the sequence length.
    """

    def __init__(self, n_layers: int, n_ctx: int, n_head_kv: int, head_dim: int, window: int,
                 dtype=np.float16, trim_margin: int = 64):
        if window < 1:
            raise ValueError(f"sliding window must be >= 1, got {window}")
        self.n_layers, self.n_ctx, self.window = n_layers, n_ctx, window
        self.n_slots = min(n_ctx, window + trim_margin)
        self.types = cache_types(dtype)  # KVCacheTypes, or None: both in `dtype`
        (kw, kt), (vw, vt) = kv = storage(dtype, head_dim)
        check_cache_memory(_cache_bytes(n_layers, self.n_slots, n_head_kv, kv), n_ctx)
        self.k = zeros((n_layers, self.n_slots, n_head_kv, kw), kt)  # (layer, slot, kv_head, head_dim or row bytes)
        self.v = zeros((n_layers, self.n_slots, n_head_kv, vw), vt)  # (layer, slot, kv_head, head_dim or row bytes)
        self.offset = 0
        self.held_start = 0  # oldest position still in the ring (older slots were overwritten)
        self.generation = 0  # as KVCache's: bumped by rewritten()

    def update_and_fetch(self, layer: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Returns the keys/values of positions max(0, offset-window+1) .. offset+n-1: what the
        first new query needs, and every new one. Then stores the newest (at most n_slots)."""
        n = k.shape[0]
        if self.offset + n > self.n_ctx:
            raise ContextFullError(f"context is full: {self.offset + n} > n_ctx {self.n_ctx}")
        start = max(0, self.offset - self.window + 1)
        assert start >= self.held_start, "needed keys were overwritten (trim checks this)"
        old = np.arange(start, self.offset) % self.n_slots
        if self.types is not None:
            k, v = cache_rows(k, self.types.k), cache_rows(v, self.types.v)
        keys = np.concatenate([self.k[layer, old], k.astype(self.k.dtype)])
        values = np.concatenate([self.v[layer, old], v.astype(self.v.dtype)])
        n_store = min(n, self.n_slots)
        slots = np.arange(self.offset + n - n_store, self.offset + n) % self.n_slots
        self.k[layer, slots] = k[n - n_store:]
        self.v[layer, slots] = v[n - n_store:]
        return keys, values

    def advance(self, n: int) -> None:
        self.offset += n
        self.held_start = max(self.held_start, self.offset - self.n_slots)

    def can_trim_to(self, n_keep: int) -> bool:
        """Back to 0 always; otherwise the window before n_keep must still be in the ring."""
        if not 0 <= n_keep <= self.offset:
            return False
        return n_keep == 0 or max(0, n_keep - self.window + 1) >= self.held_start

    def trim(self, n_keep: int) -> None:
        if not self.can_trim_to(n_keep):
            raise ValueError(f"cannot keep {n_keep} tokens of {self.offset}: positions before "
                             f"{self.held_start} left the sliding window (recompute from 0)")
        self.offset = n_keep
        if n_keep == 0:
            self.held_start = 0

    def reset(self) -> None:
        self.trim(0)

    def rewritten(self) -> None:
        """Called after the ring and offsets were written other than through update_and_fetch/advance."""
        self.generation += 1


class InterleavedKVCache:
    """A KVCache for the global-attention layers and a RotatingKVCache for the sliding-window
    ones, behind the one interface, with model layer numbers (llama.cpp's llama_kv_cache_iswa)."""

    def __init__(self, is_swa: list[bool], n_ctx: int, n_head_kv: int, head_dim: int, window: int,
                 dtype=np.float16, trim_margin: int = 64):
        self.n_layers, self.n_ctx = len(is_swa), n_ctx
        n_swa = sum(is_swa)
        self.full = KVCache(len(is_swa) - n_swa, n_ctx, n_head_kv, head_dim, dtype)
        self.swa = RotatingKVCache(n_swa, n_ctx, n_head_kv, head_dim, window, dtype, trim_margin)
        self.route = []  # model layer -> (cache, layer index inside it)
        counts = {False: 0, True: 0}
        for swa in is_swa:
            self.route.append((self.swa if swa else self.full, counts[swa]))
            counts[swa] += 1

    @property
    def offset(self) -> int:
        return self.full.offset

    @property
    def dtype(self):
        return self.full.dtype

    @property
    def kv_types(self):
        return self.full.types

    def reserve(self, n_new: int) -> None:
        self.full.reserve(n_new)

    def update_and_fetch(self, layer: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cache, index = self.route[layer]
        return cache.update_and_fetch(index, k, v)

    def advance(self, n: int) -> None:
        self.full.advance(n)
        self.swa.advance(n)

    def can_trim_to(self, n_keep: int) -> bool:
        return self.full.can_trim_to(n_keep) and self.swa.can_trim_to(n_keep)

    def trim(self, n_keep: int) -> None:
        self.swa.trim(n_keep)  # the one that can refuse: nothing changes when it does
        self.full.trim(n_keep)

    def reset(self) -> None:
        self.trim(0)

    @property
    def nbytes(self) -> int:
        return self.full.nbytes + self.swa.nbytes
