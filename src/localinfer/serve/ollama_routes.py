"""Ollama's API beside OpenAI's, for Ollama's clients (the official `ollama` Python library ...):

    POST /api/chat /api/generate      answers, streamed as NDJSON unless "stream": false
    POST /api/embed /api/embeddings   vectors (the second: Ollama's older route, one prompt, not normalized)
    GET  /api/tags /api/ps            the models served / loaded;  POST /api/show  one model's description
    GET  /api/version

Requests are checked in ollama_requests.py (which hands the generation's fields to api.py, the
OpenAI route's parser), answers shaped in ollama_shapes.py; running them is jobs.py's, as for the
OpenAI routes. Errors are Ollama's {"error": "..."}: 400 for a bad field, 404 for an unknown model.
An empty chat or prompt only loads the model (done_reason "load"), or with keep_alive 0 unloads it
("unload"; a server of one model, which cannot unload it, answers "load"). keep_alive reaches the
registry's lease, which keeps the model loaded that long after the request.
"""
from __future__ import annotations

import json
import time

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from . import api, embeddings as embedding_api, jobs
from . import ollama_requests as oreq
from . import ollama_shapes as shapes
from ..batching.request import Cancelled
from .openai_routes import read_json, run_passes  # as the OpenAI routes run embeddings
from .endpoint import endpoint
from .registry import UnknownModelError

# Ollama's routes that manage its model store: this server serves the GGUF files it was started with
MODEL_STORE = ("/api/pull", "/api/push", "/api/create", "/api/copy", "/api/delete", "/api/blobs")


def routes() -> list[Route]:
    """The routes create_app adds for Ollama's API; any other /api/* is answered in Ollama's error
    shape too (a 405 naming the method a route takes, a 501 for the model store, else a 404)."""
    table = [("/api/chat", chat, "POST"), ("/api/generate", generate, "POST"), ("/api/embed", embed, "POST"),
             ("/api/embeddings", embeddings, "POST"), ("/api/tags", tags, "GET"), ("/api/ps", ps, "GET"),
             ("/api/show", show, "POST"), ("/api/version", version, "GET")]
    methods = {path: method for path, _, method in table}

    async def elsewhere(request: Request) -> Response:
        path = "/api/" + request.path_params["rest"].rstrip("/")  # under a mount too
        if path in methods:
            return _error(405, f"{path} takes {methods[path]}, not {request.method}", {"Allow": methods[path]})
        if path.startswith(MODEL_STORE):
            return _error(501, f"{path} is not supported: this server serves the model files it was started with "
                               f"(GET /api/tags lists them); it does not pull, push, create, copy or delete models")
        return _error(404, f"no route {request.method} {path[:200]}")

    return [Route(path, _endpoint(handler), methods=[method]) for path, handler, method in table] + [
        Route("/api/{rest:path}", _endpoint(elsewhere), methods=["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH"])]


def _error(status: int, message: str, headers=None) -> JSONResponse:
    return JSONResponse({"error": message}, status, headers=headers)


def _endpoint(handler):
    """handler(request) as the OpenAI routes run theirs (endpoint.py: the API key, and each
    failure an answer with its status), its errors reshaped as Ollama's."""
    async def ollama_errors(request: Request) -> Response:
        try:
            return await handler(request)
        except oreq.OllamaError as e:
            return _error(e.status, e.message)
        except UnknownModelError as e:  # in Ollama's words, which its clients look for
            return _error(404, f"model '{e.name[:100]}' not found: this server serves "
                               + ", ".join(f"'{a}'" for a in e.available))

    run = endpoint(ollama_errors)

    async def reshaped(request: Request) -> Response:
        response = await run(request)
        if response.status_code >= 400 and response.headers.get("content-type") == "application/json":
            error = json.loads(response.body).get("error")
            if isinstance(error, dict):  # OpenAI's {"error": {"message": ...}}
                headers = {k: v for k, v in response.headers.items() if k.lower() == "retry-after"}
                return _error(response.status_code, str(error.get("message")), headers)
        return response
    return reshaped


# -- answers --------------------------------------------------------------------------------------
async def chat(request: Request) -> Response:
    return await _answer(request, oreq.parse_chat)


async def generate(request: Request) -> Response:
    return await _answer(request, oreq.parse_generate)


async def _answer(request: Request, parse) -> Response:
    started = time.perf_counter()
    req = parse(await read_json(request))
    registry = request.app.state.registry
    if req.load_only and req.keep_alive == 0:
        return JSONResponse(shapes.load_answer(req.kind, registry.resolve(req.model), await _unload(registry, req.model)))
    leased = time.perf_counter()

    async def prepare(served) -> jobs.Prepared | Response:
        load_s = time.perf_counter() - leased  # waiting for the model: its load, if it was not loaded
        if req.load_only:
            return JSONResponse(shapes.load_answer(req.kind, served.name, unloaded=False))
        job = await run_in_threadpool(oreq.build_job, req, served.model, served.name, served.engine.n_ctx)
        shaper = shapes.AnswerShaper(req.kind, served.name, started, load_s, job.tools,
                                     served.model.tokenizer if req.n_top is not None else None)
        return jobs.Prepared(job, req.stream, lambda j: _lines(j, shaper), lambda j: _whole(j, shaper))

    return await jobs.respond(request, registry.lease(req.model, req.keep_alive), prepare, "application/x-ndjson")


async def _unload(registry, name: str) -> bool:
    """Unloads `name` (once no request holds it); True when it is, or is about to be, not loaded."""
    resolved = registry.resolve(name)
    if await registry.unload(resolved):
        return True
    return not any(e.name == resolved and e.loaded for e in registry.entries())


def _line(obj) -> bytes:
    return json.dumps(obj).encode() + b"\n"


async def _lines(job: api.Job, shaper: shapes.AnswerShaper):
    n = 0
    try:
        async for _, chunk in jobs.choice_events(job.choices):
            n += len(chunk.tokens)
            for line in shaper.pieces(chunk.text, chunk.finish_reason is not None, chunk.logprobs):
                yield _line(line)
            if chunk.finish_reason:
                yield _line(shaper.last(chunk.finish_reason, job.request, n))
    except Cancelled:
        return  # cancelled elsewhere: the stream ends without its done line
    except Exception as e:  # the status line is sent: report it in the stream, as Ollama does
        yield _line({"error": f"generation failed: {e}"})


async def _whole(job: api.Job, shaper: shapes.AnswerShaper) -> dict:
    text, n, logprobs = [], 0, []
    try:
        async for _, chunk in jobs.choice_events(job.choices):
            text.append(chunk.text)
            logprobs.extend(chunk.logprobs or [])
            n += len(chunk.tokens)
            if chunk.finish_reason:
                return shaper.whole("".join(text), chunk.finish_reason, job.request, n, logprobs)
    except Cancelled:
        raise jobs.ClientGone() from None
    except Exception as e:
        raise oreq.OllamaError(500, f"generation failed: {e}") from None
    raise oreq.OllamaError(500, "generation ended without a finish")


# -- embeddings -----------------------------------------------------------------------------------
async def embed(request: Request) -> Response:
    return await _embeddings(request, legacy=False)


async def embeddings(request: Request) -> Response:
    return await _embeddings(request, legacy=True)


async def _embeddings(request: Request, legacy: bool) -> Response:
    started = time.perf_counter()
    req = oreq.parse_embed(await read_json(request), legacy)
    config = request.app.state.config
    leased = time.perf_counter()
    async with request.app.state.registry.lease(req.model, req.keep_alive) as served:
        load_s = time.perf_counter() - leased
        if req.openai is None:  # nothing to embed
            vectors, n_prompt = [], 0
        else:
            n_ctx = oreq.check_num_ctx(req.num_ctx, served.engine.n_ctx)
            try:
                job = await run_in_threadpool(embedding_api.parse_embeddings, req.openai, served.model, served.name,
                                              n_ctx, config.pooling)
            except api.ApiError as e:
                raise oreq.renamed(e, {"input": "prompt"} if legacy else {}) from None
            job.normalize = not legacy
            await jobs.unless_disconnected(request.receive, run_passes(job, served.model))
            vectors, n_prompt = job.vectors, sum(len(t) for t in job.token_lists)
    if legacy:
        return JSONResponse({"embedding": [float(x) for x in vectors[0]] if vectors else []})
    return JSONResponse(shapes.embed_answer(served.name, vectors, n_prompt, started, load_s))


# -- what is served -------------------------------------------------------------------------------
def _n_ctx(registry, name: str) -> int | None:
    return next((s.engine.n_ctx for s in registry.loaded() if s.name == name), None)


async def tags(request: Request) -> Response:
    registry = request.app.state.registry
    return JSONResponse({"models": await run_in_threadpool(lambda: [shapes.tags_entry(e) for e in registry.entries()])})


async def ps(request: Request) -> Response:
    registry = request.app.state.registry
    loaded = [e for e in registry.entries() if e.loaded]
    return JSONResponse({"models": await run_in_threadpool(
        lambda: [shapes.ps_entry(e, _n_ctx(registry, e.name)) for e in loaded])})


async def show(request: Request) -> Response:
    body = await read_json(request)
    registry = request.app.state.registry
    name = registry.resolve(oreq.model_name(body))
    entry = next(e for e in registry.entries() if e.name == name)
    if not entry.path:
        raise oreq.OllamaError(404, f"model '{name}' has no model file to describe")
    return JSONResponse(await run_in_threadpool(shapes.show, entry, _n_ctx(registry, name)))


async def version(request: Request) -> Response:
    return JSONResponse(shapes.version())
