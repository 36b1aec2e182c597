"""Decode speed of the fused C layer stack (arch/fused.py: one C call per token) against the Python
layer loop over the same C kernels (model.fuse = False), on a synthetic model (a measurement, not a
test). The two take turns, round after round, so that a busy machine slows them alike; prints the
best tok/s of each and their ratio.

    python csrc/bench_fused_layers.py qwen2moe-small:Q8_0 [--tokens 32] [--rounds 5] [--threads 2]

SPEC is quant/synthetic.py's SHAPE[:TYPE] (the file is written into the cache on first use).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from localinfer.backend import kernels
from localinfer.arch import build_model
from localinfer.files.gguf_file import GGUFFile
from localinfer.quant.synthetic import parse_spec, synthetic_model


def decode_tok_s(m, fuse: bool, n_tokens: int, prompt: int = 16) -> float:
    """tok/s of n_tokens single-token forward passes after a short prefill (greedy ids are noise on
    random weights, so fixed ids are fed: the work per step is the same)."""
    m.fuse = fuse
    cache = m.new_cache(prompt + n_tokens + 1)
    m.forward(np.arange(100, 100 + prompt), cache)
    t0 = time.perf_counter()
    for i in range(n_tokens):
        m.forward(np.array([200 + i]), cache, last_only=True)
    return n_tokens / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("spec")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    shape, ftypes = parse_spec(args.spec)
    kernels.set_threads(args.threads)
    path = synthetic_model(shape, ftypes[0], log=print)
    with GGUFFile(path) as f:
        m = build_model(f, "c")
        if m.fused_layers() is None:
            raise SystemExit(f"{shape.name}: the C layers do not run this model (its layers take the Python loop)")
        best = {True: 0.0, False: 0.0}
        for _ in range(args.rounds):
            for fuse in (False, True):
                best[fuse] = max(best[fuse], decode_tok_s(m, fuse, args.tokens))
        print(f"{shape.name} {ftypes[0]}, {args.threads} threads, {kernels.isa()}: "
              f"loop {best[False]:.1f} tok/s, fused {best[True]:.1f} tok/s, fused/loop {best[True] / best[False]:.2f}x")


if __name__ == "__main__":
    main()
