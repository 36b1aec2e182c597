"""WordPiece tokenizer (llama.cpp LLAMA_VOCAB_TYPE_WPM, `tokenizer.ggml.model == "bert"`).

llama.cpp's `llm_tokenizer_wpm_session` (src/llama-vocab.cpp) on one raw-text fragment:

  normalized words (lower case, accents stripped, punctuation and CJK split off: wpm_normalize.py)
  -> each word, as "▁" + word, is cut greedily into the longest vocabulary tokens from the left;
     a position where no token starts makes the whole word one [UNK].

The GGUF vocabulary carries BERT's pieces in llama.cpp's convention (its converter, BertModel.set_vocab):
a word-start piece "foo" is written "▁foo" and a continuation "##foo" is written "foo"; CONTROL tokens
([CLS], [SEP], ...) are kept as they are. Matching looks at every token whatever its type, as
llama.cpp's `text_to_token` does.

Where llama.cpp differs from Hugging Face's BertNormalizer + BertPreTokenizer + WordPiece (we follow
llama.cpp; tests/tokenizer/test_wpm.py checks each against llama-tokenize when one is there):
- its NFD keeps only the first code point of a decomposition: a Hangul syllable becomes its leading
  consonant (HF: the full jamo sequence);
- it drops all marks (Mn, Mc, Me) when stripping accents; HF only Mn;
- \\v, \\f and U+0085 end a word (they are White_Space); HF deletes them as control characters,
  joining the words on either side; unassigned code points (Cn) stay, HF deletes them;
- a word of more than 100 characters is tokenized like any other (HF: [UNK], max_input_chars_per_word);
- lower-casing is one code point to one (İ -> i; HF lowercases after NFD, which gives the same
  whenever accents are stripped).
The Unicode tables are Python's `unicodedata` (NFD, lower case) and the `regex` module (categories),
llama.cpp's are generated from the UCD of its day: code points assigned since may differ.
"""

from __future__ import annotations

import bisect
import operator
import re
from itertools import accumulate, chain, compress, repeat
from typing import Iterable, Mapping, Sequence

from .pretokenize import CHUNK, text_chunks
from .spm import SPACE
from .wpm_normalize import CUT, has_long_ascii_word, normalize, split_words, word_spans


def wpm_word_ref(word: str, token_to_id: Mapping[str, int], max_len: int) -> list[int] | None:
    """llama.cpp's greedy match of one word: from each position, the longest token (at most `max_len`
    characters) that starts there, on "▁" + word; None when some position starts no token."""
    text = SPACE + word
    n, i, ids = len(text), 0, []
    while i < n:
        for j in range(min(n, i + max_len), i, -1):
            tid = token_to_id.get(text[i:j])
            if tid is not None:
                ids.append(tid)
                i = j
                break
        else:
            return None
    return ids


def prefix_bounds(tokens: Iterable[str], depth: int = 3) -> dict[str, int]:
    """Every token's prefixes of 1..depth characters -> the length of the longest token with that
    prefix. Where text[i:i+k] is not among them, no token longer than k-1 starts at i."""
    ordered = sorted((t for t in tokens if t), key=len)   # the longest token of a prefix comes last and wins
    return {t[:k]: len(t) for t in ordered for k in range(1, min(depth, len(t)) + 1)}


def wpm_word(word: str, token_to_id: Mapping[str, int], bounds: Mapping[str, int]) -> list[int] | None:
    """`wpm_word_ref`, faster: at each position the lengths tried start at the longest token that
    shares the text's first three characters there (`prefix_bounds`), not at the vocabulary's longest."""
    text = SPACE + word
    n, i, ids = len(text), 0, []
    get, bound = token_to_id.get, bounds.get
    while i < n:
        longest = 0
        for k in range(1, min(4, n - i + 1)):
            b = bound(text[i:i + k])
            if b is None:
                longest = min(longest, k - 1)
                break
            longest = b
        for j in range(min(n, i + longest), i, -1):
            tid = get(text[i:j])
            if tid is not None:
                ids.append(tid)
                i = j
                break
        else:
            return None
    return ids


def trie_pattern(tokens: Iterable[str]) -> str:
    """A regex that matches the longest of `tokens` starting at a position: the tokens as a trie of
    nested groups, optional below each node that is itself a token. Each node's branches start with
    different characters, so the greedy groups back off only to the deepest token on the path."""
    root: dict = {}
    for t in tokens:
        node = root
        for c in t:
            node = node.setdefault(c, {})
        node[""] = {}

    def body(node: dict) -> str:
        alts = []
        for c, child in sorted(node.items()):
            if not c:
                continue
            # a chain of single, non-token nodes is one literal (fewer nested groups)
            lit = c
            while len(child) == 1 and "" not in child:
                (c2, child), = child.items()
                lit += c2
            below = [k for k in child if k]
            if not below:
                alts.append(re.escape(lit))
            else:
                alts.append(re.escape(lit) + "(?:" + body(child) + ")" + ("?" if "" in child else ""))
        return "|".join(alts)

    return "(?:" + body(root) + ")"


class TrieMatcher:
    """Greedy longest-token matching at C speed (the `re` engine). The pattern is the trie or else any
    one character, so a findall covers a word without gaps; a piece that is not a token marks a
    position where no token starts (the trie would have matched a one-character token)."""

    # Deeper tries (tokens of more characters, counted as nested groups) are left to Python:
    # `re` recurses once per nested group while it compiles.
    MAX_DEPTH = 200
    WINDOW = 1 << 12        # characters of a long word matched per findall: memory for its pieces only

    def __init__(self, tokens: Sequence[str], token_to_id: Mapping[str, int]):
        self.token_to_id = token_to_id
        self.max_len = max(map(len, tokens), default=1)
        self._pattern = re.compile("(?s)" + trie_pattern(t for t in tokens if t) + "|.")

    def word_ids(self, text: str, out: list[int], start: int = 0, end: int | None = None) -> bool:
        """Appends the ids of "▁" + text[start:end] to `out`; False (and nothing appended) when some
        position there starts no token."""
        end = len(text) if end is None else end
        get, mark = self.token_to_id.get, len(out)
        first = self._pattern.match(SPACE + text[start:min(end, start + self.max_len)])
        new = [get(first.group())]
        pos = start + first.end() - 1          # the first token holds "▁" and first.end() - 1 characters
        while True:
            if None in new:
                del out[mark:]
                return False
            out += new
            if pos >= end:
                return True
            stop = min(end, pos + self.WINDOW + self.max_len)
            pieces = self._pattern.findall(text, pos, stop)
            if stop < end:
                # keep the pieces that start in the first WINDOW characters: each of them had all the
                # characters it could take (max_len) before `stop`
                ends = list(accumulate(map(len, pieces), initial=pos))
                keep = bisect.bisect_left(ends, pos + self.WINDOW, hi=len(pieces))   # starts before it
                pieces, pos = pieces[:keep], ends[keep]
            else:
                pos = end
            new = list(map(get, pieces))


class WpmEncoder:
    """Encodes raw-text fragments (no special tokens inside) into token ids, per llama.cpp's WPM.

    Words are looked up in a cache of short words' ids; the others are matched by `wpm_word`, or by the
    compiled trie (`TrieMatcher`) once there is one. Building it costs about 30 us per token (0.8 s
    for 30k tokens, 4.6 s for 120k), once per process:
    - a word longer than `LONG` builds it at once: Python would cost up to max_len lookups per piece
      of an arbitrarily long word. In an ASCII text such a word is matched where it lies, in windows,
      without a copy of it;
    - words of `MEDIUM` characters or more are matched in Python until they have cost about what the
      build does (`TRIE_AFTER` characters per token, at ~1-2 us each), then by the trie, three to five times
      faster on them: so at most twice the better of the two (the ski-rental argument). On shorter
      words the trie is no faster -- its per-word calls cost what the lookups do -- and a short
      prompt never waits for it."""

    CACHE_LIMIT = 1 << 16
    CACHE_MAX_WORD = 64
    MEDIUM = 24
    TRIE_AFTER = 32
    LONG = 1024
    chunk_cut = CUT

    def __init__(self, tokens: Sequence[str], token_to_id: Mapping[str, int], unk_id: int,
                 lowercase: bool, strip_accents: bool):
        self.tokens = tokens
        self.token_to_id = token_to_id
        self.unk_id = unk_id
        self.lowercase = lowercase
        self.strip_accents = strip_accents
        self.max_len = max(map(len, tokens), default=1)
        self._cache: dict[str, tuple[int, ...]] = {}
        self._bounds: dict[str, int] | None = None
        self._trie: TrieMatcher | None = None
        self._py_left = self.TRIE_AFTER * len(tokens)   # characters of MEDIUM words left to match in Python

    # ---- FragmentEncoder ------------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        self.encode_fragments([text], out)
        return out

    def encode_fragments(self, fragments: Iterable[str | int], out: list[int], space_prefix: bool = False) -> None:
        """Appends the ids of the fragments (raw text, or a special token's id) to `out`. llama.cpp's
        WPM adds no space prefix: `space_prefix` is ignored."""
        for frag in fragments:
            if isinstance(frag, int):
                out.append(frag)
                continue
            for chunk in ((frag,) if len(frag) <= CHUNK else text_chunks(frag, CUT, CHUNK)):
                text = normalize(chunk, self.lowercase, self.strip_accents)
                if len(text) > self.LONG and text.isascii() and has_long_ascii_word(text, self.LONG):
                    self._encode_in_place(text, out)
                    continue
                words = split_words(text)
                if len(text) > self.LONG and max(map(len, words), default=0) > self.LONG:
                    self._encode_long_words(words, out)
                else:
                    self._encode_words(words, out)

    # ---- words -> ids ---------------------------------------------------------------------------

    def _encode_words(self, words: list[str], out: list[int]) -> None:
        cache = self._cache
        found = list(map(cache.get, words))
        if None in found:
            missing = dict.fromkeys(compress(words, map(operator.is_, found, repeat(None))))
            if len(cache) + len(missing) > self.CACHE_LIMIT:
                cache.clear()
            cache.update(zip(missing, map(self.word_ids, missing)))
            found = list(map(cache.get, words))
            for w in missing:
                if len(w) > self.CACHE_MAX_WORD:   # rare enough to recompute, and would pin memory
                    del cache[w]
        out.extend(chain.from_iterable(found))

    def _encode_long_words(self, words: list[str], out: list[int]) -> None:
        start = 0
        for i, n in enumerate(map(len, words)):
            if n > self.LONG:
                self._encode_words(words[start:i], out)
                self._encode_long(words[i], 0, n, out)
                start = i + 1
        self._encode_words(words[start:], out)

    def _encode_in_place(self, text: str, out: list[int]) -> None:
        """A normalized chunk with words longer than LONG: those are matched where they lie."""
        words: list[str] = []
        for m in word_spans(text):
            start, end = m.span()
            if end - start <= self.LONG:
                words.append(m.group())
                continue
            self._encode_words(words, out)
            words = []
            self._encode_long(text, start, end, out)
        self._encode_words(words, out)

    def _encode_long(self, text: str, start: int, end: int, out: list[int]) -> None:
        trie = self._trie or (self._build_trie() if self.max_len <= TrieMatcher.MAX_DEPTH else None)
        if trie is None:
            ids = wpm_word_ref(text[start:end], self.token_to_id, self.max_len)
            out += [self.unk_id] if ids is None else ids
        elif not trie.word_ids(text, out, start, end):
            out.append(self.unk_id)

    def word_ids(self, word: str) -> tuple[int, ...]:
        """One normalized word's ids (up to LONG characters): its greedy pieces, or (unk,) when it has none."""
        if len(word) >= self.MEDIUM:
            trie = self._trie
            if trie is None and self._py_left < 0 and self.max_len <= TrieMatcher.MAX_DEPTH:
                trie = self._build_trie()
            if trie is not None:
                out: list[int] = []
                return tuple(out) if trie.word_ids(word, out) else (self.unk_id,)
            self._py_left -= len(word)
        bounds = self._bounds
        if bounds is None:    # built whole before it is published: another thread may tokenize meanwhile
            bounds = self._bounds = prefix_bounds(self.tokens)
        ids = wpm_word(word, self.token_to_id, bounds)
        return (self.unk_id,) if ids is None else tuple(ids)

    def _build_trie(self) -> TrieMatcher:
        trie = self._trie = TrieMatcher(self.tokens, self.token_to_id)   # published whole: threads may share it
        return trie
