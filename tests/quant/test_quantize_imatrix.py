"""`quantize --imatrix` without llama.cpp: what the weights do, and the errors.

(The bytes are checked against llama-quantize in test_imatrix_quantize_llamacpp.py.)"""
from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from gguf import GGMLQuantizationType as T

import synthetic_gguf
from localinfer.cli.main import main
from localinfer.files.gguf_file import GGUFFile
from localinfer.formats import dequantize
from localinfer.quant.imatrix_file import Imatrix, ImatrixEntry, write_imatrix
from localinfer.quant.quantize_file import QuantizeError, quantize_file
from localinfer.quant.quantizers import quantize, uses_imatrix

WEIGHTED = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.IQ4_NL, T.IQ4_XS]


@pytest.mark.parametrize("qtype", WEIGHTED, ids=lambda t: t.name)
def test_weights_move_the_error_to_unimportant_columns(qtype):
    """With a few columns a thousand times more important, their weighted error must drop well
    below the unweighted quantizer's; the search minimises exactly that error."""
    assert uses_imatrix(qtype)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 512)).astype(np.float32)
    qw = np.full(512, 1e-3, np.float32)
    qw[rng.choice(512, 48, replace=False)] = 1.0
    err = {}
    for name, w in (("plain", None), ("weighted", qw)):
        y = dequantize(quantize(x, qtype, w), qtype, x.shape)
        err[name] = float((qw * (y - x) ** 2).sum())
    assert err["weighted"] < 0.8 * err["plain"], err


def test_imatrix_ignored_by_types_without_a_weighted_path():
    x = np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32)
    assert np.array_equal(quantize(x, T.Q8_0, np.ones(64, np.float32)), quantize(x, T.Q8_0))


def test_bad_imatrix_shape():
    x = np.zeros((2, 64), np.float32)
    with pytest.raises(ValueError, match="imatrix has shape"):
        quantize(x, T.Q4_0, np.ones(32, np.float32))


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("qimx")
    t = synthetic_gguf.write(d / "m.gguf")
    good = Imatrix({n: ImatrixEntry(np.ones((1, x.shape[1]), np.float32) * 512, np.array([512]))
                    for n, x in t.items() if n.startswith("blk.") and x.ndim == 2}, ["t.txt"], 1, 512)
    write_imatrix(d / "good.gguf", good)
    bad = Imatrix(dict(good.entries), ["t.txt"], 1, 512)
    bad.entries["blk.3.attn_q.weight"] = ImatrixEntry(np.ones((1, 100), np.float32), np.array([512]))
    write_imatrix(d / "bad.gguf", bad)
    return d


def test_q2_k_s_needs_an_imatrix(model, tmp_path):
    with pytest.raises(QuantizeError, match="needs an importance matrix"):
        quantize_file(model / "m.gguf", tmp_path / "o.gguf", "Q2_K_S")
    assert not (tmp_path / "o.gguf").exists()
    r = quantize_file(model / "m.gguf", tmp_path / "o.gguf", "Q2_K_S", imatrix=model / "good.gguf")
    with GGUFFile(r.path) as f:
        assert f.metadata["quantize.imatrix.file"] == str(model / "good.gguf")
        assert f.metadata["quantize.imatrix.dataset"] == "t.txt"
        assert f.metadata["quantize.imatrix.entries_count"] == 8 * 7  # the 2-D blk.* weights of 8 layers
        assert f.metadata["quantize.imatrix.chunks_count"] == 1


def test_imatrix_for_another_model_is_refused(model, tmp_path):
    r = CliRunner().invoke(main, ["quantize", "-q", "--imatrix", str(model / "bad.gguf"), str(model / "m.gguf"),
                                  str(tmp_path / "o.gguf"), "Q4_K_M"])
    assert r.exit_code != 0 and "blk.3.attn_q.weight" in r.output and "another model" in r.output
    assert not (tmp_path / "o.gguf").exists()


def test_unreadable_imatrix(model, tmp_path):
    (tmp_path / "junk.dat").write_bytes(b"\x00\x00")
    with pytest.raises(QuantizeError, match="cannot read the imatrix"):
        quantize_file(model / "m.gguf", tmp_path / "o.gguf", "Q4_K_M", imatrix=tmp_path / "junk.dat")


def test_q4_0_ffn_down_rule_needs_the_imatrix(model, tmp_path):
    """llama.cpp gives the first eighth of ffn_down Q4_1 in a Q4_0 file only with an imatrix."""
    plain = quantize_file(model / "m.gguf", tmp_path / "a.gguf", "Q4_0")
    weighted = quantize_file(model / "m.gguf", tmp_path / "b.gguf", "Q4_0", imatrix=model / "good.gguf")
    with GGUFFile(plain.path) as a, GGUFFile(weighted.path) as b:
        assert a.tensors["blk.0.ffn_down.weight"].ggml_type == T.Q4_0
        assert b.tensors["blk.0.ffn_down.weight"].ggml_type == T.Q4_1
        assert b.tensors["blk.1.ffn_down.weight"].ggml_type == T.Q4_0


def test_each_expert_uses_its_own_weights(tmp_path, monkeypatch):
    """A 3-D expert tensor: expert e's rows are quantized with the imatrix's row e, also when a
    slab of rows would otherwise straddle two experts."""
    import gguf

    from localinfer.quant import quantize_file as qf
    rng = np.random.default_rng(3)
    n_exp, rows, cols = 4, 64, 256
    x = rng.standard_normal((n_exp, rows, cols)).astype(np.float32)
    w = gguf.GGUFWriter(str(tmp_path / "moe.gguf"), "llama")
    w.add_block_count(1)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    w.add_tensor("blk.0.ffn_up_exps.weight", x)
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    sums = np.exp(rng.normal(0, 2, (n_exp, cols))).astype(np.float32)
    write_imatrix(tmp_path / "imx.gguf", Imatrix({"blk.0.ffn_up_exps.weight": ImatrixEntry(sums, np.array([3, 5, 7, 9]))},
                                                  ["t"], 1, 512))
    monkeypatch.setattr(qf, "SLAB_ELEMENTS", 48 * cols)  # slabs of 48 rows against experts of 64
    quantize_file(tmp_path / "moe.gguf", tmp_path / "o.gguf", "Q4_K_M", imatrix=tmp_path / "imx.gguf", pure=True)
    with GGUFFile(tmp_path / "o.gguf") as f:
        got = np.asarray(f.tensor_data("blk.0.ffn_up_exps.weight")).reshape(n_exp, rows, -1)
    for e, count in enumerate([3, 5, 7, 9]):
        assert np.array_equal(got[e], quantize(x[e], T.Q4_K, sums[e] / np.float32(count))), e
