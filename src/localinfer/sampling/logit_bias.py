"""logit_bias: a fixed amount added to chosen tokens' logits before sampling (OpenAI's parameter).

A bias of -100 effectively bans a token and +100 all but forces it (logits of these models span a
few tens). The bias is one of the logits processors, so it acts before the sampler's truncation
and draw, and also under greedy decoding. Token log-probabilities are taken before it (sampling/logprobs.py).
"""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

MAX_BIAS = 100.0
MAX_ENTRIES = 1024  # a request body is untrusted: bound the map
MAX_KEY_DIGITS = 20  # a token id is far shorter; leading zeros beyond this are no id either


class LogitBiasError(ValueError):
    """A logit_bias map that names an unknown token or holds a bad value."""


def check_logit_bias(bias: Mapping | None, n_vocab: int) -> tuple[tuple[int, float], ...]:
    """{token id: bias} -> sorted ((id, bias), ...) (hashable, for SamplingParams). Keys may be
    ints or decimal strings (JSON object keys are strings); bias values are numbers in -100..100."""
    if not bias:
        return ()
    if not isinstance(bias, Mapping):
        raise LogitBiasError(f"logit_bias must be a map of token id -> bias, got {type(bias).__name__}")
    if len(bias) > MAX_ENTRIES:
        raise LogitBiasError(f"logit_bias takes at most {MAX_ENTRIES} tokens, got {len(bias)}")
    out = {}
    for key, value in bias.items():
        if isinstance(key, str) and key.strip().isdecimal():
            if len(key.strip()) > MAX_KEY_DIGITS:  # before int(): a long one costs quadratic time, or Python refuses it
                raise LogitBiasError(f"logit_bias: the key {key.strip()[:20]}... ({len(key.strip())} digits) is not "
                                     f"a token id (the vocabulary has {n_vocab} tokens)")
            token = int(key)
        elif isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            token = int(key)
        else:
            raise LogitBiasError(f"logit_bias: the key {str(key)[:40]!r} is not a token id")
        if not 0 <= token < n_vocab:
            raise LogitBiasError(f"logit_bias: unknown token id {token} (the vocabulary has {n_vocab} tokens)")
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) \
                or not math.isfinite(value) or not -MAX_BIAS <= value <= MAX_BIAS:
            raise LogitBiasError(f"logit_bias[{token}] must be a number between -100 and 100, got {str(value)[:40]}")
        out[token] = float(value)
    return tuple(sorted(out.items()))


def make_logit_bias(pairs: tuple[tuple[int, float], ...]):
    """A logits processor adding each bias; a copy, never the caller's array."""
    ids = np.array([t for t, _ in pairs], dtype=np.int64)
    values = np.array([b for _, b in pairs], dtype=np.float32)

    def bias(history, logits: np.ndarray) -> np.ndarray:
        out = np.array(logits, dtype=np.float32, copy=True)
        out[ids] += values
        return out

    return bias
