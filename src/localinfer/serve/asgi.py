"""The server as an ASGI application (Starlette): `create_app(model_or_registry)`, served by uvicorn
(app.py) or mounted in another ASGI app (`outer.mount("/llm", create_app(model))`).

Starlette rather than FastAPI: api.py already checks every field of a request and answers a 400
that names the parameter, so FastAPI's pydantic models would add a dependency and a second,
differently worded validation without use. A plain ASGI app is also what Ray Serve takes as a
deployment's ingress (`@serve.ingress(app)`).

Routes (each also without the /v1 prefix, as llama-server answers):
    GET  /health /metrics /v1/models /v1/models/{name} /props, and the chat page at / (webui.py)
    POST /v1/chat/completions /v1/completions /v1/embeddings (openai_routes.py)
Every route but /health and the page's files needs the API key when one is set. Errors are in
OpenAI's shape, 404 and 405 included.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import logging
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from . import api, openai_routes, webui
from .config import ServerConfig
from .jobs import ClientGone
from .limits import BodyLimits
from .prometheus import exposition, metrics_registry
from .registry import EngineOptions, Served, StaticRegistry, UnknownModelError, start_engine

log = logging.getLogger("localinfer.serve")


def create_app(registry_or_model, config: ServerConfig | None = None, **options: Any) -> Starlette:
    """The ASGI app serving a registry of models (registry.py), or one loaded Model.

    With a Model, `options` may hold `model_name` (default: the file's stem) and EngineOptions
    fields (parallel, ctx_size, max_queue, ...): its engine starts now. Other options are
    ServerConfig fields, when `config` is not given. The app's lifespan closes the registry on
    shutdown; an app that mounts this one closes `app.state.registry` in its own lifespan."""
    engine_fields = {f.name for f in dataclasses.fields(EngineOptions)}
    engine_options = {k: options.pop(k) for k in list(options) if k in engine_fields}
    model_name = options.pop("model_name", None)
    if config is None:
        config = ServerConfig(**options)
    elif options:
        raise TypeError(f"options {sorted(options)} given beside a ServerConfig")
    if hasattr(registry_or_model, "lease"):
        if engine_options or model_name:
            raise TypeError("model_name and engine options are for a Model; a registry has its own")
        registry = registry_or_model
    else:
        registry = _static_registry(registry_or_model, model_name, EngineOptions(**engine_options))

    @contextlib.asynccontextmanager
    async def lifespan(app):
        try:
            yield
        finally:  # off the loop: closing an engine waits for its thread's step
            await asyncio.get_running_loop().run_in_executor(None, registry.close)

    app = Starlette(routes=_routes(), lifespan=lifespan,
                    exception_handlers={HTTPException: _http_error, api.ApiError: _api_error},
                    middleware=[Middleware(BodyLimits, max_body=config.max_body, body_timeout=config.body_timeout,
                                           io_timeout=config.io_timeout)])
    app.state.registry, app.state.config = registry, config
    app.state.metrics = metrics_registry(registry)
    return app


def _static_registry(model, model_name: str | None, options: EngineOptions) -> StaticRegistry:
    import os
    path = getattr(model, "path", None)
    name = model_name or (os.path.splitext(os.path.basename(path))[0] if path else "default")
    served = Served(name, model, start_engine(model, options),
                    size_bytes=os.path.getsize(path) if path and os.path.exists(path) else 0)
    return StaticRegistry(served, path)


# -- plumbing ---------------------------------------------------------------------------------------
def error_response(e: api.ApiError) -> JSONResponse:
    return JSONResponse(e.body(), e.status, headers=e.headers)


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


def authorized(request: Request) -> bool:
    key = request.app.state.config.api_key
    if not key:
        return True
    got = request.headers.get("authorization", "")
    return hmac.compare_digest(got.encode(), f"Bearer {key}".encode())


def endpoint(handler, public: bool = False):
    """handler(request) -> Response, behind the API key (unless public), with every failure an
    answer in OpenAI's shape: a bug costs one request, never the server."""
    async def run(request: Request) -> Response:
        try:
            if not public and not authorized(request):
                raise api.ApiError(401, "a valid API key is required (Authorization: Bearer ...)",
                                   code="invalid_api_key")
            return await handler(request)
        except api.ApiError as e:
            return error_response(e)
        except UnknownModelError as e:
            return error_response(api.ApiError(404, str(e), param="model", code="model_not_found"))
        except ClientGone:
            return Response(status_code=204)  # nobody reads it: the connection is gone
        except Exception as e:
            log.exception("internal error")
            return error_response(api.ApiError(500, f"internal error: {type(e).__name__}: {e}", "server_error"))
    return run


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
    created = request.app.state.config.created
    return JSONResponse({"object": "list", "data": [api.model_card(e.name, created)
                                                   for e in request.app.state.registry.entries()]})


async def model(request: Request) -> Response:
    name = request.app.state.registry.resolve(request.path_params["name"])
    return JSONResponse(api.model_card(name, request.app.state.config.created))


async def props(request: Request) -> Response:
    async with request.app.state.registry.lease(None) as served:
        return JSONResponse(webui.props(served.name, served.engine.n_ctx, len(served.engine.slots)))


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
                  ("/completions", openai_routes.completions, ["POST"], False),
                  ("/embeddings", openai_routes.embeddings, ["POST"], False)]
    routes = [Route(prefix + path, endpoint(handler, public), methods=methods)
              for path, handler, methods, public in api_routes for prefix in ("/v1", "")]
    # the page asks for the key itself, through the API
    routes += [Route(path or "/", endpoint(page(path), public=True), methods=["GET"]) for path in webui.PAGE_FILES]
    return routes
