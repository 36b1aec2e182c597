"""IQ1_S and IQ1_M against `llama-quantize --imatrix`, tensor for tensor (skipped without the
binary: $LLAMA_QUANTIZE or llama-quantize on PATH, as test_imatrix_quantize_llamacpp.py).

llama-quantize writes an IQ1_S / IQ1_M file of the synthetic model; every tensor it wrote in the
type under test must equal our `quantize(source, type, imatrix row)` byte for byte. (The whole
file needs the IQ1 file-type mixes too; this checks the quantizers alone.) Two sources: F16
weights, and weights rounded to a coarse step so that most sub-blocks hold equal values -- ggml
sorts by value alone, and the order of equal values changes the bytes (of IQ1_M in most rows,
rarely of IQ1_S); glibc's qsort keeps them in index order, as ours does. The random imatrix
spreads its values over orders of magnitude, as real activations do, so it moves the cut points.
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


def _write_coarse(path: Path) -> dict[str, np.ndarray]:
    """The synthetic model with its weights rounded to multiples of 1/64: most sub-blocks then hold
    equal values (ties in ggml's sort, whose order changes IQ1_M's bytes in most rows)."""
    coarse = {name: np.round(x * 64) / 64 for name, x in synthetic_gguf.tensors(seed=3).items() if x.ndim == 2}
    return synthetic_gguf.write(path, seed=3, overrides=coarse)


@pytest.fixture(scope="module", params=["f16", "coarse"])
def model(request, tmp_path_factory):
    """A synthetic model (F16 weights, or coarse ones full of ties) and an imatrix for its blk.*
    weights (none for token_embd)."""
    d = tmp_path_factory.mktemp("iq1-llamacpp")
    if request.param == "f16":
        tensors = synthetic_gguf.write(d / "m.gguf")
    else:
        tensors = _write_coarse(d / "m.gguf")
    rng = np.random.default_rng(5)
    im = Imatrix(datasets=["synthetic.txt"], chunk_count=3, chunk_size=512)
    for name, x in tensors.items():
        if x.ndim == 2 and name.startswith("blk."):
            sums = (np.exp(rng.normal(0, 2, (1, x.shape[1]))) * 1536).astype(np.float32)
            im.entries[name] = ImatrixEntry(sums, np.array([1536], np.int64))
    write_imatrix(d / "im.gguf", im)
    return d, tensors


def _compare(model, ftype: str, qtype: T, extra: list[str], tmp_path: Path) -> list[str]:
    d, tensors = model
    out = tmp_path / f"{ftype}.gguf"
    subprocess.run([str(LLAMA_QUANTIZE), *extra, "--imatrix", str(d / "im.gguf"), str(d / "m.gguf"), str(out),
                    ftype, "2"], check=True, capture_output=True)
    im = read_imatrix(d / "im.gguf")
    checked = []
    with GGUFFile(out) as f:
        for name, t in f.tensors.items():
            if t.ggml_type != qtype:
                continue
            ours = quantize(tensors[name], qtype, im.weights_for(name))
            theirs = np.asarray(f.tensor_data(name)).reshape(ours.shape)
            rows = np.nonzero((ours != theirs).any(axis=1))[0]
            assert len(rows) == 0, f"{name}: {len(rows)} of {ours.shape[0]} rows differ, first {rows[:5]}"
            checked.append(name)
    return checked


def test_iq1_s_tensors_are_llamacpps(model, tmp_path):
    checked = _compare(model, "IQ1_S", T.IQ1_S, [], tmp_path)
    assert len(checked) >= 8 * 4, checked  # attn_q, attn_k, ffn_gate, ffn_up of every layer


def test_iq1_m_tensors_are_llamacpps(model, tmp_path):
    """--pure: every 256-column tensor IQ1_M, token_embd among them without an imatrix entry (ggml
    quantizes IQ1_M without one, weighting by x^2; llama-quantize allows it for the embeddings)."""
    checked = _compare(model, "IQ1_M", T.IQ1_M, ["--pure"], tmp_path)
    assert "token_embd.weight" in checked and len(checked) >= 1 + 8 * 6, checked
