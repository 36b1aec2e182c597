"""`bench serve --compare-checkout DIR`: the same load against two builds of `localinfer serve` in one run.

Each build serves from a process of its own (`localinfer serve`; the baseline's package from
PYTHONPATH=DIR/src and its CLI from DIR/cli, the folders pyproject.toml maps), both running at once
with the same model and options; the
load generator (bench_serve.run_level) is this process, the same for both. The concurrency levels
alternate between the two servers (baseline first on even levels, current first on odd ones), so
a change in the machine's load over the run falls on both.
"""
from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from typing import Iterator

from .serve_load import Level, run_level, stream_request

_URL = re.compile(r"at (http://[0-9.]+:\d+)/v1")


@dataclass
class Comparison:
    baseline_checkout: str
    baseline: list[Level]
    current: list[Level]
    baseline_cpu_s: list[float]  # CPU seconds (user + system) the server process spent on each level
    current_cpu_s: list[float]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its finished children (Linux /proc); the figure a busy
    machine disturbs least, as other work slows the server's wall time but not its own CPU time."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime stime cutime cstime


# `localinfer` from a checkout's source tree, its cli/, quant/ and models/ found before the installed
# package's: a file run by path (measure/checkout_main.py), not code in a string
_CHECKOUT_MAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "checkout_main.py")


@contextlib.contextmanager
def server_process(model_path: str, checkout: str | None, parallel: int, ctx_size: int, max_queue: int,
                   threads: int | None) -> Iterator[tuple[str, int]]:
    """A `localinfer serve` process on an ephemeral port, from the checkout at `checkout` (None: this
    package); yields (its URL, its pid), and stops it (SIGTERM) afterwards."""
    env = dict(os.environ)
    if checkout is not None:
        root = os.path.abspath(checkout)
        env["PYTHONPATH"] = os.path.join(root, "src") + os.pathsep + env.get("PYTHONPATH", "")
        cmd = [sys.executable, _CHECKOUT_MAIN, root]
    else:
        cmd = [sys.executable, "-m", "localinfer.cli.main"]
    cmd += ["serve", model_path, "--port", "0", "-np", str(parallel), "-c", str(ctx_size), "--queue", str(max_queue)]
    cmd += ["-t", str(threads)] if threads else []
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        seen = []
        for line in p.stderr:  # the server prints its address once it listens
            seen.append(line)
            m = _URL.search(line)
            if m:
                break
        else:
            raise RuntimeError(f"the server from {checkout or 'this package'} did not start: {''.join(seen)[-2000:]}")
        yield m.group(1), p.pid
    finally:
        p.terminate()
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def compare(model_path: str, baseline_checkout: str, concurrency, requests_per_client: int, max_tokens: int,
            ctx_size: int, threads: int | None, log) -> Comparison:
    parallel = max(concurrency)
    out = Comparison(baseline_checkout, [], [], [], [])
    with server_process(model_path, baseline_checkout, parallel, ctx_size, 4 * parallel, threads) as (old_url, old_pid), \
            server_process(model_path, None, parallel, ctx_size, 4 * parallel, threads) as (new_url, new_pid):
        for url in (old_url, new_url):  # warm-up
            stream_request(url, "/v1/completions", {"prompt": "Hello", "max_tokens": 4})
        for k, c in enumerate(concurrency):
            n = max(requests_per_client, 1) if c > 1 else max(requests_per_client, 4)
            order = [("baseline", old_url, old_pid, out.baseline, out.baseline_cpu_s),
                     ("current", new_url, new_pid, out.current, out.current_cpu_s)]
            for label, url, pid, levels, cpu in (order if k % 2 == 0 else order[::-1]):
                log(f"{label}: {c} concurrent clients x {n} requests of {max_tokens} tokens ...")
                before = cpu_seconds(pid)
                level = run_level(url, c, n, max_tokens, log)
                cpu.append(cpu_seconds(pid) - before)
                log(f"  {level.tokens} tokens in {level.wall_s:.1f} s: {level.tps:.1f} tok/s, "
                    f"TTFT p50 {level.ttft_ms(50):.0f} ms p99 {level.ttft_ms(99):.0f} ms, server CPU {cpu[-1]:.1f} s")
                levels.append(level)
    return out


def comparison_markdown(cmp: Comparison, baseline_name: str) -> list[str]:
    lines = [
        f"Against the baseline ({baseline_name}), measured in the same run: both servers as `localinfer serve` "
        "processes side by side, the levels alternating between them (the baseline's figures are the left ones). "
        "Server CPU is the CPU time the server process spent per 1000 generated tokens: other work on the machine "
        "slows wall time but barely changes it, so it is the steadier comparison here.",
        "",
        "| clients | baseline tok/s | tok/s | ratio | baseline TTFT p50 ms | TTFT p50 ms | baseline TTFT p99 ms | "
        "TTFT p99 ms | baseline server CPU s / 1k tok | server CPU s / 1k tok | errors (baseline/now) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for old, new, old_cpu, new_cpu in zip(cmp.baseline, cmp.current, cmp.baseline_cpu_s, cmp.current_cpu_s):
        ratio = new.tps / old.tps if old.tps else float("nan")
        per_k = [cpu * 1000 / lv.tokens if lv.tokens else float("nan") for cpu, lv in ((old_cpu, old), (new_cpu, new))]
        lines.append(f"| {new.concurrency} | {old.tps:.1f} | {new.tps:.1f} | **{ratio:.2f}x** | {old.ttft_ms(50):.0f} | "
                     f"{new.ttft_ms(50):.0f} | {old.ttft_ms(99):.0f} | {new.ttft_ms(99):.0f} | {per_k[0]:.2f} | "
                     f"{per_k[1]:.2f} | {old.errors}/{new.errors} |")
    return lines + [""]
