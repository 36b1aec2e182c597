"""What several commands share: thread settings, loading a model with a download progress bar, and
comma-separated integer options. The command modules import this; it imports none of them."""
from __future__ import annotations

import functools

import click

from localinfer.backend.blas_threads import set_blas_threads as set_threads  # noqa: F401  (before numpy is imported)

from .progress import ByteProgress


def load_model(model_name, ctx_size=None, threads=None, speculative=None, cache_type_k="f16", cache_type_v="f16",
               gpu=None):
    """A catalog name (fetched with a progress bar on first use), a .gguf path, or None for the default.
    speculative: load()'s draft/draft_max/draft_min/draft_p_min/lookup_ngram (speculative_options);
    cache_type_k / cache_type_v: the KV cache's types (cache_type_options); gpu: load()'s
    n_gpu_layers/device (model_file_options)."""
    from localinfer import load
    from localinfer.files.fetch import resolve_model
    path = resolve_model(model_name, progress=ByteProgress(f"pulling {model_name or 'default model'}"))
    return load(str(path), n_ctx=ctx_size, n_threads=threads, cache_type_k=cache_type_k,
                cache_type_v=cache_type_v, **(speculative or {}), **(gpu or {}))


def model_file_options(command):
    """llama.cpp's way to name the model and its GPU layers, beside the MODEL argument:
    -m/--model FILE or -hf USER/REPO[:QUANT] (the same as MODEL; giving two is an error), and -ngl N /
    --device, handed to the command as one `gpu` dict of load()'s n_gpu_layers and device."""
    @functools.wraps(command)
    def wrapper(*args, model, model_file, hf_repo, n_gpu_layers, device, **kwargs):
        given = [m for m in (model, model_file, hf_repo and f"hf.co/{hf_repo}") if m]
        if len(given) > 1:
            raise click.UsageError(f"give the model once, as MODEL, -m FILE or -hf REPO (got {', '.join(given)})")
        gpu = dict(n_gpu_layers=n_gpu_layers, device=device)
        return command(*args, model=given[0] if given else None, gpu=gpu, **kwargs)

    wrapper = click.option("--device", type=click.Choice(["cpu", "cuda"]), default=None,
                           help="Where the layers run: cuda puts all of them on the GPU (default: cpu, or "
                                "cuda for -ngl N).")(wrapper)
    wrapper = click.option("-ngl", "--n-gpu-layers", "--gpu-layers", "n_gpu_layers", type=int, default=None,
                           metavar="N", help="llama.cpp's GPU layers: the first N on the CUDA device, the rest on "
                                             "the CPU (-1: all). Needs localinfer[cuda].")(wrapper)
    wrapper = click.option("-hf", "--hf-repo", default=None, metavar="USER/REPO[:QUANT]",
                           help="A model from Hugging Face (the same as MODEL hf.co/USER/REPO[:QUANT]).")(wrapper)
    return click.option("-m", "--model", "model_file", default=None, metavar="FILE",
                        help="The model, as llama.cpp names it (the same as MODEL).")(wrapper)


def process_escapes(text: str) -> str:
    """llama.cpp's -e: \\n \\r \\t \\' \\" \\\\ and \\xHH (a byte) in a prompt typed on the command line;
    any other backslash stays as it is."""
    out, data, i = bytearray(), text.encode("utf-8"), 0
    simple = {ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t", ord("'"): b"'", ord('"'): b'"', ord("\\"): b"\\"}
    while i < len(data):
        c = data[i]
        if c == ord("\\") and i + 1 < len(data):
            nxt = data[i + 1]
            if nxt in simple:
                out += simple[nxt]
                i += 2
                continue
            hex_digits = data[i + 2:i + 4]
            if nxt == ord("x") and len(hex_digits) == 2 and all(chr(h) in "0123456789abcdefABCDEF" for h in hex_digits):
                out.append(int(hex_digits, 16))
                i += 4
                continue
            out += data[i:i + 2]
            i += 2
            continue
        out.append(c)
        i += 1
    return out.decode("utf-8", errors="replace")


def speculative_options(command):
    """llama.cpp's speculative-decoding options, handed to the command as one `speculative` dict."""
    @functools.wraps(command)
    def wrapper(*args, model_draft, draft_max, draft_min, draft_p_min, lookup_ngram, **kwargs):
        spec = dict(draft=model_draft, draft_max=draft_max, draft_min=draft_min, draft_p_min=draft_p_min,
                    lookup_ngram=lookup_ngram)
        return command(*args, speculative=spec, **kwargs)

    options = [
        click.option("-md", "--model-draft", default=None, metavar="FILE",
                     help="Draft model (same vocabulary, smaller) for speculative decoding."),
        click.option("--draft-max", "--draft", type=click.IntRange(1, 64), default=8, show_default=True,
                     help="Most tokens drafted per step."),
        click.option("--draft-min", type=click.IntRange(0, 64), default=0, show_default=True,
                     help="Fewer drafted tokens than this are not verified."),
        click.option("--draft-p-min", type=click.FloatRange(0, 1), default=0.75, show_default=True,
                     help="The draft model stops drafting below this probability of its best token."),
        click.option("--lookup-ngram", type=click.IntRange(0, 16), default=0, show_default=True,
                     help="Without a draft model: draft from the longest matching n-gram (up to N tokens) "
                          "of the prompt and text so far (prompt lookup decoding); 0 is off."),
    ]
    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper


CACHE_TYPES = ("f16", "q8_0", "q4_0")  # localinfer.kv.cache_types.CACHE_TYPES, without importing numpy here


def _no_repack(ctx, param, value):
    """--no-repack sets LOCALINFER_REPACK=0, the one switch every load reads (bench's and serve's
    worker processes included); the command's own parameters never see it."""
    if value:
        import os
        os.environ["LOCALINFER_REPACK"] = "0"
    return value


def cache_type_options(f):
    """--cache-type-k / --cache-type-v (llama.cpp's -ctk / -ctv): the KV cache's element types; and
    -nr/--no-repack (llama.cpp's), which keeps every weight in the file's mapping."""
    f = click.option("-nr", "--no-repack", is_flag=True, expose_value=False, callback=_no_repack, is_eager=True,
                     help="Keep the weights as the file lays them out (no repacked copies for the decode "
                          "GEMV): less work at load, slower decode. Same as LOCALINFER_REPACK=0.")(f)
    f = click.option("-ctv", "--cache-type-v", type=click.Choice(CACHE_TYPES), default="f16", show_default=True,
                     help="KV cache type of the values (q8_0: half of f16's bytes, q4_0: ~a quarter).")(f)
    return click.option("-ctk", "--cache-type-k", type=click.Choice(CACHE_TYPES), default="f16", show_default=True,
                        help="KV cache type of the keys.")(f)


def int_list(ctx, param, value):
    """A click callback: "1,4,16" -> [1, 4, 16], every value >= 0."""
    try:
        out = [int(x) for x in str(value).split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {value!r}") from None
    if any(x < 0 for x in out):
        raise click.BadParameter("values must be >= 0")
    return out
