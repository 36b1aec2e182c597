"""The server's own settings (what every route and limit reads); how each model's engine is set up
is batching.config.EngineConfig. The fields with a `flag` are `localinfer serve` options and Ray's
app builder arguments (batching/config.py)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..batching.config import flag


@dataclass
class ServerConfig:
    api_key: str | None = flag(None, "--api-key", type="str", envvar="LOCALINFER_API_KEY",
                               help="Require 'Authorization: Bearer KEY' (also from $LOCALINFER_API_KEY).")
    max_body: int = flag(4 << 20, "--max-body", low=1024,
                         help="Largest request body in bytes (413 beyond).")  # bytes of a request body
    body_timeout: float = 30.0  # seconds to receive a whole body, whatever its pace (408 beyond)
    # seconds for a request's headers, a write to block, and a kept-alive connection's idle time
    io_timeout: float = flag(30.0, "--timeout", type="float", low=0.5,
                             help="Seconds a client may stay silent (sending a request, or reading a stream).")
    shutdown_timeout: float = 10.0  # seconds running requests may finish on shutdown before they are cancelled
    verbose: bool = flag(False, "-v", "--verbose", type="bool", help="Log every HTTP request.")
    # /v1/embeddings: "mean", "last" or "cls"; None: the file's, else mean
    pooling: str | None = flag(None, "--pooling", type="choice", choices=("mean", "last", "cls"),
                               help="How /v1/embeddings pools the final hidden states (default: the file's "
                                    "pooling_type, else mean).")
    slot_save_path: str | None = flag(None, "--slot-save-path", type="path",
                                      help="Folder of llama-server's slot files (POST /slots/ID?action=save|restore).")
    created: int = field(default_factory=lambda: int(time.time()))
    # who may talk to a keyless server (origins.py): the address it listens on (None: unknown, e.g. mounted
    # in another app: loopback names only), more Host names ("*": any) and web origins ("*": any)
    host: str | None = "127.0.0.1"
    allowed_hosts: tuple[str, ...] = flag(
        (), "--allowed-hosts", type="list", envvar="LOCALINFER_ALLOWED_HOSTS", metavar="NAME,...",
        help="Host names a server without --api-key answers besides localhost, loopback addresses and "
             "--host ('*': any); others get 403 (a defence against DNS rebinding).")
    cors_origins: tuple[str, ...] = flag(
        (), "--cors-origins", type="list", envvar="LOCALINFER_ORIGINS", metavar="ORIGIN,...",
        help="Web origins (https://app.example, '*': any) whose pages may call a server without --api-key "
             "(also from $LOCALINFER_ORIGINS); others get 403. Its own page and localhost pages always may.")

    def __post_init__(self):
        self.cors_origins = tuple(o.rstrip("/") for o in self.cors_origins)  # https://a.example/ is an origin too
