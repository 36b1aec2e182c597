"""Exact-repeat completions: a deterministic request (greedy, or a fixed seed) that was answered
before is answered again from memory, without a slot or a forward pass.

The key is everything that decides the tokens: the prompt ids, the sampling parameters (seed
included), max_tokens, the stop strings and the grammar. Only finished answers are kept (never a
cancelled or failed one), least recently used first out, under a bound on the tokens held.

Batching can change the last bits of the logits (a row computed in a batch of 16 goes through
a GEMM, alone through a GEMV), so a repeat served from here is the answer the first request got,
which a recomputation under a different load need not reproduce bit for bit.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

from ..generate import GenerationChunk


class CompletionCache:
    def __init__(self, max_tokens: int = 1 << 16):
        self.max_tokens = max_tokens  # prompt + generated tokens held in all
        self._entries: OrderedDict[tuple, list[GenerationChunk]] = OrderedDict()
        self._sizes: dict[tuple, int] = {}
        self.held = 0
        self.hits = 0
        self._lock = threading.Lock()

    @staticmethod
    def key(request) -> tuple | None:
        if not request.params.deterministic or request.prompt_logprobs is not None:
            return None  # a scored prompt is computed: its rows are the answer's first part
        grammar = getattr(request.grammar, "key", None)  # llguidance's grammar text: it decides the tokens too
        return (tuple(request.prompt), request.params, request.max_tokens, tuple(request.stop), grammar,
                request.logprobs)

    def get(self, request) -> list[GenerationChunk] | None:
        key = self.key(request)
        if key is None:
            return None
        with self._lock:
            chunks = self._entries.get(key)
            if chunks is not None:
                self._entries.move_to_end(key)
                self.hits += 1
            return chunks

    def put(self, request, chunks: list[GenerationChunk]) -> None:
        key = self.key(request)
        size = len(request.prompt) + sum(len(c.tokens) for c in chunks)
        if key is None or size > self.max_tokens:
            return
        with self._lock:
            if key in self._entries:
                return
            self._entries[key] = [GenerationChunk(c.text, list(c.tokens), c.finish_reason, logprobs=c.logprobs)
                                  for c in chunks]
            self._sizes[key] = size
            self.held += size
            while self.held > self.max_tokens:
                old, _ = self._entries.popitem(last=False)
                self.held -= self._sizes.pop(old)

    def __len__(self) -> int:
        return len(self._entries)
