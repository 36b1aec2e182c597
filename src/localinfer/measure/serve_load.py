"""HTTP load on a running server (bench_serve.py, bench_serve_compare.py, bench_restart.py): one
streamed completion timed from the client's side, and a level of N concurrent clients."""
from __future__ import annotations

import http.client
import json
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlparse

import numpy as np


@dataclass
class Sample:
    ttft_s: float
    tokens: int
    total_s: float


@dataclass
class Level:
    concurrency: int
    samples: list[Sample] = field(default_factory=list)
    wall_s: float = 0.0
    errors: int = 0

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.samples)

    @property
    def tps(self) -> float:
        return self.tokens / self.wall_s if self.wall_s else 0.0

    def ttft_ms(self, q: float) -> float:
        return float(np.percentile([s.ttft_s for s in self.samples], q)) * 1000 if self.samples else float("nan")


def stream_request(url: str, path: str, body: dict, timeout: float = 600) -> Sample:
    """One streaming request; TTFT is taken at the first event that carries text."""
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    t0 = time.perf_counter()
    ttft, tokens = None, 0
    try:
        conn.request("POST", path, json.dumps({**body, "stream": True, "stream_options": {"include_usage": True}}),
                     {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
        for line in r:
            if not line.startswith(b"data: {"):
                continue
            event = json.loads(line[6:])
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
            choices = event.get("choices") or []
            if ttft is None and choices and (choices[0].get("text") or choices[0].get("delta", {}).get("content")):
                ttft = time.perf_counter() - t0
    finally:
        conn.close()
    total = time.perf_counter() - t0
    return Sample(ttft if ttft is not None else total, tokens, total)


def run_level(url: str, concurrency: int, requests_per_client: int, max_tokens: int, log) -> Level:
    level = Level(concurrency)
    lock = threading.Lock()

    def client(c: int) -> None:
        for i in range(requests_per_client):
            start = 1 + 37 * (c * requests_per_client + i)
            body = {"prompt": ", ".join(str(start + j) for j in range(4)) + ",", "max_tokens": max_tokens,
                    "seed": c * 1000 + i}
            try:
                sample = stream_request(url, "/v1/completions", body)
            except Exception as e:  # counted and reported, the level goes on
                log(f"  client {c}: {e}")
                with lock:
                    level.errors += 1
                continue
            with lock:
                level.samples.append(sample)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    level.wall_s = time.perf_counter() - t0
    return level
