"""`localinfer bench embed`: encoders' embedding throughput, beside llama-embedding and sentence-transformers."""
from __future__ import annotations

import shlex
import sys

import click

from .common import set_threads

SHAPES = ("bge-small", "nomic-embed")


@click.command(name="embed")
@click.option("--shape", "shapes", type=click.Choice(SHAPES + ("tiny-bert",)), multiple=True,
              help="Encoder shapes to measure (repeatable; default: bge-small and nomic-embed).")
@click.option("--type", "ftypes", default="F16,Q8_0", show_default=True, help="File types, comma-separated.")
@click.option("--texts", "n_texts", type=click.IntRange(1, 4096), default=256, show_default=True,
              help="Texts embedded per call.")
@click.option("--tokens", "n_tokens", type=click.IntRange(3, 512), default=30, show_default=True,
              help="Tokens per text, [CLS] and [SEP] included.")
@click.option("-t", "--threads", type=click.IntRange(1), default=2, show_default=True)
@click.option("-r", "--repetitions", "reps", type=click.IntRange(1), default=3, show_default=True)
@click.option("--compare-llama-embedding", "llama_embedding", type=click.Path(exists=True, dir_okay=False),
              help="Path to llama.cpp's llama-embedding: run it on the same files and texts in the same run.")
@click.option("--compare-sentence-transformers", "st", is_flag=True,
              help="Also run sentence-transformers (torch, CPU) on the Hugging Face folders the files come from.")
@click.option("--st-batch", type=click.IntRange(1), default=32, show_default=True,
              help="sentence-transformers' batch_size (its default is 32).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False),
              help="Write the encoders section of this markdown file (e.g. BENCHMARKS.md).")
def bench_embed(shapes, ftypes, n_texts, n_tokens, threads, reps, llama_embedding, st, st_batch, report_path):
    """Texts/s of random-weight encoders of real shapes (bge-small 33M, nomic-embed 137M; written and
    converted on first use, cached), text in and normalized vectors out, with llama-embedding and
    sentence-transformers run on the same model in the same run when asked."""
    set_threads(threads)
    from localinfer.measure.bench_embed import report, run, table

    def log(msg):
        click.echo(msg, err=True)

    try:
        rows = run(list(shapes or SHAPES), [t.strip().upper() for t in ftypes.split(",") if t.strip()], n_texts,
                   n_tokens, threads, reps, llama_embedding, st, st_batch, log)
    except (OSError, ValueError, LookupError, RuntimeError) as e:
        raise click.ClickException(str(e))
    click.echo(table(rows))
    if report_path:
        from localinfer.measure.report_sections import write_section
        args = [("$LLAMA_EMBEDDING" if a == llama_embedding else shlex.quote(a)) for a in sys.argv[1:]]
        write_section(report_path, "embed", report(rows, "localinfer " + " ".join(args), reps, threads, st_batch))
        log(f"report written to {report_path}")
