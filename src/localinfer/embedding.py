"""Sentence embeddings: a decoder's final hidden states pooled into one vector per text.

What llama.cpp's `llama-embedding --pooling mean|last|cls` and `llama-server --embedding`
compute (src/llama-graph.cpp, build_pooling; common/common.cpp, common_embd_normalize):

    h = output_norm(layers(embed(tokens)))   # (n, n_embd): the graph's t_embd, before the LM head
    mean: h.mean(axis=0)    cls: h[0] (the first token)    last: h[-1] (the last token)
    normalize: v / ||v||_2  (llama.cpp's --embd-normalize 2, its default), nothing when the norm is 0

Attention stays causal, as llama.cpp keeps it for decoder models. Each text has its own KV
cache, just long enough; the texts are packed into forward passes of at most `n_batch` tokens
(one pass serves several texts, a long text spans several passes), so the scratch memory and
the time the model's lock is held per pass stay bounded whatever the request.
"""
from __future__ import annotations

from collections import deque
from typing import Iterator, Sequence

import numpy as np

from .kv.cache import ContextFullError

POOLINGS = ("mean", "last", "cls")  # one vector per text
PER_TOKEN = "none"  # one vector per token (llama.cpp's LLAMA_POOLING_TYPE_NONE): asked for by name only
DEFAULT_N_BATCH = 512  # tokens per forward pass, as the engine's prefill chunk
# `{arch}.pooling_type` in a GGUF (llama.cpp's enum llama_pooling_type): embedding models say
# theirs (Qwen3-Embedding: last); 0 is none (per-token vectors) and 4 rank (a reranker's head)
_GGUF_POOLING = {0: "none", 1: "mean", 2: "cls", 3: "last", 4: "rank"}


def default_pooling(metadata, architecture: str) -> str:
    """The pooling the file names, "mean" when it names none (a plain chat model)."""
    value = metadata.get(f"{architecture}.pooling_type")
    if value is None:
        return "mean"
    name = _GGUF_POOLING.get(int(value), str(value))
    if name not in POOLINGS:
        raise ValueError(f"the model's {architecture}.pooling_type is {name}, which embed() cannot pool by; "
                         f"choose pooling= one of {', '.join(POOLINGS)}")
    return name


class _Pooled:
    """One text's running pool: what its pooling needs of the hidden states seen so far."""

    def __init__(self, tokens: list[int], pooling: str):
        self.tokens, self.pooling = tokens, pooling
        self.done = 0  # tokens already run
        self.cache = None  # made when the text first enters a pass, dropped when it is pooled
        self.value: np.ndarray | None = None  # the sum (mean), the first row (cls) or the latest row (last)
        self.rows: list[np.ndarray] = []  # per token (none)

    def add(self, h: np.ndarray) -> None:
        """h: (k, n_embd), the hidden states of the next k tokens."""
        if self.pooling == PER_TOKEN:
            self.rows.append(h.astype(np.float64))
        elif self.pooling == "mean":
            s = h.sum(axis=0, dtype=np.float64)
            self.value = s if self.value is None else self.value + s
        elif self.pooling == "cls":
            if self.value is None:
                self.value = h[0].astype(np.float64)
        else:
            self.value = h[-1].astype(np.float64)
        self.done += h.shape[0]

    def result(self) -> np.ndarray:
        if self.pooling == PER_TOKEN:
            return np.concatenate(self.rows)
        return self.value / len(self.tokens) if self.pooling == "mean" else self.value


def check_embed_args(token_lists: Sequence[Sequence[int]], pooling: str, n_ctx: int) -> None:
    """The errors an embedding request can have, raised before any work (ValueErrors)."""
    if pooling not in POOLINGS + (PER_TOKEN,):
        raise ValueError(f"pooling must be one of {', '.join(POOLINGS + (PER_TOKEN,))}; got {pooling!r}")
    for i, tokens in enumerate(token_lists):
        if not len(tokens):
            raise ValueError(f"input {i} is empty (no tokens to embed)")
        if len(tokens) > n_ctx:
            raise ContextFullError(f"input {i} is {len(tokens)} tokens long, but the context holds {n_ctx} "
                                   f"(raise n_ctx / --ctx-size, or shorten the input)")


def embed_passes(runtime, token_lists: Sequence[Sequence[int]], pooling: str = "mean", normalize: bool = True,
                 n_batch: int = DEFAULT_N_BATCH, kv_dtype=np.float16) -> Iterator[list[tuple[int, np.ndarray]]]:
    """runtime: has new_cache(n, dtype) and hidden_batch(seqs) (a SerializedRuntime: one pass
    under the model's lock at a time). Yields, after each forward pass, the (index, vector)
    pairs of the texts it finished: (n_embd,) float32 each, (n_tokens, n_embd) with pooling "none". Stop iterating to give up early
    (the caches of unfinished texts go with the generator)."""
    if n_batch < 1:
        raise ValueError(f"n_batch must be >= 1, got {n_batch}")
    items = [_Pooled([int(t) for t in tokens], pooling) for tokens in token_lists]
    pending = deque(range(len(items)))
    while pending:
        seqs, members, budget = [], [], n_batch
        for i in pending:  # a text cut by the budget continues first in the next pass
            item = items[i]
            take = min(budget, len(item.tokens) - item.done)
            if item.cache is None:
                item.cache = runtime.new_cache(len(item.tokens), kv_dtype)
            seqs.append((np.asarray(item.tokens[item.done:item.done + take], np.int64), item.cache))
            members.append(i)
            budget -= take
            if budget == 0:
                break
        finished = []
        for i, h in zip(members, runtime.hidden_batch(seqs)):
            item = items[i]
            item.add(h)
            if item.done == len(item.tokens):
                item.cache = None
                finished.append((i, _finish(item.result(), normalize)))
        for i, _ in finished:
            pending.remove(i)
        yield finished


def _finish(v: np.ndarray, normalize: bool) -> np.ndarray:
    """float64 in, float32 out; each vector (a row of a 2-D v) L2-normalized in float64 as
    common_embd_normalize does."""
    if normalize:
        norm = np.sqrt(np.sum(v * v, axis=-1, keepdims=True))
        v = np.divide(v, norm, out=np.zeros_like(v), where=norm > 0)
    return v.astype(np.float32)


def embed_tokens(runtime, token_lists: Sequence[Sequence[int]], pooling: str = "mean", normalize: bool = True,
                 n_batch: int = DEFAULT_N_BATCH, kv_dtype=np.float16) -> np.ndarray | list[np.ndarray]:
    """(len(token_lists), n_embd) float32, in the order given; see embed_passes. Pooling "none": a list
    of (n_tokens, n_embd) arrays, one per text."""
    if pooling == PER_TOKEN:
        out = [None] * len(token_lists)
        for finished in embed_passes(runtime, token_lists, pooling, normalize, n_batch, kv_dtype):
            for i, v in finished:
                out[i] = v
        return out
    out = np.zeros((len(token_lists), runtime.config.n_embd), np.float32)
    for finished in embed_passes(runtime, token_lists, pooling, normalize, n_batch, kv_dtype):
        for i, v in finished:
            out[i] = v
    return out
