"""`llama_cpp.llama_speculative`: draft models for `Llama(draft_model=...)`.

LlamaPromptLookupDecoding is mapped onto localinfer's n-gram lookup drafter (speculative/, the
model's lookup_ngram / draft_max): max_ngram_size is the longest n-gram matched, num_pred_tokens
the most tokens drafted. Greedy answers are the ones plain decoding gives. Other LlamaDraftModel
subclasses (a program's own drafter) are refused by Llama with their name: localinfer's engine
drafts with its own proposers."""
from __future__ import annotations

import abc
from typing import Any

import numpy as np


class LlamaDraftModel(abc.ABC):
    @abc.abstractmethod
    def __call__(self, input_ids: np.ndarray, /, **kwargs: Any) -> np.ndarray:
        """(n,) token ids so far -> (k,) drafted ids."""


class LlamaPromptLookupDecoding(LlamaDraftModel):
    def __init__(self, max_ngram_size: int = 2, num_pred_tokens: int = 10):
        for name, value in (("max_ngram_size", max_ngram_size), ("num_pred_tokens", num_pred_tokens)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.max_ngram_size, self.num_pred_tokens = max_ngram_size, num_pred_tokens

    def __call__(self, input_ids: np.ndarray, /, **kwargs: Any) -> np.ndarray:
        """The tokens that followed the earliest earlier match of the longest trailing n-gram
        (n <= max_ngram_size), at most num_pred_tokens of them; none without a match. (What the
        shim's Llama drafts with is localinfer's LookupProposer; this is for programs that call it.)"""
        ids = np.asarray(input_ids, dtype=np.intc)
        for n in range(min(self.max_ngram_size, len(ids) - 1), 0, -1):
            tail = ids[len(ids) - n:]
            for start in range(len(ids) - n):
                if np.array_equal(ids[start:start + n], tail) and start + n < len(ids):
                    return ids[start + n:min(start + n + self.num_pred_tokens, len(ids))]
        return np.array([], dtype=np.intc)
