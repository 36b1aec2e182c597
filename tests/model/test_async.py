"""The asyncio API (aio.py): the same answers as the blocking calls, cancellation within one token,
and an event loop that keeps ticking while a generation streams."""
from __future__ import annotations

import asyncio
import sys

import pytest

import localinfer
from localinfer.model import ModelClosedError
from serve_helpers import wait_engine_idle

# The ticker's period: shorter than a forward pass of the model on any machine (~8 ms on 2 cores).
TICK_S = 0.001
N_TOKENS = 48


@pytest.fixture(scope="module")
def model(smollm2_path):
    with localinfer.load(str(smollm2_path)) as m:
        yield m


def _run(coro):
    return asyncio.run(coro)


def _long(model) -> dict:
    """Options for an answer that runs on (no end-of-generation token), sampled without a seed so
    the engine never answers it from its completion cache."""
    return dict(max_tokens=300, temperature=0.8, logit_bias={model.tokenizer.eos_id: -100})


def test_agenerate_gives_what_generate_gives(model):
    options = dict(max_tokens=12, temperature=0, logprobs=2)
    want = model.generate("The capital of France is", **options)
    got = _run(model.agenerate("The capital of France is", **options))
    assert got.tokens == want.tokens and got.text == want.text and got.finish_reason == want.finish_reason
    assert [lp.token for lp in got.logprobs] == [lp.token for lp in want.logprobs]
    messages = [{"role": "user", "content": "Name a colour."}]
    assert _run(model.achat(messages, max_tokens=6, temperature=0)).text == model.chat(messages, max_tokens=6,
                                                                                         temperature=0).text


def test_astream_passes_a_json_schema_through(model):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": False}

    async def main():
        return [c async for c in model.astream("A number as JSON:", json_schema=schema, max_tokens=40,
                                               temperature=0)]

    chunks = _run(main())
    import json
    assert chunks[-1].finish_reason == "stop"
    assert isinstance(json.loads("".join(c.text for c in chunks))["n"], int)


def test_a_chat_session_asend_continues_like_send(model):
    sync_chat, async_chat = model.chat_session(), model.chat_session()
    options = dict(max_tokens=10, temperature=0)

    async def two_turns():
        first = await async_chat.asend("Hi, what is 2+2?", **options)
        second = [c async for c in async_chat.astream("And 3+3?", **options)]
        return first, "".join(c.text for c in second)

    first, second = _run(two_turns())
    assert first.text == sync_chat.send("Hi, what is 2+2?", **options).text
    assert second == sync_chat.send("And 3+3?", **options).text
    assert async_chat.messages == sync_chat.messages


def test_task_cancel_stops_the_generation_within_one_token(model):
    engine = model.engine

    async def main():
        seen, three = [], asyncio.Event()

        async def consume():
            async for chunk in model.astream("Once upon a time", **_long(model)):
                seen.append(chunk)
                if len(seen) == 3:
                    three.set()

        task = asyncio.create_task(consume())
        await asyncio.wait_for(three.wait(), 60)
        steps_at_cancel = engine.steps
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return steps_at_cancel, seen

    steps_at_cancel, seen = _run(main())
    wait_engine_idle(engine)
    # the engine notices the cancel before its next step: the step in flight is the last one
    assert engine.steps - steps_at_cancel <= 1
    assert not any(c.finish_reason for c in seen)


def test_cancelling_a_chat_turn_keeps_the_partial_answer_and_frees_the_context(model):
    chat = model.chat_session()

    async def main():
        seen, three = [], asyncio.Event()

        async def consume():
            async for chunk in chat.astream("Tell me a story.", **_long(model)):
                seen.append(chunk)
                if len(seen) == 3:
                    three.set()

        task = asyncio.create_task(consume())
        await asyncio.wait_for(three.wait(), 60)
        computed_at_cancel = len(chat.context.tokens)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # the turn's thread stopped after the token it was computing (one more appended to the cache)
        assert len(chat.context.tokens) - computed_at_cancel <= 1
        assert chat.messages[-1]["role"] == "assistant"
        partial = chat.messages[-1]["content"]
        # the turn's thread has stopped: the next turn runs in the same context at once
        nxt = await chat.asend("Thanks.", max_tokens=3, temperature=0)
        return partial, nxt

    partial, nxt = _run(main())
    assert 0 < len(model.tokenize(partial, add_special=False)) < 300
    assert nxt.tokens and [m["role"] for m in chat.messages] == ["user", "assistant", "user", "assistant"]


async def _steps_seen(engine, work) -> tuple[int, int]:
    """Runs `work()` while a ticker task wakes every TICK_S and notes the engine's step counter.
    Returns (the work's steps during which the ticker ran, the work's steps): a ticker that ran
    while step s+1 was computed saw the counter at s. Counting steps, not timing ticks, keeps the
    measure independent of how fast or how busy the machine is."""
    seen, done = set(), asyncio.Event()

    async def ticker():
        while not done.is_set():
            seen.add(engine.steps)
            await asyncio.sleep(TICK_S)

    first = engine.steps
    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0)  # the ticker is running before the work starts
    try:
        await work()
    finally:
        done.set()
        await tick
    last = engine.steps
    return len({s for s in seen if first < s < last}), last - first - 1


def _stream_work(model, blocking: bool):
    prompt, options = "Once upon a time", {**_long(model), "max_tokens": N_TOKENS}

    async def streaming():
        n = 0
        async for chunk in model.astream(prompt, **options):
            n += len(chunk.tokens)
        assert n == N_TOKENS

    async def blocking_variant():  # the mistake the API avoids: iterating the blocking stream in the loop
        n = 0
        for chunk in model.stream(prompt, **options):
            n += len(chunk.tokens)
            if n % 4 == 0:  # lets the ticker run every 4 tokens: it waits for 4 forward passes
                await asyncio.sleep(0)
        assert n == N_TOKENS

    return blocking_variant if blocking else streaming


def test_the_loop_keeps_ticking_while_a_generation_streams(model):
    """The ticker runs during most of the generation's steps. Why half holds on any machine: the
    loop only waits, so the ticker needs the loop's thread for microseconds per wake-up while each
    step keeps the engine busy for a forward pass (milliseconds of kernels that release the GIL);
    a busier machine slows both alike. A blocked loop sees at most one step in 4 (next test)."""
    model.generate("warm up", max_tokens=2)  # the engine and the kernels' threads exist
    seen, steps = _run(_steps_seen(model.engine, _stream_work(model, blocking=False)))
    print(f"astream: the ticker ran during {seen} of {steps} steps", file=sys.stderr)
    assert steps >= N_TOKENS - 1 and seen >= steps // 2


def test_the_step_measure_catches_a_blocked_loop(model):
    """The same measure fails when the loop itself iterates the blocking stream: the ticker runs
    only when the loop yields, once every 4 tokens, whatever the machine's speed."""
    seen, steps = _run(_steps_seen(model.engine, _stream_work(model, blocking=True)))
    print(f"blocking stream: the ticker ran during {seen} of {steps} steps", file=sys.stderr)
    assert steps >= N_TOKENS - 1 and seen <= N_TOKENS // 4 < steps // 2


def test_a_closed_model_refuses_the_async_calls(smollm2_path):
    model = localinfer.load(str(smollm2_path))
    chat = model.chat_session()
    model.close()

    async def consume(stream):
        return [c async for c in stream]

    for call in (lambda: model.agenerate("hi", max_tokens=1), lambda: consume(model.astream("hi")),
                 lambda: model.achat([{"role": "user", "content": "hi"}]), lambda: chat.asend("hi"),
                 lambda: consume(chat.astream("hi"))):
        with pytest.raises(ModelClosedError, match="closed"):
            _run(call())


def test_closing_the_model_mid_stream_ends_the_stream_with_an_error(smollm2_path):
    model = localinfer.load(str(smollm2_path))

    async def main():
        seen = 0
        with pytest.raises(RuntimeError, match="shutting down|closed"):
            async for _ in model.astream("Once upon a time", **_long(model)):
                seen += 1
                if seen == 3:  # close from another thread, as an app's quit handler might
                    await asyncio.get_running_loop().run_in_executor(None, model.close)
        return seen

    # chunks the engine sampled before close() took effect (queued while the consumer ran, and the step
    # in flight) still arrive before the error: what matters is that the stream ends, long before its end
    assert 3 <= _run(asyncio.wait_for(main(), 60)) < 64
