"""A real server on 127.0.0.1 (an ephemeral port) and small raw-HTTP helpers for the serve tests."""
from __future__ import annotations

import http.client
import json
import socket
import time
from urllib.parse import urlparse


def raw(url: str, method: str, path: str, body=None, headers=None, timeout: float = 60):
    """-> (status, headers (names case-insensitive, as HTTP's are), parsed JSON or text)."""
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        r = conn.getresponse()
        text = r.read().decode()
        try:
            payload = json.loads(text)
        except json.JSONDecodeError:
            payload = text
        return r.status, r.headers, payload
    finally:
        conn.close()


def connect(url: str, timeout: float = 30) -> socket.socket:
    u = urlparse(url)
    return socket.create_connection((u.hostname, u.port), timeout=timeout)


def post_bytes(path: str, body: bytes, extra: str = "") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{extra}\r\n").encode() + body


def wait_idle(url: str, timeout: float = 20.0) -> dict:
    """Polls /health until no slot is busy and nothing waits; the last state otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        _, _, state = raw(url, "GET", "/health")
        if state["slots_busy"] == 0 and state["queue_length"] == 0 or time.monotonic() > deadline:
            return state
        time.sleep(0.05)


def metric(text: str, name: str, **labels) -> float:
    """The value of the sample `name` (e.g. localinfer_requests_total) in a /metrics text whose labels
    include `labels`, read with prometheus_client's parser (how Prometheus reads it, whatever the
    number formatting); KeyError when there is none."""
    from prometheus_client.parser import text_string_to_metric_families
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    raise KeyError(f"no sample {name} {labels} in the metrics")


def wait_engine_idle(engine, timeout: float = 60.0) -> dict:
    """An in-process Engine's state() once no slot is busy and nothing is queued (a cancelled request's
    slot is freed at the engine's next step). The timeout only ends a hung test: a busy machine waits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = engine.state()
        if state["slots_busy"] == 0 and state["queue_length"] == 0:
            return state
        time.sleep(0.01)
    raise AssertionError(f"the engine did not go idle: {engine.state()}")
