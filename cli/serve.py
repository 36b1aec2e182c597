"""`localinfer serve`: an OpenAI-compatible HTTP server with continuous batching, of one model or
of several loaded on demand (--models, serve_models.py)."""
from __future__ import annotations

import functools
import os
import signal
from pathlib import Path

import click

from .common import cache_type_options, load_model, set_threads, speculative_options
from .serve_models import build_pool, duration, model_list, size
from .serve_ray import ray_options, serve_ray


@click.command()
@click.argument("model", required=False)
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (127.0.0.1: this machine only; 0.0.0.0 exposes it to the network).")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option("-np", "--parallel", type=click.IntRange(1, 256), default=4, show_default=True,
              help="Slots: requests generated together, one batched forward pass per step.")
@click.option("-c", "--ctx-size", type=click.IntRange(16), default=None,
              help="Context of each slot in tokens (prompt + answer); default: the model's, at most 4096.")
@click.option("--queue", "max_queue", type=click.IntRange(0), default=64, show_default=True,
              help="Requests that may wait for a slot; beyond that the server answers 503 with Retry-After.")
@click.option("--prefix-cache", "prefix_cache_mib", type=click.IntRange(0), default=256, show_default=True,
              help="MiB of K/V kept for reuse by requests that share a prompt prefix (0: off).")
@click.option("--prefix-cache-dir", type=click.Path(file_okay=False), default=None,
              help="Also keep the prefix cache's blocks in this folder, so a restarted server reuses them.")
@click.option("--prefix-cache-dir-size", "prefix_cache_dir_mib", type=click.IntRange(1), default=4096,
              show_default=True, help="MiB of this model's blocks the --prefix-cache-dir folder holds at most.")
@click.option("--api-key", default=None, envvar="LOCALINFER_API_KEY",
              help="Require 'Authorization: Bearer KEY' (also from $LOCALINFER_API_KEY).")
@click.option("--cors-origins", default=None, envvar="LOCALINFER_ORIGINS", metavar="ORIGIN,...",
              help="Web origins (https://app.example, '*': any) whose pages may call a server without --api-key "
                   "(also from $LOCALINFER_ORIGINS); others get 403. Its own page and localhost pages always may.")
@click.option("--allowed-hosts", default=None, envvar="LOCALINFER_ALLOWED_HOSTS", metavar="NAME,...",
              help="Host names a server without --api-key answers besides localhost, loopback addresses and "
                   "--host ('*': any); others get 403 (a defence against DNS rebinding).")
@click.option("--max-body", type=click.IntRange(1024), default=4 << 20, show_default=True,
              help="Largest request body in bytes (413 beyond).")
@click.option("--timeout", "io_timeout", type=click.FloatRange(0.5), default=30.0, show_default=True,
              help="Seconds a client may stay silent (sending a request, or reading a stream).")
@click.option("-t", "--threads", type=click.IntRange(1), default=None, help="CPU threads.")
@click.option("-v", "--verbose", is_flag=True, help="Log every HTTP request.")
@click.option("--pooling", type=click.Choice(["mean", "last", "cls"]), default=None,
              help="How /v1/embeddings pools the final hidden states (default: the file's pooling_type, else mean).")
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
def serve(model, host, port, parallel, ctx_size, max_queue, prefix_cache_mib, api_key, cors_origins, allowed_hosts,
          max_body, io_timeout, threads, verbose, pooling, prefix_cache_dir, prefix_cache_dir_mib, models, keep_alive,
          max_memory, speculative, cache_type_k, cache_type_v, ray):
    """Serve MODEL (a catalog name or a .gguf path), or the --models, over the OpenAI API
    (/v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models, /health, /metrics) and
    Ollama's (/api/chat, /api/generate, /api/embed, /api/tags, /api/show, /api/ps)."""
    from localinfer.serve.origins import is_loopback, split_list
    if not api_key and not is_loopback(host.strip("[]").lower()):
        click.echo(f"localinfer: warning: listening on {host} without --api-key: anyone who can reach this address "
                   f"may use the model", err=True)
    if ray is not None:
        if models is not None:
            raise click.UsageError("--ray serves one MODEL in each replica, not --models")
        origins = dict(cors_origins=split_list(cors_origins), allowed_hosts=split_list(allowed_hosts))
        return serve_ray(model, host, port, parallel, ctx_size, max_queue, prefix_cache_mib, api_key, max_body,
                         io_timeout, threads, pooling, prefix_cache_dir, prefix_cache_dir_mib, speculative,
                         cache_type_k, cache_type_v, ray, origins)
    set_threads(threads)
    from localinfer.serve.app import make_registry_server, make_server
    from localinfer.serve.registry import EngineOptions

    if models is None and (keep_alive is not None or max_memory is not None):
        raise click.UsageError("--keep-alive and --max-memory go with --models (one MODEL stays loaded)")
    if models is not None and model is not None:
        raise click.UsageError(f"give MODEL or --models, not both (got {model!r} and --models)")
    if models is not None and (speculative["draft"] or speculative["lookup_ngram"]):
        raise click.UsageError("speculative decoding (--model-draft, --lookup-ngram) serves one MODEL, not --models")
    if prefix_cache_dir is not None:
        if prefix_cache_mib == 0:
            raise click.BadParameter("needs the prefix cache (--prefix-cache > 0)", param_hint="--prefix-cache-dir")
        try:
            os.makedirs(prefix_cache_dir, exist_ok=True)
        except OSError as e:
            raise click.ClickException(f"--prefix-cache-dir {prefix_cache_dir}: {e}")
    config = dict(api_key=api_key, cors_origins=split_list(cors_origins), allowed_hosts=split_list(allowed_hosts),
                  max_body=max_body, io_timeout=io_timeout, verbose=verbose, pooling=pooling,
                  on_stop=lambda: click.echo("\nlocalinfer: stopping", err=True))
    if models is not None:
        from localinfer.serve.pool import DEFAULT_KEEP_ALIVE
        from localinfer.serve.units import format_duration
        options = EngineOptions(parallel, ctx_size, max_queue, prefix_cache_mib, prefix_cache_dir=prefix_cache_dir,
                                prefix_cache_dir_mib=prefix_cache_dir_mib)
        keep_alive = DEFAULT_KEEP_ALIVE if keep_alive is None else keep_alive
        try:
            pool = build_pool(models, keep_alive, max_memory, options, threads, ctx_size, cache_type_k, cache_type_v)
        except (OSError, ValueError, LookupError, RuntimeError) as e:
            raise click.ClickException(str(e))
        what = (f"{len(pool.entries())} models ({', '.join(e.name for e in pool.entries())}; loaded on demand, "
                f"kept {format_duration(keep_alive)}{f', within {max_memory / 2**30:.2f} GiB' if max_memory else ''})")
        make = functools.partial(make_registry_server, pool)
    else:
        try:
            llm = load_model(model, ctx_size, threads, speculative, cache_type_k, cache_type_v)
        except (OSError, ValueError, LookupError, RuntimeError) as e:
            raise click.ClickException(str(e))
        name = model if model and not os.path.exists(model) else Path(llm.path).stem
        what = f"'{name}'"
        make = functools.partial(make_server, llm, name, parallel=parallel, ctx_size=ctx_size, max_queue=max_queue,
                                 prefix_cache_mib=prefix_cache_mib, prefix_cache_dir=prefix_cache_dir,
                                 prefix_cache_dir_mib=prefix_cache_dir_mib)
    try:
        server = make(host=host, port=port, **config)
    except ValueError as e:
        raise click.ClickException(str(e))
    except OSError as e:
        raise click.ClickException(f"cannot listen on {host}:{port}: {e}")
    slots = f"{parallel} slots of {server.engine.n_ctx} tokens" if models is None else f"{parallel} slots each"
    click.echo(f"localinfer: serving {what} at {server.url}/v1 ({slots}, queue {max_queue}"
               f"{', API key required' if api_key else ''}); Ctrl-C stops", err=True)
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
