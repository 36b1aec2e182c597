"""Decode speed with a JSON schema against without one, in the same run (not a test).

For each model: the same chat prompt and sampler settings in two fresh contexts, one decoding
free text and one constrained by a JSON schema, advanced one token each in turn (so the
machine's noise falls on both alike), N tokens, `reps` times. Reported per model: decode
tokens/s of both and their ratio (medians over the reps), and the grammar's own cost per token
(computing the mask, applying it to the logits, accepting the sampled token) against the time
of a constrained decode step.

The schema asks for a long list of records with free-text strings: inside a string almost every
token is allowed, which is where a token mask costs the most. minItems keeps the grammar from
ending before N tokens.
"""
from __future__ import annotations

import statistics
import time

from .bench_suite import machine

SCHEMA = {
    "type": "object",
    "properties": {"people": {"type": "array", "minItems": 64, "items": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "city": {"type": "string"},
                       "age": {"type": "integer", "minimum": 0, "maximum": 120}, "bio": {"type": "string"}},
        "required": ["name", "city", "age", "bio"], "additionalProperties": False}}},
    "required": ["people"], "additionalProperties": False,
}
PROMPT = [{"role": "user", "content": "List some people with their name, city, age and a short bio, as JSON."}]


class _TimedMatcher:
    """A matcher that adds up the time spent in it (mask + accept)."""

    def __init__(self, inner):
        self.inner, self.seconds = inner, 0.0

    def mask(self, logits):
        t0 = time.perf_counter()
        out = self.inner.mask(logits)
        self.seconds += time.perf_counter() - t0
        return out

    def accept(self, token):
        t0 = time.perf_counter()
        self.inner.accept(token)
        self.seconds += time.perf_counter() - t0

    @property
    def done(self):
        return self.inner.done


def _lockstep(model, prompt, grammar, n_gen: int, seed: int) -> dict:
    """Free and constrained decoding of one prompt in two contexts, one token of each in turn: the
    machine's noise (other processes, frequency changes) then falls on both alike. -> seconds
    per decoded token of each (after the first token), and the seconds inside the matcher."""
    from ..generate import Generation, context_steps
    from ..sampling.params import SamplingParams

    matcher = _TimedMatcher(grammar.matcher())
    params = SamplingParams(temperature=0.8, seed=seed)
    n_ctx = len(prompt) + n_gen + 8
    runs = {name: context_steps(model.new_context(n_ctx), Generation(model.tokenizer, prompt, n_ctx, params,
                                                                     matcher=m))
            for name, m in (("free", None), ("schema", matcher))}
    spent = {k: [] for k in runs}
    try:
        for steps in runs.values():
            next(steps)  # the prefill and the first token are not decode
        in_grammar = matcher.seconds
        for _ in range(n_gen - 1):
            if matcher.done:
                break
            for name, steps in runs.items():
                t0 = time.perf_counter()
                next(steps)
                spent[name].append(time.perf_counter() - t0)
    finally:
        for steps in runs.values():
            steps.close()
    return {"free": spent["free"], "schema": spent["schema"], "in_grammar": matcher.seconds - in_grammar}


def run_model(path: str, n_gen: int = 128, reps: int = 3, n_threads: int | None = None, log=None) -> dict:
    from ..constrain import compile_grammar
    from ..model import Model

    model = Model(path, n_ctx=2 * (n_gen + 256), n_threads=n_threads)
    model.wait_repacked()   # measured as the model stays (arch/deferred_repack.py)
    try:
        prompt = model.chat_tokens(PROMPT)
        t0 = time.perf_counter()
        grammar = compile_grammar(model.tokenizer, json_schema=SCHEMA)  # tokenizer bridge + compile
        setup_s = time.perf_counter() - t0
        _lockstep(model, prompt, grammar, 8, 0)  # warm-up
        free, schema, share, mask_ms = [], [], [], []
        for rep in range(reps):
            r = _lockstep(model, prompt, grammar, n_gen, rep)
            n = len(r["schema"])
            free.append(n / sum(r["free"]))
            schema.append(n / sum(r["schema"]))
            share.append(r["in_grammar"] / sum(r["schema"]))
            mask_ms.append(r["in_grammar"] / n * 1000)
            if log:
                log(f"{model.architecture} rep {rep + 1}/{reps}: {free[-1]:.1f} tok/s free, "
                    f"{schema[-1]:.1f} tok/s with the schema ({n} tokens each)")
        ratios = [b / a for a, b in zip(free, schema)]
        return {"model": model.path.rsplit("/", 1)[-1], "n_vocab": model.n_vocab, "n_gen": n_gen, "reps": reps,
                "setup_s": setup_s, "free_tps": statistics.median(free), "schema_tps": statistics.median(schema),
                "ratio": statistics.median(ratios), "grammar_ms_per_token": statistics.median(mask_ms),
                "grammar_share": statistics.median(share), "samples_free": free, "samples_schema": schema}
    finally:
        model.close()


def table(rows: list[dict]) -> str:
    head = (f"| model | n_vocab | decode tok/s free | with schema | ratio | grammar ms/token | share of decode "
            f"| first compile s |\n|---|---:|---:|---:|---:|---:|---:|---:|")
    lines = [f"| {r['model']} | {r['n_vocab']} | {r['free_tps']:.1f} | {r['schema_tps']:.1f} | {r['ratio']:.2f} "
             f"| {r['grammar_ms_per_token']:.2f} | {r['grammar_share'] * 100:.1f}% | {r['setup_s']:.2f} |"
             for r in rows]
    return "\n".join([head, *lines])


def report(rows: list[dict], command: str, isa: str) -> str:
    m = machine()
    return "\n".join([
        "## Constrained decoding (`localinfer bench grammar`)", "",
        f"`{command}` -- {m['cpu']}, {isa}, {m['n_cpus']} CPUs (shared and noisy: compare the ratio, "
        "measured in the same run, not the absolute figures).", "",
        f"Decode tokens/s over {rows[0]['n_gen'] if rows else 0} tokens, free text against a JSON schema "
        "(a list of records with free-text strings), the two decoded token by token in turn; medians of "
        f"{rows[0]['reps'] if rows else 0} repetitions. "
        "\"grammar ms/token\" is the time in the matcher per token (llguidance's mask, applying it to the "
        "logits, accepting the token); \"first compile\" includes building the tokenizer's token table.", "",
        table(rows)])
