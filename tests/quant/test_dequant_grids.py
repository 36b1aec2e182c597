"""The grid i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) on many blocks and on
special scales, bit for bit against gguf-py and the C kernels (every ISA), and the C tables against
gguf-py's.

The registry-walking tests (test_dequant.py, tests/kernels) cover a few random blocks; here 4096
blocks per type make every grid index (at most 2048 of them, 32 per block), every 7-bit sign code
and every scale code appear many times over, checked by test_blocks_cover_every_index.
"""

from __future__ import annotations

import os
import re

import gguf.quants
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from localinfer.backend import kernels
from localinfer.formats import FORMATS, dequantize
from localinfer.formats import dequant_grids as dg

GRID_TYPES = [T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ3_XXS, T.IQ3_S, T.IQ1_S, T.IQ1_M]
IDS = [t.name for t in GRID_TYPES]
GRIDS_C = os.path.join(os.path.dirname(__file__), "..", "..", "csrc", "core", "iq_grids.c")
SPECIAL_D = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 6e-8, -65504.0, 1.0], dtype=np.float16)


def _blocks(qtype: T, n_blocks: int, seed: int) -> np.ndarray:
    """random blocks; the first len(SPECIAL_D) get those d values, the others a finite d"""
    size = FORMATS[qtype].type_size
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    d = rng.standard_normal(n_blocks).astype(np.float16)
    d[: len(SPECIAL_D)] = SPECIAL_D
    bits = d.view(np.uint16)
    if qtype == T.IQ1_M:   # d's nibbles are the top nibbles of the four scale u16
        sc = np.ascontiguousarray(raw[:, 48:56]).view(np.uint16)
        for k in range(4):
            sc[:, k] = (sc[:, k] & 0x0FFF) | (((bits >> (4 * k)) & 0xF) << 12)
        raw[:, 48:56] = sc.view(np.uint8)
    else:
        raw[:, 0:2] = bits.view(np.uint8).reshape(-1, 2)
    return raw


def _check(raw: np.ndarray, qtype: T) -> None:
    n = raw.shape[0] * 256
    with np.errstate(invalid="ignore", over="ignore"):
        want = gguf.quants.dequantize(raw, qtype).reshape(-1)
        got = dequantize(raw.reshape(-1), qtype, (n,))
    assert np.isnan(want).any() and np.isinf(want).any()
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    if kernels.available():
        for isa in kernels.supported_isas():
            with kernels._isa(isa):
                c = kernels.dequantize_row(np.ascontiguousarray(raw.reshape(-1)), qtype, n)
            np.testing.assert_array_equal(c.view(np.uint32), want.view(np.uint32), err_msg=isa)


@pytest.mark.parametrize("qtype", GRID_TYPES, ids=IDS)
def test_many_blocks_and_special_scales_bit_identical(qtype):
    raw = _blocks(qtype, 4096, seed=int(qtype))
    _check(raw, qtype)
    if qtype == T.IQ1_M:
        np.testing.assert_array_equal(dg.iq1_m_d(raw)[:8, 0].view(np.uint32),
                                      SPECIAL_D.astype(np.float32).view(np.uint32))


def _grid_indices(qtype: T, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(grid indices, 7-bit sign codes or explicit sign bytes) of raw blocks, read independently of
    the dequantizers: the layouts of csrc/core/quant_blocks.h"""
    n = raw.shape[0]
    if qtype in (T.IQ2_XXS, T.IQ3_XXS):
        grid_bytes, aux = (raw[:, 2:66], raw[:, 66:98]) if qtype == T.IQ3_XXS else (None, None)
        if qtype == T.IQ2_XXS:
            q = np.ascontiguousarray(raw[:, 2:]).view(np.uint32).reshape(n, 8, 2)
            grid_bytes, b = np.ascontiguousarray(q[..., 0]).view(np.uint8), q[..., 1]
        else:
            b = np.ascontiguousarray(aux).view(np.uint32)
        codes = np.stack([(b >> s) & 0x7F for s in (0, 7, 14, 21)])
        return grid_bytes.reshape(-1), codes.reshape(-1)
    if qtype == T.IQ2_XS:
        qs = np.ascontiguousarray(raw[:, 2:66]).view(np.uint16)
        return qs & 511, qs >> 9
    if qtype == T.IQ2_S:
        qh = np.stack([(raw[:, 66:74] >> s) & 3 for s in (0, 2, 4, 6)], axis=-1).reshape(n, 32)
        return raw[:, 2:34].astype(np.int64) | qh.astype(np.int64) << 8, raw[:, 34:66]
    if qtype == T.IQ3_S:
        qh = np.unpackbits(raw[:, 66:74], axis=-1, bitorder="little")
        return raw[:, 2:66].astype(np.int64) | qh.astype(np.int64) << 8, raw[:, 74:106]
    if qtype == T.IQ1_S:
        qh = np.ascontiguousarray(raw[:, 34:50]).view(np.uint16).astype(np.int64)
        hi = np.stack([(qh >> s) & 7 for s in (0, 3, 6, 9)], axis=-1).reshape(n, 32)
        return raw[:, 2:34].astype(np.int64) | hi << 8, (qh >> 12) & 0xF
    nib = np.stack([raw[:, 32:48] & 0xF, raw[:, 32:48] >> 4], axis=-1).reshape(n, 32).astype(np.int64)
    return raw[:, :32].astype(np.int64) | (nib & 7) << 8, nib >> 3


@pytest.mark.parametrize("qtype", GRID_TYPES, ids=IDS)
def test_blocks_cover_every_index(qtype):
    idx, signs = _grid_indices(qtype, _blocks(qtype, 4096, seed=int(qtype)))
    n_points = {T.IQ2_XXS: 256, T.IQ2_XS: 512, T.IQ2_S: 1024, T.IQ3_XXS: 256, T.IQ3_S: 512}.get(qtype, 2048)
    assert len(np.unique(idx)) == n_points
    assert len(np.unique(signs)) == {T.IQ2_XXS: 128, T.IQ2_XS: 128, T.IQ3_XXS: 128, T.IQ1_S: 16, T.IQ1_M: 2}.get(
        qtype, 256)


def _c_array(text: str, name: str) -> np.ndarray:
    m = re.search(rf"{name}\[[^=]*=\s*\{{(.*?)\}};", text, re.S)
    assert m, name
    return np.array([int(v) for v in re.findall(r"-?\d+", m.group(1))])


@pytest.mark.skipif(not os.path.exists(GRIDS_C), reason="no csrc/ beside the tests (an installed package)")
def test_c_tables_are_gguf_py_tables():
    """csrc/core/iq_grids.c is generated by csrc/gen_iq_grids.py: stale output would fail here"""
    with open(GRIDS_C) as f:
        text = f.read()
    for name, grid in [("li_iq2xxs_grid", dg.GRID_IQ2_XXS), ("li_iq2xs_grid", dg.GRID_IQ2_XS),
                       ("li_iq2s_grid", dg.GRID_IQ2_S), ("li_iq3xxs_grid", dg.GRID_IQ3_XXS),
                       ("li_iq3s_grid", dg.GRID_IQ3_S), ("li_iq1s_grid", dg.GRID_IQ1_S)]:
        np.testing.assert_array_equal(_c_array(text, name), grid.reshape(-1).astype(np.int64), err_msg=name)
    np.testing.assert_array_equal(_c_array(text, "li_ksigns_iq2xs"), dg.KSIGNS)
    even = np.where(np.unpackbits(dg.KSIGNS[:, None], axis=1, bitorder="little") == 1, -1, 1)
    np.testing.assert_array_equal(_c_array(text, "li_keven_signs_iq2xs"), even.reshape(-1))
    # spot values of ggml-common.h's tables, as an anchor independent of gguf-py
    assert list(dg.GRID_IQ2_XXS[1]) == [0x2b, 8, 8, 8, 8, 8, 8, 8]   # iq2xxs_grid[1] = 0x080808080808082b
    assert list(dg.GRID_IQ3_XXS[1]) == [0x14, 4, 4, 4]               # iq3xxs_grid[1] = 0x04040414
    assert list(dg.KSIGNS[:4]) == [0, 129, 130, 3]


@pytest.mark.parametrize("qtype", GRID_TYPES, ids=IDS)
def test_truncated_tensor_is_a_clear_error(tmp_path, qtype):
    from gguf import GGUFWriter

    from localinfer.files.gguf_file import GGUFError, GGUFFile

    raw = _blocks(qtype, 8, seed=1)[8 - 2 :].reshape(2, -1)   # two rows of one finite block each
    w = GGUFWriter(str(tmp_path / "t.gguf"), "llama")
    w.add_tensor("w.weight", raw, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    data = (tmp_path / "t.gguf").read_bytes()
    f = GGUFFile(tmp_path / "t.gguf")
    t = f.tensors["w.weight"]
    assert (t.ggml_type, t.shape) == (qtype, (2, 256))
    (tmp_path / "cut.gguf").write_bytes(data[: t.offset + t.nbytes - 3])   # its last 3 bytes missing
    with pytest.raises(GGUFError, match="truncated"):
        GGUFFile(tmp_path / "cut.gguf")
    if kernels.available():   # a row that is not whole blocks, handed to the C matmul directly
        with pytest.raises(ValueError, match=f"whole blocks of {FORMATS[qtype].type_size} bytes"):
            kernels.prepare(np.ascontiguousarray(raw[:, :-1]), qtype)


@pytest.mark.skipif(not kernels.available(), reason="C kernels not built")
@pytest.mark.parametrize("qtype", GRID_TYPES, ids=IDS)
@pytest.mark.parametrize("m", [1, 8], ids=["gemv", "gemm"])
def test_matmul_with_nan_and_inf_scales(qtype, m):
    """a block whose d is inf or NaN makes its row's outputs non-finite, as the float product of the
    dequantized matrix does; the other rows stay what they were (every ISA)"""
    raw = _blocks(qtype, 16 * 2, seed=7)[len(SPECIAL_D) :]   # 24 blocks, finite d
    raw[[0, 5]] = _blocks(qtype, len(SPECIAL_D), seed=8)[[2, 4]]   # an inf d, a NaN d
    w = np.ascontiguousarray(raw.reshape(12, -1))               # 12 rows of 2 blocks
    x = np.random.default_rng(0).standard_normal((m, 512)).astype(np.float32)
    finite = np.ones(12, bool)
    finite[[0, 2]] = False                                     # blocks 0 and 5 sit in rows 0 and 2
    for isa in kernels.supported_isas():
        with kernels._isa(isa):
            y = kernels.matmul(w, qtype, x)
        assert not np.isfinite(y[:, ~finite]).any(), isa
        assert np.isfinite(y[:, finite]).all(), isa
        with np.errstate(invalid="ignore"):
            ref = x.astype(np.float64) @ dequantize(w[finite], qtype, (int(finite.sum()), 512)).T.astype(np.float64)
        # only the activations' 8-bit rounding (Q8_K, half a step of amax / 127) separates the two
        np.testing.assert_allclose(y[:, finite], ref, rtol=0.02, atol=0.02 * np.abs(ref).max(), err_msg=isa)
