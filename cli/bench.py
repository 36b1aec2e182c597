"""`localinfer bench`: llama-bench-style measurements, optionally side by side with llama.cpp."""
from __future__ import annotations

import os
import shlex
import sys

import click

from .common import cache_type_options, int_list


@click.command(name="speed")
@click.argument("models", nargs=-1)
@click.option("-p", "--n-prompt", "prompts", default="512", callback=int_list, show_default=True,
              help="Prompt lengths for ppN tests, comma-separated.")
@click.option("-n", "--n-gen", "gens", default="128", callback=int_list, show_default=True,
              help="Generation lengths for tgN tests, comma-separated.")
@click.option("-d", "--n-depth", "depths", default="0", callback=int_list, show_default=True,
              help="Context depths, comma-separated: each test runs after this many tokens fill the context "
                   "(llama-bench's -d; the test is named e.g. tg128 @ d4096).")
@click.option("--synthetic", "synthetic", multiple=True, metavar="SHAPE[:TYPE,...]",
              help="Also bench a random-weight model of a real shape (llama-1b, llama-3b, llama-8b, qwen2-7b, "
                   "qwen3moe-30b-a3b; qwen3moe-30b-a3b-8l: 8 of its layers) "
                   "in these llama.cpp file types (default Q4_0; MXFP4: every matrix MXFP4, as "
                   "llama-quantize --pure MXFP4_MOE), written into the cache on first use.")
@click.option("-t", "--threads", default=str(min(os.cpu_count() or 1, 2)), callback=int_list, show_default=True,
              help="Thread counts, comma-separated.")
@click.option("-r", "--repetitions", "reps", type=click.IntRange(1), default=3, show_default=True)
@click.option("-o", "--output", type=click.Choice(["table", "json", "md"]), default="table", show_default=True)
@click.option("--compare-llama-bench", "llama_bench", type=click.Path(exists=True, dir_okay=False),
              help="Path to llama.cpp's llama-bench: run it with the same parameters in the same run.")
@click.option("--startup", is_flag=True,
              help="Also time whole processes from start to the first token (`run --raw -n 1`), with a warm "
                   "page cache and, as root, a cold one.")
@click.option("--compare-llama-completion", "llama_completion", type=click.Path(exists=True, dir_okay=False),
              help="With --startup: llama.cpp's llama-completion, timed alternately with ours.")
@click.option("--llama-bench-args", default="", help="Extra arguments for llama-bench (quoted).")
@click.option("--backend", type=click.Choice(["auto", "c", "reference"]), default="auto", show_default=True,
              help="localinfer's backend: the C kernels or the numpy reference.")
@click.option("--membw", is_flag=True, help="Also probe memory bandwidth (alone if no model is given).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="Write a tokens/s vs threads plot (PNG).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False),
              help="Write the report into this markdown file (e.g. BENCHMARKS.md), replacing only its own section.")
@click.option("-ngl", "--n-gpu-layers", "n_gpu_layers", type=int, default=0, show_default=True, metavar="N",
              help="Layers on the CUDA device (llama-bench's -ngl, passed to it too; 99: all and the output).")
@cache_type_options
def bench(models, prompts, gens, depths, synthetic, threads, reps, output, llama_bench, startup, llama_completion,
          llama_bench_args, backend, membw, plot_path, report_path, cache_type_k, cache_type_v, n_gpu_layers):
    """Measure prompt processing (ppN) and generation (tgN) tokens/s for MODELS (catalog names or paths).

    --synthetic llama-8b:Q4_0,Q4_K_M benches random-weight files of Llama-3.1-8B's shape: real matrix
    shapes, llama.cpp's metadata and a real tokenizer (llama-bench loads them too), noise for text."""
    from localinfer.measure.bench_report import markdown, membw_line, plot, report, table, to_json
    from localinfer.measure.bench_suite import Suite, memory_bandwidth, run_suite
    from localinfer.measure.startup import measure_startup, startup_table
    from localinfer.files.fetch import resolve_model

    from .progress import ByteProgress

    if not models and not synthetic and not membw:
        raise click.UsageError("give at least one model, or --synthetic, or --membw "
                               "(other measurements: bench serve|spec|grammar|restart|tokenize --help)")
    if llama_completion and not startup:
        raise click.UsageError("--compare-llama-completion needs --startup")
    if any(t < 1 for t in threads):
        raise click.BadParameter("thread counts must be >= 1", param_hint="-t")

    def log(msg):
        click.echo(msg, err=True)

    bw = None
    if membw:
        log("probing memory bandwidth ...")
        bw = memory_bandwidth(threads=max(threads))  # decode's figure at the most threads benched
        log(membw_line(bw))
    try:
        paths = [str(resolve_model(m, progress=ByteProgress(f"pulling {m}"))) for m in models]
        paths += [str(p) for spec in synthetic for p in _synthetic_paths(spec, log)]
    except (OSError, ValueError, LookupError, RuntimeError) as e:
        raise click.ClickException(str(e))
    suite = Suite(paths, threads, prompts, gens, reps, llama_bench, shlex.split(llama_bench_args), backend, depths,
                  cache_types=(cache_type_k, cache_type_v), n_gpu_layers=n_gpu_layers)
    try:
        run_suite(suite, log)
    except RuntimeError as e:
        if not suite.rows:
            raise click.ClickException(str(e))
        log(f"error: {e}; reporting the results so far")
        suite.interrupted = True
    if startup and not suite.interrupted:
        log("timing whole processes to the first token ...")
        try:
            for path in paths:
                suite.startup += measure_startup(path, max(threads), reps, llama_completion, log)
        except RuntimeError as e:
            log(f"error: {e}; reporting the results so far")
        except KeyboardInterrupt:
            suite.interrupted = True
    starts = [startup_table(suite.startup)] if suite.startup else []
    if output == "json":
        click.echo(to_json(suite, bw))
    elif output == "md":
        click.echo("\n\n".join([markdown(suite.rows, bw and bw["read_gbps"])] + starts))
    elif suite.rows or starts:
        click.echo("\n\n".join(([table(suite.rows, bw and bw["read_gbps"])] if suite.rows else []) + starts))
    if plot_path and suite.rows:
        plot(suite.rows, plot_path)
        log(f"plot written to {plot_path}")
    if report_path:
        command = "localinfer " + " ".join(shlex.quote(a) for a in sys.argv[1:])
        if llama_bench:  # where the user keeps llama.cpp is theirs, not the report's
            command = command.replace(shlex.quote(llama_bench), "$LLAMA_BENCH")
        if llama_completion:
            command = command.replace(shlex.quote(llama_completion), "$LLAMA_COMPLETION")
        rel_plot = os.path.relpath(plot_path, os.path.dirname(os.path.abspath(report_path))) if plot_path else None
        from localinfer.measure.report_sections import write_section
        write_section(report_path, "bench", report(suite, bw, command, rel_plot), first=True)  # other sections stay
        log(f"report written to {report_path}")
    if suite.interrupted:
        sys.exit(130)


def _synthetic_paths(spec: str, log) -> list:
    """The cached files of one --synthetic SHAPE[:TYPE,...], written first where absent."""
    import time

    from localinfer.quant.synthetic import parse_spec, synthetic_model

    from .progress import ByteProgress

    shape, ftypes = parse_spec(spec)
    out = []
    for ft in ftypes:
        t0 = time.monotonic()
        path = synthetic_model(shape, ft, log=log, progress=ByteProgress)
        if time.monotonic() - t0 > 1:
            log(f"{path}: {path.stat().st_size / 2**20:.0f} MiB, made in {time.monotonic() - t0:.0f} s")
        out.append(path)
    return out
