"""The batched engine and its prefix cache, without HTTP: correctness, slots, cancelling."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import localinfer
from localinfer.arch import build_model
from localinfer.context import common_prefix
from localinfer.files.gguf_file import GGUFFile
from localinfer.kv.cache import ContextFullError, InterleavedKVCache, KVCache
from localinfer.batching import Engine, QueueFullError, Request, SamplingParams
from localinfer.batching.prefix_cache import PrefixCache
from serve_helpers import wait_engine_idle

GREEDY = SamplingParams(temperature=0)


@pytest.fixture(scope="module")
def runtime(smollm2_path):
    with GGUFFile(smollm2_path) as f:
        return build_model(f, "c")


@pytest.fixture(scope="module")
def model(smollm2_path):
    return localinfer.load(str(smollm2_path), n_ctx=256)


def test_cached_prefix_gives_the_same_logits_as_computing_it(runtime):
    rng = np.random.default_rng(1)
    prefix = rng.integers(0, runtime.config.n_vocab, 70)  # two whole blocks of 32 and a tail
    suffix = rng.integers(0, runtime.config.n_vocab, 5)
    tokens = np.concatenate([prefix, suffix])
    computed = runtime.new_cache(128)
    runtime.forward(tokens[:64], computed)
    want = runtime.forward(tokens[64:], computed)

    store = PrefixCache(max_bytes=64 << 20, block_size=32)
    source = runtime.new_cache(128)
    runtime.forward(prefix, source)
    assert store.store(prefix, source) == 2  # only whole blocks
    restored = runtime.new_cache(128)
    assert store.restore(tokens, restored, limit=len(tokens) - 1) == 64
    assert restored.offset == 64
    got = runtime.forward(tokens[64:], restored)
    np.testing.assert_array_equal(got, want)  # the very same K/V, so the very same logits
    # and a different prompt sharing only the first block reuses only that
    other = np.concatenate([prefix[:32], suffix, prefix[40:]])
    fresh = runtime.new_cache(128)
    assert store.restore(other, fresh, limit=len(other) - 1) == 32


def test_prefix_cache_evicts_least_recent_tails_first():
    cache = KVCache(2, 64, 1, 4)
    block_bytes = 2 * 2 * 8 * 1 * 4 * 2  # k and v, (layers, block, heads, dim) f16
    store = PrefixCache(max_bytes=3 * block_bytes, block_size=8)
    a = list(range(32))  # 4 blocks: only 3 fit
    cache.advance(32)
    store.store(a, cache)
    assert len(store) == 3 and store.nbytes <= store.max_bytes
    fresh = KVCache(2, 64, 1, 4)
    assert store.restore(a, fresh, limit=32) == 24  # the first three blocks survived, not the last
    b = [100 + t for t in range(16)]
    store.store(b, cache)  # two new blocks push out a's two least recent (its tail)
    fresh.reset()
    assert store.restore(a, fresh, limit=32) == 8
    with pytest.raises(ValueError):
        PrefixCache(max_bytes=1, block_size=0)


def _fill(cache, keys, values, tokens, store, chunk):
    """Writes the K/V of `tokens` chunk by chunk (as a prefill does), storing after each chunk."""
    for start in range(0, len(tokens), chunk):
        for layer in range(cache.n_layers):
            cache.update_and_fetch(layer, keys[layer, start:start + chunk], values[layer, start:start + chunk])
        cache.advance(min(chunk, len(tokens) - start))
        if store is not None:
            store.store(tokens[:cache.offset], cache)


def test_sliding_window_blocks_are_restored_with_their_window():
    rng = np.random.default_rng(3)
    keys = rng.standard_normal((2, 48, 1, 4)).astype(np.float16)  # (layer, pos, kv_head, head_dim)
    values = rng.standard_normal((2, 48, 1, 4)).astype(np.float16)
    tokens = list(range(40))

    def cache():  # layer 1 slides: a ring of window 8 + margin 8 slots, not positional
        return InterleavedKVCache([False, True], 256, 1, 4, window=8, trim_margin=8)

    store = PrefixCache(1 << 20, block_size=8)
    source = cache()
    assert source.swa.n_slots < source.n_ctx and store.supports(source)
    _fill(source, keys, values, tokens, store, chunk=8)
    restored = cache()
    assert store.restore(tokens + [99], restored, limit=40) == 40
    for layer in range(2):  # the next token sees the very same keys and values
        want = source.update_and_fetch(layer, keys[layer, 40:41], values[layer, 40:41])
        got = restored.update_and_fetch(layer, keys[layer, 40:41], values[layer, 40:41])
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])

    # stored once at the end, the ring no longer held the window before position 24: not reused
    late = PrefixCache(1 << 20, block_size=8)
    whole = cache()
    _fill(whole, keys, values, tokens, None, chunk=40)
    late.store(tokens, whole)
    assert late.restore(tokens[:24] + [99], cache(), limit=24) == 0
    assert late.restore(tokens + [99], cache(), limit=40) == 40  # the last window is there


def test_engine_batches_requests_and_reuses_prefixes(runtime, model):
    engine = Engine(runtime, model.tokenizer, n_slots=3, n_ctx=256, prefix_block=16)
    try:
        shared = model.tokenize("A long shared system prompt about the weather in Paris. " * 4)
        alone = [engine.submit(Request(shared + model.tokenize(" Question one?", add_special=False),
                                       max_tokens=6, params=GREEDY))]
        assert len([c for c in alone[0].chunks()]) == 6
        steps_before = engine.state()["steps"]
        reqs = [engine.submit(Request(shared + model.tokenize(f" Question {i}?", add_special=False),
                                      max_tokens=6, params=GREEDY)) for i in range(3)]
        texts = ["".join(c.text for c in r.chunks()) for r in reqs]
        assert all(r.timings.generated_tokens == 6 for r in reqs)
        assert engine.state()["steps"] - steps_before <= 8  # one prefill step and decodes shared by all three
        whole_blocks = len(shared) // 16 * 16
        # the shared prompt came from the cache: the slot of the first request still holds it and
        # " Question", the others got its whole blocks
        assert sorted(r.timings.prompt_cached for r in reqs) == [whole_blocks, whole_blocks, len(shared) + 1]
        assert all(texts)
        assert engine.metrics.counters["completed"] == 4
    finally:
        engine.close()


def test_engine_results_match_the_single_sequence_path(model):
    prompt = model.tokenize("The capital of France is")
    solo = model.generate(prompt, max_tokens=12, temperature=0, context=model.new_context())
    engine_result = model.generate(prompt, max_tokens=12, temperature=0)
    assert engine_result.tokens == solo.tokens and engine_result.text == solo.text


def test_cancelling_frees_the_slot_and_a_full_queue_refuses(runtime, model):
    engine = Engine(runtime, model.tokenizer, n_slots=1, n_ctx=256, max_queue=1)
    try:
        prompt = model.tokenize("1, 2, 3, 4, 5, 6,")  # counting goes on and on
        first = engine.submit(Request(prompt, max_tokens=200, params=GREEDY))
        chunks = first.chunks()
        next(chunks)
        waiting = engine.submit(Request(prompt, max_tokens=2, params=GREEDY))
        with pytest.raises(QueueFullError):
            engine.submit(Request(prompt, max_tokens=2))
        chunks.close()  # the client goes away: its slot is freed, the waiting request runs
        assert [c.finish_reason for c in waiting.chunks()][-1] in ("stop", "length")
        state = wait_engine_idle(engine)
        assert state["slots_busy"] == 0 and engine.metrics.counters["cancelled"] == 1
        with pytest.raises(ContextFullError, match="256"):
            engine.submit(Request(list(range(1, 300))))
        with pytest.raises(ValueError, match="empty"):
            engine.submit(Request([]))
    finally:
        engine.close()


def test_several_threads_share_one_model(model):
    prompts = [f"Write the number {i} in words:" for i in range(6)]
    results, errors = {}, []

    def work(i):
        try:
            results[i] = model.generate(prompts[i], max_tokens=8, temperature=0)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    steps_before = model.engine.state()["steps"]
    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and len(results) == 6
    assert all(r.timings.generated_tokens == 8 or r.finish_reason == "stop" for r in results.values())
    steps = model.engine.state()["steps"] - steps_before
    assert steps < sum(len(r.tokens) for r in results.values())  # some steps ran several sequences
    # the contexts' path (chat sessions) is serialized too: interleave it with the engine
    chat = model.chat_session(temperature=0, max_tokens=4)
    t = threading.Thread(target=work, args=(0,))
    t.start()
    assert chat.send("Hi").text
    t.join(timeout=60)
    assert not errors


def test_a_cached_prefix_changes_nothing_a_seed_repeats(runtime, model):
    engine = Engine(runtime, model.tokenizer, n_slots=1, n_ctx=256, prefix_block=16, completion_cache_tokens=0)
    try:
        prompt = model.chat_tokens([{"role": "user", "content": "Tell me a story about a brave cat."}])
        params = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, min_p=0.0, seed=11)
        runs = [engine.submit(Request(prompt, max_tokens=8, params=params, logprobs=3)) for _ in range(2)]
        chunks = [list(r.chunks()) for r in runs]
        # all but the last token kept in the slot's cache: one row, computed as the whole prompt's last
        assert runs[0].timings.prompt_cached == 0 and runs[1].timings.prompt_cached == len(prompt) - 1
        assert [t for c in chunks[0] for t in c.tokens] == [t for c in chunks[1] for t in c.tokens]
        assert [c.logprobs for c in chunks[0]] == [c.logprobs for c in chunks[1]]  # the very same logits
    finally:
        engine.close()


@pytest.mark.parametrize("kept_by", ["slot", "blocks"])
def test_a_reused_prefix_gives_the_logits_of_the_whole_prompt(runtime, model, kept_by):
    """The next request shares a system prompt with the last one: the slot's cache still holds it
    (any length), or, erased, the prefix cache's whole blocks give it; either way the few rows left
    give the logits a server without reuse computes from the whole prompt."""
    system = {"role": "system", "content": "You answer in one short sentence about the weather in Paris."}
    first, second = (model.chat_tokens([system, {"role": "user", "content": q}]) for q in ("Rain?", "Sun today?"))
    n_shared = common_prefix(first, second)
    params = SamplingParams(temperature=0.7, seed=5)

    def run(engine, prompts):
        reqs = [engine.submit(Request(p, max_tokens=6, params=params, logprobs=2)) for p in prompts]
        return reqs, [[(c.tokens, c.logprobs) for c in r.chunks()] for r in reqs]

    fresh = Engine(runtime, model.tokenizer, n_slots=1, n_ctx=256, prefix_cache_bytes=0, completion_cache_tokens=0)
    engine = Engine(runtime, model.tokenizer, n_slots=1, n_ctx=256, prefix_block=16, completion_cache_tokens=0)
    try:
        _, want = run(fresh, [second])
        run(engine, [first])
        if kept_by == "blocks":
            engine.call(lambda: engine.slots[0].__setattr__("held", []))  # as slot_files.erase leaves it
        reqs, got = run(engine, [second])
        cached = reqs[0].timings.prompt_cached
        assert cached == (n_shared if kept_by == "slot" else n_shared // 16 * 16)
        assert 0 < len(second) - cached < 16  # fewer rows than the GEMM takes by itself
        assert got == want
    finally:
        engine.close()
        fresh.close()


def test_a_request_takes_the_slot_that_holds_its_conversation(runtime, model):
    """Two chats alternate over two slots: each next turn goes to the slot holding its last turn
    (the one idle longest when none does), and reuses all it shares with it, not only whole blocks."""
    engine = Engine(runtime, model.tokenizer, n_slots=2, n_ctx=256, prefix_cache_bytes=1 << 20, prefix_block=64,
                    completion_cache_tokens=0)
    try:
        questions = ("Rivers, lakes, the sea, the rain that feeds them and the boats on them: tell me a story.",
                     "Which mountains have glaciers, snow on their peaks all the year round, huts for the night and "
                     "people who climb them every summer, and why?")
        chats = [[{"role": "user", "content": q}] for q in questions]
        slots = {}
        for turn in range(2):
            for i, chat in enumerate(chats):
                prompt = model.chat_tokens(chat)
                shared = common_prefix(engine.slots[slots[i]].held, prompt) if turn else 0
                r = engine.submit(Request(prompt, max_tokens=4, params=GREEDY))
                text = "".join(c.text for c in r.chunks())
                wait_engine_idle(engine)
                slot = next(s.index for s in engine.slots if s.held[:len(prompt)] == prompt)
                if turn:
                    assert slot == slots[i] and r.timings.prompt_cached == shared > 20  # (blocks of 64: none)
                slots[i] = slot
                chat += [{"role": "assistant", "content": text}, {"role": "user", "content": "And then?"}]
        assert slots[0] != slots[1]
    finally:
        engine.close()


def test_exact_repeats_of_deterministic_requests_come_from_memory(runtime, model):
    engine = Engine(runtime, model.tokenizer, n_slots=1, n_ctx=256)
    try:
        prompt = model.tokenize("The capital of France is")
        first = engine.submit(Request(prompt, max_tokens=6, params=GREEDY))
        want = [(c.text, c.tokens, c.finish_reason) for c in first.chunks()]
        steps = engine.state()["steps"]
        again = engine.submit(Request(prompt, max_tokens=6, params=GREEDY))
        assert [(c.text, c.tokens, c.finish_reason) for c in again.chunks()] == want
        assert engine.state()["steps"] == steps  # no forward pass
        assert again.timings.generated_tokens == 6 and engine.metrics.counters["completion_cache_hits"] == 1
        sampled = SamplingParams(temperature=0.8)  # no seed: never replayed
        for _ in range(2):
            list(engine.submit(Request(prompt, max_tokens=2, params=sampled)).chunks())
        assert engine.metrics.counters["completion_cache_hits"] == 1
        assert engine.state()["steps"] > steps
    finally:
        engine.close()


def test_a_request_is_accounted_for_before_its_last_chunk_arrives(runtime, model, monkeypatch):
    """A client that has its whole answer and then reads /metrics, or asks the same again, sees the
    request done: the engine closes its accounts before handing over the last chunk. (The closing is
    slowed here, so the other order would be seen every time.)"""
    engine = Engine(runtime, model.tokenizer, n_slots=1, n_ctx=256)
    finish = engine._finish

    def slow_finish(slot, error):
        time.sleep(0.2)
        finish(slot, error)

    monkeypatch.setattr(engine, "_finish", slow_finish)
    try:
        prompt = model.tokenize("The capital of France is")
        chunks = list(engine.submit(Request(prompt, max_tokens=4, params=GREEDY)).chunks())
        assert chunks[-1].finish_reason
        counters = engine.metrics.counters
        assert counters["completed"] == 1 and counters["generated_tokens"] == 4 and counters["decode_seconds"] > 0
        steps = engine.state()["steps"]
        list(engine.submit(Request(prompt, max_tokens=4, params=GREEDY)).chunks())
        assert engine.metrics.counters["completion_cache_hits"] == 1 and engine.state()["steps"] == steps
    finally:
        engine.close()


@pytest.mark.parametrize("n_ctx", [256, 1024])  # the window fits in n_ctx, or the SWA layers are a ring
def test_gemma3_sliding_window_reuses_prefixes_exactly(gemma3_path, n_ctx):
    m = localinfer.load(str(gemma3_path), n_ctx=n_ctx)
    repeat = 3 if n_ctx == 256 else 40  # 1024: past the window (512) and the ring (576)
    prompt = m.tokenize("A shared beginning that is long enough to fill a few blocks of the prefix cache. " * repeat
                        + "The capital of France is")
    assert len(prompt) < n_ctx - 6
    want = m.generate(prompt, max_tokens=6, temperature=0, context=m.new_context())
    cached = []
    for _ in range(2):
        got = m.generate(prompt, max_tokens=6, temperature=0.0, seed=_)  # a seed: not a completion-cache repeat
        assert got.tokens == want.tokens
        cached.append(got.timings.prompt_cached)
    assert cached[0] == 0 and cached[1] >= len(prompt) - 16 - 32
    if n_ctx == 1024:
        assert m.engine.slots[0].cache.swa.n_slots < n_ctx
    m.close()
