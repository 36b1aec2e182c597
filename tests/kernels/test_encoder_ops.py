"""The encoders' ops (backend/ops_reference.py, ops.py): GELU on the C path is the reference bit for
bit; LayerNorm and the bidirectional attention against a float64 computation written plainly."""
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


@pytest.mark.parametrize("alibi", [False, True])
def test_encoder_attention_matches_a_plain_loop(alibi):
    """Every query of text b sees keys 0..lengths[b]-1 and nothing else, with -slope*|i-j| under ALiBi."""
    rng = np.random.default_rng(1)
    n_batch, n_len, n_head, dim = 3, 11, 4, 16
    q, k, v = (rng.normal(size=(n_batch, n_len, n_head, dim)).astype(np.float32) for _ in range(3))
    lengths = np.array([11, 4, 1])
    slopes = np.array([0.5, 0.25, 0.125, 0.0625], np.float32) if alibi else None
    got = ops_reference.encoder_attention(q, k, v, lengths, 0.25, slopes)
    for b, n in enumerate(lengths):
        for h in range(n_head):
            for i in range(n):
                s = q[b, i, h].astype(np.float64) @ k[b, :n, h].T.astype(np.float64) * 0.25
                if alibi:
                    s -= slopes[h] * np.abs(i - np.arange(n))
                p = np.exp(s - s.max())
                want = (p / p.sum()) @ v[b, :n, h]
                np.testing.assert_allclose(got[b, i, h], want, rtol=0, atol=1e-5)
    # padding keys change nothing: the same texts with other values past their lengths
    k2, v2 = k.copy(), v.copy()
    k2[1, 4:], v2[1, 4:], k2[2, 1:], v2[2, 1:] = 99.0, -99.0, 7.0, 7.0
    again = ops_reference.encoder_attention(q, k2, v2, lengths, 0.25, slopes)
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
