"""Putting a server together: a loaded Model, an Engine over it, the ASGI app, and uvicorn.

    server = make_server(model, "smollm2", port=8080)   # bound, not serving yet: server.url is known
    server.serve_forever()                              # until SIGINT/SIGTERM: graceful shutdown
    with BackgroundServer(model, "smollm2", port=0) as s: ...   # in a thread (tests, benchmarks)
"""
from __future__ import annotations

import dataclasses
import logging
import socket
import threading

import uvicorn

from ..batching.engine import Engine
from .asgi import create_app
from .config import ServerConfig
from .protocol import BoundedHttpToolsProtocol


class LocalServer(uvicorn.Server):
    """uvicorn's Server over a socket bound up front, with the served model at hand."""

    def __init__(self, app, sock: socket.socket, on_stop=None):
        config: ServerConfig = app.state.config
        protocol = type("Protocol", (BoundedHttpToolsProtocol,), {"header_timeout": config.io_timeout})
        super().__init__(uvicorn.Config(
            app, http=protocol, lifespan="on", access_log=config.verbose,
            log_level=logging.INFO if config.verbose else logging.WARNING,
            timeout_keep_alive=max(1, round(config.io_timeout)),
            timeout_graceful_shutdown=config.shutdown_timeout, server_header=False,
            headers=[("server", "localinfer")]))
        self.app, self.socket, self.on_stop = app, sock, on_stop

    @property
    def url(self) -> str:
        host, port = self.socket.getsockname()[:2]
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    @property
    def registry(self):
        return self.app.state.registry

    @property
    def model(self):
        return self.registry.served.model

    @property
    def engine(self) -> Engine:
        return self.registry.served.engine

    def serve_forever(self) -> None:
        """Serves until SIGINT or SIGTERM (or should_exit): running requests get shutdown_timeout
        seconds to finish, then the app's lifespan closes the engine."""
        self.run(sockets=[self.socket])

    def handle_exit(self, sig, frame) -> None:
        if not self.should_exit and self.on_stop is not None:
            self.on_stop()
        super().handle_exit(sig, frame)


def make_server(model, model_name: str, host: str = "127.0.0.1", port: int = 8080, on_stop=None,
                config: ServerConfig | None = None, **options) -> LocalServer:
    """A bound (not yet serving) server of one loaded Model. options: EngineConfig fields (n_slots,
    n_ctx: each slot's context, the model's when None, max_queue, prefix_cache_bytes, prefix_cache_dir
    ...) or `engine=` an EngineConfig, and ServerConfig fields (api_key, max_body, io_timeout ...)
    unless `config` is given. on_stop: called when a signal starts the shutdown."""
    config, options = _with_host(config, options, host)
    return _bind(host, port, on_stop, lambda: create_app(model, config, model_name=model_name, **options))


def make_registry_server(registry, host: str = "127.0.0.1", port: int = 8080, on_stop=None,
                         config: ServerConfig | None = None, **options) -> LocalServer:
    """A bound (not yet serving) server of a registry's models: a pool.ModelPool (`serve --models`)
    loads them on demand. config / options: ServerConfig, or its fields, as make_server's."""
    config, options = _with_host(config, options, host)
    return _bind(host, port, on_stop, lambda: create_app(registry, config, **options))


def _with_host(config: ServerConfig | None, options: dict, host: str) -> tuple[ServerConfig | None, dict]:
    """The server config knows the address it listens on (origins.py): set it in whichever is given."""
    if config is not None:
        return dataclasses.replace(config, host=host), options
    return None, {**options, "host": host}


def _bind(host: str, port: int, on_stop, make_app) -> LocalServer:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, backlog=2048)  # OSError when the address is taken
    try:
        app = make_app()
    except BaseException:
        sock.close()
        raise
    return LocalServer(app, sock, on_stop)


class BackgroundServer:
    """A server answering in a thread (tests, the load benchmark): `with BackgroundServer(...) as s:`
    takes make_server's arguments, or a LocalServer already made (make_registry_server's)."""

    def __init__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and isinstance(args[0], LocalServer):
            self.server = args[0]
        else:
            self.server = make_server(*args, **kwargs)
        self.thread = threading.Thread(target=self.server.serve_forever, name="localinfer-http", daemon=True)

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def engine(self) -> Engine:
        return self.server.engine

    def __enter__(self):
        self.thread.start()
        while not self.server.started:  # the lifespan has run; the socket was listening already
            if not self.thread.is_alive():
                raise RuntimeError("the server stopped while starting")
            self.thread.join(0.01)
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        """Stops serving (graceful: running requests get shutdown_timeout seconds) and closes the engine."""
        if self.thread.is_alive():
            self.server.should_exit = True
            self.thread.join(timeout=60)
        else:  # never started: nothing ran the lifespan
            self.server.registry.close()
        self.server.socket.close()
