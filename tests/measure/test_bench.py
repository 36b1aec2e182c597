"""`localinfer bench`: the arithmetic of its rows, its formats and the llama-bench plumbing.
No test here asserts a speed."""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import textwrap
import time

import pytest

from localinfer.measure.bench import run_model, weight_bytes_per_token
from localinfer.measure.bench_report import markdown, table
from localinfer.measure.bench_suite import Suite, ratios, run_llama_bench
from localinfer.context import Context
from localinfer.files.gguf_file import GGUFFile

pytestmark = pytest.mark.slow  # times real models in worker processes


@pytest.fixture(scope="module")
def short_run(smollm2_path):
    """A short bench run, with every model call timed independently from outside."""
    calls = []  # (n_tokens, ns) of each Context.append, timed around the call
    original = Context.append

    def timed_append(self, tokens, **kw):
        t = time.perf_counter_ns()
        try:
            return original(self, tokens, **kw)
        finally:
            calls.append((len(tokens), time.perf_counter_ns() - t))

    Context.append = timed_append
    try:
        start = time.perf_counter_ns()
        rows = run_model(str(smollm2_path), 1, prompts=[8], gens=[3], reps=2)
        wall = time.perf_counter_ns() - start
    finally:
        Context.append = original
    return rows, wall, calls


def test_rows_are_llama_bench_shaped(short_run):
    rows, _, _ = short_run
    assert [r["test"] for r in rows] == ["pp8", "tg3"]
    pp, tg = rows
    assert (pp["n_prompt"], pp["n_gen"], tg["n_prompt"], tg["n_gen"]) == (8, 0, 0, 3)
    for r in rows:
        for key in ("model", "model_type", "quant", "n_threads", "avg_ts", "stddev_ts", "samples_ts", "samples_ns",
                    "load_s", "peak_rss_mib", "model_size", "weight_bytes_per_token", "backend"):
            assert key in r, key
        assert r["n_threads"] == 1 and r["quant"].startswith("Q4_1")


def test_arithmetic_of_the_rows(short_run):
    rows, wall_ns, _ = short_run
    for r in rows:
        n = r["n_prompt"] or r["n_gen"]
        assert len(r["samples_ns"]) == len(r["samples_ts"]) == 2
        for ns, ts in zip(r["samples_ns"], r["samples_ts"]):
            assert ts == pytest.approx(n / (ns / 1e9))
        assert r["avg_ts"] == pytest.approx(statistics.mean(r["samples_ts"]))
        assert r["stddev_ts"] == pytest.approx(statistics.stdev(r["samples_ts"]))
    # the timed samples are part of the whole call's wall-clock time
    assert sum(sum(r["samples_ns"]) for r in rows) < wall_ns
    tg = rows[1]
    assert tg["weight_gbps"] == pytest.approx(tg["avg_ts"] * tg["weight_bytes_per_token"] / 1e9)


def test_agrees_with_an_independent_measurement(short_run):
    """Each sample's time is the model work it measures: the sum of the same calls timed from
    outside, plus a little loop overhead (argmax)."""
    rows, _, calls = short_run
    pp, tg = rows
    # call order: pp warm-up (8), pp x2 reps (8 each), tg warm-up (3 x 1), tg x2 reps (3 x 1 each)
    assert [n for n, _ in calls] == [8] * 3 + [1] * 9
    pp_calls = [ns for _, ns in calls[1:3]]
    tg_calls = [sum(ns for _, ns in calls[6 + 3 * i:9 + 3 * i]) for i in range(2)]
    for sample, outside in zip(pp["samples_ns"] + tg["samples_ns"], pp_calls + tg_calls):
        assert outside <= sample <= outside * 1.2 + 5_000_000


def test_weight_bytes_per_token(smollm2_path):
    with GGUFFile(smollm2_path) as f:
        total = sum(t.nbytes for t in f.tensors.values())
        assert "output.weight" not in f.tensors  # tied: the embedding is read whole as the output
        assert weight_bytes_per_token(f) == total


def test_cli_json_output(smollm2_path):
    r = subprocess.run([sys.executable, "-m", "localinfer.cli.main", "bench", str(smollm2_path), "-p", "4", "-n", "2",
                        "-r", "1", "-t", "1", "-o", "json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert [row["test"] for row in data["rows"]] == ["pp4", "tg2"]
    assert data["machine"]["n_cpus"] >= 1


FAKE_LLAMA_BENCH = textwrap.dedent("""\
    import json, sys
    args = sys.argv[1:]
    get = lambda flag: args[args.index(flag) + 1]
    depths = [int(d) for d in get("-d").split(",")] if "-d" in args else [0]
    rows = []
    for p in get("-p").split(","):
        for d in depths:
            rows.append(dict(n_prompt=int(p), n_gen=0, n_depth=d, n_threads=int(get("-t")), avg_ts=100.0,
                             stddev_ts=1.0, samples_ts=[99.0, 101.0], model_type="llama ?B Q4_1", model_size=1,
                             backends="CPU"))
    for n in get("-n").split(","):
        for d in depths:
            rows.append(dict(n_prompt=0, n_gen=int(n), n_depth=d, n_threads=int(get("-t")), avg_ts=50.0,
                             stddev_ts=0.5, samples_ts=[50.0], model_type="llama ?B Q4_1", model_size=1,
                             backends="CPU"))
    print(json.dumps(rows))
""")


def test_llama_bench_rows_and_ratios(tmp_path):
    fake = tmp_path / "llama-bench"
    fake.write_text(f"#!{sys.executable}\n" + FAKE_LLAMA_BENCH)
    fake.chmod(0o755)
    suite = Suite(["/models/m.gguf"], [2], [128, 512], [64], reps=2)
    theirs = run_llama_bench(str(fake), "/models/m.gguf", 2, suite)
    assert [r["test"] for r in theirs] == ["pp128", "pp512", "tg64"]
    ours = [dict(r, runtime="localinfer", avg_ts=r["avg_ts"] * 1.5, stddev_ts=0.0, quant="Q4_1", backend="x")
            for r in theirs]
    rat = ratios(ours + theirs)
    assert [x["ratio"] for x in rat] == pytest.approx([1.5, 1.5, 1.5])
    assert "1.50" in markdown(ours + theirs)
    assert "localinfer/llama.cpp = 1.50" in table(theirs + [dict(r, load_s=0, peak_rss_mib=0, model_size=1,
                                                                   weight_bytes_per_token=1, ttft_ms=1,
                                                                   weight_gbps=1) for r in ours])


def test_decode_bandwidth_as_a_share_of_the_probe():
    """With a bandwidth probe, the GB/s decode reads its (active) weights at is also given as its share."""
    row = dict(runtime="localinfer", model="m", quant="Q4_K", n_threads=2, test="tg32", avg_ts=4.0, stddev_ts=0.1,
               n_gen=32, load_s=1.0, peak_rss_mib=10, model_size=2**30, weight_bytes_per_token=2**29,
               weight_gbps=2.147, ttft_ms=None)
    assert "tg share of probe" not in table([row])
    text = table([row], probe_gbps=3.0)
    assert "tg share of probe" in text and "72%" in text  # 2.147 / 3.0
    assert "| 72% |" in markdown([row], probe_gbps=3.0)


def test_llama_bench_gets_the_depths(tmp_path):
    """-d goes to llama-bench (only when asked: older builds have no -d) and names its tests as it does."""
    fake = tmp_path / "llama-bench"
    fake.write_text(f"#!{sys.executable}\n" + FAKE_LLAMA_BENCH)
    fake.chmod(0o755)
    suite = Suite(["/models/m.gguf"], [2], [512], [128], reps=1, depths=[0, 4096])
    theirs = run_llama_bench(str(fake), "/models/m.gguf", 2, suite)
    assert [(r["test"], r["n_depth"]) for r in theirs] == [("pp512", 0), ("pp512 @ d4096", 4096), ("tg128", 0),
                                                            ("tg128 @ d4096", 4096)]
    ours = [dict(r, runtime="localinfer", avg_ts=r["avg_ts"] * 2, quant="Q4_0", backend="x") for r in theirs]
    assert [(x["test"], x["ratio"]) for x in ratios(ours + theirs)][-1] == ("tg128 @ d4096", 2.0)
    assert "| tg128 @ d4096 |" in markdown(ours + theirs)


def test_bad_arguments():
    r = subprocess.run([sys.executable, "-m", "localinfer.cli.main", "bench", "smollm2", "-p", "x"],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "comma-separated integers" in r.stderr
    r = subprocess.run([sys.executable, "-m", "localinfer.cli.main", "bench"], capture_output=True, text=True)
    assert r.returncode != 0 and "at least one model" in r.stderr
    r = subprocess.run([sys.executable, "-m", "localinfer.cli.main", "bench", "--synthetic", "llama-70b"],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "unknown synthetic shape 'llama-70b'" in r.stderr


@pytest.mark.parametrize("sigint_ignored", [False, True])
def test_ctrl_c_reports_what_finished(smollm2_path, sigint_ignored):
    """In a terminal, Ctrl-C reaches the bench and its worker: the finished tests are printed,
    also when the bench was started with SIGINT ignored (from a script's background job)."""
    from terminal import Terminal
    term = Terminal(["bench", str(smollm2_path), "-p", "16", "-n", "400", "-t", "1", "-r", "2"],
                    sigint_ignored=sigint_ignored)
    term.expect("tg400 rep 1/2", timeout=120)
    term.send("\x03")
    assert term.wait(timeout=60) == 130
    screen = term.out.decode(errors="replace")
    assert "interrupted" in screen and "pp16" in screen and "tg400" in screen


def test_bench_is_one_group_whose_default_is_the_speed_test():
    """`bench FILE ...` runs llama-bench's test (`bench speed`); the other measurements are its
    subcommands, not commands of their own beside it."""
    import click
    from click.testing import CliRunner

    from localinfer.cli.main import main

    assert not [name for name in main.list_commands(click.Context(main)) if name.startswith("bench-")]
    listing = CliRunner().invoke(main, ["bench", "--help"]).output
    for name in ("speed", "serve", "spec", "grammar", "restart", "tokenize", "embed"):
        assert f"  {name} " in listing
    for args in (["bench", "--synthetic", "nonesuch-1b"], ["bench", "speed", "--synthetic", "nonesuch-1b"]):
        out = CliRunner().invoke(main, args)
        assert out.exit_code != 0 and "unknown synthetic shape 'nonesuch-1b'" in out.output, out.output   # the speed test's check
