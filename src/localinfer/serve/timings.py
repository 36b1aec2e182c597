"""llama-server's `timings` object (its slot statistics), which its clients read for speed:

    {"cache_n": prompt tokens reused from the cache, "prompt_n": prompt tokens computed,
     "prompt_ms", "prompt_per_token_ms", "prompt_per_second",
     "predicted_n": tokens generated, "predicted_ms": the time after the first of them,
     "predicted_per_token_ms", "predicted_per_second"}

with "draft_n" / "draft_n_accepted" under speculative decoding. Sent on every generation
response, whole or on a stream's last chunk, on the OpenAI routes as llama-server does (an extra
field the OpenAI clients keep) and on /completion. The rates are llama-server's formulas over
localinfer's own measures (generate.Timings), 0 where a time is 0.
"""
from __future__ import annotations

from ..generate import Timings


def _per(n: float, d: float) -> float:
    return n / d if d > 0 else 0.0


def timings_json(t: Timings) -> dict:
    prompt_n = t.prompt_tokens - t.prompt_cached
    prompt_ms, predicted_ms = t.prefill_s * 1e3, t.decode_s * 1e3
    out = {"cache_n": t.prompt_cached, "prompt_n": prompt_n, "prompt_ms": prompt_ms,
           "prompt_per_token_ms": _per(prompt_ms, prompt_n), "prompt_per_second": _per(1e3 * prompt_n, prompt_ms),
           "predicted_n": t.generated_tokens, "predicted_ms": predicted_ms,
           "predicted_per_token_ms": _per(predicted_ms, t.generated_tokens),
           "predicted_per_second": _per(1e3 * t.generated_tokens, predicted_ms)}
    if t.draft_tokens:
        out.update(draft_n=t.draft_tokens, draft_n_accepted=t.draft_accepted)
    return out
