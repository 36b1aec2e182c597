"""Two tools write BENCHMARKS.md: each replaces its own section and keeps the other's."""
from localinfer.measure.report_sections import replace_section, write_section


def test_sections_replace_only_themselves(tmp_path):
    path = tmp_path / "BENCHMARKS.md"
    write_section(path, "serve", "## Serving\nold")
    write_section(path, "bench", "# Benchmarks\nthreads", first=True)
    text = path.read_text()
    assert text.index("# Benchmarks") < text.index("## Serving")
    write_section(path, "serve", "## Serving\nnew")
    write_section(path, "bench", "# Benchmarks\nagain", first=True)
    text = path.read_text()
    assert "new" in text and "old" not in text and "again" in text and "threads" not in text
    assert text.count("localinfer:serve:start") == 1 and text.count("localinfer:bench:start") == 1
    assert replace_section("", "x", "body").strip().endswith("<!-- localinfer:x:end -->")
