"""Token log-probabilities: what the model gave the token it sampled, and its most likely alternatives.

They are the model's own distribution: the log-softmax of the raw logits row that the token was
sampled from, taken *before* any sampler transform (logit_bias, repetition penalties, a grammar
mask, temperature, top-k/top-p/min-p). So they agree with `Model.logits` for the same tokens
(log_softmax of the same row), whatever the sampling settings, as llama.cpp's server reports
them by default (its n_probs without post_sampling_probs). A token that a bias or a grammar forced can thus show a low logprob: that is what the
model thought of it.

    recorder = LogprobRecorder(n_top)   # first of the logits processors: sees the raw row
    ... sample token ...
    entry = recorder.take(token)        # TokenLogprob(token, logprob, top=[(id, logprob), ...])
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..context import prefills_batched

MAX_TOP_LOGPROBS = 20  # OpenAI's bound on top_logprobs; the library allows up to this many too


@dataclass
class TokenLogprob:
    token: int
    logprob: float | None  # None only for a prompt's first token (nothing predicts it)
    top: list[tuple[int, float]] = field(default_factory=list)  # the n_top most likely, most likely first


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """(n_vocab,) -> (n_vocab,) float64 log-probabilities (summed in float64: a 49k-long sum of
    exponentials in float32 loses the small ones)."""
    x = np.asarray(logits, dtype=np.float64)
    m = x.max()
    return x - (m + np.log(np.exp(x - m).sum()))


def top_n(logprobs: np.ndarray, n: int) -> list[tuple[int, float]]:
    """The n largest (id, logprob), largest first; ties broken by the lower id (a stable order)."""
    if n <= 0:
        return []
    n = min(n, logprobs.shape[0])
    ids = np.argpartition(-logprobs, n - 1)[:n]
    ids = ids[np.lexsort((ids, -logprobs[ids]))]
    return [(int(i), float(logprobs[i])) for i in ids]


def token_logprob(logits: np.ndarray, token: int, n_top: int = 0) -> TokenLogprob:
    lp = log_softmax(logits)
    return TokenLogprob(int(token), float(lp[token]), top_n(lp, n_top))


def prompt_logprobs(logits: np.ndarray, tokens: Sequence[int], n_top: int = 0) -> list[TokenLogprob]:
    """Per prompt token, from the all-rows logits (len(tokens), n_vocab) of the prompt: row i-1
    predicts token i. The first token has no logprob (nothing predicts it): None, no alternatives."""
    out = [TokenLogprob(int(tokens[0]), None, [])] if len(tokens) else []
    for i in range(1, len(tokens)):
        out.append(token_logprob(logits[i - 1], tokens[i], n_top))
    return out


def score_prompt(model, tokens: Sequence[int], n_top: int = 0, chunk: int = 256) -> list[TokenLogprob]:
    """prompt_logprobs of `tokens` through a fresh context of `model` (a Model), `chunk` rows of
    logits at a time so a long prompt never holds (len, n_vocab) floats at once. The chunks are
    computed batched (context.py MIN_PREFILL_ROWS), so the rows are Model.logits(tokens)'s, bit for
    bit."""
    if not len(tokens):
        return []
    ctx = model.new_context(len(tokens))
    out = [TokenLogprob(int(tokens[0]), None, [])]
    batched = prefills_batched(len(tokens))  # as Model.logits and the engine's prefill
    start = 0
    while start < len(tokens):
        end = min(len(tokens), start + chunk)
        rows = ctx.append(tokens[start:end], batched=batched)  # (end - start, n_vocab): row j predicts token j+1
        for j in range(start, min(end, len(tokens) - 1)):
            out.append(token_logprob(rows[j - start], tokens[j + 1], n_top))
        start = end
    return out


def check_n_top(n_top, name: str = "logprobs") -> int | None:
    """None (no logprobs) or the number of alternatives 0..MAX_TOP_LOGPROBS; a ValueError otherwise."""
    if n_top is None:
        return None
    if isinstance(n_top, bool) or not isinstance(n_top, (int, np.integer)):
        raise ValueError(f"{name} must be None or an integer, got {type(n_top).__name__}")
    if not 0 <= n_top <= MAX_TOP_LOGPROBS:
        raise ValueError(f"{name} must be between 0 and {MAX_TOP_LOGPROBS}, got {n_top}")
    return int(n_top)


class LogprobRecorder:
    """A logits processor that changes nothing and keeps the row it saw. Put first among the
    processors, it sees the model's raw logits; `take(token)` then gives the sampled token's entry."""

    def __init__(self, n_top: int):
        self.n_top = n_top
        self.row: np.ndarray | None = None

    def __call__(self, history, logits: np.ndarray) -> np.ndarray:
        self.row = logits
        return logits

    def take(self, token: int) -> TokenLogprob:
        if self.row is None:
            raise RuntimeError("no logits recorded before the token was sampled")
        entry, self.row = token_logprob(self.row, token, self.n_top), None
        return entry
