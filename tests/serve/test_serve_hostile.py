"""Malformed and hostile requests: each gets a clear error or is dropped, and afterwards the
server still answers a normal request correctly and holds no slot or queue entry."""
from __future__ import annotations

import json
import socket
import threading
import time

import pytest

import localinfer
from localinfer.serve.app import BackgroundServer

from serve_helpers import connect, metric, post_bytes, raw, wait_idle

COUNTING = {"model": "smollm2", "prompt": "1, 2, 3, 4, 5, 6,", "temperature": 0}


@pytest.fixture(scope="module")
def server(smollm2_path):
    model = localinfer.load(str(smollm2_path), n_ctx=256)
    with BackgroundServer(model, "smollm2", port=0, n_slots=2, n_ctx=256, max_queue=1, max_body=32 << 10,
                          io_timeout=3.0, body_timeout=2.0) as s:
        yield s


@pytest.fixture(scope="module")
def baseline(server):
    status, _, body = raw(server.url, "POST", "/v1/completions", {**COUNTING, "max_tokens": 8})
    assert status == 200
    return body["choices"][0]["text"]


def _error(status_body, status, *needles, param=None):
    got, _, body = status_body
    assert got == status, body
    err = body["error"]
    # OpenAI's four fields; a prompt too long for the context adds llama-server's two
    assert set(err) - {"n_prompt_tokens", "n_ctx"} == {"message", "type", "param", "code"}
    for n in needles:
        assert n in err["message"], err["message"]
    if param:
        assert err["param"] == param
    return err


def test_malformed_bodies(server, baseline):
    u = server.url
    _error(raw(u, "POST", "/v1/chat/completions", b'{"messages": [oops'), 400, "not valid JSON")
    _error(raw(u, "POST", "/v1/chat/completions", b"\xff\xfe\x00"), 400, "not valid JSON")
    _error(raw(u, "POST", "/v1/chat/completions", b"[1, 2]"), 400, "JSON object")
    _error(raw(u, "POST", "/v1/chat/completions", b"[" * 15000 + b"]" * 15000), 400, "nested too deeply")
    _error(raw(u, "POST", "/v1/nowhere", {}), 404, "no route")
    _error(raw(u, "GET", "/v1/chat/completions"), 405, "POST")


def test_wrong_types_and_values(server):
    u, chat = server.url, "/v1/chat/completions"
    hi = [{"role": "user", "content": "hi"}]
    _error(raw(u, "POST", chat, {"messages": "hi"}), 400, "messages", param="messages")
    _error(raw(u, "POST", chat, {"messages": [{"content": "hi"}]}), 400, "role")
    _error(raw(u, "POST", chat, {"messages": [{"role": "user", "content": 5}]}), 400, "content")
    _error(raw(u, "POST", chat, {"messages": hi, "max_tokens": "10"}), 400, "integer", param="max_tokens")
    _error(raw(u, "POST", chat, {"messages": hi, "temperature": -1}), 400, "between", param="temperature")
    _error(raw(u, "POST", chat, {"messages": hi, "stop": 5}), 400, param="stop")
    _error(raw(u, "POST", chat, {"messages": hi, "seed": 1.5}), 400, param="seed")
    _error(raw(u, "POST", chat, {"messages": hi, "n": 17}), 400, "between 1 and 16", param="n")
    _error(raw(u, "POST", chat, {"messages": hi, "model": 7}), 400, param="model")
    status, _, body = raw(u, "POST", chat, {"messages": hi, "model": "llama-70b", "max_tokens": 1})
    assert status == 200 and body["model"] == "smollm2"  # one model served: any name means it, as in llama-server
    _error(raw(u, "POST", "/v1/completions", {"prompt": [1, 2, 10 ** 9]}), 400, "unknown token id")
    _error(raw(u, "POST", "/v1/completions", {"prompt": {"a": 1}}), 400, param="prompt")


def test_absurd_max_tokens_and_too_long_prompts(server):
    u = server.url
    err = _error(raw(u, "POST", "/v1/completions", {"prompt": "hi", "max_tokens": 10 ** 12}), 400,
                 str(10 ** 12), "256", param="max_tokens")
    assert err["code"] == "invalid_value"
    _error(raw(u, "POST", "/v1/completions", {"prompt": "hi", "max_tokens": -5}), 400, param="max_tokens")
    err = _error(raw(u, "POST", "/v1/completions", {"prompt": "word " * 300}), 400, "301", "256")
    assert err["code"] == "context_length_exceeded"  # both numbers, never a silent truncation


def test_a_prompt_far_over_the_context_is_refused_before_it_is_tokenized(server, monkeypatch):
    """A prompt of more characters than the context's tokens could spell (Tokenizer.fewest_tokens)
    is refused at once: tokenizing megabytes only to count them cost seconds and gigabytes."""
    from localinfer.tokenizer.bpe import BpeEncoder
    lengths, encode = [], BpeEncoder.encode_fragments

    def counting(self, fragments, *args):
        lengths.extend(len(f) for f in fragments if isinstance(f, str))
        return encode(self, fragments, *args)

    monkeypatch.setattr(BpeEncoder, "encode_fragments", counting)
    huge = "a" * 30_000   # at most 81 characters a token in smollm2's vocabulary: >= 370 tokens
    for path, body, param in (("/v1/completions", {"prompt": huge}, "prompt"),
                              ("/v1/chat/completions", {"messages": [{"role": "user", "content": huge}]}, "messages"),
                              ("/v1/embeddings", {"input": [huge]}, "input")):
        err = _error(raw(server.url, "POST", path, body), 400, "is at least", "256", param=param)
        assert err["code"] == "context_length_exceeded", path
    assert max(lengths, default=0) < 1000   # none of the huge text went through the tokenizer
    # under the bound, the count decides as before
    err = _error(raw(server.url, "POST", "/v1/completions", {"prompt": "word " * 300}), 400, "301", "256")
    assert err["message"].startswith("the prompt is 301 tokens long")


def test_huge_and_missing_bodies(server):
    u = server.url
    _error(raw(u, "POST", "/v1/completions", json.dumps({"prompt": "x" * (40 << 10)}).encode()), 413,
           "limit is 32768")
    with connect(u) as s:  # a claimed size over the limit is refused before a byte of it is read
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: 99999999999\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 413")
    with connect(u) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 411")
    with connect(u) as s:
        s.sendall(b"\x16\x03\x01 garbage that is not HTTP\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 400")


def _answer(url, seed: int) -> str:
    """A normal request (a seed keeps it out of the completion cache): the server still serves."""
    status, _, body = raw(url, "POST", "/v1/completions", {**COUNTING, "max_tokens": 8, "seed": seed})
    assert status == 200, body
    return body["choices"][0]["text"]


def test_lone_surrogates_and_overlong_integers_are_400(server, baseline):
    u = server.url
    for path, body in [
        ("/v1/completions", b'{"prompt": "hi \\ud800 there", "max_tokens": 2}'),
        ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "\\udfff"}], "max_tokens": 2}'),
        ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": [{"type": "text", "text": "\\udc00"}]}]}'),
        ("/v1/completions", b'{"prompt": "hi", "max_tokens": 2, "stop": ["\\ud83d"]}'),  # a pair cut in half
        ("/v1/completions", b'{"prompt": "hi", "max_tokens": 2, "\\ud800": 1}'),
        ("/v1/completions", '{"prompt": "hi \ud800"}'.encode("utf-8", "surrogatepass")),  # as raw bytes
    ]:
        _error(raw(u, "POST", path, body), 400, "lone UTF-16 surrogate")
    # a surrogate pair is one character: json.dumps writes an emoji so by default
    status, _, body = raw(u, "POST", "/v1/completions", {"prompt": "\U0001F600 1, 2,", "max_tokens": 2})
    assert status == 200, body
    for body in (b'{"prompt": "hi", "max_tokens": ' + b"9" * 5000 + b"}",
                 b'{"prompt": [' + b"1" * 4301 + b"]}",
                 b'{"prompt": "hi", "seed": -' + b"7" * 10000 + b"}"):
        _error(raw(u, "POST", "/v1/completions", body), 400, "integer longer than")
    assert wait_idle(u)["slots_busy"] == 0
    assert _answer(u, seed=11) == baseline


def _exchange(url, data: bytes) -> bytes:
    """Sends data on a fresh connection; everything the server answers until it closes."""
    with connect(url, timeout=10) as s:
        s.sendall(data)
        return _read_until(s, b"never sent", timeout=10)


def _one_error(reply: bytes, status: int, needle: str) -> dict:
    head, _, payload = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d " % status), reply
    assert b"\r\nconnection: close" in head.lower(), head
    assert reply.count(b"HTTP/1.1 ") == 1, reply  # nothing after it was read as a request
    err = json.loads(payload)["error"]
    assert set(err) == {"message", "type", "param", "code"} and needle in err["message"], err
    return err


def test_ambiguous_framing_is_refused_and_the_connection_closed(server, baseline):
    u = server.url
    body = json.dumps({**COUNTING, "max_tokens": 2}).encode()
    n = len(body)
    # behind each body, a request a proxy that framed it differently would not have seen
    smuggled = b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n"
    # the HTTP parser (llhttp) refuses each of these itself, before the app sees the request
    for headers, status, needle in [
        (f"Content-Length: {n}\r\nContent-Length: {n}\r\n", 400, "Duplicate Content-Length"),
        (f"Content-Length: {n}\r\nContent-Length: 5\r\n", 400, "Duplicate Content-Length"),
        (f"Content-Length: 5\r\nContent-Length: {n}\r\n", 400, "Duplicate Content-Length"),
        (f"Content-Length: {n}, {n}\r\n", 400, "Invalid character in Content-Length"),
        (f"Content-Length: +{n}\r\n", 400, "Invalid character in Content-Length"),
        (f"Content-Length: {n // 10}_{n % 10}\r\n", 400, "Invalid character in Content-Length"),
        (f"Content-Length: {n}\r\nTransfer-Encoding: chunked\r\n", 400,
         "Transfer-Encoding can't be present with Content-Length"),
        (f"Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\nContent-Length: {n}\r\n", 400,
         "Transfer-Encoding"),
    ]:
        request = (b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                   + headers.encode() + b"\r\n" + body + smuggled)
        _one_error(_exchange(u, request), status, needle)
    # a GET is held to the same framing
    twice = b"GET /health HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n"
    _one_error(_exchange(u, twice), 400, "Duplicate Content-Length")
    # leading zeros are still one length, and a single well-formed one is served on a kept-alive connection
    reply = _exchange(u, post_bytes("/v1/completions", body).replace(b"Content-Length: ", b"Content-Length: 00")
                      + b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 200") and reply.count(b"HTTP/1.1 200") == 2, reply
    assert wait_idle(u)["slots_busy"] == 0
    assert _answer(u, seed=12) == baseline


def test_a_body_answered_before_it_is_read_closes_the_connection(server, baseline):
    """An error before the body is read (no route, wrong method) and a GET with a body: the
    body's bytes are never taken for the next request on the connection."""
    u = server.url
    inner = b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n"
    for method, path, status in (("POST", "/v1/nowhere", 404), ("POST", "/v1/models", 405), ("GET", "/health", 200)):
        head = f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {len(inner)}\r\n\r\n"
        reply = _exchange(u, head.encode() + inner)
        assert reply.startswith(b"HTTP/1.1 %d " % status) and reply.count(b"HTTP/1.1 ") == 1, reply
        assert b"\r\nconnection: close" in reply.partition(b"\r\n\r\n")[0].lower()
    assert _answer(u, seed=13) == baseline


@pytest.mark.slow
def test_slow_clients_are_dropped_while_others_are_served(server):
    u = server.url
    body = json.dumps({**COUNTING, "max_tokens": 2}).encode()
    drip = connect(u)  # sends its body a byte at a time, never finishing within the body timeout
    drip.sendall(post_bytes("/v1/completions", body)[:-len(body)])
    silent = connect(u)  # stops in the middle of its headers
    silent.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Le")
    assert raw(u, "POST", "/v1/completions", {**COUNTING, "max_tokens": 2})[0] == 200  # others are served
    reply = b""
    for byte in body:
        try:
            drip.sendall(bytes([byte]))
        except OSError:
            break
        reply = _poll(drip)
        if reply:
            break
        time.sleep(0.25)
    assert reply.startswith(b"HTTP/1.1 408"), reply
    silent.settimeout(10)
    assert _read_until(silent, b"never sent", timeout=10) == b""  # closed after the I/O timeout
    drip.close(), silent.close()


def _poll(s: socket.socket) -> bytes:
    s.setblocking(False)
    try:
        return s.recv(4096)
    except BlockingIOError:
        return b""
    finally:
        s.setblocking(True)


def _start_stream(url, max_tokens=200, seed=None) -> socket.socket:
    s = connect(url)
    s.sendall(post_bytes("/v1/completions", json.dumps({**COUNTING, "max_tokens": max_tokens, "seed": seed,
                                                        "stream": True}).encode()))
    return s


def _read_until(s: socket.socket, needle: bytes, timeout: float = 60) -> bytes:
    s.settimeout(timeout)
    data = b""
    while needle not in data:
        part = s.recv(4096)
        if not part:
            break
        data += part
    return data


def _until(condition, timeout=20.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_disconnects_free_their_slots(server):
    u, counters = server.url, server.engine.metrics.counters
    cancelled = counters["cancelled"]
    s = _start_stream(u)
    assert b"data: {" in _read_until(s, b"data: {")
    s.close()  # gone mid-stream
    assert _until(lambda: counters["cancelled"] == cancelled + 1)
    quiet = connect(u)  # gone while a non-streaming answer is being generated
    quiet.sendall(post_bytes("/v1/completions", json.dumps({**COUNTING, "max_tokens": 200}).encode()))
    assert _until(lambda: server.engine.state()["slots_busy"] == 1)  # it is generating
    quiet.close()
    assert _until(lambda: counters["cancelled"] == cancelled + 2)
    state = wait_idle(u)
    assert state["slots_busy"] == 0 and state["queue_length"] == 0


def test_a_full_queue_answers_503_with_retry_after(server):
    u = server.url
    running = [_start_stream(u) for _ in range(2)]  # both slots
    for s in running:
        _read_until(s, b"data: {")
    waiting = _start_stream(u)  # the one place in the queue
    deadline = time.monotonic() + 10
    while raw(u, "GET", "/health")[2]["queue_length"] < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    status, headers, body = raw(u, "POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 2, "temperature": 0.5})
    assert status == 503 and headers["Retry-After"] == "1" and body["error"]["code"] == "server_busy"
    for s in running + [waiting]:
        s.close()
    metrics = raw(u, "GET", "/metrics")[2]
    assert metric(metrics, "localinfer_requests_total", status="rejected") == 1, metrics


def test_afterwards_a_normal_request_is_answered_correctly_and_nothing_leaked(server, baseline):
    state = wait_idle(server.url)
    assert state["slots_busy"] == 0 and state["queue_length"] == 0 and state["kv_used_tokens"] == 0
    # a seed changes nothing under greedy decoding, but keeps the answer out of the completion cache
    status, _, body = raw(server.url, "POST", "/v1/completions", {**COUNTING, "max_tokens": 8, "seed": 1})
    assert status == 200 and body["choices"][0]["text"] == baseline
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] < body["usage"]["prompt_tokens"]
    streamed = _read_until(_start_stream(server.url, max_tokens=8, seed=2), b"[DONE]")
    texts = [json.loads(line[6:])["choices"][0]["text"] for line in streamed.split(b"\r\n")
             if line.startswith(b"data: {")]
    assert "".join(texts) == baseline
    assert wait_idle(server.url)["slots_busy"] == 0
    assert threading.active_count() < 40  # connection threads of the dropped clients are gone
