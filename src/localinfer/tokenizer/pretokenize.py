"""Pre-tokenizers for byte-level BPE vocabularies, selected by `tokenizer.ggml.pre`.

A pre-tokenizer cuts text into "words" before BPE runs on each word. llama.cpp
(`llm_tokenizer_bpe` in src/llama-vocab.cpp) keeps, per pre-tokenizer type, a
*list* of regexes applied in sequence: regex k+1 runs on each piece produced
by regex k, and the text between two matches is kept as a piece of its own
(`unicode_regex_split_stl` in src/unicode.cpp).  We reproduce that with the
`regex` module:

* llama.cpp's character classes come from a table generated with the Python
  `regex` module itself (scripts/gen-unicode-data.py: `\\p{L}`, `\\p{N}`, ...,
  and `\\s` = Unicode White_Space), so `\\p{..}` and `\\s` here mean exactly
  what they mean there (modulo the Unicode version).
* For regexes without a hand-written matcher llama.cpp runs std::regex on a
  "collapsed" text where each non-ASCII code point becomes one byte standing
  for its category.  That is equivalent to the `regex` classes as long as a
  pattern only uses `\\p{L|N|P|S|M}`, `\\s`, and ASCII literals -- true for
  every pattern in this file (none uses `\\d`, `\\w` or `\\b`, whose std::regex
  meaning is ASCII-only).
* The GPT-2 pattern is matched in llama.cpp by a hand-written matcher
  (`unicode_regex_split_custom_gpt2`) that also ends in a `\\s+` fallback the
  pattern text lacks; we append `|\\s+` to mirror it.  The llama3 matcher is
  equivalent to its pattern as written.

Only the pattern families below are implemented; every name llama.cpp maps to
one of them is accepted, anything else is a clear error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

import regex

# 's|'t|... | ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)  -- plus the `\s+`
# fallback of llama.cpp's custom matcher (see module docstring).
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"

# llama.cpp rewrites the HF `(?i:'s|...)` group with explicit [sS] classes.
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"

_LLAMA3 = (
    _CONTRACTIONS
    + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

_QWEN2 = (
    _CONTRACTIONS
    + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@dataclass(frozen=True)
class PreTokenizerSpec:
    """One llama.cpp pre-tokenizer type (LLAMA_VOCAB_PRE_TYPE_*) and its vocab flags."""

    family: str                   # name of the regex family, for messages
    regexes: tuple[str, ...]      # applied in sequence
    ignore_merges: bool = False   # a word that is itself a token skips BPE (llama3)
    add_bos: bool = False         # default for tokenizer.ggml.add_bos_token
    clean_spaces: bool = True     # llama.cpp `clean_spaces` used by detokenize


_FAMILIES: dict[str, tuple[str, ...]] = {
    "default": (r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"),
    "gpt2": (_GPT2,),
    "starcoder": (r"\p{N}", _GPT2),          # digits split one by one first
    "llama3": (_LLAMA3,),
    "qwen2": (_QWEN2,),
    "falcon": (r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, r"[0-9][0-9][0-9]"),
}


def _spec(family: str, **flags: bool) -> PreTokenizerSpec:
    return PreTokenizerSpec(family=family, regexes=_FAMILIES[family], **flags)


# tokenizer.ggml.pre -> spec, as llama_vocab::impl::load maps them
# (names and flags checked against llama.cpp src/llama-vocab.cpp).
PRE_TOKENIZERS: dict[str, PreTokenizerSpec] = {
    "default": _spec("default"),
    # LLAMA_VOCAB_PRE_TYPE_LLAMA3: ignore_merges and add_bos default on
    **{name: _spec("llama3", ignore_merges=True, add_bos=True) for name in (
        "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
        "midm-2.0", "lfm2", "jina-v5-nano")},
    # DBRX / SMAUG use the llama3 regex without the llama3 flags
    "dbrx": _spec("llama3"),
    "smaug-bpe": _spec("llama3"),
    # LLAMA_VOCAB_PRE_TYPE_GPT2 (+ MPT, OLMO, JAIS, TRILLION, GRANITE_DOCLING share the regex)
    **{name: _spec("gpt2") for name in (
        "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
        "a.x-4.0", "mellum", "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe",
        "exaone4", "mpt", "olmo", "jais")},
    "trillion": _spec("gpt2", clean_spaces=False),
    "granite-docling": _spec("gpt2", clean_spaces=False),
    # STARCODER, REFACT, COMMAND_R, SMOLLM, CODESHELL, EXAONE, MINERVA, MELLUM2
    **{name: _spec("starcoder") for name in (
        "starcoder", "refact", "codeshell", "exaone", "minerva-7b", "mellum2")},
    "command-r": _spec("starcoder", clean_spaces=False),
    "smollm": _spec("starcoder", clean_spaces=False),
    # QWEN2, STABLELM2, HUNYUAN, SOLAR_OPEN
    **{name: _spec("qwen2", clean_spaces=False) for name in (
        "qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "hunyuan", "solar-open")},
    "stablelm2": _spec("qwen2"),
    "megrez": _spec("qwen2"),
    "falcon": _spec("falcon"),
}


def resolve_pre_tokenizer(name: str | None) -> PreTokenizerSpec:
    """The spec for `tokenizer.ggml.pre`; a missing/empty name means "default" (as in llama.cpp)."""
    if not name:
        # llama.cpp warns "missing pre-tokenizer type, using: 'default'" and carries on.
        return PRE_TOKENIZERS["default"]
    spec = PRE_TOKENIZERS.get(name)
    if spec is None:
        known = ", ".join(sorted(PRE_TOKENIZERS))
        raise ValueError(
            f"unsupported BPE pre-tokenizer tokenizer.ggml.pre={name!r}; known pre-tokenizers: {known}"
        )
    return spec


class PreTokenizer:
    """Splits text into words with a sequence of regexes (llama.cpp `unicode_regex_split`)."""

    def __init__(self, patterns: Iterable[str]):
        self.patterns = tuple(patterns)
        self._compiled = [regex.compile(p) for p in self.patterns]

    def split(self, text: str) -> list[str]:
        pieces = [text] if text else []
        for rx in self._compiled:
            out: list[str] = []
            for piece in pieces:
                if not rx.groups:
                    # The usual case, at C speed: the matches cover the piece (the patterns match
                    # every character somehow), so there are no gaps to keep between them.
                    found = rx.findall(piece)
                    if sum(map(len, found)) == len(piece):
                        out.extend(filter(None, found))
                        continue
                pos = 0
                for m in rx.finditer(piece):
                    start, end = m.span()
                    if end == start:
                        continue  # none of our patterns can match empty; be safe anyway
                    if start > pos:
                        out.append(piece[pos:start])  # unmatched gap is a piece too
                    out.append(piece[start:end])
                    pos = end
                if pos < len(piece):
                    out.append(piece[pos:])
            pieces = out
        return pieces


# Where a text can be cut into chunks that every family above splits into the same words as the whole
# text: no match of any of their patterns runs across these places, and no pattern looks behind, so the
# words on either side are found independently.
#  - after a letter, before a non-letter (and the same for digits): `\p{L}+` / `\p{N}+` / `\p{N}{1,3}`
#    runs end there, and what follows starts a match of its own (a letter run may take one character
#    before it, never one after it);
#  - after a non-whitespace character, before a whitespace other than CR/LF: no pattern has whitespace
#    after a non-whitespace character but llama3's `[\r\n]*` tail;
#  - after one LF between two non-whitespace characters: that LF is one word or ends one, whatever follows.
CHUNK_CUT = regex.compile(r"(?<=\p{L})(?=\P{L})|(?<=\p{N})(?=\P{N})|(?<=\S)(?=[^\S\r\n])|(?<=\S\n)(?=\S)")
CHUNK = 1 << 16


def text_chunks(text: str, cut: "regex.Pattern | None" = CHUNK_CUT, size: int = CHUNK) -> Iterator[str]:
    """`text` in pieces of about `size` characters, cut at the first place `cut` matches after that
    many: a text tokenized piece by piece costs memory for one piece at a time. Where there is no
    such place in the next `size` characters, the rest is one piece (the whole text is not copied):
    a text without them is one long word, which the merges take in windows."""
    start, n = 0, len(text)
    while cut is not None and n - start > size:
        m = cut.search(text, start + size, start + 2 * size)
        if m is None:
            break
        yield text[start:m.start()]
        start = m.start()
    yield text[start:] if start else text
