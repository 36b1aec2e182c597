"""Kernel timings (a measurement, not a test): GEMV and GEMM per ISA and thread count,
against numpy's float32 matmul of the dequantized matrix in the same run.

    python csrc/bench_kernels.py [--isa avx512] [--threads 1 2] [--quick] [--types IQ4_XS Q4_K]
    python csrc/bench_kernels.py --stream [--isa avx2] [--threads 2]

--stream: the decode GEMV's weight GB/s on a Llama-3.2-1B ffn matrix (8192 x 2048) that stays in the
cache, then streaming ~1.5 GB of such matrices (beyond any last-level cache), beside the C bandwidth
probe: if the cached figure is near the streamed one, the dot's arithmetic is the limit, not memory.

Shapes are the SmolLM2 / Gemma-3 ones: ffn_down 576x1536 (Q4_1), the output matrix
49152x576 (Q8_0), and the prefill GEMM of 512 tokens. Random blocks with finite scales.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from gguf import GGMLQuantizationType as T

from localinfer import kernels
from localinfer.quant import FORMATS, dequantize


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
    args = ap.parse_args()
    if args.stream:
        return stream(args.isa or [kernels.isa()], args.threads)
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


def stream(isas: list[str], threads: list[int], total_bytes: float = 1.5e9) -> None:
    x = np.random.default_rng(0).standard_normal((1, 2048)).astype(np.float32)
    for isa in isas:
        with kernels._isa(isa):
            for nt in threads:
                kernels.set_threads(nt)
                probe = kernels.memory_bandwidth(1 << 30, reps=3, copy=False)["read_bps"] / 1e9
                print(f"{isa} {nt} thr: C bandwidth probe reads {probe:.1f} GB/s")
                for qtype in (T.Q4_0, T.Q4_K, T.Q6_K, T.Q8_0):
                    base = random_weights(qtype, 8192, 2048)
                    mats = [kernels.prepare(np.roll(base, i, axis=0), qtype)
                            for i in range(max(2, int(total_bytes // base.nbytes)))]
                    cached = base.nbytes / best_time(lambda: mats[0].matmul(x))

                    def all_once():
                        for mat in mats:
                            mat.matmul(x)
                    streamed = base.nbytes * len(mats) / best_time(all_once, min_time=1.0, min_reps=3)
                    print(f"  {qtype.name:5s} cached {base.nbytes / 2**20:5.1f} MiB: {cached / 1e9:5.1f} GB/s; "
                          f"streaming {len(mats)} of them ({base.nbytes * len(mats) / 2**30:.2f} GiB): "
                          f"{streamed / 1e9:5.1f} GB/s ({100 * streamed / 1e9 / probe:.0f}% of the probe)")
                    del mats


if __name__ == "__main__":
    main()
