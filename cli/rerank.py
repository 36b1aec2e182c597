"""`localinfer rerank`: documents ordered by a re-ranker's relevance to a query (Model.rerank)."""
from __future__ import annotations

import json
import sys

import click

from .common import load_model, set_threads


@click.command()
@click.argument("model")
@click.argument("documents", nargs=-1)
@click.option("-q", "--query", required=True, help="What the documents are ranked against.")
@click.option("-f", "--file", "doc_file", type=click.File("r", encoding="utf-8"), default=None,
              help="Documents from this file, one per line ('-': stdin), after any DOCUMENT arguments.")
@click.option("-n", "--top-n", type=click.IntRange(1), default=None, help="Print only the N best.")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object as /v1/rerank answers: {\"results\": [{\"index\", \"relevance_score\", "
                   "\"document\": {\"text\"}}, ...]}, best first.")
@click.option("-c", "--ctx-size", type=click.IntRange(16), default=None, help="Longest query + document in tokens.")
@click.option("-t", "--threads", type=click.IntRange(1), default=None, help="CPU threads.")
def rerank(model, documents, query, doc_file, top_n, as_json, ctx_size, threads):
    """Rank each DOCUMENT by its relevance to --query with MODEL, a re-ranker (a cross-encoder such as
    bge-reranker: an encoder with a classification head); without DOCUMENT or -f, each line of stdin.
    Prints index, score and document, best first; the score is the model's raw output (a logit), as
    llama-server's /rerank reports it."""
    set_threads(threads)
    docs = list(documents)
    if doc_file is not None:
        docs += [line.rstrip("\r\n") for line in doc_file if line.strip()]
    elif not docs:
        docs = [line for line in sys.stdin.read().split("\n") if line.strip()]
    if not docs:
        raise click.ClickException("nothing to rank: give DOCUMENT arguments, -f FILE, or lines on stdin")
    try:
        llm = load_model(model, ctx_size, threads)
        results = llm.rerank(query, docs, top_n=top_n)
    except (OSError, ValueError, LookupError, RuntimeError, TypeError) as e:
        raise click.ClickException(str(e))
    if as_json:
        click.echo(json.dumps({"results": [{"index": r.index, "relevance_score": r.relevance_score,
                                            "document": {"text": docs[r.index]}} for r in results]}))
        return
    for r in results:
        click.echo(f"{r.index}\t{r.relevance_score:.6f}\t{docs[r.index]}")
