"""Speculative decoding: a cheap proposer drafts a few tokens, the model verifies them in one pass.

    config.py     SpeculativeConfig: --model-draft, --draft-max/-min/-p-min, --lookup-ngram, checked
    vocab.py      the draft and the target must share a vocabulary (VocabMismatchError otherwise)
    proposers.py  DraftProposer (a second, smaller model, greedy) and LookupProposer (n-grams of the text so far)
    verify.py     which drafted tokens the target keeps: greedy (the argmax rows) or speculative
                  sampling (accept x with min(1, p/q), else draw from max(0, p - q)); the target's p
                  is its sampler's distribution, so the output follows it exactly
    decode.py     Speculator: one sequence's drafts and the choice at each verified row (stepped by
                  generate.Generation, in a Context or in an engine slot); verify_rows

At temperature 0 the tokens are the ones plain decoding gives, bit for bit: the verification pass
keeps the C matmul on its GEMV for all its rows (kernels.gemv_rows) and stays below attention's
batched path (LI_ATTN_BATCH, 16 queries), so every row rounds as a 1-token decode step.
"""
from .config import SpeculativeConfig, SpeculativeConfigError
from .vocab import VocabMismatchError, check_same_vocab

__all__ = ["SpeculativeConfig", "SpeculativeConfigError", "VocabMismatchError", "check_same_vocab"]
