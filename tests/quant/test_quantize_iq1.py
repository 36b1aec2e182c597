"""The IQ1_S / IQ1_M quantizers without llama.cpp: errors, the imatrix's effect, block fields, edge rows.

(The bytes are checked against llama-quantize in test_iq1_quantize_llamacpp.py.)"""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from localinfer.formats import dequantize
from localinfer.formats.dequant_grids import QK_K
from localinfer.quant.quantizers import ImatrixRequired
from localinfer.quant.quantizers import QUANTIZERS, can_quantize_to, quantize, uses_imatrix

IQ1 = [T.IQ1_S, T.IQ1_M]
# median / worst relative RMS error of a Gaussian row with flat importance: 3 levels per weight
# and 1.5-1.75 bits leave about half the signal's RMS (measured: IQ1_S 0.49 / 0.53, IQ1_M 0.45 / 0.48)
MAX_REL_RMSE = {T.IQ1_S: (0.53, 0.60), T.IQ1_M: (0.49, 0.55)}


def _rows(n=64, cols=512, seed=1):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, cols)) * rng.uniform(1e-3, 2, (n, 1))).astype(np.float32)


def _rel_rmse(x, y):
    return np.sqrt(((y - x) ** 2).mean(axis=1) / (x**2).mean(axis=1))


def _iq1_s_fields(q):
    """IQ1_S blocks (n, 50) -> d (n,), grid indices (n, 32), scale codes l (n, 8), delta signs (n, 8)."""
    d = np.ascontiguousarray(q[:, :2]).view(np.float16)[:, 0].astype(np.float32)
    qh = np.ascontiguousarray(q[:, 34:50]).view(np.uint16).astype(np.int64)
    high = (qh[:, :, None] >> np.array([0, 3, 6, 9])) & 7
    idx = q[:, 2:34].astype(np.int64) | high.reshape(-1, 32) << 8
    return d, idx, (qh >> 12) & 7, qh >> 15


def _iq1_m_fields(q):
    """IQ1_M blocks (n, 56) -> d (n,), grid indices (n, 32), scale codes l (n, 16), delta signs (n, 32)."""
    sc = np.ascontiguousarray(q[:, 48:56]).view(np.uint16).astype(np.int64)
    d_bits = sum(((sc[:, i] >> 12) & 0xF) << (4 * i) for i in range(4))
    d = d_bits.astype(np.uint16).view(np.float16).astype(np.float32)
    nib = np.stack([q[:, 32:48] & 0xF, q[:, 32:48] >> 4], axis=-1).reshape(-1, 32).astype(np.int64)
    idx = q[:, :32].astype(np.int64) | (nib & 7) << 8
    ls = ((sc[:, :, None] >> np.array([0, 3, 6, 9])) & 7).reshape(-1, 16)
    return d, idx, ls, nib >> 3


def _block_d(q, qtype):
    """The super-block scale d of each block (n, bytes) -> (n,)."""
    if qtype == T.IQ1_S:
        return _iq1_s_fields(q.reshape(-1, 50))[0]
    return _iq1_m_fields(q.reshape(-1, 56))[0]


@pytest.mark.parametrize("qtype", IQ1, ids=lambda t: t.name)
def test_round_trip_error(qtype):
    x = _rows()
    y = dequantize(quantize(x, qtype, np.ones(x.shape[1], np.float32)), qtype, x.shape)
    rel = _rel_rmse(x, y)
    med, worst = MAX_REL_RMSE[qtype]
    assert np.median(rel) < med and rel.max() < worst, (np.median(rel), rel.max())
    # the best constant-scale fit never does worse than zero: the error is below the signal
    assert (rel < 1).all()


@pytest.mark.parametrize("qtype", IQ1, ids=lambda t: t.name)
def test_weights_move_the_error_to_important_columns(qtype):
    """A few columns a thousand times more important: their weighted error must drop well below
    what flat weights give (the search minimises exactly that error)."""
    assert uses_imatrix(qtype) and can_quantize_to(qtype)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 512)).astype(np.float32)
    qw = np.full(512, 1e-3, np.float32)
    qw[rng.choice(512, 48, replace=False)] = 1.0
    err = {}
    for name, w in (("flat", np.ones(512, np.float32)), ("weighted", qw)):
        y = dequantize(quantize(x, qtype, w), qtype, x.shape)
        err[name] = float((qw * (y - x) ** 2).sum())
    assert err["weighted"] < 0.6 * err["flat"], err


def test_iq1_s_block_fields():
    """d >= 0 from the largest sub-block scale: that sub-block gets the top scale code 7
    (d = max / 15 and l = round((15 - 1) / 2)); grid indices are 11 bits; rows are independent."""
    x = _rows(n=32, cols=1024)
    qw = np.exp(np.random.default_rng(2).normal(0, 2, 1024)).astype(np.float32)
    q = quantize(x, T.IQ1_S, qw)
    assert q.shape == (32, 4 * 50)
    d, idx, ls, _ = _iq1_s_fields(q.reshape(-1, 50))
    assert np.isfinite(d).all() and (d > 0).all()
    assert (ls.max(axis=1) == 7).all()
    assert ((idx >= 0) & (idx < 2048)).all()
    np.testing.assert_array_equal(quantize(x[5:7], T.IQ1_S, qw), q[5:7])


@pytest.mark.parametrize("qtype", IQ1, ids=lambda t: t.name)
def test_edge_rows(qtype):
    x = _rows(n=4, cols=QK_K)
    qw = np.ones(QK_K, np.float32)
    x[0] = 0
    x[1] = -0.0
    x[2, 100] = 1e4          # one huge value among N(0, <2) ones
    x[3, 32:64] = 1e-13      # a sub-block below ggml's all-zero threshold
    q = quantize(x, qtype, qw)
    assert not q[:2].any()   # zero rows: d = 0 and nothing else set
    y = dequantize(q, qtype, x.shape)
    assert np.isfinite(y).all()
    assert y[2, 100] == pytest.approx(1e4, rel=0.15)
    # a skipped sub-block keeps grid point 0 at the smallest scale code: |y| <= d * (1 + 1/8), the
    # least the format can store there (ggml's choice: it writes no "zero" sub-block)
    d = _block_d(q[3:4], qtype)
    assert np.abs(y[3, 32:64]).max() <= d * 1.125


@pytest.mark.parametrize("qtype", IQ1, ids=lambda t: t.name)
def test_bad_input_is_refused(qtype):
    x = _rows(n=2, cols=QK_K)
    qw = np.ones(QK_K, np.float32)
    for bad in (np.nan, np.inf, -np.inf):
        y = x.copy()
        y[1, 7] = bad
        with pytest.raises(ValueError, match="NaN or infinite"):
            quantize(y, qtype, qw)
        w = qw.copy()
        w[3] = bad
        with pytest.raises(ValueError, match="importance weights must be finite"):
            quantize(x, qtype, w)
    y = x.copy()
    y[1, 9] = 1e20   # finite, but its square is not: ggml's search would compare NaNs
    with pytest.raises(ValueError, match="row 1 has values too large"):
        quantize(y, qtype, qw)
    with pytest.raises(ValueError, match="multiple of the .* block size 256"):
        quantize(np.zeros((2, 320), np.float32), qtype, np.ones(320, np.float32))
    with pytest.raises(ValueError, match="imatrix has shape"):
        quantize(x, qtype, np.ones(128, np.float32))


def test_iq1_m_block_fields():
    """The largest sub-block scale gets code 7 (codes against max / 15); d is then refitted over the
    super-block and stays positive; indices are 11 bits; IQ1_M also quantizes without an imatrix
    (ggml weights by x^2 then), differently from with one."""
    x = _rows(n=32, cols=1024)
    qw = np.exp(np.random.default_rng(2).normal(0, 2, 1024)).astype(np.float32)
    q = quantize(x, T.IQ1_M, qw)
    assert q.shape == (32, 4 * 56)
    d, idx, ls, _ = _iq1_m_fields(q.reshape(-1, 56))
    assert np.isfinite(d).all() and (d > 0).all()
    assert (ls.max(axis=1) == 7).all()
    assert ((idx >= 0) & (idx < 2048)).all()
    np.testing.assert_array_equal(quantize(x[5:7], T.IQ1_M, qw), q[5:7])
    plain = quantize(x, T.IQ1_M)
    assert T.IQ1_M in QUANTIZERS and not np.array_equal(plain, q)
    y = dequantize(plain, T.IQ1_M, x.shape)
    # x^2 weights spend the levels on the large values: a worse plain RMS error (measured 0.59)
    assert np.median(_rel_rmse(x, y)) < 0.65


def test_iq1_s_needs_an_imatrix():
    """ggml asserts an imatrix for IQ1_S: the error says how to make one."""
    assert T.IQ1_S not in QUANTIZERS
    with pytest.raises(ImatrixRequired, match="--imatrix"):
        quantize(_rows(n=2, cols=QK_K), T.IQ1_S)


def test_file_with_iq1_s_tensors_needs_their_imatrix(tmp_path):
    """--pure IQ1_S (every tensor IQ1_S, the embeddings too, which the mix's own refusal exempts) is
    refused before anything is written when a tensor has no imatrix entry."""
    import synthetic_gguf
    from localinfer.quant.imatrix_file import Imatrix, ImatrixEntry, write_imatrix
    from localinfer.quant.quantize_file import QuantizeError, quantize_file
    t = synthetic_gguf.write(tmp_path / "m.gguf")
    with pytest.raises(QuantizeError, match="IQ1_S needs an importance matrix for tensors like .*--imatrix"):
        quantize_file(tmp_path / "m.gguf", tmp_path / "o.gguf", "IQ1_S", pure=True)
    im = Imatrix({n: ImatrixEntry(np.ones((1, x.shape[1]), np.float32), np.array([1]))
                  for n, x in t.items() if n.startswith("blk.") and x.ndim == 2}, ["t.txt"], 1, 512)
    write_imatrix(tmp_path / "im.gguf", im)
    with pytest.raises(QuantizeError, match="'token_embd.weight' \\(IQ1_S\\) and the imatrix .* has no entry for it"):
        quantize_file(tmp_path / "m.gguf", tmp_path / "o.gguf", "IQ1_S", pure=True, imatrix=tmp_path / "im.gguf")
    assert not (tmp_path / "o.gguf").exists()
    # with an entry for every tensor it goes through, each IQ1_S tensor being quantize()'s
    im.entries["token_embd.weight"] = ImatrixEntry(np.full((1, t["token_embd.weight"].shape[1]), 2, np.float32),
                                                   np.array([1]))
    write_imatrix(tmp_path / "im.gguf", im)
    quantize_file(tmp_path / "m.gguf", tmp_path / "o.gguf", "IQ1_S", pure=True, imatrix=tmp_path / "im.gguf")
    from localinfer.files.gguf_file import GGUFFile
    with GGUFFile(tmp_path / "o.gguf") as f:
        names = [n for n, info in f.tensors.items() if info.ggml_type == T.IQ1_S]
        assert "token_embd.weight" in names and "blk.7.attn_q.weight" in names
        for n in names:
            want = quantize(t[n], T.IQ1_S, im.entries[n].importance())
            assert np.array_equal(np.asarray(f.tensor_data(n)).reshape(want.shape), want), n
