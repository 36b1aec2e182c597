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

A block holds every array of the cache (kv/contents.py walks them: K and V, or a quantized
cache's blocks and scales) at its positions. A sliding-window cache (gemma3's InterleavedKVCache)
keeps its SWA layers in a ring of the last window + margin positions, so a block's SWA part is
kept only while the ring still holds it (it is stored after every prefill chunk, so a long
prompt's blocks get theirs). A prefix of L tokens is restored when its blocks have their global
part, and the blocks covering the window before L their SWA part too.

With a PrefixStore (prefix_store.py) the blocks also go to a folder when computed, and a miss
in memory reads them back: a restarted server reuses what the last one computed.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Sequence

try:   # BLAKE2 as hashlib has it, without hashlib's OpenSSL library, which a start would read for nothing
    from _blake2 import blake2b
except ImportError:   # an interpreter without the module
    from hashlib import blake2b

import numpy as np

from ..kv import contents as cache_state


@dataclass
class Block:
    # cache array name -> its block: (n_layer, block_size, ...) e.g. "k": (n_layer, block_size,
    # n_head_kv, head_dim); the sliding-window part ("swa.k" ...) may be missing
    arrays: dict[str, np.ndarray]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays.values())


class PrefixCache:
    def __init__(self, max_bytes: int, block_size: int = 32, disk=None):
        """disk: a PrefixStore backing this cache with a folder, or None."""
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes, self.block_size = max_bytes, block_size
        self._blocks: OrderedDict[bytes, Block] = OrderedDict()  # key -> block, least recent first
        self.nbytes = 0
        self.hits = self.misses = 0  # lookups that reused something / nothing
        self._lock = threading.Lock()
        self.disk = disk

    def supports(self, cache) -> bool:
        return cache_state.supports_blocks(cache, self.block_size)

    def __len__(self) -> int:
        return len(self._blocks)

    def keys(self, tokens: Sequence[int]) -> list[bytes]:
        """The chain keys of every full block of `tokens`."""
        out, key, b = [], b"", self.block_size
        for i in range(len(tokens) // b):
            block = np.asarray(tokens[i * b:(i + 1) * b], dtype=np.int64).tobytes()
            key = blake2b(key + block, digest_size=16).digest()
            out.append(key)
        return out

    def cached_length(self, tokens: Sequence[int], limit: int) -> int:
        """How many of the first `limit` tokens of `tokens` whole blocks in memory hold (what restore
        would copy, not counting the folder's blocks nor a sliding window's needs)."""
        n = 0
        with self._lock:
            for key in self.keys(tokens[:max(0, limit)]):
                if key not in self._blocks:
                    break
                n += self.block_size
        return n

    def restore(self, tokens: Sequence[int], cache, limit: int) -> int:
        """Copies the longest cached prefix of `tokens` (at most `limit` tokens, whole blocks) into
        the empty `cache`; returns its length (the cache's new offset)."""
        if not self.supports(cache) or cache.offset != 0:
            return 0
        b = self.block_size
        always, ring = cache_state.block_names(cache)
        with self._lock:
            found = []
            for key in self.keys(tokens[:max(0, limit)]):
                block = self._blocks.get(key) or self._read_disk(key, cache)
                if block is None or not always <= block.arrays.keys() <= always | ring \
                        or not cache_state.block_fits(cache, block.arrays, b):
                    break  # missing, or the block of another cache type
                found.append((key, block))
            ring_from = 0
            while found and ring:  # the sliding-window layers need the window before the prefix's end
                ring_from = self._ring_start(cache, len(found))
                if all(ring <= block.arrays.keys() for _, block in found[ring_from:]):
                    break
                found.pop()
            for key, _ in reversed(found):  # parents end up more recent than their children
                if key in self._blocks:  # (one read from disk may have pushed out another)
                    self._blocks.move_to_end(key)
            if found:
                self.hits += 1
            else:
                self.misses += 1
        if not found:
            return 0
        return cache_state.write_blocks(cache, [block.arrays for _, block in found], b, ring_from)

    def _ring_start(self, cache, n_blocks: int) -> int:
        """The first block whose sliding-window part a prefix of n_blocks needs."""
        end = n_blocks * self.block_size
        return min(max(0, end - part.window + 1) // self.block_size for _, part in cache_state.ring_parts(cache))

    def _read_disk(self, key: bytes, cache) -> Block | None:
        """A block from the folder, now also kept in memory (under the lock)."""
        if self.disk is None or self.max_bytes == 0:
            return None
        arrays = self.disk.load(key, cache)
        if arrays is None:
            return None
        block = Block(arrays)
        self._blocks[key] = block
        self.nbytes += block.nbytes
        self._evict()
        return block  # used by this restore even if the budget could not keep it

    def store(self, tokens: Sequence[int], cache) -> int:
        """Keeps copies of the full blocks of `tokens` whose K/V are in `cache` (the first
        cache.offset of them); returns how many new blocks were stored."""
        if not self.supports(cache) or self.max_bytes == 0:
            return 0
        b = self.block_size
        n_new = 0
        keys = self.keys(tokens[:cache.offset])
        _, ring = cache_state.block_names(cache)
        with self._lock:
            for i, key in reversed(list(enumerate(keys))):  # as in restore: parents most recent
                block = self._blocks.get(key)
                if block is not None:
                    self._blocks.move_to_end(key)
                    if ring and not ring <= block.arrays.keys():  # its sliding-window part is here now
                        more = {k: a for k, a in cache_state.read_block(cache, i * b, (i + 1) * b).items() if k in ring}
                        if more:
                            block.arrays.update(more)
                            self.nbytes += sum(a.nbytes for a in more.values())
                            self._write_disk(key, block, cache)
                    continue
                block = Block(cache_state.read_block(cache, i * b, (i + 1) * b))
                if block.nbytes > self.max_bytes:
                    return 0
                self._blocks[key] = block
                self.nbytes += block.nbytes
                self._write_disk(key, block, cache)
                n_new += 1
            self._evict()
        return n_new

    def _write_disk(self, key: bytes, block: Block, cache) -> None:
        if self.disk is not None:
            self.disk.save(key, block.arrays, cache)

    def _evict(self) -> None:
        while self.nbytes > self.max_bytes and self._blocks:
            _, block = self._blocks.popitem(last=False)
            self.nbytes -= block.nbytes

    def clear(self) -> None:
        with self._lock:
            self._blocks.clear()
            self.nbytes = 0
