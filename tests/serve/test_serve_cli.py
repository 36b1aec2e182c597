"""`localinfer serve` as a user starts it: it prints its address, answers, and stops on Ctrl-C."""
from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys

import pytest

from serve_helpers import raw

CMD = [sys.executable, "-m", "localinfer.cli.main", "serve"]


def _ignore_sigint():  # what a script without job control does to the commands it starts with '&'
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.slow
@pytest.mark.parametrize("stop, sigint_ignored", [(signal.SIGINT, False), (signal.SIGINT, True),
                                                  (signal.SIGTERM, False)])
def test_serve_command_starts_answers_and_stops(stop, sigint_ignored):
    p = subprocess.Popen(CMD + ["smollm2", "--port", "0", "-c", "128", "-np", "2"], stderr=subprocess.PIPE,
                         stdout=subprocess.DEVNULL, text=True,
                         preexec_fn=_ignore_sigint if sigint_ignored else None)
    try:
        line = p.stderr.readline()
        m = re.search(r"at (http://127\.0\.0\.1:\d+)/v1", line)
        assert m, line
        assert p.stderr.readline().strip().endswith(f"chat in a browser at {m.group(1)}/")
        assert raw(m.group(1), "GET", "/")[0] == 200
        status, _, body = raw(m.group(1), "POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 2})
        assert status == 200 and body["model"] == "smollm2" and body["usage"]["completion_tokens"] <= 2
        assert raw(m.group(1), "GET", "/health")[2]["slots_total"] == 2
        p.send_signal(stop)
        assert p.wait(timeout=30) == 0
        assert "stopping" in p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_a_busy_port_is_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = subprocess.run(CMD + ["smollm2", "--port", str(port), "-c", "64"], capture_output=True, text=True,
                           timeout=120)
    assert r.returncode != 0 and f"cannot listen on 127.0.0.1:{port}" in r.stderr


def test_alias_names_the_served_model():
    p = subprocess.Popen(CMD + ["smollm2", "--port", "0", "-c", "64", "-np", "1", "-a", "my-model"],
                         stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        m = re.search(r"serving 'my-model' at (http://127\.0\.0\.1:\d+)/v1", p.stderr.readline())
        assert m
        assert [c["id"] for c in raw(m.group(1), "GET", "/v1/models")[2]["data"]] == ["my-model"]
        status, _, body = raw(m.group(1), "POST", "/v1/completions", {"model": "gpt-3.5-turbo", "prompt": "Hi",
                                                                       "max_tokens": 1})
        assert status == 200 and body["model"] == "my-model"
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    r = subprocess.run(CMD + ["--models", "smollm2", "-a", "x"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--alias names the one MODEL" in r.stderr
