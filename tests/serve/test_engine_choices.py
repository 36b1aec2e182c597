"""n choices of one prompt in the batched engine: one prefill, copied K/V, their own random streams."""
from __future__ import annotations

import queue

import pytest

import localinfer
from localinfer.batching import Engine, Request, SamplingParams
from localinfer.batching.fork import Choices, choice_seed
from localinfer.batching.request import Cancelled
from serve_helpers import wait_engine_idle

GREEDY = SamplingParams(temperature=0)
PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def model(smollm2_path):
    return localinfer.load(str(smollm2_path), n_ctx=256)


def _collect(choices: Choices, timeout: float = 60) -> list[list[int]]:
    tokens = [[] for _ in choices.requests]
    left = len(choices.requests)
    while left:
        i, chunk = choices.next_event(timeout=timeout)
        tokens[i] += chunk.tokens
        left -= bool(chunk.finish_reason)
    return tokens


def test_choices_share_one_prefill_and_differ_by_seed(model):
    engine = Engine(model.serialized, model.tokenizer, n_slots=3, n_ctx=256, completion_cache_tokens=0)
    try:
        prompt = model.tokenize(PROMPT)
        params = SamplingParams(temperature=1.0, top_p=1.0, min_p=0.0, top_k=0, seed=11)
        choices = Choices(prompt, 3, max_tokens=8, params=params)
        engine.submit_group(choices.requests)
        first = _collect(choices)
        c = engine.metrics.counters
        assert c["prefills"] == 1 and c["prompt_tokens_shared"] == 2 * len(prompt)
        assert c["prompt_tokens"] == len(prompt) and c["generated_tokens"] == 24
        assert len({tuple(t) for t in first}) == 3  # three random streams
        again = Choices(prompt, 3, max_tokens=8, params=params)
        engine.submit_group(again.requests)
        assert _collect(again) == first  # each stream repeats with the seed
        assert engine.metrics.counters["prefills"] == 2
        # choice 0 keeps the request's own seed: it is what n=1 gives
        solo = engine.submit(Request(prompt, 8, params=params))
        assert [t for ch in solo.chunks() for t in ch.tokens] == first[0]
    finally:
        engine.close()


def test_more_choices_than_slots_run_in_groups(model):
    """n = 5 on 2 slots: three groups of one prefill each, every choice its own stream, the same
    choices as on 5 slots."""
    prompt = model.tokenize(PROMPT)
    params = SamplingParams(temperature=1.0, top_p=1.0, min_p=0.0, top_k=0, seed=5)
    results = []
    for n_slots in (2, 5):
        engine = Engine(model.serialized, model.tokenizer, n_slots=n_slots, n_ctx=256, completion_cache_tokens=0)
        try:
            choices = Choices(prompt, 5, max_tokens=6, params=params)
            engine.submit_group(choices.requests)
            results.append(_collect(choices))
            assert engine.metrics.counters["prefills"] == (3 if n_slots == 2 else 1)
        finally:
            engine.close()
    assert results[0] == results[1] and len({tuple(t) for t in results[0]}) == 5


def test_choice_seeds_are_distinct_and_none_stays_none():
    seeds = [choice_seed(7, i) for i in range(16)]
    assert seeds[0] == 7 and len(set(seeds)) == 16
    assert choice_seed(None, 3) is None


@pytest.mark.parametrize("which", ["smollm2", "gemma3"])  # gemma3: a sliding-window ring to copy as well
def test_copied_kv_gives_what_computing_it_gives(which, smollm2_path, gemma3_path):
    m = localinfer.load(str(smollm2_path if which == "smollm2" else gemma3_path), n_ctx=256)
    engine = Engine(m.serialized, m.tokenizer, n_slots=3, n_ctx=256)
    try:
        prompt = m.tokenize("The capital of France is Paris. " * 4 + "The capital of Italy is")
        want = m.generate(prompt, max_tokens=6, temperature=0, context=m.new_context()).tokens
        choices = Choices(prompt, 3, max_tokens=6, params=GREEDY)
        engine.submit_group(choices.requests)
        assert _collect(choices) == [want] * 3
    finally:
        engine.close()
        m.close()


def test_a_group_waits_for_all_its_slots_and_cancels_as_one(model):
    engine = Engine(model.serialized, model.tokenizer, n_slots=2, n_ctx=256)
    try:
        prompt = model.tokenize("1, 2, 3, 4, 5, 6,")
        busy = engine.submit(Request(prompt, max_tokens=200, params=GREEDY))
        busy_chunks = busy.chunks()
        next(busy_chunks)  # it holds a slot now
        choices = Choices(prompt, 2, max_tokens=4, params=GREEDY)
        engine.submit_group(choices.requests)
        with pytest.raises(queue.Empty):
            choices.next_event(timeout=0.3)
        assert engine.state()["queue_length"] == 1  # one slot is free, the group needs two
        choices.requests[1].cancel()  # one choice's client is gone: the whole group goes
        for _ in range(2):
            with pytest.raises(Cancelled):
                choices.next_event(timeout=10)
        busy_chunks.close()
        wait_engine_idle(engine)
    finally:
        engine.close()


def test_cancelling_the_leader_mid_prefill_ends_the_waiting_choices(model):
    engine = Engine(model.serialized, model.tokenizer, n_slots=3, n_ctx=256, prefill_chunk=16)
    try:
        prompt = model.tokenize("word " * 120)  # several prefill steps of 16 tokens
        choices = Choices(prompt, 3, max_tokens=4, params=GREEDY)
        engine.submit_group(choices.requests)
        choices.requests[0].cancel()
        errors = []
        for _ in range(3):
            try:
                choices.next_event(timeout=30)
            except Cancelled as e:
                errors.append(e)
        assert len(errors) == 3
        wait_engine_idle(engine)
    finally:
        engine.close()
