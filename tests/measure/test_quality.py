"""`localinfer quality`: type names, bits per weight, the report, and one small table on SmolLM2."""
from __future__ import annotations

import re

import numpy as np
import pytest
import synthetic_gguf
from click.testing import CliRunner

from localinfer.measure import quality as Q
from localinfer.cli.main import main
from localinfer.cli.quality import DEFAULT_TYPES

pytestmark = pytest.mark.slow  # quantizes and scores a real model

TEXT = " ".join(f"The {w} of chapter {i} is short and the river runs to the sea." for i, w in
                enumerate(["house", "garden", "letter", "ball", "walk", "dinner", "visit", "road"] * 4))


def test_parse_types():
    assert Q.parse_types("f16, Q8_0,q4_k_m") == ["F16", "Q8_0", "Q4_K_M"]
    assert Q.parse_types("Q4_K") == ["Q4_K_M"]  # llama-quantize's alias
    assert Q.parse_types(",".join(Q.DEFAULT_TYPES)) == list(Q.DEFAULT_TYPES)
    assert DEFAULT_TYPES == ",".join(Q.DEFAULT_TYPES)  # the command's default is the library's
    with pytest.raises(ValueError, match="'Q4_9'.*supported: .*Q4_0"):
        Q.parse_types("Q8_0,Q4_9")
    with pytest.raises(ValueError, match="Q8_0 is listed twice"):
        Q.parse_types("q8_0,Q8_0")
    with pytest.raises(ValueError, match="empty type name"):
        Q.parse_types("Q8_0,,Q4_0")


def test_bits_per_weight_by_hand(tmp_path):
    assert Q.bits_per_weight(34 * 1000, 32 * 1000) == 8.5  # Q8_0: 34 bytes per 32 weights
    with pytest.raises(ValueError):
        Q.bits_per_weight(10, 0)
    path = tmp_path / "s.gguf"
    w = synthetic_gguf.write(path)
    n = sum(x.size for x in w.values())
    bits = sum(x.size * (16 if x.ndim == 2 else 32) for x in w.values())  # F16 weights, F32 norms
    mib, bpw, n_params = Q.size_and_bpw(path)
    assert n_params == n and bpw == pytest.approx(bits / n)
    assert mib == pytest.approx(path.stat().st_size / 2**20) and mib * 2**20 > bits / 8


def _table():
    t = Q.ModelTable("tiny", "tiny.Q4_1.gguf", "Q4_1+Q8_0", n_chunks=2, n_scored=510, source_file_type="Q4_1",
                     embd_share=0.21)
    t.rows = [Q.Row("F16", 200.0, 16.0, 10**8, 20.0, 0.5, pp_ts=10.0, tg_ts=5.0),
              Q.Row("Q8_0", 100.0, 8.5, 10**8, 20.2, 0.5, 0.2, 0.05, 0.004, 0.001, 0.95, 0.01, 40.0, 7.5)]
    return t


def test_report_states_the_base_and_the_ratios():
    s = Q.Settings("text", n_ctx=512, n_chunks=2)
    machine = {"cpu": "cpu", "n_cpus": 2, "system": "Linux", "python": "3"}
    md = Q.report([_table()], s, ["F16", "Q8_0"], "localinfer quality tiny", machine, None, "t.txt", (0.1, 0.2))
    assert "The base is not an F16 original" in md and "Q4_1+Q8_0 weights widened to F16" in md
    assert "not the same as quantizing an F16 original" in md
    assert "localinfer quality tiny" in md and "busy machine" not in md
    row = next(line for line in md.splitlines() if line.startswith("| Q8_0 "))
    cells = [c.strip() for c in row.strip("|").split("|")]
    # size × F16, bpw, ..., pp × F16, tg × F16
    assert cells[2] == "0.50" and cells[3] == "8.50" and cells[-2] == "4.00" and cells[-1] == "1.50"
    assert "Q8_0 is 0.50× the F16 file" in md and "it is 21 % of the parameters" in md
    assert "catalog file's own type" not in md  # no Q4_1 row
    t = _table()
    t.rows.append(Q.Row("Q4_1", 60.0, 5.0, 10**8, 20.1, 0.5))
    assert "Q4_1 is the catalog file's own type" in Q.report([t], s, [], "c", machine, None, "t.txt")
    busy = Q.report([_table()], s, [], "c", machine, None, "t.txt", (3.9, 4.2))
    assert "speeds are from a busy machine" in busy


def test_cli_bad_type_is_a_clear_error(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text(TEXT)
    r = CliRunner().invoke(main, ["quality", "smollm2", "-f", str(text), "--types", "F16,Q4_9"])
    assert r.exit_code == 2 and "Q4_9" in r.output and "supported" in r.output and "Traceback" not in r.output


def test_cli_small_table_on_smollm2(smollm2_path, tmp_path):
    """One chunk of 64, F16 and Q8_0: the F16 row is the base (0 loss), Q8_0 loses a little."""
    text = tmp_path / "t.txt"
    text.write_text(TEXT)
    report = tmp_path / "q.md"
    other = "<!-- localinfer:kvcache:start -->\nanother tool's section\n<!-- localinfer:kvcache:end -->\n"
    report.write_text(other)
    r = CliRunner().invoke(main, ["quality", str(smollm2_path), "-f", str(text), "--types", "F16,Q8_0",
                                  "-c", "64", "--chunks", "1", "-p", "8", "-n", "2", "--report", str(report),
                                  "--work-dir", str(tmp_path / "work")])
    assert r.exit_code == 0, r.output
    md = report.read_text()
    assert other.strip() in md  # the report replaces only its own section
    assert "The base is not an F16 original" in md and "Q4_1+Q8_0 weights widened to F16" in md
    assert re.search(r"it is 2\d % of the parameters", md)  # SmolLM2's 49152 x 576 embedding of 135M
    rows = {m.group(1): [c.strip() for c in m.group(2).split("|")]
            for m in re.finditer(r"^\| (F16|Q8_0) \|(.*)\|$", md, re.M)}
    f16, q8 = rows["F16"], rows["Q8_0"]
    assert float(f16[2]) == pytest.approx(16.0, abs=0.1) and float(q8[2]) == pytest.approx(8.5, abs=0.2)
    assert float(q8[1]) == pytest.approx(8.5 / 16, abs=0.03)
    assert f16[5].startswith("0.00000") and f16[6].startswith("100.00")
    kld = float(q8[5].split("±")[0])
    assert 0 < kld < 0.05 and float(q8[6].split("±")[0]) > 80
    assert np.isfinite(float(q8[3].split("±")[0])) and float(q8[7]) > 0 and float(q8[8]) > 0
    assert (tmp_path / "work").is_dir() and any((tmp_path / "work").glob("*.Q8_0.gguf"))
