"""Prefix caching: the K/V of token prefixes already computed, kept for later requests.

The prompt is cut into fixed-size blocks of `block_size` tokens. Block i is keyed by a hash
chain: key_i = H(key_{i-1} || tokens of block i), so one key names the whole prefix up to the
end of its block (vLLM's scheme). A block holds copies of the K/V of its positions for every
layer. A new request walks its prompt's chain and reuses the longest run of cached blocks.

Blocks are *copied* into the slot's own contiguous cache on admission (and copied out of it
after a prefill), not shared in place: the architectures attend over one contiguous array per
sequence. The copy is a memcpy of (n_layer, block_size, n_head_kv, head_dim) per block, far
cheaper than recomputing it.

Eviction is least-recently-used under a byte budget. A lookup refreshes the blocks it matched
from the last to the first, so a prefix's first blocks are always more recent than its later
ones: eviction takes the tails first, never leaving a cached block behind an evicted parent.

Only the plain KVCache is supported. A sliding-window cache (gemma3's InterleavedKVCache)
holds its SWA layers in a ring that keeps just the last window of positions, so the blocks of
an earlier prefix are gone from it by the time they would be copied out; those caches are
simply not prefix-cached (`supports` says no), which is correct, only slower.
"""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..kv_cache import KVCache


@dataclass
class Block:
    k: np.ndarray  # (n_layer, block_size, n_head_kv, head_dim)
    v: np.ndarray  # (n_layer, block_size, n_head_kv, head_dim)

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes


class PrefixCache:
    def __init__(self, max_bytes: int, block_size: int = 32):
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes, self.block_size = max_bytes, block_size
        self._blocks: OrderedDict[bytes, Block] = OrderedDict()  # key -> block, least recent first
        self.nbytes = 0
        self.hits = self.misses = 0  # lookups that reused something / nothing
        self._lock = threading.Lock()

    @staticmethod
    def supports(cache) -> bool:
        return type(cache) is KVCache

    def __len__(self) -> int:
        return len(self._blocks)

    def keys(self, tokens: Sequence[int]) -> list[bytes]:
        """The chain keys of every full block of `tokens`."""
        out, key, b = [], b"", self.block_size
        for i in range(len(tokens) // b):
            block = np.asarray(tokens[i * b:(i + 1) * b], dtype=np.int64).tobytes()
            key = hashlib.blake2b(key + block, digest_size=16).digest()
            out.append(key)
        return out

    def restore(self, tokens: Sequence[int], cache: KVCache, limit: int) -> int:
        """Copies the longest cached prefix of `tokens` (at most `limit` tokens, whole blocks) into
        the empty `cache`; returns its length (the cache's new offset)."""
        if not self.supports(cache) or cache.offset != 0:
            return 0
        b = self.block_size
        with self._lock:
            found = []
            for key in self.keys(tokens[:max(0, limit)]):
                block = self._blocks.get(key)
                if block is None or block.k.dtype != cache.k.dtype or block.k.shape[2:] != cache.k.shape[2:] or \
                        block.v.dtype != cache.v.dtype or block.v.shape[2:] != cache.v.shape[2:]:  # q8_0/q4_0 rows
                    break
                found.append((key, block))
            for key, _ in reversed(found):  # parents end up more recent than their children
                self._blocks.move_to_end(key)
            if found:
                self.hits += 1
            else:
                self.misses += 1
        for i, (_, block) in enumerate(found):
            cache.k[:, i * b:(i + 1) * b] = block.k
            cache.v[:, i * b:(i + 1) * b] = block.v
        cache.advance(len(found) * b)
        return len(found) * b

    def store(self, tokens: Sequence[int], cache: KVCache) -> int:
        """Keeps copies of the full blocks of `tokens` whose K/V are in `cache` (the first
        cache.offset of them); returns how many new blocks were stored."""
        if not self.supports(cache) or self.max_bytes == 0:
            return 0
        b = self.block_size
        n_new = 0
        keys = self.keys(tokens[:cache.offset])
        with self._lock:
            for i, key in reversed(list(enumerate(keys))):  # as in restore: parents most recent
                if key in self._blocks:
                    self._blocks.move_to_end(key)
                    continue
                block = Block(cache.k[:, i * b:(i + 1) * b].copy(), cache.v[:, i * b:(i + 1) * b].copy())
                if block.nbytes > self.max_bytes:
                    return 0
                self._blocks[key] = block
                self.nbytes += block.nbytes
                n_new += 1
            self._evict()
        return n_new

    def _evict(self) -> None:
        while self.nbytes > self.max_bytes and self._blocks:
            _, block = self._blocks.popitem(last=False)
            self.nbytes -= block.nbytes

    def clear(self) -> None:
        with self._lock:
            self._blocks.clear()
            self.nbytes = 0
