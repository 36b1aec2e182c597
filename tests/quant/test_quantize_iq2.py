"""IQ2_XXS / IQ2_XS / IQ2_S quantizers without llama.cpp: round trip through our dequantizer,
the importance weights' effect, the block fields, edge rows and bad input.

(Their bytes are checked against llama-quantize in test_quantize_iq2_llamacpp.py.)"""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from localinfer.formats import dequantize
from localinfer.quant.quantize_iq2 import IQ2QuantizeError, quantize_rows_iq2
from localinfer.quant.quantizers import ImatrixRequired, quantize, uses_imatrix

TYPES = [T.IQ2_XXS, T.IQ2_XS, T.IQ2_S]
# Relative RMS error of N(0, 1) rows with uniform importance: measured 0.34 (IQ2_XXS), 0.30
# (IQ2_XS), 0.25 (IQ2_S; 0.26 without an imatrix); the bounds leave room for other random rows,
# not for a worse search.
MAX_REL_RMSE = {T.IQ2_XXS: 0.37, T.IQ2_XS: 0.33, T.IQ2_S: 0.28}


def _scale_nibbles(q: np.ndarray, qtype: T) -> np.ndarray:
    """(n_blocks, sub-blocks) 4-bit sub-block scales of each block."""
    if qtype == T.IQ2_XXS:
        return np.ascontiguousarray(q[:, 2:]).view(np.uint32).reshape(-1, 8, 2)[..., 1] >> 28
    if qtype in (T.IQ2_XS, T.IQ2_S):
        sc = q[:, 66:74] if qtype == T.IQ2_XS else q[:, 74:82]
        return np.stack([sc & 0xF, sc >> 4], axis=-1).reshape(-1, 16)
    raise AssertionError(qtype)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_round_trip_error(qtype):
    x = np.random.default_rng(int(qtype)).standard_normal((64, 512)).astype(np.float32)
    y = dequantize(quantize(x, qtype, np.ones(512, np.float32)), qtype, x.shape)
    rel = np.sqrt(((y - x) ** 2).mean(axis=1) / (x**2).mean(axis=1))
    assert np.median(rel) < MAX_REL_RMSE[qtype] and rel.max() < 1.1 * MAX_REL_RMSE[qtype], (np.median(rel), rel.max())
    # signs survive wherever the value is not tiny (the implied 8th sign flips the least important)
    big = np.abs(x) > 0.5
    assert (np.sign(y[big]) == np.sign(x[big])).mean() > 0.99


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_importance_moves_the_error_to_unimportant_columns(qtype):
    """A few columns a thousand times more important: their weighted error must drop well below
    what the same quantizer gives with uniform importance; the search minimises exactly that."""
    assert uses_imatrix(qtype)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 512)).astype(np.float32)
    qw = np.full(512, 1e-3, np.float32)
    qw[rng.choice(512, 48, replace=False)] = 1.0
    err = {}
    for name, w in (("uniform", np.ones(512, np.float32)), ("weighted", qw), ("none", None)):
        if w is None and qtype != T.IQ2_S:
            continue  # the others have no quantizer without importance weights
        y = dequantize(quantize(x, qtype, w), qtype, x.shape)
        err[name] = float((qw * (y - x) ** 2).sum())
    assert err["weighted"] < 0.6 * min(err["uniform"], err.get("none", np.inf)), err


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_block_fields(qtype):
    """d > 0 and the largest sub-block scale maps to ls = 15 (d = max scale / 31) in every block."""
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((32, 512)) * np.exp(rng.normal(0, 2, (32, 1)))).astype(np.float32)
    q = quantize(x, qtype, np.exp(rng.normal(0, 1, 512)).astype(np.float32))
    blocks = q.reshape(-1, q.shape[1] // 2)
    d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
    assert (d > 0).all() and np.isfinite(d).all()
    assert (_scale_nibbles(blocks, qtype).max(axis=1) == 15).all()


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_edge_rows(qtype):
    rng = np.random.default_rng(3)
    e = np.zeros((5, 256), np.float32)
    e[2] = rng.standard_normal(256) * 0.01
    e[2, 5] = -3.0                      # one huge value among small ones
    e[3] = 1e-20                        # below ggml's "all zero" threshold
    e[4, :32] = rng.standard_normal(32)  # one live sub-block, the rest zero
    qw = np.exp(rng.normal(0, 1, 256)).astype(np.float32)
    q = quantize(e, qtype, qw)
    assert not q[[0, 1, 3]].any()      # zeros: d = 0 and nothing else set
    y = dequantize(q, qtype, e.shape)
    assert np.isfinite(y).all() and not y[[0, 1, 3]].any()
    # the grid has no zero: the 31 small values sit at position 1 and pull the sub-block's
    # least-squares scale down, so the outlier comes back 15% short here
    assert y[2, 5] == pytest.approx(-3.0, rel=0.2)
    # zero sub-blocks get ls = 0, the smallest scale; the grid has no zero, so they come back as
    # +-d (d = the largest sub-block scale / 31 and the grid's smallest value 8 times 1/8)
    d = q[4, :2].copy().view(np.float16).astype(np.float32)[0]
    np.testing.assert_array_equal(np.abs(y[4, 32:]), d)
    assert np.sqrt(((y[4, :32] - e[4, :32]) ** 2).mean() / (e[4, :32] ** 2).mean()) < 0.5
    # rows are independent of each other (threads) and quantizing is deterministic
    np.testing.assert_array_equal(quantize(e[2:3], qtype, qw), q[2:3])


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_non_finite_input_is_refused(qtype):
    x = np.ones((2, 256), np.float32)
    for bad in (np.nan, np.inf):
        y = x.copy()
        y[1, 7] = bad
        with pytest.raises(IQ2QuantizeError, match="NaN or infinite"):
            quantize(y, qtype, np.ones(256, np.float32))
        w = np.ones(256, np.float32)
        w[3] = bad
        with pytest.raises(IQ2QuantizeError, match="importance weights have NaN or infinite"):
            quantize(x, qtype, w)


def test_overflowing_importance_is_an_error_not_garbage():
    """Weights past float32's range make every candidate's error inf; ggml aborts, we refuse."""
    x = np.random.default_rng(4).standard_normal((3, 256)).astype(np.float32) * 1e3
    with pytest.raises(IQ2QuantizeError, match="row 0 .*overflow"):
        quantize_rows_iq2(x, T.IQ2_XXS, np.full(256, 3e38, np.float32))


@pytest.mark.parametrize("qtype", [T.IQ2_XXS, T.IQ2_XS], ids=lambda t: t.name)
def test_types_that_ggml_quantizes_only_with_an_imatrix(qtype):
    with pytest.raises(ImatrixRequired, match=f"{qtype.name} needs an importance matrix.*--imatrix"):
        quantize(np.ones((1, 256), np.float32), qtype)
    with pytest.raises(IQ2QuantizeError, match="--imatrix"):
        quantize_rows_iq2(np.ones((1, 256), np.float32), qtype, None)


def test_iq2_s_without_an_imatrix():
    """ggml quantizes IQ2_S without weights too (error weights sigma2/4 + x^2): the registry's
    plain quantizer, block by block, is that path."""
    x = np.random.default_rng(6).standard_normal((8, 512)).astype(np.float32)
    q = quantize(x, T.IQ2_S)
    np.testing.assert_array_equal(q, quantize_rows_iq2(x, T.IQ2_S, None))
    assert not np.array_equal(q, quantize(x, T.IQ2_S, np.ones(512, np.float32)))
    y = dequantize(q, T.IQ2_S, x.shape)
    rel = np.sqrt(((y - x) ** 2).mean(axis=1) / (x**2).mean(axis=1))
    assert rel.max() < 1.1 * MAX_REL_RMSE[T.IQ2_S]


def test_row_length_must_be_whole_superblocks():
    with pytest.raises(ValueError, match="multiple of the IQ2_XXS block size 256"):
        quantize(np.zeros((2, 320), np.float32), T.IQ2_XXS, np.ones(320, np.float32))
