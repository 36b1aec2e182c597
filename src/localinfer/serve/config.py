"""The server's own settings (what every route and limit reads); how each model's engine is set up
is registry.EngineOptions."""
from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class ServerConfig:
    api_key: str | None = None
    max_body: int = 4 << 20  # bytes of a request body (413 beyond)
    body_timeout: float = 30.0  # seconds to receive a whole body, whatever its pace (408 beyond)
    io_timeout: float = 30.0  # seconds for a request's headers, a write to block, and a kept-alive connection's idle time
    shutdown_timeout: float = 10.0  # seconds running requests may finish on shutdown before they are cancelled
    verbose: bool = False  # log every request
    pooling: str | None = None  # /v1/embeddings: "mean", "last" or "cls"; None: the file's, else mean
    created: int = field(default_factory=lambda: int(time.time()))
    # who may talk to a keyless server (origins.py): the address it listens on (None: unknown, e.g. mounted
    # in another app: loopback names only), more Host names ("*": any) and web origins ("*": any)
    host: str | None = "127.0.0.1"
    allowed_hosts: tuple[str, ...] = ()
    cors_origins: tuple[str, ...] = ()
