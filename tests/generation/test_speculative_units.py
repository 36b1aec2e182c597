"""Speculative decoding's parts without a model: the sampling step's distribution, prompt lookup,
the options, the vocabulary check, rolling a sliding-window cache back, the GEMV switch."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from localinfer.backend import kernels
from localinfer.kv.cache import RotatingKVCache
from localinfer.speculative import SpeculativeConfig, SpeculativeConfigError, VocabMismatchError, check_same_vocab
from localinfer.speculative.config import MAX_DRAFT
from localinfer.sampling.params import SamplingParams
from localinfer.speculative.decode import Speculator
from localinfer.speculative.proposers import LookupProposer
from localinfer.speculative.verify import accept_or_resample

N_SAMPLES = 40_000


def _chi2(counts: np.ndarray, p: np.ndarray) -> float:
    expected = p * counts.sum()
    live = expected > 0
    assert counts[~live].sum() == 0, "a token of probability 0 was drawn"
    return float((((counts - expected) ** 2)[live] / expected[live]).sum())


# chi-square with <= 7 degrees of freedom: P(X > 30) < 1e-4, so a right sampler fails this once in
# >10^4 seeds (the seeds are fixed); a wrong one lands in the thousands at N_SAMPLES draws.
CHI2_LIMIT = 30.0


def _speculative_counts(p, q, resample, seed):
    rng = np.random.default_rng(seed)
    counts = np.zeros(p.shape[0], np.int64)
    for x in rng.choice(p.shape[0], size=N_SAMPLES, p=q):
        counts[resample(p, int(x), q, rng)[0]] += 1
    return counts


def _broken_resample(p, x, q, rng):
    """The residual step left out (a rejected draft redrawn from p itself): biased towards q."""
    if rng.random() * q[x] < p[x]:
        return x, True
    return int(rng.choice(p.shape[0], p=p)), False


def test_accepted_and_resampled_tokens_follow_the_target_distribution():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(8))
    q = rng.dirichlet(np.ones(8) * 0.5)
    assert _chi2(_speculative_counts(p, q, accept_or_resample, 1), p) < CHI2_LIMIT
    assert _chi2(_speculative_counts(p, q, _broken_resample, 1), p) > 10 * CHI2_LIMIT  # the test can fail


def test_a_deterministic_draft_keeps_the_target_distribution():
    p = np.array([0.5, 0.3, 0.15, 0.05])
    rng = np.random.default_rng(2)
    counts = np.zeros(4, np.int64)
    for _ in range(N_SAMPLES):  # prompt lookup always proposes token 1 here (q one-hot)
        counts[accept_or_resample(p, 1, None, rng)[0]] += 1
    assert _chi2(counts, p) < CHI2_LIMIT


def test_speculator_choose_follows_the_samplers_transforms():
    """Through Speculator.choose: p is the distribution after top-k and temperature (token 5 of
    the logits is cut by top_k=5 and must never come out, even when drafted)."""
    logits = np.array([2.0, 1.5, 1.0, 0.5, 0.2, -3.0], np.float32)
    spec = Speculator(SpeculativeConfig(), SamplingParams(temperature=0.7, top_k=5, top_p=1.0, min_p=0.0, seed=3),
                      LookupProposer(2))
    p = spec.probs(logits)
    assert p[5] == 0 and abs(p.sum() - 1) < 1e-12
    q = np.full(6, 1 / 6)
    draws = np.random.default_rng(4).choice(6, size=N_SAMPLES // 2, p=q)
    counts = np.zeros(6, np.int64)
    for x in draws:
        counts[spec.choose(logits, int(x), q)[0]] += 1
    assert _chi2(counts, p) < CHI2_LIMIT


def test_greedy_choose_keeps_a_draft_only_when_it_is_the_argmax():
    spec = Speculator(SpeculativeConfig(), SamplingParams(temperature=0), LookupProposer(2))
    logits = np.array([0.0, 3.0, 1.0], np.float32)
    assert spec.choose(logits, 1, None) == (1, True)
    assert spec.choose(logits, 2, None) == (1, False)
    assert spec.choose(logits, None, None) == (1, False)
    assert spec.accepted == 1


def test_prompt_lookup_continues_the_longest_earlier_ngram():
    look = LookupProposer(3)
    assert look.propose([1, 2, 3, 4, 9, 7, 2, 3, 5, 6, 1, 2, 3], 3)[0] == [4, 9, 7]  # 3-gram 1 2 3 beats 2 3 -> 5
    assert look.propose([5, 6, 7, 8], 4)[0] == []  # nothing repeats
    assert look.propose([4, 4], 3)[0] == [4]
    assert look.propose([1, 2, 1], 0)[0] == []


@pytest.mark.parametrize("bad", [dict(draft_max=0), dict(draft_max=MAX_DRAFT + 1), dict(draft_min=9, draft_max=8),
                                 dict(draft_p_min=1.5), dict(lookup_ngram=-1), dict(draft_max=2.5)])
def test_options_out_of_range_are_refused(bad):
    with pytest.raises(SpeculativeConfigError):
        SpeculativeConfig(**bad)


def _tok(tokens):
    return SimpleNamespace(n_vocab=len(tokens), vocab=SimpleNamespace(tokens=list(tokens)))


def test_vocabularies_must_match_in_size_and_text():
    check_same_vocab(_tok("abc"), _tok("abc"))
    with pytest.raises(VocabMismatchError, match="3 tokens"):
        check_same_vocab(_tok("abcd"), _tok("abc"))
    with pytest.raises(VocabMismatchError, match="token 1 is 'x'"):
        check_same_vocab(_tok("abc"), _tok("axc"))


def test_sliding_window_cache_rolls_back_the_longest_draft_after_wrapping():
    """A ring already wrapped around takes MAX_DRAFT + 1 rows of a verification and gives them all
    back: the keys the next token sees are those of a cache that never saw them."""
    window, dim = 8, 4
    spec = RotatingKVCache(1, 1000, 1, dim, window, np.float32)
    plain = RotatingKVCache(1, 1000, 1, dim, window, np.float32)
    rng = np.random.default_rng(5)
    for cache in (spec, plain):
        for pos in range(150):  # past the ring's window + 64 slots
            kv = np.full((1, 1, dim), pos, np.float32)
            cache.update_and_fetch(0, kv, kv)
            cache.advance(1)
    draft = rng.standard_normal((MAX_DRAFT + 1, 1, dim)).astype(np.float32)
    spec.update_and_fetch(0, draft, draft)
    spec.advance(MAX_DRAFT + 1)
    assert spec.can_trim_to(150)
    spec.trim(150)
    nxt = np.full((1, 1, dim), 150, np.float32)
    k_spec, _ = spec.update_and_fetch(0, nxt, nxt)
    k_plain, _ = plain.update_and_fetch(0, nxt, nxt)
    np.testing.assert_array_equal(k_spec, k_plain)
    assert k_spec[:, 0, 0].tolist() == list(range(150 - window + 1, 151))


@pytest.mark.skipif(not kernels.available(), reason="the C kernels are not built")
@pytest.mark.parametrize("qtype", ["Q4_0", "F16"])  # F16: the multi-row F16 GEMV (vec_dot_f16_mact), odd k tail
def test_gemv_rows_gives_each_row_a_one_row_matmuls_bits(qtype):
    from gguf import GGMLQuantizationType as T
    from localinfer.quant.quantizers import quantize
    qt = T[qtype]
    k = 256 if qtype == "Q4_0" else 200
    rng = np.random.default_rng(6)
    w = quantize(rng.standard_normal((64, k)).astype(np.float32), qt)
    x = rng.standard_normal((11, k)).astype(np.float32)
    one_by_one = np.concatenate([kernels.matmul(w, qt, x[i:i + 1]) for i in range(11)])
    with kernels.gemv_rows(11):
        np.testing.assert_array_equal(kernels.matmul(w, qt, x), one_by_one)
    for m in (2, 3, 5):  # the default GEMV of a few rows too
        np.testing.assert_array_equal(kernels.matmul(w, qt, x[:m]), one_by_one[:m])
    with pytest.raises(ValueError, match="gemv_rows"):
        with kernels.gemv_rows(0):
            pass
