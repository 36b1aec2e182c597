"""Several choices for one prompt (OpenAI's `n`): the prompt is evaluated once, in one slot, and
its K/V copied into the other choices' slots, which then decode on their own.

    choices = Choices(prompt, n, max_tokens, stop, params, logprobs, grammar)
    engine.submit_group(choices.requests)     # admitted together, into n slots at once
    index, chunk = choices.next_event(timeout) # every choice's chunks on one queue, tagged

The engine prefills the first request (the leader) and, when its prompt is done, copies the
leader's cache into each follower's slot (`copy_cache`: a memcpy of the prompt's positions) and
samples every choice from the same last logits row. Each choice has its own random stream: choice
0 takes the request's seed as it is (so n=1 and the first of n agree), choice i a seed derived
from (seed, i), so with a fixed seed the choices differ yet repeat.
"""
from __future__ import annotations

import queue
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from ..kv.cache import InterleavedKVCache, KVCache, RotatingKVCache
from ..sampling.params import SamplingParams
from .request import Request

MAX_CHOICES = 16


def choice_seed(seed: int | None, index: int) -> int | None:
    """Choice 0 keeps the seed; the others get independent streams derived from (seed, index)."""
    if seed is None or index == 0:
        return seed
    return int(np.random.SeedSequence([seed % 2**64, index]).generate_state(1, np.uint64)[0])


@dataclass
class ChoiceRequest(Request):
    """A Request whose chunks go to its group's queue, tagged with its index."""
    index: int = 0
    sink: queue.Queue | None = None
    group: "Choices | None" = field(default=None, repr=False, compare=False)

    def put(self, item) -> None:
        self.sink.put((self.index, item))
        on_put = self.group._on_put if self.group is not None else None
        if on_put is not None:
            on_put()

    def next_chunk(self, timeout: float | None = None):
        raise TypeError("a choice's chunks arrive on its group's queue: read them with Choices.next_event")


class Choices:
    def __init__(self, prompt: Sequence[int], n: int, max_tokens: int | None = None, stop: Sequence[str] = (),
                 params: SamplingParams = SamplingParams(), logprobs: int | None = None, grammar=None):
        if not 1 <= n <= MAX_CHOICES:
            raise ValueError(f"n must be between 1 and {MAX_CHOICES}, got {n}")
        self.events: queue.Queue = queue.Queue()
        self._on_put = None  # set by an asyncio reader (serve/jobs.py): called on the engine thread after each put
        self.requests = [ChoiceRequest(list(prompt), max_tokens, stop, replace(params, seed=choice_seed(params.seed, i)),
                                       grammar=grammar, logprobs=logprobs, index=i, sink=self.events, group=self)
                         for i in range(n)]

    def next_event(self, timeout: float | None = None):
        """(choice index, GenerationChunk); raises queue.Empty after `timeout`, or a choice's error."""
        index, item = self.events.get(timeout=timeout)
        if isinstance(item, BaseException):
            raise item
        return index, item

    def poll_event(self):
        """(choice index, GenerationChunk) if one is waiting, else None (never blocks); raises a choice's error."""
        try:
            index, item = self.events.get_nowait()
        except queue.Empty:
            return None
        if isinstance(item, BaseException):
            raise item
        return index, item

    def on_put(self, callback) -> None:
        """Calls `callback()` on the engine thread whenever any choice's chunk arrives (so it must only
        schedule work: asyncio's loop.call_soon_threadsafe); once now too, for any already waiting.
        None stops the calls. As Request.on_put, for the group's one queue."""
        self._on_put = callback
        if callback is not None:
            callback()

    def cancel(self) -> None:
        for r in self.requests:
            r.cancel()


def copy_cache(src, dst) -> None:
    """Makes the empty cache `dst` hold what `src` holds (same class and shapes: two slots' caches)."""
    if isinstance(src, InterleavedKVCache):
        copy_cache(src.full, dst.full)
        copy_cache(src.swa, dst.swa)
        return
    if isinstance(src, KVCache):
        n = src.offset
        dst.k[:, :n] = src.k[:, :n]
        dst.v[:, :n] = src.v[:, :n]
        dst.offset = n
        dst.rewritten()
        return
    if isinstance(src, RotatingKVCache):  # the ring: its slots map positions the same way in both
        dst.k[...] = src.k
        dst.v[...] = src.v
        dst.offset, dst.held_start = src.offset, src.held_start
        dst.rewritten()
        return
    raise TypeError(f"cannot copy a {type(src).__name__}")
