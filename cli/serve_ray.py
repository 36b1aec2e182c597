"""`localinfer serve --ray`: the same server as Ray Serve replicas (localinfer.serve.ray_app)."""
from __future__ import annotations

import functools
import os
from pathlib import Path

import click

from .progress import ByteProgress


def ray_options(command):
    """--ray, --replicas, --min-replicas, --max-replicas, handed to the command as one `ray` value:
    None without --ray, else a localinfer.serve.ray_app.Scaling."""
    @functools.wraps(command)
    def wrapper(*args, use_ray, replicas, min_replicas, max_replicas, downscale_delay, **kwargs):
        if not use_ray:
            given = [name for name, v in (("--replicas", replicas), ("--min-replicas", min_replicas),
                                          ("--max-replicas", max_replicas)) if v is not None]
            if given:
                raise click.UsageError(f"{', '.join(given)} needs --ray")
            return command(*args, ray=None, **kwargs)
        if replicas is not None and (min_replicas is not None or max_replicas is not None):
            raise click.UsageError("--replicas is a fixed count: give it, or --min-replicas/--max-replicas, not both")
        from localinfer.serve.ray_app import Scaling
        low = replicas or min_replicas or 1
        high = replicas or max_replicas or low
        return command(*args, ray=Scaling(min_replicas=low, max_replicas=high, downscale_delay_s=downscale_delay),
                       **kwargs)

    options = [
        click.option("--ray", "use_ray", is_flag=True,
                     help="Serve as Ray Serve replicas (on $RAY_ADDRESS's cluster, else a local one): each replica "
                          "one process with its own model, -t threads (default 1) and --parallel slots."),
        click.option("--replicas", type=click.IntRange(1), default=None, help="With --ray: a fixed replica count."),
        click.option("--min-replicas", type=click.IntRange(1), default=None,
                     help="With --ray: replicas always kept warm (a cold start takes seconds). Default 1."),
        click.option("--max-replicas", type=click.IntRange(1), default=None,
                     help="With --ray: the autoscaler adds replicas up to this many when every slot of every "
                          "replica is busy. Default: --min-replicas (no autoscaling)."),
        click.option("--downscale-delay", type=click.FloatRange(0), default=300.0, show_default=True,
                     help="With --ray: seconds of low load before the autoscaler removes a replica."),
    ]
    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper


def serve_ray(model, host, port, engine, config, threads, speculative, cache_type_k, cache_type_v, scaling,
              alias=None):
    """Fetch the model once into this node's cache, then deploy and serve until Ctrl-C. engine: an
    EngineConfig; config: a ServerConfig, of which no allowed hosts given leaves the replicas'
    default (every Host: Ray's proxy is reached by the cluster's own names)."""
    from localinfer.files.fetch import resolve_model
    from localinfer.serve.ray_app import ReplicaSpec, RayNotInstalledError, ScalingError, serve_on_ray

    try:
        path = resolve_model(model, progress=ByteProgress(f"pulling {model or 'default model'}"))
    except (OSError, ValueError, LookupError) as e:
        raise click.ClickException(str(e))
    fields = dict(api_key=config.api_key, max_body=config.max_body, io_timeout=config.io_timeout,
                  pooling=config.pooling, cors_origins=config.cors_origins)
    if config.allowed_hosts:
        fields["allowed_hosts"] = config.allowed_hosts
    is_file = model is not None and os.path.exists(model)
    name = alias or (model if model and not is_file else Path(path).stem)
    spec = ReplicaSpec(model=str(path) if is_file else (model or str(path)), name=name, threads=threads or 1,
                       load_options=dict(speculative, cache_type_k=cache_type_k, cache_type_v=cache_type_v),
                       engine=engine, config=fields)
    try:
        serve_on_ray(spec, scaling, host, port, log=lambda msg: click.echo(msg, err=True))
    except (RayNotInstalledError, ScalingError) as e:
        raise click.ClickException(str(e))
