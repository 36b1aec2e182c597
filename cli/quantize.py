"""`localinfer quantize IN.gguf OUT.gguf TYPE`: llama-quantize's job, streamed and atomic. IN may be a
catalog name (`localinfer quantize --allow-requantize smollm2 smollm2-f16.gguf F16`), as in `run`."""
from __future__ import annotations

import click

from .progress import ByteProgress


@click.command()
@click.argument("input_path", metavar="IN.gguf|NAME", type=click.Path(dir_okay=False))
@click.argument("output_path", metavar="OUT.gguf", type=click.Path(dir_okay=False))
@click.argument("target", metavar="TYPE")
@click.option("--allow-requantize", is_flag=True,
              help="Accept an input whose weights are already quantized (they are dequantized first; "
                   "quality is lower than from an F16/BF16/F32 input).")
@click.option("--imatrix", "imatrix", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Importance matrix (from `localinfer imatrix` or llama-imatrix, GGUF or .dat): the "
                   "quantizers weight each column's error by it, as llama-quantize --imatrix does.")
@click.option("--pure", is_flag=True, help="Every quantizable tensor gets TYPE: no mix rules (llama-quantize --pure).")
@click.option("-t", "--threads", type=click.IntRange(1), default=None, help="CPU threads (default: all).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def quantize(input_path, output_path, target, allow_requantize, imatrix, pure, threads, quiet):
    """Write OUT.gguf: IN.gguf's weights in TYPE, metadata kept (IN: a file or a catalog name).

    TYPE is a llama.cpp file type: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
    Q2_K, Q2_K_S, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K,
    IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ2_M, IQ3_XXS, IQ3_XS, IQ3_S, IQ3_M,
    IQ4_NL, IQ4_XS, TQ1_0, TQ2_0, MXFP4_MOE (Q3_K, Q4_K, Q5_K mean their _M mix).
    Mixes give some tensors more bits, as llama-quantize does. Q2_K_S and the
    IQ1 / IQ2 / IQ3_XXS / IQ3_XS mixes need --imatrix. On any error or Ctrl-C,
    OUT.gguf is not created."""
    from localinfer.files.fetch import resolve_model
    from localinfer.files.gguf_file import GGUFError
    from localinfer.formats import UnsupportedQuantType
    from localinfer.quant.gguf_out import DiskFullError
    from localinfer.quant.quantize_file import QuantizeError, quantize_file

    if threads:
        from localinfer.quant.quantizers import set_num_threads
        set_num_threads(threads)
    try:  # a catalog name is fetched (once) like `run`'s; a path that does not exist says so
        input_path = resolve_model(input_path, progress=None if quiet else ByteProgress(f"pulling {input_path}"))
    except (LookupError, RuntimeError, OSError) as e:
        raise click.ClickException(str(e))
    bar = None if quiet else ByteProgress(f"quantizing to {target.upper()}")
    try:
        r = quantize_file(input_path, output_path, target, allow_requantize=allow_requantize, pure=pure,
                          imatrix=imatrix, progress=bar)
    except (UnsupportedQuantType, GGUFError, QuantizeError, DiskFullError, OSError) as e:
        raise click.ClickException(str(e))
    types = ", ".join(f"{n} {name}" for name, n in sorted(r.types.items()))
    click.echo(f"{r.path}: {r.file_type}, {r.n_tensors} tensors ({types}), "
               f"{r.bytes_in / 2**20:.1f} MiB -> {r.bytes_out / 2**20:.1f} MiB in {r.seconds:.1f} s", err=quiet)
    if r.fallbacks:
        click.echo(f"{len(r.fallbacks)} tensors have rows that their type's blocks do not divide and got "
                   f"a fallback type (as llama-quantize does), e.g. {r.fallbacks[0]}", err=True)
