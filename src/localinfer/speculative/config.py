"""The speculative-decoding options (llama.cpp's names), checked once where they come in."""
from __future__ import annotations

from dataclasses import dataclass

# Rows of one verification pass stay below csrc/core/attention.c LI_ATTN_BATCH (16 queries), where
# attention starts summing P.V another way: 1 + draft_max <= 15 keeps every row a decode step's bits.
MAX_DRAFT_IDENTICAL = 14
MAX_DRAFT = 64  # a sliding-window ring keeps 64 positions beyond its window (kv_cache.RotatingKVCache)


class SpeculativeConfigError(ValueError):
    """A speculative-decoding option out of its range."""


@dataclass(frozen=True)
class SpeculativeConfig:
    # tokens drafted per step at most (llama.cpp --draft-max, 16 there). 8: the verification pass stays
    # within MAX_DRAFT_IDENTICAL, and here (BENCHMARKS.md) prompt lookup ran faster with 8 than with 4;
    # a draft model stops earlier anyway (draft_p_min), so more rarely changes its figures
    draft_max: int = 8
    draft_min: int = 0  # a draft shorter than this is not verified (plain decode step instead)
    draft_p_min: float = 0.75  # the draft model stops drafting when its top token's probability is lower
    lookup_ngram: int = 0  # prompt lookup: longest n-gram matched (0: off; the draft model wins when both)

    def __post_init__(self):
        for name, lo, hi in (("draft_max", 1, MAX_DRAFT), ("draft_min", 0, MAX_DRAFT), ("lookup_ngram", 0, 16)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise SpeculativeConfigError(f"{name} must be an integer in {lo}..{hi}, got {v!r}")
        if self.draft_min > self.draft_max:
            raise SpeculativeConfigError(f"draft_min ({self.draft_min}) is larger than draft_max ({self.draft_max})")
        p = self.draft_p_min
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
            raise SpeculativeConfigError(f"draft_p_min must be a number in 0..1, got {p!r}")
