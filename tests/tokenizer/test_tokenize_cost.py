"""What tokenizing costs on hostile input: one enormous word (4 MB of one letter, or of random
letters) must cost about what the same amount of English does, and memory linear in the text.

CPU time is compared with English tokenized in the same test (never against the clock); memory
is tracemalloc's peak above what the result itself holds. Before the merge loop moved to C,
4 MB of "a" took 12x the English text's CPU time and ~1.2 GB; before texts were taken in chunks
and long words in windows (words.py, merge_c.merge_long), ~13 bytes per byte of the text."""

from __future__ import annotations

import operator
import random
import time
import tracemalloc

import pytest

from localinfer.tokenizer import Tokenizer, TooManyTokensError
from localinfer.tokenizer.special import _NGRAM_CHUNK, text_ngrams

SIZE = 4_000_000
# CPU time of a pathological text over English of the same size (measured: at most ~1.5)
MAX_CPU_RATIO = 4
# Bytes of working memory per byte of text beyond the result. Measured: at most ~0.5.
MAX_BYTES_PER_BYTE = 2


def _cpu(fn):
    start = time.process_time()
    out = fn()
    return time.process_time() - start, out


def _extra_memory(fn) -> int:
    tracemalloc.start()
    try:
        out = fn()
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del out
    return peak - held


@pytest.mark.slow
@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
def test_an_enormous_word_costs_like_english(model, smollm2_metadata, gemma3_metadata, refdata_dir):
    book = refdata_dir / "pride_and_prejudice.txt"
    if not book.is_file():
        pytest.skip("no English text in the reference data")
    tok = Tokenizer.from_metadata(smollm2_metadata if model == "smollm2" else gemma3_metadata)
    tok.tokenize("warm up: the merge indexes and the special tokens' n-grams are built on first use " * 4)
    text = book.read_text(encoding="utf-8")
    english = (text * (SIZE // len(text) + 1))[:SIZE]
    baseline, _ = _cpu(lambda: tok.tokenize(english, add_special=False))
    extra = _extra_memory(lambda: tok.tokenize(english, add_special=False))
    assert extra <= MAX_BYTES_PER_BYTE * len(english), ("english", extra / len(english))

    rng = random.Random(0)
    for name, word in (("one letter", "a" * SIZE),
                       ("random letters", "".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=SIZE)))):
        spent, ids = _cpu(lambda: tok.tokenize(word, add_special=False))
        assert spent <= MAX_CPU_RATIO * baseline, (name, spent, baseline)
        assert len(ids) > SIZE // 16
        del ids
        extra = _extra_memory(lambda: tok.tokenize(word, add_special=False))
        assert extra <= MAX_BYTES_PER_BYTE * SIZE, (name, extra / SIZE)


@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
def test_fewest_tokens_is_a_lower_bound(model, smollm2_metadata, gemma3_metadata):
    """What lets a server refuse a prompt longer than its context before tokenizing it."""
    tok = Tokenizer.from_metadata(smollm2_metadata if model == "smollm2" else gemma3_metadata)
    rng = random.Random(1)
    texts = ["", "a", " " * 500, "\n" * 300, "a" * 5000, "ab" * 2000, "<|im_start|><start_of_turn>" * 50,
             "".join(rng.choice(["a", " ", "é", "你", "🍕", "\n", "<0x41>", "▁"]) for _ in range(3000)),
             "The quick brown fox jumps over the lazy dog. " * 100]
    for text in texts:
        n = len(tok.tokenize(text, add_special=False))
        assert tok.fewest_tokens(text) <= n, (text[:30], n)
        longer = text + "x" * 8100   # 100 tokens at least, whatever the vocabulary (<= 81 characters a token)
        with pytest.raises(TooManyTokensError):
            tok.tokenize(longer, max_tokens=tok.fewest_tokens(longer) - 1)
        assert tok.tokenize(longer, max_tokens=tok.fewest_tokens(longer)) == tok.tokenize(longer)
    assert tok.fewest_tokens("a" * 4_000_000) > 40_000


def test_long_text_ngrams_match_the_plain_definition():
    """text_ngrams goes chunk by chunk through numpy on long texts (the special-token filter
    runs it on every long prompt); pairs across chunk borders must not be lost."""
    rng = random.Random()
    alphabet = ["a", "b", "é", "你", "🍕", "\n", " ", "\x00"]
    for n in (_NGRAM_CHUNK - 1, _NGRAM_CHUNK, _NGRAM_CHUNK + 1, _NGRAM_CHUNK + 2, 3 * _NGRAM_CHUNK + 5):
        text = "".join(rng.choice(alphabet) for _ in range(n))
        assert text_ngrams(text) == set(text) | set(map(operator.add, text, text[1:])), n
    # a pair that only occurs across a chunk border
    text = "a" * _NGRAM_CHUNK + "b" + "a" * 10
    assert "ab" in text_ngrams(text) and "ba" in text_ngrams(text)
