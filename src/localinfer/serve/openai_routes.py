"""The OpenAI API's generation routes: /v1/chat/completions, /v1/completions (whole answers or
Server-Sent Events) and /v1/embeddings.

A request's body is parsed and validated off the event loop (api.py: tokenizing and compiling a
grammar may take a while), then its requests go to the model's engine (jobs.py), which also scores
an echoed prompt whose logprobs are asked for, in the request's slot. A whole answer is awaited
while watching for the client's disconnect; a stream is a jobs.ClosingStream, which stops
when the client goes. Either way, what did not finish is cancelled and its slots freed. Streams are
SSE as OpenAI sends them: `data: {json}\\n\\n` per chunk, then `data: [DONE]\\n\\n`.
"""
from __future__ import annotations

import asyncio
import json
import threading

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from . import api, embeddings as embedding_api, jobs
from ..batching.request import Cancelled
from .request_json import parse_json_object


async def read_json(request: Request) -> dict:
    """The body as a JSON object (a 400 naming what is wrong; 411 without a declared body)."""
    if "content-length" not in request.headers and "transfer-encoding" not in request.headers:
        raise api.ApiError(411, "a Content-Length header with the body size is required")
    data = await request.body()
    return await run_in_threadpool(parse_json_object, data)


def requested_model(body: dict) -> str | None:
    name = body.get("model")
    if name is not None and not isinstance(name, str):
        raise api.bad(f"'model' must be a string, got {type(name).__name__}", "model")
    return name


async def chat(request: Request) -> Response:
    return await _generate(request, api.parse_chat)


async def completions(request: Request) -> Response:
    return await _generate(request, api.parse_completion)


async def _generate(request: Request, parse) -> Response:
    body = await read_json(request)

    async def prepare(served) -> jobs.Prepared:
        job = await run_in_threadpool(parse, body, served.model, served.name, served.engine.n_ctx)
        return jobs.Prepared(job, job.stream, _events, _whole)

    return await jobs.respond(request, request.app.state.registry.lease(requested_model(body)), prepare,
                              "text/event-stream", headers={"Cache-Control": "no-cache"})


async def _whole(job: api.Job) -> dict:
    shaper, n, k = api.Shaper(job), 0, len(job.choices.requests)
    text = [[job.echo or ""] for _ in range(k)]
    logprobs: list[list] = [[] for _ in range(k)]
    answers: list = [None] * k
    try:
        async for i, chunk in jobs.choice_events(job.choices):
            text[i].append(chunk.text)
            logprobs[i].extend(chunk.logprobs or [])
            n += len(chunk.tokens)
            if chunk.finish_reason:
                answers[i] = (chunk.finish_reason, i)
    except Cancelled:
        raise jobs.ClientGone() from None
    except Exception as e:
        raise api.ApiError(500, f"generation failed: {e}", "server_error") from None
    if job.scores_prompt:  # scored as the prompt was prefilled: there now
        logprobs = [(job.echo_logprobs(j) or []) + logprobs[j] for j in range(k)]
    return shaper.combine([shaper.whole("".join(text[j]), finish, n, j, logprobs[j]) for finish, j in answers])


def _sse(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


async def _events(job: api.Job):
    shaper, n, echo_due = api.Shaper(job), 0, set()
    for i in range(len(job.choices.requests)):
        if job.kind == "chat":
            yield _sse(shaper.chunk(None, first=True, index=i))
        elif job.echo is not None and job.scores_prompt:
            echo_due.add(i)  # with the prompt's logprobs: the engine has them by the choice's first chunk
        elif job.echo is not None:
            yield _sse(shaper.chunk(job.echo, index=i))
    try:
        async for i, chunk in jobs.choice_events(job.choices):
            if i in echo_due:
                echo_due.discard(i)
                yield _sse(shaper.chunk(job.echo, index=i, logprobs=job.echo_logprobs(i)))
            n += len(chunk.tokens)
            if shaper.tools is not None:  # tool calls: only what the parser has settled
                for event in shaper.tool_chunks(chunk.text, chunk.finish_reason, index=i):
                    yield _sse(event)
            elif chunk.text or (chunk.logprobs and job.logprobs and not chunk.finish_reason):
                yield _sse(shaper.chunk(chunk.text, index=i, logprobs=chunk.logprobs))
            if chunk.finish_reason:
                logprobs = None if chunk.text else chunk.logprobs  # not sent yet: with the finish
                yield _sse(shaper.chunk(None, chunk.finish_reason, index=i, logprobs=logprobs))
        if job.include_usage:
            yield _sse(shaper.usage_chunk(n))
    except Cancelled:
        return  # cancelled elsewhere: the stream ends without [DONE]
    except Exception as e:  # the status line is sent: report it in the stream, as OpenAI does
        yield _sse(api.ApiError(500, f"generation failed: {e}", "server_error").body())
    yield b"data: [DONE]\n\n"


async def embeddings(request: Request) -> Response:
    body = await read_json(request)
    config = request.app.state.config
    async with request.app.state.registry.lease(requested_model(body)) as served:
        job = await run_in_threadpool(embedding_api.parse_embeddings, body, served.model, served.name,
                                      served.engine.n_ctx, config.pooling)
        await jobs.unless_disconnected(request.receive, run_passes(job, served.model))
    return JSONResponse(job.response())


async def run_passes(job, model) -> None:
    """An embedding or re-ranking job's (job.run(model): one step per forward pass) forward passes
    in a thread, one at a time under the model's lock (the engine's steps go between them);
    cancelled, the thread stops after the pass it is in."""
    stop = threading.Event()

    def run() -> None:
        for _ in job.run(model):
            if stop.is_set():
                return

    future = asyncio.get_running_loop().run_in_executor(None, run)
    try:
        await asyncio.shield(future)
    except asyncio.CancelledError:
        stop.set()
        raise
