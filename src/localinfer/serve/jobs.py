"""Running a validated job's requests on a batching engine from an asyncio event loop.

    await respond(request, registry.lease(name), prepare, media_type)   # a generation route's frame
    submit(engine, job.choices)                     # 503 / 400 as ApiError; never blocks
    async for index, chunk in choice_events(job.choices): ...
    result = await unless_disconnected(receive, coroutine)

The engine's thread puts each chunk on the choices' queue and wakes the loop through
loop.call_soon_threadsafe; the loop never waits on a thread. Leaving `choice_events` early (a
client gone, the task cancelled, an error) cancels every choice's request, so the engine frees their
slots at its next step.
"""
from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, AsyncIterator, Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..aio import polled
from ..batching.engine import Engine, EngineClosedError, QueueFullError
from ..batching.fork import Choices
from ..generate import GenerationChunk
from ..kv.cache import ContextFullError
from .api import ApiError, bad

if TYPE_CHECKING:
    from .api import Job


class ClientGone(Exception):
    """The client disconnected before its answer was complete."""


@dataclass
class Prepared:
    """What a generation route makes of its request once the model is leased: the job, and how its
    answer is sent (`events(job)`: a stream's body; `whole(job)`: a whole answer's JSON)."""
    job: "Job"
    stream: bool
    events: Callable[["Job"], AsyncIterator[bytes]]
    whole: Callable[["Job"], Awaitable[dict]]


async def respond(request: Request, lease, prepare, media_type: str, headers=None) -> Response:
    """The frame of every generation route (OpenAI's and Ollama's): hold the model's `lease`
    (registry.lease) while the answer runs; `prepare(served)` (on the event loop) returns a Response
    to send at once or a Prepared, whose job's requests go to the served engine. A stream holds the
    lease until it ends (ClosingStream); a whole answer is awaited unless the client goes. Whatever
    did not finish is cancelled, which frees its slots."""
    held = contextlib.AsyncExitStack()
    served = await held.enter_async_context(lease)
    job = None
    try:
        refuse_encoder(served)
        prepared = await prepare(served)
        if isinstance(prepared, Response):
            return prepared
        job = prepared.job
        submit(served.engine, job.choices)
        if prepared.stream:
            response = ClosingStream(prepared.events(job), media_type, job.choices, held.pop_all(), headers=headers)
            job = None  # the stream's now
            return response
        return JSONResponse(await unless_disconnected(request.receive, prepared.whole(job)))
    finally:
        if job is not None:
            job.choices.cancel()  # a no-op for what finished
        await held.aclose()


def refuse_encoder(served) -> None:
    """An encoder (bert, nomic-bert, jina-bert-v2, modern-bert) has no LM head and no causal attention: a
    generation request to it is the client's mistake, a 400 that says where to go instead."""
    model = served.model
    if getattr(model, "is_encoder", False):
        raise ApiError(400, f"the model '{served.name}' is an encoder ({model.architecture}): it cannot generate "
                            f"text; use /v1/embeddings (or /api/embed) for embeddings, /v1/rerank to re-rank",
                       param="model", code="model_not_supported")


def submit(engine: Engine, choices: Choices) -> None:
    """Queues the choices' requests on the engine, or raises the ApiError a client should see."""
    requests = choices.requests  # more than the slots: the engine runs them in groups
    try:
        engine.submit(requests[0]) if len(requests) == 1 else engine.submit_group(requests)
    except QueueFullError as e:
        raise ApiError(503, str(e), "server_error", code="server_busy", headers={"Retry-After": "1"}) from None
    except EngineClosedError as e:
        raise ApiError(503, str(e), "server_error", code="shutting_down") from None
    except ContextFullError as e:
        raise bad(str(e), code="context_length_exceeded") from None


async def choice_events(choices: Choices) -> AsyncIterator[tuple[int, GenerationChunk]]:
    """(choice index, chunk) as the engine delivers them, until every choice has finished; raises a
    choice's error (batching.request.Cancelled when the request was cancelled elsewhere)."""
    left = len(choices.requests)
    async with contextlib.aclosing(polled(choices, choices.poll_event)) as events:  # cancels them at the end
        async for event in events:
            yield event
            if event[1].finish_reason:
                left -= 1
                if not left:
                    return


async def wait_for_disconnect(receive: Callable[[], Awaitable[dict]]) -> None:
    """Returns when the client has gone (ASGI's http.disconnect); call after the body is read."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(receive: Callable[[], Awaitable[dict]], work: Awaitable):
    """work's result; if the client disconnects first, work is cancelled and ClientGone raised."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(wait_for_disconnect(receive))
    try:
        await asyncio.wait((task, watch), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)  # its finally blocks (cancelling requests) have run
    if not task.done() or task.cancelled():
        raise ClientGone()
    return task.result()


class ClosingStream(StreamingResponse):
    """A streamed answer (OpenAI's text/event-stream, Ollama's NDJSON) that ends the job however the
    stream ends (finished, the client gone, a write timed out): its requests are cancelled, which
    frees their slots, and the model's lease (`held`) is returned at once."""

    def __init__(self, body, media_type: str, choices: Choices, held: contextlib.AsyncExitStack, headers=None):
        super().__init__(body, media_type=media_type, headers=headers)
        self.choices, self.held = choices, held

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.choices.cancel()
            await self.held.aclose()
