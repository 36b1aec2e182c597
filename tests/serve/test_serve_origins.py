"""A keyless server answers its own origins only (serve/origins.py): another site's page cannot
POST to it (no preflight needed for text/plain or a form) and DNS rebinding cannot read it, while
clients that send no Origin, the server's own page, and origins the operator allows keep working."""
from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

import localinfer
from localinfer.serve.app import BackgroundServer
from localinfer.serve.config import ServerConfig
from localinfer.serve.origins import OriginGuard

from serve_helpers import raw

ALLOWED = "https://app.example"
FOREIGN = "https://evil.example"
HI = {"prompt": "Hi", "max_tokens": 1, "temperature": 0}


@pytest.fixture(scope="module")
def model(smollm2_path):
    return localinfer.load(str(smollm2_path), n_ctx=128)


@pytest.fixture(scope="module")
def server(model):
    with BackgroundServer(model, "smollm2", port=0, n_slots=1, n_ctx=128, cors_origins=(ALLOWED,)) as s:
        yield s


@pytest.fixture(scope="module")
def keyed(model):
    with BackgroundServer(model, "smollm2", port=0, n_slots=1, n_ctx=128, api_key="k",
                          cors_origins=(ALLOWED,)) as s:
        yield s


def _netloc(server) -> str:
    return server.url.removeprefix("http://")


@pytest.mark.parametrize("content_type, body", [
    ("text/plain", json.dumps(HI).encode()),  # what a page's fetch() or sendBeacon sends with no preflight
    ("application/x-www-form-urlencoded", b'{"prompt": "Hi", "max_tokens": 1, "x": "="}'),  # a <form>
    ("application/json", json.dumps(HI).encode())])
def test_a_foreign_origin_is_refused(server, content_type, body):
    status, headers, answer = raw(server.url, "POST", "/v1/completions", body,
                                  {"Origin": FOREIGN, "Content-Type": content_type})
    assert status == 403 and "--cors-origins" in answer["error"]["message"]
    assert "access-control-allow-origin" not in headers
    status, _, answer = raw(server.url, "POST", "/api/generate", {"model": "smollm2", "prompt": "Hi"},
                            {"Origin": FOREIGN, "Content-Type": content_type})
    assert status == 403 and FOREIGN in answer["error"]  # Ollama's error shape on its routes
    for origin in ("null", "chrome-extension://abc"):  # a sandboxed frame or a file; an extension
        assert raw(server.url, "POST", "/v1/completions", HI, {"Origin": origin})[0] == 403


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8080", "127.0.0.1.evil.example"])
def test_a_foreign_host_is_refused(server, host):
    """DNS rebinding: the attacker's name resolves to 127.0.0.1, the page is then 'same-origin'."""
    status, _, answer = raw(server.url, "POST", "/api/show", {"model": "smollm2"},
                            {"Host": host, "Origin": f"http://{host}"})
    assert status == 403 and "--allowed-hosts" in answer["error"]
    assert raw(server.url, "GET", "/v1/models", headers={"Host": host})[0] == 403


def test_clients_without_origin_and_the_own_page_keep_working(server):
    port = server.url.rsplit(":", 1)[1]
    assert raw(server.url, "POST", "/v1/completions", HI)[0] == 200
    for host in (_netloc(server), f"localhost:{port}", "localhost", "[::1]:" + port, "127.0.0.1"):
        assert raw(server.url, "GET", "/v1/models", headers={"Host": host})[0] == 200, host
    # the chat page's fetch() from http://127.0.0.1:PORT/ (or localhost): same-origin
    for origin, host in ((server.url, _netloc(server)), (f"http://localhost:{port}", f"localhost:{port}")):
        status, headers, _ = raw(server.url, "POST", "/v1/completions", HI, {"Origin": origin, "Host": host})
        assert status == 200, origin
    # a page on another loopback port (a local dev server) passes too, as Ollama's defaults allow
    assert raw(server.url, "POST", "/v1/completions", HI, {"Origin": "http://localhost:3000"})[0] == 200


def test_an_allowed_origin_gets_cors_headers_and_its_preflight(server):
    status, headers, _ = raw(server.url, "POST", "/v1/completions", HI, {"Origin": ALLOWED})
    assert status == 200 and headers["access-control-allow-origin"] == ALLOWED and "Origin" in headers["vary"]
    preflight = {"Origin": ALLOWED, "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "content-type, authorization"}
    status, headers, _ = raw(server.url, "OPTIONS", "/v1/chat/completions", None, preflight)
    assert status == 204 and headers["access-control-allow-origin"] == ALLOWED
    assert "POST" in headers["access-control-allow-methods"]
    assert "content-type" in headers["access-control-allow-headers"].lower()
    status, headers, _ = raw(server.url, "OPTIONS", "/v1/chat/completions", None, {**preflight, "Origin": FOREIGN})
    assert status == 403 and "access-control-allow-origin" not in headers
    # a streamed answer carries the header too
    status, headers, _ = raw(server.url, "POST", "/v1/completions", {**HI, "stream": True}, {"Origin": ALLOWED})
    assert status == 200 and headers["access-control-allow-origin"] == ALLOWED


def test_show_reveals_no_path(server, smollm2_path):
    status, _, shown = raw(server.url, "POST", "/api/show", {"model": "smollm2"})
    assert status == 200 and f"FROM {smollm2_path.name}" in shown["modelfile"]
    assert str(smollm2_path.parent) not in json.dumps(shown)


def test_with_an_api_key_the_key_decides(keyed):
    auth = {"Authorization": "Bearer k"}
    assert raw(keyed.url, "POST", "/v1/completions", HI, {"Origin": FOREIGN})[0] == 401
    assert raw(keyed.url, "POST", "/v1/completions", HI, {"Origin": FOREIGN, **auth})[0] == 200
    assert raw(keyed.url, "POST", "/v1/completions", HI, {"Host": "evil.example", **auth})[0] == 200
    preflight = {"Origin": ALLOWED, "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization, content-type"}
    status, headers, _ = raw(keyed.url, "OPTIONS", "/v1/completions", None, preflight)
    assert status == 204 and headers["access-control-allow-origin"] == ALLOWED
    status, headers, _ = raw(keyed.url, "POST", "/v1/completions", HI, {"Origin": ALLOWED, **auth})
    assert status == 200 and headers["access-control-allow-origin"] == ALLOWED


def _guard(**config) -> OriginGuard:
    return OriginGuard(None, ServerConfig(**config))


def test_host_rules():
    loopback = _guard()
    assert all(loopback.host_allowed(h) for h in ("localhost:1", "LOCALHOST", "a.localhost", "127.0.0.2:80", "[::1]"))
    assert not any(loopback.host_allowed(h) for h in ("192.168.1.5", "example.com", "localhost.example.com:80"))
    lan = _guard(host="192.168.1.5", allowed_hosts=("box.lan",))
    assert lan.host_allowed("192.168.1.5:8080") and lan.host_allowed("box.lan") and not lan.host_allowed("10.0.0.1")
    # listening everywhere: any address literal (rebinding needs a name), names only when allowed
    anywhere = _guard(host="0.0.0.0")
    assert anywhere.host_allowed("10.0.0.7:8080") and anywhere.host_allowed("[fe80::1]:80")
    assert not anywhere.host_allowed("evil.example")
    assert _guard(allowed_hosts=("*",)).host_allowed("evil.example")
    assert _guard(cors_origins=("*",)).origin_allowed(FOREIGN, "127.0.0.1:1")


def test_listening_beyond_loopback_without_a_key_warns(tmp_path):
    missing = str(tmp_path / "missing.gguf")  # the warning comes before the model loads: no model needed
    r = subprocess.run([sys.executable, "-m", "localinfer.cli.main", "serve", missing, "--host", "0.0.0.0"],
                       capture_output=True, text=True, timeout=120)
    assert "warning: listening on 0.0.0.0 without --api-key" in r.stderr
    r = subprocess.run([sys.executable, "-m", "localinfer.cli.main", "serve", missing, "--host", "0.0.0.0",
                        "--api-key", "k"], capture_output=True, text=True, timeout=120)
    assert "warning" not in r.stderr
