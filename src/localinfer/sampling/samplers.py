"""Samplers and logits processors, built from small `apply_*` steps.

`make_sampler(...)` returns a plain callable logits (n_vocab,) -> token id;
`make_logits_processors(...)` returns callables (history, logits) -> logits that run first.
Order as llama.cpp's default chain: penalties -> top-k -> top-p -> min-p -> temperature -> draw.
temperature <= 0 is greedy (argmax), as in llama.cpp. Logits with NaN, +inf or no finite value
raise NonFiniteLogitsError (a ValueError): a broken model fails with one line, not garbage.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .logit_bias import make_logit_bias
from .params import SamplingParams

D = SamplingParams  # the defaults

Sampler = Callable[[np.ndarray], int]
LogitsProcessor = Callable[[Sequence[int], np.ndarray], np.ndarray]


class NonFiniteLogitsError(ValueError):
    """The logits hold NaN or +inf, or no token is left: nothing can be sampled from them."""


def check_logits(logits: np.ndarray) -> None:
    """Refuses logits no token can be drawn from. NaN anywhere makes the maximum NaN, so one
    reduction finds it; -inf is how bans and grammar masks remove a token, but not every token."""
    top = float(np.max(logits))
    if np.isnan(top) or top == np.inf:
        raise NonFiniteLogitsError("the model produced non-finite logits (NaN or infinity): its weights or "
                                   "hyper-parameters are broken, or its activations overflowed")
    if top == -np.inf:
        raise NonFiniteLogitsError("no token can be sampled: every logit is -inf (the model's output, "
                                   "or a logit bias or grammar that bans every token)")


def apply_top_k(logits: np.ndarray, k: int) -> np.ndarray:
    """Keep the k largest logits (k <= 0: keep all)."""
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    finite = np.isfinite(logits)
    n_finite = int(np.count_nonzero(finite))
    if n_finite <= k:  # a grammar's mask left k or fewer tokens: they all stay
        return logits
    # a grammar's mask leaves most of the vocabulary at -inf, and numpy's partition over that many
    # equal values is slow (12 ms for gemma3's 262k, a fifth of a decode step): select among the rest
    kth = kth_largest(logits if n_finite == logits.shape[-1] else logits[finite], k)
    return np.where(logits >= kth, logits, -np.inf)


def kth_largest(values: np.ndarray, k: int) -> float:
    """The k-th largest of `values` (1-D, 0 < k <= len), np.partition's answer, found among few: the
    maxima of k disjoint slices are k of the values, so the k-th largest is at least the least of
    them, and only the values that reach that bound are partitioned (a few hundred of a 128k
    vocabulary: ~0.1 ms where partitioning all of it took ~0.8, once per sampled token)."""
    n = values.shape[0]
    width = n // k
    if width < 64:  # few values per slice: the bound would keep most of them
        return np.partition(values, -k)[-k]
    bound = values[:k * width].reshape(k, width).max(axis=1).min()
    candidates = values[values >= bound]
    return np.partition(candidates, -k)[-k]


def _probs(logits: np.ndarray) -> np.ndarray:
    finite = logits[np.isfinite(logits)]
    z = np.exp((logits - finite.max()).astype(np.float64))
    return z / z.sum()


def apply_top_p(logits: np.ndarray, p: float) -> np.ndarray:
    """Keep the smallest set of most likely tokens whose probability reaches p."""
    if p >= 1.0:
        return logits
    alive = np.flatnonzero(np.isfinite(logits))  # after top-k only k are: sort those, not the vocab
    probs = _probs(logits[alive])
    rank = np.argsort(-probs, kind="stable")
    order = alive[rank]
    cumulative = np.cumsum(probs[rank])
    n_keep = int(np.searchsorted(cumulative, p) + 1)  # include the token that crosses p
    out = np.full_like(logits, -np.inf)
    keep = order[:max(1, n_keep)]
    out[keep] = logits[keep]
    return out


def apply_min_p(logits: np.ndarray, min_p: float) -> np.ndarray:
    """Drop tokens whose probability is below min_p times the top token's."""
    if min_p <= 0.0:
        return logits
    threshold = logits.max() + np.log(min_p)
    return np.where(logits >= threshold, logits, -np.inf)


def make_sampler(temperature: float = D.temperature, top_k: int = D.top_k, top_p: float = D.top_p,
                 min_p: float = D.min_p, seed: int | None = D.seed) -> Sampler:
    if temperature <= 0.0:
        def greedy(logits: np.ndarray) -> int:
            check_logits(logits)  # argmax would pick the first NaN
            return int(np.argmax(logits))
        return greedy
    rng = np.random.default_rng(seed)

    def sample(logits: np.ndarray) -> int:
        x = np.asarray(logits, dtype=np.float32)
        check_logits(x)
        # top-k first, and only its survivors (in token order) go on: the later steps and the draw
        # then touch ~k values, not the whole vocabulary (1.3 ms per token for 49k, the cost of a
        # batched decode step's worth of matmuls when 16 sequences sample); the same tokens and
        # probabilities as running every step on the full vocabulary with the dropped at -inf
        ids = np.flatnonzero(np.isfinite(apply_top_k(x, top_k))) if 0 < top_k < x.shape[-1] else None
        v = x[ids] if ids is not None else x
        v = apply_min_p(apply_top_p(v, top_p), min_p)
        probs = _probs(v / temperature)
        choice = int(rng.choice(probs.shape[0], p=probs))
        return int(ids[choice]) if ids is not None else choice

    return sample


def apply_penalties(history: Sequence[int], logits: np.ndarray, repeat_penalty: float,
                    presence_penalty: float, frequency_penalty: float) -> np.ndarray:
    """llama.cpp's penalties over the recent tokens: a repeated token's logit is divided by
    repeat_penalty when positive (multiplied when negative), then lowered by
    count * frequency_penalty + presence_penalty."""
    if not len(history):
        return logits
    ids, counts = np.unique(np.asarray(history, dtype=np.int64), return_counts=True)
    valid = (ids >= 0) & (ids < logits.shape[0])
    ids, counts = ids[valid], counts[valid]
    out = np.array(logits, dtype=np.float32, copy=True)
    sel = out[ids]
    if repeat_penalty != 1.0:
        sel = np.where(sel > 0, sel / repeat_penalty, sel * repeat_penalty)
    sel = sel - counts * frequency_penalty - presence_penalty
    out[ids] = sel
    return out


def make_logits_processors(repeat_penalty: float = D.repeat_penalty, presence_penalty: float = D.presence_penalty,
                           frequency_penalty: float = D.frequency_penalty,
                           repeat_last_n: int = D.repeat_last_n) -> list[LogitsProcessor]:
    if repeat_penalty == 1.0 and presence_penalty == 0.0 and frequency_penalty == 0.0:
        return []
    if repeat_penalty <= 0:
        raise ValueError(f"repeat_penalty must be > 0, got {repeat_penalty}")

    def penalize(history: Sequence[int], logits: np.ndarray) -> np.ndarray:
        recent = history[-repeat_last_n:] if repeat_last_n > 0 else history
        return apply_penalties(recent, logits, repeat_penalty, presence_penalty, frequency_penalty)

    return [penalize]


def sampler_for(p: SamplingParams) -> Sampler:
    return make_sampler(p.temperature, p.top_k, p.top_p, p.min_p, p.seed)


def processors_for(p: SamplingParams) -> list[LogitsProcessor]:
    """The logit bias first, then the penalties."""
    bias = [make_logit_bias(p.logit_bias)] if p.logit_bias else []
    return bias + make_logits_processors(p.repeat_penalty, p.presence_penalty, p.frequency_penalty, p.repeat_last_n)
