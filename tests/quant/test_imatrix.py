"""Importance matrices: the file formats, the collector's rules, and the sums on a real model
against an independent numpy computation of the first layer's inputs."""
from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from localinfer.arch.weights import DenseLinear, observe_matmuls
from localinfer.formats import dequantize
from localinfer.measure.imatrix import ImatrixCollector, compute_imatrix
from localinfer.quant.imatrix_file import (Imatrix, ImatrixEntry, ImatrixError, read_imatrix, write_imatrix,
                                           write_imatrix_legacy)

TEXT = ("It is a truth universally acknowledged, that a single man in possession of a good fortune, "
        "must be in want of a wife. However little known the feelings or views of such a man may be "
        "on his first entering a neighbourhood, this truth is so well fixed in the minds of the "
        "surrounding families, that he is considered the rightful property of some one or other of "
        "their daughters. ") * 4


def _example() -> Imatrix:
    rng = np.random.default_rng(0)
    return Imatrix({"blk.0.ffn_up.weight": ImatrixEntry(rng.random((1, 64), np.float32) * 100, np.array([1024])),
                    "blk.0.ffn_up_exps.weight": ImatrixEntry(rng.random((3, 32), np.float32), np.array([5, 0, 7]))},
                   ["calib.txt"], 2, 512)


def test_gguf_round_trip(tmp_path):
    im = _example()
    write_imatrix(tmp_path / "m.gguf", im)
    back = read_imatrix(tmp_path / "m.gguf")
    assert (back.datasets, back.chunk_count, back.chunk_size, back.is_legacy) == (["calib.txt"], 2, 512, False)
    for name, e in im.entries.items():
        assert np.array_equal(back.entries[name].sums, e.sums) and np.array_equal(back.entries[name].counts, e.counts)
    w = back.weights_for("blk.0.ffn_up_exps.weight").reshape(3, 32)
    assert np.array_equal(w[0], im.entries["blk.0.ffn_up_exps.weight"].sums[0] / np.float32(5))
    assert (w[1] == 1).all()  # an expert without tokens weighs every column 1, as llama-quantize does
    assert back.weights_for("blk.9.attn_q.weight") is None
    im.datasets = []  # llama.cpp writes the key with no entries then (merged matrices); so must we
    write_imatrix(tmp_path / "none.gguf", im)
    assert read_imatrix(tmp_path / "none.gguf").datasets == []


def test_legacy_round_trip(tmp_path):
    im = _example()
    write_imatrix_legacy(tmp_path / "m.dat", im)
    back = read_imatrix(tmp_path / "m.dat")
    assert back.is_legacy and back.chunk_count == 2 and back.datasets == ["calib.txt"]
    dense = im.entries["blk.0.ffn_up.weight"]
    np.testing.assert_allclose(back.weights_for("blk.0.ffn_up.weight"), dense.sums[0] / 1024, rtol=1e-6)


def test_bad_files(tmp_path):
    write_imatrix_legacy(tmp_path / "m.dat", _example())
    raw = (tmp_path / "m.dat").read_bytes()
    (tmp_path / "cut.dat").write_bytes(raw[:40])
    with pytest.raises(ImatrixError, match="truncated|bad"):
        read_imatrix(tmp_path / "cut.dat")
    (tmp_path / "neg.dat").write_bytes(struct.pack("<i", -5))
    with pytest.raises(ImatrixError, match="not an imatrix"):
        read_imatrix(tmp_path / "neg.dat")
    import gguf
    w = gguf.GGUFWriter(str(tmp_path / "odd.gguf"), arch=None)
    w.add_array("imatrix.datasets", ["x"])
    w.add_uint32("imatrix.chunk_count", 1)
    w.add_uint32("imatrix.chunk_size", 512)
    w.add_tensor("blk.0.attn_q.weight.in_sum2", np.ones((1, 8), np.float32))  # no .counts
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    with pytest.raises(ImatrixError, match="no counts"):
        read_imatrix(tmp_path / "odd.gguf")


def test_collector_rules():
    c = ImatrixCollector({"blk.0.ffn_gate_exps.weight": 4})
    x = np.arange(40 * 8, dtype=np.float32).reshape(40, 8) / 100
    with observe_matmuls(c):
        DenseLinear(np.ones((3, 8), np.float32), names=("blk.0.attn_q.weight", "blk.0.attn_k.weight"))(x)
        DenseLinear(np.ones((3, 8), np.float32), names=("blk.0.attn_output.weight",))(x[:15])  # < 16 rows: skipped
        DenseLinear(np.ones((3, 8), np.float32), names=("token_embd.weight",))(x)  # not blk.*: skipped
        DenseLinear(np.ones((3, 8), np.float32), names=("blk.0.ffn_gate_exps.weight",), expert=2)(x[:3])
    DenseLinear(np.ones((3, 8), np.float32), names=("blk.0.ffn_down.weight",))(x)  # outside the block: unseen
    assert sorted(c.sums) == ["blk.0.attn_k.weight", "blk.0.attn_q.weight", "blk.0.ffn_gate_exps.weight"]
    np.testing.assert_allclose(c.sums["blk.0.attn_q.weight"][0], (x.astype(np.float64) ** 2).sum(0), rtol=1e-12)
    assert c.counts["blk.0.attn_k.weight"].tolist() == [40]
    assert c.counts["blk.0.ffn_gate_exps.weight"].tolist() == [0, 0, 3, 0]  # experts see any number of rows
    assert (c.sums["blk.0.ffn_gate_exps.weight"][[0, 1, 3]] == 0).all()


# the reference backend runs the whole model in numpy (half a minute and more on 2 cores): the slow tier
@pytest.mark.parametrize("backend", ["c", pytest.param("reference", marks=pytest.mark.slow)])
def test_first_layer_sums_on_smollm2(smollm2_path, backend, tmp_path):
    import localinfer
    from localinfer.measure import perplexity as P
    llm = localinfer.load(str(smollm2_path), backend=backend)
    run = compute_imatrix(llm, TEXT, n_ctx=64, n_chunks=2, dataset="t.txt")
    im = run.imatrix
    n_layer = llm.metadata["llama.block_count"]
    per_layer = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]
    assert sorted(im.entries) == sorted(f"blk.{i}.{t}.weight" for i in range(n_layer) for t in per_layer)
    assert all(e.counts.tolist() == [128] for e in im.entries.values())
    assert (im.chunk_count, im.chunk_size, im.datasets) == (2, 64, ["t.txt"])
    # layer 0's q/k/v input, computed here from the file: RMSNorm(token_embd[tokens]) * attn_norm
    f = llm.gguf
    chunks = P.make_chunks(P.text_tokens(llm, TEXT), 64, 2)
    toks = np.concatenate([P.chunk_input(c, P.bos_for_chunks(llm)) for c in chunks])
    emb = f.tensors["token_embd.weight"]
    x = dequantize(f.tensor_data("token_embd.weight")[toks], emb.ggml_type, (len(toks), emb.shape[1])).astype(np.float64)
    norm = dequantize(f.tensor_data("blk.0.attn_norm.weight"), f.tensors["blk.0.attn_norm.weight"].ggml_type, (emb.shape[1],))
    eps = llm.metadata["llama.attention.layer_norm_rms_epsilon"]
    h = x / np.sqrt((x * x).mean(1, keepdims=True) + eps) * norm
    want = (h * h).sum(0)
    for t in ("attn_q", "attn_k", "attn_v"):
        # float32 RMSNorm against float64 here: a few ulps per element, summed over 128 positive terms
        np.testing.assert_allclose(im.entries[f"blk.0.{t}.weight"].sums[0], want, rtol=1e-4)


def test_cli_writes_both_formats(smollm2_path, tmp_path):
    from localinfer.cli.main import main
    (tmp_path / "t.txt").write_text(TEXT)
    for fmt in ("gguf", "dat"):
        out = tmp_path / f"m.{fmt}"
        r = CliRunner().invoke(main, ["imatrix", str(smollm2_path), "-f", str(tmp_path / "t.txt"), "-o", str(out),
                                      "-c", "64", "--chunks", "2", "--output-format", fmt])
        assert r.exit_code == 0, r.output
        assert read_imatrix(out).is_legacy == (fmt == "dat")
    r = CliRunner().invoke(main, ["imatrix", str(smollm2_path), "-f", str(tmp_path / "t.txt"), "-c", "4096"])
    assert r.exit_code != 0 and "needs at least" in r.output
    r = CliRunner().invoke(main, ["imatrix", str(tmp_path / "nothere.gguf"), "-f", str(tmp_path / "t.txt")])
    assert r.exit_code == 1 and "nothere.gguf is neither a file nor a known model name" in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)  # a message, not a traceback


LLAMA_IMATRIX = Path(os.environ.get("LLAMA_IMATRIX") or shutil.which("llama-imatrix") or "llama-imatrix")


@pytest.mark.skipif(not LLAMA_IMATRIX.is_file(), reason="no llama-imatrix binary ($LLAMA_IMATRIX)")
def test_close_to_llama_imatrix(smollm2_path, tmp_path):
    """Same entries and token counts as llama-imatrix; sums close but not equal: the two runtimes'
    activations differ in the last bits (kernels, summation order) and llama-imatrix sums in
    float32. On 4 chunks of 512 tokens of pride_and_prejudice.txt the per-tensor relative L1
    difference was 0.1 % (median) and 0.9 % (largest); the bounds leave room for other CPUs."""
    import localinfer
    (tmp_path / "t.txt").write_text(TEXT)
    subprocess.run([str(LLAMA_IMATRIX), "-m", str(smollm2_path), "-f", str(tmp_path / "t.txt"), "-o",
                    str(tmp_path / "theirs.gguf"), "-c", "64", "-b", "64", "--chunks", "2", "-t", "2"],
                   check=True, capture_output=True)
    theirs = read_imatrix(tmp_path / "theirs.gguf")
    ours = compute_imatrix(localinfer.load(str(smollm2_path)), TEXT, n_ctx=64, n_chunks=2).imatrix
    assert sorted(ours.entries) == sorted(theirs.entries)
    diffs = []
    for name, t in theirs.entries.items():
        o = ours.entries[name]
        assert o.counts.tolist() == t.counts.tolist(), name
        diffs.append(float(np.abs(o.sums - t.sums).sum() / np.abs(t.sums).sum()))
    assert np.median(diffs) < 0.01 and max(diffs) < 0.05, (np.median(diffs), max(diffs))


def test_experts_per_expert_on_a_tiny_qwen3moe(tmp_path):
    """A converted tiny qwen3moe: the expert tensors get one row of sums and one count per expert,
    the counts of a layer adding up to tokens x experts used; quantize then takes them per expert."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import localinfer
    from hf_oracle import SENTENCES, make_hf_model
    from localinfer.quant.convert_hf import convert_hf
    from localinfer.quant.quantize_file import quantize_file
    make_hf_model("qwen3moe", tmp_path, seed=5)
    path = convert_hf(tmp_path, tmp_path / "m.gguf", "f32")
    llm = localinfer.load(str(path))
    run = compute_imatrix(llm, " ".join(SENTENCES * 8), n_ctx=32, n_chunks=2)
    c = llm.runtime.config
    for i in range(c.n_layer):
        for t, width in (("ffn_gate_exps", c.n_embd), ("ffn_up_exps", c.n_embd), ("ffn_down_exps", c.n_ff_exp)):
            e = run.imatrix.entries[f"blk.{i}.{t}.weight"]
            assert e.sums.shape == (c.n_expert, width)
            assert e.counts.sum() == 64 * c.n_expert_used
        assert run.imatrix.entries[f"blk.{i}.ffn_gate_inp.weight"].counts.tolist() == [64]  # the router: dense
    write_imatrix(tmp_path / "imx.gguf", run.imatrix)
    quantize_file(path, tmp_path / "q.gguf", "Q4_0", imatrix=tmp_path / "imx.gguf")
