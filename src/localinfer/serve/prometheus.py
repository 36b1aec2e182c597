"""/metrics through prometheus_client: a registry per app whose one collector reads, at each scrape,
the counters and histograms each loaded model's engine keeps (batching/metrics.py) and its state.

The metric names are those the server always had (localinfer_requests_total{status=...},
localinfer_ttft_seconds, localinfer_slots_busy ...); every sample carries a `model` label, so one
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


def metrics_registry(models) -> CollectorRegistry:
    """A registry of this app's own (not prometheus_client's global one: two apps in one process,
    or a test's several servers, must not mix their figures)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EngineCollector(models))
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
