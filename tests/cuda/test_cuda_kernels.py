"""The CUDA path's kernels (backend/cuda/) against their numpy references (backend/ops_reference.py
and the formats' dequantizers), on small shapes: in numba.cuda's simulator where there is no GPU
(tests/conftest.py sets NUMBA_ENABLE_CUDASIM=1), on the device where there is one."""
import numpy as np
import pytest

from localinfer.backend import ops_reference as ref
from localinfer.formats import dequantize
from localinfer.formats.ggml import GGMLType as T

cuda_kernels = pytest.importorskip("localinfer.backend.cuda.kernels", reason="numba.cuda is not importable")
from localinfer.backend.cuda import weights  # noqa: E402

cuda = cuda_kernels.cuda
RNG = np.random.default_rng(0)


def _blocks(qtype: T, n_out: int, k: int) -> np.ndarray:
    """Random weights in `qtype`'s blocks, as a GGUF holds them (uint8 rows; F16 as float16)."""
    if qtype == T.F16:
        return RNG.standard_normal((n_out, k)).astype(np.float16)
    from localinfer.quant.quantizers import quantize
    return quantize(RNG.standard_normal((n_out, k)).astype(np.float32), qtype)


KINDS = {T.Q8_0: "int8", T.Q5_0: "int8", T.Q6_K: "int8", T.Q4_0: "nibbles", T.Q4_1: "nibbles", T.Q4_K: "nibbles"}


@pytest.mark.parametrize("qtype", [T.Q8_0, T.Q5_0, T.Q6_K, T.Q4_0, T.Q4_1, T.Q4_K, T.F16, T.Q5_K])
def test_gemv_is_the_dequantized_matrix_times_x(qtype):
    n_out, k = 6, 512   # the simulator runs each of a block's threads as a Python thread: small shapes
    raw = _blocks(qtype, n_out, k)
    x = RNG.standard_normal(k).astype(np.float32)
    m = weights.upload(raw, qtype, (n_out, k))
    assert m.kind == KINDS.get(qtype, "f16")
    got = cuda_kernels.gemv(m, cuda.to_device(x)).copy_to_host()
    w = dequantize(raw, qtype, (n_out, k)).astype(np.float32)
    if m.kind == "f16":
        w = w.astype(np.float16).astype(np.float32)   # other types are uploaded as F16
    # the same products summed in another order (and a scale times a quant rounded to f32 once more):
    # a few ulps of the sum of |terms|
    bound = 1e-5 * (np.abs(w) @ np.abs(x)) + 1e-6
    assert np.all(np.abs(got - w @ x) <= bound), (got, w @ x)


def test_gemv_refuses_what_does_not_fit():
    m = weights.upload(_blocks(T.Q8_0, 4, 64), T.Q8_0, (4, 64))
    with pytest.raises(ValueError, match="columns"):
        cuda_kernels.gemv(m, cuda.to_device(np.zeros(32, np.float32)))
    with pytest.raises(ValueError, match="float32"):
        cuda_kernels.gemv(m, cuda.to_device(np.zeros(64, np.float64)))
    with pytest.raises(ValueError, match="raw blocks"):
        weights.upload(np.zeros((4, 10), np.uint8), T.Q8_0, (4, 64))


def test_rms_norm():
    x = RNG.standard_normal((3, 200)).astype(np.float32)
    w = RNG.standard_normal(200).astype(np.float32)
    got = cuda_kernels.rms_norm(cuda.to_device(x), cuda.to_device(w), 1e-6).copy_to_host()
    np.testing.assert_allclose(got, ref.rms_norm(x, w, 1e-6), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("neox", [False, True])
def test_rope(neox):
    x = RNG.standard_normal((3, 4, 16)).astype(np.float32)
    positions = np.array([0, 5, 77], np.int32)
    inv = ref.rope_freqs(16, 10000.0, n_rot=12)
    got = cuda_kernels.rope(cuda.to_device(x.copy()), cuda.to_device(positions), cuda.to_device(inv.astype(np.float32)),
                            neox).copy_to_host()
    np.testing.assert_allclose(got, ref.apply_rope(x, positions, inv, neox), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("gelu", [False, True])
def test_glu(gelu):
    gate, up = (RNG.standard_normal(300).astype(np.float32) * 3 for _ in range(2))
    got = cuda_kernels.glu(cuda.to_device(gate), cuda.to_device(up), gelu).copy_to_host()
    # GeGLU as ggml's CUDA kernel: the exact tanh form (ops_reference.geglu is the CPU's f16 table)
    want = ref.gelu_tanh(gate) * up if gelu else ref.swiglu(gate, up)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n_head, n_kv_head, n_past", [(4, 4, 1), (4, 2, 9), (6, 2, 150)])
def test_attention_over_an_f16_cache(n_head, n_kv_head, n_past):
    hd, n_ctx = 16, 160
    q = RNG.standard_normal((n_head, hd)).astype(np.float32)
    k = RNG.standard_normal((n_ctx, n_kv_head, hd)).astype(np.float16)
    v = RNG.standard_normal((n_ctx, n_kv_head, hd)).astype(np.float16)
    got = cuda_kernels.attention(cuda.to_device(q), cuda.to_device(k), cuda.to_device(v), n_past,
                                 hd ** -0.5).copy_to_host()
    kk = np.repeat(k[:n_past].astype(np.float32), n_head // n_kv_head, axis=1)   # (p, n_head, hd)
    vv = np.repeat(v[:n_past].astype(np.float32), n_head // n_kv_head, axis=1)
    s = np.einsum("hd,phd->hp", q, kk) * hd ** -0.5
    p = np.exp(s - s.max(axis=1, keepdims=True))
    want = np.einsum("hp,phd->hd", p / p.sum(axis=1, keepdims=True), vv)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="n_past"):
        cuda_kernels.attention(cuda.to_device(q), cuda.to_device(k), cuda.to_device(v), n_ctx + 1, 1.0)


@pytest.mark.parametrize("qtype", [T.Q8_0, T.Q6_K, T.Q4_K, T.Q4_0, T.F16])
@pytest.mark.parametrize("m", [1, 5])
def test_gemm_is_the_dequantized_matrix_times_x(qtype, m):
    """The prefill matmul: tiles of every kind of device matrix, rows and outputs not a tile's multiple."""
    from localinfer.backend.cuda.gemm import gemm
    n_out, k = 6, 256
    raw = _blocks(qtype, n_out, k)
    mat = weights.upload(raw, qtype, (n_out, k))
    x = RNG.standard_normal((m, k)).astype(np.float32)
    w = dequantize(raw, qtype, (n_out, k)).astype(np.float32)
    if mat.kind == "f16":
        w = w.astype(np.float16).astype(np.float32)
    got = gemm(mat, cuda.to_device(x)).copy_to_host()
    bound = 1e-5 * (np.abs(x) @ np.abs(w).T) + 1e-6   # the same products in another order (see the GEMV's)
    assert got.shape == (m, n_out) and np.all(np.abs(got - x @ w.T) <= bound)
    with pytest.raises(ValueError, match="columns"):
        gemm(mat, cuda.to_device(np.zeros((m, 32), np.float32)))
