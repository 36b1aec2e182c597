"""`localinfer quality MODEL...`: the quantization quality table (size, bits/weight, PPL, KLD, speed)."""
from __future__ import annotations

import os
import shlex
import sys

import click

from .common import set_threads

# localinfer.measure.quality.DEFAULT_TYPES, spelled out: importing localinfer imports numpy, which must wait
# for set_threads (a test checks that the two agree)
DEFAULT_TYPES = "F16,Q8_0,Q6_K,Q5_K_M,Q5_0,Q4_K_M,Q4_1,Q4_0,Q3_K_M,Q2_K"


@click.command()
@click.argument("models", nargs=-1, required=True)
@click.option("--types", "types_spec", default=DEFAULT_TYPES,
              show_default=True, help="File types to measure, comma-separated (F16 is the base itself).")
@click.option("-f", "--file", "text_file", required=True, type=click.Path(exists=True, dir_okay=False),
              help="The text for PPL and KLD.")
@click.option("-c", "--ctx-size", type=click.IntRange(4), default=512, show_default=True, help="Tokens per chunk.")
@click.option("--chunks", type=click.IntRange(1), default=4, show_default=True, help="Chunks of the text to score.")
@click.option("-t", "--threads", type=click.IntRange(1), default=min(os.cpu_count() or 1, 2), show_default=True,
              help="CPU threads for every measurement (fixed, so the speeds compare).")
@click.option("-p", "--n-prompt", type=click.IntRange(0), default=128, show_default=True,
              help="Prefill test ppN (0: none).")
@click.option("-n", "--n-gen", type=click.IntRange(0), default=32, show_default=True,
              help="Decode test tgN (0: none).")
@click.option("-r", "--repetitions", "reps", type=click.IntRange(1), default=1, show_default=True)
@click.option("--work-dir", type=click.Path(file_okay=False),
              help="Keep the base and the quantized files here (default: a temporary directory, removed).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False), help="Write the markdown report here.")
@click.option("--busy", default=None,
              help="Say in the report that the machine was busy, and how (e.g. 'load average 4 on 2 cores').")
def quality(models, types_spec, text_file, ctx_size, chunks, threads, n_prompt, n_gen, reps, work_dir,
            report_path, busy):
    """Quantize each MODEL's de-quantized F16 base to every type and measure it.

    \b
    localinfer quality smollm2 gemma3 -f TEXT -c 512 --chunks 4 --report docs/quality.md

    Per type: file size, bits per weight, PPL, Δppl and mean KLD against the base, top-1
    agreement, prefill and decode tokens/s. Progress goes to stderr, the table to stdout
    (and to --report, rewritten after every row)."""
    set_threads(threads)
    from localinfer.measure import quality as Q
    from localinfer.measure.bench_suite import machine

    try:
        types = Q.parse_types(types_spec)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--types")
    with open(text_file, encoding="utf-8", errors="replace") as f:
        text = f.read()
    s = Q.Settings(text, ctx_size, chunks, threads, n_prompt, n_gen, reps)
    # where the text lies on this machine is not the report's: it names the file
    command = "localinfer " + " ".join("$TEXT" if a == text_file else shlex.quote(a) for a in sys.argv[1:])
    load0 = os.getloadavg()[0]
    done: list = []

    def write_report(current=None):
        if report_path:
            tables = done + ([current] if current is not None else [])
            # its own section only: docs/quality.md also holds the KV-cache types' section
            from localinfer.measure.report_sections import write_section
            write_section(report_path, "quality", Q.report(tables, s, types, command, machine(), busy,
                                                           f"$TEXT = {os.path.basename(text_file)}",
                                                           (load0, os.getloadavg()[0])), first=True)

    def log(msg):
        click.echo(msg, err=True)

    try:
        for m in models:
            t = Q.measure_model(m, types, s, work_dir, log=log, on_row=write_report)
            done.append(t)
            click.echo(f"\n## {t.name}\n\n{Q.markdown_table(t, s)}")
    except (OSError, ValueError, LookupError, RuntimeError) as e:
        raise click.ClickException(str(e))
    write_report()
    if report_path:
        log(f"report written to {report_path}")
