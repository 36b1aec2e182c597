"""Token ids back to text: llama.cpp's clean-up passes and a streaming decoder."""

from __future__ import annotations

import codecs
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .tokenizer import Tokenizer


def clean_up_spaces(data: bytes) -> bytes:
    """llama.cpp's `clean_spaces` passes (end of `llama_vocab::impl::detokenize`),
    done in place over the bytes exactly as there, quirks included:

    1. drop the space before ? ! . ,
    2. " ' " -> "'" (the following space is blanked to NUL first, and the loop
       skips it, as the C code does)
    3. drop the space before 's 'm 're 've
    """
    text = bytearray(data)

    # pass 1: " ?", " !", " .", " ,"
    n = len(text)
    total = 1 if n else 0
    for i in range(1, n):
        x = text[i]
        if text[i - 1] == 0x20 and x in b"?!.,":
            total -= 1
        text[total] = x
        total += 1

    # pass 2: strip a single apostrophe's surrounding spaces
    n = total
    total = 1 if n else 0
    i = 1
    while i < n:
        x = text[i]
        if x == 0x27 and i + 1 < n and text[i - 1] == 0x20 and text[i + 1] == 0x20:
            total -= 1
            i += 1
            text[i] = 0
        text[total] = x
        total += 1
        i += 1

    # pass 3: " 's", " 'm", " 're", " 've" lose their space
    n = total
    total = 1 if n else 0
    for i in range(1, n):
        x = text[i]
        if text[i - 1] == 0x20 and x == 0x27 and i + 1 < n:
            x1 = text[i + 1]
            if x1 in b"sm":
                total -= 1
            elif x1 not in b"td" and i + 2 < n:
                x2 = text[i + 2]
                if (x1, x2) in ((0x72, 0x65), (0x76, 0x65)):  # "re", "ve"
                    total -= 1
        text[total] = x
        total += 1
    return bytes(text[:total])


class StreamingDetokenizer:
    """Incremental detokenizer for generation: feed one token id at a time, get text.

    `feed` returns only complete UTF-8 text; the bytes of a character split across
    tokens (byte-level BPE pieces, SPM "<0xXX>" byte-fallback tokens) are held back
    until a later token completes them.  `flush` returns the remainder, invalid or
    incomplete bytes replaced by U+FFFD (or the incomplete ones dropped).

    By default this is llama.cpp's per-token `token_to_piece(lstrip=0)` streaming, as
    for generated tokens that continue a prompt: an SPM piece "▁Paris" comes out as
    " Paris".  With `strip_leading_space=True` the stream is taken to be a whole text
    from its start, and the first token loses one leading space when the vocab has
    add_space_prefix -- `Tokenizer.detokenize`'s rule.  The output then equals
    `detokenize(ids, render_special)` for vocabs without `clean_spaces` (SPM, and most
    BPE pre-tokenizers); that whole-text pass is never applied while streaming.
    """

    def __init__(self, tokenizer: "Tokenizer", render_special: bool = True,
                 strip_leading_space: bool = False):
        self.tokenizer = tokenizer
        self.render_special = render_special
        self._strip_first = strip_leading_space and tokenizer.vocab.add_space_prefix
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, token_id: int) -> str:
        data = self.tokenizer.token_to_bytes(token_id, render_special=self.render_special)
        if self._strip_first:
            # as in detokenize: only the first token, even when its piece is empty
            self._strip_first = False
            if data.startswith(b" "):
                data = data[1:]
        return self._decoder.decode(data, final=False)

    def flush(self, drop_incomplete: bool = False) -> str:
        """The text held back; drop_incomplete: bytes that only began a character (the stream
        stopped inside it) are dropped rather than shown as U+FFFD, as llama.cpp's server never
        sends them."""
        text = "" if drop_incomplete else self._decoder.decode(b"", final=True)
        self._decoder.reset()
        return text
