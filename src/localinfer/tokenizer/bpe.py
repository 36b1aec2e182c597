"""GPT-2 style byte-level BPE (llama.cpp `llm_tokenizer_bpe_session`).

Pipeline per text fragment (special tokens were already cut out):
  pre-tokenizer words -> UTF-8 bytes -> one printable code point per byte
  (GPT-2's `bytes_to_unicode`) -> BPE merges by rank -> vocab ids.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from . import merge_c
from .pretokenize import CHUNK_CUT, PreTokenizer, PreTokenizerSpec
from .words import WordEncoder, heap_merge


def _bytes_to_unicode() -> list[str]:
    """GPT-2's byte -> code point table: printable Latin-1 bytes map to themselves,
    the other 68 bytes to U+0100.. in byte order (llama.cpp `unicode_byte_to_utf8_map`)."""
    printable = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    table = [""] * 256
    n = 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


BYTE_TO_UNICODE: list[str] = _bytes_to_unicode()
UNICODE_TO_BYTE: dict[str, int] = {ch: b for b, ch in enumerate(BYTE_TO_UNICODE)}
# str.translate table applied to text decoded as Latin-1 (one char per byte)
_BYTE_ENCODE_TRANSLATION = {b: ch for b, ch in enumerate(BYTE_TO_UNICODE)}


def byte_encode(word: str) -> str:
    """UTF-8 bytes of `word`, each byte spelled as its GPT-2 code point."""
    return word.encode("utf-8").decode("latin-1").translate(_BYTE_ENCODE_TRANSLATION)


def parse_merges(merges: Sequence[str]) -> dict[tuple[str, str], int]:
    """`tokenizer.ggml.merges` ("left right" strings) -> {(left, right): rank}.

    Split at the first space after position 0 like llama.cpp (a merge can start
    with a space-like byte char); the first occurrence of a pair keeps its rank."""
    ranks: dict[tuple[str, str], int] = {}
    for rank, merge in enumerate(merges):
        pos = merge.find(" ", 1)
        pair = (merge[:pos], merge[pos + 1:]) if pos >= 0 else ("", "")
        ranks.setdefault(pair, rank)
    return ranks


class MergeRanks(Mapping):
    """`parse_merges(merges)` without building it: the ranks are kept in one dict keyed by the merge
    strings themselves, which builds at C speed, where parse_merges' 48900 tuples of two strings
    took ~35 ms of SmolLM2's 0.3 s start. (left, right) is the merge `left + " " + right` exactly
    when left is not empty and has no space after its first character (a merge splits at its first
    space after position 0); only a merge with no such space has no pair here (parse_merges gives
    it ("", ""), which no lookup of two symbols can ask for)."""

    def __init__(self, merges: Sequence[str]):
        self._merges = merges
        self._rank = dict(zip(reversed(merges), range(len(merges) - 1, -1, -1)))  # the first occurrence wins
        self._len: int | None = None

    def get(self, pair, default=None):
        left, right = pair
        if not left or left.find(" ", 1) >= 0:
            return default
        return self._rank.get(left + " " + right, default)

    def __getitem__(self, pair):
        rank = self.get(pair)
        if rank is None:
            raise KeyError(pair)
        return rank

    def __contains__(self, pair) -> bool:
        return isinstance(pair, tuple) and len(pair) == 2 and self.get(pair) is not None

    def items(self):
        """((left, right), rank) in rank order, each pair once (parse_merges' order)."""
        rank = self._rank
        for i, merge in enumerate(self._merges):
            pos = merge.find(" ", 1)
            if pos >= 0 and rank[merge] == i:
                yield (merge[:pos], merge[pos + 1:]), i

    def __iter__(self):
        return (pair for pair, _ in self.items())

    def __len__(self) -> int:
        if self._len is None:
            self._len = sum(1 for _ in self.items())
        return self._len


def bpe_merge_ref(word: str, ranks: Mapping[tuple[str, str], int]) -> list[str]:
    """Readable reference: repeatedly merge the lowest-rank adjacent pair, leftmost on ties."""
    parts = list(word)
    while len(parts) > 1:
        best_rank, best_i = None, -1
        for i in range(len(parts) - 1):
            rank = ranks.get((parts[i], parts[i + 1]))
            if rank is not None and (best_rank is None or rank < best_rank):
                best_rank, best_i = rank, i
        if best_rank is None:
            break
        parts[best_i:best_i + 2] = [parts[best_i] + parts[best_i + 1]]
    return parts


def bpe_merge(word: str, ranks: Mapping[tuple[str, str], int]) -> list[str]:
    """Same result as `bpe_merge_ref`, in O(n log n): the shared heap merge (words.heap_merge) with
    each pair's merge rank as its key."""
    get = ranks.get
    return heap_merge(word, lambda a, b: get((a, b)))


class BpeEncoder(WordEncoder):
    """Encodes raw-text fragments (no special tokens inside) into token ids.

    Words go through the C merge loop (merge_c.py) when the kernels are built, else through
    `bpe_merge`; both give `bpe_merge_ref`'s symbols."""

    chunk_cut = CHUNK_CUT

    def __init__(
        self,
        token_to_id: Mapping[str, int],
        ranks: Mapping[tuple[str, str], int],
        pre: PreTokenizerSpec,
    ):
        super().__init__()
        self.token_to_id = token_to_id
        self.ranks = ranks
        self.pre = pre
        self.pre_tokenizer = PreTokenizer(pre.regexes)
        self._symbol_token: np.ndarray | None = None   # merger symbol -> token id, -1 if none

    def words(self, chunk: str) -> list[str]:
        return self.pre_tokenizer.split(chunk)

    def merge_words(self, words: list[str]) -> list[tuple[int, ...]]:
        if not self.pre.ignore_merges:
            return super().merge_words(words)
        # llama3: a word that is itself a token is that token, merges or not
        whole = [self.token_to_id.get(byte_encode(w)) for w in words]
        merged = iter(super().merge_words([w for w, t in zip(words, whole) if t is None]))
        return [(t,) if t is not None else next(merged) for t in whole]

    def merge_word_py(self, word: str) -> tuple[int, ...]:
        return tuple(self._symbols_to_ids(bpe_merge(byte_encode(word), self.ranks)))

    def make_merger(self) -> merge_c.PairMerger:
        merger = merge_c.PairMerger(self.ranks, BYTE_TO_UNICODE)
        self._symbol_token = np.array([self.token_to_id.get(t, -1) for t in merger.symbol_texts], np.int32)
        return merger

    def symbol_ids(self, sym: np.ndarray) -> np.ndarray | None:
        ids = self._symbol_token[sym]
        return ids if ids.min(initial=0) >= 0 else None

    def emit(self, data: bytes, sym: np.ndarray, span: np.ndarray, out: list[int]) -> None:
        ids = self.symbol_ids(sym)
        if ids is not None:
            out.extend(ids.tolist())
        else:
            texts = self.merger.symbol_texts
            out.extend(self._symbols_to_ids(texts[s] for s in sym.tolist()))

    def _symbols_to_ids(self, symbols) -> list[int]:
        token_to_id = self.token_to_id
        ids: list[int] = []
        for symbol in symbols:
            tid = token_to_id.get(symbol)
            if tid is not None:
                ids.append(tid)
                continue
            # A merge result missing from the vocab: llama.cpp looks each *byte* of the
            # symbol's UTF-8 up as a one-byte token and drops the ones it cannot find.
            # Only ASCII bytes can be complete one-byte strings.
            for b in symbol.encode("utf-8"):
                if b < 0x80:
                    tid = token_to_id.get(chr(b))
                    if tid is not None:
                        ids.append(tid)
        return ids


def decode_token_text(text: str) -> bytes:
    """Byte-level token text -> raw bytes (llama.cpp `llama_decode_text`).

    A code point outside the GPT-2 byte table becomes llama.cpp's marker
    "[UNK_BYTE_0x<hex of its UTF-8><whole token text>]"."""
    out = bytearray()
    for ch in text:
        b = UNICODE_TO_BYTE.get(ch)
        if b is not None:
            out.append(b)
        else:
            utf8 = ch.encode("utf-8")
            out += b"[UNK_BYTE_0x" + utf8.hex().encode() + text.encode("utf-8") + b"]"
    return bytes(out)
