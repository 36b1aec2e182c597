"""Many requests decoded together: the engine (slots, a scheduler thread, one forward pass per
step), requests and their sampling parameters, the prefix and completion caches, and the metrics.

The names below are imported on first use: `batching.config` (what the command line reads for its
options) then costs no numpy and no engine."""
from __future__ import annotations

import importlib

_EXPORTS = {"Engine": ".engine", "QueueFullError": ".engine", "Request": ".request",
            "SamplingParams": "..sampling.params"}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
