"""Bounds on what one HTTP exchange may cost, as ASGI middleware around the app.

The HTTP parser (uvicorn's httptools, llhttp) frames requests: a Content-Length that is not one
plain number, two of them, or one beside a Transfer-Encoding is refused by it (400, connection
closed), so no request can be smuggled past a proxy that would frame it differently. On top:

- a body over `max_body` is a 413: at once from its Content-Length, before a byte of it is read,
  or once a chunked body's bytes pass the limit;
- a body must arrive whole within `body_timeout` seconds whatever its pace (408), so a client
  dripping bytes cannot hold a request open;
- a write to the client may block for at most `io_timeout` seconds (a client that stops reading
  a stream is dropped, and its request cancelled);
- an answer sent before its request's body was read closes the connection (`Connection: close`):
  what is left of the body is never parsed as a request.
The time a request's headers may take is bounded in protocol.py (uvicorn has no such limit).
"""
from __future__ import annotations

import asyncio
import json
import sys
import time

from .api import ApiError


class BodyLimits:
    def __init__(self, app, max_body: int, body_timeout: float, io_timeout: float):
        self.app, self.max_body, self.body_timeout, self.io_timeout = app, max_body, body_timeout, io_timeout

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length, chunked = None, False
        for name, value in scope["headers"]:
            if name == b"content-length":
                length = int(value)  # the parser allows only one, of digits
            elif name == b"transfer-encoding":
                chunked = True
        body_done = not length and not chunked
        started = False

        async def send_closing(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if not body_done:
                    message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
            try:
                await _within(send(message), self.io_timeout)
            except asyncio.TimeoutError:
                raise ClientTooSlow(f"the client read nothing for {self.io_timeout:g} s") from None

        if length is not None and length > self.max_body:
            return await _send_error(send_closing, _too_large(length, self.max_body))

        deadline = time.monotonic() + self.body_timeout
        received = 0

        async def receive_bounded():
            nonlocal body_done, received
            if body_done:
                return await receive()  # after the body: only http.disconnect, whenever it comes
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                raise ApiError(408, f"the request body did not arrive within {self.body_timeout:g} s",
                               code="timeout") from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body:
                    raise _too_large(received, self.max_body)
                body_done = not message.get("more_body", False)
            return message

        try:
            await self.app(scope, receive_bounded, send_closing)
        except ApiError as e:  # raised by receive_bounded where the app did not catch it
            if started:
                raise
            await _send_error(send_closing, e)


async def _within(awaitable, seconds: float):
    """awaitable's result, or asyncio.TimeoutError after `seconds`. Every chunk of a stream is
    written through this: asyncio.timeout (3.11) arms a timer on the running task, where wait_for
    would wrap each write in a task of its own."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):
            return await awaitable
    return await asyncio.wait_for(awaitable, seconds)


class ClientTooSlow(Exception):
    """A write to the client blocked past the I/O timeout."""


def _too_large(size: int, limit: int) -> ApiError:
    return ApiError(413, f"the request body is {size} bytes, the limit is {limit} bytes", code="request_too_large")


async def _send_error(send, e: ApiError) -> None:
    data = json.dumps(e.body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in e.headers.items()]
    await send({"type": "http.response.start", "status": e.status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
