"""Where drafted tokens come from. `propose(history, n, dist)` -> (tokens, q): at most n token ids
that may follow `history`, and q, the probability vector (n_vocab,) each one was drawn from, or
None when the proposer is deterministic (each token then had probability 1: verify.py treats
q as a one-hot vector).

- LookupProposer: prompt lookup decoding. The longest n-gram (at most `ngram` tokens) that ends
  the text so far and occurred earlier in it (prompt included); its continuation there is the
  draft. No second model: it wins where the answer repeats the input (editing, code, summaries).
- DraftProposer: a smaller model with the same vocabulary, in its own context (KV cache), run one
  token at a time. Greedy (its argmax) at temperature 0, else drawn from its distribution under the
  request's sampler transforms; it stops when its most likely token is below `p_min`.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..context import Context
from ..sampling.samplers import check_logits

Dist = Callable[[np.ndarray], np.ndarray]  # logits (n_vocab,) -> probabilities (n_vocab,), float64


class LookupProposer:
    def __init__(self, ngram: int):
        if ngram < 1:
            raise ValueError(f"the lookup n-gram must be >= 1 token, got {ngram}")
        self.ngram = ngram

    def propose(self, history: Sequence[int], n: int, dist: Dist | None = None, rng=None):
        h = np.asarray(history, dtype=np.int64)
        if n <= 0 or h.shape[0] < 2:
            return [], None
        for size in range(min(self.ngram, h.shape[0] - 1), 0, -1):
            tail = h[-size:]
            # windows starting at 0 .. len-size-1: every earlier occurrence, not the tail itself
            windows = sliding_window_view(h[:-1], size)
            hits = np.flatnonzero((windows == tail).all(axis=1))
            if hits.shape[0]:
                start = int(hits[-1]) + size  # the most recent occurrence: the text's current habits
                return [int(t) for t in h[start:start + n]], None
        return [], None

    def prefill(self, prompt: Sequence[int]) -> None:
        pass


class DraftProposer:
    def __init__(self, runtime, n_ctx: int, kv_dtype, p_min: float):
        """runtime: the draft model's (serialized) architecture model; its own context of n_ctx positions."""
        self.ctx = Context(runtime, n_ctx, kv_dtype)
        self.p_min = p_min

    def prefill(self, prompt: Sequence[int]) -> None:
        """Computes the prompt in the draft's cache with the target's prefill (part of the time to the
        first token, as llama.cpp does), so that the first draft only runs its new tokens."""
        if 0 < len(prompt) <= self.ctx.n_ctx:
            self.ctx.evaluate(prompt)

    def propose(self, history: Sequence[int], n: int, dist: Dist | None = None, rng=None):
        """dist None: greedy. Else draws from dist(logits) with rng and returns those vectors."""
        n = min(n, self.ctx.n_ctx - len(history))
        if n <= 0:
            return [], None
        # reuses what it holds: the rejected tail goes (rolled back), a few new tokens on the GEMV
        logits = self.ctx.evaluate(history, batched=False)
        tokens, q = [], []
        while True:
            check_logits(logits)   # a broken draft model is an error, not drafts of token 0
            if dist is None:
                probs = _softmax(logits)
                token = int(np.argmax(logits))
            else:
                probs = dist(logits)
                token = int(rng.choice(probs.shape[0], p=probs))
            if probs.max() < self.p_min:
                break  # unsure: a draft token here would likely be rejected
            tokens.append(token)
            q.append(probs)
            if len(tokens) >= n:
                break
            logits = self.ctx.append([token], last_only=True)[-1]
        return tokens, (q if dist is not None else None)


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits.astype(np.float64) - float(np.max(logits)))
    return z / z.sum()
