"""`localinfer serve --models A,B` (or a folder): the options of a server of several models, loaded
on demand and unloaded after --keep-alive within --max-memory (localinfer.serve.pool)."""
from __future__ import annotations

import functools
from pathlib import Path

import click

from .progress import ByteProgress


def duration(ctx, param, value):
    """A click callback: "5m", "1h30m", "300", "-1" (forever) -> seconds."""
    from localinfer.serve.units import DurationError, parse_duration
    if value is None:
        return None
    try:
        return parse_duration(value, param.opts[0])
    except DurationError as e:
        raise click.BadParameter(str(e)) from None


def size(ctx, param, value):
    """A click callback: "2GiB", "1500MB" -> bytes."""
    from localinfer.serve.units import SizeError, parse_size
    if value is None:
        return None
    try:
        return parse_size(value, param.opts[0])
    except SizeError as e:
        raise click.BadParameter(str(e)) from None


def model_list(ctx, param, value):
    """A click callback: "smollm2,gemma3" or a folder -> the list of sources (names, files, folders)."""
    if value is None:
        return None
    items = [v.strip() for v in value.split(",")]
    if not all(items):
        raise click.BadParameter(f"expected comma-separated model names, files or folders, got {value!r}")
    return items


def build_pool(models: list[str], keep_alive: float, max_memory: int | None, engine, threads=None,
               cache_type_k="f16", cache_type_v="f16"):
    """The ModelPool of `serve --models`, each model's engine set up by `engine` (an EngineConfig; its
    n_ctx is the models' context too). Catalog models are fetched now (with a progress bar), so a
    first request waits for a load, never for a download; nothing is loaded yet."""
    from localinfer import load
    from localinfer.files.fetch import resolve_model
    from localinfer.serve.pool import ModelPool, model_sources

    def fetch(name: str) -> Path:
        return resolve_model(name, progress=ByteProgress(f"pulling {name}"))
    sources = model_sources(models, resolve=fetch)
    loader = functools.partial(load, n_ctx=engine.n_ctx, n_threads=threads, cache_type_k=cache_type_k,
                               cache_type_v=cache_type_v)
    return ModelPool(sources, engine, keep_alive=keep_alive, max_memory=max_memory,
                     load=lambda path: loader(str(path)))
