"""The two real vocabularies the constrained-decoding tests run on: SmolLM2 (byte-level BPE, 49k
tokens) and gemma3 (SentencePiece with byte fallback, 262k tokens)."""
from __future__ import annotations

import pytest

from localinfer.tokenizer import Tokenizer


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_metadata):
    return Tokenizer.from_metadata(smollm2_metadata)


@pytest.fixture(scope="session")
def gemma3_tokenizer(gemma3_metadata):
    return Tokenizer.from_metadata(gemma3_metadata)


@pytest.fixture(params=["smollm2", "gemma3"])
def tokenizer(request):
    return request.getfixturevalue(f"{request.param}_tokenizer")
