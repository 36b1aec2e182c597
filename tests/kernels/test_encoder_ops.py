"""The encoders' ops (backend/ops_reference.py, ops.py): GELU on the C path is the reference bit for
bit; the reference's LayerNorm and bidirectional attention against a float64 computation written
plainly; the C LayerNorm and attention against the reference, within bounds taken from the arithmetic."""
from __future__ import annotations

import numpy as np
import pytest

from localinfer.backend import kernels
from localinfer.backend import ops_reference

needs_c = pytest.mark.skipif(not kernels.available(), reason="C kernels not built")


@needs_c
@pytest.mark.parametrize("isa", kernels.supported_isas() if kernels.available() else [])
@pytest.mark.parametrize("shape", [(1, 1), (7, 33), (3, 5, 97), (700, 1536), (0, 8)])  # (700, 1536): two C calls
def test_gelu_is_the_reference_bit_for_bit(isa, shape):
    from localinfer.backend import ops
    rng = np.random.default_rng(sum(shape))
    x = (rng.normal(size=shape) * 6).astype(np.float32)
    extremes = np.float32([10.0, 9.999, -10.0, -9.999, 1e4, -1e4, 0.0, -0.0, np.inf, -np.inf, np.nan])
    x.reshape(-1)[:min(x.size, extremes.size)] = extremes[:x.size]
    with kernels._isa(isa):
        np.testing.assert_array_equal(ops.gelu(x), ops_reference.gelu(x))


def test_gelu_is_ggml_s_tanh_form_within_f16_rounding():
    x = np.linspace(-12, 12, 10001, dtype=np.float32)
    exact = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x.astype(np.float64) ** 3)))
    # an input rounded to f16 (relative 2^-11) and a result rounded to f16: within ~1e-3 relative of |x|
    assert np.all(np.abs(ops_reference.gelu(x) - exact) <= 1e-3 * np.maximum(np.abs(x), 1e-2))


def test_layer_norm_matches_float64():
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(9, 384)) * 3 + 5).astype(np.float32)
    w, b = rng.normal(size=384).astype(np.float32), rng.normal(size=384).astype(np.float32)
    x64 = x.astype(np.float64)
    want = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-12) * w + b
    np.testing.assert_allclose(ops_reference.layer_norm(x, w, b, 1e-12), want, rtol=0, atol=1e-5 * np.abs(want).max())
    np.testing.assert_allclose(ops_reference.layer_norm(x, w, None, 1e-12), want - b, rtol=0, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("alibi,n_swa", [(False, 0), (True, 0), (False, 5), (False, 4)])
def test_encoder_attention_matches_a_plain_loop(alibi, n_swa):
    """Every query of text b sees keys 0..lengths[b]-1 and nothing else, with -slope*|i-j| under ALiBi;
    with a sliding window only the keys |i - j| <= n_swa // 2 of them (5 and 4: both halve to 2)."""
    rng = np.random.default_rng(1)
    n_batch, n_len, n_head, dim = 3, 11, 4, 16
    q, k, v = (rng.normal(size=(n_batch, n_len, n_head, dim)).astype(np.float32) for _ in range(3))
    lengths = np.array([11, 4, 1])
    slopes = np.array([0.5, 0.25, 0.125, 0.0625], np.float32) if alibi else None
    got = ops_reference.encoder_attention(q, k, v, lengths, 0.25, slopes, n_swa)
    for b, n in enumerate(lengths):
        for h in range(n_head):
            for i in range(n):
                s = q[b, i, h].astype(np.float64) @ k[b, :n, h].T.astype(np.float64) * 0.25
                if alibi:
                    s -= slopes[h] * np.abs(i - np.arange(n))
                if n_swa:
                    s[np.abs(i - np.arange(n)) > n_swa // 2] = -np.inf
                p = np.exp(s - s.max())
                want = (p / p.sum()) @ v[b, :n, h]
                np.testing.assert_allclose(got[b, i, h], want, rtol=0, atol=1e-5)
    # padding keys change nothing: the same texts with other values past their lengths
    k2, v2 = k.copy(), v.copy()
    k2[1, 4:], v2[1, 4:], k2[2, 1:], v2[2, 1:] = 99.0, -99.0, 7.0, 7.0
    again = ops_reference.encoder_attention(q, k2, v2, lengths, 0.25, slopes, n_swa)
    np.testing.assert_array_equal(again[1, :4], got[1, :4])
    np.testing.assert_array_equal(again[2, :1], got[2, :1])


def test_encoder_attention_in_query_blocks_is_the_same(monkeypatch):
    """A long text's scores are made a few queries at a time: each query's row is computed alone
    either way (BLAS may round a row differently in another shape: 1e-6 of values of order 1)."""
    rng = np.random.default_rng(2)
    q, k, v = (rng.normal(size=(2, 37, 3, 8)).astype(np.float32) for _ in range(3))
    lengths, slopes = np.array([37, 12]), np.array([0.5, 0.25, 0.125], np.float32)
    whole = ops_reference.encoder_attention(q, k, v, lengths, 0.3, slopes)
    monkeypatch.setattr(ops_reference, "ENCODER_SCORES_BLOCK", 2 * 3 * 37 * 5)  # blocks of 5 queries
    np.testing.assert_allclose(ops_reference.encoder_attention(q, k, v, lengths, 0.3, slopes), whole, rtol=0, atol=1e-6)


# -- the C path (backend/ops.py) against the reference --------------------------------------------

U = 2.0 ** -24  # float32's unit roundoff
ISAS = kernels.supported_isas() if kernels.available() else []


def _ulp(a: np.ndarray) -> np.ndarray:
    return np.spacing(np.abs(a).astype(np.float32)).astype(np.float64)


@needs_c
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (7, 384), (2, 3, 97), (300, 768), (0, 8)])  # (300, 768): threads
def test_layer_norm_is_the_reference(shape, with_bias):
    """The C LayerNorm does the reference's float operations in its order; only its two double sums
    add in another one (16 lanes, then a tree). A sum of n floats in double is off from the exact
    one by at most n * 2^-53 of the sum of magnitudes, so float32(mean) and float32(scale) can only
    come out one float ulp apart, and only when the double lands that close to a rounding boundary
    (a chance of ~n * 2^-29 per row). One ulp of the mean moves every d = x - mean by at most
    ulp(mean) (plus d's own rounding, 2^-24 |d|); one ulp of the scale is 2^-23 of each product; the
    multiplications by the scale and the weight and the bias's add then round once each:
        |got - want| <= |w| * scale * ulp(mean) + 2^-21 * |d * scale * w| + ulp(y).
    Every variant computes the generic one's bits: the same lanes and tree."""
    from localinfer.backend import ops
    rng = np.random.default_rng(sum(shape))
    x = rng.normal(size=shape) * 3 + 5
    if x.size:
        x.reshape(-1, shape[-1])[::3] += 1000.0  # rows with a large mean: the subtraction cancels
    x = x.astype(np.float32)
    w, b = (rng.normal(size=shape[-1]).astype(np.float32) for _ in range(2))
    bias = b if with_bias else None
    want = ops_reference.layer_norm(x, w, bias, 1e-12)
    x64 = x.astype(np.float64)
    mean = x64.mean(-1, keepdims=True) if x.size else np.zeros(shape[:-1] + (1,))
    scale = 1 / np.sqrt(((x64 - mean) ** 2).mean(-1, keepdims=True) + 1e-12) if x.size else mean
    d_scaled_w = np.abs((x64 - mean) * scale * w)
    tol = np.abs(w) * scale * _ulp(mean) + 2.0 ** -21 * d_scaled_w + _ulp(want)
    generic = None
    for isa in ISAS:
        with kernels._isa(isa):
            got = ops.layer_norm(x, w, bias, 1e-12)
        assert got.shape == want.shape and got.dtype == np.float32
        assert np.all(np.abs(got.astype(np.float64) - want) <= tol)
        if x.size:
            assert np.mean(got == want) >= 0.99  # differences are rare near-ties, not another arithmetic
        if generic is None:
            generic = got
        np.testing.assert_array_equal(got, generic)


@needs_c
def test_layer_norm_without_bias_and_bad_shapes():
    from localinfer.backend import ops
    rng = np.random.default_rng(5)
    x = rng.normal(size=(4, 33)).astype(np.float32)
    w, b = np.ones(33, np.float32), np.zeros(33, np.float32)
    np.testing.assert_array_equal(ops.layer_norm(x, w, b, 1e-5), ops.layer_norm(x, w, None, 1e-5))
    for bad_w, bad_b in ((w[:-1], b), (w, b[:-1]), (w.reshape(3, 11), None)):
        with pytest.raises(ValueError, match="layer_norm"):
            ops.layer_norm(x, bad_w, bad_b, 1e-5)
    with pytest.raises(ValueError, match="layer_norm"):
        ops.layer_norm(np.float32(1.0), w[:1], None, 1e-5)


def _attention_tolerance(q, k, v, lengths, scale, slopes) -> float:
    """The largest difference two float32 computations of the same attention can have (the C one
    and the reference's BLAS/numpy one sum in other orders), per (text, head), the largest of them:
      scores: a dot of d products is within gamma(d) * sum|q k| of the exact one on each side, and
        the scaling and the ALiBi product and difference round (< 4 u of |score| + slope * |i - j|);
      softmax: scores off by E move each p_j by a factor of at most e^(2E), i.e. 2.02 E relative;
        on each side the exp rounds (numpy's float32 exp: < 4 ulp, 8 u), so do x - max, the sum
        and the division: 2.02 E + 24 u relative in all;
      P.V: sum_j p_j = 1, so that is at most (2.02 E + 24 u) * max|v|, plus each side's own sum of
        n products, gamma(n) * max|v|."""
    def gamma(n):
        return n * U / (1 - n * U)
    worst = 0.0
    n_batch, _, n_head, dim = q.shape
    for b in range(n_batch):
        n = int(lengths[b])
        for h in range(n_head):
            if n == 0:
                continue
            qk = scale * (np.abs(q[b, :n, h]).astype(np.float64) @ np.abs(k[b, :n, h]).T.astype(np.float64)).max()
            alibi = 0.0 if slopes is None else float(slopes[h]) * (n - 1)
            err_scores = 2 * gamma(dim) * qk + 8 * U * (qk + alibi)
            worst = max(worst, np.abs(v[b, :n, h]).max() * (2.02 * err_scores + 24 * U + 2 * gamma(n)))
    return worst


ATTENTION_CASES = [  # (n_batch, n_len, n_head, head_dim): one text of one token; odd lengths; a block
    (1, 1, 1, 32), (1, 7, 3, 64), (3, 13, 4, 80), (4, 37, 2, 32),  # boundary (32 queries); head_dim not
    (2, 9, 3, 24), (3, 70, 12, 64)]                                # a multiple of 16; threads


@needs_c
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("alibi,n_swa", [(False, 0), (True, 0), (False, 7), (True, 10)])
@pytest.mark.parametrize("n_batch,n_len,n_head,dim", ATTENTION_CASES)
def test_encoder_attention_is_the_reference(isa, alibi, n_swa, n_batch, n_len, n_head, dim):
    """Every text's rows against the reference within the float32 bound above; padding query rows
    are zeros; the values past a text's length (NaN here) are never read; lengths 0, 1 and n_len;
    sliding windows (odd and even n_swa) narrower than most texts, a query's window cut by either end.
    (The bound holds with a window: it sums over fewer keys, and its |i - j| stays below n_len.)"""
    from localinfer.backend import ops
    rng = np.random.default_rng(n_batch * 1000 + n_len * 10 + dim)
    q, k, v = (rng.normal(size=(n_batch, n_len, n_head, dim)).astype(np.float32) for _ in range(3))
    lengths = rng.integers(0, n_len + 1, size=n_batch)
    lengths[0] = n_len
    if n_batch > 2:
        lengths[1:3] = (0, 1)
    slopes = (2.0 ** -np.arange(1, n_head + 1)).astype(np.float32) if alibi else None
    scale = dim ** -0.5
    with np.errstate(invalid="ignore"):  # the reference's text of length 0: all keys masked, NaN rows
        want = ops_reference.encoder_attention(q, k, v, lengths, scale, slopes, n_swa)
    tol = _attention_tolerance(q, k, v, lengths, scale, slopes)
    for a in (q, k, v):  # what the padding holds is never read
        for b, n in enumerate(lengths):
            a[b, n:] = np.nan
    with kernels._isa(isa):
        got = ops.encoder_attention(q, k, v, lengths, scale, slopes, n_swa)
    assert got.shape == q.shape and got.dtype == np.float32
    for b, n in enumerate(lengths):
        np.testing.assert_allclose(got[b, :n], want[b, :n], rtol=0, atol=tol)
        np.testing.assert_array_equal(got[b, n:], 0.0)


@needs_c
def test_encoder_attention_is_the_same_on_any_thread_count():
    """Each query's row is one unit's arithmetic, whichever thread runs it."""
    from localinfer.backend import ops
    rng = np.random.default_rng(11)
    q, k, v = (rng.normal(size=(5, 41, 6, 32)).astype(np.float32) for _ in range(3))
    lengths, slopes = np.array([41, 3, 0, 40, 17]), np.linspace(0.5, 0.01, 6).astype(np.float32)
    before = kernels.get_threads()
    try:
        kernels.set_threads(1)
        one = ops.encoder_attention(q, k, v, lengths, 0.2, slopes)
        kernels.set_threads(max(2, before))
        np.testing.assert_array_equal(ops.encoder_attention(q, k, v, lengths, 0.2, slopes), one)
    finally:
        kernels.set_threads(before)


@needs_c
def test_encoder_attention_refuses_what_does_not_fit():
    from localinfer.backend import ops
    q = np.zeros((2, 5, 3, 16), np.float32)
    lengths = np.array([5, 2])
    bad = [
        ((q, q[:, :4], q, lengths, None), "shape"),
        ((q[0], q[0], q[0], lengths, None), "shape"),
        ((q, q, q.astype(np.int32), lengths, None), "floats"),
        ((q, q, q, np.array([5]), None), "lengths"),
        ((q, q, q, np.array([5.0, 2.0]), None), "lengths"),
        ((q, q, q, np.array([6, 2]), None), "0..5"),
        ((q, q, q, np.array([5, -1]), None), "0..5"),
        ((q, q, q, lengths, np.ones(2, np.float32)), "slopes"),
    ]
    for (qq, kk, vv, lens, slopes), message in bad:
        with pytest.raises(ValueError, match=message):
            ops.encoder_attention(qq, kk, vv, lens, 0.25, slopes)
    for n_swa in (-1, 2.5, True):
        with pytest.raises(ValueError, match="n_swa"):
            ops.encoder_attention(q, q, q, lengths, 0.25, None, n_swa)
    assert ops.encoder_attention(q[:0], q[:0], q[:0], lengths[:0], 0.25).shape == (0, 5, 3, 16)
