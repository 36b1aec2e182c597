"""IQ3_XXS and IQ3_S against llama-quantize, tensor for tensor (skipped without the binary:
$LLAMA_QUANTIZE or llama-quantize on PATH).

llama-quantize writes a synthetic model in a file type that uses the type; every tensor of that
type in its file must equal our ``quantize(source, type, imatrix row)`` byte for byte (whole-file
identity also needs the file-type mixes, tested elsewhere). ggml's IQ3 search is deterministic:
sequential float32 loops, and neighbour lists sorted by (distance, index). The source has rows
built to reach the rare paths: empty sub-blocks and super-blocks, -0.0, one f16-sized outlier, odd
counts of minus signs, ties, and sub-blocks whose importance is all zero.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

import synthetic_gguf
from localinfer.files.gguf_file import GGUFFile
from localinfer.quant.imatrix_file import Imatrix, ImatrixEntry, read_imatrix, write_imatrix
from localinfer.quant.quantizers import quantize

LLAMA_QUANTIZE = Path(os.environ.get("LLAMA_QUANTIZE") or shutil.which("llama-quantize") or "llama-quantize")

pytestmark = pytest.mark.skipif(not LLAMA_QUANTIZE.is_file(), reason="no llama-quantize binary ($LLAMA_QUANTIZE)")

EDGE_TENSORS = ("blk.0.ffn_up.weight", "blk.0.attn_output.weight")  # IQ3_XXS / IQ3_S in both file types


def edge_rows(n_cols: int, rng) -> np.ndarray:
    """Rows of n_cols (a multiple of 256) that take ggml's rare branches."""
    rows = [np.zeros(n_cols), -np.zeros(n_cols)]
    r = rng.standard_normal((8, n_cols)) * 0.05
    r[0, :32] = 0  # an empty first sub-block: IQ3_S then writes the others' indices 8 bytes early
    r[1, 64:96] = r[1, 160:192] = 0
    r[2, 100] = 65504.0  # the largest f16
    r[3, :] = 0
    r[3, 7] = -60000.0
    r[4, :] = 0.125  # all equal: ties everywhere
    r[5, :] = np.tile([-1.0, 1, 1, 1, 1, 1, 1, 1], n_cols // 8) * 0.02  # one minus sign per 8
    r[6, :] = np.round(rng.standard_normal(n_cols) * 4) / 8  # exact halves after scaling
    r[7, :] = rng.standard_normal(n_cols) * 6e-8  # f16 subnormals
    return np.concatenate([rows, r]).astype(np.float16)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("iq3-llamacpp")
    rng = np.random.default_rng(5)
    t = {n: x.astype(np.float16) if x.ndim == 2 else x for n, x in synthetic_gguf.tensors(seed=3).items()}
    for name in EDGE_TENSORS:
        e = edge_rows(t[name].shape[1], rng)
        t[name][: len(e)] = e
    synthetic_gguf.write_file(d / "m.gguf", t, tokenizer_model=None)
    im = Imatrix(datasets=["synthetic.txt"], chunk_count=3, chunk_size=512)
    for name, x in t.items():
        if x.ndim == 2 and name.startswith("blk."):
            sums = (np.exp(rng.normal(0, 2, (1, x.shape[1]))) * 1536).astype(np.float32)
            if name in EDGE_TENSORS:
                sums[0, 32:64] = 0  # a sub-block that does not matter at all
                sums[0, 200:203] = 0
            im.entries[name] = ImatrixEntry(sums, np.array([1536], np.int64))
    write_imatrix(d / "m.imatrix.gguf", im)
    return d, {n: x.astype(np.float32) for n, x in t.items()}


def _llama_quantize(model_dir: Path, out: Path, ftype: str, extra: list[str]) -> Path:
    subprocess.run([str(LLAMA_QUANTIZE), *extra, str(model_dir / "m.gguf"), str(out), ftype, "2"],
                   check=True, capture_output=True)
    return out


def _compare(path: Path, source: dict, qtypes: set, imatrix: Imatrix | None) -> int:
    """Every tensor of `qtypes` in llama-quantize's file against ours; returns how many were compared."""
    n = 0
    with GGUFFile(path) as f:
        for name, t in f.tensors.items():
            if t.ggml_type not in qtypes:
                continue
            w = imatrix.weights_for(name) if imatrix is not None else None
            ours = quantize(source[name], t.ggml_type, None if w is None else w.reshape(-1))
            theirs = np.asarray(f.tensor_data(name)).reshape(ours.shape)
            bad = np.nonzero((ours != theirs).any(axis=1))[0]
            assert bad.size == 0, f"{name} ({t.ggml_type.name}): rows {bad[:10].tolist()} differ"
            n += 1
    return n


@pytest.mark.parametrize("ftype, qtype", [("IQ3_XXS", T.IQ3_XXS), ("IQ3_S", T.IQ3_S)])
def test_same_tensors_with_imatrix(model, ftype, qtype, tmp_path):
    d, source = model
    out = _llama_quantize(d, tmp_path / "llamacpp.gguf", ftype, ["--imatrix", str(d / "m.imatrix.gguf")])
    with GGUFFile(out) as f:
        assert all(f.tensors[n].ggml_type in (T.IQ3_XXS, T.IQ3_S) for n in EDGE_TENSORS)
    assert _compare(out, source, {qtype}, read_imatrix(d / "m.imatrix.gguf")) >= 16


def test_iq3_s_without_imatrix(model, tmp_path):
    d, source = model
    out = _llama_quantize(d, tmp_path / "llamacpp.gguf", "IQ3_S", [])
    assert _compare(out, source, {T.IQ3_S}, None) >= 40


def test_iq3_xxs_without_imatrix(model, tmp_path):
    """llama-quantize writes IQ3_XXS without an imatrix only where it needs none: the token embedding."""
    d, source = model
    out = _llama_quantize(d, tmp_path / "llamacpp.gguf", "Q4_0", ["--token-embedding-type", "iq3_xxs"])
    assert _compare(out, source, {T.IQ3_XXS}, None) == 1
