"""Token logprobs and logit_bias in the Python API, on the real SmolLM2 model.

The oracle is log_softmax of the model's own logits for the same rows. A generated token's row
is computed the way the engine computes it (the prompt in one pass, then one token at a time),
so the reference replays exactly that in a Context: the same arithmetic, so the same bits. The
all-rows Model.logits pass takes another kernel path for the decoded rows (a GEMM over many
rows where decoding runs a GEMV over one, which round their quantized activations differently):
against it the values agree only to that rounding, checked loosely, and exactly for the prompt.
"""
from __future__ import annotations

import numpy as np
import pytest

from localinfer import LogitBiasError, TokenLogprob
from localinfer.sampling.logprobs import log_softmax, prompt_logprobs, score_prompt

PROMPT = "The capital of France is"


def _reference_rows(model, prompt, generated):
    """The raw logits row each generated token was sampled from, computed as the engine does."""
    ctx = model.new_context(len(prompt) + len(generated))
    rows = [ctx.evaluate(prompt)]
    for t in generated[:-1]:
        rows.append(ctx.append([t])[-1])
    return [np.asarray(r, np.float32) for r in rows]


@pytest.mark.parametrize("through", ["engine", "context"])
def test_logprobs_are_the_log_softmax_of_the_sampled_rows(smollm2_model, through):
    m = smollm2_model
    prompt = m.tokenize(PROMPT)
    context = m.new_context() if through == "context" else None
    r = m.generate(prompt, max_tokens=6, temperature=0.9, seed=5, logprobs=4, context=context)
    assert len(r.logprobs) == len(r.tokens) == 6
    for entry, token, row in zip(r.logprobs, r.tokens, _reference_rows(m, prompt, r.tokens)):
        ref = log_softmax(row)
        assert entry.token == token and entry.logprob == ref[token]
        want = np.argsort(-ref, kind="stable")[:4]
        assert [t for t, _ in entry.top] == list(want)
        assert [lp for _, lp in entry.top] == sorted((lp for _, lp in entry.top), reverse=True)
        if token in want:
            assert dict(entry.top)[token] == entry.logprob
    # against the all-rows pass: the same distribution up to GEMV/GEMM rounding (see the docstring),
    # far tighter than what a wrong row would give (the next row's token is tens of nats away)
    all_rows = m.logits(prompt + r.tokens[:-1])[len(prompt) - 1:]
    got = np.array([e.logprob for e in r.logprobs])
    ref = np.array([log_softmax(row)[t] for row, t in zip(all_rows, r.tokens)])
    assert np.abs(got - ref).max() < 1.0


def test_greedy_token_is_the_top_one_and_chunks_carry_their_own(smollm2_model):
    chunks = list(smollm2_model.stream(PROMPT, max_tokens=5, temperature=0, logprobs=2))
    for c in chunks:
        assert len(c.logprobs) == len(c.tokens) == 1
        e = c.logprobs[0]
        assert e.top[0] == (e.token, e.logprob) and e.top[1][1] <= e.logprob <= 0
    whole = smollm2_model.generate(PROMPT, max_tokens=5, temperature=0, logprobs=2)
    assert [c.logprobs[0] for c in chunks] == whole.logprobs
    assert smollm2_model.generate(PROMPT, max_tokens=2, temperature=0).logprobs is None


def test_logprobs_are_taken_before_the_bias(smollm2_model):
    m = smollm2_model
    prompt = m.tokenize(PROMPT)
    forced = m.tokenize(" London", add_special=False)[0]
    r = m.generate(prompt, max_tokens=1, temperature=0, logprobs=1, logit_bias={forced: 100})
    assert r.tokens == [forced]
    raw = log_softmax(_reference_rows(m, prompt, r.tokens)[0])
    assert r.logprobs[0].logprob == raw[forced] < raw.max()  # the model's opinion, not the biased one
    assert r.logprobs[0].top[0][0] == int(np.argmax(raw))


def test_logit_bias_bans_and_forces(smollm2_model):
    m = smollm2_model
    greedy = m.generate(PROMPT, max_tokens=3, temperature=0)
    banned = m.generate(PROMPT, max_tokens=3, temperature=0, logit_bias={greedy.tokens[0]: -100})
    assert banned.tokens[0] != greedy.tokens[0]
    assert greedy.tokens[0] not in m.generate(PROMPT, max_tokens=3, temperature=1.0, seed=1,
                                              logit_bias={greedy.tokens[0]: -100}).tokens[:1]
    x = m.tokenize(" x", add_special=False)[0]
    assert m.generate(PROMPT, max_tokens=4, temperature=0, logit_bias={str(x): 100}).tokens == [x] * 4
    ctx_run = m.generate(PROMPT, max_tokens=3, temperature=0, logit_bias={greedy.tokens[0]: -100},
                         context=m.new_context())
    assert ctx_run.tokens == banned.tokens


@pytest.mark.parametrize("bias, needle", [({10 ** 6: 1}, "unknown token id"), ({-1: 1}, "unknown token id"),
                                          ({5: 101}, "between -100 and 100"), ({5: float("nan")}, "between"),
                                          ({"five": 1}, "not a token id"), ({5: True}, "between"),
                                          ([5], "map"), ({i: 1 for i in range(1025)}, "at most")])
def test_bad_logit_bias_is_refused(smollm2_model, bias, needle):
    with pytest.raises(LogitBiasError, match=needle):
        smollm2_model.generate(PROMPT, max_tokens=1, logit_bias=bias)


@pytest.mark.parametrize("n", [-1, 21, 2.5, True])
def test_bad_logprobs_count_is_refused(smollm2_model, n):
    with pytest.raises(ValueError, match="logprobs"):
        smollm2_model.generate(PROMPT, max_tokens=1, logprobs=n)


def test_prompt_logprobs_are_model_logits_rows_in_any_chunking(smollm2_model):
    m = smollm2_model
    ids = m.tokenize("The quick brown fox jumps over the lazy dog. " * 4)
    logits = m.logits(ids).astype(np.float64)
    ref = prompt_logprobs(logits, ids, 3)
    assert ref[0] == TokenLogprob(ids[0], None, [])  # nothing predicts the first token
    want = [row[t] - np.logaddexp.reduce(row) for row, t in zip(logits[:-1], ids[1:])]  # row i-1 -> token i
    assert np.allclose([e.logprob for e in ref[1:]], want, rtol=0, atol=1e-9)  # float64 sums: ulps of 1e1
    for chunk in (16, 17, len(ids)):
        assert score_prompt(m, ids, 3, chunk=chunk) == ref


def test_a_repeat_from_the_completion_cache_keeps_its_logprobs(smollm2_model):
    m = smollm2_model
    hits = lambda: m.engine.metrics.counters["completion_cache_hits"]  # noqa: E731
    first = m.generate("Repeat after me:", max_tokens=3, temperature=0, logprobs=2)
    before = hits()
    again = m.generate("Repeat after me:", max_tokens=3, temperature=0, logprobs=2)
    assert hits() == before + 1 and again.logprobs == first.logprobs
    fewer = m.generate("Repeat after me:", max_tokens=3, temperature=0, logprobs=1)  # another key
    assert hits() == before + 1 and [e.top for e in fewer.logprobs] == [e.top[:1] for e in first.logprobs]
