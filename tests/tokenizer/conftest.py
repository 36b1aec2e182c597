"""The tokenizer tests run the C merges on every text, short ones included: outside these tests a
short text's first words are merged in Python until the C merger is built (WordEncoder.PY_MERGE_MAX),
and test_tokenizer.py checks that both give the same ids."""
from __future__ import annotations

import pytest

from localinfer.tokenizer.words import WordEncoder


@pytest.fixture(autouse=True)
def _c_merges_from_the_first_word(monkeypatch):
    monkeypatch.setattr(WordEncoder, "PY_MERGE_MAX", 0)
