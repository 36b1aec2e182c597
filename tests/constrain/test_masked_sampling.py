"""Sampling after a grammar's mask: most of the vocabulary is -inf, the sampler draws only from the rest."""
from __future__ import annotations

import numpy as np

from localinfer.sampling.samplers import apply_top_k, make_sampler


def _masked(n: int, allowed: np.ndarray, seed: int) -> np.ndarray:
    logits = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
    out = np.full(n, -np.inf, np.float32)
    out[allowed] = logits[allowed]
    return out


def test_top_k_over_a_mostly_masked_vocabulary():
    n = 262144
    rng = np.random.default_rng(1)
    for n_allowed in (1, 3, 40, 41, 500, n // 2):
        allowed = rng.choice(n, n_allowed, replace=False)
        x = _masked(n, allowed, n_allowed)
        kept = np.flatnonzero(np.isfinite(apply_top_k(x, 40)))
        want = allowed if n_allowed <= 40 else allowed[np.argsort(-x[allowed], kind="stable")[:40]]
        assert set(kept.tolist()) == set(want.tolist()), n_allowed


def test_the_sampler_draws_only_allowed_tokens():
    n = 49152
    allowed = np.array([7, 300, 4096, 40000])
    for seed in range(20):
        x = _masked(n, allowed, seed)
        assert make_sampler(1.0, top_k=40, seed=seed)(x) in allowed
        assert make_sampler(0.0)(x) == allowed[np.argmax(x[allowed])]
