"""Scoring a prompt (/v1/completions with echo and logprobs) runs in an engine slot like any request:
it counts against --parallel and the queue, and its logits come in bounded chunks, each row still
Model.logits' row bit for bit."""
from __future__ import annotations

import threading
import time

import pytest

import localinfer
from localinfer.batching import engine as engine_module
from localinfer.sampling.logprobs import score_prompt
from localinfer.serve.app import BackgroundServer

from serve_helpers import raw, wait_idle

N_CTX = 512


@pytest.fixture(scope="module")
def model(smollm2_path):
    return localinfer.load(str(smollm2_path), n_ctx=N_CTX)


@pytest.fixture(scope="module")
def server(model):
    with BackgroundServer(model, "smollm2", port=0, n_slots=1, n_ctx=N_CTX, max_queue=0) as s:
        yield s


def _ids(model, n: int) -> list[int]:
    return (model.tokenize("The quick brown fox jumps over the lazy dog. " * 60))[:n]


def _score(url, ids, n_top=2, **extra):
    return raw(url, "POST", "/v1/completions", {"prompt": ids, "max_tokens": 0, "echo": True, "logprobs": n_top,
                                                "temperature": 0, **extra}, timeout=300)


def test_a_long_prompt_is_scored_in_chunks_as_model_logits(server, model):
    ids = _ids(model, 400)
    rows = engine_module.SCORE_LOGITS_BYTES // (4 * model.n_vocab)
    assert len(ids) > 2 * rows  # several chunks, the last one not short
    status, _, body = _score(server.url, ids)
    assert status == 200, body
    lp = body["choices"][0]["logprobs"]
    want = score_prompt(model, ids, 2)  # Model.logits' rows (tests/generation/test_logprobs.py)
    assert lp["token_logprobs"] == [w.logprob for w in want]
    assert lp["top_logprobs"][0] is None and all(0 < len(d) <= 2 for d in lp["top_logprobs"][1:])
    assert body["usage"] == {**body["usage"], "prompt_tokens": len(ids), "completion_tokens": 0}
    # streamed: the echoed prompt with the same logprobs, then the finish
    status, _, text = raw(server.url, "POST", "/v1/completions",
                          {"prompt": ids, "max_tokens": 0, "echo": True, "logprobs": 2, "stream": True})
    assert status == 200 and str(want[-1].logprob) in text and text.rstrip().endswith("data: [DONE]")


def test_scoring_takes_a_slot_and_the_queue(server, model):
    """-np 1 and no queue: while one scoring request holds the slot, a second is a 503 as a
    generation request would be (before, scoring ran beside the engine: slots_busy stayed 0)."""
    wait_idle(server.url)
    ids = _ids(model, 300)
    first: dict = {}
    with model._lock:  # the engine's forward passes wait here: the first request stays in its slot
        t = threading.Thread(target=lambda: first.update(zip(("status", "headers", "body"), _score(server.url, ids))))
        t.start()
        for _ in range(2000):  # until the engine has admitted it (a bounded number of polls)
            state = raw(server.url, "GET", "/health")[2]
            if state["slots_busy"] == 1:
                break
            time.sleep(0.01)
        assert state["slots_busy"] == 1, state
        status, headers, body = _score(server.url, ids[:50])
        assert status == 503 and body["error"]["code"] == "server_busy" and "retry-after" in headers
        status, _, body = raw(server.url, "POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 1})
        assert status == 503
    t.join(timeout=300)
    assert first["status"] == 200 and len(first["body"]["choices"][0]["logprobs"]["token_logprobs"]) == len(ids)
    assert wait_idle(server.url)["slots_busy"] == 0
