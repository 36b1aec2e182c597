"""`localinfer quantize --imatrix` against `llama-quantize --imatrix`, file for file (skipped
without the binary: $LLAMA_QUANTIZE or llama-quantize on PATH, as test_quantize_llamacpp.py).

The importance matrix is a random one written by our writer, with sums spread over orders of
magnitude (as real activations are), so the weighted searches take other paths than the
unweighted ones. Every type that uses an imatrix is deterministic in ggml (sequential float32
loops in ggml-quants.c, built without -ffast-math), so the files must be equal byte for byte,
quantize.imatrix.* keys included.
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
from localinfer.quant.imatrix_file import Imatrix, ImatrixEntry, write_imatrix, write_imatrix_legacy
from synthetic_gguf import metadata_equal

LLAMA_QUANTIZE = Path(os.environ.get("LLAMA_QUANTIZE") or shutil.which("llama-quantize") or "llama-quantize")

pytestmark = pytest.mark.skipif(not LLAMA_QUANTIZE.is_file(), reason="no llama-quantize binary ($LLAMA_QUANTIZE)")

WEIGHTED_FTYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q2_K_S", "Q3_K_S", "Q3_K_M", "Q4_K_S", "Q4_K_M",
                   "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS"]


def _random_imatrix(tensors: dict[str, np.ndarray], seed: int) -> Imatrix:
    rng = np.random.default_rng(seed)
    im = Imatrix(datasets=["synthetic.txt"], chunk_count=3, chunk_size=512)
    for name, x in tensors.items():
        if x.ndim == 2 and (name.startswith("blk.") or name == "output.weight") and "norm" not in name:
            count = 3 * 512
            sums = (np.exp(rng.normal(0, 2, (1, x.shape[1]))) * count).astype(np.float32)
            im.entries[name] = ImatrixEntry(sums, np.array([count], np.int64))
    return im


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("imatrix-llamacpp")
    for name, kw in (("tied-f16", {}), ("untied-f32", dict(weight_dtype=np.float32, untied=True, seed=1))):
        t = synthetic_gguf.write(d / f"{name}.gguf", **kw)
        im = _random_imatrix(t, seed=2)
        write_imatrix(d / f"{name}.imatrix.gguf", im)
        write_imatrix_legacy(d / f"{name}.imatrix.dat", im)
    return d


def _same_file(ours: Path, theirs: Path) -> None:
    from localinfer.files.gguf_file import GGUFFile
    with GGUFFile(ours) as a, GGUFFile(theirs) as b:
        assert metadata_equal(a.metadata, b.metadata)
        for name, t in b.tensors.items():
            assert a.tensors[name].ggml_type == t.ggml_type, name
            assert np.array_equal(a.tensor_data(name), b.tensor_data(name)), f"{name} ({t.ggml_type.name}) differs"
    assert ours.read_bytes() == theirs.read_bytes()


def _both(src: Path, ftype: str, tmp_path: Path, extra: list[str]) -> tuple[Path, Path]:
    theirs, ours = tmp_path / "llamacpp.gguf", tmp_path / "ours.gguf"
    subprocess.run([str(LLAMA_QUANTIZE), *extra, str(src), str(theirs), ftype, "2"], check=True, capture_output=True)
    r = CliRunner().invoke(main, ["quantize", "-q", *extra, str(src), str(ours), ftype])
    assert r.exit_code == 0, r.output
    return ours, theirs


@pytest.mark.parametrize("model", ["tied-f16", "untied-f32"])
@pytest.mark.parametrize("ftype", WEIGHTED_FTYPES)
def test_same_file_with_imatrix(models, model, ftype, tmp_path):
    # the same path string for both: it is stored in quantize.imatrix.file
    ours, theirs = _both(models / f"{model}.gguf", ftype, tmp_path, ["--imatrix", str(models / f"{model}.imatrix.gguf")])
    _same_file(ours, theirs)


@pytest.mark.parametrize("ftype", ["Q4_K_M", "IQ4_XS"])
def test_same_file_with_legacy_imatrix(models, ftype, tmp_path):
    ours, theirs = _both(models / "untied-f32.gguf", ftype, tmp_path,
                         ["--imatrix", str(models / "untied-f32.imatrix.dat")])
    _same_file(ours, theirs)


@pytest.mark.parametrize("ftype", ["IQ4_NL", "IQ4_XS"])
def test_iq4_without_imatrix(models, ftype, tmp_path):
    ours, theirs = _both(models / "tied-f16.gguf", ftype, tmp_path, [])
    _same_file(ours, theirs)
