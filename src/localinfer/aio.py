"""asyncio versions of generate/stream/chat: Model.agenerate, Model.astream, Model.achat,
ChatSession.asend and ChatSession.astream.

The event loop's thread never runs a forward pass or waits on one:
- a request without a context goes to the model's batched engine, whose thread runs the kernels
  (they release the GIL, so the loop keeps ticking); each chunk it puts on the request wakes the
  loop through loop.call_soon_threadsafe, and the loop picks it up without blocking;
- a request in a context (a chat session's cache) runs in a thread of its own, which hands its
  chunks to the loop the same way;
- the synchronous preparation (tokenizing, compiling a grammar, submitting) runs in the loop's
  default executor.
Cancelling the task that iterates (task.cancel(), or leaving an `async for` early) cancels the
request: the engine frees its slot at its next step, so at most one more token is computed; a
context's thread stops after the token it is computing, and the call waits for that before it
returns, so a chat session's next turn finds its context free.
"""
from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Iterator, Mapping, Sequence

from .generate import GenerationChunk, GenerationResult, collect

if TYPE_CHECKING:  # model.py and chat/session.py import this module lazily, never the other way
    from .chat.session import ChatSession
    from .model import Model

_END = object()  # a context thread's last word


async def astream(model: "Model", prompt: str | Sequence[int], **options) -> AsyncIterator[GenerationChunk]:
    """Model.stream's chunks, for `async for`; keyword arguments as for Model.stream."""
    chunks = await _off_loop(lambda: model.stream(prompt, **options))
    async for chunk in _closing(_relay(chunks)):
        yield chunk


async def agenerate(model: "Model", prompt: str | Sequence[int], **options) -> GenerationResult:
    """Model.generate's GenerationResult; keyword arguments as for Model.stream (for the chunks as
    they come, use astream)."""
    if "stream" in options:
        raise TypeError("agenerate returns the whole result; use astream(...) for the chunks")
    tokens = await _off_loop(lambda: model._prompt_tokens(prompt))
    return collect([c async for c in astream(model, tokens, **options)], tokens)


async def achat(model: "Model", messages: Sequence[Mapping[str, Any]], allow_special_in_content: bool = False,
                **options) -> GenerationResult:
    """Model.chat's GenerationResult (the conversation rendered by the chat template)."""
    tokens = await _off_loop(lambda: model.chat_tokens(messages, allow_special_in_content))
    return await agenerate(model, tokens, **options)


async def chat_astream(session: "ChatSession", user_text: str, **options) -> AsyncIterator[GenerationChunk]:
    """ChatSession.stream's chunks; stopping early keeps the partial answer in the conversation."""
    chunks = await _off_loop(lambda: session.stream(user_text, **options))
    async for chunk in _closing(_relay(chunks)):
        yield chunk


async def chat_asend(session: "ChatSession", user_text: str, **options) -> GenerationResult:
    chunks = [c async for c in chat_astream(session, user_text, **options)]
    return collect(chunks, session.last_prompt_tokens)


async def _off_loop(call: Callable[[], Any]) -> Any:
    """call() in the loop's default executor. Cancelled while it runs, a stream it started is
    closed when it returns (so a request submitted anyway is cancelled, not left running)."""
    future = asyncio.get_running_loop().run_in_executor(None, call)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        future.add_done_callback(_close_result)
        raise


def _close_result(future) -> None:
    if not future.cancelled() and future.exception() is None and hasattr(future.result(), "close"):
        future.result().close()


async def _closing(chunks: AsyncIterator[GenerationChunk]) -> AsyncIterator[GenerationChunk]:
    """chunks, closed (its request cancelled) as soon as this is: an inner async generator left
    suspended would otherwise wait for the garbage collector."""
    try:
        async for chunk in chunks:
            yield chunk
    finally:
        await chunks.aclose()


def _relay(chunks: Iterator[GenerationChunk]) -> AsyncIterator[GenerationChunk]:
    request = getattr(chunks, "request", None)  # batching.request.ChunkStream: an engine request
    return _engine_chunks(request) if request is not None else _thread_chunks(chunks)


async def _engine_chunks(request) -> AsyncIterator[GenerationChunk]:
    async with contextlib.aclosing(polled(request, request.poll_chunk)) as chunks:
        async for chunk in chunks:
            yield chunk
            if chunk.finish_reason:
                return


async def polled(source, poll: Callable[[], Any]) -> AsyncIterator[Any]:
    """Every item `poll()` returns (None: nothing yet), the loop waiting in between without blocking:
    `source.on_put` wakes it from the engine thread when something arrives (a Request, or a group of
    Choices). When the iteration stops (the caller's end, an error, a cancelled task) the wake-ups
    stop and `source.cancel()` runs: a no-op for what has finished."""
    loop = asyncio.get_running_loop()
    arrived = asyncio.Event()

    def wake() -> None:  # on the engine thread
        try:
            loop.call_soon_threadsafe(arrived.set)
        except RuntimeError:
            pass  # the loop is closed: nobody is waiting any more

    source.on_put(wake)
    try:
        while True:
            # cleared before polling: a chunk put after the poll schedules a set() that runs after
            # this clear (both happen on the loop's thread), so no wakeup is lost
            arrived.clear()
            item = poll()
            if item is None:
                await arrived.wait()
                continue
            yield item
    finally:
        source.on_put(None)
        source.cancel()


async def _thread_chunks(chunks: Iterator[GenerationChunk]) -> AsyncIterator[GenerationChunk]:
    """A generator that runs forward passes itself (a context's), iterated on a thread of its own."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    stop = threading.Event()

    def send(item) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:
            pass  # the loop is closed

    def run() -> None:
        try:
            for chunk in chunks:
                send(chunk)
                if stop.is_set():
                    break
        except BaseException as e:  # handed to the loop, raised there
            send(e)
        finally:
            chunks.close()  # on this thread: the generator is not running here any more
            send(_END)

    threading.Thread(target=run, name="localinfer-astream", daemon=True).start()
    item = None
    try:
        while True:
            item = await queue.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while item is not _END:  # at most the token in progress: then the context is free again
            item = await queue.get()
