"""Run benchmark suites: ours per (model, threads) in a fresh process, optionally llama.cpp's
llama-bench with the same parameters interleaved in the same run, plus a memory-bandwidth probe."""
from __future__ import annotations

import glob
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

from .bench import llama_bench_name


@dataclass
class Suite:
    models: list[str]  # resolved paths
    threads: list[int]
    prompts: list[int]
    gens: list[int]
    reps: int = 3
    llama_bench: str | None = None  # path to a llama-bench binary, for side-by-side rows
    llama_bench_args: list[str] = field(default_factory=list)
    backend: str = "auto"  # localinfer's: "c", "reference" (the numpy oracle) or "auto"
    depths: list[int] = field(default_factory=lambda: [0])  # tokens in the context before each test (-d)
    rows: list[dict] = field(default_factory=list)  # filled as results arrive
    startup: list[dict] = field(default_factory=list)  # whole processes to the first token (startup.py)
    interrupted: bool = False
    cache_types: tuple[str, str] = ("f16", "f16")  # KV cache keys, values (-ctk / -ctv)
    n_gpu_layers: int = 0  # layers on the CUDA device (-ngl), for both runtimes


def run_localinfer(path: str, n_threads: int, s: Suite) -> None:
    """Adds the worker's rows to s.rows; raises KeyboardInterrupt (after adding what finished)
    if the worker was interrupted."""
    cmd = [sys.executable, "-m", "localinfer.measure.bench", path, "--threads", str(n_threads),
           "--prompts", ",".join(map(str, s.prompts)), "--gens", ",".join(map(str, s.gens)),
           "--depths", ",".join(map(str, s.depths)), "--reps", str(s.reps), "--backend", s.backend,
           "--cache-type-k", s.cache_types[0], "--cache-type-v", s.cache_types[1],
           "--n-gpu-layers", str(s.n_gpu_layers)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=None, text=True)
    interrupted = False
    while True:
        try:
            out, _ = proc.communicate()
            break
        except KeyboardInterrupt:  # a terminal's Ctrl-C reaches the worker too: it writes what
            interrupted = True     # it finished and exits, so wait for that instead of losing it
    if interrupted or proc.returncode in (130, -2):
        if out.strip():
            s.rows.extend(json.loads(out))
        raise KeyboardInterrupt
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark worker failed for {path} (exit {proc.returncode})")
    s.rows.extend(json.loads(out))


def run_llama_bench(binary: str, path: str, n_threads: int, s: Suite) -> list[dict]:
    cmd = [binary, "-m", path, "-t", str(n_threads), "-r", str(s.reps), "-o", "json",
           "-p", ",".join(map(str, s.prompts)) or "0", "-n", ",".join(map(str, s.gens)) or "0",
           *(["-d", ",".join(map(str, s.depths))] if any(s.depths) else []),  # older builds have no -d
           *(["-ngl", str(s.n_gpu_layers)] if s.n_gpu_layers else []),
           *s.llama_bench_args]
    result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"llama-bench failed (exit {result.returncode}): {result.stderr.strip()[-1500:]}")
    rows = []
    for r in json.loads(result.stdout):
        if r.get("n_prompt", 0) and r.get("n_gen", 0):
            continue  # pg tests are not part of our suite
        depth = r.get("n_depth", 0)
        kind, n = ("pp", r["n_prompt"]) if r.get("n_prompt") else ("tg", r["n_gen"])
        test = llama_bench_name(kind, n, depth)
        rows.append({"runtime": "llama.cpp", "test": test, "model": os.path.basename(path),
                     "model_type": r.get("model_type"), "model_size": r.get("model_size"),
                     "n_threads": r.get("n_threads"), "n_prompt": r.get("n_prompt"), "n_gen": r.get("n_gen"),
                     "n_depth": depth,
                     "avg_ts": r["avg_ts"], "stddev_ts": r["stddev_ts"], "samples_ts": r.get("samples_ts", []),
                     "avg_ns": r.get("avg_ns"), "samples_ns": r.get("samples_ns", []),
                     "backend": f"llama.cpp {r.get('backends', '')} {r.get('build_commit', '')}".strip(),
                     "flash_attn": r.get("flash_attn")})
    return rows


def run_suite(s: Suite, log: Callable[[str], None]) -> Suite:
    """Interleaves ours and llama.cpp per (model, threads); Ctrl-C keeps what is done."""
    try:
        for path in s.models:
            for t in s.threads:
                log(f"localinfer: {os.path.basename(path)}, {t} thread(s)")
                run_localinfer(path, t, s)
                if s.llama_bench:
                    log(f"llama-bench: {os.path.basename(path)}, {t} thread(s)")
                    s.rows.extend(run_llama_bench(s.llama_bench, path, t, s))
    except KeyboardInterrupt:
        s.interrupted = True
        log("interrupted: reporting the results so far")
    return s


def ratios(rows: list[dict]) -> list[dict]:
    """localinfer / llama.cpp per (model, threads, test), from rows of the same run."""
    theirs = {(r["model"], r["n_threads"], r["test"]): r for r in rows if r["runtime"] == "llama.cpp"}
    out = []
    for r in rows:
        key = (r["model"], r["n_threads"], r["test"])
        if r["runtime"] == "localinfer" and key in theirs:
            out.append({"model": r["model"], "n_threads": r["n_threads"], "test": r["test"],
                        "localinfer_ts": r["avg_ts"], "llama_cpp_ts": theirs[key]["avg_ts"],
                        "ratio": r["avg_ts"] / theirs[key]["avg_ts"]})
    return out


def last_level_cache_bytes() -> int | None:
    """The largest CPU cache's size from sysfs (Linux), or None where it is not told."""
    sizes = []
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for index in os.listdir(base):
            try:
                with open(os.path.join(base, index, "size")) as f:
                    text = f.read().strip()
            except OSError:
                continue
            unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            digits = text.rstrip("KMG")
            if digits.isdigit():
                sizes.append(int(digits) * unit)
    except OSError:
        return None
    return max(sizes) if sizes else None


def memory_bandwidth(size_mib: int | None = None, reps: int = 5, threads: int | None = None) -> dict:
    """Best-of-reps read and copy bandwidth in GB/s, copy counting read + write bytes.

    With the C kernels: their thread pool (`threads`, default the kernels' own count) streaming a
    buffer 4x the last-level cache (at least 512 MiB), the figure decode is judged against (it reads
    the weights with the same threads). Without them: numpy on one thread, as a fallback.
    `numpy_read_gbps` is the one-thread numpy figure in both cases, for comparison."""
    import numpy as np

    from ..backend import kernels
    if size_mib is None:
        llc = last_level_cache_bytes() or 0
        size_mib = max(512, -(-4 * llc // 2**20))
    n = size_mib * 2**20 // 8
    a = np.ones(n, dtype=np.float64)
    b = np.empty_like(a)
    read, copy = [], []
    for _ in range(reps):
        t = time.perf_counter()
        a.sum()
        read.append(a.nbytes / (time.perf_counter() - t) / 1e9)
        t = time.perf_counter()
        np.copyto(b, a)
        copy.append(2 * a.nbytes / (time.perf_counter() - t) / 1e9)  # read + write
    del a, b
    out = {"size_mib": size_mib, "read_gbps": max(read), "copy_gbps": max(copy), "threads": 1, "tool": "numpy",
           "numpy_read_gbps": max(read)}
    if not kernels.available():
        return out
    previous = kernels.get_threads()
    try:
        if threads:
            kernels.set_threads(threads)
        bw = kernels.memory_bandwidth(size_mib * 2**20, reps)
        out.update(read_gbps=bw["read_bps"] / 1e9, copy_gbps=bw["copy_bps"] / 1e9, threads=kernels.get_threads(),
                   tool=f"C pool ({kernels.isa()})")
    finally:
        kernels.set_threads(previous)
    return out


def machine() -> dict:
    """The CPU and system a figure was measured on; "cpu_detail" is what tells CPU kinds apart (family,
    model, the SIMD extensions the kernels use, cache sizes), "" where /proc and /sys do not say."""
    cpu = platform.processor() or platform.machine()
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if not line.strip():
                    break   # the first CPU's block is enough
                info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    cpu = info.get("model name", cpu)
    return {"cpu": cpu, "cpu_detail": _cpu_detail(info), "n_cpus": os.cpu_count(), "machine": platform.machine(),
            "python": platform.python_version(), "system": f"{platform.system()} {platform.release()}"}


_SIMD_FLAGS = {"avx2": "AVX2", "avx512f": "AVX-512", "avx512_vnni": "VNNI", "avx_vnni": "AVX-VNNI", "asimd": "NEON",
               "asimddp": "dotprod", "sve": "SVE"}


def _cpu_detail(info: dict[str, str]) -> str:
    parts = []
    if "cpu family" in info:
        parts.append(f"family {info['cpu family']} model {info.get('model', '?')}")
    flags = set((info.get("flags") or info.get("Features") or "").split())
    simd = [label for flag, label in _SIMD_FLAGS.items() if flag in flags]
    if simd:
        parts.append(" ".join(simd))
    caches = []
    for index in sorted(glob.glob("/sys/devices/system/cpu/cpu0/cache/index*")):
        try:
            with open(f"{index}/level") as f:
                level = f.read().strip()
            with open(f"{index}/type") as f:
                kind = f.read().strip()
            with open(f"{index}/size") as f:
                size = f.read().strip()
        except OSError:
            continue
        if kind != "Instruction":
            caches.append(f"L{level}{'d' if level == '1' else ''} {size}")
    if caches:
        parts.append(", ".join(caches))
    return "; ".join(parts)
