"""The C merge loop (csrc/core/merge.c, tokenizer/merge_c.py) against the Python oracles, on fresh
random words: the real vocabularies and tiny random ones whose ranks break the usual order (a
merge's result paired at a lower rank than the merge, equal SPM scores), through both of its
queues (one heap; lists per rank, forced with rank_queue_from=0)."""

from __future__ import annotations

import random

import pytest

from localinfer.tokenizer import Tokenizer, merge_c
from localinfer.tokenizer.bpe import BYTE_TO_UNICODE, bpe_merge, bpe_merge_ref, byte_encode, parse_merges
from localinfer.tokenizer.spm import spm_merge, spm_merge_ref

pytestmark = pytest.mark.skipif(not merge_c.available(), reason="the C kernels are not built")

ALPHABET = list("aeiounrstlhdcm    ▁▁>/<.,'\n") + ["é", "你", "好", "🍕", "\ua66e", "Ж", "\x00"]


def _words(rng: random.Random, alphabet, n: int, max_len: int) -> list[str]:
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, max_len))) for _ in range(n)]


def _bpe_c(merger: merge_c.PairMerger, word: str) -> list[str]:
    sym, _ = merger.merge(word.encode("utf-8"))
    return [merger.symbol_texts[s] for s in sym.tolist()]


def _spm_c(merger: merge_c.TextMerger, tokens, word: str) -> list[str]:
    sym, span = merger.merge(word.encode("utf-8"))
    data, at, out = word.encode("utf-8"), 0, []
    for s, n in zip(sym.tolist(), span.tolist()):
        text = data[at:at + n].decode("utf-8")
        assert s == -1 or tokens[s] == text
        out.append(text)
        at += n
    return out


@pytest.fixture(params=["heap", "lists"])
def queue_from(request) -> int | None:
    return 0 if request.param == "lists" else 1 << 40


# ---- the real vocabularies ----------------------------------------------------------------


def test_bpe_matches_the_oracles_on_smollm2(smollm2_metadata, queue_from):
    ranks = parse_merges(smollm2_metadata["tokenizer.ggml.merges"])
    merger = merge_c.PairMerger(ranks, BYTE_TO_UNICODE)
    merger.rank_queue_from = queue_from
    rng = random.Random()
    for word in _words(rng, ALPHABET, 600, 40):
        assert _bpe_c(merger, word) == bpe_merge_ref(byte_encode(word), ranks), repr(word)
    for word in _words(rng, ALPHABET[:14], 4, 20_000) + ["a" * 10_001, "ab" * 5_000]:
        assert _bpe_c(merger, word) == bpe_merge(byte_encode(word), ranks), word[:40]


def test_spm_matches_the_oracles_on_gemma3(gemma3_metadata, queue_from):
    tok = Tokenizer.from_metadata(gemma3_metadata)
    tokens, t2i, scores = tok.vocab.tokens, tok.vocab.token_to_id, tok._encoder.scores
    merger = merge_c.TextMerger(tokens, scores)
    merger.rank_queue_from = queue_from
    rng = random.Random()
    for word in _words(rng, ALPHABET, 600, 40):
        assert _spm_c(merger, tokens, word) == spm_merge_ref(word, t2i, scores), repr(word)
    for word in _words(rng, ALPHABET[:14], 4, 20_000) + ["a" * 10_001, "▁" * 9_999]:
        assert _spm_c(merger, tokens, word) == spm_merge(word, t2i, scores), word[:40]


# ---- tiny random vocabularies: any rank order, ties ---------------------------------------


def _random_merges(rng: random.Random, n: int) -> dict[tuple[str, str], int]:
    """Merges of existing symbols in random rank order: results often pair at lower ranks."""
    symbols, pairs = list("abc"), []
    while len(pairs) < n:
        pair = (rng.choice(symbols), rng.choice(symbols))
        if pair not in pairs:
            pairs.append(pair)
            symbols.append(pair[0] + pair[1])
    order = rng.sample(range(n), n)
    return {pair: order[i] for i, pair in enumerate(pairs)}


def test_bpe_any_rank_order(queue_from):
    rng = random.Random()
    for _ in range(40):
        ranks = _random_merges(rng, rng.randint(1, 30))
        merger = merge_c.PairMerger(ranks, BYTE_TO_UNICODE)
        merger.rank_queue_from = queue_from
        for word in _words(rng, "abc", 30, 60):
            assert _bpe_c(merger, word) == bpe_merge_ref(word, ranks), (ranks, word)


def test_spm_any_scores_with_ties(queue_from):
    rng = random.Random()
    for _ in range(40):
        texts = {"".join(rng.choice("ab▁") for _ in range(rng.randint(1, 5))) for _ in range(rng.randint(1, 40))}
        tokens = sorted(texts)
        scores = [float(rng.randint(-3, 3)) for _ in tokens]   # few values: many ties
        t2i = {t: i for i, t in enumerate(tokens)}
        merger = merge_c.TextMerger(tokens, scores)
        merger.rank_queue_from = queue_from
        for word in _words(rng, "ab▁c", 30, 60):
            assert _spm_c(merger, tokens, word) == spm_merge_ref(word, t2i, scores), (tokens, scores, word)


# ---- whole tokenizers: the C path and the Python path agree ------------------------------


@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
def test_tokenize_is_the_same_without_the_kernels(model, smollm2_metadata, gemma3_metadata, monkeypatch):
    metadata = smollm2_metadata if model == "smollm2" else gemma3_metadata
    rng = random.Random()
    texts = ["".join(rng.choice(ALPHABET + [" the", " of", "ing", "123"]) for _ in range(rng.randint(0, 200)))
             for _ in range(150)]
    texts += ["a" * 3000, "x" * 70, "\ua66e" * 50]
    fast = Tokenizer.from_metadata(metadata)
    with_c = [fast.tokenize(t) for t in texts]
    monkeypatch.setattr(merge_c, "available", lambda: False)
    slow = Tokenizer.from_metadata(metadata)
    for text, ids in zip(texts, with_c):
        assert slow.tokenize(text) == ids, repr(text)


def test_bad_arguments_are_refused_in_c():
    merger = merge_c.PairMerger({("a", "b"): 0}, BYTE_TO_UNICODE)
    sym, span = merger.merge(b"")
    assert len(sym) == 0 and len(span) == 0
    merger._vocab.pair_left = merge_c._ffi.NULL
    with pytest.raises(ValueError, match="merge_word"):
        merger.merge(b"ab")
