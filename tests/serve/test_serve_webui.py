"""The chat page's server side: the page's files from the package, their headers, /props, and
which routes the API key guards. (tests/serve/test_webui_browser.py drives the page itself.)"""
from __future__ import annotations

import re

import pytest

import localinfer
from localinfer.serve import webui
from localinfer.serve.app import BackgroundServer

from serve_helpers import raw

NAME = "smollm2"


@pytest.fixture(scope="module")
def model(smollm2_path):
    return localinfer.load(str(smollm2_path), n_ctx=256)


@pytest.fixture(scope="module")
def server(model):
    with BackgroundServer(model, NAME, port=0, n_slots=2, n_ctx=256) as s:
        yield s


@pytest.mark.parametrize("path, kind", [("/", "text/html"), ("/webui/app.js", "text/javascript"),
                                        ("/webui/style.css", "text/css")])
def test_page_files_with_their_types_and_headers(server, path, kind):
    status, headers, body = raw(server.url, "GET", path)
    assert status == 200 and headers["Content-Type"] == kind + "; charset=utf-8"
    assert headers["Cache-Control"] == "no-cache" and headers["X-Content-Type-Options"] == "nosniff"
    assert "default-src 'self'" in headers["Content-Security-Policy"]
    assert int(headers["Content-Length"]) == len(body.encode())
    assert raw(server.url, "GET", path, headers={"If-None-Match": headers["ETag"]})[0] == 304
    assert raw(server.url, "GET", path, headers={"If-None-Match": '"stale"'})[0] == 200


def test_the_page_loads_nothing_from_elsewhere():
    """No CDN, font or script from the network: every URL the files name is the server's own."""
    for path in webui.PAGE_FILES:
        text = webui.page_file(path).body.decode()
        assert not re.search(r"(https?:)?//[a-z0-9]", text, re.I), path
        assert "innerHTML" not in text and "insertAdjacentHTML" not in text  # model text stays text
    html = webui.page_file("").body.decode()
    for ref in re.findall(r'(?:src|href)="([^"]+)"', html):  # relative, so the page works where it is mounted
        assert not ref.startswith("/") and webui.page_file("/" + ref) is not None, ref


def test_only_get(server):
    for method in ("POST", "PUT", "DELETE"):
        status, headers, body = raw(server.url, method, "/", body=b"")
        assert status == 405 and set(headers["Allow"].split(", ")) == {"GET", "HEAD"}, method  # HEAD: a GET without the body
    assert raw(server.url, "GET", "/webui/nothing.js")[0] == 404
    assert raw(server.url, "GET", "/webui/../pyproject.toml")[0] == 404


def test_props(server):
    status, _, body = raw(server.url, "GET", "/props")
    # what the page reads; the rest is llama-server's (tests/serve/test_llamacpp_api.py)
    assert status == 200 and {k: body[k] for k in ("model", "n_ctx", "total_slots")} == \
        {"model": NAME, "n_ctx": 256, "total_slots": 2}


def test_api_key_guards_the_api_not_the_page(model):
    with BackgroundServer(model, NAME, port=0, n_slots=1, n_ctx=128, api_key="s3cret") as s:
        assert raw(s.url, "GET", "/")[0] == 200  # the page itself holds nothing: it asks for the key
        assert raw(s.url, "GET", "/props")[0] == 401
        assert raw(s.url, "GET", "/props", headers={"Authorization": "Bearer s3cret"})[0] == 200
