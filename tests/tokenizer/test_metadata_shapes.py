"""Tokenizer metadata of the wrong shape or kind: one ValueError naming the key, at load, instead
of a vocabulary of single characters or an SPM tokenizer that fails on the first space."""
from __future__ import annotations

import pytest

from localinfer.tokenizer import Tokenizer

GPT2_SPACE = "\u0120"  # byte-level BPE's space


def _bpe(**overrides) -> dict:
    """A GPT-2 style vocabulary: printable ASCII and the byte-level space, no scores."""
    md = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2",
          "tokenizer.ggml.tokens": [chr(c) for c in range(33, 127)] + [GPT2_SPACE, GPT2_SPACE + "a"],
          "tokenizer.ggml.merges": [f"{GPT2_SPACE} a"]}
    md.update(overrides)
    return md


def test_the_vocabulary_tokenizes():
    tok = Tokenizer.from_metadata(_bpe())
    assert tok.detokenize(tok.tokenize("a a")) == "a a"


@pytest.mark.parametrize("key, value", [
    ("tokenizer.ggml.tokens", "abc"),  # was a vocabulary of three one-character tokens
    ("tokenizer.ggml.token_type", 1),
    ("tokenizer.ggml.merges", "a b"),
    ("tokenizer.ggml.scores", "0.5"),
])
def test_an_array_given_as_a_scalar_names_the_key(key, value):
    with pytest.raises(ValueError) as e:
        Tokenizer.from_metadata(_bpe(**{key: value}))
    assert str(e.value).startswith(f"{key} must be an array, got {type(value).__name__}")


def test_sentencepiece_over_a_bpe_vocabulary_names_the_key():
    """Was a load that worked and a ValueError about '\u2581' on the first text with a space."""
    with pytest.raises(ValueError) as e:
        Tokenizer.from_metadata(_bpe(**{"tokenizer.ggml.model": "llama"}))
    message = str(e.value)
    assert message.startswith("tokenizer.ggml.model = 'llama' (SentencePiece) does not fit this vocabulary")
    assert "tokenizer.ggml.scores" in message and "'gpt2'" in message and "\n" not in message
