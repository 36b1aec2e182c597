"""How every route runs its handler: behind the API key, with each failure an answer in
OpenAI's shape (the Ollama routes reshape these into theirs)."""
from __future__ import annotations

import hmac
import logging

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from . import api
from .jobs import ClientGone
from .pool import MemoryBudgetError, ModelBusyError
from .registry import ModelUnavailableError, UnknownModelError

log = logging.getLogger("localinfer.serve")


def error_response(e: api.ApiError) -> JSONResponse:
    return JSONResponse(e.body(), e.status, headers=e.headers)



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
        except ModelBusyError as e:  # the memory budget is held by models in use: later it may fit
            return error_response(api.ApiError(503, str(e), "server_error", param="model", code="model_busy",
                                               headers={"Retry-After": str(e.retry_after)}))
        except MemoryBudgetError as e:  # the model alone is larger than --max-memory: it never fits
            return error_response(api.ApiError(507, str(e), "server_error", param="model", code="model_too_large"))
        except ModelUnavailableError as e:  # its file cannot be loaded: the others still can
            return error_response(api.ApiError(503, str(e), "server_error", param="model", code="model_unavailable"))
        except ClientGone:
            return Response(status_code=204)  # nobody reads it: the connection is gone
        except Exception as e:
            log.exception("internal error")
            return error_response(api.ApiError(500, f"internal error: {type(e).__name__}: {e}", "server_error"))
    return run
