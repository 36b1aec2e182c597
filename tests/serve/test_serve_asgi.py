"""The server as an ASGI app: create_app mounted in another app under a prefix (API, page and
its relative URLs), the engine driven from the event loop (jobs.py), a client trickling its
headers, chunked bodies against the size limit, and a graceful shutdown that frees the engine."""
from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import threading
import time

import openai
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

import localinfer
from localinfer.batching.engine import EngineClosedError
from localinfer.batching.fork import Choices
from localinfer.batching.request import Request, SamplingParams
from localinfer.serve import create_app, jobs
from localinfer.serve.app import BackgroundServer

from serve_helpers import connect, post_bytes, raw, wait_idle

COUNTING = {"prompt": "1, 2, 3, 4, 5, 6,", "temperature": 0}


@pytest.fixture(scope="module")
def model(smollm2_path):
    m = localinfer.load(str(smollm2_path), n_ctx=256)
    yield m
    m.close()


@contextlib.contextmanager
def serving(app):
    """app under uvicorn on an ephemeral port, in a thread; its lifespan runs at start and stop."""
    sock = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive()
        thread.join(0.01)
    try:
        yield "http://127.0.0.1:%d" % sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def test_mounted_under_a_prefix_in_a_users_app(model):
    llm = create_app(model, model_name="smollm2", n_slots=1, n_ctx=256)

    @contextlib.asynccontextmanager
    async def lifespan(app):  # a mounted app's lifespan does not run: the outer one closes its engines
        yield
        llm.state.registry.close()

    async def home(request):
        return PlainTextResponse("the user's own page")

    outer = Starlette(routes=[Route("/", home), Mount("/llm", llm)], lifespan=lifespan)
    engine = llm.state.registry.served.engine
    with serving(outer) as url:
        assert raw(url, "GET", "/")[2] == "the user's own page"
        status, headers, html = raw(url, "GET", "/llm/")
        assert status == 200 and headers["Content-Type"].startswith("text/html")
        refs = re.findall(r'(?:src|href)="([^"]+)"', html)
        assert refs and all(raw(url, "GET", "/llm/" + ref)[0] == 200 for ref in refs)  # as a browser resolves them
        assert raw(url, "GET", "/llm/props")[2]["model"] == "smollm2"
        assert raw(url, "GET", "/llm/health")[2]["slots_total"] == 1
        status, _, body = raw(url, "GET", "/llm/v1/nowhere")
        assert status == 404 and "no route" in body["error"]["message"]
        client = openai.OpenAI(base_url=url + "/llm/v1", api_key="unused", max_retries=0, timeout=60)
        answer = client.completions.create(model="smollm2", max_tokens=6, **COUNTING)
        streamed = "".join(c.choices[0].text for c in client.completions.create(
            model="smollm2", max_tokens=6, stream=True, seed=3, **COUNTING))
        assert answer.choices[0].text == streamed and answer.usage.completion_tokens == 6
        assert "localinfer_requests_total" in raw(url, "GET", "/llm/metrics")[2]
    with pytest.raises(EngineClosedError):  # the outer lifespan closed it
        engine.submit(Request([1, 2, 3], 2))


def test_choice_events_cancel_every_choice_when_left_early(model):
    """The async job API: leaving the iteration after the first chunk cancels all n choices."""
    app = create_app(model, model_name="m", n_slots=2, n_ctx=256)
    engine = app.state.registry.served.engine
    try:
        async def first_then_leave():
            choices = Choices(model.tokenize("Once upon a time"), 2, 100, params=SamplingParams(seed=1))
            jobs.submit(engine, choices)
            async for index, chunk in jobs.choice_events(choices):
                assert index in (0, 1) and chunk.tokens
                break
            return choices

        choices = asyncio.run(first_then_leave())
        assert all(r.cancelled for r in choices.requests)
        deadline = time.monotonic() + 20
        while engine.state()["slots_busy"] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert engine.state()["slots_busy"] == 0

        async def whole():  # and a full iteration ends after every choice's last chunk
            choices = Choices(model.tokenize("1, 2, 3,"), 2, 4, params=SamplingParams(temperature=0))
            jobs.submit(engine, choices)
            return [(i, c.finish_reason) async for i, c in jobs.choice_events(choices)]

        events = asyncio.run(whole())
        assert sorted(i for i, finish in events if finish) == [0, 1]
    finally:
        app.state.registry.close()


@pytest.fixture(scope="module")
def strict(model):
    with BackgroundServer(model, "smollm2", port=0, n_slots=1, n_ctx=256, max_body=4096, io_timeout=2.0,
                          body_timeout=2.0) as s:
        yield s


def test_a_client_trickling_its_headers_is_dropped(strict):
    """uvicorn bounds no header's time: a byte every 0.2 s would hold a connection forever. The
    headers must be complete within io_timeout (2 s) or the connection is closed, unanswered."""
    u = strict.url
    head = b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n" + b"X-Padding: " + b"a" * 200 + b"\r\n"
    with connect(u, timeout=15) as s:
        sent, closed = 0, False
        while sent < len(head):
            try:
                s.sendall(head[sent:sent + 1])
            except OSError:  # reset: the server closed it
                closed = True
                break
            sent += 1
            s.settimeout(0.2)
            try:
                if s.recv(4096) == b"":
                    closed = True
                    break
            except TimeoutError:
                pass
        # cut off within 2 s: about 10 of its 250 bytes (a busy machine only sends fewer)
        assert closed and sent < len(head) // 2, f"the trickle was not cut off ({sent} bytes sent)"
    assert raw(u, "POST", "/v1/completions", {**COUNTING, "max_tokens": 2})[0] == 200  # others are served


def test_chunked_bodies_are_counted_against_the_limit(strict):
    u = strict.url
    small = json.dumps({**COUNTING, "max_tokens": 2}).encode()
    big = json.dumps({**COUNTING, "max_tokens": 2, "pad": "x" * 8000}).encode()
    for body, status in ((small, 200), (big, 413)):
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 1000]), body[i:i + 1000]) for i in range(0, len(body), 1000))
        with connect(u, timeout=30) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
                      + chunks + b"0\r\n\r\n")
            assert s.recv(4096).startswith(b"HTTP/1.1 %d " % status)
    assert wait_idle(u)["slots_busy"] == 0


def test_graceful_shutdown_frees_the_engine(model):
    s = BackgroundServer(model, "smollm2", port=0, n_slots=1, n_ctx=256, shutdown_timeout=1.0)
    with s:
        stream = connect(s.url)
        stream.sendall(post_bytes("/v1/completions", json.dumps({**COUNTING, "max_tokens": 200,
                                                                  "stream": True}).encode()))
        stream.settimeout(60)
        head = b""
        while b"data: {" not in head:  # generating
            part = stream.recv(4096)
            assert part, head
            head += part
    # close() returned: the stream was given shutdown_timeout to finish, then cut; the engine is closed
    assert not s.thread.is_alive()
    with pytest.raises(EngineClosedError):
        s.engine.submit(Request([1, 2, 3], 2))
    stream.settimeout(10)
    with contextlib.suppress(OSError):  # the stream's connection is closed (reset or EOF), not left hanging
        while stream.recv(65536):
            pass
    stream.close()
    with pytest.raises(OSError):
        connect(s.url, timeout=2).close()  # nobody listens any more

