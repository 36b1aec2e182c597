"""Progress of a model load, for a splash screen: `load(..., progress=callback)` calls
callback(fraction, stage) with fraction rising from 0.0 to 1.0 and stage one of STAGES.

Most of a load is the weights: reading them from the mapping (page faults), stacking q|k|v and
gate|up and preparing them for the kernels. Their share is counted in bytes of the file's tensors
as the architecture's loader first reads each one (GGUFFile.on_tensor_read).
"""
from __future__ import annotations

from typing import Callable

STAGES = ("mapping", "tokenizer", "weights", "ready")
_WEIGHTS_FROM, _WEIGHTS_TO = 0.10, 0.95  # the weights' share of the bar
MIN_STEP = 0.01  # the least rise of the bar worth a call within a stage


class LoadProgress:
    def __init__(self, callback: Callable[[float, str], object] | None):
        if callback is not None and not callable(callback):
            raise TypeError(f"progress must be a callable(fraction, stage), got {type(callback).__name__}")
        self.callback = callback
        self.fraction = 0.0
        self._gguf, self._seen, self._done, self._total = None, set(), 0, 0
        self._stage, self._reported = None, 0.0  # the last call's

    def report(self, fraction: float, stage: str) -> None:
        """Calls back when the stage changes or the bar has moved by MIN_STEP since the last call
        (a model's hundreds of tensors are not hundreds of calls). A callback that raises stops the
        load with its exception."""
        self.fraction = max(self.fraction, min(1.0, fraction))  # never backwards
        if self.callback is None:
            return
        if stage == self._stage and self.fraction - self._reported < MIN_STEP:
            return
        self._stage, self._reported = stage, self.fraction
        self.callback(self.fraction, stage)

    def watch_weights(self, gguf) -> None:
        """Reports the weights stage as the loader reads gguf's tensors, until finish()."""
        if self.callback is None:
            return
        self._gguf, self._total = gguf, max(1, sum(t.nbytes for t in gguf.tensors.values()))
        gguf.on_tensor_read = self._tensor_read
        self.report(_WEIGHTS_FROM, "weights")

    def _tensor_read(self, name: str) -> None:
        if name in self._seen:  # tied embeddings, a tensor read twice: counted once
            return
        self._seen.add(name)
        self._done += self._gguf.tensors[name].nbytes
        self.report(_WEIGHTS_FROM + (_WEIGHTS_TO - _WEIGHTS_FROM) * self._done / self._total, "weights")

    def finish(self) -> None:
        if self._gguf is not None:
            self._gguf.on_tensor_read = None
        self.report(1.0, "ready")
