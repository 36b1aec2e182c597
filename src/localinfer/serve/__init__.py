"""Serving many users: a batched engine (engine.py) with a prefix cache (prefix_cache.py),
and an OpenAI-compatible HTTP server over it (api.py shapes and validation, http.py routes,
sse.py streaming, metrics.py Prometheus text)."""
from .engine import Engine, QueueFullError
from .request import Request, SamplingParams

__all__ = ["Engine", "QueueFullError", "Request", "SamplingParams"]
