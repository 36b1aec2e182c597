"""Measuring the runtime, not running it: speed (bench, bench_suite, bench_serve, reports), quality
(perplexity, KL divergence and its base file, the per-quant-type quality table)."""
