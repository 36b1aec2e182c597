"""A byte-count progress bar on stderr for downloads."""
from __future__ import annotations

import sys
import time


class ByteProgress:
    def __init__(self, label: str, stream=None, min_interval: float = 0.1):
        self.label, self.stream = label, stream or sys.stderr
        self.min_interval, self.last = min_interval, 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        finished = done >= total
        if not finished and now - self.last < self.min_interval:
            return
        self.last = now
        frac = min(1.0, done / total) if total else 1.0
        bar = "#" * int(frac * 30)
        self.stream.write(f"\r{self.label} [{bar:<30}] {done / 2**20:7.1f}/{total / 2**20:.1f} MiB {frac:4.0%}")
        if finished:
            self.stream.write("\n")
        self.stream.flush()
