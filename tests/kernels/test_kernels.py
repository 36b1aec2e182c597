"""The C kernels against the numpy oracles, for every type in the registry and every ISA variant
this machine can run.

- dequantize_row: bit-identical to localinfer.formats.dequantize;
- activation quantization (Q8_0, Q8_1, Q8_K, F16, BF16, F32): bit-identical to
  localinfer.formats.activations, under every ISA variant (they have SIMD versions);
- matmul: against float64 (dequantized W) @ (dequantized activations after the same
  activation quantization), within 1e-4 of sum(|w| |a|), for GEMV (m < 4) and the
  tiled GEMM, with sizes that hit every tail of the kernels; bit-identical across
  thread counts.
Like tests/quant/test_dequant.py, the tests walk localinfer.formats.FORMATS, so a new type is
tested without editing this file.
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from localinfer.backend import kernels
from localinfer.formats import FORMATS, QuantFormat, dequantize
from localinfer.formats import activations as act
from localinfer.formats.dequant_grids import iq1_m_d

pytestmark = pytest.mark.skipif(not kernels.available(), reason=f"C kernels not built: {kernels.unavailable_reason()}")

FORMAT_PARAMS = [pytest.param(f, id=f.name) for f in FORMATS.values()]
ISAS = kernels.supported_isas() if kernels.available() else []

# Byte offsets of the ggml_half fields of each block (ggml-common.h); random bytes there
# would be inf/NaN one time in 32, so they are replaced by finite halves.
F16_FIELDS: dict[T, tuple[int, ...]] = {
    T.F16: (0,), T.Q4_0: (0,), T.Q4_1: (0, 2), T.Q5_0: (0,), T.Q5_1: (0, 2), T.Q8_0: (0,),
    T.Q2_K: (80, 82), T.Q3_K: (108,), T.Q4_K: (0, 2), T.Q5_K: (0, 2), T.Q6_K: (208,),
    T.IQ4_NL: (0,), T.IQ4_XS: (0,), T.TQ1_0: (52,), T.TQ2_0: (64,),
    T.IQ2_XXS: (0,), T.IQ2_XS: (0,), T.IQ2_S: (0,), T.IQ3_XXS: (0,), T.IQ3_S: (0,), T.IQ1_S: (0,),
}
# Byte offsets of e8m0 scales (2^(e - 128)): random bytes would reach 2^126, whose products overflow
# f32; the matmul tests keep them within the fp16 fields' range of magnitudes (2^-24 .. 2^16).
E8M0_FIELDS: dict[T, tuple[int, ...]] = {T.MXFP4: (0,)}


@pytest.fixture(params=ISAS)
def isa(request):
    with kernels._isa(request.param):
        yield request.param


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    before = kernels.get_threads()
    kernels.set_threads(request.param)
    yield request.param
    kernels.set_threads(before)


def random_rows(fmt: QuantFormat, n_rows: int, n_blocks: int, seed: int) -> np.ndarray:
    """uint8 (n_rows, n_blocks * type_size) of random blocks with finite fp16 fields."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(n_rows * n_blocks, fmt.type_size), dtype=np.uint8)
    if fmt.ggml_type in (T.F32, T.BF16):  # random finite floats, various magnitudes
        vals = rng.standard_normal(n_rows * n_blocks).astype(np.float32) * np.float32(4.0)
        if fmt.ggml_type == T.F32:
            blocks = vals.view(np.uint8).reshape(-1, 4)
        else:
            blocks = (vals.view(np.uint32) >> np.uint32(16)).astype(np.uint16).view(np.uint8).reshape(-1, 2)
    for offset in F16_FIELDS.get(fmt.ggml_type, ()):
        bits = rng.integers(0, 1 << 16, size=n_rows * n_blocks, dtype=np.uint16)
        bits[(bits & 0x7C00) == 0x7C00] &= np.uint16(0xBFFF)  # inf/NaN -> a large finite value
        blocks[:, offset : offset + 2] = bits.view(np.uint8).reshape(-1, 2)
    for offset in E8M0_FIELDS.get(fmt.ggml_type, ()):
        blocks[:, offset] = rng.integers(128 - 24, 128 + 17, size=n_rows * n_blocks, dtype=np.uint8)
    if fmt.ggml_type == T.IQ1_M:   # d is the top nibbles of the scale u16s: clear an inf/NaN's exponent top bit
        blocks[~np.isfinite(iq1_m_d(blocks)[:, 0]), 55] &= np.uint8(0xBF)
    return np.ascontiguousarray(blocks.reshape(n_rows, n_blocks * fmt.type_size))


def random_activations(m: int, k: int, seed: int) -> np.ndarray:
    """float32 (m, k): normal values at a different scale per row, a zero row, exact ties."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, k)).astype(np.float32)
    x *= np.float32(10.0) ** rng.integers(-3, 4, size=(m, 1)).astype(np.float32)
    if m > 2:
        x[1] = 0.0
    if k >= 32:  # values that land exactly on .5 after scaling (amax 127 -> d = 1)
        x[0, :32] = np.float32(127.0)
        x[0, 1:32:2] = np.arange(16, dtype=np.float32) + np.float32(0.5)
    return x


def n_blocks_cases(fmt: QuantFormat) -> list[tuple[int, int, int]]:
    """(m, n_out, n_blocks): GEMV (m < 6) and GEMM (m >= 6), every panel tail (1..33 groups), and a
    GEMM whose activation panel outgrows its L2 budget (LI_GEMM_PANEL_BUDGET: blocks of tokens)."""
    if fmt.block_size == 1:  # float types: k = n_blocks
        return [(1, 1, 1), (1, 33, 7), (3, 7, 33), (17, 33, 300), (64, 7, 64), (6, 577, 17), (301, 9, 1024)]
    if fmt.block_size == 256:
        return [(1, 1, 1), (1, 577, 3), (3, 7, 2), (17, 33, 1), (64, 33, 3), (6, 1, 2), (5, 7, 1), (301, 9, 9)]
    return [(1, 1, 1), (1, 577, 18), (3, 7, 3), (17, 33, 7), (64, 577, 2), (17, 1, 23), (6, 33, 33), (5, 7, 5),
            (301, 9, 72)]


# --- dequantize ------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMAT_PARAMS)
@pytest.mark.parametrize("n_blocks", [1, 7, 33])
def test_dequantize_row_bit_identical(fmt: QuantFormat, n_blocks: int):
    raw = random_rows(fmt, 1, n_blocks, seed=n_blocks)[0]
    n = n_blocks * fmt.block_size
    got = kernels.dequantize_row(raw, fmt.ggml_type, n)
    want = dequantize(raw, fmt.ggml_type, (n,))
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("fmt", FORMAT_PARAMS)
def test_dequantize_row_with_nan_and_inf_scales(fmt: QuantFormat):
    rng = np.random.default_rng(5)
    raw = rng.integers(0, 256, size=64 * fmt.type_size, dtype=np.uint8)  # fp16 fields unfiltered
    n = 64 * fmt.block_size
    got = kernels.dequantize_row(raw, fmt.ggml_type, n)
    with np.errstate(invalid="ignore", over="ignore"):
        want = dequantize(raw, fmt.ggml_type, (n,))
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


# --- activation quantization ---------------------------------------------------------------


@pytest.mark.parametrize("act_type", [T.Q8_0, T.Q8_1, T.Q8_K, T.F32, T.F16, T.BF16], ids=lambda t: t.name)
def test_quantize_activations_bit_identical(isa, act_type):
    k = 256 * 5
    x = random_activations(9, k, seed=int(act_type))
    x[2, :256] = np.linspace(-127.5, 127.5, 256, dtype=np.float32)  # Q8_K ties with max -> iscale exact
    x[3, 256:512] *= np.float32(1e-30)                                # tiny and subnormal scales
    x[4, :] = np.float32(-3.0)
    got = kernels.quantize_activations(x, act_type)
    want = act.quantize(x, act_type)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(kernels.quantize_activations(x[5], act_type), want[5])


# --- matmul -----------------------------------------------------------------------------------


def reference(w_raw: np.ndarray, fmt: QuantFormat, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(x_q @ W^T in float64, sum |x_q| |W|) with x_q the activations after the kernels' quantization."""
    n_out, k = w_raw.shape[0], x.shape[1]
    w = dequantize(w_raw, fmt.ggml_type, (n_out, k)).astype(np.float64)
    act_type = act.VEC_DOT_TYPE[fmt.ggml_type]
    a = act.dequantize(act.quantize(x, act_type), act_type, k)
    return a @ w.T, np.abs(a) @ np.abs(w).T


def assert_close(got: np.ndarray, want: np.ndarray, scale: np.ndarray, rel: float = 1e-4) -> None:
    err = np.abs(got.astype(np.float64) - want)
    bad = err > rel * scale + 1e-30
    assert not bad.any(), (
        f"{bad.sum()} of {bad.size} outputs off; worst relative error "
        f"{(err / np.maximum(scale, 1e-300)).max():.3g} at {np.unravel_index(np.argmax(err - rel * scale), err.shape)}"
    )


@pytest.mark.parametrize("fmt", FORMAT_PARAMS)
def test_matmul_matches_reference(fmt: QuantFormat, isa, threads):
    for case, (m, n_out, n_blocks) in enumerate(n_blocks_cases(fmt)):
        k = n_blocks * fmt.block_size
        w = random_rows(fmt, n_out, n_blocks, seed=1000 + case)
        x = random_activations(m, k, seed=2000 + case)
        got = kernels.matmul(w, fmt.ggml_type, x)
        assert got.shape == (m, n_out) and got.dtype == np.float32
        want, scale = reference(w, fmt, x)
        assert_close(got, want, scale)


@pytest.mark.parametrize("fmt", FORMAT_PARAMS)
def test_matmul_same_bits_for_any_thread_count(fmt: QuantFormat):
    n_blocks = 3 if fmt.block_size == 256 else 18
    k = n_blocks * fmt.block_size
    w = random_rows(fmt, 67, n_blocks, seed=7)
    before = kernels.get_threads()
    try:
        for m in (1, 3, 20):
            x = random_activations(m, k, seed=m)
            results = []
            for n in (1, 2, 3):
                kernels.set_threads(n)
                results.append(kernels.matmul(w, fmt.ggml_type, x))
            for r in results[1:]:
                np.testing.assert_array_equal(r.view(np.uint32), results[0].view(np.uint32))
    finally:
        kernels.set_threads(before)


@pytest.mark.parametrize("fmt", FORMAT_PARAMS)
def test_matmul_1d_and_out(fmt: QuantFormat):
    n_blocks = 2
    k = n_blocks * fmt.block_size
    w = random_rows(fmt, 9, n_blocks, seed=3)
    x = random_activations(6, k, seed=4)
    full = kernels.matmul(w, fmt.ggml_type, x)
    one = kernels.matmul(w, fmt.ggml_type, x[2])
    assert one.shape == (9,)
    np.testing.assert_array_equal(one, kernels.matmul(w, fmt.ggml_type, x[2:3])[0])
    out = np.full((6, 9), np.nan, dtype=np.float32)
    assert kernels.matmul(w, fmt.ggml_type, x, out=out) is out
    np.testing.assert_array_equal(out, full)


def test_float_weights_as_numpy_arrays():
    rng = np.random.default_rng(0)
    w32 = rng.standard_normal((33, 70)).astype(np.float32)
    x = rng.standard_normal((5, 70)).astype(np.float32)
    np.testing.assert_allclose(kernels.matmul(w32, T.F32, x), x.astype(np.float64) @ w32.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(kernels.matmul(w32, T.F32, x), kernels.matmul(w32.view(np.uint8), T.F32, x))
    w16 = w32.astype(np.float16)
    np.testing.assert_array_equal(kernels.matmul(w16, T.F16, x), kernels.matmul(w16.view(np.uint8), T.F16, x))


# --- a real model ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["blk.0.ffn_down.weight", "blk.3.attn_q.weight", "token_embd.weight"])
def test_matmul_on_smollm2_tensors(smollm2_path, name):
    from localinfer.files.gguf_file import GGUFFile

    with GGUFFile(smollm2_path) as f:
        info = f.tensors[name]
        raw = f.tensor_data(name)  # zero-copy, read-only view of the mmap
        assert not raw.flags.writeable
        if name == "token_embd.weight":
            raw = raw[:4096]  # a contiguous slice of rows, still zero-copy
        n_out, k = raw.shape[0], info.shape[-1]
        fmt = FORMATS[info.ggml_type]
        x = np.random.default_rng(1).standard_normal((7, k)).astype(np.float32)
        for m in (1, 7):
            got = kernels.matmul(raw, info.ggml_type, x[:m])
            w = dequantize(raw, info.ggml_type, (n_out, k))
            plain = x[:m].astype(np.float64) @ w.astype(np.float64).T  # no activation quantization
            rel = np.linalg.norm(got - plain) / np.linalg.norm(plain)
            assert rel < 1e-2, f"{name}: relative error {rel:.3g} vs the unquantized product"
            want, scale = reference(np.ascontiguousarray(raw), fmt, x[:m])
            assert_close(got, want, scale)
        del raw, got
