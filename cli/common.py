"""What several commands share: thread settings, loading a model with a download progress bar, and
comma-separated integer options. The command modules import this; it imports none of them."""
from __future__ import annotations

import click

from localinfer.blas_threads import set_blas_threads as set_threads  # noqa: F401  (before numpy is imported)

from .progress import ByteProgress


def load_model(model_name, ctx_size=None, threads=None):
    """A catalog name (fetched with a progress bar on first use), a .gguf path, or None for the default."""
    from localinfer import load
    from localinfer.fetch import resolve_model
    path = resolve_model(model_name, progress=ByteProgress(f"pulling {model_name or 'default model'}"))
    return load(str(path), n_ctx=ctx_size, n_threads=threads)


def int_list(ctx, param, value):
    """A click callback: "1,4,16" -> [1, 4, 16], every value >= 0."""
    try:
        out = [int(x) for x in str(value).split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {value!r}") from None
    if any(x < 0 for x in out):
        raise click.BadParameter("values must be >= 0")
    return out
