"""/v1/embeddings on a real server: the openai client, the request checks, and the engine alongside."""
from __future__ import annotations

import base64
import threading
import time

import numpy as np
import openai
import pytest

import localinfer
from localinfer.embedding import DEFAULT_N_BATCH
from localinfer.serve.app import BackgroundServer

from serve_helpers import raw

NAME = "smollm2"
TEXTS = ["The quick brown fox jumps over the lazy dog.", "Embeddings map a text to one vector per sentence."]


@pytest.fixture(scope="module")
def model(smollm2_path):
    with localinfer.load(str(smollm2_path), n_ctx=256) as m:
        yield m


@pytest.fixture(scope="module")
def server(model):
    with BackgroundServer(model, NAME, port=0, n_slots=2, n_ctx=256) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_openai_client_gets_model_embed(client, model):
    want = model.embed(TEXTS)  # the server's default pooling: the file has none, so mean
    r = client.embeddings.create(model=NAME, input=TEXTS)  # the client asks for base64 and decodes it
    assert r.object == "list" and r.model == NAME and [d.index for d in r.data] == [0, 1]
    np.testing.assert_array_equal(np.array([d.embedding for d in r.data], np.float32), want)
    assert r.usage.prompt_tokens == r.usage.total_tokens == sum(len(model.tokenize(t)) for t in TEXTS)
    floats = client.embeddings.create(model=NAME, input=TEXTS[0], encoding_format="float")
    np.testing.assert_array_equal(np.array(floats.data[0].embedding, np.float32), want[0])


def test_token_ids_and_base64(server, model):
    ids = model.tokenize(TEXTS[1])
    status, _, body = raw(server.url, "POST", "/v1/embeddings", {"input": ids, "encoding_format": "base64"})
    assert status == 200, body
    got = np.frombuffer(base64.b64decode(body["data"][0]["embedding"]), "<f4")
    np.testing.assert_array_equal(got, model.embed(TEXTS[1])[0])
    status, _, body = raw(server.url, "POST", "/v1/embeddings", {"input": [ids, ids[:3]]})
    assert status == 200 and len(body["data"]) == 2 and body["usage"]["prompt_tokens"] == len(ids) + 3


@pytest.mark.parametrize("body, param, words", [
    ({}, "input", "must be a string"),
    ({"input": ""}, "input", "empty string"),
    ({"input": []}, "input", "not empty"),
    ({"input": [1, "a"]}, "input", "input[0]"),
    ({"input": [[1, 2], [True]]}, "input", "input[1]"),
    ({"input": [[5, 10 ** 6]]}, "input", "unknown token id"),
    ({"input": [[5], []]}, "input", "input[1] has no tokens"),
    ({"input": "word " * 300}, "input", "context holds 256"),
    ({"input": ["a"] * 2049}, "input", "at most 2048"),
    ({"input": "a", "encoding_format": "binary"}, "encoding_format", "'float' or 'base64'"),
    ({"input": "a", "dimensions": 64}, "dimensions", "not supported"),
    ({"input": "a", "dimensions": "576"}, "dimensions", "integer"),
    ({"input": "a", "user": 5}, "user", "string"),
])
def test_bad_requests_are_400_naming_the_parameter(server, body, param, words):
    status, _, answer = raw(server.url, "POST", "/v1/embeddings", body)
    assert status == 400, answer
    assert answer["error"]["param"] == param and words in answer["error"]["message"]


def test_dimensions_equal_to_the_width_is_accepted(client, model):
    r = client.embeddings.create(model=NAME, input=TEXTS[0], dimensions=model.runtime.config.n_embd)
    assert len(r.data[0].embedding) == model.runtime.config.n_embd


def test_embeddings_while_the_engine_generates(client, model):
    """Embedding passes and engine steps share the runtime under its lock: neither disturbs the other."""
    messages = [{"role": "user", "content": "Count from one to twenty."}]
    want_text = client.chat.completions.create(model=NAME, messages=messages, max_tokens=40,
                                               temperature=0).choices[0].message.content
    want = model.embed(TEXTS)
    got, errors = [], []

    def embed_repeatedly():
        try:
            for _ in range(4):
                r = client.embeddings.create(model=NAME, input=TEXTS)
                got.append(np.array([d.embedding for d in r.data], np.float32))
        except Exception as e:  # reported below, in the test's thread
            errors.append(e)

    t = threading.Thread(target=embed_repeatedly)
    t.start()
    text = client.chat.completions.create(model=NAME, messages=messages, max_tokens=40,
                                          temperature=0).choices[0].message.content
    t.join()
    assert not errors and len(got) == 4
    assert text == want_text
    for g in got:
        np.testing.assert_array_equal(g, want)


def test_server_pooling_option(model):
    with BackgroundServer(model, NAME, port=0, n_slots=1, n_ctx=256, pooling="last") as s:
        status, _, body = raw(s.url, "POST", "/v1/embeddings", {"input": TEXTS[0], "encoding_format": "float"})
    assert status == 200
    np.testing.assert_array_equal(np.array(body["data"][0]["embedding"], np.float32),
                                  model.embed(TEXTS[0], pooling="last")[0])


def test_a_client_that_goes_stops_its_embeddings_between_passes(server, monkeypatch):
    """The forward passes run off the event loop; when the client disconnects, the next pass
    boundary ends the job instead of computing every input for nobody."""
    import json

    from localinfer.serve import embeddings as embedding_api
    from serve_helpers import connect, post_bytes

    run, passes, ended = embedding_api.EmbeddingJob.run, [], threading.Event()

    def counted(self, model, *args):
        try:
            for step in run(self, model, *args):
                passes.append(1)
                yield step
        finally:
            ended.set()

    monkeypatch.setattr(embedding_api.EmbeddingJob, "run", counted)
    inputs = [list(range(100 + i, 300 + i)) for i in range(24)]
    body = json.dumps({"model": NAME, "input": inputs}).encode()
    # every pass of the whole request: the passes are packed full (embedding.embed_passes)
    total = -(-sum(map(len, inputs)) // DEFAULT_N_BATCH)
    assert total >= 8
    s = connect(server.url)
    s.sendall(post_bytes("/v1/embeddings", body))
    t0 = time.monotonic()
    while not passes and time.monotonic() - t0 < 60:  # until its first pass is done
        time.sleep(0.01)
    s.close()
    assert ended.wait(60)
    assert len(passes) < total
    assert raw(server.url, "POST", "/v1/embeddings", {"model": NAME, "input": "still here"})[0] == 200
