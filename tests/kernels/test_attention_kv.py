"""Attention over a q8_0 / q4_0 KV cache (csrc/core/attention_kv.c, kernels.attention_kv) against the
numpy oracle (ops_reference.attention with kv_types: dequantize, then attend), on every ISA variant
this machine runs; and the cache rows the C quantizer writes against the numpy quantizers, bit for bit.

Tolerance, from the arithmetic: both sides score the same dequantized values (the C dot sums exact
int products per block, the oracle float products of the dequantized factors: relative differences
of a few 2^-24), then round the softmax weights P to f16. A tiny score difference can move a P_j
across an f16 rounding boundary: at most one f16 ulp, <= 2^-10 * P_j. So each output differs by at
most 2^-10 * sum_j P_j |v_j| <= 2^-10 * max|v| (sum_j P_j = 1), plus the f32 sums over n_kv keys,
n_kv * 2^-23 * max|v|.
"""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from localinfer.backend import kernels
from localinfer.backend import ops_reference as ref
from localinfer.kv.cache_types import CACHE_TYPES, KVCacheTypes, dequantize_rows, quantize_rows
from localinfer.formats.registry import UnsupportedQuantType

pytestmark = pytest.mark.skipif(not kernels.available(), reason="C kernels not built")

ISAS = kernels.supported_isas() if kernels.available() else []
TYPE_PAIRS = [("q8_0", "q8_0"), ("q4_0", "q4_0"), ("q8_0", "f16"), ("f16", "q8_0"), ("q4_0", "q8_0")]
# (n_q, n_head, n_head_kv, head_dim, n_kv, window, softcap): decode and prefill, odd n_kv (not a
# multiple of the 4-key dot), GQA groups 1/3/4, head sizes 32..256, a sliding window, a soft cap
SHAPES = [
    (1, 4, 4, 64, 1, 0, 0.0),
    (1, 9, 3, 64, 37, 0, 0.0),
    (3, 8, 2, 128, 101, 0, 0.0),
    (17, 4, 1, 32, 53, 0, 0.0),
    (5, 8, 2, 256, 70, 16, 0.0),
    (2, 6, 2, 96, 45, 0, 30.0),
]


@pytest.fixture(params=ISAS)
def isa(request):
    with kernels._isa(request.param):
        yield request.param


def _store(x: np.ndarray, type_name: str) -> np.ndarray:
    return x.astype(np.float16) if type_name == "f16" else quantize_rows(x, type_name, use_c=False)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("types", TYPE_PAIRS, ids=lambda t: "k_%s-v_%s" % t)
def test_attention_kv_matches_oracle(isa, types, shape):
    n_q, n_head, n_head_kv, d, n_kv, window, softcap = shape
    rng = np.random.default_rng(hash((types, shape)) % 2**32)
    q = rng.standard_normal((n_q, n_head, d), dtype=np.float32)
    k = rng.standard_normal((n_kv, n_head_kv, d), dtype=np.float32) * 2
    v = rng.standard_normal((n_kv, n_head_kv, d), dtype=np.float32)
    key_start = 7 if window else 0  # a sliding-window cache hands over only its recent keys
    pos = np.arange(key_start + n_kv - n_q, key_start + n_kv, dtype=np.int64)
    kc, vc = _store(k, types[0]), _store(v, types[1])
    scale = 1 / np.sqrt(d)
    got = kernels.attention_kv(q, kc, CACHE_TYPES[types[0]], vc, CACHE_TYPES[types[1]], pos, scale,
                               window, softcap, key_start)
    want = ref.attention(q, kc, vc, pos, scale, sliding_window=window or None, softcap=softcap or None,
                         key_start=key_start, kv_types=KVCacheTypes(*types))
    v_max = np.abs(dequantize_rows(vc, types[1], d)).max()
    atol = v_max * (2.0**-10 + n_kv * 2.0**-23)
    np.testing.assert_allclose(got, want, rtol=0, atol=atol)


def test_masked_rows_are_zero():
    """A query that sees no key (its window starts after the keys handed over) gets zeros, as in the oracle."""
    q = np.ones((1, 2, 32), np.float32)
    kc = quantize_rows(np.ones((4, 1, 32), np.float32), "q8_0")
    out = kernels.attention_kv(q, kc, T.Q8_0, kc, T.Q8_0, np.array([2], np.int64), 1.0, key_start=10)
    assert not out.any()


@pytest.mark.parametrize("type_name", ["q8_0", "q4_0"])
def test_cache_rows_bit_identical_to_numpy(isa, type_name):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 3, 64), dtype=np.float32) * np.float32(3)
    x[0, 0, :32] = 0  # an all-zero block: d = 0
    np.testing.assert_array_equal(quantize_rows(x, type_name), quantize_rows(x, type_name, use_c=False))
    back = dequantize_rows(quantize_rows(x, type_name), type_name, 64)
    # q8_0 rounds to d/2 = amax/254, q4_0 to within d = amax/8 (ggml's clamp at 15), plus d's own
    # rounding to f16 (2^-11 relative) times the largest quant (127, 8): <= amax * 2^-10 more
    step = {"q8_0": 1 / 254, "q4_0": 1 / 8}[type_name]
    amax = np.abs(x.reshape(-1, 32)).max(axis=1, keepdims=True)
    assert (np.abs(back.reshape(-1, 32) - x.reshape(-1, 32)) <= amax * (step + 2.0**-10)).all()


def test_bad_arguments_are_clear_errors():
    q = np.zeros((1, 2, 48), np.float32)
    k = np.zeros((3, 1, 48 // 32 * 34 + 17), np.uint8)
    with pytest.raises(ValueError, match="head_dim 48 is not a multiple of the Q8_0 block size 32"):
        kernels.attention_kv(q, k, T.Q8_0, k, T.Q8_0, np.zeros(1, np.int64), 1.0)
    q = np.zeros((1, 2, 64), np.float32)
    k = np.zeros((3, 1, 68), np.uint8)
    with pytest.raises(UnsupportedQuantType, match="Q5_0 is not a KV cache type"):
        kernels.attention_kv(q, k, T.Q5_0, k, T.Q8_0, np.zeros(1, np.int64), 1.0)
    with pytest.raises(ValueError, match=r"v must be \(n_kv, n_head_kv, 36\)"):
        kernels.attention_kv(q, k, T.Q8_0, k, T.Q4_0, np.zeros(1, np.int64), 1.0)
    with pytest.raises(TypeError, match="k must have dtype uint8"):
        kernels.attention_kv(q, k.astype(np.float16), T.Q8_0, k, T.Q8_0, np.zeros(1, np.int64), 1.0)
    with pytest.raises(ValueError, match="q_positions must have shape"):
        kernels.attention_kv(q, k, T.Q8_0, k, T.Q8_0, np.zeros(2, np.int64), 1.0)
    with pytest.raises(UnsupportedQuantType, match="not a KV cache type"):
        kernels.quantize_kv(np.zeros(32, np.float32), T.Q4_1)
