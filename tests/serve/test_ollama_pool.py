"""Ollama's API over the model pool: a model loads on its first request, /api/ps lists it, and
keep_alive 0 unloads it."""
from __future__ import annotations

import threading
import time

import ollama
import pytest
import uvicorn

from localinfer.serve import ModelPool, create_app
from localinfer.batching.config import EngineConfig


@pytest.fixture(scope="module")
def url(smollm2_path, gemma3_path):
    pool = ModelPool({"smollm2": smollm2_path, "gemma3": gemma3_path},
                                 EngineConfig(n_slots=1, n_ctx=256), keep_alive="5m")
    server = uvicorn.Server(uvicorn.Config(create_app(pool), host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        thread.join(0.02)
    host, port = server.servers[0].sockets[0].getsockname()[:2]
    yield f"http://{host}:{port}"
    server.should_exit = True
    thread.join(60)


def test_models_load_on_demand_and_keep_alive_0_unloads(url):
    c = ollama.Client(host=url, timeout=120)
    assert {m.model for m in c.list().models} == {"smollm2", "gemma3"}
    assert c.ps().models == []
    r = c.chat(model="gemma3", messages=[{"role": "user", "content": "Hi"}], options={"num_predict": 2})
    assert r.done and r.load_duration > 0
    [loaded] = c.ps().models
    assert loaded.model == "gemma3" and loaded.expires_at is not None and loaded.context_length == 256
    assert c.generate(model="smollm2:latest", keep_alive=-1).done_reason == "load"
    assert {m.model for m in c.ps().models} == {"gemma3", "smollm2"}
    assert c.generate(model="gemma3", keep_alive=0).done_reason == "unload"
    for _ in range(500):  # the unload runs in a thread: /api/ps drops the model once it is done
        if [m.model for m in c.ps().models] == ["smollm2"]:
            break
        time.sleep(0.02)
    assert [m.model for m in c.ps().models] == ["smollm2"]
    answer = c.chat(model="gemma3", messages=[{"role": "user", "content": "Hi"}], options={"num_predict": 2},
                    keep_alive=0)  # answers, then unloads
    assert answer.done and answer.eval_count <= 2
    for _ in range(500):
        if [m.model for m in c.ps().models] == ["smollm2"]:
            break
        time.sleep(0.02)
    assert [m.model for m in c.ps().models] == ["smollm2"]
