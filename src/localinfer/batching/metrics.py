"""Counters and histograms of the engine (serve/prometheus.py exposes them to Prometheus).

    localinfer_requests_total{status=...}     completed, failed, cancelled, rejected (queue full)
    localinfer_prompt_tokens_total, localinfer_prompt_tokens_cached_total, localinfer_generated_tokens_total
    localinfer_prefills_total, localinfer_prompt_tokens_shared_total   prompts evaluated; n>1 choices' copied K/V
    localinfer_draft_tokens_total, localinfer_draft_tokens_accepted_total   speculative decoding
    localinfer_prompt_seconds_total, localinfer_decode_seconds_total   time computing prompts, generating
    localinfer_ttft_seconds                   histogram: submit -> first token (queueing included)
    localinfer_decode_tokens_per_second       histogram: per request, after its first token
    localinfer_batch_size                     histogram: sequences per forward pass
    gauges from the engine's state: slots, queue length, KV cache use, prefix cache size
"""
from __future__ import annotations

import bisect
import threading

COUNTERS = {  # name -> (metric, label or None, help)
    "completed": ("requests_total", 'status="completed"', "Requests by outcome."),
    "failed": ("requests_total", 'status="failed"', None),
    "cancelled": ("requests_total", 'status="cancelled"', None),
    "rejected": ("requests_total", 'status="rejected"', None),
    "prompt_tokens": ("prompt_tokens_total", None, "Prompt tokens received."),
    "prompt_tokens_cached": ("prompt_tokens_cached_total", None, "Prompt tokens reused from the prefix cache."),
    "generated_tokens": ("generated_tokens_total", None, "Tokens generated."),
    "prefills": ("prefills_total", None, "Prompts evaluated (the n choices of one request share one)."),
    "prompt_tokens_shared": ("prompt_tokens_shared_total", None,
                             "Prompt tokens copied from another choice's KV cache instead of computed (n > 1)."),
    "completion_cache_hits": ("completion_cache_hits_total", None, "Deterministic requests answered from memory."),
    "draft_tokens": ("draft_tokens_total", None, "Tokens drafted by speculative decoding (draft model or lookup)."),
    "draft_tokens_accepted": ("draft_tokens_accepted_total", None, "Drafted tokens the model kept."),
    "prompt_seconds": ("prompt_seconds_total", None, "Seconds spent computing prompts (their uncached tokens)."),
    "decode_seconds": ("decode_seconds_total", None, "Seconds spent generating, after each request's first token."),
}
HISTOGRAMS = {
    "ttft_seconds": ((0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60), "Time to first token, queueing included."),
    "decode_tokens_per_second": ((1, 2, 5, 10, 20, 50, 100, 200), "Per-request decode speed after the first token."),
    "batch_size": ((1, 2, 4, 8, 16, 32, 64), "Sequences in one forward pass."),
}
GAUGES = {  # engine state key -> help
    "slots_total": "Slots (sequences decoded together).",
    "slots_busy": "Slots holding a request.",
    "queue_length": "Requests waiting for a slot.",
    "kv_used_tokens": "Positions of the slots' KV caches in use.",
    "kv_capacity_tokens": "Positions of all slots' KV caches.",
    "prefix_cache_bytes": "Bytes held by the prefix cache.",
    "prefix_cache_blocks": "Blocks held by the prefix cache.",
    "prefix_cache_disk_bytes": "Bytes of this model's prefix blocks in the --prefix-cache-dir folder.",
    "prefix_cache_disk_loaded_blocks": "Prefix blocks read back from the folder (computed by an earlier run).",
    "prefix_cache_disk_rejected_blocks": "Prefix block files refused (corrupt or for another model) and recomputed.",
}


class Histogram:
    def __init__(self, bounds):
        self.bounds = list(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.sum = 0.0
        self.n = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.n += 1


class Metrics:
    def __init__(self):
        self._lock = threading.Lock()
        self.counters = {k: 0 for k in COUNTERS}
        self.histograms = {k: Histogram(b) for k, (b, _) in HISTOGRAMS.items()}

    def count(self, name: str, n: float = 1) -> None:
        with self._lock:
            self.counters[name] += n

    def observe(self, name: str, value: float) -> None:
        with self._lock:
            self.histograms[name].observe(value)

    def observe_batch(self, n: int) -> None:
        self.observe("batch_size", n)

    def snapshot(self) -> tuple[dict[str, int], dict[str, Histogram]]:
        """Copies of the counters and histograms, consistent with each other (what a scrape reports)."""
        with self._lock:
            hists = {}
            for name, h in self.histograms.items():
                c = Histogram(h.bounds)
                c.counts, c.sum, c.n = list(h.counts), h.sum, h.n
                hists[name] = c
            return dict(self.counters), hists
