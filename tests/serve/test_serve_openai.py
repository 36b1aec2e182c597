"""The official openai client, unchanged, against a real server on loopback."""
from __future__ import annotations

import openai
import pytest

import localinfer
from localinfer.serve.app import BackgroundServer

from serve_helpers import metric, raw, wait_idle

NAME = "smollm2"
HELLO = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def server(smollm2_path):
    model = localinfer.load(str(smollm2_path), n_ctx=512)
    with BackgroundServer(model, NAME, port=0, n_slots=2, n_ctx=512) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_chat_completion(client):
    r = client.chat.completions.create(model=NAME, messages=HELLO, max_tokens=12, temperature=0)
    choice = r.choices[0]
    assert r.object == "chat.completion" and r.model == NAME and r.id.startswith("chatcmpl-")
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 10 and 0 < r.usage.completion_tokens <= 12
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_stream_joins_to_the_whole_answer_and_reports_usage(client):
    whole = client.chat.completions.create(model=NAME, messages=HELLO, max_tokens=12, temperature=0)
    stream = client.chat.completions.create(model=NAME, messages=HELLO, max_tokens=12, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert all(c.usage is None for c in chunks[:-1])


def test_completions_stream_and_not(client):
    r = client.completions.create(model=NAME, prompt="The capital of France is", temperature=0)
    assert r.object == "text_completion" and r.choices[0].text.strip().startswith("Paris")
    assert r.usage.completion_tokens == 16 and r.choices[0].finish_reason == "length"  # OpenAI's default 16
    parts = list(client.completions.create(model=NAME, prompt="The capital of France is", temperature=0,
                                           max_tokens=16, stream=True))
    assert "".join(p.choices[0].text for p in parts) == r.choices[0].text
    assert parts[-1].choices[0].finish_reason == "length"


def test_stop_sequences(client):
    whole = client.completions.create(model=NAME, prompt="1, 2, 3, 4,", temperature=0, max_tokens=12)
    assert " 7," in whole.choices[0].text
    r = client.completions.create(model=NAME, prompt="1, 2, 3, 4,", temperature=0, max_tokens=12, stop=[" 7"])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == whole.choices[0].text[:whole.choices[0].text.index(" 7")]


def test_seed_makes_sampling_repeatable(client):
    kw = dict(model=NAME, messages=[{"role": "user", "content": "Tell me a story."}], max_tokens=10,
              temperature=1.0, top_p=1.0)
    a = client.chat.completions.create(seed=7, **kw).choices[0].message.content
    b = client.chat.completions.create(seed=7, **kw).choices[0].message.content
    c = client.chat.completions.create(seed=8, **kw).choices[0].message.content
    assert a == b and a != c


def test_models_health_metrics(client, server):
    assert [m.id for m in client.models.list()] == [NAME]
    assert client.models.retrieve(NAME).id == NAME
    state = wait_idle(server.url)
    assert state["status"] == "ok" and state["slots_total"] == 2 and state["slots_busy"] == 0
    status, headers, text = raw(server.url, "GET", "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    assert metric(text, "localinfer_requests_total", status="completed", model=NAME) >= 1
    for name in ("localinfer_generated_tokens_total", "localinfer_queue_length", "localinfer_ttft_seconds_bucket",
                 "localinfer_kv_used_tokens", "localinfer_decode_tokens_per_second_count"):
        metric(text, name, model=NAME)  # KeyError when missing


def test_errors_come_in_openai_shape(client):
    # one model served: a client's default name reaches it (llama-server ignores the field then)
    assert client.chat.completions.create(model="gpt-4o", messages=HELLO, max_tokens=1).model == NAME
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=NAME, messages=HELLO, temperature="hot")
    assert e.value.param == "temperature"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=NAME, prompt="word " * 600)
    assert "601" in e.value.message and "512" in e.value.message and e.value.code == "context_length_exceeded"


def test_api_key(server, smollm2_path):
    with BackgroundServer(server.server.model, NAME, port=0, n_slots=1, n_ctx=128, api_key="s3cret") as s:
        bad = openai.OpenAI(base_url=s.url + "/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()
        good = openai.OpenAI(base_url=s.url + "/v1", api_key="s3cret", max_retries=0)
        assert good.completions.create(model=NAME, prompt="Hi", max_tokens=2).usage.completion_tokens <= 2
        assert raw(s.url, "GET", "/health")[0] == 200  # health checks need no key
