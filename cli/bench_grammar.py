"""`localinfer bench grammar`: decode tokens/s with a JSON schema against without, in the same run."""
from __future__ import annotations

import shlex
import sys

import click

from .common import set_threads


@click.command(name="grammar")
@click.argument("models", nargs=-1, required=True)
@click.option("-n", "--n-gen", type=click.IntRange(8, 4096), default=128, show_default=True,
              help="Tokens decoded per run.")
@click.option("-r", "--repetitions", "reps", type=click.IntRange(1), default=3, show_default=True)
@click.option("-t", "--threads", type=click.IntRange(1), default=None, help="CPU threads.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False),
              help="Write the constrained-decoding section of this markdown file (e.g. BENCHMARKS.md).")
def bench_grammar(models, n_gen, reps, threads, report_path):
    """Decode speed of MODELS (catalog names or paths) with a JSON schema and without, alternating."""
    set_threads(threads)
    from localinfer.backend import kernels
    from localinfer.files.fetch import resolve_model
    from localinfer.measure.bench_grammar import report, run_model, table

    def log(msg):
        click.echo(msg, err=True)

    try:
        rows = [run_model(str(resolve_model(m)), n_gen, reps, threads, log) for m in models]
    except (OSError, ValueError, LookupError, RuntimeError) as e:
        raise click.ClickException(str(e))
    click.echo(table(rows))
    if report_path:
        from localinfer.measure.report_sections import write_section
        command = "localinfer " + " ".join(shlex.quote(a) for a in sys.argv[1:])
        isa = f"{kernels.isa()} kernels" if kernels.available() else "numpy reference backend"
        isa += _cpu_isa()
        write_section(report_path, "grammar", report(rows, command, isa))
        log(f"report written to {report_path}")


def _cpu_isa() -> str:
    """The CPU's family, SIMD extensions and caches (bench_suite.machine), or ''."""
    from localinfer.measure.bench_suite import machine
    detail = machine()["cpu_detail"]
    return f" (CPU: {detail})" if detail else ""
