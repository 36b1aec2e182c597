"""Who may talk to a server without an API key: its own origins only, as ASGI middleware.

A keyless server on 127.0.0.1 trusts whoever can connect, and any web page the user opens can
connect: a `text/plain` or form POST needs no CORS preflight, and DNS rebinding points a page's own
name at 127.0.0.1 so that the browser lets the page read the answers. So, as Ollama does by default
(OLLAMA_ORIGINS, its allowed-hosts check), a keyless server

- answers only a `Host` that names it: a loopback address or localhost (any port), the address it
  listens on, or a name in `allowed_hosts`. Listening on a wildcard address (0.0.0.0, ::) lets any
  IP-literal Host in too: rebinding needs a name. Anything else is a 403, as Ollama answers it (421
  is about TLS connections reused across names; it says nothing to a plain-HTTP client);
- refuses a request whose `Origin` is another site's (403): same-origin (the page at `/`) and
  loopback origins pass, others only when listed in `cors_origins` ("*": any);
- answers the CORS preflight (OPTIONS with Access-Control-Request-Method) of an allowed origin, and
  puts Access-Control-Allow-Origin on its answers.
A request without an Origin (curl, the openai and ollama clients) is not a browser's: it passes.
With an API key the key decides, as before; preflights of allowed origins are answered all the same
(a browser sends the key only after one).
"""
from __future__ import annotations

import ipaddress
import json
from urllib.parse import urlsplit

ALLOW_METHODS = "GET, POST, DELETE, OPTIONS"
ALLOW_HEADERS = "Authorization, Content-Type"
WILDCARD_HOSTS = ("0.0.0.0", "::", "")
_READ = (b"host", b"origin", b"access-control-request-method", b"access-control-request-headers")


def _hostname(host: str) -> str:
    """A Host header's (or an origin's netloc's) name, without its port or IPv6 brackets, lowercased."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _ip(name: str):
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


def is_loopback(name: str) -> bool:
    """localhost, *.localhost (RFC 6761: browsers resolve them to loopback themselves) or a loopback IP."""
    ip = _ip(name)
    return name == "localhost" or name.endswith(".localhost") or (ip is not None and ip.is_loopback)


class OriginGuard:
    def __init__(self, app, config):
        self.app, self.config = app, config
        self.listen = _hostname(config.host) if config.host is not None else None
        self.hosts = {h.lower() for h in config.allowed_hosts}
        self.origins = {o.lower() for o in config.cors_origins}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode(): v.decode("latin-1") for k, v in scope["headers"] if k in _READ}
        keyless = not self.config.api_key
        host, origin = headers.get("host"), headers.get("origin")
        if keyless and host is not None and not self.host_allowed(host):
            return await _refuse(send, scope, f"the Host header '{host[:100]}' does not name this server: "
                                              f"start it with --allowed-hosts {_hostname(host)[:100]} to answer it")
        allowed = origin is not None and self.origin_allowed(origin, host)
        if origin is not None and not allowed and keyless:
            return await _refuse(send, scope, f"requests from the web origin '{origin[:100]}' are not allowed: "
                                              f"start the server with --cors-origins {origin[:100]} "
                                              f"(or LOCALINFER_ORIGINS) to allow them")
        if scope["method"] == "OPTIONS" and allowed and "access-control-request-method" in headers:
            return await _preflight(send, origin, headers.get("access-control-request-headers"))
        if not allowed:
            return await self.app(scope, receive, send)

        async def send_cors(message):
            if message["type"] == "http.response.start":
                extra = [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin")]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)
        return await self.app(scope, receive, send_cors)

    def host_allowed(self, host: str) -> bool:
        name = _hostname(host)
        if is_loopback(name) or name == self.listen or name in self.hosts or "*" in self.hosts:
            return True
        return self.listen in WILDCARD_HOSTS and _ip(name) is not None

    def origin_allowed(self, origin: str, host: str | None) -> bool:
        origin = origin.strip().lower().rstrip("/")
        if "*" in self.origins or origin in self.origins:
            return True
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return False  # "null" (a sandboxed frame, a file), an extension's: never the server's own
        return is_loopback(_hostname(parts.netloc)) or (host is not None and parts.netloc == host.strip().lower())


async def _refuse(send, scope, message: str) -> None:
    if scope["path"].startswith("/api/"):  # Ollama's error shape on its routes
        body = {"error": message}
    else:
        body = {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": "forbidden"}}
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": 403,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})


async def _preflight(send, origin: str, request_headers: str | None) -> None:
    headers = [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin"),
               (b"access-control-allow-methods", ALLOW_METHODS.encode()),
               # what the page asks for: headers grant no access the origin check has not granted already
               (b"access-control-allow-headers", (request_headers or ALLOW_HEADERS).encode("latin-1")),
               (b"access-control-max-age", b"600"), (b"content-length", b"0")]
    await send({"type": "http.response.start", "status": 204, "headers": headers})
    await send({"type": "http.response.body", "body": b""})
