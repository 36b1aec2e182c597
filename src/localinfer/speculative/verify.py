"""Which drafted tokens the target keeps.

Greedy: the target's argmax at each verified row; drafted tokens are kept while they equal it, and
the first row where they differ (or the row after the last draft) gives one more token. The result
is the tokens plain greedy decoding gives.

Sampling (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding";
Chen et al. 2023): with p the target's distribution at a row (after the same processors and sampler
transforms that plain sampling uses: penalties, bias, grammar mask, top-k, top-p, min-p,
temperature) and q the draft's, a drafted x is kept with probability min(1, p(x)/q(x)); when it is
not, the token is drawn from the residual max(0, p - q) / sum. Kept or redrawn, the token is
distributed as p; after all drafts are kept the next row gives a token drawn from p. A
deterministic proposer has q one-hot at x: keep x with probability p(x), else draw from p without x.
"""
from __future__ import annotations

import numpy as np

from ..sampling.samplers import _probs, apply_min_p, apply_top_k, apply_top_p


def target_probs(logits: np.ndarray, temperature: float, top_k: int, top_p: float, min_p: float) -> np.ndarray:
    """(n_vocab,) float64: the distribution sampling.make_sampler draws from, as a full vector
    (the same steps in the same order; dropped tokens have probability 0)."""
    x = np.asarray(logits, dtype=np.float32)
    x = apply_min_p(apply_top_p(apply_top_k(x, top_k), top_p), min_p)
    return _probs(x / temperature)


def accept_or_resample(p: np.ndarray, x: int, q: np.ndarray | None, rng: np.random.Generator) -> tuple[int, bool]:
    """-> (token, kept): the drafted x kept with probability min(1, p(x)/q(x)), else a token drawn
    from the residual. q None: the draft was deterministic (q one-hot at x)."""
    qx = 1.0 if q is None else float(q[x])
    if qx <= 0.0 or rng.random() * qx < p[x]:  # u < p/q without a division; q(x)=0 cannot be drawn
        return x, True
    if q is None:
        residual = p.copy()
        residual[x] = 0.0
    else:
        residual = np.maximum(p - q, 0.0)
    total = residual.sum()
    if total <= 0.0:  # p == q (up to rounding): x would have been kept; p itself is the answer
        residual, total = p, p.sum()
    return int(rng.choice(residual.shape[0], p=residual / total)), False
