"""Several models served by name: each loaded on its first request, kept for a keep-alive time
after its last one, and unloaded least-recently-used first when a memory budget needs the room.

`ModelPool` implements the registry interface the routes use (registry.py):

    async with pool.lease("gemma3", keep_alive=30) as served:   # loads gemma3 if it is not loaded
        served.engine.submit(...)

Keep-alive is Ollama's: once the last lease on a model is released the model stays loaded for
its keep-alive, then it is unloaded (engine and model closed, the memory given back). A request's
`keep_alive` becomes its model's from then on; a request without one leaves it as it is, and a
model loaded by such a request starts with the pool's default (Ollama's scheduler: useLoadedRunner
and load). Negative keeps the model loaded for good, 0 unloads it as soon as no lease holds it. A
model is never unloaded under a lease.

Memory: a loaded model counts its file (the weights, mapped or copied by the C backend) plus what
its engine may allocate: one KV cache of n_ctx positions per slot and the prefix cache's budget.
Before a load (memory_estimate) the KV caches are counted from the file's metadata as if every
layer kept every position in f16, an upper bound (sliding-window layers and quantized caches hold
less); after it, from the caches the model's runtime actually makes.

Each file is checked (its GGUF header and tensor table read) when the pool is made and again
before each load: a file that fails is listed as unavailable with the reason, and its leases raise
ModelUnavailableError, while the other models are served as usual. A file mended in place is
served again from its next load.

The pool belongs to one event loop: its state is changed only there, loads and unloads run in
threads so the loop keeps serving the other models meanwhile.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator, Callable, Mapping

from ..batching.config import EngineConfig, start_engine
from .registry import ModelEntry, ModelUnavailableError, Served, UnknownModelError, model_file_problem
from .units import parse_duration, parse_size

log = logging.getLogger(__name__)

DEFAULT_KEEP_ALIVE = 300.0  # seconds: Ollama's default, 5m


class DuplicateModelNameError(ValueError):
    """Two sources give a model the same name (two files with one stem, or a name given twice)."""


class PoolClosedError(RuntimeError):
    """The pool was closed (the server is stopping): no more leases."""


class MemoryBudgetError(RuntimeError):
    """A model cannot be loaded within max_memory."""


class ModelBusyError(MemoryBudgetError):
    """The model would fit, but the memory is held by models that requests are using right now:
    the request may succeed later. Routes answer 503 with a Retry-After of `retry_after` seconds."""
    retry_after = 5


class ModelTooLargeError(MemoryBudgetError):
    """The model alone needs more than max_memory: no wait helps. Routes answer 507 (Insufficient
    Storage): the request is well formed, the server cannot hold what it asks for."""


def model_sources(sources, resolve: Callable[[str], Path] | None = None) -> dict[str, Path]:
    """name -> GGUF path from what `serve --models` accepts: catalog names (fetched by `resolve`,
    fetch.resolve_model by default), .gguf paths (named by file stem) and directories (each .gguf
    in them, by stem). A mapping is taken as name -> path. Names must be unique."""
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    if isinstance(sources, Mapping):
        pairs = [(str(name), Path(path)) for name, path in sources.items()]
    else:
        pairs = []
        for source in sources:
            path = Path(source).expanduser()
            if path.is_dir():
                found = sorted(p for p in path.iterdir() if p.suffix == ".gguf" and p.is_file())
                if not found:
                    raise FileNotFoundError(f"the folder {path} has no .gguf file")
                pairs += [(p.stem, p) for p in found]
            elif path.is_file():
                pairs.append((path.stem, path))
            else:
                if resolve is None:
                    from ..files.fetch import resolve_model as resolve
                pairs.append((str(source), Path(resolve(str(source)))))
    out: dict[str, Path] = {}
    for name, path in pairs:
        if name in out:
            raise DuplicateModelNameError(f"two models are named '{name}': {out[name]} and {path}; "
                                          "serve them from different folders or rename one")
        out[name] = path
    if not out:
        raise ValueError("no models to serve")
    return out


def memory_estimate(path: str | os.PathLike, options: EngineConfig) -> int:
    """Bytes a model would hold once loaded, from its file alone (an upper bound: see the module)."""
    from ..arch.hparams import HParams
    from ..files.gguf_file import GGUFFile
    from ..model import DEFAULT_N_CTX
    f = GGUFFile(path)
    try:
        hp = HParams(f)
        n_layer = hp.count("block_count")
        n_head = hp.count("attention.head_count")
        n_head_kv = hp.head_count_kv(n_head)
        k_dim = hp.head_dim(hp.count("embedding_length"), n_head)
        v_dim = hp.count("attention.value_length", k_dim)
        n_ctx = options.n_ctx or min(DEFAULT_N_CTX, hp.count("context_length", DEFAULT_N_CTX))
    finally:
        f.close()
    kv_per_slot = n_ctx * n_layer * n_head_kv * (k_dim + v_dim) * 2  # f16 keys and values
    return Path(path).stat().st_size + options.n_slots * kv_per_slot + options.prefix_cache_bytes


def _loaded_memory(model, engine, path: Path, options: EngineConfig) -> int:
    """What a loaded model holds, its KV caches counted from the cache the runtime makes (pages of
    an anonymous mapping, so building one to measure it touches no memory)."""
    one_cache = model.runtime.new_cache(engine.n_ctx, model.kv_dtype).nbytes
    return path.stat().st_size + options.n_slots * one_cache + options.prefix_cache_bytes


def _default_load(path: Path):
    from ..model import Model
    return Model(path)


@dataclass(eq=False)
class _Entry:
    """One servable model and its state; changed on the pool's event loop only."""
    name: str
    path: Path
    size_bytes: int
    keep_alive: float
    served: Served | None = None
    estimate: int | None = None  # memory_estimate, computed once when a budget needs it
    reserved: int = 0  # bytes this model holds (or is being loaded into) under the budget
    leases: int = 0  # requests holding it, and requests waiting for its load
    loading: asyncio.Task | None = None
    unloading: asyncio.Task | None = None
    timer: asyncio.TimerHandle | None = None
    expires_at: float | None = None  # unix time its keep-alive ends; None while leased or kept for good
    last_used: float = 0.0  # time.monotonic() of its last lease's start or end: least recently used goes first
    unavailable: str | None = None  # why the file failed its last check (model_file_problem); None: it passed


class ModelPool:
    """Models loaded on demand under keep-alive and a memory budget (see the module docstring).

    sources: see model_sources. engine_options: each model's engine (slots, context, queue).
    keep_alive: the default, seconds or a duration ("5m"; negative: forever). max_memory: bytes or
    a size ("2GiB"); None: no budget. load: path -> localinfer.Model (the CLI passes its thread
    and cache-type options); the engine is started with batching.config.start_engine."""

    def __init__(self, sources, engine_options: EngineConfig | None = None, keep_alive=DEFAULT_KEEP_ALIVE,
                 max_memory=None, load: Callable[[Path], object] | None = None):
        self.options = engine_options or EngineConfig()
        self.keep_alive = parse_duration(keep_alive, "keep_alive")
        self.max_memory = None if max_memory is None else parse_size(max_memory, "max_memory")
        self._load = load or _default_load
        self._entries = {name: _Entry(name, path, path.stat().st_size, self.keep_alive)
                         for name, path in model_sources(sources).items()}
        for entry in self._entries.values():
            _note_problem(entry, model_file_problem(entry.path))
        self.default_name = next(iter(self._entries))
        self._closed = False
        # close() may run on another thread than the loop (an app's lifespan hands it to an executor):
        # a load that ends meanwhile either hands its model to close() or closes it itself
        self._closing = threading.Lock()

    # -- the registry interface ------------------------------------------------------------------
    def resolve(self, name: str | None) -> str:
        """The served name a request's `model` means: None and "default" are the first model; an
        Ollama tag ":latest" is the model itself (Ollama clients add it)."""
        if name is None or name == "default":
            return self.default_name
        if name in self._entries:
            return name
        if name.endswith(":latest") and name[:-len(":latest")] in self._entries:
            return name[:-len(":latest")]
        raise UnknownModelError(name, list(self._entries))

    @contextlib.asynccontextmanager
    async def lease(self, name: str | None, keep_alive=None) -> AsyncIterator[Served]:
        """The model `name`, loaded (waiting for its load if needed), held until the block ends.
        keep_alive: this request's (seconds or a duration), which the model keeps from now on; None
        leaves the model's as it is (the pool's default if it is not loaded). Raises
        UnknownModelError, DurationError, MemoryBudgetError, PoolClosedError, or what loading the
        model raised."""
        entry = self._entries[self.resolve(name)]
        ttl = None if keep_alive is None else parse_duration(keep_alive, "keep_alive")
        if self._closed:
            raise PoolClosedError("the server is shutting down")
        if ttl is not None:
            entry.keep_alive = ttl
        elif entry.served is None and entry.loading is None:  # this request loads it: the default
            entry.keep_alive = self.keep_alive
        entry.leases += 1
        self._cancel_expiry(entry)
        try:
            served = await self._loaded(entry)
            entry.last_used = time.monotonic()
            yield served
        finally:
            entry.leases -= 1
            entry.last_used = time.monotonic()
            if entry.leases == 0:
                self._idle(entry)

    def entries(self) -> list[ModelEntry]:
        return [ModelEntry(e.name, str(e.path), e.size_bytes, e.served is not None,
                           e.expires_at if e.served is not None else None,
                           e.reserved if e.served is not None else None, e.unavailable)
                for e in self._entries.values()]

    def loaded(self) -> list[Served]:
        return [e.served for e in self._entries.values() if e.served is not None]

    def memory_in_use(self) -> int:
        """Bytes the loaded (and loading) models hold under the budget's accounting."""
        return sum(e.reserved for e in self._entries.values())

    async def unload(self, name: str) -> bool:
        """Unloads the model now if no request holds it; if one does, when the last one ends (its
        keep-alive becomes 0). False when it was not loaded."""
        entry = self._entries[self.resolve(name)]
        if entry.served is None:
            return False
        if entry.leases:
            entry.keep_alive = 0.0
            return True
        await asyncio.shield(self._start_unload(entry))
        return True

    async def settle(self) -> None:
        """Waits for the loads and unloads in flight (their errors are the leases'), e.g. to measure
        memory after an unload."""
        while busy := [t for e in self._entries.values() for t in (e.loading, e.unloading) if t is not None]:
            await asyncio.gather(*(asyncio.shield(t) for t in busy), return_exceptions=True)

    def close(self) -> None:
        """Closes every loaded model (the server is stopping); a load still running closes its
        model when it ends. Blocks while the engines stop; may be called from any thread."""
        with self._closing:
            self._closed = True
            taken = []
            for entry in self._entries.values():
                self._cancel_expiry(entry)
                taken.append(entry.served)
                entry.served, entry.reserved = None, 0
        for served in taken:
            if served is not None:
                _close_served(served)

    # -- loading ---------------------------------------------------------------------------------
    async def _loaded(self, entry: _Entry) -> Served:
        while True:
            if entry.unloading is not None:  # let it finish, then load again
                await asyncio.shield(entry.unloading)
                continue
            if entry.served is not None:
                return entry.served
            if entry.loading is None:
                entry.loading = asyncio.ensure_future(self._load_entry(entry))
                entry.loading.add_done_callback(_retrieve)
            await asyncio.shield(entry.loading)  # one load, however many wait; its error is theirs

    async def _load_entry(self, entry: _Entry) -> None:
        try:
            _note_problem(entry, await asyncio.to_thread(model_file_problem, entry.path))
            if entry.unavailable:
                raise ModelUnavailableError(entry.name, entry.unavailable)
            if self.max_memory is not None:
                if entry.estimate is None:
                    entry.estimate = await asyncio.to_thread(memory_estimate, entry.path, self.options)
                self._make_room(entry)
            else:
                entry.reserved = 0
            pending = [e.unloading for e in self._entries.values() if e.unloading is not None]
            if pending:  # their memory is counted as free already: let it be
                await asyncio.gather(*(asyncio.shield(t) for t in pending))
            started = time.perf_counter()
            served, memory = await asyncio.to_thread(self._load_and_start, entry)
            served.load_duration = time.perf_counter() - started
            with self._closing:
                closed = self._closed
                if not closed:
                    entry.served, entry.reserved = served, memory
            if closed:
                await asyncio.to_thread(_close_served, served)
                raise PoolClosedError("the server is shutting down")
            entry.last_used = time.monotonic()
            log.info("loaded '%s' in %.2f s (%.0f MiB counted)", entry.name, served.load_duration, memory / 2**20)
        except BaseException:
            entry.reserved = 0
            raise
        finally:
            entry.loading = None
        if entry.leases == 0:  # everyone waiting gave up (disconnected): the keep-alive still applies
            self._idle(entry)

    def _make_room(self, entry: _Entry) -> None:
        """Reserves entry.estimate bytes, unloading idle models least recently used first; raises
        ModelTooLargeError or ModelBusyError (and unloads nothing) when that cannot be done."""
        need, budget = entry.estimate, self.max_memory
        if need > budget:
            raise ModelTooLargeError(f"the model '{entry.name}' needs about {_mib(need)} (its file and its "
                                     f"engine's caches), more than the server's memory budget ({_mib(budget)})")
        used = self.memory_in_use()
        idle = sorted((e for e in self._entries.values() if e is not entry and e.served is not None
                       and e.leases == 0 and e.unloading is None), key=lambda e: e.last_used)
        victims = []
        while used + need > budget and idle:
            victims.append(idle.pop(0))
            used -= victims[-1].reserved
        if used + need > budget:
            busy = ", ".join(f"'{e.name}'" for e in self._entries.values() if e.reserved and e not in victims)
            raise ModelBusyError(f"the model '{entry.name}' needs about {_mib(need)} and the memory budget "
                                 f"({_mib(budget)}) is held by models in use ({busy}); try again shortly")
        for victim in victims:
            log.info("unloading '%s' to make room for '%s'", victim.name, entry.name)
            self._start_unload(victim)
        entry.reserved = need

    def _load_and_start(self, entry: _Entry) -> tuple[Served, int]:
        """In a worker thread: the model and its running engine."""
        model = self._load(entry.path)
        try:
            engine = start_engine(model, self.options)
        except BaseException:
            model.close()
            raise
        try:
            memory = _loaded_memory(model, engine, entry.path, self.options)
        except BaseException:
            _close_served(Served(entry.name, model, engine))
            raise
        return Served(entry.name, model, engine, entry.size_bytes), memory

    # -- keep-alive and unloading ----------------------------------------------------------------
    def _idle(self, entry: _Entry) -> None:
        """No lease holds the loaded model any more: start its keep-alive."""
        if entry.served is None or entry.unloading is not None or self._closed:
            return
        self._cancel_expiry(entry)
        if entry.keep_alive < 0:
            return
        if entry.keep_alive == 0:
            self._start_unload(entry)
            return
        entry.expires_at = time.time() + entry.keep_alive
        entry.timer = asyncio.get_running_loop().call_later(entry.keep_alive, self._expire, entry)

    def _expire(self, entry: _Entry) -> None:
        entry.timer = None
        if entry.leases == 0 and entry.served is not None and entry.unloading is None:
            log.info("unloading '%s': idle for its keep-alive (%g s)", entry.name, entry.keep_alive)
            self._start_unload(entry)

    def _cancel_expiry(self, entry: _Entry) -> None:
        if entry.timer is not None:
            entry.timer.cancel()
        entry.timer, entry.expires_at = None, None

    def _start_unload(self, entry: _Entry) -> asyncio.Task:
        """Takes the model out of service now and closes it in a thread. Its memory counts as
        free at once; a load waits for every unload in flight before it starts."""
        self._cancel_expiry(entry)
        served, entry.served, entry.reserved = entry.served, None, 0

        async def close():
            try:
                await asyncio.to_thread(_close_served, served)
            finally:
                entry.unloading = None

        entry.unloading = asyncio.ensure_future(close())
        entry.unloading.add_done_callback(_retrieve)
        return entry.unloading


def _note_problem(entry: _Entry, problem: str | None) -> None:
    """Records the file check's verdict; a new problem is logged once, with the path (for the
    operator; clients see only the reason)."""
    if problem and problem != entry.unavailable:
        log.warning("the model '%s' (%s) is unavailable: %s", entry.name, entry.path, problem)
    entry.unavailable = problem


def _close_served(served: Served) -> None:
    try:
        served.engine.close()
    finally:
        served.model.close()  # the weights, the caches, the mapping: Model.close gives the pages back


def _retrieve(task: asyncio.Future) -> None:
    """Marks a load's or unload's error as seen: the leases waiting on it got it, or none waited.
    A budget refusal or an unavailable file is an answer (503/507), not a fault: only the others are
    logged (an unavailable file was logged, with its path, when it was found)."""
    error = None if task.cancelled() else task.exception()
    if error is not None and not isinstance(error, (MemoryBudgetError, ModelUnavailableError)):
        log.warning("%s", error)


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"
