"""`localinfer perplexity`: llama-perplexity's measurement, and KL divergence against a base model.

Results (the running values, the final estimate, the KLD table and statistics) go to stdout;
progress and the ETA go to stderr.
"""
from __future__ import annotations

import sys
import time

import click

from .common import cache_type_options, load_model, set_threads

DEFAULT_CTX = 512


def _log(msg: str) -> None:
    click.echo(msg, err=True)


def _out(text: str, nl: bool = True) -> None:
    sys.stdout.write(text + ("\n" if nl else ""))
    sys.stdout.flush()


def _eta(seconds_per_chunk: float, n_chunk: int) -> str:
    total = int(seconds_per_chunk * n_chunk)
    hours = f"{total // 3600} hours " if total >= 3600 else ""
    return f"{seconds_per_chunk:.2f} seconds per pass - ETA {hours}{(total % 3600) / 60:.2f} minutes"


@click.command()
@click.argument("model")
@click.option("-f", "--file", "text_file", type=click.Path(exists=True, dir_okay=False),
              help="The text to measure (not needed with --kl-divergence: the base file holds its tokens).")
@click.option("-c", "--ctx-size", type=click.IntRange(4), default=None,
              help=f"Tokens per chunk; the second half of each is scored.  [default: {DEFAULT_CTX}]")
@click.option("--chunks", type=click.IntRange(1), default=None, help="At most this many chunks (default: all).")
@click.option("-t", "--threads", type=click.IntRange(1), default=None, help="CPU threads.")
@click.option("--kl-divergence-base", "base_path", type=click.Path(dir_okay=False),
              help="Save the model's distributions here (or, with --kl-divergence, read a saved base).")
@click.option("--kl-divergence", "kl", is_flag=True,
              help="Compare MODEL with the base saved in --kl-divergence-base: KLD, top-1 agreement, Δppl.")
@click.option("--kl-top-k", type=click.IntRange(1), default=None,
              help="Base tokens kept per position when saving a base (default 1024; larger is closer to "
                   "the full-vocabulary KLD and makes a bigger file).")
@cache_type_options
def perplexity(model, text_file, ctx_size, chunks, threads, base_path, kl, kl_top_k, cache_type_k, cache_type_v):
    """Perplexity of MODEL on a text, as llama.cpp's llama-perplexity measures it.

    \b
    localinfer perplexity MODEL -f TEXT -c 512 [--chunks N]
    localinfer perplexity BASE  -f TEXT --kl-divergence-base base.kld      # save the base
    localinfer perplexity QUANT --kl-divergence-base base.kld --kl-divergence
    """
    if kl and not base_path:
        raise click.UsageError("--kl-divergence needs --kl-divergence-base FILE (a saved base)")
    if kl and kl_top_k is not None:
        raise click.UsageError("--kl-top-k applies when saving a base, not with --kl-divergence")
    if not kl and not text_file:
        raise click.UsageError("give the text with -f FILE")
    set_threads(threads)
    try:
        if kl:
            _run_kld(model, base_path, ctx_size, chunks, threads, (cache_type_k, cache_type_v))
        else:
            _run_ppl(model, text_file, ctx_size or DEFAULT_CTX, chunks, threads, base_path, kl_top_k,
                     (cache_type_k, cache_type_v))
    except (OSError, ValueError, LookupError, RuntimeError) as e:
        raise click.ClickException(str(e))


def _run_ppl(model_name, text_file, n_ctx, n_chunks, threads, base_path, top_k, cache_types=("f16", "f16")):
    from localinfer.measure import perplexity as P
    from localinfer.measure.kld_file import BaseWriter, base_chunk, base_header

    with open(text_file, encoding="utf-8", errors="replace") as f:
        text = f.read()
    llm = load_model(model_name, n_ctx, threads, None, *cache_types)
    _log("perplexity: tokenizing the input ..")
    t0 = time.perf_counter()
    tokens = P.text_tokens(llm, text)
    _log(f"perplexity: tokenization took {1e3 * (time.perf_counter() - t0):g} ms")
    chunks = P.make_chunks(tokens, n_ctx, n_chunks)
    n_chunk = chunks.shape[0]
    _log(f"perplexity: calculating perplexity over {n_chunk} chunks, n_ctx={n_ctx}, batch_size={n_ctx}, n_seq=1")
    writer, keep = None, None
    if base_path:
        header = base_header(llm, chunks, top_k)
        _log(f"perplexity: saving the base distributions (top {header.top_k}) to {base_path}")
        writer = BaseWriter(base_path, header, chunks)
        keep = lambda logits, targets: writer.write(base_chunk(logits, targets, header.top_k))  # noqa: E731
    stats = P.PerplexityStats()
    t0 = time.perf_counter()
    try:
        for i, stats in enumerate(P.perplexity_pass(llm, chunks, keep)):
            if i == 0:
                _log("perplexity: " + _eta(time.perf_counter() - t0, n_chunk))
            _out(P.format_running(i + 1, stats.ppl), nl=False)
    finally:
        if writer:
            writer.close()
    _out("")
    _out(P.format_final(stats))


def _run_kld(model_name, base_path, ctx_size, n_chunks, threads, cache_types=("f16", "f16")):
    from localinfer.measure.kl_divergence import TABLE_HEADER, KLDStats, format_report, format_row, kld_pass
    from localinfer.measure.kld_file import BaseReader

    base = BaseReader(base_path)
    h = base.header
    if ctx_size is not None and ctx_size != h.n_ctx:
        raise ValueError(f"{base_path} was computed with a context of {h.n_ctx}, not {ctx_size} (leave out -c)")
    llm = load_model(model_name, h.n_ctx, threads, None, *cache_types)
    base.check_model(llm, model_name)
    chunks = base.tokens()[:n_chunks]
    n_chunk = chunks.shape[0]
    _log(f"kl_divergence: computing over {n_chunk} chunks, n_ctx={h.n_ctx}, batch_size={h.n_ctx}, n_seq=1 "
         f"(base: {h.model}, top {h.top_k} of {h.n_vocab} tokens)")
    stats = KLDStats()
    t0 = time.perf_counter()
    for i, stats in enumerate(kld_pass(llm, chunks, base)):
        if i == 0:
            _log("kl_divergence: " + _eta(time.perf_counter() - t0, n_chunk))
            _out("")
            _out(TABLE_HEADER)
        _out(format_row(i + 1, stats.summary()))
    _out("")
    if stats.count < 100:
        _log("kl_divergence: fewer than 100 scored tokens: no closing statistics")
        return
    _out(format_report(stats.summary()))
