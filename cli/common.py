"""What several commands share: thread settings, loading a model with a download progress bar, and
comma-separated integer options. The command modules import this; it imports none of them."""
from __future__ import annotations

import click

from localinfer.blas_threads import set_blas_threads as set_threads  # noqa: F401  (before numpy is imported)

from .progress import ByteProgress


def load_model(model_name, ctx_size=None, threads=None, cache_type_k="f16", cache_type_v="f16"):
    """A catalog name (fetched with a progress bar on first use), a .gguf path, or None for the default."""
    from localinfer import load
    from localinfer.fetch import resolve_model
    path = resolve_model(model_name, progress=ByteProgress(f"pulling {model_name or 'default model'}"))
    return load(str(path), n_ctx=ctx_size, n_threads=threads, cache_type_k=cache_type_k, cache_type_v=cache_type_v)


CACHE_TYPES = ("f16", "q8_0", "q4_0")  # localinfer.kv_types.CACHE_TYPES, without importing numpy here


def cache_type_options(f):
    """--cache-type-k / --cache-type-v (llama.cpp's -ctk / -ctv): the KV cache's element types."""
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
