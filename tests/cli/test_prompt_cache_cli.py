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


def test_a_resumed_chat_keeps_its_saved_settings(tmp_path, smollm2_model):
    """The second run gives no --temp, -n or --grammar: the saved conversation's greedy decoding, answer
    length and grammar continue it, as the same session would have answered; a flag given again wins."""
    cache = str(tmp_path / "chat.state")
    grammar = 'root ::= ("Yes" | "No") ", " [a-z ]{1,30} "."'
    term = Terminal(["run", "smollm2", "--temp", "0", "-n", "16", "--quiet", "--prompt-cache", cache,
                     "--grammar", grammar])
    term.expect(">>> ")
    term.send("Is the sky blue?\r")
    term.expect(">>> ", timeout=120)
    term.send("/bye\r")
    assert term.wait() == 0
    from localinfer import compile_grammar
    session = smollm2_model.chat_session(temperature=0, max_tokens=16,
                                         grammar=compile_grammar(smollm2_model.tokenizer, gbnf=grammar))
    session.send("Is the sky blue?")
    want = session.send("Is grass green?").text
    term = Terminal(["run", "smollm2", "--quiet", "--prompt-cache", cache])
    term.expect(">>> ")
    term.out = b""
    term.send("Is grass green?\r")
    screen = term.expect(">>> ", timeout=120)
    assert want in screen.replace("\r\n", "\n"), (want, screen)
    term.out = b""
    term.send("/show parameters\r")
    assert "temperature         0.0" in term.expect(">>> ")
    term.send("/bye\r")
    assert term.wait() == 0
    term = Terminal(["run", "smollm2", "--quiet", "--temp", "0.7", "--prompt-cache", cache])
    term.expect(">>> ")
    term.out = b""
    term.send("/show parameters\r")
    assert "temperature         0.7" in term.expect(">>> ")
    term.send("/bye\r")
    assert term.wait() == 0


def test_a_path_that_is_not_a_file_is_refused_before_anything_runs(tmp_path):
    """A FIFO would block the run in open(); a device (`--prompt-cache /dev/null`, here a link to
    it in a temporary folder) would be replaced by a regular file as root. Both are a usage error
    naming the path; the subprocess's timeout makes a blocked run fail rather than hang."""
    import os
    fifo = tmp_path / "pipe.state"
    os.mkfifo(fifo)
    null = tmp_path / "null.state"
    null.symlink_to(os.devnull)
    for path, kind in ((fifo, "a FIFO"), (null, "a character device")):
        r = _run(["run", "smollm2", "-n", "4", "--prompt-cache", str(path), "-p", "Hi"], timeout=60)
        assert r.returncode == 2 and f"{path} is {kind}, not a regular file" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    assert not fifo.is_file() and fifo.exists() and null.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null.state", "pipe.state"]


def test_a_deeply_nested_header_is_reported_and_replaced(tmp_path):
    import struct
    from localinfer.kv.state_file import MAGIC
    cache = tmp_path / "prompt.state"
    head = b'{"kind": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    cache.write_bytes(struct.pack("<8sII", MAGIC, 1, len(head)) + head + bytes(32))
    args = ["run", "smollm2", "-n", "4", "--temp", "0", "-v", "--prompt-cache", str(cache), "-p", "Hi"]
    r = _run(args)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "not using the saved prompt" in r.stderr and "nested deeper" in r.stderr
    r = _run(args)
    assert r.returncode == 0 and "not using" not in r.stderr and _cached(r.stderr) > 0
