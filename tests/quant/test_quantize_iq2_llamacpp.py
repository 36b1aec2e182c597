"""IQ2_XXS / IQ2_XS / IQ2_S tensors of `llama-quantize --imatrix` against our quantizer, tensor by
tensor (skipped without the binary: $LLAMA_QUANTIZE or llama-quantize on PATH).

llama-quantize writes a file type's mix (token_embd, output, attn_v, ffn_down get other types);
every tensor of an IQ2 type in its output must equal ``quantize(source, type, importance)`` of
ours byte for byte: ggml's IQ2 quantizers are deterministic (sequential float32 loops, built
without -ffast-math; the neighbour lists' qsort has a total order). Whole-file identity needs the
IQ2 file-type mixes (quant/mixes.py), which this test does not assume.
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

# (llama-quantize's file type, its arguments, the IQ2 type to check in its output, llama-quant.cpp's
# count of such tensors in the synthetic model). IQ2_M's default type is IQ2_S; with --pure the
# token embedding, which has no imatrix entry, gets IQ2_S too: ggml's path without weights.
CASES = [
    ("IQ2_XXS", [], T.IQ2_XXS, 40),
    ("IQ2_XS", [], T.IQ2_XS, 40),
    ("IQ2_M", [], T.IQ2_S, 32),
    ("IQ2_M", ["--pure"], T.IQ2_S, 50),
]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A synthetic llama in F32 and a random imatrix whose importances span orders of magnitude."""
    d = tmp_path_factory.mktemp("iq2-llamacpp")
    tensors = synthetic_gguf.write(d / "m.gguf", weight_dtype=np.float32, untied=True, seed=4)
    rng = np.random.default_rng(5)
    im = Imatrix(datasets=["synthetic.txt"], chunk_count=3, chunk_size=512)
    for name, x in tensors.items():
        if x.ndim == 2 and (name.startswith("blk.") or name == "output.weight"):
            sums = (np.exp(rng.normal(0, 2, (1, x.shape[1]))) * 1536).astype(np.float32)
            im.entries[name] = ImatrixEntry(sums, np.array([1536], np.int64))
    write_imatrix(d / "imatrix.gguf", im)
    return d, tensors


@pytest.mark.parametrize("ftype,extra,qtype,count", CASES, ids=[f"{c[0]}{''.join(c[1])}" for c in CASES])
def test_iq2_tensors_match_llama_quantize(model, ftype, extra, qtype, count, tmp_path):
    d, tensors = model
    out = tmp_path / f"{ftype}.gguf"
    subprocess.run([str(LLAMA_QUANTIZE), *extra, "--imatrix", str(d / "imatrix.gguf"), str(d / "m.gguf"), str(out),
                    ftype, "2"], check=True, capture_output=True)
    im = read_imatrix(d / "imatrix.gguf")
    checked = []
    with GGUFFile(out) as f:
        for name, t in f.tensors.items():
            if t.ggml_type != qtype:
                continue
            w = im.weights_for(name)
            ours = quantize(tensors[name], qtype, w)
            theirs = np.asarray(f.tensor_data(name)).reshape(ours.shape)
            diff = np.nonzero((ours != theirs).any(axis=1))[0]
            assert len(diff) == 0, f"{name}: {len(diff)} of {ours.shape[0]} rows differ, first {diff[:5]}"
            checked.append(w is None)
    assert len(checked) == count, f"{len(checked)} {qtype.name} tensors in llama-quantize's {ftype} file"
    if "--pure" in extra:
        assert checked.count(True) == 1  # token_embd.weight, quantized without importance weights
