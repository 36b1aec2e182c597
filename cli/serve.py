"""`localinfer serve`: an OpenAI-compatible HTTP server with continuous batching."""
from __future__ import annotations

import os
import signal
from pathlib import Path

import click

from .common import cache_type_options, load_model, set_threads, speculative_options
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
@click.option("--max-body", type=click.IntRange(1024), default=4 << 20, show_default=True,
              help="Largest request body in bytes (413 beyond).")
@click.option("--timeout", "io_timeout", type=click.FloatRange(0.5), default=30.0, show_default=True,
              help="Seconds a client may stay silent (sending a request, or reading a stream).")
@click.option("-t", "--threads", type=click.IntRange(1), default=None, help="CPU threads.")
@click.option("-v", "--verbose", is_flag=True, help="Log every HTTP request.")
@click.option("--pooling", type=click.Choice(["mean", "last", "cls"]), default=None,
              help="How /v1/embeddings pools the final hidden states (default: the file's pooling_type, else mean).")
@ray_options
@speculative_options
@cache_type_options
def serve(model, host, port, parallel, ctx_size, max_queue, prefix_cache_mib, api_key, max_body, io_timeout,
          threads, verbose, pooling, prefix_cache_dir, prefix_cache_dir_mib, speculative, cache_type_k, cache_type_v,
          ray):
    """Serve MODEL (a catalog name or a .gguf path) over the OpenAI API:
    /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models, /health, /metrics."""
    if ray is not None:
        return serve_ray(model, host, port, parallel, ctx_size, max_queue, prefix_cache_mib, api_key, max_body,
                         io_timeout, threads, pooling, prefix_cache_dir, prefix_cache_dir_mib, speculative,
                         cache_type_k, cache_type_v, ray)
    set_threads(threads)
    from localinfer.serve.app import make_server

    try:
        llm = load_model(model, ctx_size, threads, speculative, cache_type_k, cache_type_v)
    except (OSError, ValueError, LookupError, RuntimeError) as e:
        raise click.ClickException(str(e))
    name = model if model and not os.path.exists(model) else Path(llm.path).stem
    if prefix_cache_dir is not None:
        if prefix_cache_mib == 0:
            raise click.BadParameter("needs the prefix cache (--prefix-cache > 0)", param_hint="--prefix-cache-dir")
        try:
            os.makedirs(prefix_cache_dir, exist_ok=True)
        except OSError as e:
            raise click.ClickException(f"--prefix-cache-dir {prefix_cache_dir}: {e}")
    try:
        server = make_server(llm, name, host, port, parallel, ctx_size, max_queue, prefix_cache_mib,
                             api_key=api_key, max_body=max_body, io_timeout=io_timeout, verbose=verbose,
                             pooling=pooling, prefix_cache_dir=prefix_cache_dir,
                             prefix_cache_dir_mib=prefix_cache_dir_mib,
                             on_stop=lambda: click.echo("\nlocalinfer: stopping", err=True))
    except ValueError as e:
        raise click.ClickException(str(e))
    except OSError as e:
        raise click.ClickException(f"cannot listen on {host}:{port}: {e}")
    click.echo(f"localinfer: serving '{name}' at {server.url}/v1 ({parallel} slots of {server.engine.n_ctx} "
               f"tokens, queue {max_queue}{', API key required' if api_key else ''}); Ctrl-C stops", err=True)
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
