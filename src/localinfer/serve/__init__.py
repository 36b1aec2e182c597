"""The OpenAI-compatible HTTP server over the batching engine, as an ASGI app: create_app (asgi.py:
routes; openai_routes.py: generation; jobs.py: the engine from the event loop; limits.py and
protocol.py: what one exchange may cost; prometheus.py: /metrics), api.py (request validation and
response shapes), registry.py (which models; pool.py: several, loaded on demand), app.py (served by
uvicorn).

The names below are imported on first use: `serve.config` (what the command line reads for its
options) then costs no Starlette, no numpy."""
from __future__ import annotations

import importlib

_EXPORTS = {"create_app": ".asgi", "ServerConfig": ".config", "ModelPool": ".pool"}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
