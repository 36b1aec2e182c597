"""`localinfer bench`: llama-bench-style measurements, optionally side by side with llama.cpp."""
from __future__ import annotations

import os
import shlex
import sys

import click


def _int_list(ctx, param, value):
    try:
        out = [int(x) for x in str(value).split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {value!r}") from None
    if any(x < 0 for x in out):
        raise click.BadParameter("values must be >= 0")
    return out


@click.command()
@click.argument("models", nargs=-1)
@click.option("-p", "--n-prompt", "prompts", default="512", callback=_int_list, show_default=True,
              help="Prompt lengths for ppN tests, comma-separated.")
@click.option("-n", "--n-gen", "gens", default="128", callback=_int_list, show_default=True,
              help="Generation lengths for tgN tests, comma-separated.")
@click.option("-t", "--threads", default=str(min(os.cpu_count() or 1, 2)), callback=_int_list, show_default=True,
              help="Thread counts, comma-separated.")
@click.option("-r", "--repetitions", "reps", type=click.IntRange(1), default=3, show_default=True)
@click.option("-o", "--output", type=click.Choice(["table", "json", "md"]), default="table", show_default=True)
@click.option("--compare-llama-bench", "llama_bench", type=click.Path(exists=True, dir_okay=False),
              help="Path to llama.cpp's llama-bench: run it with the same parameters in the same run.")
@click.option("--llama-bench-args", default="", help="Extra arguments for llama-bench (quoted).")
@click.option("--backend", type=click.Choice(["auto", "c", "reference"]), default="auto", show_default=True,
              help="localinfer's backend: the C kernels or the numpy reference.")
@click.option("--membw", is_flag=True, help="Also probe memory bandwidth (alone if no model is given).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="Write a tokens/s vs threads plot (PNG).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False),
              help="Write the report into this markdown file (e.g. BENCHMARKS.md), replacing only its own section.")
def bench(models, prompts, gens, threads, reps, output, llama_bench, llama_bench_args, backend, membw, plot_path,
          report_path):
    """Measure prompt processing (ppN) and generation (tgN) tokens/s for MODELS (catalog names or paths)."""
    from localinfer.bench_report import markdown, plot, report, table, to_json
    from localinfer.bench_suite import Suite, memory_bandwidth, run_suite
    from localinfer.fetch import resolve_model

    from .progress import ByteProgress

    if not models and not membw:
        raise click.UsageError("give at least one model, or --membw")
    if any(t < 1 for t in threads):
        raise click.BadParameter("thread counts must be >= 1", param_hint="-t")

    def log(msg):
        click.echo(msg, err=True)

    bw = None
    if membw:
        log("probing memory bandwidth ...")
        bw = memory_bandwidth()
        log(f"memory bandwidth (numpy, 1 thread): read {bw['read_gbps']:.1f} GB/s, copy {bw['copy_gbps']:.1f} GB/s")
    try:
        paths = [str(resolve_model(m, progress=ByteProgress(f"pulling {m}"))) for m in models]
    except (OSError, ValueError, LookupError, RuntimeError) as e:
        raise click.ClickException(str(e))
    suite = Suite(paths, threads, prompts, gens, reps, llama_bench, shlex.split(llama_bench_args), backend)
    try:
        run_suite(suite, log)
    except RuntimeError as e:
        if not suite.rows:
            raise click.ClickException(str(e))
        log(f"error: {e}; reporting the results so far")
        suite.interrupted = True
    if output == "json":
        click.echo(to_json(suite, bw))
    elif output == "md":
        click.echo(markdown(suite.rows))
    elif suite.rows:
        click.echo(table(suite.rows))
    if plot_path and suite.rows:
        plot(suite.rows, plot_path)
        log(f"plot written to {plot_path}")
    if report_path:
        command = "localinfer " + " ".join(shlex.quote(a) for a in sys.argv[1:])
        if llama_bench:  # where the user keeps llama.cpp is theirs, not the report's
            command = command.replace(shlex.quote(llama_bench), "$LLAMA_BENCH")
        rel_plot = os.path.relpath(plot_path, os.path.dirname(os.path.abspath(report_path))) if plot_path else None
        from localinfer.report_sections import write_section
        write_section(report_path, "bench", report(suite, bw, command, rel_plot), first=True)  # other sections stay
        log(f"report written to {report_path}")
    if suite.interrupted:
        sys.exit(130)
