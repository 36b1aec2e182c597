"""`localinfer bench serve`: throughput and TTFT of the server under 1, 4, 16 concurrent clients."""
from __future__ import annotations

import os
import shlex
import sys

import click

from .common import int_list, load_model, set_threads


@click.command(name="serve")
@click.argument("model", required=False)
@click.option("--concurrency", default="1,4,16", callback=int_list, show_default=True,
              help="Concurrent clients per level, comma-separated.")
@click.option("--requests", "requests_per_client", type=click.IntRange(1, 100), default=2, show_default=True,
              help="Requests each client sends per level (a single client sends at least 4).")
@click.option("-n", "--max-tokens", type=click.IntRange(1, 4096), default=128, show_default=True,
              help="Tokens per answer: long enough that decode, not each request's prefill, dominates.")
@click.option("--system-tokens", type=click.IntRange(32, 8000), default=1000, show_default=True,
              help="Length of the shared system prompt for the prefix-cache TTFT.")
@click.option("-c", "--ctx-size", type=click.IntRange(64), default=2048, show_default=True)
@click.option("-t", "--threads", type=click.IntRange(1), default=None, help="CPU threads.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="Write throughput vs latency (PNG).")
@click.option("--compare-checkout", type=click.Path(file_okay=False, exists=True), default=None,
              help="Also measure the server of another checkout of localinfer (its root folder, e.g. an older "
                   "commit's worktree), both as "
                   "`localinfer serve` processes in the same run, and report the two side by side.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False),
              help="Write the serving section of this markdown file (e.g. BENCHMARKS.md); other sections stay.")
def bench_serve(model, concurrency, requests_per_client, max_tokens, system_tokens, ctx_size, threads, plot_path,
                compare_checkout, report_path):
    """Load benchmark of `localinfer serve` with MODEL (default: the catalog default): a real server on
    loopback, concurrent streaming clients, total tokens/s and TTFT p50/p99, and the prefix cache's effect."""
    set_threads(threads)
    from localinfer.measure.bench_serve import markdown, plot, run
    from localinfer.measure.report_sections import write_section

    if not concurrency or min(concurrency) < 1:
        raise click.BadParameter("concurrency levels must be >= 1", param_hint="--concurrency")
    if system_tokens + 32 >= ctx_size:
        raise click.BadParameter(f"the {system_tokens}-token system prompt needs a larger --ctx-size than {ctx_size}")
    if plot_path:  # before minutes of measuring, not after
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise click.ClickException("--plot needs matplotlib: pip install 'localinfer[plot]'") from None
    try:
        llm = load_model(model, ctx_size, threads)
    except (OSError, ValueError, LookupError, RuntimeError) as e:
        raise click.ClickException(str(e))
    name = model if model and not os.path.exists(model) else os.path.splitext(os.path.basename(llm.path))[0]
    result = run(llm, name, concurrency, requests_per_client, max_tokens, system_tokens, ctx_size=ctx_size,
                 log=lambda m: click.echo(m, err=True), compare_checkout=compare_checkout, threads=threads)
    command = "localinfer " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    rel_plot = None
    if plot_path:
        plot(result, plot_path)
        click.echo(f"plot written to {plot_path}", err=True)
        if report_path:
            rel_plot = os.path.relpath(plot_path, os.path.dirname(os.path.abspath(report_path)))
    text = markdown(result, command, rel_plot)
    if report_path:
        write_section(report_path, "serve", text)
        click.echo(f"report section written to {report_path}", err=True)
    else:
        click.echo(text)
