"""Load time vs model size (not a test): a fresh `localinfer run FILE -n 1` process timed from exec
to exit, i.e. to its first token, with the file in the page cache ("warm") and evicted ("cold").

Why per-file eviction: /proc/sys/vm/drop_caches empties the cache of every process on a shared
machine (and needs root); posix_fadvise(POSIX_FADV_DONTNEED) on the one file asks the kernel to
drop only its clean pages, which is what a replica on a new node (or after eviction) starts from.
The kernel keeps pages that another process has mapped, so a file some other process holds open
stays (partly) warm: the cold column is then an upper bound on speed, not a measurement of disk.

    python -m localinfer.measure.load_time FILE [FILE ...] --reps 2 --threads 2
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

from .bench_suite import machine
from .startup import localinfer_command, time_command


def evict_from_page_cache(path: str) -> None:
    """Ask the kernel to drop this file's clean cached pages (the next read comes from disk)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def warm_page_cache(path: str, chunk: int = 16 << 20) -> None:
    """Read the whole file once so its pages are cached."""
    with open(path, "rb", buffering=0) as f:
        while f.read(chunk):
            pass


def measure_file(path: str, threads: int, reps: int) -> dict:
    cmd = localinfer_command(path, threads)
    cold, warm, rss = [], [], []
    for _ in range(reps):
        evict_from_page_cache(path)
        seconds, peak = time_command(cmd, cold=False)
        cold.append(seconds), rss.append(peak or 0)
        warm_page_cache(path)
        seconds, peak = time_command(cmd, cold=False)
        warm.append(seconds), rss.append(peak or 0)
    return {"file": os.path.basename(path), "gib": os.path.getsize(path) / 2**30, "cold_s": cold, "warm_s": warm,
            "peak_rss_mib": max(rss)}


def table(rows: list[dict]) -> str:
    out = ["| file | GiB | cold s (median) | warm s (median) | cold - warm s | peak RSS MiB |",
           "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        c, w = statistics.median(r["cold_s"]), statistics.median(r["warm_s"])
        out.append(f"| {r['file']} | {r['gib']:.2f} | {c:.2f} | {w:.2f} | {c - w:.2f} | {r['peak_rss_mib']:.0f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    time_command(localinfer_command(args.files[0], args.threads), cold=False)  # untimed: imports compiled
    rows = []
    for path in args.files:
        rows.append(measure_file(path, args.threads, args.reps))
        print(rows[-1], file=sys.stderr, flush=True)
    m = machine()
    print(f"{m['cpu']}, {m['n_cpus']} CPUs; `localinfer run FILE --raw -p Hi -n 1 -t {args.threads}`, "
          f"{args.reps} reps; cold = posix_fadvise(DONTNEED) on the file before the run\n")
    print(table(rows))


if __name__ == "__main__":
    main()
