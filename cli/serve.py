"""`localinfer serve`: an OpenAI-compatible HTTP server with continuous batching, of one model or
of several loaded on demand (--models, serve_models.py)."""
from __future__ import annotations

import functools
import os
import signal
from pathlib import Path

import click

from localinfer.batching.config import EngineConfig
from localinfer.serve.config import ServerConfig

from .common import cache_type_options, load_model, model_file_options, set_threads, speculative_options
from .config_options import config_options
from .serve_models import build_pool, duration, model_list, size
from .serve_ray import ray_options, serve_ray


@click.command()
@click.argument("model", required=False)
@model_file_options
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (127.0.0.1: this machine only; 0.0.0.0 exposes it to the network).")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@config_options(EngineConfig, "engine")
@config_options(ServerConfig, "config")
@click.option("-t", "--threads", type=click.IntRange(1), default=None, help="CPU threads.")
@click.option("-a", "--alias", default=None, metavar="NAME",
              help="The name MODEL is served and listed as (default: the catalog name or the file's stem); "
                   "a request may name it anything.")
@click.option("--models", callback=model_list, default=None, metavar="A,B,...|DIR",
              help="Serve several models by name (catalog names, .gguf files, or folders of .gguf files named "
                   "by file stem), each loaded on its first request instead of MODEL.")
@click.option("--keep-alive", callback=duration, default=None, metavar="DURATION",
              help="With --models: how long a model stays loaded after its last request ('5m', '1h30m', "
                   "'30s', seconds; -1: forever, 0: unload at once); requests' keep_alive overrides. [default: 5m]")
@click.option("--max-memory", callback=size, default=None, metavar="SIZE",
              help="With --models: memory the loaded models may hold ('2GiB', '1500MB'; each counts its file "
                   "and its KV caches); least recently used idle models are unloaded to make room.")
@ray_options
@speculative_options
@cache_type_options
def serve(model, host, port, engine, config, threads, alias, models, keep_alive, max_memory, speculative,
          cache_type_k, cache_type_v, ray, gpu):
    """Serve MODEL (a catalog name or a .gguf path), or the --models, over the OpenAI API
    (/v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models, /health, /metrics) and
    Ollama's (/api/chat, /api/generate, /api/embed, /api/tags, /api/show, /api/ps)."""
    from localinfer.serve.origins import is_loopback
    if not config.api_key and not is_loopback(host.strip("[]").lower()):
        click.echo(f"localinfer: warning: listening on {host} without --api-key: anyone who can reach this address "
                   f"may use the model", err=True)
    if any(v is not None for v in gpu.values()) and (ray is not None or models is not None):
        raise click.UsageError("-ngl / --device go with one MODEL served here (not --models or --ray)")
    if ray is not None:
        if models is not None:
            raise click.UsageError("--ray serves one MODEL in each replica, not --models")
        return serve_ray(model, host, port, engine, config, threads, speculative, cache_type_k, cache_type_v, ray,
                         alias)
    set_threads(threads)
    from localinfer.serve.app import make_registry_server, make_server

    if models is None and (keep_alive is not None or max_memory is not None):
        raise click.UsageError("--keep-alive and --max-memory go with --models (one MODEL stays loaded)")
    if models is not None and alias is not None:
        raise click.UsageError("--alias names the one MODEL; --models are served by their own names")
    if models is not None and model is not None:
        raise click.UsageError(f"give MODEL or --models, not both (got {model!r} and --models)")
    if models is not None and (speculative["draft"] or speculative["lookup_ngram"]):
        raise click.UsageError("speculative decoding (--model-draft, --lookup-ngram) serves one MODEL, not --models")
    if engine.prefix_cache_dir is not None:
        try:
            os.makedirs(engine.prefix_cache_dir, exist_ok=True)
        except OSError as e:
            raise click.ClickException(f"--prefix-cache-dir {engine.prefix_cache_dir}: {e}")
    on_stop = lambda: click.echo("\nlocalinfer: stopping", err=True)  # noqa: E731
    if models is not None:
        from localinfer.serve.pool import DEFAULT_KEEP_ALIVE
        from localinfer.serve.units import format_duration
        keep_alive = DEFAULT_KEEP_ALIVE if keep_alive is None else keep_alive
        try:
            pool = build_pool(models, keep_alive, max_memory, engine, threads, cache_type_k, cache_type_v)
        except (OSError, ValueError, LookupError, RuntimeError) as e:
            raise click.ClickException(str(e))
        what = (f"{len(pool.entries())} models ({', '.join(e.name for e in pool.entries())}; loaded on demand, "
                f"kept {format_duration(keep_alive)}{f', within {max_memory / 2**30:.2f} GiB' if max_memory else ''})")
        make = functools.partial(make_registry_server, pool)
    else:
        try:
            llm = load_model(model, engine.n_ctx, threads, speculative, cache_type_k, cache_type_v, gpu)
        except (OSError, ValueError, LookupError, RuntimeError) as e:
            raise click.ClickException(str(e))
        name = alias or (model if model and not os.path.exists(model) else Path(llm.path).stem)
        what = f"'{name}'"
        make = functools.partial(make_server, llm, name, engine=engine)
    try:
        server = make(host=host, port=port, config=config, on_stop=on_stop)
    except ValueError as e:
        raise click.ClickException(str(e))
    except OSError as e:
        raise click.ClickException(f"cannot listen on {host}:{port}: {e}")
    slots = f"{engine.n_slots} slots of {server.engine.n_ctx} tokens" if models is None else f"{engine.n_slots} slots each"
    click.echo(f"localinfer: serving {what} at {server.url}/v1 ({slots}, queue {engine.max_queue}"
               f"{', API key required' if config.api_key else ''}); Ctrl-C stops", err=True)
    click.echo(f"localinfer: chat in a browser at {server.url}/", err=True)
    # uvicorn takes SIGINT and SIGTERM (how service managers stop a server) while it serves, shuts
    # down gracefully, then raises the signal again with these handlers back: both end here
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.socket.close()


def _stop(signum, frame):
    raise KeyboardInterrupt
