"""Saving a Context (its tokens and KV cache) to a file and loading it back: llama.cpp's
--prompt-cache and slot save/restore, llama-cpp-python's save_state/load_state.

A loaded context continues bit-exactly as the saved one would have: the cache arrays are
restored byte for byte, with the position state (offset, the ring's held_start). The file
(kv/state_file.py) records what it fits, and loading checks all of it before touching the cache:

- the model: `model_identity`, a hash of the GGUF's header (every metadata key and tensor info:
  names, types, shapes, offsets) and of the first 4 KiB of each tensor's data. Cheap at load
  (a few MiB read, most of it the tokenizer) where hashing all the weights would read the whole
  file; two files that differ only past the first 4 KiB of every tensor would pass as one, which
  re-quantizations and fine-tunes of the same base do not do (their first rows differ).
- the cache: class, dtype, every array's dtype and shape, window and ring size
  (cache_state.layout), and n_ctx.
- the tokens: as many as the cache holds, each inside the vocabulary.
"""
from __future__ import annotations

import hashlib
import os

import numpy as np

from . import contents as cache_state
from .state_file import StateFileError, StateMismatchError, check_same, read_state, write_state

_HASHED_TENSOR_BYTES = 4096


def model_identity(gguf) -> str:
    """A hex digest naming the model file's contents (see the module docstring)."""
    h = hashlib.blake2b(digest_size=20)
    # read from the file, not the mapping: the weights' pages (released stacked tensors among them)
    # stay out of the process, and the file's own bytes are what names it (each part's, when split)
    for part in getattr(gguf, "parts", [gguf]):
        with open(part.path, "rb") as f:
            fd = f.fileno()
            h.update(str(os.fstat(fd).st_size).encode())
            h.update(os.pread(fd, part.data_offset, 0))
            for name, info in gguf.tensors.items():
                if gguf.part_of(name) is part:
                    h.update(os.pread(fd, min(info.nbytes, _HASHED_TENSOR_BYTES), info.offset))
    return h.hexdigest()


def context_header(ctx, kind: str) -> dict:
    if not ctx.identity:
        raise ValueError("this context does not know its model file: make it with Model.new_context() "
                         "to save or load its state")
    return {"kind": kind, "model": ctx.identity, "n_ctx": ctx.n_ctx, "cache": cache_state.layout(ctx.cache),
            "n_tokens": len(ctx.tokens)}


def save_context(ctx, path: str | os.PathLike, kind: str = "context", extra: dict | None = None) -> None:
    """Writes the context's tokens and cache (and `extra` header fields) to `path`, atomically."""
    if len(ctx.tokens) != ctx.cache.offset:
        raise RuntimeError(f"the context holds {len(ctx.tokens)} tokens but its cache {ctx.cache.offset}")
    state, arrays = cache_state.snapshot(ctx.cache)
    header = {**context_header(ctx, kind), "positions": state, **(extra or {})}
    write_state(path, header, {"tokens": np.asarray(ctx.tokens, np.int32), **arrays})


def load_context(ctx, path: str | os.PathLike, kind: str = "context", check_extra=None) -> dict:
    """Makes `ctx` hold the saved tokens and cache; returns the header. A file for another model,
    cache or n_ctx raises StateMismatchError, a corrupt one StateFileError (both ValueErrors);
    either way the context is left as it was. check_extra(header) checks the caller's fields
    before anything is read or changed."""
    path = os.fspath(path)
    expected = context_header(ctx, kind)

    def check(header: dict) -> None:
        check_same(path, "state kind", header.get("kind"), kind)
        check_same(path, "the model", header.get("model"), expected["model"])
        check_same(path, "n_ctx", header.get("n_ctx"), expected["n_ctx"])
        saved_cache = header.get("cache")
        if not isinstance(saved_cache, dict):
            raise StateFileError(f"{path}: the header has no cache layout")
        for key in ("type", "dtype"):
            check_same(path, f"cache {key}", saved_cache.get(key), expected["cache"][key])
        check_same(path, "the cache layout (shapes)", saved_cache, expected["cache"])
        n = header.get("n_tokens")
        if not isinstance(n, int) or not 0 <= n <= ctx.n_ctx:
            raise StateFileError(f"{path}: token count {n!r} outside 0..{ctx.n_ctx}")
        if check_extra is not None:
            check_extra(header)

    header, arrays = read_state(path, check)
    tokens = arrays.pop("tokens", None)
    n = header["n_tokens"]
    if tokens is None or tokens.dtype != np.int32 or tokens.shape != (n,):
        raise StateFileError(f"{path}: the tokens array does not hold the {n} tokens the header says")
    n_vocab = ctx.n_vocab
    if n and (tokens.min() < 0 or (n_vocab and tokens.max() >= n_vocab)):
        raise StateFileError(f"{path}: token ids outside the vocabulary")
    positions = header.get("positions")
    offsets = [v for k, v in positions.items() if k.endswith("offset")] if isinstance(positions, dict) else []
    if not offsets or any(v != n for v in offsets):
        raise StateFileError(f"{path}: the cache's position state does not match its {n} tokens")
    try:
        cache_state.load_snapshot(ctx.cache, positions, arrays)
    except ValueError as e:
        raise StateFileError(f"{path}: {e}") from None
    ctx.tokens = [int(t) for t in tokens]
    ctx.last_n_computed = 0
    return header


__all__ = ["StateFileError", "StateMismatchError", "model_identity", "save_context", "load_context"]
