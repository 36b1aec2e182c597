"""`localinfer bench grammar`: the rows add up and the report section is written (speed is not asserted)."""
from __future__ import annotations

import json

from click.testing import CliRunner

from localinfer.cli.main import main
from localinfer.measure.bench_grammar import SCHEMA, run_model


def test_rows_are_consistent(smollm2_path):
    r = run_model(str(smollm2_path), n_gen=12, reps=2)
    assert r["n_vocab"] == 49152 and r["reps"] == 2 and len(r["samples_free"]) == 2
    assert r["free_tps"] > 0 and r["schema_tps"] > 0
    ratios = sorted(b / a for a, b in zip(r["samples_free"], r["samples_schema"]))
    assert ratios[0] <= r["ratio"] <= ratios[-1]  # the median of the per-repetition ratios
    assert 0 < r["grammar_share"] < 1 and r["grammar_ms_per_token"] > 0
    json.dumps(SCHEMA)  # the schema is plain JSON (it is quoted in the report's description)


def test_cli_writes_its_own_section(smollm2_path, tmp_path):
    report = tmp_path / "BENCHMARKS.md"
    report.write_text("# kept\n")
    out = CliRunner().invoke(main, ["bench", "grammar", str(smollm2_path), "-n", "8", "-r", "1", "--report", str(report)])
    assert out.exit_code == 0, out.output
    text = report.read_text()
    assert text.startswith("# kept") and "<!-- localinfer:grammar:start -->" in text and "| ratio |" in text
