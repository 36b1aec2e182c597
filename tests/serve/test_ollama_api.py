"""Ollama's API, through the official `ollama` client, against a real server on loopback."""
from __future__ import annotations

import asyncio
import contextlib
import json
import time

import numpy as np
import ollama
import pytest

import localinfer
from localinfer.serve.app import BackgroundServer

from serve_helpers import connect, post_bytes, raw, wait_idle

NAME = "smollm2"
HELLO = [{"role": "user", "content": "What is the capital of France?"}]
GREEDY = {"temperature": 0, "num_predict": 12}


@pytest.fixture(scope="module")
def server(smollm2_path):
    model = localinfer.load(str(smollm2_path), n_ctx=512)
    with BackgroundServer(model, NAME, port=0, n_slots=2, n_ctx=512) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return ollama.Client(host=server.url, timeout=120)


def _openai_chat(server, messages, max_tokens=12, **extra) -> dict:
    status, _, r = raw(server.url, "POST", "/v1/chat/completions",
                       {"model": NAME, "messages": messages, "max_tokens": max_tokens, "temperature": 0, **extra})
    assert status == 200, r
    return r


def test_chat_whole_is_the_openai_routes_answer(client, server):
    r = client.chat(model=NAME, messages=HELLO, options=GREEDY, stream=False)
    want = _openai_chat(server, HELLO)
    assert r.message.role == "assistant" and r.message.content == want["choices"][0]["message"]["content"]
    assert r.done and r.done_reason == want["choices"][0]["finish_reason"] and r.model == NAME
    assert r.prompt_eval_count == want["usage"]["prompt_tokens"] and r.eval_count == want["usage"]["completion_tokens"]
    assert r.total_duration > 0 and r.eval_duration >= 0 and r.prompt_eval_duration >= 0 and r.load_duration >= 0
    assert r.created_at.endswith("Z")


def test_chat_stream_joins_to_the_whole_answer(client):
    whole = client.chat(model=NAME, messages=HELLO, options=GREEDY, stream=False)
    parts = list(client.chat(model=f"{NAME}:latest", messages=HELLO, options=GREEDY, stream=True))
    assert len(parts) > 2 and all(not p.done for p in parts[:-1]) and parts[-1].done
    assert "".join(p.message.content for p in parts) == whole.message.content
    assert parts[-1].done_reason == whole.done_reason and parts[-1].eval_count == whole.eval_count


def test_async_client_streams_the_same_answer(server, client):
    whole = client.chat(model=NAME, messages=HELLO, options=GREEDY, stream=False)

    async def run():
        c = ollama.AsyncClient(host=server.url, timeout=120)
        return [p async for p in await c.chat(model=NAME, messages=HELLO, options=GREEDY, stream=True)]
    parts = asyncio.run(run())
    assert "".join(p.message.content for p in parts) == whole.message.content and parts[-1].done


def test_logprobs_are_the_openai_routes_whole_and_streamed(client, server):
    r = client.chat(model=NAME, messages=HELLO, options=GREEDY, logprobs=True, top_logprobs=3, stream=False)
    want = _openai_chat(server, HELLO, logprobs=True, top_logprobs=3)["choices"][0]["logprobs"]["content"]
    assert len(r.logprobs) == len(want) > 0 and "".join(lp.token for lp in r.logprobs) == r.message.content
    for got, w in zip(r.logprobs, want):
        assert (got.token, got.logprob) == (w["token"], w["logprob"])
        assert [(t.token, t.logprob) for t in got.top_logprobs] == [(t["token"], t["logprob"]) for t in w["top_logprobs"]]
    parts = list(client.chat(model=NAME, messages=HELLO, options=GREEDY, logprobs=True, top_logprobs=3, stream=True))
    assert [lp for p in parts for lp in p.logprobs or []] == list(r.logprobs)
    g = client.generate(model=NAME, prompt="The capital of France is", raw=True, options=GREEDY, logprobs=True)
    assert len(g.logprobs) == 12 and all(lp.top_logprobs == [] for lp in g.logprobs)


def test_generate_templated_raw_and_streamed(client, server):
    templated = client.generate(model=NAME, prompt=HELLO[0]["content"], options=GREEDY)
    assert templated.response == _openai_chat(server, HELLO)["choices"][0]["message"]["content"]
    assert templated.context is None
    r = client.generate(model=NAME, prompt="The capital of France is", raw=True, options=GREEDY)
    status, _, want = raw(server.url, "POST", "/v1/completions", {"model": NAME, "prompt": "The capital of France is",
                                                                 "max_tokens": 12, "temperature": 0})
    assert status == 200 and r.response == want["choices"][0]["text"] and r.done_reason == "length"
    parts = list(client.generate(model=NAME, prompt="The capital of France is", raw=True, options=GREEDY, stream=True))
    assert "".join(p.response for p in parts) == r.response and parts[-1].eval_count == 12


def test_options_are_honoured(client):
    r = client.chat(model=NAME, messages=HELLO, options={"temperature": 0, "num_predict": 3}, stream=False)
    assert r.eval_count == 3 and r.done_reason == "length"
    seeded = [client.chat(model=NAME, messages=HELLO, stream=False,
                          options={"temperature": 1.5, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": 1234,
                                   "num_predict": 16}).message.content for _ in range(2)]
    assert seeded[0] == seeded[1]
    free = client.chat(model=NAME, messages=HELLO, options=GREEDY, stream=False).message.content
    cut = free.split()[1]  # a word of the greedy answer: the answer stops before it
    stopped = client.chat(model=NAME, messages=HELLO, options={**GREEDY, "stop": [cut]}, stream=False)
    assert stopped.done_reason == "stop" and cut not in stopped.message.content
    assert free.startswith(stopped.message.content)


def test_format_json_and_schema_give_valid_json(client):
    # free JSON has no length bound: the question asks for a one-member object, so that greedy decoding
    # closes it well inside num_predict whatever the float path (a longer one ran into a repetition loop
    # on AVX2 kernels and stopped for length)
    ask = 'Answer with JSON of the form {"capital": "..."}. What is the capital of France?'
    r = client.chat(model=NAME, messages=[{"role": "user", "content": ask}],
                    format="json", options={"temperature": 0, "num_predict": 60}, stream=False)
    assert r.done_reason == "stop" and isinstance(json.loads(r.message.content), dict)
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"],
              "additionalProperties": False}
    r = client.generate(model=NAME, prompt="The capital of France, as JSON:", format=schema,
                        options={"temperature": 0, "num_predict": 40})
    assert r.done_reason == "stop" and set(json.loads(r.response)) == {"city"}


ADD = {"type": "function", "function": {"name": "add", "description": "Add two numbers", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}


def test_tool_calls_whole_streamed_and_answered(client):
    ask = [{"role": "user", "content": "What is 2+3? Use the add tool."}]
    options = {"temperature": 0, "num_predict": 60}
    r = client.chat(model=NAME, messages=ask, tools=[ADD], options=options, stream=False)
    [call] = r.message.tool_calls
    assert call.function.name == "add" and set(call.function.arguments) == {"a", "b"}
    parts = list(client.chat(model=NAME, messages=ask, tools=[ADD], options=options, stream=True))
    assert [c for p in parts for c in p.message.tool_calls or []] == [call] and parts[-1].done
    # the call and its result in the history: the model answers from the result
    after = client.chat(model=NAME, tools=[ADD], options=options, stream=False, messages=ask + [
        {"role": "assistant", "content": "", "tool_calls": [call]}, {"role": "tool", "content": "5", "tool_name": "add"}])
    assert after.done and (after.message.content or after.message.tool_calls)


def test_tags_show_ps_and_version(client, smollm2_path, smollm2_metadata):
    [m] = client.list().models
    assert m.model == NAME and m.size == smollm2_path.stat().st_size
    assert m.details.format == "gguf" and m.details.family == "llama" and m.details.quantization_level == "Q4_1"
    shown = client.show(NAME)
    assert shown.template == smollm2_metadata["tokenizer.chat_template"] and "num_ctx" in shown.parameters
    assert shown.modelinfo["general.architecture"] == "llama" and shown.details.parameter_size.endswith("M")
    [p] = client.ps().models
    assert p.model == NAME and p.context_length == 512 and p.size_vram == 0
    status, _, v = raw(client._client.base_url.__str__().rstrip("/"), "GET", "/api/version")
    assert status == 200 and v["version"] == localinfer.__version__


def test_embed_vectors_are_the_openai_routes(client, server):
    texts = ["Paris is the capital of France.", "Bonjour"]
    r = client.embed(model=NAME, input=texts)
    status, _, want = raw(server.url, "POST", "/v1/embeddings", {"model": NAME, "input": texts})
    assert status == 200 and len(r.embeddings) == 2
    for got, w in zip(r.embeddings, want["data"]):
        assert got == w["embedding"]  # one code path: the same floats
    assert r.prompt_eval_count == want["usage"]["prompt_tokens"]
    legacy = client.embeddings(model=NAME, prompt=texts[0]).embedding  # Ollama's older route: not normalized
    v = np.asarray(legacy)
    assert abs(np.linalg.norm(v) - 1.0) > 1e-3
    np.testing.assert_allclose(v / np.linalg.norm(v), r.embeddings[0], rtol=0, atol=1e-5)  # float32 rounding


def test_empty_requests_load_and_a_static_model_stays(client):
    assert client.generate(model=NAME).done_reason == "load"
    assert client.chat(model=NAME, messages=[]).done_reason == "load"
    # one model loaded for the server's lifetime cannot be unloaded: said so, and still listed
    assert client.generate(model=NAME, keep_alive=0).done_reason == "load"
    assert [m.model for m in client.ps().models] == [NAME]


def test_a_server_of_one_model_answers_to_any_name(client):
    """As Ollama's clients write names (`smollm2:latest`), and as llama-server ignores the field when it
    serves one model; a server of several (--models) still answers 404 to an unknown one."""
    for name in (f"{NAME}:latest", "nope"):
        r = client.chat(model=name, messages=HELLO, options={"num_predict": 2, "temperature": 0})
        assert r.model == NAME and r.done
    assert client.show(f"{NAME}:latest").modelinfo


@pytest.mark.parametrize("call, status, words", [
    (lambda c: c.chat(model=NAME, messages=HELLO, options={"temperature": 9}), 400, "'options.temperature'"),
    (lambda c: c.chat(model=NAME, messages=HELLO, options={"num_ctx": 4096}), 400, "'options.num_ctx'"),
    (lambda c: c.chat(model=NAME, messages=HELLO, options={"mirostat": 2}), 400, "options.mirostat"),
    (lambda c: c.chat(model=NAME, messages=HELLO, think=True), 400, "'think'"),
    (lambda c: c.chat(model=NAME, messages=HELLO, logprobs=True, top_logprobs=50), 400, "'top_logprobs'"),
    (lambda c: c.chat(model=NAME, messages=[{"role": "user", "content": "hi", "images": [b"\x89PNG"]}]), 400,
     "messages[0].images"),
    (lambda c: c.chat(model=NAME, messages=HELLO, keep_alive="soon"), 400, "'keep_alive'"),
    (lambda c: c.generate(model=NAME, prompt="hi", template="{{ .Prompt }}"), 400, "'template'"),
    (lambda c: c.chat(model=NAME, messages=HELLO, format={"type": "nonsense"}), 400, "format"),
    (lambda c: c.embed(model=NAME, input=["a", ""]), 400, "input[1]"),
])
def test_bad_requests_are_clear_errors(client, call, status, words):
    with pytest.raises(ollama.ResponseError) as e:
        call(client)
    assert e.value.status_code == status and words in e.value.error, e.value.error


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]", b'{"model": 5, "messages": []}',
                                  b'{"model": "smollm2", "messages": {"role": "user"}}',
                                  b'{"model": "smollm2", "messages": [], "stream": "yes"}'])
def test_malformed_bodies_are_400s_in_ollamas_shape(server, body):
    status, _, r = raw(server.url, "POST", "/api/chat", body)
    assert status == 400 and set(r) == {"error"} and r["error"], r


def test_other_api_routes_answer_in_ollamas_shape(server, client):
    status, headers, r = raw(server.url, "GET", "/api/chat")
    assert status == 405 and headers["Allow"] == "POST" and "takes POST" in r["error"]
    with pytest.raises(ollama.ResponseError) as e:
        client.pull(NAME)
    assert e.value.status_code == 501 and "does not pull" in e.value.error
    status, _, r = raw(server.url, "DELETE", "/api/delete", {"model": NAME})
    assert status == 501 and set(r) == {"error"}
    status, _, r = raw(server.url, "GET", "/api/nothing/here")
    assert status == 404 and r == {"error": "no route GET /api/nothing/here"}


def _until(condition, timeout=30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.mark.parametrize("route, stream", [("/api/chat", True), ("/api/generate", False)])
def test_client_gone_mid_answer_cancels_it_and_frees_the_slot(server, route, stream):
    counters = server.engine.metrics.counters
    cancelled = counters["cancelled"]
    content = {"messages": HELLO} if route == "/api/chat" else {"prompt": HELLO[0]["content"]}
    body = json.dumps({"model": NAME, **content, "stream": stream,
                       "options": {"num_predict": 400, "temperature": 0, "seed": 7}}).encode()
    with contextlib.closing(connect(server.url)) as s:
        s.sendall(post_bytes(route, body))
        if stream:
            got = b""
            while got.count(b"\n{") < 3:  # a few NDJSON lines in: generation is under way
                got += s.recv(4096)
            assert b"application/x-ndjson" in got
        else:
            assert _until(lambda: server.engine.state()["slots_busy"] == 1)  # it is generating
    assert _until(lambda: counters["cancelled"] == cancelled + 1)  # cancelled, not run to its end
    state = wait_idle(server.url)
    assert state["slots_busy"] == 0 and state["queue_length"] == 0
