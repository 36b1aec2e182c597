"""IQ3_XXS and IQ3_S quantizers without llama.cpp: round trips through our dequantizers, what the
importance weights do, the block contents, and bad input.

(The bytes are checked against llama-quantize in test_iq3_quantize_llamacpp.py.)"""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from localinfer.formats import dequantize
from localinfer.formats.dequant_grids import KSIGNS
from localinfer.quant.quantize_iq3 import nearest_int_bits, quantize_rows_iq3
from localinfer.quant.quantizers import QUANTIZERS, quantize, uses_imatrix

IQ3 = [T.IQ3_XXS, T.IQ3_S]
# Relative RMS error of a round trip on Gaussian rows: measured 0.215 (IQ3_XXS) and 0.166 (IQ3_S);
# a uniform 3-bit quantizer would be ~0.19. The bounds leave room for other random draws only.
MAX_REL_RMSE = {T.IQ3_XXS: 0.23, T.IQ3_S: 0.18}


def _rows(n, cols, seed):
    """Gaussian rows at many scales, through fp16 as a real F16 model's weights are."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, cols)) * rng.uniform(1e-3, 2, (n, 1))
    return x.astype(np.float16).astype(np.float32)


def _rel_rmse(x, y):
    return np.sqrt(((y - x) ** 2).mean(axis=1) / (x ** 2).mean(axis=1))


@pytest.mark.parametrize("qtype", IQ3, ids=lambda t: t.name)
def test_registered_with_and_without_imatrix(qtype):
    # ggml quantizes both without an imatrix too (weights x^2); llama-quantize's refusal of IQ3_XXS
    # files without one is a file-type rule
    assert qtype in QUANTIZERS and uses_imatrix(qtype)


@pytest.mark.parametrize("qtype", IQ3, ids=lambda t: t.name)
def test_round_trip(qtype):
    x = _rows(96, 512, seed=int(qtype))
    for qw in (None, np.ones(512, np.float32)):
        y = dequantize(quantize(x, qtype, qw), qtype, x.shape)
        rel = _rel_rmse(x, y)
        assert np.median(rel) < MAX_REL_RMSE[qtype] and rel.max() < MAX_REL_RMSE[qtype] * 1.25, rel.max()
    # deterministic, and each row independent of the others (rows run on numba threads)
    np.testing.assert_array_equal(quantize(x[5:8], qtype), quantize(x, qtype)[5:8])


@pytest.mark.parametrize("qtype", IQ3, ids=lambda t: t.name)
def test_importance_moves_the_error_to_unimportant_columns(qtype):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 512)).astype(np.float32)
    qw = np.full(512, 1e-3, np.float32)
    qw[rng.choice(512, 48, replace=False)] = 1.0
    err = {}
    for name, w in (("plain", None), ("weighted", qw)):
        y = dequantize(quantize(x, qtype, w), qtype, x.shape)
        err[name] = float((qw * (y - x) ** 2).sum())
    assert err["weighted"] < 0.8 * err["plain"], err


def _sub_block_fields(q, qtype):
    """(n, 256 bytes) -> (fp16 d (n,), 4-bit scales (n, 8), sign bytes (n, 32))."""
    d = q[:, 0:2].copy().view(np.float16)[:, 0].astype(np.float32)
    if qtype == T.IQ3_XXS:
        aux = np.ascontiguousarray(q[:, 66:98]).view(np.uint32)
        codes = (aux[..., None] >> np.array([0, 7, 14, 21], np.uint32)) & np.uint32(0x7F)
        return d, (aux >> 28).astype(np.int32), KSIGNS[codes].reshape(-1, 32)
    sc = q[:, 106:110]
    return d, np.stack([sc & 15, sc >> 4], axis=-1).reshape(-1, 8).astype(np.int32), q[:, 74:106]


@pytest.mark.parametrize("qtype", IQ3, ids=lambda t: t.name)
def test_block_contents(qtype):
    """d > 0 with the largest sub-block scale at the top of the 4-bit range; the stored signs are the
    weights' signs (IQ3_XXS: all but at most one per 8, its sign count being even)."""
    x = _rows(64, 256, seed=3)
    q = quantize(x, qtype)
    d, scales, sign_bytes = _sub_block_fields(q, qtype)
    assert (d > 0).all() and np.isfinite(d).all()
    assert (scales.max(axis=1) >= 14).all()  # max scale / d = 31 * 1.0125 (1.033): level 14 or 15
    negative = np.unpackbits(sign_bytes[..., None], axis=-1, bitorder="little").reshape(-1, 256).astype(bool)
    wrong = (negative != (x < 0)).reshape(-1, 32, 8).sum(axis=-1)
    if qtype == T.IQ3_XXS:
        assert wrong.max() <= 1 and ((negative.reshape(-1, 32, 8).sum(-1) % 2) == 0).all()
    else:
        assert wrong.max() == 0


@pytest.mark.parametrize("qtype", IQ3, ids=lambda t: t.name)
def test_zero_rows_and_one_outlier(qtype):
    x = np.zeros((4, 256), np.float32)
    x[1] = -0.0
    x[2, 10] = 65504.0  # the largest f16 weight, alone (in the first sub-block: IQ3_S shifts the later ones)
    x[3] = np.random.default_rng(4).standard_normal(256).astype(np.float32) * 0.01
    x[3, 7] = -60000.0   # and among small ones
    for qw in (None, np.ones(256, np.float32)):
        q = quantize(x, qtype, qw)
        assert not q[:2].any()  # empty rows: all-zero blocks
        y = dequantize(q, qtype, x.shape)
        assert np.isfinite(y).all() and not y[:2].any()
        assert y[2, 10] == pytest.approx(65504.0, rel=0.05) and y[3, 7] == pytest.approx(-60000.0, rel=0.05)


def test_iq3_s_empty_sub_block_shifts_the_later_ones():
    """ggml's IQ3_S skips an empty sub-block without moving its index / sign pointers, so the next
    sub-blocks' grid indices and signs are written 8 / 4 bytes early (their qh bits and scales stay in
    place). We write the same bytes; without an imatrix each sub-block's search is independent of
    the others, so the shifted bytes are those of the same row with the first sub-block filled."""
    full = np.random.default_rng(5).standard_normal((1, 256)).astype(np.float32)
    holed = full.copy()
    holed[0, :32] = 0
    a, b = quantize(full, T.IQ3_S)[0], quantize(holed, T.IQ3_S)[0]
    qs, signs = slice(2, 66), slice(74, 106)
    np.testing.assert_array_equal(b[qs][:56], a[qs][8:])
    assert not b[qs][56:].any()
    np.testing.assert_array_equal(b[signs][:28], a[signs][4:])
    assert b[66] & 0xFF == 0 and (b[67:74] == a[67:74]).all()  # qh: sub-block 0 empty, the rest in place


@pytest.mark.parametrize("qtype", IQ3, ids=lambda t: t.name)
def test_bad_input_is_refused(qtype):
    x = np.random.default_rng(6).standard_normal((3, 256)).astype(np.float32)
    for bad in (np.nan, np.inf, -np.inf):
        y = x.copy()
        y[1, 9] = bad
        with pytest.raises(ValueError, match="NaN or infinite"):
            quantize(y, qtype)
    with pytest.raises(ValueError, match="NaN or infinite"):
        quantize(x, qtype, np.where(np.arange(256) == 3, np.nan, 1).astype(np.float32))
    y = x.copy()
    y[2, 0] = 1e10  # llama-quantize: "found inf value" in the fp16 d
    with pytest.raises(ValueError, match="row 2 .* too large for the fp16 scale"):
        quantize(y, qtype, np.ones(256, np.float32))
    y[2, 0] = 1e20  # ggml: GGML_ASSERT(grid_index >= 0) in the neighbour search
    with pytest.raises(ValueError, match="row 2 .* overflow float32"):
        quantize_rows_iq3(y, qtype)
    with pytest.raises(ValueError, match="multiple of the .* block size 256"):
        quantize(np.zeros((2, 320), np.float32), qtype)
    with pytest.raises(ValueError, match="imatrix has shape"):
        quantize(x, qtype, np.ones(128, np.float32))


def test_nearest_int_is_ggmls_bit_trick_everywhere():
    """ggml reads the low 23 bits of v + 1.5 * 2^23; beyond |v| < 2^22 that is not rounding."""
    rng = np.random.default_rng(7)
    v = np.concatenate([rng.uniform(-100, 100, 2000), rng.uniform(-1, 1, 2000) * 10.0 ** rng.integers(5, 38, 2000),
                        [0.5, 1.5, 2.5, -0.5, -2.5, 4194303.0, 4194303.5, 4194304.0, -4194304.5, -12582912.0,
                         8388608.0, 3e38, -3e38]]).astype(np.float32)
    with np.errstate(over="ignore"):
        bits = (v + np.float32(12582912.0)).view(np.int32)
    want = (bits & 0x007FFFFF) - 0x00400000
    got = np.array([nearest_int_bits(a) for a in v])
    np.testing.assert_array_equal(got, want)
