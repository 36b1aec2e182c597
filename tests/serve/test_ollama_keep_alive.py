"""Ollama's keep_alive reaches the registry's lease, and an empty request with keep_alive 0 unloads
(a registry that records what it is asked, over one real model; the app in process)."""
from __future__ import annotations

import contextlib
import dataclasses

import pytest
from starlette.testclient import TestClient

import localinfer
from localinfer.serve import create_app
from localinfer.batching.config import EngineConfig, start_engine
from localinfer.serve.registry import Served, StaticRegistry

NAME = "smollm2"


class RecordingRegistry(StaticRegistry):
    """StaticRegistry that records each lease's keep_alive and can be told to unload."""

    def __init__(self, served, path):
        super().__init__(served, path)
        self.leases, self.unloads, self.is_loaded = [], [], True

    @contextlib.asynccontextmanager
    async def lease(self, name, keep_alive=None):
        self.leases.append((self.resolve(name), keep_alive))
        self.is_loaded = True
        async with super().lease(name, keep_alive) as served:
            yield served

    async def unload(self, name):
        self.unloads.append(self.resolve(name))
        self.is_loaded = False
        return True

    def entries(self):
        return [dataclasses.replace(e, loaded=self.is_loaded) for e in super().entries()]


@pytest.fixture(scope="module")
def app_and_registry(smollm2_path):
    model = localinfer.load(str(smollm2_path), n_ctx=256)
    registry = RecordingRegistry(Served(NAME, model, start_engine(model, EngineConfig(n_slots=1, n_ctx=256)),
                                        size_bytes=smollm2_path.stat().st_size), str(smollm2_path))
    # base_url: a keyless app answers only loopback Host names (serve/origins.py), not "testserver"
    with TestClient(create_app(registry), base_url="http://localhost") as http:  # the lifespan closes the registry's engine
        yield http, registry


@pytest.mark.parametrize("keep_alive, seconds", [("5m", 300.0), (30, 30.0), (-1, -1.0), ("-1h", -1.0), (None, None)])
def test_keep_alive_reaches_the_lease(app_and_registry, keep_alive, seconds):
    http, registry = app_and_registry
    body = {"model": f"{NAME}:latest", "prompt": "Hi", "stream": False, "options": {"num_predict": 2}}
    if keep_alive is not None:
        body["keep_alive"] = keep_alive
    r = http.post("/api/generate", json=body)
    assert r.status_code == 200 and r.json()["eval_count"] <= 2
    assert registry.leases[-1] == (NAME, seconds)


def test_empty_request_with_keep_alive_0_unloads_and_ps_shows_it(app_and_registry):
    http, registry = app_and_registry
    assert [m["model"] for m in http.get("/api/ps").json()["models"]] == [NAME]
    r = http.post("/api/chat", json={"model": NAME, "messages": [], "keep_alive": 0})
    assert r.status_code == 200 and r.json()["done_reason"] == "unload" and registry.unloads == [NAME]
    assert http.get("/api/ps").json()["models"] == []
    r = http.post("/api/generate", json={"model": NAME, "keep_alive": "10m"})  # an empty prompt loads
    assert r.json()["done_reason"] == "load" and registry.leases[-1] == (NAME, 600.0)
    assert [m["model"] for m in http.get("/api/ps").json()["models"]] == [NAME]


def test_the_api_key_guards_ollamas_routes_too(smollm2_path):
    model = localinfer.load(str(smollm2_path), n_ctx=128)
    with TestClient(create_app(model, model_name=NAME, api_key="sesame", n_slots=1, n_ctx=128)) as http:
        for method, path in (("GET", "/api/tags"), ("GET", "/api/ps"), ("POST", "/api/chat"), ("POST", "/api/show")):
            r = http.request(method, path, json={"model": NAME})
            assert r.status_code == 401 and set(r.json()) == {"error"}, (path, r.text)
        r = http.get("/api/tags", headers={"Authorization": "Bearer sesame"})
        assert r.status_code == 200 and [m["name"] for m in r.json()["models"]] == [NAME]
        assert http.head("/").status_code == 200  # Ollama's clients probe the root: the chat page answers
