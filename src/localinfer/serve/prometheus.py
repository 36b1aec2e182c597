"""/metrics through prometheus_client: a registry per app whose one collector reads, at each scrape,
the counters and histograms each loaded model's engine keeps (batching/metrics.py) and its state.

The metric names are those the server always had (localinfer_requests_total{status=...},
localinfer_ttft_seconds, localinfer_slots_busy ...), and beside them llama-server's `llamacpp:` names
(LLAMACPP below), for the dashboards built for it; every sample carries a `model` label, so one
server with several models loaded reports each on its own.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from ..batching.metrics import COUNTERS, GAUGES, HISTOGRAMS

PREFIX = "localinfer_"


class EngineCollector:
    """Collector over registry.loaded(): the Served (name, engine) pairs a scrape reports."""

    def __init__(self, models):
        self.models = models

    def collect(self):
        served = list(self.models.loaded())
        counters: dict[str, CounterMetricFamily] = {}
        for key, (name, label, help_) in COUNTERS.items():
            if name not in counters:
                labels = ["model"] + (["status"] if label else [])
                counters[name] = CounterMetricFamily(PREFIX + name, help_ or "", labels=labels)
        histograms = {name: HistogramMetricFamily(PREFIX + name, help_, labels=["model"])
                      for name, (_, help_) in HISTOGRAMS.items()}
        gauges = {key: GaugeMetricFamily(PREFIX + key, help_, labels=["model"]) for key, help_ in GAUGES.items()}
        for s in served:
            counts, hists = s.engine.metrics.snapshot()
            for key, (name, label, _) in COUNTERS.items():
                status = [label.split('"')[1]] if label else []
                counters[name].add_metric([s.name, *status], counts[key])
            for name, h in hists.items():
                cumulative, buckets = 0, []
                for bound, c in zip([format(b, "g") for b in h.bounds] + ["+Inf"], h.counts):
                    cumulative += c
                    buckets.append((bound, cumulative))
                histograms[name].add_metric([s.name], buckets, h.sum)
            state = s.engine.state()
            for key in GAUGES:
                if state.get(key) is not None:
                    gauges[key].add_metric([s.name], state[key])
        yield from counters.values()
        yield from histograms.values()
        yield from (g for g in gauges.values() if g.samples)
        yield from _llamacpp(served)


def _per(n: float, d: float) -> float:
    return n / d if d > 0 else 0.0


# llama-server's metrics (server_task_result_metrics::to_metrics): name -> (kind, help, value from the
# engine's counters c, histograms h and state s). Its averages are over the server's life here.
LLAMACPP = {
    "prompt_tokens": ("counter", "Number of prompt tokens processed, excluding cached tokens",
                      lambda c, h, s: c["prompt_tokens"] - c["prompt_tokens_cached"]),
    "prompt_tokens_cached": ("counter", "Number of prompt tokens reused from the cache",
                             lambda c, h, s: c["prompt_tokens_cached"]),
    "prompt_seconds": ("counter", "Total time spent processing prompts", lambda c, h, s: c["prompt_seconds"]),
    "tokens_predicted": ("counter", "Number of generation tokens processed", lambda c, h, s: c["generated_tokens"]),
    "tokens_predicted_seconds": ("counter", "Total time spent generating tokens", lambda c, h, s: c["decode_seconds"]),
    "n_decode": ("counter", "Total number of forward passes", lambda c, h, s: s["steps"]),
    "n_tokens_max": ("counter", "Largest observed sequence length (prompt + generation)",
                     lambda c, h, s: s["n_tokens_max"]),
    "spec_decode_num_draft_tokens": ("counter", "Speculative: Total draft tokens generated",
                                     lambda c, h, s: c["draft_tokens"]),
    "spec_decode_num_accepted_tokens": ("counter", "Speculative: Total draft tokens accepted by the target model",
                                        lambda c, h, s: c["draft_tokens_accepted"]),
    "prompt_tokens_seconds": ("gauge", "Average prompt throughput in tokens/s", lambda c, h, s: _per(
        c["prompt_tokens"] - c["prompt_tokens_cached"], c["prompt_seconds"])),
    "predicted_tokens_seconds": ("gauge", "Average generation throughput in tokens/s",
                                 lambda c, h, s: _per(c["generated_tokens"], c["decode_seconds"])),
    "requests_processing": ("gauge", "Number of requests processing", lambda c, h, s: s["slots_busy"]),
    "requests_deferred": ("gauge", "Number of requests deferred", lambda c, h, s: s["queue_length"]),
    "n_busy_slots_per_decode": ("gauge", "Average number of busy slots per forward pass",
                                lambda c, h, s: _per(h["batch_size"].sum, h["batch_size"].n)),
}


def _llamacpp(served):
    families = {name: (CounterMetricFamily if kind == "counter" else GaugeMetricFamily)(
        "llamacpp:" + name, help_, labels=["model"]) for name, (kind, help_, _) in LLAMACPP.items()}
    for s in served:
        counts, hists = s.engine.metrics.snapshot()
        state = s.engine.state()
        for name, (_, _, value) in LLAMACPP.items():
            families[name].add_metric([s.name], value(counts, hists, state))
    yield from families.values()


def metrics_registry(models) -> CollectorRegistry:
    """A registry of this app's own (not prometheus_client's global one: two apps in one process,
    or a test's several servers, must not mix their figures)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EngineCollector(models))
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
