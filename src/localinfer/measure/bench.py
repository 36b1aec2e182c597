"""Measure like llama-bench: ppN (prompt processing) and tgN (generation) in tokens/s.

One model x thread count is measured in its own process (`python -m localinfer.measure.bench ...`),
so the thread setting, load time and peak RSS are those of a fresh start. Test names and
meaning follow llama-bench: ppN evaluates N random tokens in one batch on an empty context and
computes the logits of the last one (as llama-bench's batch asks, and all a prompt needs);
tgN generates N tokens one at a time from an empty context. With a depth D (llama-bench's
`-d`), the context first holds D random tokens, computed untimed, and the test is named
`ppN @ dD` / `tgN @ dD`: decode after a long prompt reads a long KV cache. The D tokens are
computed once per depth and kept; each run drops what the one before added. Each test is
repeated after one warm-up run; the rows carry every sample.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time

from ..backend.blas_threads import set_blas_threads
from ..describe import active_share


def weight_bytes_per_token(gguf) -> int:
    """Bytes of the file's weights a decode step reads: every tensor once, except that the
    token embedding contributes one row (unless it doubles as the output matrix) and a mixture
    of experts' expert tensors their expert_used_count / expert_count share (describe.active_share)."""
    total = active_share(gguf, gguf.metadata.get("general.architecture", ""))[1]
    emb = gguf.tensors.get("token_embd.weight")
    if emb is not None and "output.weight" in gguf.tensors:
        total -= emb.nbytes - emb.nbytes // emb.shape[0]
    return total


DEPTH_BATCH = 512  # tokens per forward pass while filling the context to a depth (llama-bench's n_ubatch)


def llama_bench_name(kind: str, n: int, depth: int = 0) -> str:
    """llama-bench's test names: pp512, tg128, tg128 @ d4096."""
    return f"{kind}{n}" + (f" @ d{depth}" if depth else "")


def _stats(name: str, n_prompt: int, n_gen: int, samples_ns: list[int], n_tokens: int, n_depth: int = 0) -> dict:
    ts = [n_tokens / (ns / 1e9) for ns in samples_ns]
    return {
        "test": name, "n_prompt": n_prompt, "n_gen": n_gen, "n_depth": n_depth,
        "avg_ns": int(statistics.mean(samples_ns)),
        "stddev_ns": int(statistics.stdev(samples_ns)) if len(samples_ns) > 1 else 0,
        "avg_ts": statistics.mean(ts), "stddev_ts": statistics.stdev(ts) if len(ts) > 1 else 0.0,
        "samples_ns": samples_ns, "samples_ts": ts,
    }


def run_model(path: str, n_threads: int, prompts: list[int], gens: list[int], reps: int, seed: int = 0,
              progress=None, backend: str = "auto", depths: list[int] = (0,),
              cache_types: tuple[str, str] = ("f16", "f16"), n_gpu_layers: int = 0) -> list[dict]:
    """All tests for one model at one thread count, in this process. Returns llama-bench-like rows.
    n_gpu_layers: llama-bench's -ngl (load()'s; 0: the CPU alone)."""
    import numpy as np

    from ..model import Model

    depths = list(depths) or [0]
    n_test = max(prompts + gens + [16])  # the most tokens one test adds after its depth
    t0 = time.perf_counter()
    model = Model(path, n_ctx=max(depths) + n_test + 8, n_threads=n_threads, backend=backend,
                  cache_type_k=cache_types[0], cache_type_v=cache_types[1], n_gpu_layers=n_gpu_layers or None)
    load_s = time.perf_counter() - t0
    # the matrices repacked after load (arch/deferred_repack.py): measured as the model keeps them, as
    # llama-bench measures after its own load
    model.wait_repacked()
    rng = np.random.default_rng(seed)
    n_vocab = model.n_vocab

    def random_tokens(n):
        return rng.integers(0, n_vocab, size=n).tolist()

    def fill(ctx, depth):
        """The context holds `depth` random tokens (untimed), computed in prompt-sized batches."""
        ctx.reset()
        for i in range(0, depth, DEPTH_BATCH):
            ctx.append(random_tokens(min(DEPTH_BATCH, depth - i)), last_only=True)

    def back_to(ctx, depth):
        """Drop what the last run added; refill if the cache cannot go back (a sliding window)."""
        if len(ctx.tokens) >= depth and ctx.cache.can_trim_to(depth):
            ctx.truncate(depth)
        else:
            fill(ctx, depth)

    def time_pp(ctx, n):
        tokens = random_tokens(n)
        start = time.perf_counter_ns()
        logits = ctx.append(tokens, last_only=True)
        int(np.argmax(logits[-1]))  # the first token is ready here: this is the TTFT of an n-token prompt
        return time.perf_counter_ns() - start

    def time_tg(ctx, n):
        token = model.tokenizer.bos_id if model.tokenizer.bos_id is not None else 0
        start = time.perf_counter_ns()
        for _ in range(n):
            token = int(np.argmax(ctx.append([token])[-1]))
        return time.perf_counter_ns() - start

    rows = []
    tests = [("pp", n) for n in prompts if n > 0] + [("tg", n) for n in gens if n > 0]
    interrupted = False
    for depth in depths:  # outermost: the depth's tokens are computed once for all its tests
        ctx = model.new_context(depth + n_test + 1)
        for kind, n in tests:
            fn = time_pp if kind == "pp" else time_tg
            name = llama_bench_name(kind, n, depth)
            samples = []
            try:
                if len(ctx.tokens) < depth and progress:
                    progress(f"filling the context with {depth} tokens")
                back_to(ctx, depth)
                fn(ctx, min(n, 16))  # warm-up (caches, allocator, BLAS threads)
                for r in range(reps):
                    back_to(ctx, depth)
                    samples.append(fn(ctx, n))
                    if progress:
                        progress(f"{name} rep {r + 1}/{reps}: {n / (samples[-1] / 1e9):.1f} t/s")
            except KeyboardInterrupt:
                interrupted = True  # keep the finished tests (and this one's finished repetitions)
            if samples:
                rows.append(_stats(name, n if kind == "pp" else 0, n if kind == "tg" else 0, samples, n, depth))
            if interrupted:
                break
        del ctx
        if interrupted:
            break

    info = describe_run(model, path, n_threads, load_s)
    for row in rows:
        row.update(info)
        row["type_k"], row["type_v"] = cache_types  # llama-bench's JSON names
        if row["n_gen"]:
            row["weight_gbps"] = row["avg_ts"] * info["weight_bytes_per_token"] / 1e9
        if row["n_prompt"]:
            row["ttft_ms"] = row["avg_ns"] / 1e6
    if interrupted:
        raise BenchInterrupted(rows)
    return rows


class BenchInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run; `rows` holds what finished."""

    def __init__(self, rows: list[dict]):
        super().__init__()
        self.rows = rows


def describe_run(model, path: str, n_threads: int, load_s: float) -> dict:
    from collections import Counter
    types = Counter(t.ggml_type.name for t in model.gguf.tensors.values() if len(t.shape) > 1)
    return {
        "model": os.path.basename(path),
        "model_type": f"{model.architecture} {model.gguf.metadata.get('general.size_label', '')}".strip(),
        "quant": "+".join(t for t, _ in types.most_common()),
        "model_size": os.path.getsize(path),
        "model_n_params": sum(t.n_elements for t in model.gguf.tensors.values()),
        "n_threads": n_threads,
        "backend": (backend_name() + (" repacked" if getattr(model.runtime, "repacked_bytes", 0) else "")
                    if model.backend == "c" else "numpy reference")
                   + (f" + CUDA {model.n_gpu_layers} layers" if model.n_gpu_layers else ""),
        "n_gpu_layers": model.n_gpu_layers,
        "load_s": load_s,
        "peak_rss_mib": peak_rss_mib(),
        "memory": model.memory(),  # bytes: weights mapped / copied, KV and prefix caches (Model.memory)
        "weight_bytes_per_token": weight_bytes_per_token(model.gguf),
        "runtime": "localinfer",
    }


def peak_rss_mib() -> float:
    """This process's peak RSS. /proc's VmHWM, since getrusage's ru_maxrss survives exec and
    would report the parent's peak (e.g. the bandwidth probe's buffers) instead."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def backend_name() -> str:
    try:
        from ..backend import kernels
        if kernels.available():
            return f"C {kernels.isa()}"
    except ImportError:
        pass
    return "numpy reference"


def main(argv=None) -> None:
    """Worker entry: measure one model at one thread count, print JSON rows."""
    ap = argparse.ArgumentParser(prog="python -m localinfer.measure.bench")
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--prompts", default="512")
    ap.add_argument("--gens", default="128")
    ap.add_argument("--depths", default="0")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--backend", default="auto", choices=["auto", "c", "reference"])
    ap.add_argument("--cache-type-k", default="f16", choices=["f16", "q8_0", "q4_0"])
    ap.add_argument("--cache-type-v", default="f16", choices=["f16", "q8_0", "q4_0"])
    ap.add_argument("--n-gpu-layers", type=int, default=0)
    args = ap.parse_args(argv)
    set_blas_threads(args.threads)

    def progress(msg):
        print(f"  {msg}", file=sys.stderr, flush=True)

    ints = lambda s: [int(x) for x in s.split(",") if x.strip()]  # noqa: E731
    try:
        rows = run_model(args.model, args.threads, ints(args.prompts), ints(args.gens), args.reps,
                         progress=progress, backend=args.backend, depths=ints(args.depths),
                         cache_types=(args.cache_type_k, args.cache_type_v), n_gpu_layers=args.n_gpu_layers)
    except BenchInterrupted as e:
        json.dump(e.rows, sys.stdout)
        sys.exit(130)  # the parent reports these and stops
    except KeyboardInterrupt:
        sys.exit(130)
    json.dump(rows, sys.stdout)


if __name__ == "__main__":
    main()
