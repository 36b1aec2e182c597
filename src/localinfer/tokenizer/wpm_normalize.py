"""WordPiece text -> words, as llama.cpp's `llm_tokenizer_wpm_session::preprocess` (src/llama-vocab.cpp):

  (strip_accents) each code point becomes the FIRST code point of its NFD;
  then per code point: whitespace ends a word; NUL, U+FFFD and category C (Cc Cf Co Cs, not Cn) are
  dropped; (strip_accents) category M is dropped; (lowercase) the simple lower-case mapping;
  punctuation (P), ASCII symbols (S below 0x7F) and CJK ideographs are words of their own.

Every step but the last is one code point to at most one, so `normalize` runs on a whole text (or on
pieces of it cut anywhere) with str methods and regexes, and `split_words` is one findall; the
per-code-point loop is `preprocess_ref`, their reference. An ASCII text takes small regexes; other
text takes character classes built once from the `regex` module's Unicode tables and compiled for
`re`, which matches large classes faster.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

import regex

# llama.cpp's whitespace: Unicode White_Space (unicode-data.cpp `unicode_set_whitespace`)
WHITESPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
# llm_tokenizer_wpm_session::is_chinese_char; its 0x2B920 (not 0x2B820) follows HF's Rust code
_CJK = ("\u4e00-\u9fff\u3400-\u4dbf\U00020000-\U0002a6df\U0002a700-\U0002b73f\U0002b740-\U0002b81f"
        "\U0002b920-\U0002ceaf\uf900-\ufaff\U0002f800-\U0002fa1f")
# a word of its own: punctuation, an ASCII symbol, a CJK ideograph (regex V1 set syntax)
ALONE = rf"\p{{P}}[[\x00-\x7e]&&\p{{S}}]{_CJK}"
# dropped: category C but Cn (llama.cpp's UNDEFINED flag is a separate one) and U+FFFD; the
# whitespace among the C characters is tested first in llama.cpp
DROP = r"[\p{Cc}\p{Cf}\p{Co}\p{Cs}\ufffd]--[\t\n\x0b\x0c\r\x85]"

# before whitespace: a text cut there has the same words (Tokenizer's and text_chunks' cut)
CUT = regex.compile(rf"(?=[{WHITESPACE}])")

# Python's str.lower() is the full mapping, with Final_Sigma in context; llama.cpp's is the simple
# one-to-one mapping. They differ on these two only (the tests check every code point).
_SIMPLE_LOWER = {0x130: 0x69, 0x3A3: 0x3C3}

_NFD_LIMIT = 0x2FA20   # no code point from here on has a canonical decomposition (the last: U+2FA1D)

# ASCII: the alone characters are exactly the printable non-alphanumerics, the word characters the
# alphanumerics (the control characters are gone by then)
_ASCII_PUNCT = re.escape("".join(chr(c) for c in range(0x21, 0x7F) if not chr(c).isalnum()))
_ASCII_SPLIT = re.compile(rf"[{_ASCII_PUNCT}]|[0-9A-Za-z]+")
_ASCII_DROP = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]+")
_ASCII_WORD_CHAR = "[0-9A-Za-z]"


@lru_cache(maxsize=1)
def nfd_first_table() -> dict[int, int]:
    """Code point -> the first code point of its NFD, where that differs (llama.cpp's
    `unicode_ranges_nfd`, generated as `unicodedata.normalize('NFD', c)[0]`)."""
    table = {}
    for cp in range(_NFD_LIMIT):
        if 0xD800 <= cp < 0xE000:
            continue
        first = unicodedata.normalize("NFD", chr(cp))[0]
        if first != chr(cp):
            table[cp] = ord(first)
    return table


def _as_re_class(cls: str) -> str:
    """The body of an `re` character class holding what the `regex` class `cls` matches."""
    every = "".join(map(chr, range(0x110000)))
    spans = [m.span() for m in regex.finditer(f"(?V1)[{cls}]+", every)]
    return "".join(re.escape(chr(a)) + (f"-{re.escape(chr(b - 1))}" if b - a > 1 else "") for a, b in spans)


@lru_cache(maxsize=1)
def _unicode_patterns() -> tuple[re.Pattern[str], dict[bool, "regex.Pattern[str]"]]:
    """(split, {strip_accents: drop}) for text beyond ASCII; built once, ~0.3 s."""
    alone = _as_re_class(ALONE)
    split = re.compile(f"[{alone}]|[^{alone}{WHITESPACE}]+")
    # the drop search is faster in `regex`: most text has none of them
    drop = {False: regex.compile(rf"(?V1)[{DROP}]+"), True: regex.compile(rf"(?V1)[[{DROP}]\p{{M}}]+")}
    return split, drop


def normalize(text: str, lowercase: bool, strip_accents: bool) -> str:
    """The code-point steps of llama.cpp's `preprocess`, on a whole text."""
    if text.isascii():
        if _ASCII_DROP.search(text):
            text = _ASCII_DROP.sub("", text)
        return text.lower() if lowercase else text
    if strip_accents and not unicodedata.is_normalized("NFD", text):
        text = text.translate(nfd_first_table())
    drop = _unicode_patterns()[1][strip_accents]
    if drop.search(text):
        text = drop.sub("", text)
    if lowercase:
        if "\u0130" in text or "\u03a3" in text:
            text = text.translate(_SIMPLE_LOWER)
        text = text.lower()
    return text


def split_words(text: str) -> list[str]:
    """A normalized text's words."""
    return (_ASCII_SPLIT if text.isascii() else _unicode_patterns()[0]).findall(text)


def word_spans(text: str):
    """`split_words`, as match objects (the words' positions, without copying them)."""
    return (_ASCII_SPLIT if text.isascii() else _unicode_patterns()[0]).finditer(text)


@lru_cache(maxsize=8)
def _long_word_pattern(n: int) -> re.Pattern[str]:
    # tried at word starts only (the look-behind), so a search is one pass over the text
    return re.compile(rf"(?<!{_ASCII_WORD_CHAR}){_ASCII_WORD_CHAR}{{{n}}}")


def has_long_ascii_word(text: str, n: int) -> bool:
    """Does the normalized ASCII `text` hold a word of more than `n` characters?"""
    return _long_word_pattern(n + 1).search(text) is not None


def preprocess_ref(text: str, lowercase: bool = True, strip_accents: bool = True) -> list[str]:
    """Readable reference for normalize + split_words: llama.cpp's loop, one code point at a time."""
    is_space = regex.compile(f"[{WHITESPACE}]").match
    is_alone = regex.compile(f"(?V1)[{ALONE}]").match
    is_dropped = regex.compile(f"(?V1)[{DROP}]").match
    is_mark = regex.compile(r"\p{M}").match
    words, word = [], ""
    for c in text:
        if strip_accents:
            c = unicodedata.normalize("NFD", c)[0]
        if is_space(c):
            words.append(word)
            word = ""
        elif is_dropped(c) or (strip_accents and is_mark(c)):
            continue
        else:
            low = chr(_SIMPLE_LOWER.get(ord(c), ord(c.lower()[0]))) if lowercase else c
            if is_alone(c):
                words += [word, low]
                word = ""
            else:
                word += low
    words.append(word)
    return [w for w in words if w]
