"""`localinfer embed`: sentence embeddings of texts, as llama.cpp's llama-embedding prints them."""
from __future__ import annotations

import json
import sys

import click

from .common import load_model, set_threads

POOLINGS = ["mean", "last", "cls", "none", "rank"]  # llama-embedding's --pooling


@click.command()
@click.argument("model")
@click.argument("texts", nargs=-1)
@click.option("--pooling", type=click.Choice(POOLINGS), default=None,
              help="How the final hidden states are pooled (default: the file's pooling_type, else mean); "
                   "none: every token's vector; rank (encoders): a re-ranker's or classifier's head scores, "
                   "never normalized.")
@click.option("--no-normalize", is_flag=True, help="Raw pooled vectors (default: L2-normalized, llama.cpp's default).")
@click.option("--format", "fmt", type=click.Choice(["array", "json", "raw"]), default="array", show_default=True,
              help="array: [[...], ...]; json: OpenAI's list object; raw: one vector per line. With --pooling "
                   "none each text is a list of token vectors (raw: a blank line after each text).")
@click.option("-c", "--ctx-size", type=click.IntRange(16), default=None, help="Longest text in tokens.")
@click.option("-t", "--threads", type=click.IntRange(1), default=None, help="CPU threads.")
def embed(model, texts, pooling, no_normalize, fmt, ctx_size, threads):
    """Embed each TEXT with MODEL (a catalog name or a .gguf path); without TEXT, each line of stdin."""
    set_threads(threads)
    if not texts:
        texts = [line for line in sys.stdin.read().split("\n") if line]
    if not texts:
        raise click.ClickException("nothing to embed: give TEXT arguments or lines on stdin")
    try:
        llm = load_model(model, ctx_size, threads)
        vectors = llm.embed(list(texts), pooling=pooling, normalize=not no_normalize)
    except (OSError, ValueError, LookupError, RuntimeError, TypeError) as e:
        raise click.ClickException(str(e))
    per_token = pooling == "none"
    rows = [_rounded(v) for v in vectors]  # per text: a vector, or (none) a list of token vectors
    if fmt == "raw":
        for r in rows:
            for vector in (r if per_token else [r]):
                click.echo(" ".join(f"{x:.7f}" for x in vector))
            if per_token:
                click.echo("")
    elif fmt == "json":
        data = [{"object": "embedding", "index": i, "embedding": r} for i, r in enumerate(rows)]
        click.echo(json.dumps({"object": "list", "data": data}))
    else:
        click.echo(json.dumps(rows))


def _rounded(v) -> list:
    """A vector's (or a (n_tokens, n_embd) array's) values with llama-embedding's 7 decimals (%1.7f)."""
    if getattr(v, "ndim", 1) == 2:
        return [_rounded(row) for row in v]
    return [round(float(x), 7) for x in v]
