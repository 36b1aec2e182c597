"""The HTTP server: routes, limits, authentication, and streaming (stdlib only).

Built on http.server's ThreadingHTTPServer: one thread per connection only waits on sockets
and on its request's chunk queue; all generation happens in the engine's one thread (embeddings
run in their connection's thread, a forward pass at a time under the model's lock). Keeping
to the standard library keeps the dependencies at zero, and each guard a server needs is
explicit here:

- a request body must say its Content-Length and stay under `max_body` (413 otherwise, before
  a byte of it is read), and arrive within `body_timeout` seconds whatever its pace (408);
- framing is never ambiguous: one Content-Length of plain digits and no Transfer-Encoding, on
  every route (400/411 otherwise), and a body not read before the answer closes the connection,
  so no byte of a body is taken for a request (what a proxy in front would not have seen);
- the body is JSON whose strings are Unicode text and whose integers Python will convert: a
  lone surrogate escape or an integer past the digit limit is a 400, not a crash later on;
- every socket read and write has a timeout, so a silent or slowloris client only holds its
  own connection thread, never a slot;
- a client that disconnects cancels its request: streaming notices on the next write, a
  non-streaming request polls its socket while it waits; the slot is freed at the next step.

Streams are Server-Sent Events over chunked transfer encoding, as OpenAI sends them:
`data: {json}\n\n` per chunk, then `data: [DONE]\n\n`.
"""
from __future__ import annotations

import hmac
import json
import re
import select
import socket
import sys
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from queue import Empty

from ..kv_cache import ContextFullError
from . import api, embeddings, webui
from ..batching.engine import EngineClosedError, QueueFullError
from ..batching.request import Cancelled


@dataclass
class ServerConfig:
    model_name: str
    api_key: str | None = None
    max_body: int = 4 << 20  # bytes of a request body
    body_timeout: float = 30.0  # seconds to receive a whole body
    io_timeout: float = 30.0  # seconds a socket read or write may block (and keep-alive idle time)
    verbose: bool = False
    pooling: str | None = None  # /v1/embeddings: "mean", "last" or "cls"; None: the file's, else mean
    created: int = field(default_factory=lambda: int(time.time()))


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, address, model, engine, config: ServerConfig):
        self.model, self.engine, self.config = model, engine, config
        handler = type("BoundHandler", (Handler,), {"timeout": config.io_timeout})
        super().__init__(address, handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"


_DIGITS = re.compile(r"[0-9]+")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _lone_surrogate(obj) -> str | None:
    """The first lone surrogate in any string (key or value) of parsed JSON, or None.

    json.loads lets `"\\ud800"` through (and bytes that encode a surrogate), but no such
    string can be encoded as UTF-8 later. Iterative: the body may be as deep as json allows."""
    stack = [obj]
    while stack:
        o = stack.pop()
        if isinstance(o, str):
            m = _SURROGATE.search(o)
            if m:
                return m.group()
        elif isinstance(o, dict):
            stack.extend(o)
            stack.extend(o.values())
        elif isinstance(o, list):
            stack.extend(o)
    return None


class Gone(Exception):
    """The client went away."""


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as OpenAI's client expects
    server_version = "localinfer"
    server: Server
    _unread_body = False  # the request has a body not read yet (an answer then closes the connection)

    # -- plumbing ---------------------------------------------------------------------------------
    def log_message(self, fmt, *args):
        if self.server.config.verbose:
            super().log_message(fmt, *args)

    def send_error(self, code, message=None, explain=None):
        """http.server's own errors (a malformed request line or header) in OpenAI's shape."""
        self.close_connection = True
        if self.request_version == "HTTP/0.9":  # an unparsable request line: answer in HTTP/1.1 anyway
            self.request_version = "HTTP/1.1"
        try:
            self._send_json(code, api.ApiError(code, message or explain or "bad request").body())
        except OSError:
            pass

    def _send_json(self, status: int, obj, headers=None) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _send_text(self, status: int, text: str, content_type: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _fail(self, e: api.ApiError) -> None:
        self._send_json(e.status, e.body(), e.headers)

    def _authorized(self) -> bool:
        key = self.server.config.api_key
        if not key:
            return True
        got = self.headers.get("Authorization", "")
        return hmac.compare_digest(got.encode(), f"Bearer {key}".encode())

    def _content_length(self) -> int | None:
        """The body's size from its one Content-Length header (None without one), checked for
        every request whatever its route. Where the framing is in doubt (several lengths, a
        transfer coding, a length int() would read but a proxy might not) a proxy in front may
        split the stream differently than we do and smuggle a request past itself: such a
        request is refused and its connection closed."""
        if self.headers.get_all("Transfer-Encoding"):
            self.close_connection = True
            raise api.ApiError(411, "send the body with a Content-Length (chunked bodies are not accepted)")
        lengths = self.headers.get_all("Content-Length") or []
        if not lengths:
            return None
        if len(lengths) > 1:
            self.close_connection = True
            raise api.bad(f"the request has {len(lengths)} Content-Length headers; send exactly one")
        value = lengths[0].strip(" \t")
        if not _DIGITS.fullmatch(value):  # int() would also take "+5", "-0" and "5_0"
            self.close_connection = True
            raise api.bad(f"the Content-Length header {value[:40]!r} is not a number of bytes")
        digits = value.lstrip("0") or "0"
        limit = self.server.config.max_body
        if len(digits) > 30 or int(digits) > limit:
            self.close_connection = True  # the body is never read: the connection cannot be reused
            size = digits if len(digits) <= 30 else "more than 10^30"
            raise api.ApiError(413, f"the request body is {size} bytes, the limit is {limit} bytes",
                               code="request_too_large")
        return int(digits)

    def send_response(self, code, message=None):
        if self._unread_body:  # its bytes must not be read as the next request on this connection
            self.close_connection = True
        super().send_response(code, message)

    def _read_json(self, n: int | None) -> dict:
        if n is None:
            self.close_connection = True
            raise api.ApiError(411, "a Content-Length header with the body size is required")
        deadline = time.monotonic() + self.server.config.body_timeout
        parts, got = [], 0
        while got < n:
            if time.monotonic() > deadline:
                self.close_connection = True
                raise api.ApiError(408, f"the request body did not arrive within "
                                        f"{self.server.config.body_timeout:g} s", code="timeout")
            try:
                part = self.rfile.read1(min(n - got, 1 << 16))
            except (TimeoutError, socket.timeout):
                part = None
            if part == b"":
                self.close_connection = True
                raise Gone()
            if part:
                parts.append(part)
                got += len(part)
        self._unread_body = False
        try:
            body = json.loads(b"".join(parts))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise api.bad(f"the request body is not valid JSON: {e}") from None
        except RecursionError:
            raise api.bad("the request body is nested too deeply") from None
        except ValueError:  # Python's limit on int-string conversion (CVE-2020-10735)
            raise api.bad(f"the request body holds an integer longer than "
                          f"{sys.get_int_max_str_digits()} digits") from None
        if not isinstance(body, dict):
            raise api.bad("the request body must be a JSON object")
        where = _lone_surrogate(body)
        if where is not None:
            raise api.bad(f"the request body holds a lone UTF-16 surrogate (\\u{ord(where):04x}), which is not "
                          f"Unicode text: a surrogate escape must be one of a high-low pair")
        return body

    def _client_gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    # -- routes -----------------------------------------------------------------------------------
    def do_GET(self):
        self._route("GET")

    def do_POST(self):
        self._route("POST")

    def do_DELETE(self):
        self._route("DELETE")

    def do_PUT(self):
        self._route("PUT")

    def _route(self, method: str) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path.startswith("/v1/"):
            path = path[3:]
        routes = {"/health": ("GET", self._health), "/metrics": ("GET", self._metrics),
                  "/models": ("GET", self._models), "/chat/completions": ("POST", self._chat),
                  "/completions": ("POST", self._completions)}
        routes["/embeddings"] = ("POST", self._embeddings)
        routes["/props"] = ("GET", self._props)
        routes.update({p: ("GET", lambda p=p: self._page(p)) for p in webui.PAGE_FILES})
        self._unread_body = False
        try:
            length = self._content_length()
            self._unread_body = bool(length)  # until _read_json has it: an answer before closes
            if path.startswith("/models/"):
                target = ("GET", lambda: self._model(path[len("/models/"):]))
            else:
                target = routes.get(path)
            if target is None:
                raise api.ApiError(404, f"no route {method} {self.path[:200]}", code="not_found")
            if target[0] != method:
                raise api.ApiError(405, f"{self.path[:200]} takes {target[0]}, not {method}",
                                   headers={"Allow": target[0]})
            public = path == "/health" or path in webui.PAGE_FILES  # the page asks for the key itself
            if not public and not self._authorized():
                raise api.ApiError(401, "a valid API key is required (Authorization: Bearer ...)",
                                   code="invalid_api_key")
            if method == "POST":
                target[1](self._read_json(length))
            else:
                target[1]()
        except api.ApiError as e:
            self._fail(e)
        except Gone:
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError, TimeoutError, socket.timeout):
            self.close_connection = True
        except Exception as e:  # a bug must cost one request, never the server
            self.close_connection = True
            self.log_error("internal error: %r", e)
            try:
                self._fail(api.ApiError(500, f"internal error: {type(e).__name__}: {e}", "server_error"))
            except OSError:
                pass

    def _health(self):
        self._send_json(200, {"status": "ok", **self.server.engine.state()})

    def _metrics(self):
        e = self.server.engine
        self._send_text(200, e.metrics.render(e.state()), "text/plain; version=0.0.4; charset=utf-8")

    def _models(self):
        c = self.server.config
        self._send_json(200, api.models_list(c.model_name, c.created))

    def _model(self, name: str):
        c = self.server.config
        if name != c.model_name:
            raise api.ApiError(404, f"the model '{name[:100]}' does not exist: this server serves "
                                    f"'{c.model_name}'", code="model_not_found")
        self._send_json(200, api.model_card(c.model_name, c.created))

    def _props(self):
        s = self.server
        self._send_json(200, webui.props(s.config.model_name, s.engine.n_ctx, len(s.engine.slots)))

    def _page(self, path: str):
        f = webui.page_file(path)
        fresh = self.headers.get("If-None-Match") == f.etag
        self.send_response(304 if fresh else 200)
        for k, v in {"Content-Type": f.content_type, "ETag": f.etag, **webui.HEADERS}.items():
            self.send_header(k, v)
        if not fresh:  # a 304 has no body, whatever its headers say
            self.send_header("Content-Length", str(len(f.body)))
        self.end_headers()
        if not fresh:
            self.wfile.write(f.body)

    def _chat(self, body):
        s = self.server
        self._run(api.parse_chat(body, s.model, s.config.model_name, s.engine.n_ctx))

    def _completions(self, body):
        s = self.server
        self._run(api.parse_completion(body, s.model, s.config.model_name, s.engine.n_ctx))

    def _embeddings(self, body):
        s = self.server
        job = embeddings.parse_embeddings(body, s.model, s.config.model_name, s.engine.n_ctx, s.config.pooling)
        for _ in job.run(s.model):  # the engine's steps go between these passes
            if self._client_gone():
                raise Gone()
        self._send_json(200, job.response())

    # -- running a job ----------------------------------------------------------------------------
    def _run(self, job: api.Job) -> None:
        requests, engine = job.choices.requests, self.server.engine
        if len(requests) > len(engine.slots):
            raise api.bad(f"'n' is {len(requests)}, but this server decodes at most {len(engine.slots)} sequences "
                          f"at once (--parallel)", "n")
        try:
            engine.submit(job.request) if len(requests) == 1 else engine.submit_group(requests)
        except QueueFullError as e:
            raise api.ApiError(503, str(e), "server_error", code="server_busy", headers={"Retry-After": "1"})
        except EngineClosedError as e:
            raise api.ApiError(503, str(e), "server_error", code="shutting_down")
        except ContextFullError as e:
            raise api.bad(str(e), code="context_length_exceeded")
        try:
            (self._stream if job.stream else self._whole)(job)
        finally:
            job.choices.cancel()  # frees the slots of what did not finish (a no-op for what did)

    def _whole(self, job: api.Job) -> None:
        shaper, n, r = api.Shaper(job), 0, job.choices
        k = len(r.requests)
        text = [[job.echo or ""] for _ in range(k)]
        logprobs = [list(job.echo_logprobs or []) for _ in range(k)]
        answers = [None] * k
        checked = time.monotonic()
        while True:
            if time.monotonic() - checked > 0.2:  # while tokens flow as much as while they do not
                if self._client_gone():
                    raise Gone()
                checked = time.monotonic()
            try:
                i, chunk = r.next_event(timeout=0.2)
            except Empty:
                continue
            except Cancelled:
                raise Gone() from None
            except Exception as e:
                raise api.ApiError(500, f"generation failed: {e}", "server_error") from None
            text[i].append(chunk.text)
            logprobs[i].extend(chunk.logprobs or [])
            n += len(chunk.tokens)
            if chunk.finish_reason:
                answers[i] = (chunk.finish_reason, i)
            if all(answers):
                self._send_json(200, shaper.combine([shaper.whole("".join(text[j]), finish, n, j, logprobs[j])
                                                     for finish, j in answers]))
                return

    def _stream(self, job: api.Job) -> None:
        shaper, n, r = api.Shaper(job), 0, job.choices
        left = len(r.requests)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(left):
            if job.kind == "chat":
                self._event(shaper.chunk(None, first=True, index=i))
            elif job.echo is not None:
                self._event(shaper.chunk(job.echo, index=i, logprobs=job.echo_logprobs))
        while True:
            try:
                i, chunk = r.next_event(timeout=1.0)
            except Empty:
                if self._client_gone():
                    raise Gone() from None
                continue
            except Cancelled:
                raise Gone() from None
            except Exception as e:  # the status line is sent: report it in the stream, as OpenAI does
                self._event(api.ApiError(500, f"generation failed: {e}", "server_error").body())
                break
            n += len(chunk.tokens)
            if shaper.tools is not None:  # tool calls: only what the parser has settled
                for event in shaper.tool_chunks(chunk.text, chunk.finish_reason, index=i):
                    self._event(event)
            elif chunk.text or (chunk.logprobs and job.logprobs and not chunk.finish_reason):
                self._event(shaper.chunk(chunk.text, index=i, logprobs=chunk.logprobs))
            if chunk.finish_reason:
                logprobs = None if chunk.text else chunk.logprobs  # not sent yet: with the finish
                self._event(shaper.chunk(None, chunk.finish_reason, index=i, logprobs=logprobs))
                left -= 1
            if not left:
                if job.include_usage:
                    self._event(shaper.usage_chunk(n))
                break
        self._write_chunk(b"data: [DONE]\n\n")
        self._write_chunk(b"")

    def _event(self, obj) -> None:
        self._write_chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
