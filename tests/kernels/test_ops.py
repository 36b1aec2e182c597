"""The C layer ops (localinfer.backend.ops) against the numpy reference (localinfer.backend.ops_reference)."""
from __future__ import annotations

import numpy as np
import pytest

from localinfer.backend import kernels
from localinfer.backend import ops_reference


pytestmark = pytest.mark.skipif(not kernels.available(), reason="C kernels not built")


ISAS = kernels.supported_isas() if kernels.available() else []


@pytest.fixture
def ops():
    from localinfer.backend import ops
    return ops


@pytest.fixture(params=ISAS)
def isa(request):
    with kernels._isa(request.param):
        yield request.param


@pytest.mark.parametrize("shape", [(1, 576), (7, 640), (3, 4, 256), (2, 1), (97, 576)])  # the last: threads
def test_rms_norm(ops, shape):
    rng = np.random.default_rng(1)
    x = rng.normal(size=shape).astype(np.float32) * 3
    w = rng.normal(size=shape[-1]).astype(np.float32)
    np.testing.assert_allclose(ops.rms_norm(x, w, 1e-6), ops_reference.rms_norm(x, w, 1e-6), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError):
        ops.rms_norm(x, w[:-1] if shape[-1] > 1 else np.ones(2, np.float32), 1e-6)


@pytest.mark.parametrize("neox", [False, True])
@pytest.mark.parametrize("n,heads,dim,n_rot", [(1, 9, 64, 64), (5, 4, 256, 256), (3, 2, 128, 64),
                                               (97, 9, 64, 64)])  # the last is split over the threads
def test_rope(ops, neox, n, heads, dim, n_rot):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(n, heads, dim)).astype(np.float32)
    pos = rng.integers(0, 5000, size=n)
    f = ops_reference.rope_freqs(dim, 10000.0, n_rot)
    np.testing.assert_array_equal(ops.apply_rope(x, pos, f, neox), ops_reference.apply_rope(x, pos, f, neox))


def test_swiglu(ops, isa):
    rng = np.random.default_rng(3)
    g, u = rng.normal(size=(2, 2, 1536)).astype(np.float32) * 4
    np.testing.assert_allclose(ops.swiglu(g, u), ops_reference.swiglu(g, u), rtol=1e-6, atol=1e-6)


def test_swiglu_extremes_and_layouts(ops, isa):
    """exp's overflow/underflow edges, and the halves of one fused gate|up matmul read in place:
    every row and every element comes out the same whatever the batch and the tail length."""
    rng = np.random.default_rng(7)
    n_ff = 1541  # not a multiple of 8 or 16: the SIMD tails
    gu = rng.normal(size=(37, 2 * n_ff)).astype(np.float32) * 12
    gu[0, :10] = [88.72, 88.73, -88.72, -103.9, -104.0, -150.0, 0.0, -0.0, 1e30, -1e30]
    gate, up = gu[:, :n_ff], gu[:, n_ff:]
    with np.errstate(all="ignore"):
        want = ops_reference.swiglu(np.ascontiguousarray(gate), np.ascontiguousarray(up))
    got = ops.swiglu(gate, up)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-30)
    np.testing.assert_array_equal(got, ops.swiglu(np.ascontiguousarray(gate), np.ascontiguousarray(up)))
    for r in (0, 5, 36):  # a decode step's single row
        np.testing.assert_array_equal(ops.swiglu(gate[r:r + 1], up[r:r + 1]), got[r:r + 1])
        np.testing.assert_array_equal(ops.swiglu(gate[r, 3:], up[r, 3:]), got[r, 3:])
    special = ops.swiglu(np.float32([np.inf, -np.inf, np.nan]), np.ones(3, np.float32))
    assert special[0] == np.inf and np.isnan(special[1]) and np.isnan(special[2])  # as x / (1 + exp(-x))


def test_geglu_is_the_reference_bit_for_bit(ops, isa):
    """ggml's f16 table, its +-10 cut-offs, and what lies between table entries."""
    rng = np.random.default_rng(6)
    g = np.concatenate([rng.normal(size=4093).astype(np.float32) * 6,
                        np.float32([10.0, 9.999, -10.0, -9.999, 1e4, -1e4, 0.0, -0.0, np.inf, -np.inf, np.nan])])
    u = rng.normal(size=g.shape).astype(np.float32)
    np.testing.assert_array_equal(ops.geglu(g, u), ops_reference.geglu(g, u))
    np.testing.assert_array_equal(ops.geglu(g.reshape(4, -1), u.reshape(4, -1)), ops_reference.geglu(g, u).reshape(4, -1))
    with pytest.raises(ValueError):
        ops.geglu(g, u[:-1])


@pytest.mark.parametrize("kw", [{}, {"sliding_window": 5}, {"softcap": 3.0}, {"key_start": 7},
                                {"sliding_window": 21, "key_start": 13}])
@pytest.mark.parametrize("n,n_kv,heads,kv_heads,dim", [(1, 1, 1, 1, 64), (1, 300, 9, 3, 64), (17, 17, 4, 1, 256),
                                                      (64, 80, 8, 2, 96), (5, 37, 6, 3, 72), (40, 45, 5, 5, 8)])
def test_attention(ops, isa, kw, n, n_kv, heads, kv_heads, dim):
    rng = np.random.default_rng(4)
    q = rng.normal(size=(n, heads, dim)).astype(np.float32)
    k = rng.normal(size=(n_kv, kv_heads, dim)).astype(np.float16)
    v = rng.normal(size=(n_kv, kv_heads, dim)).astype(np.float16)
    start = kw.get("key_start", 0)
    pos = np.arange(start + n_kv - n, start + n_kv)
    a = ops.attention(q, k, v, pos, dim ** -0.5, **kw)
    b = ops_reference.attention(q, k, v, pos, dim ** -0.5, **kw)
    # both round the softmax weights to f16 (as llama.cpp does); a different summation order
    # can land a weight one f16 step (~5e-4 relative) away
    np.testing.assert_allclose(a, b, rtol=1e-3, atol=2e-3)


@pytest.mark.parametrize("n,dim", [(9, 80), (20, 64), (37, 80), (19, 256)])
def test_attention_simd_is_the_avx512_order(ops, n, dim):
    """AVX2 runs the 16 lanes as two halves: bit for bit what AVX-512 computes (whose 4 x 4 tiles
    reduce 16 sums at once), for decode and batch queries, K read in place (d % 16 == 0) or widened."""
    if not {"avx2", "avx512"} <= set(ISAS):
        pytest.skip("needs a CPU with AVX-512")
    rng = np.random.default_rng(5)
    q = rng.normal(size=(n, 4, dim)).astype(np.float32)
    k, v = rng.normal(size=(2, 33 + n, 2, dim)).astype(np.float16)
    pos = np.arange(33, 33 + n)
    out = {}
    for name in ("avx2", "avx512"):
        with kernels._isa(name):
            out[name] = ops.attention(q, k, v, pos, 0.1, sliding_window=20)
    np.testing.assert_array_equal(out["avx2"], out["avx512"])


def test_attention_bad_shapes(ops):
    q = np.zeros((1, 3, 64), np.float32)
    k = np.zeros((4, 2, 64), np.float16)
    with pytest.raises(ValueError):
        ops.attention(q, k, k, np.array([3]), 0.1)
    with pytest.raises(ValueError):
        ops.attention(np.zeros((2, 2, 64), np.float32), k, k, np.array([3]), 0.1)
