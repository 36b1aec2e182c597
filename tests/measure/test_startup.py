"""Start-to-first-token timing of whole processes (`localinfer bench --startup`)."""
from __future__ import annotations

import os
import stat

import pytest

from localinfer.measure import startup
from localinfer.measure.startup import localinfer_command, measure_startup, startup_table


def fake_llama_completion(tmp_path, body: str) -> str:
    """A stand-in for llama-completion that records its arguments."""
    path = tmp_path / "llama-completion"
    path.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/args\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.fixture
def warm_only(monkeypatch):
    """Dropping the page cache would slow everything else on the machine: warm runs only."""
    monkeypatch.setattr(startup, "can_drop_page_cache", lambda: False)


def test_our_process_really_generates_a_token(smollm2_path):
    import subprocess

    out = subprocess.run(localinfer_command(str(smollm2_path), 1), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip(), "one generated token is printed"


def test_rows_alternate_and_compare(smollm2_path, tmp_path, warm_only):
    binary = fake_llama_completion(tmp_path, "exit 0")
    lines = []
    rows = measure_startup(str(smollm2_path), 2, 2, binary, lines.append)
    (row,) = rows
    assert row["page_cache"] == "warm" and row["n_threads"] == 2
    assert len(row["localinfer_samples_s"]) == len(row["llama_cpp_samples_s"]) == 2
    assert row["localinfer_s"] > row["llama_cpp_s"] > 0  # a real model load against `exit 0`
    assert row["localinfer_rss_mib"] > 50  # the model was mapped and read
    assert row["llama_cpp_rss_mib"] is None or row["llama_cpp_rss_mib"] < 50  # `exit 0` may end before a poll
    assert row["ratio"] == pytest.approx(row["localinfer_s"] / row["llama_cpp_s"])
    args = (tmp_path / "args").read_text().splitlines()
    assert len(args) == 3  # one untimed start, then one per repetition
    assert args[0].split() == ["-m", str(smollm2_path), "-p", "Hi", "-n", "1", "--temp", "0", "-t", "2", "-c", "4096",
                                "-no-cnv"]
    assert len(lines) == 2
    table = startup_table(rows)
    assert os.path.basename(str(smollm2_path)) in table and "| warm |" in table


def test_peak_rss_is_the_childs_own():
    """Not this process's: its high-water mark survives fork and exec in wait4's ru_maxrss."""
    import sys

    ballast = bytearray(400 << 20)  # this process: 400+ MiB resident
    ballast[::4096] = b"x" * len(ballast[::4096])
    code = "import time; b = bytearray(64 << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(0.5)"
    seconds, peak = startup.time_command([sys.executable, "-c", code], cold=False)
    assert seconds >= 0.5
    assert 64 < peak < 200, peak


def test_the_exit_is_timed_when_it_happens_not_at_the_next_poll():
    """A poll every 30 s would have timed a 0.05 s command as 30 s or more."""
    import sys

    seconds, _ = startup.time_command([sys.executable, "-c", "import time; time.sleep(0.05)"], cold=False,
                                      poll_s=30.0)
    assert 0.05 <= seconds < 30


def test_a_failing_reference_is_named(smollm2_path, tmp_path, warm_only):
    binary = fake_llama_completion(tmp_path, "echo 'no such model' >&2; exit 3")
    with pytest.raises(RuntimeError, match=r"llama-completion failed \(exit 3\): no such model"):
        measure_startup(str(smollm2_path), 1, 1, binary)


def test_cli_needs_startup_for_the_reference(tmp_path):
    from click.testing import CliRunner

    from localinfer.cli.main import main

    binary = fake_llama_completion(tmp_path, "exit 0")
    result = CliRunner().invoke(main, ["bench", "smollm2", "--compare-llama-completion", binary])
    assert result.exit_code == 2 and "--compare-llama-completion needs --startup" in result.output


def test_cli_startup_alone_prints_its_table(smollm2_path, tmp_path, warm_only):
    from click.testing import CliRunner

    from localinfer.cli.main import main

    binary = fake_llama_completion(tmp_path, "exit 0")
    result = CliRunner().invoke(main, ["bench", str(smollm2_path), "-p", "0", "-n", "0", "-r", "1", "--startup",
                                       "--compare-llama-completion", binary])
    assert result.exit_code == 0, result.output
    assert "| warm |" in result.output and "llama-completion s" in result.output


def test_the_timed_starts_may_cache_their_bytecode(tmp_path, monkeypatch):
    """The untimed first start compiles the imports once, as an installed package's are; with
    PYTHONDONTWRITEBYTECODE passed on, every timed start would compile them again."""
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("LOCALINFER_PROBE", "kept")
    out = tmp_path / "env"
    startup.time_command(["/bin/sh", "-c", f"env > {out}"], cold=False)
    seen = out.read_text()
    assert "LOCALINFER_PROBE=kept" in seen and "PYTHONDONTWRITEBYTECODE" not in seen
