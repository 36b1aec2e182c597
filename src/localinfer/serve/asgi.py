"""The server as an ASGI application (Starlette): `create_app(model_or_registry)`, served by uvicorn
(app.py) or mounted in another ASGI app (`outer.mount("/llm", create_app(model))`).

Starlette rather than FastAPI: api.py already checks every field of a request and answers a 400
that names the parameter, so FastAPI's pydantic models would add a dependency and a second,
differently worded validation without use. A plain ASGI app is also what Ray Serve takes as a
deployment's ingress (`@serve.ingress(app)`).

Routes (each also without the /v1 prefix, as llama-server answers):
    GET  /health /metrics /v1/models /v1/models/{name} /props, and the chat page at / (webui.py)
    POST /v1/chat/completions /v1/embeddings (openai_routes.py)
    POST /v1/rerank /v1/reranking (llamacpp_routes.py, rerank.py: llama-server's, Jina's, Cohere's shape)
and as llama-server has them:
    POST /v1/completions (OpenAI's); /completion and /completions (llama-server's native route,
         llamacpp_completion.py); /tokenize /detokenize /apply-template (llamacpp_routes.py)
Every route but /health and the page's files needs the API key when one is set; without one, only
the server's own Host names and web origins are answered (origins.py). Errors are in OpenAI's
shape, 404 and 405 included.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..batching.config import EngineConfig, start_engine
from . import api, llamacpp_completion, llamacpp_routes, ollama_routes, openai_routes, webui
from .endpoint import endpoint, error_response
from .config import ServerConfig
from .limits import BodyLimits
from .origins import OriginGuard
from .prometheus import exposition, metrics_registry
from .registry import Served, StaticRegistry


def create_app(registry_or_model, config: ServerConfig | None = None, *, engine: EngineConfig | None = None,
               model_name: str | None = None, **options: Any) -> Starlette:
    """The ASGI app serving a registry of models (registry.py), or one loaded Model.

    With a Model: model_name (default: the file's stem), and `engine` (an EngineConfig) or its
    fields among `options` (n_slots, n_ctx, max_queue, ...): its engine starts now. The other options
    are ServerConfig fields, when `config` is not given. The app's lifespan closes the registry on
    shutdown; an app that mounts this one closes `app.state.registry` in its own lifespan."""
    engine_fields = {f.name for f in dataclasses.fields(EngineConfig)}
    engine_options = {k: options.pop(k) for k in list(options) if k in engine_fields}
    if engine is not None and engine_options:
        raise TypeError(f"options {sorted(engine_options)} given beside an EngineConfig")
    if config is None:
        config = ServerConfig(**options)
    elif options:
        raise TypeError(f"options {sorted(options)} given beside a ServerConfig")
    if hasattr(registry_or_model, "lease"):
        if engine_options or engine is not None or model_name:
            raise TypeError("model_name and engine options are for a Model; a registry has its own")
        registry = registry_or_model
    else:
        registry = _static_registry(registry_or_model, model_name, engine or EngineConfig(**engine_options))

    @contextlib.asynccontextmanager
    async def lifespan(app):
        try:
            yield
        finally:  # off the loop: closing an engine waits for its thread's step
            await asyncio.get_running_loop().run_in_executor(None, registry.close)

    app = Starlette(routes=_routes() + ollama_routes.routes(), lifespan=lifespan,
                    exception_handlers={HTTPException: _http_error, api.ApiError: _api_error},
                    middleware=[Middleware(BodyLimits, max_body=config.max_body, body_timeout=config.body_timeout,
                                           io_timeout=config.io_timeout),
                                # inside BodyLimits: a refusal sent before the body closes the connection
                                Middleware(OriginGuard, config=config)])
    app.state.registry, app.state.config = registry, config
    app.state.metrics = metrics_registry(registry)
    return app


def _static_registry(model, model_name: str | None, options: EngineConfig) -> StaticRegistry:
    path = getattr(model, "path", None)
    name = model_name or (os.path.splitext(os.path.basename(path))[0] if path else "default")
    served = Served(name, model, start_engine(model, options),
                    size_bytes=os.path.getsize(path) if path and os.path.exists(path) else 0)
    return StaticRegistry(served, path)


# -- plumbing ---------------------------------------------------------------------------------------
async def _api_error(request: Request, e: api.ApiError) -> JSONResponse:
    return error_response(e)


async def _http_error(request: Request, e: HTTPException) -> JSONResponse:
    """Starlette's routing errors (no such route, wrong method) in OpenAI's shape."""
    where = f"{request.method} {request.url.path[:200]}"
    if e.status_code == 404:
        return error_response(api.ApiError(404, f"no route {where}", code="not_found"))
    if e.status_code == 405:
        allowed = (e.headers or {}).get("Allow", "")
        return error_response(api.ApiError(405, f"{request.url.path[:200]} takes {allowed}, not {request.method}",
                                           headers={"Allow": allowed}))
    return error_response(api.ApiError(e.status_code, e.detail))


# -- the routes that are not the OpenAI API's generation ------------------------------------------------
async def health(request: Request) -> Response:
    registry = request.app.state.registry
    state = {"status": "ok"}
    default = getattr(registry, "default_name", None)
    for served in registry.loaded():
        if served.name == default or default is None:
            state.update(served.engine.state())
            break
    return JSONResponse(state)


async def metrics(request: Request) -> Response:
    return Response(exposition(request.app.state.metrics), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def models(request: Request) -> Response:
    """OpenAI's model list, each card with whether it is loaded now and its file's size beside
    (a server of several models loads them on demand: serve/pool.py)."""
    created = request.app.state.config.created
    return JSONResponse({"object": "list", "data": [_card(e, created) for e in request.app.state.registry.entries()]})


async def model(request: Request) -> Response:
    registry = request.app.state.registry
    name = registry.resolve(request.path_params["name"])
    entry = next(e for e in registry.entries() if e.name == name)
    return JSONResponse(_card(entry, request.app.state.config.created))


def _card(entry, created: int) -> dict:
    status = {"loaded": entry.loaded, "expires_at": entry.expires_at, "available": entry.unavailable is None}
    if entry.unavailable:  # a file that cannot be loaded: why (never where it is)
        status["error"] = entry.unavailable
    return {**api.model_card(entry.name, created), "size": entry.size_bytes, "status": status}


async def props(request: Request) -> Response:
    async with request.app.state.registry.lease(None) as served:
        return JSONResponse(llamacpp_routes.props_json(served.name, served.model, served.engine.n_ctx,
                                                       len(served.engine.slots)))


def page(path: str):
    async def serve_file(request: Request) -> Response:
        f = webui.page_file(path)
        headers = {"ETag": f.etag, **webui.HEADERS}
        if request.headers.get("if-none-match") == f.etag:
            return Response(status_code=304, headers=headers)
        return Response(f.body, headers={"Content-Type": f.content_type, **headers})
    return serve_file


def _routes() -> list[Route]:
    api_routes = [("/health", health, ["GET"], True), ("/metrics", metrics, ["GET"], False),
                  ("/models", models, ["GET"], False), ("/models/{name:path}", model, ["GET"], False),
                  ("/props", props, ["GET"], False),
                  ("/chat/completions", openai_routes.chat, ["POST"], False),
                  ("/chat/completions/input_tokens", llamacpp_routes.input_tokens, ["POST"], False),

                  ("/embeddings", openai_routes.embeddings, ["POST"], False),
                  ("/rerank", llamacpp_routes.rerank, ["POST"], False),
                  ("/reranking", llamacpp_routes.rerank, ["POST"], False)]
    routes = [Route(prefix + path, endpoint(handler, public), methods=methods)
              for path, handler, methods, public in api_routes for prefix in ("/v1", "")]
    # as llama-server: /v1/completions is OpenAI's, the un-prefixed /completions its native route
    routes.append(Route("/v1/completions", endpoint(openai_routes.completions), methods=["POST"]))
    # llama-server's own routes, un-prefixed as it serves them
    routes += [Route(path, endpoint(handler), methods=["POST"]) for path, handler in (
        ("/completion", llamacpp_completion.completion), ("/completions", llamacpp_completion.completion),
        ("/infill", llamacpp_completion.infill),
        ("/tokenize", llamacpp_routes.tokenize), ("/detokenize", llamacpp_routes.detokenize),
        ("/apply-template", llamacpp_routes.apply_template))]
    routes.append(Route("/slots", endpoint(llamacpp_routes.slots), methods=["GET"]))
    routes.append(Route("/slots/{id_slot}", endpoint(llamacpp_routes.slot_action), methods=["POST"]))
    # the page asks for the key itself, through the API
    routes += [Route(path or "/", endpoint(page(path), public=True), methods=["GET"]) for path in webui.PAGE_FILES]
    return routes
