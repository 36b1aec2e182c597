"""Start-up: a whole process from exec to its first generated token.

Ours is `localinfer run MODEL --raw -p Hi -n 1` (Python start, imports, GGUF parse, tokenizer, weights,
one prefill and one sampled token); llama.cpp's is `llama-completion -m MODEL -p Hi -n 1 -no-cnv`
with its other defaults (warm-up included, as its users run it), both at a 4096-token context. The
two alternate in one run, each repetition after one untimed start of each, with the file in the page
cache ("warm") and, where this process may drop the page cache (root on Linux), read from disk
("cold"). Each process's peak RSS is its own VmHWM, read from /proc while it runs, the same way for both."""
from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from typing import Callable

DROP_CACHES = "/proc/sys/vm/drop_caches"


def can_drop_page_cache() -> bool:
    return sys.platform.startswith("linux") and os.geteuid() == 0 and os.access(DROP_CACHES, os.W_OK)


def drop_page_cache() -> None:
    """Every clean cached page of every file goes (root only): the next read comes from disk."""
    os.sync()
    with open(DROP_CACHES, "w") as f:
        f.write("3\n")


N_CTX = 4096  # both at the same context: llama.cpp's default is the model's trained context (128k for Llama-3)


def localinfer_command(path: str, n_threads: int) -> list[str]:
    exe = shutil.which("localinfer", path=os.path.dirname(sys.executable))
    head = [exe] if exe else [sys.executable, "-m", "localinfer.cli.main"]
    return head + ["run", path, "--raw", "-p", "Hi", "-n", "1", "--temp", "0", "-t", str(n_threads), "-c", str(N_CTX)]


def llama_completion_command(binary: str, path: str, n_threads: int) -> list[str]:
    return [binary, "-m", path, "-p", "Hi", "-n", "1", "--temp", "0", "-t", str(n_threads), "-c", str(N_CTX),
            "-no-cnv"]


def _peak_rss_mib(pid: int) -> float | None:
    """The process's VmHWM (its own mapping's high-water mark; wait4's ru_maxrss would carry this
    parent's, which survives fork and exec), None once it has exited."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _child_env() -> dict[str, str]:
    """This environment, except that Python may cache its bytecode: the untimed first start compiles
    the imports as an installed package's are, where PYTHONDONTWRITEBYTECODE (set in some CI and
    container images) would have every timed start compile ~70 modules again (~0.1 s)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def time_command(cmd: list[str], cold: bool, poll_s: float = 0.02) -> tuple[float, float | None]:
    """(seconds from exec to exit, peak RSS in MiB); raises RuntimeError naming the command if it
    fails. The exit is timed by a thread waiting for it, not by the polling. The peak is the last
    VmHWM read before the exit (every `poll_s`: a high-water mark only grows, so this misses at most
    what the last `poll_s` added); None where /proc has no VmHWM."""
    if cold:
        drop_page_cache()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=_child_env())
    peak = None
    stderr, ended = [], []
    reader = threading.Thread(target=lambda: stderr.append(proc.stderr.read()), daemon=True)
    reader.start()  # a full pipe must not stall the process while we poll
    waiter = threading.Thread(target=lambda: (proc.wait(), ended.append(time.perf_counter())), daemon=True)
    waiter.start()
    while waiter.is_alive():
        peak = _peak_rss_mib(proc.pid) or peak
        waiter.join(poll_s)
    seconds = ended[0] - t0
    reader.join()
    proc.stderr.close()
    if proc.returncode != 0:
        tail = b"".join(stderr).decode("utf-8", "replace").strip()[-800:]
        raise RuntimeError(f"{os.path.basename(cmd[0])} failed (exit {proc.returncode}): {tail}")
    return seconds, peak


def measure_startup(path: str, n_threads: int, reps: int, llama_completion: str | None = None,
                    log: Callable[[str], None] = lambda msg: None) -> list[dict]:
    """One row per page-cache state: median seconds of ours and (if given) llama-completion's."""
    ours = localinfer_command(path, n_threads)
    theirs = llama_completion_command(llama_completion, path, n_threads) if llama_completion else None
    rows = []
    for cache in ("warm", "cold") if can_drop_page_cache() else ("warm",):
        time_command(ours, False)  # untimed: imports compiled, file in the page cache
        if theirs:
            time_command(theirs, False)
        a, b, rss_a, rss_b = [], [], [], []
        for i in range(reps):
            seconds, rss = time_command(ours, cache == "cold")
            a.append(seconds), rss_a.append(rss)
            if theirs:
                seconds, rss = time_command(theirs, cache == "cold")
                b.append(seconds), rss_b.append(rss)
            log(f"  start to first token ({cache} page cache) rep {i + 1}/{reps}: localinfer {a[-1]:.3f} s"
                + (f", llama-completion {b[-1]:.3f} s" if b else ""))
        row = {"model": os.path.basename(path), "n_threads": n_threads, "page_cache": cache,
               "localinfer_s": statistics.median(a), "localinfer_samples_s": a, "localinfer_rss_mib": _max(rss_a)}
        if b:
            row.update(llama_cpp_s=statistics.median(b), llama_cpp_samples_s=b, llama_cpp_rss_mib=_max(rss_b),
                       ratio=statistics.median(a) / statistics.median(b))
        rows.append(row)
    return rows


def _max(values: list) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def startup_table(rows: list[dict]) -> str:
    """Markdown: the medians and llama.cpp's time over ours (> 1: we start faster)."""
    out = ["| model | threads | page cache | localinfer s | llama-completion s | speed vs llama.cpp "
           "| peak RSS MiB localinfer / llama.cpp |", "|---|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        theirs = f"{r['llama_cpp_s']:.3f}" if "llama_cpp_s" in r else "-"
        ratio = f"**{1 / r['ratio']:.2f}**" if "ratio" in r else "-"
        rss = _mib(r["localinfer_rss_mib"]) + (f" / {_mib(r['llama_cpp_rss_mib'])}" if "llama_cpp_s" in r else "")
        out.append(f"| {r['model']} | {r['n_threads']} | {r['page_cache']} | {r['localinfer_s']:.3f} | {theirs} | {ratio} "
                   f"| {rss} |")
    return "\n".join(out)
