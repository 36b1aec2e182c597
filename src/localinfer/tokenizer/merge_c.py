"""The tokenizers' merge loop in C (csrc/core/merge.c): llama.cpp's bigram work queue over the bytes
of one word, with the vocabulary in two hash indexes built once.

A word's merges cost O(n log n) in C and about 16 bytes per byte of the word, where the Python heap
loops (`bpe_merge`, `spm_merge`) spend microseconds and hundreds of bytes per character -- a prompt
that is one 4 MB word took a minute and a gigabyte there.  The Python loops stay as the fallback
when the kernels are not built, and the `_ref` loops as the oracles (tests/tokenizer/test_merge_c.py).

Many short words go to C in one call (`merge_words`).  A long word is merged window by window
(`merge_long`), so that its cost in memory stays that of one window.  That is exact, not a heuristic:
both merges (lowest rank first, or highest score; the leftmost pair on ties) have the property that
two merge results which share a symbol at the same place join there.  If A is the merge of x[0:q]
ending in symbol e = x[p:q] and B the merge of x[p:r] beginning with e, then A + B[1:] is the merge
of x[0:r]: a merge across p or q in the whole would be the smallest pair of A's or B's own state at
that point, so A or B would have made it, and e would not be one of their symbols.  (The same
argument as the "valid encoding sequence" corollaries of GitHub's rust-gems BPE notes.)  So each
window is joined to the next at a symbol both have at the same place; when two windows share none,
the word is merged whole as before.
"""

from __future__ import annotations

from typing import Iterator, Mapping, Sequence

import numpy as np

from ..backend import kernels

_ffi, _lib = kernels.c_module() if kernels.available() else (None, None)
_check = kernels.check_status


def available() -> bool:
    return kernels.available()


# A word longer than WINDOW bytes is merged in windows of that many bytes, each the next one's
# starting point at least OVERLAP bytes before its end.
WINDOW = 1 << 16
OVERLAP = 1 << 12


class NoJoin(Exception):
    """Two windows of a long word share no symbol: the word is merged whole instead."""


def byte_ends(text: str, char_ends: np.ndarray) -> np.ndarray:
    """The UTF-8 byte offsets of the character offsets `char_ends` (each >= 1) of `text`."""
    if text.isascii():
        return char_ends
    cp = np.frombuffer(text.encode("utf-32-le"), np.uint32)
    size = 1 + (cp >= 0x80).astype(np.int64) + (cp >= 0x800) + (cp >= 0x10000)
    return np.cumsum(size)[char_ends - 1]


def _n_slots(n: int) -> int:
    """A power of two with the entries filling at most half of it (short probe runs)."""
    return 1 << max(4, (2 * n + 1).bit_length())


class _Merger:
    """Holds the index arrays alive as long as the C struct points into them."""

    def __init__(self, n_ranks: int, **arrays: np.ndarray):
        self._arrays = arrays
        self._vocab = _ffi.new("li_merge_vocab *")
        self._vocab.n_ranks = n_ranks
        self.rank_queue_from = max(1 << 12, n_ranks // 4)

    @property
    def rank_queue_from(self) -> int:
        """Words from this many bytes on queue their pairs in lists per rank (merge.c): the
        (n_ranks) list heads cost more than one heap on shorter words."""
        return self._vocab.rank_queue_from

    @rank_queue_from.setter
    def rank_queue_from(self, n: int) -> None:
        self._vocab.rank_queue_from = n

    def _ptr(self, name: str, ctype: str):
        return _ffi.cast(ctype, _ffi.from_buffer(self._arrays[name]))

    def merge(self, word: bytes) -> tuple[np.ndarray, np.ndarray]:
        """Final symbols' ids and byte lengths."""
        n = len(word)
        sym = np.empty(n, np.int32)
        span = np.empty(n, np.int32)
        k = _lib.li_merge_word(self._vocab, _ffi.from_buffer("uint8_t[]", word), n,
                               _ffi.from_buffer("int32_t[]", sym, require_writable=True),
                               _ffi.from_buffer("int32_t[]", span, require_writable=True))
        _check(min(k, 0), "merge_word")
        return sym[:k], span[:k]

    def merge_words(self, data: bytes, word_end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`merge` on each word of `data` (UTF-8), the words ending at the byte offsets `word_end`
        (int64, ascending, the last is len(data)): all words' final symbols, one after the other,
        and how many each word has."""
        n = len(data)
        sym = np.empty(n, np.int32)
        span = np.empty(n, np.int32)
        word_end = np.ascontiguousarray(word_end, np.int64)
        counts = np.empty(len(word_end), np.int32)
        k = _lib.li_merge_words(self._vocab, _ffi.from_buffer("uint8_t[]", data), n,
                                _ffi.cast("int64_t *", _ffi.from_buffer(word_end)), len(word_end),
                                _ffi.from_buffer("int32_t[]", sym, require_writable=True),
                                _ffi.from_buffer("int32_t[]", span, require_writable=True),
                                _ffi.from_buffer("int32_t[]", counts, require_writable=True))
        _check(min(k, 0), "merge_words")
        return sym[:k], span[:k], counts

    def merge_long(self, word: str, window: int | None = None, overlap: int | None = None
                   ) -> Iterator[tuple[np.ndarray, np.ndarray, bytes]]:
        """The merge of `word` as runs of its final symbols (ids, byte lengths, the run's UTF-8), in order, from windows of `window` bytes (see the module's docstring).  Raises NoJoin, maybe
        after some runs, when two windows share no symbol; the caller then uses `merge`."""
        window, overlap = window or WINDOW, overlap or OVERLAP
        ascii_ = word.isascii()
        data = None if ascii_ else word.encode("utf-8")
        n = len(word) if ascii_ else len(data)

        def text(start: int, end: int) -> bytes:
            return word[start:end].encode("ascii") if ascii_ else data[start:end]

        def merge_at(start: int, end: int):
            """The merge of bytes [start, end'), end' <= end the nearest code point boundary; -> end'."""
            if end < n and not ascii_:
                while data[end] & 0xC0 == 0x80:
                    end -= 1
            sym, span = self.merge(text(start, end))
            return sym, span, end

        def starts(at: int, span: np.ndarray) -> np.ndarray:
            out = np.empty(len(span), np.int64)
            out[0] = at
            np.cumsum(span[:-1], out=out[1:])
            out[1:] += at
            return out

        sym, span, end = merge_at(0, min(n, window))
        at = 0
        while end < n:
            cur_starts = starts(at, span)
            i = max(0, int(np.searchsorted(cur_starts, end - overlap, side="right")) - 1)
            b = int(cur_starts[i])
            size = window
            while True:   # the next window from a symbol boundary of this one; wider until they join
                nsym, nspan, nend = merge_at(b, min(n, b + size))
                nstarts = starts(b, nspan)
                _, ci, ni = np.intersect1d(cur_starts[i:], nstarts, assume_unique=True, return_indices=True)
                same = (sym[i:][ci] == nsym[ni]) & (span[i:][ci] == nspan[ni])
                if same.any() and nend > end:   # joined, and a step further on
                    break
                if nend >= n:
                    raise NoJoin
                size *= 2
            j = i + int(ci[np.argmax(same)])   # the first shared symbol: the runs join there
            k = int(ni[np.argmax(same)])
            if j:
                yield sym[:j], span[:j], text(at, int(cur_starts[j]))
            at = int(nstarts[k])
            sym, span, end = nsym[k:], nspan[k:], nend   # from the shared symbol on: never empty
        yield sym, span, text(at, n)


class PairMerger(_Merger):
    """BPE: symbols are the strings of the merges; a word starts as one symbol per byte.

    `symbol_texts[i]` is symbol i in GPT-2's byte spelling; symbols 0..255 are the bytes."""

    def __init__(self, ranks: Mapping[tuple[str, str], int], byte_text: Sequence[str]):
        ids: dict[str, int] = {t: i for i, t in enumerate(byte_text)}
        texts = list(byte_text)

        def sid(text: str) -> int:
            i = ids.get(text)
            if i is None:
                i = ids[text] = len(texts)
                texts.append(text)
            return i

        pairs = [(sid(a), sid(b), r, sid(a + b)) for (a, b), r in ranks.items() if a and b]
        table = np.array(pairs, np.int32).reshape(-1, 4).T.copy()   # (4, n_pairs) rows
        left, right, rank, result = table
        slots = np.empty(_n_slots(len(pairs)), np.int32)
        super().__init__(int(rank.max(initial=-1)) + 1, left=left, right=right, rank=rank, result=result, slots=slots,
                         byte_symbol=np.arange(256, dtype=np.int32))
        _check(_lib.li_merge_pairs_index(self._ptr("left", "int32_t *"), self._ptr("right", "int32_t *"),
                                         len(pairs), self._ptr("slots", "int32_t *"), len(slots)), "merge_pairs_index")
        v = self._vocab
        v.pair_left, v.pair_right = self._ptr("left", "int32_t *"), self._ptr("right", "int32_t *")
        v.pair_rank, v.pair_result = self._ptr("rank", "int32_t *"), self._ptr("result", "int32_t *")
        v.pair_slots, v.n_pair_slots = self._ptr("slots", "int32_t *"), len(slots)
        v.byte_symbol = self._ptr("byte_symbol", "int32_t *")
        self.symbol_texts = texts


class TextMerger(_Merger):
    """SPM: symbols are token ids; a word starts as one symbol per code point and two symbols merge
    when their text is a token, the highest score first."""

    def __init__(self, tokens: Sequence[str], scores: Sequence[float]):
        encoded = [t.encode("utf-8") for t in tokens]
        lengths = np.fromiter(map(len, encoded), np.int64, len(encoded))
        offsets = np.zeros(len(encoded) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        blob = np.frombuffer(b"".join(encoded) or b"\0", np.uint8)
        # rank = position of the score in descending order; equal scores share a rank
        _, rank = np.unique(-np.asarray(scores[:len(tokens)], np.float64), return_inverse=True)
        slots = np.empty(_n_slots(len(tokens)), np.int32)
        super().__init__(int(rank.max(initial=-1)) + 1, blob=blob, offsets=offsets, rank=rank.astype(np.int32).reshape(-1), slots=slots)
        _check(_lib.li_merge_texts_index(self._ptr("blob", "uint8_t *"), self._ptr("offsets", "int64_t *"),
                                         len(tokens), self._ptr("slots", "int32_t *"), len(slots)), "merge_texts_index")
        v = self._vocab
        v.pair_slots = _ffi.NULL
        v.text_blob, v.text_offsets = self._ptr("blob", "uint8_t *"), self._ptr("offsets", "int64_t *")
        v.text_rank = self._ptr("rank", "int32_t *")
        v.text_slots, v.n_text_slots = self._ptr("slots", "int32_t *"), len(slots)
        v.text_max_bytes = int(lengths.max(initial=0))

