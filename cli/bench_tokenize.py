"""`localinfer bench tokenize`: tokenizing speed and memory on long texts, beside llama-tokenize."""
from __future__ import annotations

import shlex
import sys

import click


@click.command(name="tokenize")
@click.argument("models", nargs=-1, required=True)
@click.option("--text", "files", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="A text file to tokenize as well, repeated to --size (e.g. a book); repeatable.")
@click.option("--size", type=click.FloatRange(0.001, 256), default=4.0, show_default=True,
              help="Megabytes of each text.")
@click.option("-r", "--repetitions", "reps", type=click.IntRange(1), default=5, show_default=True)
@click.option("--compare-llama-tokenize", "llama_tokenize", type=click.Path(exists=True, dir_okay=False),
              help="Path to llama.cpp's llama-tokenize: run it on the same texts in the same run.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False),
              help="Write the tokenizing section of this markdown file (e.g. BENCHMARKS.md).")
def bench_tokenize(models, files, size, reps, llama_tokenize, report_path):
    """Tokenizing MODELS' vocabularies (catalog names or paths) on long texts: MB/s on one core and
    working memory, with llama-tokenize's MB/s and ids beside them when given."""
    from localinfer.files.fetch import resolve_model
    from localinfer.measure.bench_tokenize import make_texts, report, run_model, table

    def log(msg):
        click.echo(msg, err=True)

    try:
        texts = make_texts(int(size * 1e6), list(files))
        rows = [row for m in models for row in run_model(str(resolve_model(m)), texts, reps, llama_tokenize, log)]
    except (OSError, ValueError, LookupError, RuntimeError) as e:
        raise click.ClickException(str(e))
    click.echo(table(rows))
    if report_path:
        from localinfer.measure.report_sections import write_section
        args = [("$LLAMA_TOKENIZE" if a == llama_tokenize else shlex.quote(a)) for a in sys.argv[1:]]
        write_section(report_path, "tokenize", report(rows, "localinfer " + " ".join(args), reps))
        log(f"report written to {report_path}")
