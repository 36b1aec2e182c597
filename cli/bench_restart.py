"""`localinfer bench restart`: TTFT of a long system prompt on a just-started server, cold and
after a restart with --prefix-cache-dir (measure/bench_restart.py)."""
from __future__ import annotations

import shlex
import sys

import click

from .bench_grammar import _cpu_isa
from .common import set_threads


@click.command(name="restart")
@click.argument("models", nargs=-1, required=True)
@click.option("--system-tokens", type=click.IntRange(32, 8000), default=1000, show_default=True,
              help="Length of the system prompt.")
@click.option("-r", "--rounds", type=click.IntRange(1, 20), default=3, show_default=True,
              help="Cold start + restart pairs per model.")
@click.option("-c", "--ctx-size", type=click.IntRange(64), default=2048, show_default=True)
@click.option("-t", "--threads", type=click.IntRange(1), default=None, help="CPU threads of the servers.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False),
              help="Write the restart section of this markdown file (e.g. BENCHMARKS.md); other sections stay.")
def bench_restart(models, system_tokens, rounds, ctx_size, threads, report_path):
    """Start `localinfer serve MODEL --prefix-cache-dir DIR`, ask, stop, start again, ask with the same
    system prompt and a new question: both TTFTs, for each of MODELS (catalog names or paths)."""
    set_threads(threads)
    from localinfer.backend import kernels
    from localinfer.measure.bench_restart import markdown, run

    if system_tokens + 64 >= ctx_size:
        raise click.BadParameter(f"the {system_tokens}-token system prompt needs a larger --ctx-size than {ctx_size}")
    try:
        results = run(list(models), system_tokens, rounds, ctx_size, threads, log=lambda m: click.echo(m, err=True))
    except (OSError, ValueError, LookupError, RuntimeError) as e:
        raise click.ClickException(str(e))
    isa = (f"{kernels.isa()} kernels" if kernels.available() else "numpy reference backend") + _cpu_isa()
    text = markdown(results, "localinfer " + " ".join(shlex.quote(a) for a in sys.argv[1:]), isa)
    if report_path:
        from localinfer.measure.report_sections import write_section
        write_section(report_path, "restart", text)
        click.echo(f"report section written to {report_path}", err=True)
    else:
        click.echo(text)
