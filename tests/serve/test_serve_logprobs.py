"""logprobs, n, logit_bias and echo through the official openai client, against a real server.

The server's logprobs must be the library's (the same engine code on the same model, each
request running alone, so the same bits), streamed and whole alike; the echoed prompt's are
rows of Model.logits (sampling/logprobs.py)."""
from __future__ import annotations


import numpy as np
import openai
import pytest

import localinfer
from localinfer.sampling.logprobs import log_softmax
from localinfer.serve.app import BackgroundServer

from serve_helpers import metric, raw

NAME = "smollm2"
HELLO = [{"role": "user", "content": "What is the capital of France?"}]
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def model(smollm2_path):
    return localinfer.load(str(smollm2_path), n_ctx=512)


@pytest.fixture(scope="module")
def server(model):
    with BackgroundServer(model, NAME, port=0, n_slots=3, n_ctx=512) as s:
        s.engine.completion_cache = None  # every answer computed: a streamed repeat is not a replay of the whole one
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def _counter(server, name: str) -> int:
    text = raw(server.url, "GET", "/metrics")[2]
    return int(metric(text, f"localinfer_{name}"))


def _library(model, prompt_tokens, n_top, **kw):
    """The library's answer to the same request: the entries the server must report."""
    r = model.generate(prompt_tokens, logprobs=n_top, **kw)
    return [e for e in r.logprobs if not model.tokenizer.is_eog(e.token)], r


def test_chat_logprobs_are_the_librarys_streamed_or_not(client, model):
    kw = dict(model=NAME, messages=HELLO, max_tokens=6, temperature=0.7, seed=3)
    whole = client.chat.completions.create(logprobs=True, top_logprobs=3, **kw)
    content = whole.choices[0].logprobs.content
    want, lib = _library(model, model.chat_tokens(HELLO), 3, max_tokens=6, temperature=0.7, seed=3)
    assert [e.logprob for e in content] == [e.logprob for e in want]
    for e, w in zip(content, want):
        piece = model.tokenizer.token_to_bytes(w.token)
        assert e.bytes == list(piece) and e.token == piece.decode()
        assert [t.logprob for t in e.top_logprobs] == [lp for _, lp in w.top]
        assert [t.bytes for t in e.top_logprobs] == [list(model.tokenizer.token_to_bytes(t)) for t, _ in w.top]
        assert len(e.top_logprobs) == 3 and e.top_logprobs[0].logprob >= e.top_logprobs[2].logprob
        assert e.logprob <= e.top_logprobs[0].logprob
    assert "".join(e.token for e in content) == whole.choices[0].message.content == lib.text
    chunks = list(client.chat.completions.create(logprobs=True, top_logprobs=3, stream=True, **kw))
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.model_dump() for e in streamed] == [e.model_dump() for e in content]
    assert client.chat.completions.create(**kw).choices[0].logprobs is None  # only when asked


def test_chat_logprobs_without_alternatives(client):
    r = client.chat.completions.create(model=NAME, messages=HELLO, max_tokens=3, temperature=0, logprobs=True)
    assert all(e.top_logprobs == [] and e.logprob <= 0 for e in r.choices[0].logprobs.content)


def test_completion_logprobs_legacy_shape(client, model):
    kw = dict(model=NAME, prompt=PROMPT, max_tokens=5, temperature=0)
    r = client.completions.create(logprobs=2, **kw)
    lp = r.choices[0].logprobs
    want, _ = _library(model, model.tokenize(PROMPT), 2, max_tokens=5, temperature=0)
    assert lp.token_logprobs == [e.logprob for e in want]
    assert lp.tokens == [model.tokenizer.token_to_bytes(e.token).decode() for e in want]
    assert "".join(lp.tokens) == r.choices[0].text
    assert lp.text_offset == list(np.cumsum([0] + [len(t) for t in lp.tokens[:-1]]))
    for top, e in zip(lp.top_logprobs, want):
        assert list(top.values()) == [v for _, v in e.top] and top[model.tokenizer.token_to_bytes(e.token).decode()] == e.logprob
    parts = list(client.completions.create(logprobs=2, stream=True, **kw))
    joined = {k: sum((getattr(p.choices[0].logprobs, k) for p in parts if p.choices[0].logprobs), [])
              for k in ("tokens", "token_logprobs", "top_logprobs", "text_offset")}
    assert joined == lp.model_dump()


def test_echo_and_prompt_logprobs(client, model):
    r = client.completions.create(model=NAME, prompt=PROMPT, max_tokens=3, temperature=0, echo=True)
    plain = client.completions.create(model=NAME, prompt=PROMPT, max_tokens=3, temperature=0)
    assert r.choices[0].text == PROMPT + plain.choices[0].text and r.choices[0].logprobs is None
    r = client.completions.create(model=NAME, prompt=PROMPT, max_tokens=3, temperature=0, echo=True, logprobs=1)
    lp = r.choices[0].logprobs
    ids = model.tokenize(PROMPT)
    n = len(ids)
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None  # nothing predicts the first token
    rows = model.logits(ids)
    assert lp.token_logprobs[1:n] == [log_softmax(rows[i - 1])[ids[i]] for i in range(1, n)]
    assert lp.token_logprobs[n:] == plain_logprobs(client, 1)
    assert "".join(lp.tokens) == r.choices[0].text and lp.text_offset[n] == len(PROMPT)
    stream = list(client.completions.create(model=NAME, prompt=PROMPT, max_tokens=3, temperature=0, echo=True,
                                            logprobs=1, stream=True))
    assert stream[0].choices[0].text == PROMPT
    assert "".join(p.choices[0].text for p in stream) == r.choices[0].text
    assert sum((p.choices[0].logprobs.token_logprobs for p in stream if p.choices[0].logprobs), []) == lp.token_logprobs


def plain_logprobs(client, n_top):
    r = client.completions.create(model=NAME, prompt=PROMPT, max_tokens=3, temperature=0, logprobs=n_top)
    return r.choices[0].logprobs.token_logprobs


def test_n_choices_from_one_prefill(client, server):
    kw = dict(model=NAME, prompt="Once upon a time", max_tokens=6, temperature=1.0, top_p=1.0, seed=42)
    prefills, shared = _counter(server, "prefills_total"), _counter(server, "prompt_tokens_shared_total")
    r = client.completions.create(n=3, **kw)
    assert _counter(server, "prefills_total") - prefills == 1
    assert _counter(server, "prompt_tokens_shared_total") - shared == 2 * r.usage.prompt_tokens
    assert [c.index for c in r.choices] == [0, 1, 2]
    texts = [c.text for c in r.choices]
    assert len(set(texts)) == 3  # each choice its own random stream
    assert r.usage.completion_tokens == 18 and r.usage.prompt_tokens == 4
    again = client.completions.create(n=3, **kw)
    assert [c.text for c in again.choices] == texts  # and the seed repeats them
    assert client.completions.create(**kw).choices[0].text == texts[0]  # choice 0 is n=1's answer
    streamed = ["", "", ""]
    for p in client.completions.create(n=3, stream=True, **kw):
        streamed[p.choices[0].index] += p.choices[0].text
    assert streamed == texts
    more = client.completions.create(n=5, **kw)  # beyond the 3 slots: a second group waits for them
    assert [c.index for c in more.choices] == [0, 1, 2, 3, 4] and [c.text for c in more.choices[:3]] == texts


def test_chat_n_choices_stream_with_logprobs(client):
    kw = dict(model=NAME, messages=HELLO, max_tokens=4, temperature=1.0, seed=9, n=2, logprobs=True)
    whole = client.chat.completions.create(**kw)
    assert [c.index for c in whole.choices] == [0, 1]
    got = {0: [], 1: []}
    finishes = {}
    for c in client.chat.completions.create(stream=True, **kw):
        ch = c.choices[0]
        if ch.logprobs:
            got[ch.index] += [e.logprob for e in ch.logprobs.content]
        if ch.finish_reason:
            finishes[ch.index] = ch.finish_reason
    for c in whole.choices:
        assert got[c.index] == [e.logprob for e in c.logprobs.content]
        assert finishes[c.index] == c.finish_reason
    assert whole.usage.completion_tokens == sum(len(c.logprobs.content) for c in whole.choices) + \
        sum(c.finish_reason == "stop" for c in whole.choices)  # the end token counts, it has no logprob


def test_logit_bias_bans_and_forces(client, model):
    kw = dict(model=NAME, prompt=PROMPT, max_tokens=3, temperature=0)
    first = model.tokenize(client.completions.create(**kw).choices[0].text, add_special=False)[0]
    banned = client.completions.create(logit_bias={str(first): -100}, **kw).choices[0].text
    assert model.tokenize(banned, add_special=False)[0] != first
    x = model.tokenize(" x", add_special=False)[0]
    assert client.completions.create(logit_bias={str(x): 100}, **kw).choices[0].text == " x x x"
    chat = client.chat.completions.create(model=NAME, messages=HELLO, max_tokens=3, temperature=0,
                                          logit_bias={str(x): 100})
    assert chat.choices[0].message.content == " x x x"


@pytest.mark.parametrize("route, extra, param", [
    ("/v1/completions", {"logprobs": 6}, "logprobs"),
    ("/v1/completions", {"logprobs": True}, "logprobs"),
    ("/v1/completions", {"echo": "yes"}, "echo"),
    ("/v1/chat/completions", {"logprobs": 1}, "logprobs"),
    ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ("/v1/chat/completions", {"top_logprobs": 2}, "top_logprobs"),
    ("/v1/chat/completions", {"echo": True}, "echo"),
    ("/v1/completions", {"n": 0}, "n"),
    ("/v1/completions", {"n": 17}, "n"),  # more choices than a request may ask for (16)
    ("/v1/completions", {"n": 1.5}, "n"),
    ("/v1/completions", {"logit_bias": {"49152": 1}}, "logit_bias"),
    ("/v1/completions", {"logit_bias": {"5": 101}}, "logit_bias"),
    ("/v1/completions", {"logit_bias": {"five": 1}}, "logit_bias"),
    ("/v1/completions", {"logit_bias": {"5": "1"}}, "logit_bias"),
    ("/v1/completions", {"logit_bias": [5]}, "logit_bias"),
    ("/v1/completions", {"logit_bias": {"1" * 5000: 1}}, "logit_bias"),  # beyond Python's int-from-str limit
    ("/v1/completions", {"logit_bias": {"0" * 30 + "5": 1}}, "logit_bias"),
    ("/v1/completions", {"best_of": 2}, "best_of"),
    ("/v1/completions", {"suffix": "!"}, "suffix"),
])
def test_bad_values_are_a_400_naming_the_parameter(server, route, extra, param):
    body = {"prompt": PROMPT} if route == "/v1/completions" else {"messages": HELLO}
    status, _, answer = raw(server.url, "POST", route, {**body, "max_tokens": 2, **extra})
    assert status == 400 and answer["error"]["param"] == param, answer
