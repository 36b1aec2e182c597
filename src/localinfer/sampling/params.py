"""A request's sampling settings, with llama.cpp's defaults: the one place they are written.

The library (`Model.generate`), the engine, speculative decoding, the OpenAI and Ollama routes and
the command line all take their defaults from here; `samplers.sampler_for` / `processors_for` turn
one into the sampler and the logits processors. Nothing is imported here, so the command line can
show the defaults without loading numpy.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.8  # <= 0: greedy
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repeat_last_n: int = 64
    seed: int | None = None
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias), from logit_bias.check_logit_bias

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    @property
    def deterministic(self) -> bool:
        """Whether the same prompt always gives the same tokens (greedy, or a fixed seed)."""
        return self.greedy or self.seed is not None
