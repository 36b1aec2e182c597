"""Decode speed at depth per KV cache type, the types interleaved in one process (a measurement,
not a test): one context per type is filled with the same `depth` random tokens, then rounds of
`n_gen` greedy decode steps go to each type in turn, so a busy machine slows all of them alike and
the ratio to f16 holds even where the absolute tokens/s does not.

    python -m localinfer.measure.kv_depth MODEL [--depth 4096] [--gen 16] [--rounds 5] [--threads 2]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

TYPES = ("f16", "q8_0", "q4_0")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m localinfer.measure.kv_depth")
    ap.add_argument("model")
    ap.add_argument("--depth", type=int, default=4096)
    ap.add_argument("--gen", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    from ..backend.blas_threads import set_blas_threads
    set_blas_threads(args.threads)
    from ..backend import kernels
    from ..model import Model
    n_ctx = args.depth + args.gen + 1
    rng = np.random.default_rng(0)
    ctxs, models = {}, {}
    for t in TYPES:
        models[t] = Model(args.model, n_ctx=n_ctx, n_threads=args.threads, cache_type_k=t, cache_type_v=t)
        models[t].wait_repacked()   # measured as the model stays (arch/deferred_repack.py)
        ctxs[t] = models[t].new_context()
    fill = rng.integers(0, models["f16"].n_vocab, args.depth).tolist()
    for t, ctx in ctxs.items():
        for i in range(0, args.depth, 512):
            ctx.append(fill[i:i + 512], last_only=True)
    samples = {t: [] for t in TYPES}
    for _ in range(args.rounds):
        for t, ctx in ctxs.items():
            ctx.truncate(args.depth)
            token = fill[-1]
            start = time.perf_counter()
            for _ in range(args.gen):
                token = int(np.argmax(ctx.append([token])[-1]))
            samples[t].append(args.gen / (time.perf_counter() - start))
    base = statistics.median(samples["f16"])
    isa = kernels.isa() if kernels.available() else "numpy"
    print(f"{args.model}: decode at depth {args.depth}, {args.threads} threads, {isa} kernels, "
          f"median of {args.rounds} interleaved rounds of {args.gen} tokens")
    print("| cache K/V | tg t/s (median) | × f16 | KV bytes / token | KV MiB in this context |")
    print("|---|---:|---:|---:|---:|")
    for t, ctx in ctxs.items():
        ts = statistics.median(samples[t])
        print(f"| {t} | {ts:.2f} | {ts / base:.2f} | {ctx.cache.nbytes / n_ctx:.0f} | {ctx.cache.nbytes / 2**20:.1f} |")


if __name__ == "__main__":
    main()
