"""`localinfer convert HF_DIR OUT.gguf`: a Hugging Face checkpoint as a GGUF file."""
from __future__ import annotations

import click


@click.command()
@click.argument("hf_dir", type=click.Path(file_okay=False))
@click.argument("out", type=click.Path(dir_okay=False))
@click.option("--outtype", type=click.Choice(["f32", "f16", "bf16", "q8_0"]), default="f16", show_default=True,
              help="Type of the matrices (norms and biases stay f32).")
@click.option("--pre", default=None,
              help="llama.cpp pre-tokenizer name (qwen2, llama-bpe, gpt-2, ...) when tokenizer.json's is not recognised.")
@click.option("-v", "--verbose", is_flag=True, help="List every tensor written.")
def convert(hf_dir, out, outtype, pre, verbose):
    """Convert HF_DIR (config.json, *.safetensors, tokenizer.json) to the GGUF file OUT.

    Architectures: llama (and llama3 rope scaling), mistral, qwen2, qwen3, phi3; with experts:
    mixtral, qwen2moe, qwen3moe, olmoe, gpt-oss (MXFP4 experts stay MXFP4)."""
    from localinfer.quant.convert_hf import convert_hf
    try:
        path = convert_hf(hf_dir, out, outtype, pre=pre, log=click.echo if verbose else (lambda s: None))
    except (ValueError, OSError) as e:  # ConversionError, SafetensorsError, tokenizer errors
        raise click.ClickException(str(e))
    click.echo(f"wrote {path}")
