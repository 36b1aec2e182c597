"""Attention sinks (gpt-oss) inside the C softmax (csrc/core/attention.c, attention_kv.c; the softmax's
generic and AVX2 versions, the AVX-512 table uses the AVX2 one) against the numpy reference, which
puts the sink in as one more softmax column and drops it (ops_reference.attention), on every ISA."""
from __future__ import annotations

import numpy as np
import pytest

from localinfer.backend import kernels
from localinfer.backend import ops_reference
from localinfer.kv.cache_types import CACHE_TYPES, KVCacheTypes, quantize_rows

pytestmark = pytest.mark.skipif(not kernels.available(), reason="C kernels not built")

ISAS = kernels.supported_isas() if kernels.available() else []
# (n_q, n_kv, heads, kv_heads, head_dim, window, key_start): decode, prefill, GQA, a window, head sizes
# that K is read in place for (multiples of 16) or widened for, a window starting past the keys handed over
SHAPES = [(1, 37, 8, 2, 64, 0, 0), (5, 5, 4, 4, 16, 0, 0), (70, 90, 8, 2, 64, 8, 0), (3, 200, 6, 3, 24, 16, 0),
          (4, 30, 4, 1, 32, 5, 9)]


@pytest.fixture(params=ISAS)
def isa(request):
    with kernels._isa(request.param):
        yield request.param


def _inputs(shape, seed):
    n_q, n_kv, heads, kv_heads, d, window, start = shape
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((n_q, heads, d)).astype(np.float32)
    k, v = (rng.standard_normal((n_kv, kv_heads, d)).astype(np.float32) for _ in range(2))
    sinks = (rng.standard_normal(heads) * 2).astype(np.float32)
    sinks[0] = -np.inf  # a head without a sink beside ones with
    pos = np.arange(start + n_kv - n_q, start + n_kv)
    return q, k, v, sinks, pos, dict(sliding_window=window or None, key_start=start), d ** -0.5


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_sinks_in_the_c_softmax_are_the_reference(isa, shape):
    from localinfer.backend import ops
    q, k, v, sinks, pos, kw, scale = _inputs(shape, sum(shape))
    k, v = k.astype(np.float16), v.astype(np.float16)
    got = ops.attention(q, k, v, pos, scale, sinks=sinks, **kw)
    want = ops_reference.attention(q, k, v, pos, scale, sinks=sinks, **kw)
    # both round the weights to f16 after the same softmax; another summation order can land a weight
    # one f16 step (~5e-4 relative) away: test_ops.test_attention's tolerance
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=2e-3)
    plain = ops.attention(q, k, v, pos, scale, **kw)
    assert np.abs(got - plain).max() > 1e-2  # the sinks took a share
    # a sink of -inf is no sink, bit for bit: the head without one, and all heads without
    np.testing.assert_array_equal(got[:, 0], plain[:, 0])
    none = ops.attention(q, k, v, pos, scale, sinks=np.full(q.shape[1], -np.inf, np.float32), **kw)
    np.testing.assert_array_equal(none, plain)


@pytest.mark.parametrize("types", [("q8_0", "q8_0"), ("q4_0", "f16")], ids=str)
@pytest.mark.parametrize("shape", [SHAPES[0], SHAPES[4]], ids=str)
def test_sinks_over_a_quantized_cache(isa, types, shape):
    q, k, v, sinks, pos, kw, scale = _inputs(shape, 7 + sum(shape))
    kc, vc = (x.astype(np.float16) if t == "f16" else quantize_rows(x, t, use_c=False) for x, t in zip((k, v), types))
    got = kernels.attention_kv(q, kc, CACHE_TYPES[types[0]], vc, CACHE_TYPES[types[1]], pos, scale,
                               kw["sliding_window"] or 0, 0.0, kw["key_start"], sinks)
    want = ops_reference.attention(q, kc, vc, pos, scale, kv_types=KVCacheTypes(*types), sinks=sinks, **kw)
    np.testing.assert_allclose(got, want, rtol=0, atol=np.abs(v).max() * 2.0**-9)  # test_attention_kv's bound
    plain = kernels.attention_kv(q, kc, CACHE_TYPES[types[0]], vc, CACHE_TYPES[types[1]], pos, scale,
                                 kw["sliding_window"] or 0, 0.0, kw["key_start"])
    assert np.abs(got - plain).max() > 1e-2


def test_avx2_and_avx512_agree_bit_for_bit():
    from localinfer.backend import ops
    if not {"avx2", "avx512"} <= set(ISAS):
        pytest.skip("needs a CPU with AVX-512")
    q, k, v, sinks, pos, kw, scale = _inputs(SHAPES[2], 3)
    k, v = k.astype(np.float16), v.astype(np.float16)
    out = {}
    for name in ("avx2", "avx512"):
        with kernels._isa(name):
            out[name] = ops.attention(q, k, v, pos, scale, sinks=sinks, **kw)
    np.testing.assert_array_equal(out["avx2"], out["avx512"])


@pytest.mark.parametrize("sinks, message", [(np.zeros(3, np.float32), "shape"), (np.full(4, np.nan, np.float32), "finite"),
                                            (np.full(4, np.inf, np.float32), "finite")])
def test_bad_sinks_are_refused(sinks, message):
    from localinfer.backend import ops
    q, k, v, _, pos, kw, scale = _inputs(SHAPES[1], 1)
    with pytest.raises(ValueError, match=message):
        ops.attention(q, k.astype(np.float16), v.astype(np.float16), pos, scale, sinks=sinks, **kw)
    rows = quantize_rows(np.zeros((5, 4, 32), np.float32), "q8_0")
    with pytest.raises(ValueError, match=message):
        kernels.attention_kv(np.zeros((5, 4, 32), np.float32), rows, CACHE_TYPES["q8_0"], rows, CACHE_TYPES["q8_0"],
                             np.arange(5), scale, sinks=sinks)
