"""Scale-out on Ray Serve: the same ASGI app as `localinfer serve`, one copy per replica.

    localinfer serve smollm2 --ray --min-replicas 1 --max-replicas 4 --parallel 4 -t 2

Each replica is a Ray actor (one process) that loads its own Model, starts its own batching Engine
with its own threads, and answers through `create_app` (the app `localinfer serve` runs under
uvicorn). Ray's HTTP proxy spreads requests over the replicas and its autoscaler adds or removes
replicas from the requests each one has in flight.

Why `@serve.ingress()` with `__serve_build_asgi_app__` (Ray >= 2.5x) and not an app passed to
`serve.ingress(app)`: an app passed there is pickled at deploy time and must exist before the
replica does, but ours wraps a model that each replica loads itself; the late-bound hook builds it
inside the replica after __init__ loaded the model, and Ray still runs the app's lifespan and
hands it the raw ASGI scope (streaming included). Why not a deployment whose `__call__` forwards a
Starlette Request: that path buffers the body through Ray's own request object and loses the
streaming send.

Sizing (docs/scaling.md says why):
- `ray_actor_options.num_cpus` = the replica's thread count, so Ray never places more replicas on
  a node than it has cores for (our C kernels spin their threads; two replicas on one core each
  run at under half speed);
- `target_ongoing_requests` = the slot count (`--parallel`): a replica whose slots are all busy is
  "full", one more request in flight anywhere asks for a new replica;
- `max_ongoing_requests` = 2 x slots: a replica takes one queue's worth beyond its slots; the rest
  wait in Ray's router, from where a replica that has just started can take them;
- upscale after `upscale_delay_s` (default 2 s), downscale after `downscale_delay_s` (default
  300 s): a cold start takes seconds, so removing a replica is made slow and adding one fast.

Ray is imported only here and only when called: localinfer works without it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..batching.config import EngineConfig, flag_fields, flag_keys
from .config import ServerConfig

REPLICA_HEADER = "x-localinfer-replica"  # which replica answered: a response header on every route


class RayNotInstalledError(RuntimeError):
    """`--ray` was asked for on a machine without Ray Serve."""


class ScalingError(ValueError):
    """The replica counts or thresholds contradict each other; the message names the option."""


@dataclass(frozen=True)
class Scaling:
    """How many replicas, and when Ray adds or removes one (see the module docstring)."""
    min_replicas: int = 1
    max_replicas: int = 1
    initial_replicas: int | None = None  # None: min_replicas
    target_ongoing_requests: float | None = None  # None: the slot count
    upscale_delay_s: float = 2.0
    downscale_delay_s: float = 300.0
    look_back_period_s: float = 15.0  # above Ray's 10 s metrics interval, which it must exceed

    def validate(self) -> None:
        if self.min_replicas < 1:
            raise ScalingError(f"--min-replicas must be >= 1 (a cold start takes seconds), got {self.min_replicas}")
        if self.max_replicas < self.min_replicas:
            raise ScalingError(f"--max-replicas ({self.max_replicas}) is below --min-replicas ({self.min_replicas})")
        if self.initial_replicas is not None and not self.min_replicas <= self.initial_replicas <= self.max_replicas:
            raise ScalingError(f"initial_replicas ({self.initial_replicas}) must lie in "
                               f"[{self.min_replicas}, {self.max_replicas}]")
        if self.target_ongoing_requests is not None and self.target_ongoing_requests <= 0:
            raise ScalingError(f"target_ongoing_requests must be > 0, got {self.target_ongoing_requests}")

    def autoscaling_config(self, slots: int) -> dict | None:
        """Ray Serve's autoscaling_config, None for a fixed count (min == max)."""
        if self.min_replicas == self.max_replicas:
            return None
        return {"min_replicas": self.min_replicas, "max_replicas": self.max_replicas,
                "initial_replicas": self.initial_replicas or self.min_replicas,
                "target_ongoing_requests": self.target_ongoing_requests or float(slots),
                "upscale_delay_s": self.upscale_delay_s, "downscale_delay_s": self.downscale_delay_s,
                "look_back_period_s": self.look_back_period_s}


@dataclass(frozen=True)
class ReplicaSpec:
    """What every replica loads and serves: plain data, pickled to each replica."""
    model: str  # a .gguf path, or a catalog name each replica resolves in its node's cache
    name: str  # the served model name
    threads: int = 1
    load_options: dict = field(default_factory=dict)  # localinfer.load's (cache types, draft model ...)
    engine: EngineConfig = field(default_factory=EngineConfig)  # its n_ctx is the model's context too
    config: dict = field(default_factory=dict)  # ServerConfig fields (api_key, max_body ...)


def _import_serve():
    try:
        from ray import serve
    except ImportError as e:
        raise RayNotInstalledError("--ray needs Ray Serve: pip install 'localinfer[ray]' "
                                   f"(or 'ray[serve]>=2.60'): {e}") from None
    return serve


class ReplicaHeader:
    """ASGI middleware: every response carries the answering replica's id, so a client (and the
    test) sees which replica served it and can match it to that replica's /metrics."""

    def __init__(self, app, replica_id: str):
        self.app, self.header = app, (REPLICA_HEADER.encode(), replica_id.encode())

    def __getattr__(self, name):  # lifespan / exception-handler hooks Ray looks up on the app
        return getattr(self.app, name)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def tagged(message):
            if message["type"] == "http.response.start":
                message = dict(message, headers=[*message.get("headers", []), self.header])
            await send(message)

        await self.app(scope, receive, tagged)


class LocalinferReplica:
    """One replica: a model, its engine and the ASGI app over them (no __call__: Ray's ingress
    wrapper forwards the ASGI scope to the app that __serve_build_asgi_app__ returns)."""

    def __init__(self, spec: ReplicaSpec):
        # Ray already set OMP_NUM_THREADS to the actor's num_cpus (= threads) before its worker
        # imported numpy; this keeps OpenBLAS and MKL at the same count for what imports later
        from localinfer.backend.blas_threads import set_blas_threads
        set_blas_threads(spec.threads)
        from localinfer import load
        from localinfer.files.fetch import resolve_model
        from ..batching.config import start_engine
        from .registry import Served, StaticRegistry
        from ray import serve

        self.spec = spec
        self.replica_id = serve.get_replica_context().replica_id.unique_id
        path = str(resolve_model(spec.model))
        model = load(path, n_ctx=spec.engine.n_ctx, n_threads=spec.threads, **spec.load_options)
        engine = start_engine(model, spec.engine)
        self.registry = StaticRegistry(Served(spec.name, model, engine, os.path.getsize(path)), path)

    def __serve_build_asgi_app__(self):
        # the app's lifespan closes the registry (the engine) when Ray stops the replica
        from . import create_app
        # Ray's proxy listens where the cluster says and its Service names reach it: no Host check here
        # (origins.py); web origins are still checked
        config = {"host": None, "allowed_hosts": ("*",), **self.spec.config}
        return ReplicaHeader(create_app(self.registry, ServerConfig(**config)), self.replica_id)


def build_application(spec: ReplicaSpec, scaling: Scaling, deployment_name: str = "localinfer"):
    """A Ray Serve Application (pass it to serve.run) of `scaling` replicas of `spec`."""
    scaling.validate()
    serve = _import_serve()
    slots = spec.engine.n_slots
    options = dict(name=deployment_name, max_ongoing_requests=2 * slots,
                   ray_actor_options={"num_cpus": spec.threads},
                   # a replica's start is a model load: give it time before Ray calls it unhealthy
                   health_check_period_s=10, health_check_timeout_s=60, graceful_shutdown_timeout_s=30)
    autoscaling = scaling.autoscaling_config(slots)
    if autoscaling is None:
        options["num_replicas"] = scaling.min_replicas
    else:
        options["autoscaling_config"] = autoscaling
    deployment = serve.deployment(**options)(serve.ingress()(LocalinferReplica))
    return deployment.bind(spec)


_SCALING_KEYS = {"min_replicas", "max_replicas", "upscale_delay_s", "downscale_delay_s"}


def app_builder(args: dict):
    """`serve run localinfer.serve.ray_app:app_builder model=smollm2 max_replicas=4`, and KubeRay's
    RayService (deploy/kubernetes/rayservice.yaml: serveConfigV2 import_path + args). Besides model,
    name, threads and the scaling keys, the arguments are `localinfer serve`'s engine and server
    options by their long names (parallel, ctx_size, queue, prefix_cache in MiB, api_key, max_body,
    timeout ...), in the same units. Values may be strings (the command line gives strings); an
    unknown key is an error naming it."""
    known = {"model", "name", "threads"} | set(_SCALING_KEYS) | flag_keys(EngineConfig) | flag_keys(ServerConfig)
    unknown = sorted(set(args) - known)
    if unknown:
        raise ScalingError(f"unknown argument(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")

    def num(key, default, kind=int):
        value = args.get(key)
        try:
            return default if value is None else kind(value)
        except (TypeError, ValueError):
            raise ScalingError(f"{key} must be a number, got {value!r}") from None

    model = str(args.get("model") or "smollm2")
    name = str(args.get("name") or os.path.splitext(os.path.basename(model))[0])
    try:
        engine = EngineConfig(**flag_fields(EngineConfig, args))
        config = flag_fields(ServerConfig, args)
    except ValueError as e:
        raise ScalingError(str(e)) from None
    spec = ReplicaSpec(model=model, name=name, threads=num("threads", 1), engine=engine, config=config)
    low = num("min_replicas", 1)
    scaling = Scaling(min_replicas=low, max_replicas=num("max_replicas", low),
                      upscale_delay_s=num("upscale_delay_s", 2.0, float),
                      downscale_delay_s=num("downscale_delay_s", 300.0, float))
    return build_application(spec, scaling)


def serve_on_ray(spec: ReplicaSpec, scaling: Scaling, host: str, port: int, log=print) -> None:
    """Deploy on the Ray cluster named by $RAY_ADDRESS (else a local one started here) and serve
    until Ctrl-C or SIGTERM, then remove the deployment. The caller has already fetched the model
    into this node's cache, so replicas started here only read it."""
    scaling.validate()
    serve = _import_serve()
    import ray

    address = os.environ.get("RAY_ADDRESS")
    if not address:
        check_fits_here(spec, scaling, os.cpu_count() or 1)
    ray.init(address=address, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": host, "port": port})
        serve.run(build_application(spec, scaling), name="localinfer", route_prefix="/")
        auto = scaling.autoscaling_config(spec.engine.n_slots)
        how = (f"{scaling.min_replicas}..{scaling.max_replicas} replicas, scaling at "
               f"{auto['target_ongoing_requests']:g} requests in flight each" if auto
               else f"{scaling.min_replicas} replicas")
        log(f"localinfer: serving '{spec.name}' on Ray Serve at http://{host}:{port}/v1 ({how}, "
            f"{spec.engine.n_slots} slots and {spec.threads} thread{'s' * (spec.threads > 1)} each); Ctrl-C stops")
        _wait_for_interrupt()
    finally:
        serve.shutdown()
        ray.shutdown()


def check_fits_here(spec: ReplicaSpec, scaling: Scaling, n_cpus: int) -> None:
    """On a local cluster (no $RAY_ADDRESS) no autoscaler adds machines: replicas that do not fit
    would wait for CPUs forever and the deploy with them, so that is refused up front."""
    need = scaling.min_replicas * spec.threads
    if need > n_cpus:
        raise ScalingError(f"{scaling.min_replicas} replicas (--replicas/--min-replicas) x -t {spec.threads} needs "
                           f"{need} CPUs and this "
                           f"machine has {n_cpus}: lower them, or set RAY_ADDRESS to a cluster")


def _wait_for_interrupt() -> None:
    import signal
    import threading

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # how service managers stop a server
    try:
        while not stop.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
