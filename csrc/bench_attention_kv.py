"""Decode attention over a long KV cache per cache type and ISA (a measurement, not a test): one query
token against `depth` keys, f16 (core/attention.c) against q8_0 / q4_0 read in place
(core/attention_kv.c), the types interleaved round after round so that a busy machine slows them alike.

    python csrc/bench_attention_kv.py [--depth 4096] [--isa avx2 avx512] [--threads 1] [--rounds 7]

Shapes: SmolLM2-135M's (9 query heads over 3 KV heads of 64) and gemma-3-270m's global layers
(4 over 1 of 256). Prints the best time per call and the ratio to f16 on the same ISA.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from gguf import GGMLQuantizationType as T

from localinfer.backend import kernels
from localinfer.kv.cache_types import quantize_rows

SHAPES = {"smollm2 (9/3 heads x 64)": (9, 3, 64), "gemma3 global (4/1 heads x 256)": (4, 1, 256)}
TYPES = {"f16": T.F16, "q8_0": T.Q8_0, "q4_0": T.Q4_0}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--depth", type=int, default=4096)
    ap.add_argument("--isa", nargs="*", default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    kernels.set_threads(args.threads)
    rng = np.random.default_rng(0)
    print(f"decode attention, depth {args.depth}, {args.threads} thread(s); best of {args.rounds} rounds of 20 calls")
    print("| shape | ISA | f16 µs | q8_0 µs | q4_0 µs | q8_0 × f16 time | q4_0 × f16 time |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for label, (n_head, n_head_kv, d) in SHAPES.items():
        q = rng.standard_normal((1, n_head, d), dtype=np.float32)
        k = rng.standard_normal((args.depth, n_head_kv, d), dtype=np.float32)
        v = rng.standard_normal((args.depth, n_head_kv, d), dtype=np.float32)
        pos = np.array([args.depth - 1], dtype=np.int64)
        caches = {name: (k.astype(np.float16), v.astype(np.float16)) if name == "f16" else
                  (quantize_rows(k, name), quantize_rows(v, name)) for name in TYPES}
        for isa in args.isa or kernels.supported_isas():
            with kernels._isa(isa):
                best = {name: float("inf") for name in TYPES}
                for _ in range(args.rounds):
                    for name, qt in TYPES.items():
                        kc, vc = caches[name]
                        start = time.perf_counter()
                        for _ in range(20):
                            kernels.attention_kv(q, kc, qt, vc, qt, pos, 1 / np.sqrt(d))
                        best[name] = min(best[name], (time.perf_counter() - start) / 20)
            us = {name: t * 1e6 for name, t in best.items()}
            print(f"| {label} | {isa} | {us['f16']:.0f} | {us['q8_0']:.0f} | {us['q4_0']:.0f} | "
                  f"{us['q8_0'] / us['f16']:.2f} | {us['q4_0'] / us['f16']:.2f} |")


if __name__ == "__main__":
    main()
