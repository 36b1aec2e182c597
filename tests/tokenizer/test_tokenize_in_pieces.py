"""Tokenizing in pieces gives what tokenizing whole gives: a long word merged in windows
(merge_c.merge_long), a fragment cut into chunks (pretokenize.text_chunks), words looked up and
merged in batches (words.WordEncoder). Each is exact by an argument (see their docstrings); these
tests hold them to it with pieces small enough that every text is cut many times."""

from __future__ import annotations

import random

import numpy as np
import pytest

from localinfer.tokenizer import Tokenizer, merge_c
from localinfer.tokenizer.bpe import BYTE_TO_UNICODE, parse_merges
from localinfer.tokenizer.pretokenize import CHUNK_CUT, PRE_TOKENIZERS, PreTokenizer, text_chunks
from localinfer.tokenizer.spm import escape_whitespace
from localinfer.tokenizer.words import WordEncoder

needs_c = pytest.mark.skipif(not merge_c.available(), reason="the C kernels are not built")

# letters, digits, marks, every kind of whitespace the patterns tell apart, punctuation, CJK, emoji
ALPHABET = list("aeiounrstlhdcmAE0123456789  \t\n\r\n\u00a0\u3000.,;!?'\"-()<>/▁") + [
    "é", "\u0301", "你", "好", "🍕", "Ж", "'s", "'re", "\n\n", "  ", "ⅷ", "٣"]


def _texts(rng: random.Random, n: int, max_len: int) -> list[str]:
    out = []
    for _ in range(n):
        alphabet = rng.sample(ALPHABET, rng.randint(1, len(ALPHABET)))
        out.append("".join(rng.choice(alphabet) for _ in range(rng.randint(0, max_len))))
    return out


@pytest.mark.parametrize("family", sorted({spec.family: name for name, spec in PRE_TOKENIZERS.items()}.values()))
def test_chunk_cuts_split_into_the_words_of_the_whole(family):
    pre = PreTokenizer(PRE_TOKENIZERS[family].regexes)
    rng = random.Random()
    for text in _texts(rng, 400, 120):
        size = rng.randint(1, 12)
        chunks = list(text_chunks(text, CHUNK_CUT, size))
        assert "".join(chunks) == text
        assert [w for c in chunks for w in pre.split(c)] == pre.split(text), (family, size, text)


def test_a_text_without_cuts_is_not_copied():
    text = "x" * 1000
    assert [c is text for c in text_chunks(text, CHUNK_CUT, 10)] == [True]


def _runs(merger, word: str, window: int, overlap: int):
    sym, span, data = zip(*merger.merge_long(word, window=window, overlap=overlap))
    assert b"".join(data) == word.encode("utf-8")
    return np.concatenate(sym), np.concatenate(span)


@needs_c
@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
def test_a_long_word_merged_in_windows_is_merged_as_whole(model, smollm2_metadata, gemma3_metadata):
    if model == "smollm2":
        merger = merge_c.PairMerger(parse_merges(smollm2_metadata["tokenizer.ggml.merges"]), BYTE_TO_UNICODE)
    else:
        merger = merge_c.TextMerger(gemma3_metadata["tokenizer.ggml.tokens"], gemma3_metadata["tokenizer.ggml.scores"])
    rng = random.Random()
    joined = 0
    for word in _texts(rng, 120, 3000) + ["a" * 5000, "ab" * 2000, "▁" * 3001, "你好" * 900]:
        word = word.replace(" ", "▁") if model == "gemma3" else word
        whole = merger.merge(word.encode("utf-8"))
        window = rng.randint(16, 600)
        try:
            sym, span = _runs(merger, word, window, rng.randint(4, window // 2))
        except merge_c.NoJoin:
            continue
        joined += 1
        assert np.array_equal(sym, whole[0]) and np.array_equal(span, whole[1]), (window, word[:60])
    assert joined > 100   # windows this small still join nearly always


@needs_c
@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
def test_windows_that_share_no_symbol_fall_back_to_the_whole_word(model, smollm2_metadata, gemma3_metadata,
                                                                   monkeypatch):
    """When two windows share no symbol, merge_long raises NoJoin, maybe after runs were taken:
    they are taken back and the word is merged whole."""
    tok = Tokenizer.from_metadata(smollm2_metadata if model == "smollm2" else gemma3_metadata)
    word = "abcdefghij" * 3000
    expected = tok.tokenize(word, add_special=False)
    merge_long = merge_c._Merger.merge_long

    def gives_up(self, *args, **kwargs):
        yield next(merge_long(self, *args, **kwargs))
        raise merge_c.NoJoin

    monkeypatch.setattr(merge_c._Merger, "merge_long", gives_up)
    assert tok.tokenize(word, add_special=False) == expected


@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
def test_tokenizing_in_small_pieces_changes_nothing(model, smollm2_metadata, gemma3_metadata, refdata_dir,
                                                     monkeypatch):
    metadata = smollm2_metadata if model == "smollm2" else gemma3_metadata
    rng = random.Random()
    texts = _texts(rng, 60, 400) + ["a" * 3000 + " b", "x" * 700, "<start_of_turn>user\nhi  there<end_of_turn>\n" * 30]
    book = refdata_dir / "pride_and_prejudice.txt"
    if book.is_file():
        texts.append(book.read_text(encoding="utf-8")[:60_000])
    whole = Tokenizer.from_metadata(metadata)
    expected = [whole.tokenize(t) for t in texts]
    from localinfer.tokenizer import pretokenize, words
    monkeypatch.setattr(words, "CHUNK", 7)
    monkeypatch.setattr(pretokenize, "CHUNK", 7)
    monkeypatch.setattr(WordEncoder, "LONG", 50)
    monkeypatch.setattr(WordEncoder, "BATCH", 5)
    monkeypatch.setattr(WordEncoder, "CACHE_LIMIT", 8)
    monkeypatch.setattr(merge_c, "WINDOW", 200)
    monkeypatch.setattr(merge_c, "OVERLAP", 40)
    pieces = Tokenizer.from_metadata(metadata)
    for text, ids in zip(texts, expected):
        assert pieces.tokenize(text) == ids, repr(text[:80])


def test_spm_words_are_the_cut_patterns_split(gemma3_metadata):
    enc = Tokenizer.from_metadata(gemma3_metadata)._encoder
    rng = random.Random()
    extra = ["a > </ b", "x>  </y", "  ", " a", "a ", ">", "a b c", " a b ", "a\0 b", "\0", "a \0b", "a  b"]
    for text in _texts(rng, 300, 80) + extra:   # with and without the pairs that turn the fast path off
        assert enc.words(text) == enc._split(escape_whitespace(text)), repr(text)
