"""`run --prompt-cache FILE`: the second run reuses the saved prompt and answers the same; a
file that cannot be used is reported and replaced, never used."""
from __future__ import annotations

import re
import subprocess

from terminal import CMD, Terminal

SYSTEM = "You are a patient teacher of geography who answers in one short sentence. " * 6


def _run(args, timeout=180):
    return subprocess.run(CMD + args, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def _cached(stderr: str) -> int:
    return int(re.search(r"prompt \d+ tok \((\d+) cached\)", stderr).group(1))


def test_one_shot_runs_reuse_the_saved_prompt(tmp_path):
    cache = str(tmp_path / "prompt.state")
    args = ["run", "smollm2", "--system", SYSTEM, "-n", "8", "--temp", "0", "-v", "--prompt-cache", cache]
    first = _run(args + ["-p", "What is the capital of Peru?"])
    assert first.returncode == 0, first.stderr
    assert _cached(first.stderr) == 0
    second = _run(args + ["-p", "What is the capital of Peru?"])
    assert second.returncode == 0, second.stderr
    assert second.stdout == first.stdout
    other = _run(args + ["-p", "What is the capital of Chile?"])
    assert _cached(second.stderr) > 60 and _cached(other.stderr) > 60  # the system prompt at least


def test_an_unusable_file_is_reported_and_replaced(tmp_path):
    cache = tmp_path / "prompt.state"
    cache.write_bytes(b"LISTATE\0garbage")
    args = ["run", "smollm2", "-n", "4", "--temp", "0", "-v", "--prompt-cache", str(cache), "-p", "Hi"]
    r = _run(args)
    assert r.returncode == 0 and "not using the saved prompt" in r.stderr and _cached(r.stderr) == 0
    r = _run(args)
    assert r.returncode == 0 and "not using" not in r.stderr and _cached(r.stderr) > 0
    r = _run(["run", "gemma3", "-n", "4", "--temp", "0", "--prompt-cache", str(cache), "-p", "Hi"])
    assert r.returncode == 0 and "saved for the model" in r.stderr


def test_interactive_chat_continues_after_a_restart(tmp_path):
    cache = str(tmp_path / "chat.state")
    term = Terminal(["run", "smollm2", "--temp", "0", "-n", "12", "--verbose", "--prompt-cache", cache])
    term.expect(">>> ")
    term.send("What is the capital of France?\r")
    term.expect("decode", timeout=120)
    term.expect(">>> ")
    term.send("/bye\r")
    assert term.wait() == 0
    term = Terminal(["run", "smollm2", "--temp", "0", "-n", "12", "--verbose", "--prompt-cache", cache])
    screen = term.expect(">>> ")
    assert "continuing the conversation" in screen
    term.out = b""
    term.send("And of Germany?\r")
    screen = term.expect("decode", timeout=120)
    assert _cached(screen) > 20  # the first turn, saved by the first process
    term.expect(">>> ")
    term.send("/bye\r")
    assert term.wait() == 0
