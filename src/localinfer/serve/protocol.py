"""uvicorn's httptools protocol with a deadline on request headers, and its own 400s in OpenAI's
error shape.

uvicorn bounds the idle time of a kept-alive connection but not the time a request's headers take:
a client that sends a byte now and then (slowloris) would hold its connection forever, and enough of
them every file descriptor. Here each request's headers must be complete within `io_timeout`
seconds of the connection opening or of the previous answer; otherwise the connection is closed
without an answer. A request being answered is not limited by this (its body has limits.py's).
"""
from __future__ import annotations

import json
import sys

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .api import ApiError


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    header_timeout: float = 30.0  # set per server by app.server_config (a subclass per server)
    _header_timer = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm_header_timer()

    def connection_lost(self, exc) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def on_headers_complete(self) -> None:
        self._disarm_header_timer()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        next_is_parsed = bool(self.pipeline)  # a pipelined request whose headers are already in
        super().on_response_complete()
        if not next_is_parsed and not self.transport.is_closing():
            self._arm_header_timer()

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        self._header_timer = self.loop.call_later(self.header_timeout, self._headers_too_slow)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()

    def send_400_response(self, msg: str) -> None:
        """The parser refused the request (malformed, or framed ambiguously): the error in OpenAI's
        shape, and the connection closed (nothing after it can be framed reliably). Called while
        uvicorn handles the parser's error, which says what was wrong."""
        reason = sys.exc_info()[1]
        detail = f" ({reason})" if reason is not None and str(reason) else ""
        data = json.dumps(ApiError(400, f"{msg.rstrip('.')}{detail}: the request is not well-formed HTTP/1.1, "
                                        f"or its framing is ambiguous").body()).encode()
        head = (b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n" % len(data))
        self.transport.write(head + data)
        self.transport.close()
