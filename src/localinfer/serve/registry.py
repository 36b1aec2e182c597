"""Which models a server answers for, and the (model, engine) pair a request runs on.

A route names the model its request asks for (None: the server's default) and holds a lease on it
while it runs: `async with registry.lease(name, keep_alive) as served: ...`. A registry that loads
models on demand (pool.py) loads one on its first lease and may unload it once no lease holds it
and its keep-alive has passed; StaticRegistry serves one model loaded up front and never unloads it
(`localinfer serve MODEL`). Listing (`entries`) is what /v1/models, Ollama's /api/tags and /api/ps
show.

A model file that cannot be served (not a GGUF, truncated, unreadable) is listed as unavailable
with the reason (ModelEntry.unavailable) and a request for it is a ModelUnavailableError: one bad
file in a folder costs only its own name, and neither says where the file or its link's target is.
"""
from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import AsyncIterator

from ..batching.engine import Engine


class UnknownModelError(LookupError):
    """The request names a model this server does not have (a 404 naming `model`)."""

    def __init__(self, name: str, available: list[str]):
        self.name, self.available = name, available
        super().__init__(f"the model '{name[:100]}' does not exist: this server serves "
                         + ", ".join(f"'{a}'" for a in available))


class ModelUnavailableError(RuntimeError):
    """The request names a model whose file cannot be loaded (a 503 naming the model and why)."""

    def __init__(self, name: str, reason: str):
        self.name, self.reason = name, reason
        super().__init__(f"the model '{name[:100]}' is unavailable: {reason}")


def file_error_reason(path: str | os.PathLike, error: BaseException) -> str:
    """What is wrong with a model file, for a client: the reader's message without the path it
    starts with (an absolute path, or where a symlink leads, is the server's business)."""
    from ..files.gguf_file import GGUFError
    if isinstance(error, GGUFError):
        text = str(error)
        for p in {os.fspath(path), os.path.realpath(path)}:
            text = text.removeprefix(f"{p}: ").replace(p, "the file")
        return text[:300]
    if isinstance(error, OSError):
        return f"the file cannot be read ({error.strerror or type(error).__name__})"
    return f"the file cannot be read ({type(error).__name__})"


def model_file_problem(path: str | os.PathLike) -> str | None:
    """Why the GGUF at `path` cannot be loaded (file_error_reason), or None when its header and
    tensor table read: what a load checks before it touches the weights."""
    from ..files.gguf_file import GGUFFile
    try:
        GGUFFile(path).close()
    except Exception as e:  # whatever a damaged file makes the reader raise: the file is at fault
        return file_error_reason(path, e)
    return None


@dataclass
class Served:
    """A loaded model and the engine that batches its requests."""
    name: str
    model: object  # localinfer.Model
    engine: Engine
    size_bytes: int = 0  # the GGUF file's size: what a memory budget counts
    loaded_at: float = field(default_factory=time.time)
    load_duration: float = 0.0  # seconds the load and engine start took (Ollama's load_duration)


@dataclass(frozen=True)
class ModelEntry:
    """One model a server can answer with, loaded or not."""
    name: str
    path: str | None
    size_bytes: int
    loaded: bool
    expires_at: float | None = None  # unix time an idle loaded model is unloaded; None: never (or not loaded)
    memory_bytes: int | None = None  # a loaded model's memory by the pool's count (/api/ps's size); None: not counted
    unavailable: str | None = None  # why its file cannot be loaded (file_error_reason); None: it can


class StaticRegistry:
    """One model, loaded before the server starts, kept until it closes."""

    def __init__(self, served: Served, path: str | None = None):
        self.served, self.path = served, path
        self.default_name = served.name

    def resolve(self, name: str | None) -> str:
        """The served name a request's `model` field means: with one model, any name means it, as
        llama-server ignores the field then (a client's `gpt-4o`, Ollama's `smollm2:latest`)."""
        return self.served.name

    @contextlib.asynccontextmanager
    async def lease(self, name: str | None, keep_alive: float | None = None) -> AsyncIterator[Served]:
        self.resolve(name)
        yield self.served

    def entries(self) -> list[ModelEntry]:
        return [ModelEntry(self.served.name, self.path, self.served.size_bytes, True)]

    def loaded(self) -> list[Served]:
        return [self.served]

    async def unload(self, name: str) -> bool:
        """Unloading the one model of a static server is refused (False): nothing could answer then."""
        self.resolve(name)
        return False

    def close(self) -> None:
        self.served.engine.close()
