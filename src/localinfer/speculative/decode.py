"""One sequence's drafting and verifying: the Speculator a generate.Generation chooses through.

Each step drafts up to draft_max tokens, verifies them all in one forward pass (generate.context_steps
in a Context, the engine's batch in a slot), and the KV caches are rolled back to the tokens kept
(the target's by the caller, the draft model's at its next `propose`)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..backend import kernels
from ..sampling.params import SamplingParams
from ..sampling.samplers import check_logits
from .config import SpeculativeConfig
from .proposers import DraftProposer, LookupProposer
from .verify import accept_or_resample, target_probs


class Speculator:
    """One sequence's drafting and choosing: the proposer, the sampler's numbers and its random state."""

    def __init__(self, config: SpeculativeConfig, sampler: SamplingParams, proposer):
        self.config, self.sampler, self.proposer = config, sampler, proposer
        self.rng = np.random.default_rng(sampler.seed)
        self.draft_rng = np.random.default_rng(None if sampler.seed is None else sampler.seed + 1)
        self.drafted = self.accepted = 0  # totals, for metrics and benchmarks

    def probs(self, logits: np.ndarray) -> np.ndarray:
        """The sampler's distribution: verification needs it, not only a draw."""
        p = self.sampler
        return target_probs(logits, p.temperature, p.top_k, p.top_p, p.min_p)

    def draft(self, history: Sequence[int], room: int) -> tuple[list[int], list | None]:
        """At most min(draft_max, room) tokens to verify after history; none when fewer than draft_min."""
        n = min(self.config.draft_max, room)
        if n <= 0:
            return [], None
        dist = None if self.sampler.greedy else self.probs
        tokens, q = self.proposer.propose(history, n, dist, self.draft_rng)
        if len(tokens) < max(1, self.config.draft_min):
            return [], None
        self.drafted += len(tokens)
        return tokens, q

    def choose(self, logits: np.ndarray, drafted: int | None, q: np.ndarray | None) -> tuple[int, bool]:
        """The token at one verified row -> (token, whether it is the drafted one). `logits` are the
        row after the processors and the grammar's mask (generate.Generation.choose runs them, as for
        plain decoding, and has the grammar accept the token)."""
        check_logits(logits)   # as plain decoding does: argmax of NaN is token 0, and p would not sum to 1
        if self.sampler.greedy:
            token = int(np.argmax(logits))
            kept = token == drafted
        elif drafted is None:
            p = self.probs(logits)
            token, kept = int(self.rng.choice(p.shape[0], p=p)), False
        else:
            token, kept = accept_or_resample(self.probs(logits), drafted, q, self.rng)
        self.accepted += int(kept)
        return token, kept

def make_proposer(config: SpeculativeConfig, draft_runtime=None, n_ctx: int = 0, kv_dtype=np.float16):
    """The draft model's proposer (its own KV cache of n_ctx positions) when there is one, else prompt lookup."""
    if draft_runtime is not None:
        return DraftProposer(draft_runtime, n_ctx, kv_dtype, config.draft_p_min)
    return LookupProposer(config.lookup_ngram)


def verify_rows(runtime_call, tokens: list[int]) -> np.ndarray:
    """Logits of every row of a verification pass, each rounded as a 1-token decode step
    (the GEMV for all rows; fewer than LI_ATTN_BATCH rows, config.MAX_DRAFT_IDENTICAL)."""
    if kernels.available():
        with kernels.gemv_rows(len(tokens)):
            return runtime_call(tokens)
    return runtime_call(tokens)

