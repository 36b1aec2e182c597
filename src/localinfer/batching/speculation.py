"""Speculative decoding inside the engine's continuous batching, per slot.

A decoding slot whose engine has a SpeculativeConfig drafts tokens before each step (its own
proposer: a draft model's context, kept across requests, or prompt lookup) and brings them as
extra rows after its next token in the step's one forward pass; verify_slot then picks the kept
tokens (speculative/decode.py Speculator.choose) and the engine rolls the slot's cache back.
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


def draft_for(engine, slot) -> list[int]:
    """Tokens drafted after the slot's next token (kept in slot.drafted); none without speculation,
    or when the context or max_tokens leave no room for more than one token."""
    slot.drafted, slot.draft_q = [], None
    if slot.spec is None:
        return []
    room = engine.n_ctx - len(slot.history)
    if slot.out.max_tokens is not None:  # a step yields up to len(drafts) + 1 tokens
        room = min(room, slot.out.max_tokens - len(slot.out.tokens) - 1)
    slot.drafted, slot.draft_q = slot.spec.draft(slot.history, room)
    return slot.drafted


def forward_rows(runtime, seqs, verifying: list[bool], scoring: list[bool] | None = None) -> list[np.ndarray]:
    """forward_batch for one step: the last row's logits of each sequence, every row's of the
    sequences being verified or scored (a prompt whose logprobs are asked for)."""
    scoring = scoring or [False] * len(seqs)
    if not any(verifying) and not any(scoring):
        return runtime.forward_batch(seqs, last_only=True)
    n_last = [len(tokens) if v or s else 1 for (tokens, _), v, s in zip(seqs, verifying, scoring)]
    n_rows = sum(len(tokens) for tokens, _ in seqs)
    no_prefill_rows = n_rows == sum(n_last) and not any(scoring)  # a scored prompt's rows are prefill rows
    if no_prefill_rows and n_rows <= MAX_GEMV_ROWS and kernels.available():
        with kernels.gemv_rows(n_rows):
            return runtime.forward_batch(seqs, n_last=n_last)
    return runtime.forward_batch(seqs, n_last=n_last)


def verify_slot(slot, rows: np.ndarray) -> tuple[list[tuple[int, object]], int]:
    """rows (1 + len(drafted), n_vocab) -> ([(token, logprob entry or None)], drafted tokens kept).
    Each chosen token is appended to slot.history; the last is the first not drafted (or rejected)."""
    chosen, n_kept = [], 0
    for i, row in enumerate(rows):
        d = slot.drafted[i] if i < len(slot.drafted) else None
        q = slot.draft_q[i] if slot.draft_q is not None and d is not None else None
        token, kept = slot.spec.choose(row, slot.history, slot.processors, slot.matcher, d, q)
        slot.history.append(token)
        chosen.append((token, slot.recorder.take(token) if slot.recorder else None))
        n_kept += kept
        if not kept or (slot.matcher is not None and slot.matcher.done):
            break
    return chosen, n_kept
