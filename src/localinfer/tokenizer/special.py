"""Cutting special tokens out of raw text before the vocab's own tokenizer runs.

llama.cpp `tokenizer_st_partition` (src/llama-vocab.cpp): every token whose
attributes include CONTROL, USER_DEFINED or UNKNOWN is searched for in the raw
text, longest text first, each one splitting all text fragments the previous
ones left.  With parse_special=False, CONTROL and UNKNOWN tokens are skipped
but USER_DEFINED ones are still matched (as HF `tokenizers` does for added
tokens).  LSTRIP/RSTRIP attributes eat C-locale whitespace next to a match.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Mapping, Sequence, Union

import numpy as np

from .vocab import K, TokenAttr, Vocab

Fragment = Union[str, int]   # raw text still to tokenize, or a token id

_C_SPACE = " \t\n\v\f\r"     # what C isspace() accepts in the "C" locale

# plain ints: tested against every token's attributes
_SPECIAL_ATTRS = int(TokenAttr.CONTROL | TokenAttr.USER_DEFINED | TokenAttr.UNKNOWN)
_NOT_ALWAYS = int(TokenAttr.CONTROL | TokenAttr.UNKNOWN)
_LSTRIP, _RSTRIP = int(TokenAttr.LSTRIP), int(TokenAttr.RSTRIP)

# From this text length on, `SpecialTokens.candidates` rules special tokens out by their
# 2-character pieces.
_FILTER_MIN_LEN = 256


@dataclass(frozen=True)
class SpecialToken:
    id: int
    text: str
    parse_always: bool   # USER_DEFINED: matched even with parse_special=False
    lstrip: bool
    rstrip: bool

    @cached_property
    def ngrams(self) -> frozenset[str]:
        """`text_ngrams(text)`: all of them occur in any text containing it. Built on the first
        long text, not at load: for gemma-3's 6,414 special tokens it was about half of building
        the special-token cache."""
        return frozenset(text_ngrams(self.text))


def text_ngrams(text: str) -> set[str]:
    """The characters and 2-character substrings of `text`."""
    if len(text) < _NGRAM_CHUNK:
        return set(text) | set(map(operator.add, text, text[1:]))
    # A long text: as code points, chunk by chunk (memory stays a few chunks' worth), with each
    # pair packed in one integer; only the distinct ones become strings.
    found: set[str] = set()
    for at in range(0, len(text) - 1, _NGRAM_CHUNK):
        cps = np.frombuffer(text[at:at + _NGRAM_CHUNK + 1].encode("utf-32-le"), np.uint32).astype(np.int64)
        base = int(cps.max()) + 1
        if base <= _NGRAM_MARK_BASE:
            # small code points (most text): mark the pairs in a table instead of sorting them
            seen = np.zeros(base * base, bool)
            seen[cps[:-1] * base + cps[1:]] = True
            firsts, seconds = np.divmod(np.flatnonzero(seen), base)
            singles = np.flatnonzero(np.bincount(cps))
        else:
            pairs = np.unique(cps[:-1] << 21 | cps[1:])
            firsts, seconds = pairs >> 21, pairs & 0x1FFFFF
            singles = np.unique(cps)
        found.update(map(chr, singles.tolist()))
        found.update(map(operator.add, map(chr, firsts.tolist()), map(chr, seconds.tolist())))
    return found


_NGRAM_CHUNK = 1 << 16
_NGRAM_MARK_BASE = 512     # code points below this: pairs marked in a (base * base) table


class SpecialTokens(list):
    """The special-token cache (`SpecialToken`s in matching order) and what rules them out of a text."""

    @cached_property
    def _by_head(self) -> dict[str, list[int]]:
        """Positions in the cache by the first two characters of the text (or its only one)."""
        index: dict[str, list[int]] = {}
        for i, tok in enumerate(self):
            index.setdefault(tok.text[:2], []).append(i)
        return index

    def candidates(self, text: str) -> list[SpecialToken]:
        """The tokens that may occur in `text`, in matching order.  A long text is looked up by its
        characters and 2-character pieces: gemma-3 has 6,414 special tokens, and testing each
        against a long text costs more than tokenizing it."""
        if len(text) < _FILTER_MIN_LEN:
            return self
        present = text_ngrams(text)
        index = self._by_head
        if len(index) < len(present):
            found = [i for head, at in index.items() if head in present for i in at]
        else:
            found = [i for head in present for i in index.get(head, ())]
        found.sort()
        return [tok for tok in map(self.__getitem__, found) if tok.ngrams <= present]


def special_tokens(vocab: Vocab, metadata: Mapping[str, Any]) -> SpecialTokens:
    """The special-token cache in matching order: longest UTF-8 text first.

    llama.cpp uses an unstable std::sort on length; we break ties by id."""
    # at C speed: vocabularies reach 262k tokens
    ids = list(itertools.compress(range(len(vocab.attrs)), map(operator.and_, vocab.attrs,
                                                                itertools.repeat(_SPECIAL_ATTRS))))
    strip = _strip_attrs(vocab, ids, metadata)
    ids.sort(key=lambda i: (-len(vocab.tokens[i].encode("utf-8")), i))
    out = SpecialTokens()
    for i in ids:
        attr = vocab.attrs[i] | strip.get(i, 0)
        text = vocab.tokens[i]
        out.append(SpecialToken(
            id=i,
            text=text,
            parse_always=not attr & _NOT_ALWAYS,
            lstrip=bool(attr & _LSTRIP),
            rstrip=bool(attr & _RSTRIP),
        ))
    return out


def _strip_attrs(vocab: Vocab, special_ids: list[int], metadata: Mapping[str, Any]) -> dict[int, int]:
    """LSTRIP/RSTRIP bits llama.cpp sets per model, since GGUF does not carry them.

    This is llama.cpp's own name-based table (general.name / tokenizer.ggml.pre /
    general.architecture); kept here so partitioning matches it for those models."""
    name = str(metadata.get("general.name") or "").lower()
    pre = str(metadata.get(K.PRE) or "")
    arch = str(metadata.get("general.architecture") or "")
    t2i = vocab.token_to_id
    bits: dict[int, int] = {}

    def set_bit(tid: int | None, bit: int, on: bool) -> None:
        if tid is None:
            return
        bits[tid] = (bits.get(tid, 0) | bit) if on else (bits.get(tid, 0) & ~bit)

    if any(s in pre for s in ("jina-v2-de", "jina-v2-es", "jina-v2-code")) or any(
        s in arch for s in ("nomic-bert-moe", "jina-bert-v3")
    ):
        set_bit(t2i.get("<mask>"), TokenAttr.LSTRIP, True)
    elif "phi-3" in name or "phi3" in name:
        for tid in special_ids:
            set_bit(tid, TokenAttr.RSTRIP, True)
        set_bit(t2i.get("</s>"), TokenAttr.RSTRIP, True)
        for text in ("<unk>", "<s>", "<|endoftext|>"):
            set_bit(t2i.get(text), TokenAttr.RSTRIP, False)
    elif "modern-bert" in name:
        set_bit(t2i.get("[MASK]"), TokenAttr.LSTRIP, True)
    return bits


def partition(text: str, specials: "SpecialTokens", parse_special: bool,
              text_spans: Sequence[tuple[int, int]] = ()) -> list[Fragment]:
    """Split `text` into raw-text fragments and special token ids.

    `text_spans`: [start, end) character ranges of `text` that are plain text (a chat
    message's content): a CONTROL or UNKNOWN token whose match overlaps one is not
    recognized there, as if that text were tokenized with parse_special=False; USER_DEFINED
    tokens still are.  Matches outside the spans are found exactly as without them."""
    fragments: list[Fragment] = [text] if text else []
    guard = _SpanGuard(text_spans) if text_spans else None
    offsets: list[int] = [0]   # where each fragment starts in `text` (ids: unused); kept for the guard
    for tok in specials.candidates(text):
        if not (parse_special or tok.parse_always) or tok.text not in text:
            continue
        guarded = guard is not None and not tok.parse_always
        if guard is None and not (tok.lstrip or tok.rstrip):
            fragments = _split_plain(fragments, tok)
            continue
        out: list[Fragment] = []
        out_offsets: list[int] = []
        for frag, at in zip(fragments, offsets):
            if isinstance(frag, int) or tok.text not in frag:
                out.append(frag)
                out_offsets.append(at)
                continue
            start = search = 0
            while True:
                hit = frag.find(tok.text, search)
                if hit < 0:
                    break
                end = hit + len(tok.text)
                if guarded and guard.overlaps(at + hit, at + end):
                    search = hit + 1   # text here; a later match may still start inside it
                    continue
                left = frag[start:hit]
                if tok.lstrip:
                    left = left.rstrip(_C_SPACE)
                if left:
                    out.append(left)
                    out_offsets.append(at + start)
                out.append(tok.id)
                out_offsets.append(at + hit)
                start = search = end
                if tok.rstrip:
                    while start < len(frag) and frag[start] in _C_SPACE:
                        start += 1
                    search = start
            if start < len(frag):
                out.append(frag[start:])
                out_offsets.append(at + start)
        fragments, offsets = out, out_offsets
    return fragments


def _split_plain(fragments: list[Fragment], tok: SpecialToken) -> list[Fragment]:
    """`partition`'s step for a token that strips nothing, with no spans to guard: str.split finds
    the same matches as the search from left to right, at C speed."""
    out: list[Fragment] = []
    for frag in fragments:
        if isinstance(frag, int) or tok.text not in frag:
            out.append(frag)
            continue
        parts = frag.split(tok.text)
        for part in parts[:-1]:
            if part:
                out.append(part)
            out.append(tok.id)
        if parts[-1]:
            out.append(parts[-1])
    return out


class _SpanGuard:
    """Does [a, b) overlap any of the spans?  Spans are merged, so one bisect answers it."""

    def __init__(self, spans: Sequence[tuple[int, int]]):
        merged: list[list[int]] = []
        for a, b in sorted((int(a), int(b)) for a, b in spans if b > a):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        self.starts = [a for a, _ in merged]
        self.ends = [b for _, b in merged]

    def overlaps(self, a: int, b: int) -> bool:
        # the last span starting before b is the only candidate: merged spans' ends increase too
        i = bisect.bisect_left(self.starts, b) - 1
        return i >= 0 and self.ends[i] > a
