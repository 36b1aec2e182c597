"""SentencePiece-style tokenizer (llama.cpp LLAMA_VOCAB_TYPE_SPM, `tokenizer.ggml.model == "llama"`).

llama.cpp does not run SentencePiece itself; it re-implements the BPE flavour of it
from the GGUF vocab (`llm_tokenizer_spm_session` in src/llama-vocab.cpp):

  raw-text fragment (special tokens already cut out) -> " " becomes U+2581 "▁"
  -> one symbol per Unicode code point -> repeatedly join the adjacent pair whose
  concatenation is a vocab token with the highest *score* (leftmost on ties)
  -> each final symbol is a token, or else its UTF-8 bytes as "<0xXX>" tokens.

Notes on the llama.cpp version (checked against its reference output):

* Any token text can be formed by a merge, whatever its type (CONTROL, BYTE,
  UNUSED ...): llama.cpp looks candidates up in the full text -> id map.
* Its "resegment" step maps a symbol that is not a token back through the
  merges that built it.  Every merged symbol *is* a token (a pair is only
  queued when its concatenation is one), so only single code points ever miss;
  they go straight to byte fallback, which is all we implement.
* The byte token for byte b is "<0xXX>" (upper-case hex, llama_vocab::byte_to_token);
  a character that needs a missing byte token is an error, as in llama.cpp.
* Merging runs over the whole fragment at once.  We cut the fragment into words
  before each "▁" that no vocab token can span (`_cut_pattern`), which gives the
  same result and lets each word's ids be cached.
"""

from __future__ import annotations

import re
from typing import Mapping, Sequence

import numpy as np

from . import merge_c
from .words import WordEncoder, heap_merge

SPACE = "\u2581"   # "▁", SentencePiece's visible space


def escape_whitespace(text: str) -> str:
    """llama.cpp `llama_escape_whitespace`: only U+0020 is replaced."""
    return text.replace(" ", SPACE)


def unescape_piece(text: str) -> bytes:
    """NORMAL token text -> bytes (llama.cpp `llama_unescape_whitespace`)."""
    return text.replace(SPACE, " ").encode("utf-8")


def spm_merge_ref(text: str, token_to_id: Mapping[str, int], scores: Sequence[float]) -> list[str]:
    """Readable reference: join the adjacent pair that forms the highest-scoring token,
    leftmost on ties, until no adjacent pair forms a token."""
    parts = list(text)
    while len(parts) > 1:
        best_score, best_i = None, -1
        for i in range(len(parts) - 1):
            tid = token_to_id.get(parts[i] + parts[i + 1])
            if tid is not None and (best_score is None or scores[tid] > best_score):
                best_score, best_i = scores[tid], i
        if best_score is None:
            break
        parts[best_i:best_i + 2] = [parts[best_i] + parts[best_i + 1]]
    return parts


def spm_merge(text: str, token_to_id: Mapping[str, int], scores: Sequence[float]) -> list[str]:
    """Same result as `spm_merge_ref` in O(n log n): the shared heap merge (words.heap_merge) keyed
    by the joined piece's -score, as llama.cpp's `llm_bigram_spm` work queue."""
    get = token_to_id.get

    def priority(a: str, b: str) -> float | None:
        tid = get(a + b)
        return None if tid is None else -scores[tid]

    return heap_merge(text, priority)


def byte_token_ids(token_to_id: Mapping[str, int]) -> list[int | None]:
    """byte -> its "<0xXX>" token id (None when the vocab lacks it).

    llama.cpp `byte_to_token` would also accept a one-character token chr(b), but
    only single code points reach byte fallback, and one that is a one-byte (ASCII)
    string was already looked up whole -- so that second chance never finds anything."""
    return [token_to_id.get(f"<0x{b:02X}>") for b in range(256)]


def _glued(tokens: Sequence[str]) -> set[str]:
    """The characters c for which some token holds c + "▁" (for gemma-3 only ">▁</" has one)."""
    # One regex pass over all texts joined by NUL.  The joints add NUL (before a token that starts
    # with "▁"); an extra entry only removes cuts.
    return set(re.findall(f"([^{SPACE}]){SPACE}", "\0".join(tokens)))


_CUT = "\0"   # marks the cuts in `SpmEncoder.words`' fast path, in texts that do not hold it


def _cut_pattern(glued: set[str], space: str) -> re.Pattern[str]:
    """Where a fragment can be cut without changing the merge result.

    A cut at position p is safe when no vocab token equals text[i:j] with i < p < j:
    then no pair across p is ever queued and the merges on either side run
    independently of each other.  We cut before a "▁" (written `space`: " " before the
    escape) whose left neighbour c is not a space and no token contains c + "▁", so
    words look like "▁▁word"."""
    blocked = "".join(re.escape(c) for c in sorted({SPACE, space} | glued))
    return re.compile(f"(?<=[^{blocked}])(?={re.escape(space)})")


class SpmEncoder(WordEncoder):
    """Encodes raw-text fragments (no special tokens inside) into token ids.

    `encode_fragments(space_prefix=True)` adds llama.cpp's space prefix (`add_space_prefix`).
    Words go through the C merge loop (merge_c.py) when the kernels are built, else through
    `spm_merge`; both give `spm_merge_ref`'s symbols."""

    def __init__(self, tokens: Sequence[str], token_to_id: Mapping[str, int], scores: Sequence[float]):
        if len(scores) < len(tokens):
            raise ValueError(f"SPM vocabulary has {len(scores)} scores for {len(tokens)} tokens")
        super().__init__()
        self.tokens = tokens
        self.token_to_id = token_to_id
        self.scores = scores
        self._byte_ids = byte_token_ids(token_to_id)
        glued = _glued(tokens)
        self._split = _cut_pattern(glued, SPACE).split
        self._blocked = frozenset(glued | {SPACE})
        # a text holding none of these is cut before every "▁"; a vocabulary with many is checked
        # word by word instead
        self._glue_pairs = tuple(c + SPACE for c in self._blocked) if len(self._blocked) <= 8 else None
        self.chunk_cut = _cut_pattern(glued, " ")

    def words(self, chunk: str) -> list[str]:
        """The escaped chunk cut as `_cut_pattern` says (the same words as its split, faster)."""
        chunk = escape_whitespace(chunk)
        if SPACE not in chunk:
            return [chunk]
        if self._glue_pairs is not None and _CUT not in chunk and not any(map(chunk.__contains__, self._glue_pairs)):
            # every "▁" starts a word (the usual case): cut before each of them at C speed
            words = chunk.replace(SPACE, _CUT + SPACE).split(_CUT)
            if not words[0]:
                del words[0]
            return words
        parts = chunk.split(SPACE)
        words, word, blocked = [], parts[0], self._blocked
        for part in parts[1:]:
            if word and word[-1] not in blocked:
                words.append(word)
                word = SPACE + part
            else:
                word += SPACE + part
        words.append(word)
        return words

    def encode_word(self, word: str) -> Sequence[int]:
        """Merge one already-escaped piece of text and map its symbols to ids."""
        if merge_c.available():
            ids: list[int] = []
            data = word.encode("utf-8")
            self.emit(data, *self.merger.merge(data), ids)
            return ids
        return self.merge_word_py(word)

    def merge_word_py(self, word: str) -> tuple[int, ...]:
        get = self.token_to_id.get
        ids: list[int] = []
        for symbol in spm_merge(word, self.token_to_id, self.scores):
            tid = get(symbol)
            if tid is not None:
                ids.append(tid)
            else:   # a single code point outside the vocab: byte fallback
                ids.extend(self._byte_fallback(symbol))
        return tuple(ids)

    def make_merger(self) -> merge_c.TextMerger:
        return merge_c.TextMerger(self.tokens, self.scores)

    @staticmethod
    def symbol_ids(sym: np.ndarray) -> np.ndarray | None:
        return sym if sym.min(initial=0) >= 0 else None

    def emit(self, data: bytes, sym: np.ndarray, span: np.ndarray, out: list[int]) -> None:
        """Appends the ids of the final symbols `sym` (byte lengths `span`) of `data`."""
        if sym.min(initial=0) >= 0:
            out.extend(sym.tolist())
            return
        # Byte fallback, per byte of the code points outside the vocab: one id slot per byte,
        # holding a symbol's id at its first byte or a byte token, -1 where nothing goes.
        starts = np.zeros(len(sym), np.int64)
        np.cumsum(span[:-1], out=starts[1:])
        per_byte = np.full(len(data), -1, np.int64)
        known = sym >= 0
        per_byte[starts[known]] = sym[known]
        fallback = np.repeat(~known, span)
        raw = np.frombuffer(data, np.uint8)
        byte_ids = np.array([-1 if t is None else t for t in self._byte_ids], np.int64)
        spelled = byte_ids[raw[fallback]]
        if spelled.min(initial=0) < 0:
            at = int(np.flatnonzero(fallback)[np.argmax(spelled < 0)])
            first = int(starts[np.searchsorted(starts, at, side="right") - 1])
            n = int(span[np.searchsorted(starts, at, side="right") - 1])
            self._byte_fallback(bytes(data[first:first + n]).decode("utf-8"))   # raises, naming it
        per_byte[fallback] = spelled
        out.extend(per_byte[per_byte >= 0].tolist())

    def _byte_fallback(self, symbol: str) -> list[int]:
        out = []
        for b in symbol.encode("utf-8"):
            tid = self._byte_ids[b]
            if tid is None:
                raise ValueError(
                    f"cannot tokenize {symbol!r}: it is not in the SPM vocabulary and the "
                    f"vocabulary has no byte token <0x{b:02X}> to spell it with")
            out.append(tid)
        return out
