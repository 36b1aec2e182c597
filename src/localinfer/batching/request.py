"""One generation request as the engine sees it, and the channel its chunks come back on.

The submitting thread iterates `chunks()`; the engine thread puts GenerationChunks (or an
exception) on the request's queue. Closing the iterator early, or `cancel()`, tells the engine
to free the request's slot at its next step.
"""
from __future__ import annotations

import itertools
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Iterator, Sequence

from ..generate import GenerationChunk, Timings
from ..sampling import make_logits_processors, make_sampler

_ids = itertools.count(1)


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.8  # <= 0: greedy
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repeat_last_n: int = 64
    seed: int | None = None

    @property
    def deterministic(self) -> bool:
        """Whether the same prompt always gives the same tokens (greedy, or a fixed seed)."""
        return self.temperature <= 0 or self.seed is not None

    def make_sampler(self):
        return make_sampler(self.temperature, self.top_k, self.top_p, self.min_p, self.seed)

    def make_processors(self):
        return make_logits_processors(self.repeat_penalty, self.presence_penalty, self.frequency_penalty,
                                      self.repeat_last_n)


class Cancelled(Exception):
    """The request was cancelled before it finished."""


@dataclass
class Request:
    prompt: list[int]
    max_tokens: int | None = None  # None: until a stop, an end-of-generation token or the context end
    stop: Sequence[str] = ()
    params: SamplingParams = field(default_factory=SamplingParams)
    id: int = field(default_factory=lambda: next(_ids))
    created: float = field(default_factory=time.perf_counter)
    timings: Timings = field(default_factory=Timings)
    grammar: object = None  # a constrain.Grammar: the engine masks this request's logits with it

    def __post_init__(self):
        self.prompt = [int(t) for t in self.prompt]
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self._events: queue.Queue = queue.Queue()
        self._cancelled = threading.Event()
        self.on_cancel = None  # set by the engine: wakes its thread

    # -- the engine's side -----------------------------------------------------------------------
    def put(self, item: GenerationChunk | BaseException) -> None:
        self._events.put(item)

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    # -- the client's side -----------------------------------------------------------------------
    def cancel(self) -> None:
        if not self._cancelled.is_set():
            self._cancelled.set()
            if self.on_cancel:
                self.on_cancel()

    def next_chunk(self, timeout: float | None = None) -> GenerationChunk:
        """The next chunk; raises queue.Empty after `timeout`, or the engine's error."""
        item = self._events.get(timeout=timeout)
        if isinstance(item, BaseException):
            raise item
        return item

    def chunks(self) -> Iterator[GenerationChunk]:
        """Every chunk up to the one with the finish_reason. Closing early cancels the request."""
        try:
            while True:
                chunk = self.next_chunk()
                yield chunk
                if chunk.finish_reason:
                    return
        finally:
            self.cancel()  # a no-op for the engine once the request is done
