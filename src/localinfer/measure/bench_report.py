"""Formatting benchmark results: a readable table, markdown, JSON, a plot, BENCHMARKS.md."""
from __future__ import annotations

import json
import time

from .bench_suite import Suite, machine, ratios
from .startup import startup_table


def _ts(r: dict) -> str:
    return f"{r['avg_ts']:.2f} ± {r['stddev_ts']:.2f}"


COLUMNS = ["runtime", "model", "quant", "threads", "test", "t/s", "backend"]


def _cells(r: dict) -> list[str]:
    return [r["runtime"], r["model"], r.get("quant") or r.get("model_type") or "", str(r["n_threads"]), r["test"],
            _ts(r), r.get("backend", "")]


def table(rows: list[dict], probe_gbps: float | None = None) -> str:
    cells = [COLUMNS] + [_cells(r) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    lines = ["  ".join(c[i].ljust(widths[i]) for i in range(len(COLUMNS))) for c in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    out = "\n".join(lines)
    if rat := ratios(rows):
        out += "\n\n" + "\n".join(f"{x['model']} t={x['n_threads']} {x['test']}: localinfer/llama.cpp = {x['ratio']:.2f}"
                                  for x in rat)
    extras = [r for r in rows if r["runtime"] == "localinfer"]
    if extras:
        out += "\n\n" + extras_table(extras, markdown=False, probe_gbps=probe_gbps)
    return out


def markdown(rows: list[dict], probe_gbps: float | None = None) -> str:
    out = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    out += ["| " + " | ".join(_cells(r)) + " |" for r in rows]
    if rat := ratios(rows):
        out += ["", "| model | threads | test | localinfer t/s | llama.cpp t/s | ratio |", "|---|---:|---|---:|---:|---:|"]
        out += [f"| {x['model']} | {x['n_threads']} | {x['test']} | {x['localinfer_ts']:.1f} | {x['llama_cpp_ts']:.1f} "
                f"| **{x['ratio']:.2f}** |" for x in rat]
    extras = [r for r in rows if r["runtime"] == "localinfer"]
    if extras:
        out += ["", extras_table(extras, markdown=True, probe_gbps=probe_gbps)]
    return "\n".join(out)


def extras_table(rows: list[dict], markdown: bool, probe_gbps: float | None = None) -> str:
    """Per model x threads: load time, TTFT, peak RSS, size, the weight bytes a decode step reads
    (of a mixture of experts only the chosen experts': bench.weight_bytes_per_token) and the GB/s
    decode reads them at -- with `probe_gbps` (the bandwidth probe's read figure), also as a share of it."""
    seen, lines = set(), []
    head = ["model", "threads", "load s", "TTFT ms (pp)", "peak RSS MiB", "file MiB", "weights MiB/token", "tg GB/s"]
    if probe_gbps:
        head.append("tg share of probe")
    for r in rows:
        key = (r["model"], r["n_threads"])
        if key in seen:
            continue
        seen.add(key)
        same = [x for x in rows if (x["model"], x["n_threads"]) == key]
        pp = next((x for x in same if x.get("n_prompt")), None)
        tg = next((x for x in same if x.get("n_gen")), None)
        def fmt(row, key, spec, scale=1.0):
            return format(row[key] * scale, spec) if row is not None and row.get(key) is not None else "-"
        lines.append([r["model"], str(r["n_threads"]), fmt(r, "load_s", ".2f"),
                      f"{fmt(pp, 'ttft_ms', '.0f')} ({pp['test']})" if pp else "-", fmt(r, "peak_rss_mib", ".0f"),
                      fmt(r, "model_size", ".1f", 2**-20), fmt(r, "weight_bytes_per_token", ".1f", 2**-20),
                      fmt(tg, "weight_gbps", ".2f")])
        if probe_gbps:
            lines[-1].append(f"{tg['weight_gbps'] / probe_gbps:.0%}" if tg and tg.get("weight_gbps") else "-")
    if markdown:
        return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                         + ["| " + " | ".join(x) + " |" for x in lines])
    widths = [max(len(c[i]) for c in [head] + lines) for i in range(len(head))]
    return "\n".join("  ".join(c[i].ljust(widths[i]) for i in range(len(head))) for c in [head] + lines)


def to_json(s: Suite, membw: dict | None) -> str:
    return json.dumps({"machine": machine(), "interrupted": s.interrupted, "rows": s.rows,
                       "ratios": ratios(s.rows), "memory_bandwidth": membw, "startup": s.startup}, indent=2)


def plot(rows: list[dict], path: str) -> None:
    """tokens/s vs threads for every (model, test), both runtimes. Needs matplotlib (extra 'plot')."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError("plotting needs matplotlib: pip install 'localinfer[plot]'") from None
    order = {r["test"]: (r["test"][:2], r.get("n_prompt") or r.get("n_gen") or 0, r.get("n_depth") or 0) for r in rows}
    tests = sorted(order, key=order.get)
    models = sorted({r["model"] for r in rows})
    fig, axes = plt.subplots(len(models), len(tests), figsize=(3.6 * len(tests), 3.2 * len(models)), squeeze=False)
    for i, m in enumerate(models):
        for j, t in enumerate(tests):
            ax = axes[i][j]
            for runtime, style in (("localinfer", "o-"), ("llama.cpp", "s--")):
                pts = sorted((r["n_threads"], r["avg_ts"], r["stddev_ts"]) for r in rows
                             if r["model"] == m and r["test"] == t and r["runtime"] == runtime)
                if pts:
                    ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts], fmt=style,
                                label=runtime, capsize=3)
            ax.set_title(f"{m[:28]}\n{t}", fontsize=8)
            ax.set_xticks(sorted({r["n_threads"] for r in rows}))
            ax.set_xlabel("threads")
            ax.set_ylabel("tokens/s")
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def membw_line(membw: dict) -> str:
    """What the bandwidth probe measured: the C pool's threads streaming a buffer larger than the
    last-level cache (what decode reads weights with), or numpy on one thread without the kernels."""
    threads = f"{membw['threads']} thread{'s' if membw['threads'] != 1 else ''}"
    line = (f"Memory bandwidth probe ({membw['tool']}, {threads}, {membw['size_mib']} MiB buffer): read "
            f"{membw['read_gbps']:.1f} GB/s, copy {membw['copy_gbps']:.1f} GB/s (read + write bytes)")
    if membw.get("tool") != "numpy" and membw.get("numpy_read_gbps"):
        line += f"; numpy on one thread reads {membw['numpy_read_gbps']:.1f} GB/s"
    return line + "."


def report(s: Suite, membw: dict | None, command: str, plot_path: str | None) -> str:
    """The whole BENCHMARKS.md."""
    m = machine()
    lines = [
        "# Benchmarks", "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {m['cpu']} ({m['cpu_detail']}; {m['n_cpus']} CPUs, "
        f"{m['system']}, Python {m['python']}).", "",
        "Regenerate with:", "", "```sh", command, "```", "",
        "How it is measured: each model x thread count runs in a fresh process. ppN evaluates N random tokens",
        "in one batch on an empty context and computes the last token's logits; tgN generates N tokens one at a",
        "time from an empty context (llama-bench's definitions). `ppN @ dD` / `tgN @ dD` (`-d D`) run the same",
        "test after D random tokens already fill the context (computed untimed, as llama-bench's `-d`).",
        "Each test has one warm-up run, then the repetitions; values are mean ± stddev tokens/s.",
        "When llama.cpp's llama-bench is given, it runs with the same models and parameters interleaved with ours",
        "in the same run: this machine is shared and noisy, so only the ratios from one run are meaningful.",
        "`$LLAMA_BENCH` is a llama-bench built by the user outside this repository.", "",
    ]
    if membw:
        lines += [membw_line(membw), ""]
    if s.interrupted:
        lines += ["**This run was interrupted; the tables hold the tests that finished.**", ""]
    lines += ["## Results", "", markdown(s.rows, membw["read_gbps"] if membw else None), ""]
    if s.startup:
        lines += ["Start to first token, whole process (`localinfer run MODEL --raw -p Hi -n 1` against",
                  "`llama-completion -m MODEL -p Hi -n 1 -no-cnv`, alternating; medians; cold = page cache dropped):",
                  "", startup_table(s.startup), ""]
    if plot_path:
        lines += [f"![tokens/s vs threads]({plot_path})", ""]
    return "\n".join(lines)
