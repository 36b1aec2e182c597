"""Putting a server together: a loaded Model, an Engine over it, and the HTTP server."""
from __future__ import annotations

import threading

from ..batching.engine import Engine
from .http import Server, ServerConfig
from .registry import EngineOptions, start_engine


def make_server(model, model_name: str, host: str = "127.0.0.1", port: int = 8080, parallel: int = 4,
                ctx_size: int | None = None, max_queue: int = 64, prefix_cache_mib: int = 256,
                prefill_chunk: int = 512, prefix_cache_dir: str | None = None, prefix_cache_dir_mib: int = 4096,
                **config) -> Server:
    """A bound (not yet serving) server. ctx_size: tokens of each slot's context (prompt + answer),
    the model's n_ctx when None. prefix_cache_dir: a folder backing the prefix cache across restarts.
    config: ServerConfig fields (api_key, max_body, io_timeout ...)."""
    engine = start_engine(model, EngineOptions(parallel, ctx_size, max_queue, prefix_cache_mib, prefill_chunk,
                                               prefix_cache_dir, prefix_cache_dir_mib))
    try:
        return Server((host, port), model, engine, ServerConfig(model_name=model_name, **config))
    except BaseException:
        engine.close()
        raise


class BackgroundServer:
    """A server answering in a thread (tests, the load benchmark): `with BackgroundServer(...) as s:`."""

    def __init__(self, *args, **kwargs):
        self.server = make_server(*args, **kwargs)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1},
                                       name="localinfer-http", daemon=True)

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def engine(self) -> Engine:
        return self.server.engine

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.server.engine.close()
        self.thread.join(timeout=10)
