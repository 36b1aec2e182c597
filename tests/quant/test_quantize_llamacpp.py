"""`localinfer quantize` against a llama-quantize binary, file for file (skipped without one).

Set $LLAMA_QUANTIZE to a llama-quantize built from llama.cpp, or put one on PATH (nothing
here builds it). On a synthetic llama model every file type must give the same file, byte
for byte: ggml's reference quantizers, llama_tensor_get_type's mix rules and
llama-quantize's layout, reproduced.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import synthetic_gguf
from localinfer.cli.main import main
from localinfer.files.gguf_file import GGUFFile
from localinfer.quant.mixes import FILE_TYPES
from synthetic_gguf import metadata_equal

LLAMA_QUANTIZE = Path(os.environ.get("LLAMA_QUANTIZE") or shutil.which("llama-quantize") or "llama-quantize")

pytestmark = pytest.mark.skipif(not LLAMA_QUANTIZE.is_file(), reason="no llama-quantize binary ($LLAMA_QUANTIZE)")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("llamacpp")
    synthetic_gguf.write(d / "tied-f16.gguf")
    synthetic_gguf.write(d / "untied-f32.gguf", weight_dtype=np.float32, untied=True, seed=1)
    return d


def _assert_same_file(ours: Path, theirs: Path) -> None:
    with GGUFFile(ours) as a, GGUFFile(theirs) as b:
        assert metadata_equal(a.metadata, b.metadata)
        assert set(a.tensors) == set(b.tensors)
        for name, t in b.tensors.items():
            assert a.tensors[name].ggml_type == t.ggml_type, name
            assert np.array_equal(a.tensor_data(name), b.tensor_data(name)), f"{name} ({t.ggml_type.name}) differs"
    assert ours.read_bytes() == theirs.read_bytes()  # and the layout: key order, tensor order, padding


# refused without an importance matrix (test_mixes_llamacpp.py checks that both refuse)
NEED_IMATRIX = {"Q2_K_S", "IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_XS"}


@pytest.mark.parametrize("model", ["tied-f16", "untied-f32"])
@pytest.mark.parametrize("ftype", [t for t in FILE_TYPES if t not in NEED_IMATRIX])
def test_same_file_as_llama_quantize(models, model, ftype, tmp_path):
    src = models / f"{model}.gguf"
    theirs, ours = tmp_path / "llamacpp.gguf", tmp_path / "ours.gguf"
    r = CliRunner().invoke(main, ["quantize", "-q", str(src), str(ours), ftype])
    if r.exit_code != 0 and "cannot write type" in r.output:
        pytest.skip(r.output.strip())  # a mix with a type that has no quantizer here yet
    assert r.exit_code == 0, r.output
    subprocess.run([str(LLAMA_QUANTIZE), str(src), str(theirs), ftype, "2"], check=True, capture_output=True)
    _assert_same_file(ours, theirs)


@pytest.mark.parametrize("ftype", ["Q4_K_M", "Q3_K_L"])
def test_pure_same_file_as_llama_quantize(models, ftype, tmp_path):
    src = models / "tied-f16.gguf"
    theirs, ours = tmp_path / "llamacpp.gguf", tmp_path / "ours.gguf"
    subprocess.run([str(LLAMA_QUANTIZE), "--pure", str(src), str(theirs), ftype, "2"], check=True, capture_output=True)
    r = CliRunner().invoke(main, ["quantize", "-q", "--pure", str(src), str(ours), ftype])
    assert r.exit_code == 0, r.output
    _assert_same_file(ours, theirs)
