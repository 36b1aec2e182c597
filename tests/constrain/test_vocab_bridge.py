"""The token table llguidance masks over is our tokenizer's, byte for byte."""
from __future__ import annotations

import pytest

from localinfer.constrain import ll_tokenizer
from localinfer.constrain.vocab_bridge import SPECIAL_TOKEN_MARKER, is_special, token_bytes


def test_token_bytes_are_the_tokenizers_own(tokenizer):
    table = token_bytes(tokenizer)
    assert len(table) == tokenizer.n_vocab
    n_special = 0
    for i, b in enumerate(table):
        piece = tokenizer.token_to_bytes(i)
        if is_special(tokenizer, i):
            n_special += 1
            assert b == SPECIAL_TOKEN_MARKER + piece
        else:
            assert b == piece
    # the chat-template and end-of-generation tokens are among the special ones, plain text is not
    for t in tokenizer.eog_ids:
        assert is_special(tokenizer, t)
    assert 0 < n_special < tokenizer.n_vocab // 2
    text_ids = tokenizer.tokenize("Hello world, {\"a\": 1}", add_special=False)
    assert not any(is_special(tokenizer, t) for t in text_ids)


def test_llguidance_sees_the_same_vocabulary(tokenizer):
    ll = ll_tokenizer(tokenizer)
    assert ll is ll_tokenizer(tokenizer)  # built once per tokenizer
    assert ll.vocab_size == tokenizer.n_vocab
    assert set(ll.eos_tokens) == set(tokenizer.eog_ids)
    ids = tokenizer.tokenize("Grüße, 東京! {\"k\": [1, 2]}", add_special=False)
    assert ll.decode_bytes(ids) == b"".join(tokenizer.token_to_bytes(t) for t in ids)
    for t in tokenizer.eog_ids:
        assert ll.is_special_token(t)


def test_neither_the_bridge_nor_a_cached_grammar_keeps_a_tokenizer_alive(smollm2_metadata):
    """Both are cached per tokenizer; a closed model's vocabulary must still be freed."""
    import gc
    import weakref

    from localinfer.constrain import compile_grammar
    from localinfer.tokenizer import Tokenizer
    tok = Tokenizer.from_metadata(smollm2_metadata)
    grammar = compile_grammar(tok, regex="[a-z]+")
    ref = weakref.ref(tok)
    del tok
    gc.collect()
    assert ref() is None
    assert grammar.matcher().allowed().any()  # the grammar itself still works on its own
