"""Speculative decoding inside the engine's continuous batching, per slot.

A decoding slot whose engine has a SpeculativeConfig drafts tokens before each step (its own
proposer: a draft model's context, kept across requests, or prompt lookup; Generation.draft) and
brings them as extra rows after its next token in the step's one forward pass; Generation.verify
then picks the kept tokens (speculative/decode.py Speculator.choose) and the engine rolls the
slot's cache back.
Prefilling slots are unchanged: they still get logits for their last row only.
"""
from __future__ import annotations

import numpy as np

from ..backend import kernels
from ..speculative.decode import Speculator, make_proposer

# A step of decode/verify rows only is run on the matmul's GEMV up to this many rows (each row then
# has a 1-token step's bits, as plain decoding of a few slots does); beyond, the GEMM is faster.
MAX_GEMV_ROWS = 32


def speculative_for(engine, slot, params) -> Speculator | None:
    """The request's Speculator in this slot, or None when the engine does not speculate."""
    if engine.speculative is None:
        return None
    if slot.proposer is None:  # made once per slot: a draft model's KV cache is reused
        slot.proposer = make_proposer(engine.speculative, engine.draft_runtime, engine.n_ctx, engine.kv_dtype)
    return Speculator(engine.speculative, params, slot.proposer)


def forward_rows(runtime, seqs, verifying: list[bool], scoring: list[bool] | None = None,
                 batched: bool = False, sampled: list[bool] | None = None) -> list[np.ndarray]:
    """forward_batch for one step: the last row's logits of each sequence, every row's of the
    sequences being verified or scored (a prompt whose logprobs are asked for). batched: the step
    computes prompt rows, each with the bits of a many-row pass (Decoder.forward_batch, engine.py).
    sampled: per sequence, whether a token is drawn from its last row this step (a scored prompt's
    last chunk: that row as a plain prompt's, computed alone)."""
    scoring = scoring or [False] * len(seqs)
    if not any(verifying) and not any(scoring):
        return runtime.forward_batch(seqs, last_only=True, batched=batched)
    n_last = [len(tokens) if v or s else 1 for (tokens, _), v, s in zip(seqs, verifying, scoring)]
    alone = [bool(s and d) for s, d in zip(scoring, sampled or [False] * len(seqs))]
    if batched or any(alone):
        return runtime.forward_batch(seqs, n_last=n_last, batched=batched, alone=alone)
    n_rows = sum(len(tokens) for tokens, _ in seqs)
    no_prefill_rows = n_rows == sum(n_last) and not any(scoring)  # a scored prompt's rows are prefill rows
    if no_prefill_rows and n_rows <= MAX_GEMV_ROWS and kernels.available():
        with kernels.gemv_rows(n_rows):
            return runtime.forward_batch(seqs, n_last=n_last)
    return runtime.forward_batch(seqs, n_last=n_last)

