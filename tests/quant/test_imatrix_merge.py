"""Combining importance matrices (quant/imatrix_merge.py, `localinfer imatrix --in-file ...`),
by its rules and against llama-imatrix's own combining (skipped without $LLAMA_IMATRIX)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from localinfer.cli.main import main
from localinfer.quant.imatrix_file import (Imatrix, ImatrixEntry, ImatrixError, read_imatrix, write_imatrix,
                                           write_imatrix_legacy)
from localinfer.quant.imatrix_merge import merge_imatrices

LLAMA_IMATRIX = Path(os.environ.get("LLAMA_IMATRIX") or shutil.which("llama-imatrix") or "llama-imatrix")


def _imatrix(names: list[str], seed: int, datasets: list[str]) -> Imatrix:
    """Random sums whose float32 additions round (no exact binary fractions); 4 experts for *_exps."""
    rng = np.random.default_rng(seed)
    im = Imatrix(datasets=datasets, chunk_count=3, chunk_size=512)
    for n in names:
        k = 4 if "_exps" in n else 1
        im.entries[n] = ImatrixEntry((rng.random((k, 64)) * 1000 * 3.7).astype(np.float32),
                                     rng.integers(100, 3000, k).astype(np.int64))
    return im


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("merge")
    a = _imatrix(["blk.0.attn_q.weight", "blk.0.ffn_up_exps.weight", "blk.1.attn_k.weight"], 1, ["a.txt"])
    a.entries["blk.0.ffn_up_exps.weight"].counts[2] = 0  # an expert no token chose
    b = _imatrix(["blk.0.attn_q.weight", "blk.0.ffn_up_exps.weight", "blk.2.attn_v.weight"], 2, ["b.txt", "c.txt"])
    c = _imatrix(["blk.0.attn_q.weight", "blk.3.attn_v.weight"], 3, ["d.txt"])
    write_imatrix(d / "a.gguf", a)
    write_imatrix(d / "b.gguf", b)
    write_imatrix_legacy(d / "c.dat", c)
    return d, a, b


def test_sums_and_counts_add_up(files):
    d, a, b = files
    m = merge_imatrices([("a", a), ("b", b)], chunk_size=512)
    assert list(m.entries) == sorted(set(a.entries) | set(b.entries))
    q = "blk.0.attn_q.weight"
    np.testing.assert_array_equal(m.entries[q].sums, a.entries[q].sums + b.entries[q].sums)  # float32 adds
    np.testing.assert_array_equal(m.entries[q].counts, a.entries[q].counts + b.entries[q].counts)
    e = "blk.0.ffn_up_exps.weight"
    assert m.entries[e].sums.shape == (4, 64) and m.entries[e].counts[2] == b.entries[e].counts[2]
    for only, src in (("blk.1.attn_k.weight", a), ("blk.2.attn_v.weight", b)):  # in one file: kept as it is
        np.testing.assert_array_equal(m.entries[only].sums, src.entries[only].sums)
    assert m.datasets == ["a.txt", "b.txt", "c.txt"]
    top = max(int(x.counts.max()) for x in m.entries.values())
    assert m.chunk_size == 512 and m.chunk_count == top // 512  # recomputed, not 3 + 3


def test_a_legacy_file_counts_full_chunks(files):
    d, a, _ = files
    c = read_imatrix(d / "c.dat")
    m = merge_imatrices([("a", a), ("c", c)], chunk_size=256)
    q = "blk.0.attn_q.weight"
    ncall = int(c.entries[q].counts[0])
    np.testing.assert_array_equal(m.entries[q].counts, a.entries[q].counts + ncall * 256)
    np.testing.assert_array_equal(m.entries[q].sums[0], a.entries[q].sums[0] + c.entries[q].sums[0] * np.float32(256))


def test_different_models_are_refused(files):
    _, a, _ = files
    other = Imatrix({"blk.0.attn_q.weight": ImatrixEntry(np.ones((1, 32), np.float32), np.array([5]))}, [], 1, 512)
    with pytest.raises(ImatrixError, match="other.*'blk.0.attn_q.weight' has 32 values.*64"):
        merge_imatrices([("a", a), ("other", other)])
    experts = Imatrix({"blk.0.ffn_up_exps.weight": ImatrixEntry(np.ones((2, 128), np.float32), np.array([5, 6]))},
                      [], 1, 512)
    with pytest.raises(ImatrixError, match="2 counts, the files before it 4"):
        merge_imatrices([("a", a), ("x", experts)])
    with pytest.raises(ImatrixError, match="no imatrix files"):
        merge_imatrices([])


def test_cli_errors(files, tmp_path):
    d, _, _ = files
    r = CliRunner().invoke(main, ["imatrix", "--in-file", str(d / "a.gguf"), "-f", str(d / "c.dat"), "-o",
                                  str(tmp_path / "m.gguf")])
    assert r.exit_code != 0 and "not supported" in r.output
    r = CliRunner().invoke(main, ["imatrix", "-o", str(tmp_path / "m.gguf")])
    assert r.exit_code != 0 and "--in-file" in r.output
    (tmp_path / "junk.gguf").write_bytes(b"GGUF\x03\x00")
    r = CliRunner().invoke(main, ["imatrix", "--in-file", str(d / "a.gguf"), "--in-file", str(tmp_path / "junk.gguf"),
                                  "-o", str(tmp_path / "m.gguf")])
    assert r.exit_code != 0 and "junk.gguf" in r.output
    assert not (tmp_path / "m.gguf").exists()


@pytest.mark.skipif(not LLAMA_IMATRIX.is_file(), reason="no llama-imatrix binary ($LLAMA_IMATRIX)")
@pytest.mark.parametrize("chunk_size, fmt", [(512, "gguf"), (128, "gguf"), (512, "dat")])
def test_same_file_as_llama_imatrix(files, chunk_size, fmt, tmp_path):
    """GGUF, GGUF and legacy inputs; entries in one file only; an expert with no tokens."""
    d, _, _ = files
    ins = [d / "a.gguf", d / "b.gguf", d / "c.dat"]
    theirs, ours = tmp_path / f"llamacpp.{fmt}", tmp_path / f"ours.{fmt}"
    # llama-imatrix wants a model path even when it only combines files; it does not open it
    subprocess.run([str(LLAMA_IMATRIX), "-m", str(d / "a.gguf"), "-c", str(chunk_size), "--output-format", fmt,
                    "--in-file", ",".join(map(str, ins)), "-o", str(theirs)], check=True, capture_output=True)
    r = CliRunner().invoke(main, ["imatrix", "-c", str(chunk_size), "--output-format", fmt,
                                  *[a for p in ins for a in ("--in-file", str(p))], "-o", str(ours)])
    assert r.exit_code == 0, r.output
    assert ours.read_bytes() == theirs.read_bytes()
