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

from ..generate import GenerationChunk, Timings, check_max_tokens
from ..sampling.params import SamplingParams

_ids = itertools.count(1)


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
    logprobs: int | None = None  # None: none; n: each chunk carries its tokens' logprobs and n alternatives
    # None: the prompt is not scored; n: the engine also scores the prompt while prefilling it (every
    # row's logits, in its slot), into prompt_scores before the first chunk: TokenLogprobs with n alternatives
    prompt_logprobs: int | None = None
    progress: bool = False  # chunks without text saying how far the prompt's computation is (GenerationChunk.progress)

    def __post_init__(self):
        self.prompt = [int(t) for t in self.prompt]
        self.max_tokens = check_max_tokens(self.max_tokens)  # -1 means None; refused here, not in the engine
        self.prompt_scores: list | None = None  # set by the engine (prompt_logprobs), before the first chunk
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self._events: queue.Queue = queue.Queue()
        self._cancelled = threading.Event()
        self.on_cancel = None  # set by the engine: wakes its thread
        self._on_put = None  # set by an asyncio reader (aio.py): called on the engine thread after each put

    # -- the engine's side -----------------------------------------------------------------------
    def put(self, item: GenerationChunk | BaseException) -> None:
        self._events.put(item)
        on_put = self._on_put
        if on_put is not None:
            on_put()

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

    def poll_chunk(self) -> GenerationChunk | None:
        """The next chunk if one is waiting, else None (never blocks); raises the engine's error."""
        try:
            item = self._events.get_nowait()
        except queue.Empty:
            return None
        if isinstance(item, BaseException):
            raise item
        return item

    def on_put(self, callback) -> None:
        """Calls `callback()` (on the engine thread, so it must only schedule work: asyncio's
        loop.call_soon_threadsafe) whenever a chunk arrives; once now too, for any already waiting.
        None stops the calls."""
        self._on_put = callback
        if callback is not None:
            callback()

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


class ChunkStream:
    """What Model.stream returns for an engine request: request.chunks(), with the request at hand
    (aio.py waits on it from an event loop instead of iterating). Closing it cancels the request."""

    def __init__(self, request: Request):
        self.request = request
        self._chunks = request.chunks()

    def __iter__(self) -> "ChunkStream":
        return self

    def __next__(self) -> GenerationChunk:
        return next(self._chunks)

    def close(self) -> None:
        self._chunks.close()
        self.request.cancel()  # also when never iterated (closing an unstarted generator runs no finally)
