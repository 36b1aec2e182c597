"""Load benchmark of `localinfer serve` (not a test): a real server on loopback, N concurrent
clients streaming over HTTP, and what they see.

    throughput   total generated tokens / wall time, at each concurrency (1, 4, 16 clients)
    TTFT         request sent -> first token received, p50 / p99 over all requests of a level
    prefix cache TTFT of a request whose ~1000-token system prompt an earlier request shared,
                 with the prefix cache and without it (a second server with --prefix-cache 0)

Every client sends a bounded number of requests; prompts differ per request (counting from a
different number) so that only the prefix-cache measurement reuses anything.
"""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass

import numpy as np

from .bench_suite import machine
from ..backend.kernels import isa
from ..serve.app import BackgroundServer
from .serve_load import Level, run_level, stream_request

WORDS = ("the river morning garden letter window village evening stone quiet market winter harbour "
         "lantern travel story friend mountain silver candle forest bridge music summer orchard").split()


NOTE = ("With the cache the request computes only the part of its prompt past what the server still holds "
        "(its one slot keeps the last request's tokens, the prefix cache whole 32-token blocks), and those tokens "
        "attend over every cached position.")


def system_prompt(model, n_tokens: int) -> str:
    """Deterministic prose of about n_tokens tokens."""
    rng = np.random.default_rng(0)
    words: list[str] = []
    while True:
        words += [str(w) for w in rng.choice(WORDS, 50)]
        text = "You are a patient assistant. Background notes: " + " ".join(words) + "."
        if len(model.tokenize(text)) >= n_tokens:
            return text


def prefix_ttft(model, model_name: str, cache_mib: int, system: str, repeats: int, ctx_size: int,
                max_tokens: int = 4) -> list[float]:
    """TTFTs of requests that share `system` with the request before them (the first is a warm-up)."""
    out = []
    with BackgroundServer(model, model_name, port=0, n_slots=1, n_ctx=ctx_size,
                          prefix_cache_bytes=cache_mib << 20) as server:
        for i in range(repeats + 1):
            body = {"messages": [{"role": "system", "content": system},
                                 {"role": "user", "content": f"Question {i}: what is the first word?"}],
                    "max_tokens": max_tokens, "temperature": 0}
            sample = stream_request(server.url, "/v1/chat/completions", body)
            if i:
                out.append(sample.ttft_s)
    return out


@dataclass
class Result:
    model: str
    levels: list[Level]
    ttft_cached: list[float]
    ttft_uncached: list[float]
    system_tokens: int
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    params: dict
    comparison: object = None  # bench_serve_compare.Comparison, with --compare-checkout


def run(model, model_name: str, concurrency=(1, 4, 16), requests_per_client: int = 2, max_tokens: int = 32,
        system_tokens: int = 1000, prefix_repeats: int = 3, ctx_size: int = 2048, log=print,
        compare_checkout: str | None = None, threads: int | None = None) -> Result:
    """compare_checkout: the root folder of a baseline checkout; both builds then serve from processes of their
    own (bench_serve_compare.py) and the levels are the current build's, beside the baseline's."""
    model.wait_repacked()   # measured as the model stays (arch/deferred_repack.py), not while it repacks
    load_before = os.getloadavg()
    parallel = max(concurrency)
    comparison = None
    if compare_checkout is not None:
        from .bench_serve_compare import compare
        comparison = compare(model.path, compare_checkout, concurrency, requests_per_client, max_tokens, ctx_size,
                             threads, log)
        levels = comparison.current
    else:
        levels = in_process_levels(model, model_name, concurrency, requests_per_client, max_tokens, ctx_size, log)
    system = system_prompt(model, system_tokens)
    n_system = len(model.tokenize(system))
    log(f"shared system prompt of {n_system} tokens: TTFT with the prefix cache ...")
    cached = prefix_ttft(model, model_name, 256, system, prefix_repeats, ctx_size)
    log(f"  {statistics.median(cached) * 1000:.0f} ms; without it ...")
    uncached = prefix_ttft(model, model_name, 0, system, prefix_repeats, ctx_size)
    log(f"  {statistics.median(uncached) * 1000:.0f} ms")
    return Result(model_name, levels, cached, uncached, n_system, load_before, os.getloadavg(),
                  dict(requests_per_client=requests_per_client, max_tokens=max_tokens, ctx_size=ctx_size,
                       parallel=parallel), comparison)


def in_process_levels(model, model_name: str, concurrency, requests_per_client: int, max_tokens: int,
                      ctx_size: int, log) -> list[Level]:
    parallel = max(concurrency)
    levels = []
    with BackgroundServer(model, model_name, port=0, n_slots=parallel, n_ctx=ctx_size,
                          max_queue=4 * parallel) as server:
        stream_request(server.url, "/v1/completions", {"prompt": "Hello", "max_tokens": 4})  # warm-up
        for c in concurrency:
            n = max(requests_per_client, 1) if c > 1 else max(requests_per_client, 4)
            log(f"{c} concurrent clients x {n} requests of {max_tokens} tokens ...")
            level = run_level(server.url, c, n, max_tokens, log)
            log(f"  {level.tokens} tokens in {level.wall_s:.1f} s: {level.tps:.1f} tok/s, "
                f"TTFT p50 {level.ttft_ms(50):.0f} ms p99 {level.ttft_ms(99):.0f} ms")
            levels.append(level)
    return levels


def markdown(r: Result, command: str, plot_path: str | None) -> str:
    m = machine()
    base = r.levels[0].tps if r.levels else 0.0
    lines = [
        "## Serving (`localinfer serve`)", "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {m['cpu']} ({isa()} kernels, "
        f"{m['n_cpus']} CPUs), "
        f"model {r.model}, {r.params['parallel']} slots of {r.params['ctx_size']} tokens, "
        + (f"the machine busy with other work (load average {r.load_before[0]:.1f} before, {r.load_after[0]:.1f} "
           "after), so absolute figures are low and noisy; the ratios come from one run."
           if max(r.load_before[0], r.load_after[0]) > 0.5 * m["n_cpus"] else
           f"the machine otherwise idle (load average {r.load_before[0]:.1f} before, {r.load_after[0]:.1f} after)."),
        "",
        "Regenerate with:", "", "```sh", command, "```", "",
        "Each client streams completions over HTTP on loopback one after another (different prompts, "
        f"{r.params['max_tokens']} tokens each, default sampling with a seed); throughput is all generated tokens "
        "over the wall time of the level; TTFT is from sending a request to its first token, queueing included.", "",
        "| clients | requests | tokens | wall s | total tok/s | vs 1 client | TTFT p50 ms | TTFT p99 ms | errors |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for lv in r.levels:
        ratio = lv.tps / base if base else float("nan")
        lines.append(f"| {lv.concurrency} | {len(lv.samples)} | {lv.tokens} | {lv.wall_s:.1f} | {lv.tps:.1f} | "
                     f"**{ratio:.2f}x** | {lv.ttft_ms(50):.0f} | {lv.ttft_ms(99):.0f} | {lv.errors} |")
    if r.comparison is not None:
        from .bench_serve_compare import comparison_markdown
        lines += ["", "The server above ran in a process of its own. "
                  + "\n".join(comparison_markdown(r.comparison, baseline_name(r.comparison.baseline_checkout)))]
    c, u = statistics.median(r.ttft_cached), statistics.median(r.ttft_uncached)
    lines += [
        "", f"Prefix cache: a chat request whose {r.system_tokens}-token system prompt an earlier request shared "
        f"(median of {len(r.ttft_cached)}, one client):", "",
        "| prefix cache | TTFT ms (median) | all ms |", "|---|---:|---|",
        f"| on | {c * 1000:.0f} | {', '.join(f'{x * 1000:.0f}' for x in r.ttft_cached)} |",
        f"| off (`--prefix-cache 0`) | {u * 1000:.0f} | {', '.join(f'{x * 1000:.0f}' for x in r.ttft_uncached)} |",
        "", f"The cached prefix cuts TTFT **{u / c:.1f}x**. {NOTE}", "",
    ]
    if plot_path:
        lines += [f"![serving throughput vs latency]({plot_path})", ""]
    return "\n".join(lines)


def baseline_name(src: str) -> str:
    """The baseline build as a reader can find it: its commit, when its folder is a git checkout."""
    import subprocess
    try:
        rev = subprocess.run(["git", "-C", src, "log", "-1", "--format=%h %s"], capture_output=True, text=True,
                             timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        rev = ""
    return f"commit {rev.split(' ', 1)[0]}, “{rev.split(' ', 1)[1]}”" if " " in rev else src


def plot(r: Result, path: str) -> None:
    """Total tokens/s against TTFT p50 (and p99), one point per concurrency."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError("plotting needs matplotlib: pip install 'localinfer[plot]'") from None
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for q, style in ((50, "o-"), (99, "s--")):
        xs = [lv.ttft_ms(q) for lv in r.levels]
        ys = [lv.tps for lv in r.levels]
        ax.plot(xs, ys, style, label=f"TTFT p{q}")
        if q == 50:
            for lv, x, y in zip(r.levels, xs, ys):
                ax.annotate(f"{lv.concurrency} client{'s' if lv.concurrency > 1 else ''}", (x, y),
                            textcoords="offset points", xytext=(6, -10), fontsize=8)
    ax.set_xlabel("time to first token (ms)")
    ax.set_ylabel("total generated tokens/s")
    ax.set_title(f"localinfer serve, {r.model}", fontsize=9)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
