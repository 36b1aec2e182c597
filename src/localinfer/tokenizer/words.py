"""What the BPE and SPM encoders share: raw-text fragments -> words -> ids.

A fragment is taken in chunks cut where the words are cut anyway (`text_chunks`), so that its cost
in memory is one chunk's, and the words of many chunks and fragments are looked up in a cache of
short words' ids at once.  The words missing from it are merged together in one call to C
(merge_c.py), or one by one by the Python merges when the kernels are not built; a long word is
merged in windows (`merge_long`).  Special tokens between fragments pass through as their ids.
"""

from __future__ import annotations

import heapq
from itertools import chain
from typing import Callable, Sequence

import numpy as np

from . import merge_c
from .pretokenize import CHUNK, text_chunks

Fragment = str | int   # raw text, or a special token's id


def heap_merge(text: str, priority: Callable[[str, str], float | None]) -> list[str]:
    """Merge adjacent symbols of `text` (one per character to start), best pair first, until no pair
    has a priority: the work queue of llama.cpp's `llm_bigram_bpe` and `llm_bigram_spm`, in O(n log n).

    priority(left, right) is the pair's key, lower first (a BPE rank, an SPM -score), or None when
    the two cannot merge; equal keys merge leftmost first. A heap of candidate pairs over a linked
    list of symbols; an entry is stale once either side changed, and symbols only grow, so
    comparing the joined length finds that (llama.cpp compares byte sizes the same way)."""
    n = len(text)
    if n < 2:
        return [text] if text else []
    sym = list(text)                      # sym[i] == "" once symbol i was merged away
    prev = list(range(-1, n - 1))
    nxt = list(range(1, n + 1))
    nxt[-1] = -1
    heap: list[tuple[float, int, int, int]] = []   # (key, left, right, joined length)
    for i in range(n - 1):
        key = priority(sym[i], sym[i + 1])
        if key is not None:
            heap.append((key, i, i + 1, 2))
    heapq.heapify(heap)

    def push(left: int, right: int) -> None:
        a, b = sym[left], sym[right]
        key = priority(a, b)
        if key is not None:
            heapq.heappush(heap, (key, left, right, len(a) + len(b)))

    while heap:
        _, left, right, size = heapq.heappop(heap)
        a, b = sym[left], sym[right]
        if not a or not b or len(a) + len(b) != size:
            continue  # one side changed since this pair was queued
        sym[left], sym[right] = a + b, ""
        after = nxt[right]
        nxt[left] = after
        if after >= 0:
            prev[after] = left
        if prev[left] >= 0:
            push(prev[left], left)
        if after >= 0:
            push(left, after)
    return [t for t in sym if t]


class WordEncoder:
    """Subclasses say how a chunk of text becomes words (`words`) and how final symbols become ids
    (`symbol_ids`, `emit`), and give the Python merge of one word (`merge_word_py`)."""

    CACHE_LIMIT = 1 << 16
    CACHE_MAX_WORD = 64              # longer words are rare enough to recompute, and would pin memory
    LONG = merge_c.WINDOW // 4       # characters: a longer word may be more than a window of bytes
    BATCH = 1 << 14                  # words looked up and merged at once
    # Characters of new words merged in Python while the C merger is not built yet: building its index
    # of a vocabulary (100k-300k entries) takes ~0.2 s, more than a short prompt's words cost in Python,
    # and it was most of the first token's wait after a start.
    PY_MERGE_MAX = 2048
    chunk_cut = None                 # where a fragment may be cut into chunks (text_chunks)

    def __init__(self) -> None:
        self._cache: dict[Fragment, tuple[int, ...]] = {}
        self._merger: merge_c._Merger | None = None

    # ---- what a subclass gives ----------------------------------------------------------------

    def words(self, chunk: str) -> list[str]:
        raise NotImplementedError

    def make_merger(self) -> merge_c._Merger:
        raise NotImplementedError

    def symbol_ids(self, sym: np.ndarray) -> np.ndarray | None:
        """Final symbols -> their ids, or None when some symbol needs more than a lookup."""
        raise NotImplementedError

    def emit(self, data: bytes, sym: np.ndarray, span: np.ndarray, out: list[int]) -> None:
        """Appends the ids of the final symbols `sym` (byte lengths `span`) of the UTF-8 `data`."""
        raise NotImplementedError

    def merge_word_py(self, word: str) -> tuple[int, ...]:
        raise NotImplementedError

    # ---- encoding --------------------------------------------------------------------------------

    @property
    def merger(self) -> merge_c._Merger:
        merger = self._merger
        if merger is None:   # built whole before it is published: another thread may tokenize meanwhile
            merger = self._merger = self.make_merger()
        return merger

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        self.encode_fragments([text], out)
        return out

    def encode_into(self, text: str, out: list[int], space_prefix: bool = False) -> None:
        self.encode_fragments([text], out, space_prefix)

    def encode_fragments(self, fragments: Sequence[Fragment], out: list[int], space_prefix: bool = False) -> None:
        """Appends the ids of the fragments to `out`. space_prefix: a text fragment at the start or
        right after a special token gets a " " in front (SPM's add_space_prefix)."""
        batch: list[Fragment] = []
        after_special = True
        for frag in fragments:
            if isinstance(frag, int):
                batch.append(frag)
                after_special = True
                continue
            prefix, after_special = space_prefix and after_special, False
            chunks = (frag,) if len(frag) <= CHUNK else text_chunks(frag, self.chunk_cut, CHUNK)
            for i, chunk in enumerate(chunks):
                words = self.words(" " + chunk if prefix and i == 0 else chunk)
                if len(chunk) >= self.LONG and max(map(len, words), default=0) > self.LONG:
                    self._flush(batch, out)
                    batch = []
                    self._with_long(words, out)
                    continue
                batch += words
                if len(batch) >= self.BATCH:
                    self._flush(batch, out)
                    batch = []
        self._flush(batch, out)

    def _flush(self, items: list[Fragment], out: list[int]) -> None:
        if not items:
            return
        cache = self._cache
        found = list(map(cache.get, items))
        if None in found:
            missing = list(dict.fromkeys([w for w, f in zip(items, found) if f is None]))
            texts = [w for w in missing if isinstance(w, str)]
            merged: dict[Fragment, tuple[int, ...]] = dict(zip(texts, self.merge_words(texts)))
            merged.update((w, (w,)) for w in missing if isinstance(w, int))
            if len(cache) + len(merged) > self.CACHE_LIMIT:
                cache.clear()
            cache.update((w, ids) for w, ids in merged.items()
                         if isinstance(w, int) or len(w) <= self.CACHE_MAX_WORD)
            found = [merged[w] if f is None else f for w, f in zip(items, found)]
        out.extend(chain.from_iterable(found))

    def merge_words(self, words: list[str]) -> list[tuple[int, ...]]:
        """Each word's ids, from one call to C (or the Python merges: without the kernels, and for the
        few words of short texts until the C merger is built)."""
        if not words:
            return []
        if not merge_c.available() or (self._merger is None and sum(map(len, words)) <= self.PY_MERGE_MAX):
            return [self.merge_word_py(w) for w in words]
        joined = "".join(words)
        data = joined.encode("utf-8")
        ends = merge_c.byte_ends(joined, np.cumsum(np.fromiter(map(len, words), np.int64, len(words))))
        sym, span, counts = self.merger.merge_words(data, ends)
        bounds = np.zeros(len(words) + 1, np.int64)
        np.cumsum(counts, out=bounds[1:])
        at = bounds.tolist()
        ids = self.symbol_ids(sym)
        if ids is not None:
            flat = ids.tolist()
            return [tuple(flat[a:b]) for a, b in zip(at, at[1:])]
        out, byte_at = [], [0, *ends.tolist()]
        for i in range(len(words)):   # some symbol needs more than a lookup: word by word
            ids_i: list[int] = []
            self.emit(data[byte_at[i]:byte_at[i + 1]], sym[at[i]:at[i + 1]], span[at[i]:at[i + 1]], ids_i)
            out.append(tuple(ids_i))
        return out

    def _with_long(self, words: list[str], out: list[int]) -> None:
        start = 0
        for i in [*np.flatnonzero(np.fromiter(map(len, words), np.int64, len(words)) > self.LONG).tolist(),
                  len(words)]:
            self._flush(words[start:i], out)
            if i < len(words):
                self._long(words[i], out)
            start = i + 1

    def _long(self, word: str, out: list[int]) -> None:
        if not merge_c.available():
            out.extend(self.merge_word_py(word))
            return
        merger, mark = self.merger, len(out)
        try:
            for sym, span, data in merger.merge_long(word):
                self.emit(data, sym, span, out)
        except merge_c.NoJoin:
            del out[mark:]
            data = word.encode("utf-8")
            self.emit(data, *merger.merge(data), out)
