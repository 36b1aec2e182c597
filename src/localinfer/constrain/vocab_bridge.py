"""Our tokenizer as llguidance sees it: one byte string per token id, built from OUR vocabulary.

llguidance computes token masks over a trie of token bytes, so the bytes must be exactly what
each token adds to the text when it is generated: `Tokenizer.token_to_bytes` (byte-level BPE
pieces decoded from their GPT-2 characters, SentencePiece pieces with "▁" as a space and
"<0xAB>" byte-fallback tokens as the byte). Both vocab kinds go through that one function, so
the mask and the detokenizer can never disagree about what a token means.

Control tokens (and UNKNOWN, and user-defined tokens written like "<...>", as llama.cpp's
llguidance bridge does) get the 0xFF prefix llguidance reserves for special tokens: a grammar
then never spells text with them, and "<|im_end|>" inside a JSON string is written with text
tokens. The end-of-generation tokens are llguidance's EOS set: allowed exactly where the
grammar may end.

Building the table walks the whole vocabulary (about 1 s for gemma3's 262k tokens), so it is
done once per Tokenizer and kept for as long as the tokenizer lives.
"""
from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING

import llguidance

from ..tokenizer.vocab import TokenAttr

if TYPE_CHECKING:  # pragma: no cover
    from ..tokenizer import Tokenizer

SPECIAL_TOKEN_MARKER = b"\xff"  # llguidance TokTrie::SPECIAL_TOKEN_MARKER (never valid UTF-8)

_HIDDEN = int(TokenAttr.CONTROL | TokenAttr.UNKNOWN)
_USER_DEFINED = int(TokenAttr.USER_DEFINED)

_cache: "weakref.WeakKeyDictionary[Tokenizer, llguidance.LLTokenizer]" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def is_special(tokenizer: "Tokenizer", token_id: int) -> bool:
    """Whether llguidance sees this token as special (never part of a grammar's text)."""
    attr = tokenizer.vocab.attrs[token_id]
    if attr & _HIDDEN:
        return True
    if attr & _USER_DEFINED:
        piece = tokenizer.token_to_bytes(token_id)
        return piece.startswith(b"<") and piece.endswith(b">")
    return False


def token_bytes(tokenizer: "Tokenizer") -> list[bytes]:
    """id -> the bytes llguidance gets: the token's text bytes, 0xFF-prefixed when special."""
    out = []
    for i in range(tokenizer.n_vocab):
        piece = tokenizer.token_to_bytes(i)
        out.append(SPECIAL_TOKEN_MARKER + piece if is_special(tokenizer, i) else piece)
    return out


class _Wrapped:
    """The duck type llguidance.TokenizerWrapper reads (eos/bos ids, token bytes, encode)."""

    def __init__(self, tokenizer: "Tokenizer"):
        eog = sorted(tokenizer.eog_ids)
        self.eos_token_id = tokenizer.eos_id if tokenizer.eos_id is not None else (eog[0] if eog else 0)
        self.bos_token_id = tokenizer.bos_id
        self.tokens = token_bytes(tokenizer)
        self.special_token_ids: list[int] = []  # marked by the 0xFF prefix instead
        self._tokenizer = weakref.ref(tokenizer)

    def __call__(self, text) -> list[int]:
        # llguidance tokenizes fragments of grammar text (forced bytes) with this: plain text,
        # no BOS, control-token text stays text -- as llama.cpp's bridge calls llama_tokenize
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8", errors="replace")
        tokenizer = self._tokenizer()
        if tokenizer is None:
            raise RuntimeError("the tokenizer behind this grammar is gone")
        return tokenizer.tokenize(text, add_special=False, parse_special=False)


def ll_tokenizer(tokenizer: "Tokenizer") -> llguidance.LLTokenizer:
    """The llguidance tokenizer for `tokenizer`, built on first use and cached with it."""
    with _lock:  # one build per tokenizer even when several requests arrive at once
        ll = _cache.get(tokenizer)
        if ll is None:
            eog = sorted(tokenizer.eog_ids) or ([tokenizer.eos_id] if tokenizer.eos_id is not None else [])
            ll = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Wrapped(tokenizer)), eos_token=eog)
            _cache[tokenizer] = ll
        return ll
