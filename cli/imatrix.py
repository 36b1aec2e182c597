"""`localinfer imatrix MODEL -f TEXT -o imatrix.gguf`: llama-imatrix's importance matrix, for
`localinfer quantize --imatrix`; `localinfer imatrix --in-file A.gguf --in-file B.gguf -o AB.gguf`
combines matrices computed on separate texts."""
from __future__ import annotations

import time

import click

from .common import load_model, set_threads


@click.command()
@click.argument("model", required=False)
@click.option("-f", "--file", "text_file", type=click.Path(exists=True, dir_okay=False),
              help="The calibration text.")
@click.option("--in-file", "in_files", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="An imatrix to combine (repeat it): with no -f, the files' sums and counts are added "
                   "as llama-imatrix --in-file does, and no model is needed.")
@click.option("-o", "--output", "output", default="imatrix.gguf", show_default=True, type=click.Path(dir_okay=False),
              help="Where to write the matrix (llama.cpp's GGUF imatrix format).")
@click.option("--output-format", type=click.Choice(["gguf", "dat"]), default="gguf", show_default=True,
              help="gguf, or llama.cpp's legacy .dat format.")
@click.option("-c", "--ctx-size", type=click.IntRange(16), default=512, show_default=True,
              help="Tokens per chunk (with --in-file: the chunk size the combined file records).")
@click.option("--chunks", type=click.IntRange(1), default=None, help="At most this many chunks (default: all).")
@click.option("--process-output", is_flag=True, help="Collect output.weight too (llama-imatrix --process-output).")
@click.option("-t", "--threads", type=click.IntRange(1), default=None, help="CPU threads.")
def imatrix(model, text_file, in_files, output, output_format, ctx_size, chunks, process_output, threads):
    """Compute MODEL's importance matrix on a text, as llama.cpp's llama-imatrix does.

    Per weight that multiplies activations: the sum over the text's tokens of each input
    column's squared activation, and the token count (per expert in a MoE tensor). The
    text is cut into chunks of --ctx-size tokens like perplexity's; it needs at least two.
    With --in-file and no text: the given matrices combined."""
    from localinfer.measure.imatrix import compute_imatrix
    from localinfer.quant.imatrix_file import write_imatrix, write_imatrix_legacy

    if in_files:
        if text_file:
            raise click.UsageError("--in-file with -f (a new text on top of loaded matrices) is not supported: "
                                   "compute the text's matrix alone, then combine the files with --in-file")
        _combine(in_files, output, output_format, ctx_size)
        return
    if not model or not text_file:
        raise click.UsageError("give MODEL and -f TEXT to compute a matrix, or --in-file FILE (repeated) to combine")

    set_threads(threads)
    with open(text_file, encoding="utf-8", errors="replace") as f:
        text = f.read()
    try:
        llm = load_model(model, ctx_size, threads)
        t0 = time.perf_counter()

        def progress(done, total, ppl):
            eta = (time.perf_counter() - t0) / done * (total - done)
            click.echo(f"[{done}/{total}] PPL {ppl:.4f}  (ETA {eta:.0f} s)", err=True)

        run = compute_imatrix(llm, text, ctx_size, chunks, process_output, dataset=text_file, progress=progress)
        (write_imatrix_legacy if output_format == "dat" else write_imatrix)(output, run.imatrix)
    except (OSError, ValueError, LookupError, RuntimeError) as e:  # ImatrixError, the chunking's: ValueErrors
        raise click.ClickException(str(e))
    im = run.imatrix
    click.echo(f"{output}: {len(im.entries)} entries, {im.chunk_count} chunks of {im.chunk_size} tokens, "
               f"PPL {run.ppl:.4f} over the text's second halves of chunks")



def _combine(in_files, output, output_format, chunk_size):
    from localinfer.quant.imatrix_file import ImatrixError, write_imatrix, write_imatrix_legacy
    from localinfer.quant.imatrix_merge import merge_imatrix_files

    try:
        im = merge_imatrix_files(in_files, chunk_size)
        (write_imatrix_legacy if output_format == "dat" else write_imatrix)(output, im)
    except (OSError, ImatrixError) as e:
        raise click.ClickException(str(e))
    click.echo(f"{output}: {len(im.entries)} entries from {len(in_files)} files, {im.chunk_count} chunks of "
               f"{im.chunk_size} tokens")
