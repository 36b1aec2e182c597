"""Llama.save_state / load_state: the shim's one context (its tokens and KV cache) held in memory.

llama-cpp-python's LlamaState is the llama.cpp context's state bytes; programs keep it in memory
(or pickle it) and load it back to skip a prompt's prefill. Here it holds copies of the cache's
arrays taken as kv/contents.py walks them (the walk kv/session_state.py writes files with), and
the header that file would carry: the model file's identity, n_ctx and the cache layout. Loading
checks all three before touching the cache, so a state from another model or context size is a
StateMismatchError (a ValueError) and leaves the context as it was; a loaded context continues
bit for bit as the saved one would have.
"""
from __future__ import annotations

import numpy as np

from ...kv import contents as cache_state
from ...kv.session_state import context_header
from ...kv.state_file import StateMismatchError


class LlamaState:
    """The context's tokens (input_ids, n_tokens) and its cache's contents. scores is None: the
    logits of every position, which llama-cpp-python keeps beside them, are recomputed here for
    the one position that needs them (the last prompt token is evaluated again)."""

    def __init__(self, input_ids: np.ndarray, n_tokens: int, seed: int, header: dict, arrays: dict):
        self.input_ids = input_ids  # (n_tokens,) intc
        self.n_tokens = n_tokens
        self.seed = seed
        self.scores = None
        self.header = header  # context_header(): kind, model identity, n_ctx, cache layout; "positions"
        self.arrays = arrays  # {name: copy of the array}, kv/contents.snapshot's names
        self.llama_state_size = sum(a.nbytes for a in arrays.values())

    def __repr__(self) -> str:
        return f"LlamaState(n_tokens={self.n_tokens}, {self.llama_state_size} bytes of KV cache)"


def save(ctx, seed: int) -> LlamaState:
    if len(ctx.tokens) != ctx.cache.offset:
        raise RuntimeError(f"the context holds {len(ctx.tokens)} tokens but its cache {ctx.cache.offset}")
    positions, arrays = cache_state.snapshot(ctx.cache)
    header = {**context_header(ctx, "context"), "positions": positions}
    return LlamaState(np.asarray(ctx.tokens, dtype=np.intc), len(ctx.tokens), seed, header,
                      {name: np.array(a, copy=True) for name, a in arrays.items()})


def load(ctx, state: LlamaState) -> None:
    if not isinstance(state, LlamaState):
        raise TypeError(f"load_state takes what save_state returned, got {type(state).__name__}")
    want = context_header(ctx, "context")
    for key, what in (("model", "the model file"), ("n_ctx", "n_ctx"), ("cache", "the KV cache's type and layout")):
        if state.header.get(key) != want[key]:
            raise StateMismatchError(f"this state was saved from another {what} ({key}: saved "
                                     f"{_short(state.header.get(key))}, here {_short(want[key])})")
    n = state.n_tokens
    if len(state.input_ids) != n or state.header.get("n_tokens") != n:
        raise StateMismatchError(f"the state's tokens ({len(state.input_ids)}) do not match its count {n}")
    cache_state.load_snapshot(ctx.cache, state.header["positions"], state.arrays)  # checks every shape first
    ctx.tokens = [int(t) for t in state.input_ids]
    ctx.last_n_computed = 0


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
