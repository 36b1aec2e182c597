"""The OpenAI-compatible HTTP server over the batching engine, as an ASGI app: create_app (asgi.py:
routes; openai_routes.py: generation; jobs.py: the engine from the event loop; limits.py and
protocol.py: what one exchange may cost; prometheus.py: /metrics), api.py (request validation and
response shapes), registry.py (which models), app.py (served by uvicorn)."""
from .asgi import create_app
from .config import ServerConfig

__all__ = ["create_app", "ServerConfig"]
