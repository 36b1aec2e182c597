"""Kernel timings (a measurement, not a test): GEMV and GEMM per ISA and thread count,
against numpy's float32 matmul of the dequantized matrix in the same run.

    python csrc/bench_kernels.py [--isa avx512] [--threads 1 2] [--quick] [--types IQ4_XS Q4_K]
    python csrc/bench_kernels.py --stream [--isa avx2] [--threads 2]

    python csrc/bench_kernels.py --x4 [--isa avx512 avx2] [--threads 1 2] [--types Q6_K] [--reps 40]

--x4: the decode GEMV (one activation row) over a matrix repacked into x4 groups against the same
matrix's rows, interleaved call by call in one run (a busy machine slows both alike): the least wall
time of each and the least process CPU time of a call (all the pool's threads), per shape.

--stream: the decode GEMV's weight GB/s on a Llama-3.2-1B ffn matrix (8192 x 2048), row-major and
repacked (the layout decode reads, where the ISA has one), that stays in the cache, then streaming
~1.5 GB of such matrices (beyond any last-level cache), beside the C bandwidth probe: if the cached
figure is near the streamed one, the dot's arithmetic is the limit, not memory.

Shapes are the SmolLM2 / Gemma-3 ones: ffn_down 576x1536 (Q4_1), the output matrix
49152x576 (Q8_0), and the prefill GEMM of 512 tokens. Random blocks with finite scales.
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np
from gguf import GGMLQuantizationType as T

from localinfer.backend import kernels
from localinfer.formats import FORMATS, dequantize


def random_weights(qtype: T, n_out: int, k: int, seed: int = 0) -> np.ndarray:
    fmt = FORMATS[qtype]
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(n_out * k // fmt.block_size, fmt.type_size), dtype=np.uint8)
    # small finite fp16 scales where ggml puts them (first field of legacy blocks, last for Q6_K)
    offsets = {T.Q6_K: (208,), T.Q4_K: (0, 2), T.Q4_1: (0, 2), T.Q8_0: (0,), T.Q4_0: (0,), T.Q5_0: (0,),
               T.IQ4_NL: (0,), T.IQ4_XS: (0,), T.TQ1_0: (52,), T.TQ2_0: (64,), T.IQ2_XXS: (0,), T.IQ2_XS: (0,),
               T.IQ2_S: (0,), T.IQ3_XXS: (0,), T.IQ3_S: (0,), T.IQ1_S: (0,)}
    for off in offsets.get(qtype, ()):
        raw[:, off : off + 2] = (rng.random(raw.shape[0]) * 0.01).astype(np.float16).view(np.uint8).reshape(-1, 2)
    if qtype == T.IQ1_M:   # d is the top nibble of each scale u16: 0x2000-ish (about 0.008) for every block
        raw[:, 49::2][:, :4] = (raw[:, 49::2][:, :4] & 0x0F) | np.array([0x00, 0x00, 0x00, 0x20], dtype=np.uint8)
    if qtype == T.MXFP4:   # e8m0 scale byte: 2^(e - 128) near 0.01
        raw[:, 0] = rng.integers(118, 124, size=raw.shape[0], dtype=np.uint8)
    return raw.reshape(n_out, -1)


def best_time(fn, min_time: float = 0.3, min_reps: int = 5) -> float:
    fn()
    times, start = [], time.perf_counter()
    while len(times) < min_reps or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--isa", nargs="*", default=None)
    ap.add_argument("--threads", nargs="*", type=int, default=[1, 2])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--types", nargs="*", default=None, help="only these weight types, e.g. IQ4_XS Q4_K")
    ap.add_argument("--stream", action="store_true", help="cached vs streamed GEMV GB/s (see above)")
    ap.add_argument("--x4", action="store_true", help="repacked vs row-major decode GEMV (see above)")
    ap.add_argument("--reps", type=int, default=40, help="--x4: calls of each layout per shape")
    args = ap.parse_args()
    if args.stream:
        return stream(args.isa or [kernels.isa()], args.threads)
    if args.x4:
        return x4_vs_rows(args.isa or [kernels.isa()], args.threads, args.types, args.reps)
    isas = args.isa or kernels.supported_isas()
    rng = np.random.default_rng(1)
    cases = [
        ("GEMV", T.Q4_1, 576, 1536, 1),
        ("GEMV", T.Q8_0, 49152, 576, 1),
        ("GEMV", T.Q4_K, 640, 2048, 1),
        ("GEMV", T.Q6_K, 640, 2048, 1),
        ("GEMV", T.Q5_0, 2048, 640, 1),
        ("GEMM", T.Q4_1, 576, 1536, 512),
        ("GEMM", T.Q4_K, 640, 2048, 512),
        ("GEMM", T.Q8_0, 576, 1536, 512),
        ("GEMM", T.Q5_0, 2048, 640, 512),
        ("GEMM", T.Q6_K, 640, 2048, 512),
        ("GEMM", T.Q4_1, 1536, 576, 64),
        # the 4-bit and ternary types of downloaded files, on a Llama-3.2-1B ffn_up (8192 x 2048)
        ("GEMV", T.Q4_0, 8192, 2048, 1),
        ("GEMV", T.Q4_K, 8192, 2048, 1),
        ("GEMV", T.IQ4_NL, 8192, 2048, 1),
        ("GEMV", T.IQ4_XS, 8192, 2048, 1),
        ("GEMV", T.MXFP4, 8192, 2048, 1),
        ("GEMV", T.TQ2_0, 8192, 2048, 1),
        ("GEMV", T.TQ1_0, 8192, 2048, 1),
        # the grid i-quants (1.5-3.4 bits), same shape
        ("GEMV", T.IQ2_XXS, 8192, 2048, 1),
        ("GEMV", T.IQ3_XXS, 8192, 2048, 1),
        ("GEMV", T.IQ2_XS, 8192, 2048, 1),
        ("GEMV", T.IQ3_S, 8192, 2048, 1),
        ("GEMV", T.IQ2_S, 8192, 2048, 1),
        ("GEMV", T.IQ1_S, 8192, 2048, 1),
        ("GEMV", T.IQ1_M, 8192, 2048, 1),
        ("GEMM", T.Q4_K, 2048, 2048, 128),
        ("GEMM", T.IQ4_XS, 2048, 2048, 128),
        ("GEMM", T.MXFP4, 2048, 2048, 128),
        ("GEMM", T.IQ2_XXS, 2048, 2048, 128),
        ("GEMM", T.IQ2_XS, 2048, 2048, 128),
        ("GEMM", T.IQ1_M, 2048, 2048, 128),
    ]
    if args.quick:
        cases = cases[:2] + cases[5:7]
    if args.types:
        cases = [c for c in cases if c[1].name in args.types]
    print(f"isa available: {kernels.supported_isas()}, default threads {kernels.get_threads()}")
    for kind, qtype, n_out, k, m in cases:
        w = random_weights(qtype, n_out, k)
        x = rng.standard_normal((m, k)).astype(np.float32)
        wf = dequantize(w, qtype, (n_out, k))
        t_np = best_time(lambda: x @ wf.T)
        flops = 2.0 * m * n_out * k
        print(f"\n{kind} {qtype.name} {n_out}x{k} m={m}: W {w.nbytes / 1e6:.2f} MB quantized, "
              f"numpy f32 (dequantized, {wf.nbytes / 1e6:.1f} MB) {t_np * 1e6:9.1f} us "
              f"{flops / t_np / 1e9:7.1f} GFLOP/s {wf.nbytes / t_np / 1e9:6.1f} GB/s")
        for isa in isas:
            with kernels._isa(isa):
                for nt in args.threads:
                    kernels.set_threads(nt)
                    mat = kernels.prepare(w, qtype)
                    out = np.empty((m, n_out), np.float32)
                    t = best_time(lambda: mat.matmul(x, out))
                    print(f"  {isa:8s} {nt} thr {t * 1e6:9.1f} us  {flops / t / 1e9:7.1f} GFLOP/s  "
                          f"{w.nbytes / t / 1e9:6.1f} GB/s  x{t_np / t:5.2f} vs numpy")


# (type, n_out, k): Llama-3.2-1B's output matrix (Q6_K in its Q4_0 / Q4_K_M files) and ffn_down, then
# one that stays in L2, where the dot's arithmetic is all there is to measure
X4_SHAPES = [(T.Q6_K, 128256, 2048), (T.Q6_K, 2048, 8192), (T.Q6_K, 512, 2048),
             (T.Q4_K, 2048, 8192), (T.Q4_0, 2048, 8192), (T.Q8_0, 2048, 8192)]


def x4_vs_rows(isas: list[str], threads: list[int], types: list[str] | None, reps: int) -> None:
    shapes = [s for s in X4_SHAPES if not types or s[0].name in types]
    x = np.random.default_rng(0).standard_normal((1, max(k for _, _, k in shapes))).astype(np.float32)
    for qtype, n_out, k in shapes:
        w = random_weights(qtype, n_out, k)
        xk = x[:, :k]
        for isa in isas:
            with kernels._isa(isa):
                rows, x4 = kernels.prepare(w, qtype), kernels.prepare(w, qtype, repack=True)
                if x4.layout != kernels.LAYOUT_X4:
                    print(f"{qtype.name} {n_out}x{k} {isa}: no x4 dot on this ISA, not repacked")
                    continue
                for nt in threads:
                    kernels.set_threads(nt)
                    wall = {"rows": [], "x4": []}
                    cpu = {"rows": [], "x4": []}
                    for mat in (rows, x4):
                        mat.matmul(xk)   # warm
                    for _ in range(reps):
                        for name, mat in (("rows", rows), ("x4", x4)):
                            c0, t0 = time.process_time(), time.perf_counter()
                            mat.matmul(xk)
                            wall[name].append(time.perf_counter() - t0)
                            cpu[name].append(time.process_time() - c0)
                    bw, bx = min(wall["rows"]), min(wall["x4"])
                    cr, cx = min(cpu["rows"]), min(cpu["x4"])
                    print(f"{qtype.name} {n_out}x{k} ({w.nbytes / 2**20:.1f} MiB) {isa:6s} {nt} thr: "
                          f"wall min rows {bw * 1e6:8.0f} us ({w.nbytes / bw / 1e9:5.1f} GB/s)  "
                          f"x4 {bx * 1e6:8.0f} us ({w.nbytes / bx / 1e9:5.1f} GB/s)  rows/x4 {bw / bx:4.2f} | "
                          f"CPU min rows {cr * 1e6:8.0f} us  x4 {cx * 1e6:8.0f} us  rows/x4 {cr / cx:4.2f}")


def stream(isas: list[str], threads: list[int], total_bytes: float = 1.5e9) -> None:
    x = np.random.default_rng(0).standard_normal((1, 2048)).astype(np.float32)
    for isa in isas:
        with kernels._isa(isa):
            for nt in threads:
                kernels.set_threads(nt)
                probe = kernels.memory_bandwidth(1 << 30, reps=3, copy=False)["read_bps"] / 1e9
                print(f"{isa} {nt} thr: C bandwidth probe reads {probe:.1f} GB/s")
                for qtype, repack in itertools.product((T.Q4_0, T.Q4_K, T.Q6_K, T.Q8_0), (False, True)):
                    base = random_weights(qtype, 8192, 2048)
                    mats = [kernels.prepare(np.roll(base, i, axis=0), qtype, repack=repack)
                            for i in range(max(2, int(total_bytes // base.nbytes)))]
                    if repack and mats[0].layout == kernels.LAYOUT_ROWS:
                        continue   # no repacked layout for this type on this ISA
                    cached = base.nbytes / best_time(lambda: mats[0].matmul(x))

                    def all_once():
                        for mat in mats:
                            mat.matmul(x)
                    streamed = base.nbytes * len(mats) / best_time(all_once, min_time=1.0, min_reps=3)
                    layout = "x4  " if repack else "rows"
                    print(f"  {qtype.name:5s} {layout} cached {base.nbytes / 2**20:5.1f} MiB: {cached / 1e9:5.1f} GB/s; "
                          f"streaming {len(mats)} of them ({base.nbytes * len(mats) / 2**30:.2f} GiB): "
                          f"{streamed / 1e9:5.1f} GB/s ({100 * streamed / 1e9 / probe:.0f}% of the probe)")
                    del mats


if __name__ == "__main__":
    main()
