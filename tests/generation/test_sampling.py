import numpy as np
import pytest

from localinfer.sampling.samplers import (apply_min_p, apply_penalties, apply_top_k, apply_top_p, kth_largest,
                                 make_logits_processors, make_sampler)


def _logits(seed=0, n=1000):
    return np.random.default_rng(seed).normal(size=n).astype(np.float32) * 3


def test_greedy_is_argmax():
    x = _logits()
    assert make_sampler(temperature=0)(x) == int(np.argmax(x))
    assert make_sampler(temperature=-1)(x) == int(np.argmax(x))


def test_top_k_keeps_k():
    x = _logits()
    kept = np.isfinite(apply_top_k(x, 5))
    assert kept.sum() == 5
    assert set(np.flatnonzero(kept)) == set(np.argsort(-x)[:5])
    assert np.isfinite(apply_top_k(x, 0)).all()


@pytest.mark.parametrize("shape", ["normal", "ties", "ascending", "descending", "one_slice_high"])
def test_kth_largest_is_the_partitions_answer(shape):
    """The bound from the slices' maxima never drops a top-k value: logits in random order, with
    many ties, sorted either way (one slice then holds every large value), and a vocabulary of
    128k with its top in one slice."""
    rng = np.random.default_rng(1)
    for n in (1, 7, 64, 640, 5000, 128256):
        x = {"normal": lambda: rng.normal(size=n) * 3, "ties": lambda: rng.integers(-3, 3, n),
             "ascending": lambda: np.sort(rng.normal(size=n)), "descending": lambda: -np.sort(rng.normal(size=n)),
             "one_slice_high": lambda: np.where(np.arange(n) < n // 50, 10.0, 0.0) + rng.normal(size=n)}[shape]()
        x = x.astype(np.float32)
        for k in {1, 2, 40, 64, n} & set(range(1, n + 1)):
            assert kth_largest(x, k) == np.partition(x, -k)[-k], (n, k)


def test_top_p_keeps_smallest_set_reaching_p():
    x = np.log(np.array([0.5, 0.3, 0.15, 0.05], dtype=np.float32))
    assert np.isfinite(apply_top_p(x, 0.7)).tolist() == [True, True, False, False]
    assert np.isfinite(apply_top_p(x, 0.8)).tolist() == [True, True, False, False]
    assert np.isfinite(apply_top_p(x, 0.81)).tolist() == [True, True, True, False]
    assert np.isfinite(apply_top_p(x, 0.01)).tolist() == [True, False, False, False]


def test_min_p_relative_to_top():
    x = np.log(np.array([0.5, 0.3, 0.04, 0.16], dtype=np.float32))
    assert np.isfinite(apply_min_p(x, 0.1)).tolist() == [True, True, False, True]


def test_same_seed_same_tokens_and_different_seed_differs():
    x = _logits(1)
    a = [make_sampler(1.0, 0, 1.0, 0.0, seed=7)(x) for _ in range(1)]
    s1, s2 = make_sampler(1.0, 0, 1.0, 0.0, seed=7), make_sampler(1.0, 0, 1.0, 0.0, seed=7)
    seq1 = [s1(x) for _ in range(50)]
    seq2 = [s2(x) for _ in range(50)]
    assert seq1 == seq2 and seq1[0] == a[0]
    s3 = make_sampler(1.0, 0, 1.0, 0.0, seed=8)
    assert [s3(x) for _ in range(50)] != seq1


def test_sampling_follows_the_distribution():
    p = np.array([0.6, 0.3, 0.1])
    s = make_sampler(1.0, 0, 1.0, 0.0, seed=0)
    draws = np.bincount([s(np.log(p).astype(np.float32)) for _ in range(4000)], minlength=3) / 4000
    np.testing.assert_allclose(draws, p, atol=0.03)


def test_top_k_one_is_greedy_at_any_temperature():
    x = _logits(2)
    s = make_sampler(5.0, 1, 1.0, 0.0, seed=0)
    assert all(s(x) == int(np.argmax(x)) for _ in range(20))


def test_repeat_penalty_like_llama_cpp():
    x = np.array([2.0, -2.0, 1.0, 0.5], dtype=np.float32)
    out = apply_penalties([0, 1, 1], x, repeat_penalty=2.0, presence_penalty=0.0, frequency_penalty=0.0)
    np.testing.assert_allclose(out, [1.0, -4.0, 1.0, 0.5])
    out = apply_penalties([0, 1, 1], x, 1.0, presence_penalty=0.5, frequency_penalty=0.25)
    np.testing.assert_allclose(out, [2.0 - 0.25 - 0.5, -2.0 - 0.5 - 0.5, 1.0, 0.5])


def test_processors_only_look_at_recent_tokens():
    (p,) = make_logits_processors(repeat_penalty=2.0, repeat_last_n=2)
    x = np.array([2.0, 2.0, 2.0], dtype=np.float32)
    np.testing.assert_allclose(p([0, 1, 2], x), [2.0, 1.0, 1.0])
    assert make_logits_processors() == []
    with pytest.raises(ValueError):
        make_logits_processors(repeat_penalty=0)


def test_the_draw_is_the_full_vocabulary_chain():
    """make_sampler works on top-k's survivors only; it draws what the chain of apply_* steps over
    the whole vocabulary (dropped tokens at -inf) draws, seed for seed, ties at the k-th included."""
    from localinfer.sampling.samplers import _probs, apply_min_p, apply_top_k, apply_top_p
    rng = np.random.default_rng(11)
    for case in range(40):
        logits = (rng.standard_normal(5000) * 3).astype(np.float32)
        logits[rng.integers(0, 5000, 30)] = logits.max() - 0.5  # a run of ties near the top
        top_k = [0, 1, 40, 100][case % 4]
        sampler = make_sampler(temperature=0.7, top_k=top_k, top_p=0.9, min_p=0.02, seed=case)
        ref_rng = np.random.default_rng(case)
        for _ in range(5):
            x = apply_min_p(apply_top_p(apply_top_k(logits, top_k), 0.9), 0.02)
            probs = _probs(x / 0.7)
            assert sampler(logits) == int(ref_rng.choice(probs.shape[0], p=probs))


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_non_finite_logits_are_refused_not_sampled(temperature):
    """NaN logits were token 0 when greedy (argmax picks the first NaN) and numpy's "zero-size
    array" error otherwise; +inf and all -inf leave nothing to draw from either."""
    from localinfer.sampling.samplers import NonFiniteLogitsError
    sample = make_sampler(temperature=temperature, seed=0)
    for bad, says in ((np.nan, "non-finite logits"), (np.inf, "non-finite logits")):
        x = _logits()
        x[7] = bad
        with pytest.raises(NonFiniteLogitsError, match=says):
            sample(x)
    with pytest.raises(NonFiniteLogitsError, match="every logit is -inf"):
        sample(np.full(10, -np.inf, np.float32))
    x = _logits()
    x[:-1] = -np.inf  # bans leave one token: it is the one drawn
    assert sample(x) == len(x) - 1


def test_the_sampling_defaults_are_written_once():
    """SamplingParams holds llama.cpp's defaults; the library call, the sampler, the server's
    request parsing and the command line show the same ones."""
    import inspect

    from click.testing import CliRunner

    from localinfer.cli.main import main
    from localinfer.model import Model
    from localinfer.sampling.params import SamplingParams
    from localinfer.serve.api import sampling_params

    d = SamplingParams()
    assert (d.temperature, d.top_k, d.top_p, d.min_p, d.repeat_penalty) == (0.8, 40, 0.95, 0.05, 1.0)
    stream = inspect.signature(Model.stream).parameters
    sampler = inspect.signature(make_sampler).parameters
    for name in ("temperature", "top_k", "top_p", "min_p", "seed"):
        assert stream[name].default == sampler[name].default == getattr(d, name)
    assert sampling_params({}) == d
    run_help = CliRunner().invoke(main, ["run", "--help"]).output
    assert "default: 0.95" in run_help and "default: 0.05" in run_help
