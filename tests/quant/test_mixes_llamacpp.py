"""The mix policy (quant/mixes.py) against llama-quantize's own choice of every tensor's type
(skipped without the binary: $LLAMA_QUANTIZE or llama-quantize on PATH).

``llama-quantize --dry-run`` runs llama_tensor_get_type on every tensor and prints the type it
would write, without quantizing: each file type is checked on models that the rules tell apart
(tests/synthetic_gguf.py MIX_SHAPES: tied / untied output, GQA 1 / 2 / 4, rows of 640, 8 and 4 experts),
with and without an importance matrix (a few rules depend on having one). Only the policy is
compared here, so the grid types need no quantizer of ours; test_quantize_llamacpp.py compares
whole files where we have the quantizers.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from gguf import GGMLQuantizationType as T

import synthetic_gguf
from localinfer.cli.main import main
from localinfer.files.gguf_file import GGUFFile
from localinfer.quant.imatrix_file import Imatrix, ImatrixEntry, write_imatrix
from localinfer.quant.mixes import FILE_TYPES, ModelShape, get_file_type, plan_tensor_types, requires_imatrix
from localinfer.quant.quantize_file import QuantizeError, quantize_file

LLAMA_QUANTIZE = Path(os.environ.get("LLAMA_QUANTIZE") or shutil.which("llama-quantize") or "llama-quantize")

pytestmark = pytest.mark.skipif(not LLAMA_QUANTIZE.is_file(), reason="no llama-quantize binary ($LLAMA_QUANTIZE)")

QUANTIZED_FTYPES = [name for name, ft in FILE_TYPES.items() if ft.default not in (T.F32, T.F16, T.BF16)]
# "[  12/  83] blk.0.ffn_up_exps.weight - [ 256, 256, 8, 1], type = f16, size = 1.00 MiB -> 0.10 MiB (iq1_s)";
# a tensor that keeps its type has no "-> ... (type)"
_DRY_RUN_LINE = re.compile(r"^\[\s*\d+/\s*\d+\]\s+(\S+)\s+- \[[^\]]*\], type =\s*(\w+), size =[^(]*(?:\((\w+)\))?\s*$")
_NEEDS_IMATRIX_WARNING = "will require an imatrix"


def _random_imatrix(tensors: dict[str, np.ndarray], seed: int) -> Imatrix:
    """Every matrix that multiplies activations (3-D experts: one row of sums per expert)."""
    rng = np.random.default_rng(seed)
    im = Imatrix(datasets=["synthetic.txt"], chunk_count=3, chunk_size=512)
    for name, x in tensors.items():
        if x.ndim >= 2 and (name.startswith("blk.") or name == "output.weight") and "ffn_gate_inp" not in name:
            n_mat = x.shape[0] if x.ndim == 3 else 1
            count = 3 * 512
            sums = (np.exp(rng.normal(0, 2, (n_mat, x.shape[-1]))) * count).astype(np.float32)
            im.entries[name] = ImatrixEntry(sums, np.full(n_mat, count, np.int64))
    return im


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("mixes")
    for name, shape in synthetic_gguf.MIX_SHAPES.items():
        t = synthetic_gguf.write(d / f"{name}.gguf", shape)
        write_imatrix(d / f"{name}.imatrix.gguf", _random_imatrix(t, seed=2))
    return d


def _llama_dry_run(src: Path, ftype: str, imatrix: Path | None) -> tuple[dict[str, T], bool]:
    """llama-quantize's type for every tensor, and whether it says an imatrix would be needed."""
    args = [str(LLAMA_QUANTIZE), "--dry-run"] + (["--imatrix", str(imatrix)] if imatrix else []) + [str(src), ftype, "1"]
    r = subprocess.run(args, capture_output=True, text=True, check=True)
    types = {}
    for line in (r.stdout + r.stderr).splitlines():
        m = _DRY_RUN_LINE.match(line.strip())
        if m:
            name, cur, new = m.groups()
            types[name] = T[(new or cur).upper()]
    assert types, r.stdout + r.stderr
    return types, _NEEDS_IMATRIX_WARNING in r.stdout + r.stderr


def _our_plan(src: Path, ftype: str, has_imatrix: bool) -> tuple[dict[str, T], bool]:
    ft = get_file_type(ftype)
    with GGUFFile(src) as f:
        tensors = [(t.name, t.ggml_type, t.shape) for t in f.tensors.values()]
        plan = plan_tensor_types(tensors, ft, ModelShape.from_metadata(f.metadata), has_imatrix=has_imatrix)
    needs = any(requires_imatrix(n, plan[n], ft) for n, cur, _ in tensors if plan[n] != cur)
    return plan, needs


def _assert_same_types(ours: dict[str, T], theirs: dict[str, T]) -> None:
    assert set(ours) == set(theirs)
    diff = {n: (ours[n].name, theirs[n].name) for n in theirs if ours[n] != theirs[n]}
    assert not diff, f"(ours, llama-quantize) differ for {len(diff)} tensors: {diff}"


@pytest.mark.parametrize("shape", list(synthetic_gguf.MIX_SHAPES))
@pytest.mark.parametrize("ftype", QUANTIZED_FTYPES)
def test_types_with_imatrix(models, shape, ftype):
    theirs, _ = _llama_dry_run(models / f"{shape}.gguf", ftype, models / f"{shape}.imatrix.gguf")
    ours, _ = _our_plan(models / f"{shape}.gguf", ftype, has_imatrix=True)
    _assert_same_types(ours, theirs)


@pytest.mark.parametrize("shape", list(synthetic_gguf.MIX_SHAPES))
@pytest.mark.parametrize("ftype", QUANTIZED_FTYPES)
def test_types_and_imatrix_need_without_imatrix(models, shape, ftype):
    theirs, they_need = _llama_dry_run(models / f"{shape}.gguf", ftype, None)
    ours, we_need = _our_plan(models / f"{shape}.gguf", ftype, has_imatrix=False)
    _assert_same_types(ours, theirs)
    assert we_need == they_need


@pytest.mark.parametrize("ftype", ["IQ2_XXS", "IQ1_M", "IQ3_XS", "IQ2_M"])
def test_refused_without_imatrix_as_llama_quantize_does(models, ftype, tmp_path):
    src = models / "untied-gqa4.gguf"
    r = subprocess.run([str(LLAMA_QUANTIZE), str(src), str(tmp_path / "llamacpp.gguf"), ftype, "1"], capture_output=True)
    assert r.returncode != 0 and b"requires an imatrix" in r.stdout + r.stderr
    with pytest.raises(QuantizeError, match=f"{ftype} needs an importance matrix.*--imatrix"):
        quantize_file(src, tmp_path / "ours.gguf", ftype)
    r = CliRunner().invoke(main, ["quantize", "-q", str(src), str(tmp_path / "ours.gguf"), ftype])
    assert r.exit_code != 0 and "--imatrix" in r.output
    assert not (tmp_path / "ours.gguf").exists()


def test_imatrix_without_an_entry_for_a_grid_tensor_is_refused(models, tmp_path):
    im = _random_imatrix(synthetic_gguf.tensors(shape=synthetic_gguf.MIX_SHAPES["untied-gqa4"]), seed=2)
    del im.entries["blk.2.attn_q.weight"]
    write_imatrix(tmp_path / "partial.gguf", im)
    with pytest.raises(QuantizeError, match="'blk.2.attn_q.weight' \\(IQ2_XXS\\).*no entry"):
        quantize_file(models / "untied-gqa4.gguf", tmp_path / "o.gguf", "IQ2_XXS", imatrix=tmp_path / "partial.gguf")
    assert not (tmp_path / "o.gguf").exists()


@pytest.mark.parametrize("ftype", ["IQ2_XXS", "IQ1_S", "IQ3_XS"])
def test_grid_mix_on_rows_of_640_needs_no_imatrix_and_gives_the_same_file(models, ftype, tmp_path):
    """Every row of 640 sends the grid types to IQ4_NL and Q2_K / Q5_K to Q4_0 / Q5_1: no tensor
    needs an imatrix, llama-quantize writes the file, and so do we, byte for byte."""
    src = models / "rows640-tied.gguf"
    theirs, ours = tmp_path / "llamacpp.gguf", tmp_path / "ours.gguf"
    subprocess.run([str(LLAMA_QUANTIZE), str(src), str(theirs), ftype, "1"], check=True, capture_output=True)
    quantize_file(src, ours, ftype)
    with GGUFFile(theirs) as f:
        assert T.IQ4_NL in {t.ggml_type for t in f.tensors.values()}
    assert ours.read_bytes() == theirs.read_bytes()


@pytest.mark.parametrize("shape, ftype", [("mixtral-8x", "MXFP4_MOE"), ("qwen3moe-4x", "MXFP4_MOE"),
                                          ("rows640-gqa2", "TQ1_0"), ("untied-gqa4", "TQ2_0")])
def test_same_file_as_llama_quantize(models, shape, ftype, tmp_path):
    """MXFP4 experts and Q8_0 elsewhere; ternary weights with their Q4_K embedding and Q4_0 / Q5_0
    fallbacks: the whole file, byte for byte."""
    src = models / f"{shape}.gguf"
    theirs, ours = tmp_path / "llamacpp.gguf", tmp_path / "ours.gguf"
    subprocess.run([str(LLAMA_QUANTIZE), str(src), str(theirs), ftype, "2"], check=True, capture_output=True)
    quantize_file(src, ours, ftype)
    with GGUFFile(ours) as a, GGUFFile(theirs) as b:
        for name, t in b.tensors.items():
            assert a.tensors[name].ggml_type == t.ggml_type, name
            assert np.array_equal(a.tensor_data(name), b.tensor_data(name)), f"{name} ({t.ggml_type.name}) differs"
    assert ours.read_bytes() == theirs.read_bytes()


GRID_FTYPES = ["IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_XS", "IQ3_S", "IQ3_M"]


@pytest.mark.parametrize("shape", ["tied-gqa1", "mixtral-8x"])
@pytest.mark.parametrize("ftype", GRID_FTYPES)
def test_same_grid_mix_file_with_imatrix(models, shape, ftype, tmp_path):
    """The whole file of each IQ1-IQ3 mix with an imatrix, once every type in it has a quantizer here
    (skipped until then): mix, weighted grid quantizers and layout together."""
    src, imatrix = models / f"{shape}.gguf", models / f"{shape}.imatrix.gguf"
    theirs, ours = tmp_path / "llamacpp.gguf", tmp_path / "ours.gguf"
    r = CliRunner().invoke(main, ["quantize", "-q", "--imatrix", str(imatrix), str(src), str(ours), ftype])
    if r.exit_code != 0 and "cannot write type" in r.output:
        pytest.skip(r.output.strip())
    assert r.exit_code == 0, r.output
    subprocess.run([str(LLAMA_QUANTIZE), "--imatrix", str(imatrix), str(src), str(theirs), ftype, "2"],
                   check=True, capture_output=True)
    assert ours.read_bytes() == theirs.read_bytes()


def _mxfp4_edge_experts(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Expert weights whose 32-blocks have the maxima where MXFP4's exponent is decided by one
    float32 ulp (2^k and its neighbours: floor(log2f)) and elements exactly halfway between two
    levels (the first-minimum rule), as float32 data (F16 cannot hold the neighbours)."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 0.05).astype(np.float32)
    blocks = x.reshape(-1, 32)
    n = blocks.shape[0]
    k = rng.integers(-12, 3, n).astype(np.float32)
    p = np.exp2(k).astype(np.float32)
    top = np.stack([p, np.nextafter(p, np.float32(0)), np.nextafter(p, np.float32(np.inf)), p * 1.5], 1)
    blocks[:, :] = np.clip(blocks, -0.9 * p[:, None], 0.9 * p[:, None])
    blocks[:, 0] = top[np.arange(n), rng.integers(0, 4, n)] * rng.choice([-1, 1], n)
    # with max |x| = 2^k the unit is 2^(k-3) (levels 0.5..6 of 2^(k-2)): 5 * 2^(k-3) lies halfway
    # between the levels 2 and 3 (codes 4 and 5), 2.5 * 2^(k-3) between 1 and 1.5
    unit = np.exp2(k - 3).astype(np.float32)
    blocks[:, 1] = 5 * unit * rng.choice([-1, 1], n)
    blocks[:, 2] = 2.5 * unit * rng.choice([-1, 1], n)
    return x


def test_mxfp4_exponent_and_ties_on_float32_edges(tmp_path):
    s = synthetic_gguf.MIX_SHAPES["mixtral-8x"]
    ref = synthetic_gguf.tensors(shape=s)
    edges = {n: _mxfp4_edge_experts(x.shape, i) for i, (n, x) in enumerate(ref.items()) if x.ndim == 3}
    src = tmp_path / "edges-f32.gguf"
    synthetic_gguf.write(src, s, weight_dtype=np.float32, overrides=edges)
    theirs, ours = tmp_path / "llamacpp.gguf", tmp_path / "ours.gguf"
    subprocess.run([str(LLAMA_QUANTIZE), str(src), str(theirs), "MXFP4_MOE", "2"], check=True, capture_output=True)
    quantize_file(src, ours, "MXFP4_MOE")
    with GGUFFile(ours) as a, GGUFFile(theirs) as b:
        for name in edges:
            assert b.tensors[name].ggml_type == T.MXFP4
            assert np.array_equal(a.tensor_data(name), b.tensor_data(name)), name
    assert ours.read_bytes() == theirs.read_bytes()


@pytest.mark.parametrize("ftype", ["TQ1_0", "TQ2_0"])
def test_ternary_rounding_on_exact_halves(ftype, tmp_path):
    """Weights at exactly +-d/2 (lroundf rounds them away from zero, numpy's round would not)
    and at d's neighbours, in float32, against llama-quantize."""
    s = synthetic_gguf.MIX_SHAPES["untied-gqa4"]
    rng = np.random.default_rng(4)
    over = {}
    for name, x in synthetic_gguf.tensors(shape=s).items():
        if name.startswith("blk.") and x.ndim == 2:
            d = np.float32(2.0) ** rng.integers(-8, 0, (*x.shape[:-1], 1)).astype(np.float32)
            levels = rng.choice(np.array([-1, -0.5, 0, 0.5, 1], np.float32), x.shape)
            y = (levels * d).astype(np.float32)
            y[:, 1] = np.nextafter(d[:, 0] / 2, np.float32(0))  # just below a half: rounds to 0
            y[:, 0] = d[:, 0]  # every 256-block's max is d (block 0 here, the others by the +-1 levels)
            over[name] = y
    src = tmp_path / "halves-f32.gguf"
    synthetic_gguf.write(src, s, weight_dtype=np.float32, overrides=over)
    theirs, ours = tmp_path / "llamacpp.gguf", tmp_path / "ours.gguf"
    subprocess.run([str(LLAMA_QUANTIZE), str(src), str(theirs), ftype, "2"], check=True, capture_output=True)
    quantize_file(src, ours, ftype)
    assert ours.read_bytes() == theirs.read_bytes()
