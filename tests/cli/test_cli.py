"""The `localinfer` command as a user runs it: one-shot, piped, and in a real terminal (a pty)."""
from __future__ import annotations

import json
import os
import subprocess

import pytest
from click.testing import CliRunner

from localinfer.cli.main import main
from terminal import CMD, Terminal


def _run(args, stdin_text=None, timeout=120, env=None):
    return subprocess.run(CMD + args, input=stdin_text, capture_output=True, text=True, timeout=timeout,
                          stdin=None if stdin_text is not None else subprocess.DEVNULL, env=env)


def test_one_shot_prompt(smollm2_model):
    want = smollm2_model.chat([{"role": "user", "content": "What is 2+2?"}], max_tokens=12, temperature=0).text
    r = _run(["run", "smollm2", "-p", "What is 2+2?", "-n", "12", "--temp", "0", "--verbose"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == want.strip()
    assert "TTFT" in r.stderr and "decode" in r.stderr


def test_piped_stdin(smollm2_model):
    want = smollm2_model.chat([{"role": "user", "content": "Name a color."}], max_tokens=10, temperature=0).text
    r = _run(["run", "-n", "10", "--temp", "0"], stdin_text="Name a color.\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == want.strip()


def test_raw_completion(smollm2_model):
    want = smollm2_model.generate("The capital of France is", max_tokens=6, temperature=0).text
    r = _run(["run", "smollm2", "--raw", "-p", "The capital of France is", "-n", "6", "--temp", "0"])
    assert r.returncode == 0, r.stderr
    assert r.stdout == want + "\n"


def test_a_llama_cpp_command_line(smollm2_model, smollm2_path, tmp_path):
    """llama-cli's habits: -m FILE, -f FILE, escapes in the prompt, -ngl, --n-predict, -no-cnv, -sys."""
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("The capital of France is")
    want = smollm2_model.generate("The capital of France is", max_tokens=6, temperature=0).text
    # without a usable GPU (the CUDA simulator the tests allow is not offered here), -ngl warns and the
    # CPU answers, as llama.cpp's does
    no_gpu = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"} | {"CUDA_VISIBLE_DEVICES": ""}
    r = _run(["run", "-m", str(smollm2_path), "-f", str(prompt), "-no-cnv", "--n-predict", "6", "--temp", "0",
              "-ngl", "99"], env=no_gpu)
    assert r.returncode == 0 and r.stdout == want + "\n", r.stderr
    assert "n_gpu_layers 99 ignored, every layer runs on the CPU" in r.stderr
    lines = "Line one.\nLine two."
    want = smollm2_model.generate(lines, max_tokens=4, temperature=0).text
    r = _run(["run", str(smollm2_path), "-p", "Line one.\\nLine two.", "-no-cnv", "-n", "4", "--temp", "0"])
    assert r.returncode == 0 and r.stdout == want + "\n", r.stderr   # -e is on by default, as in llama.cpp
    want = smollm2_model.chat([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
                              max_tokens=6, temperature=0).text
    r = _run(["run", str(smollm2_path), "-sys", "Be brief.", "-p", "Hi", "-n", "6", "--temp", "0"])
    assert r.returncode == 0 and r.stdout.strip() == want.strip(), r.stderr
    for args, says in ((["run", "smollm2", "-m", str(smollm2_path), "-p", "x"], "give the model once"),
                       (["run", "smollm2", "-p", "x", "-f", str(prompt)], "give the prompt once")):
        r = _run(args)
        assert r.returncode == 2 and says in r.stderr, r.stderr


def test_errors_are_messages_not_tracebacks(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a model at all")
    r = _run(["run", str(bad), "-p", "hi"])
    assert r.returncode != 0 and "not a GGUF file" in r.stderr and "Traceback" not in r.stderr
    r = _run(["run", "no-such-model", "-p", "hi"])
    assert r.returncode != 0 and "known" in r.stderr and "Traceback" not in r.stderr
    r = _run(["run", "smollm2", "-c", "16", "-p", "word " * 40])
    assert r.returncode != 0 and "context" in r.stderr and "Traceback" not in r.stderr


def test_list_and_info(smollm2_path):
    runner = CliRunner()
    r = runner.invoke(main, ["list"])
    assert r.exit_code == 0 and "smollm2*" in r.output and "gemma3" in r.output
    r = runner.invoke(main, ["info", "smollm2"])
    assert r.exit_code == 0, r.output
    assert "llama" in r.output and "Q4_1" in r.output and "chat template" in r.output
    d = json.loads(runner.invoke(main, ["info", str(smollm2_path), "--json"]).output)
    assert d["architecture"] == "llama" and d["tensor_types"]["Q4_1"] == 210
    assert d["hyperparameters"]["block_count"] == 30


def test_pull_cached_model_is_instant(smollm2_path):
    r = CliRunner().invoke(main, ["pull", "smollm2"])
    assert r.exit_code == 0 and r.output.strip() == str(smollm2_path)


@pytest.fixture(autouse=True)
def _no_program_left_running():
    yield
    while Terminal.started:
        Terminal.started.pop().kill()


@pytest.mark.slow
def test_interactive_chat_in_a_terminal(smollm2_path):
    # answers are capped well below what a busy 2-core machine decodes in the time allowed
    term = Terminal(["run", "smollm2", "--temp", "0", "-n", "160"])
    term.expect(">>> ")
    term.send("What is the capital of France?\r")
    term.expect("decode", timeout=120)  # the timings after the answer (an interactive chat's default)
    term.expect(">>> ")
    term.out = b""
    term.send("And of Germany?\r")
    screen = term.expect("decode", timeout=120)
    cached = int(screen.split(" cached")[0].rsplit("(", 1)[1])
    assert cached > 20  # the second turn reused the first turn's tokens
    term.expect(">>> ")
    term.send("/clear\r")
    term.expect("cleared")
    term.out = b""
    request = "Write a very long story about a dragon."
    term.send(request + "\r")
    term.expect(request)
    term.out = term.out[term.out.index(request.encode()) + len(request) + 2:]
    term.expect("", min_bytes=40)  # the answer is streaming
    term.out = b""
    term.send("\x03")  # Ctrl-C stops the answer, not the program
    screen = term.expect(">>> ")
    assert "decode" not in screen  # interrupted: no timings line for a finished answer
    term.out = b""
    term.send("/bye\r")
    assert term.wait() == 0


def test_ctrl_c_before_the_answer_starts(smollm2_path):
    term = Terminal(["run", "smollm2", "--temp", "0", "-n", "400"])
    term.expect(">>> ")
    term.out = b""
    term.send("Tell me about cats.\r")
    # once the line is echoed it has been read: a Ctrl-C typed before that makes the terminal
    # discard the unread line (ISIG flushes the input queue), which is not what this tests
    term.expect("cats.")
    term.send("\x03")
    term.expect(">>> ", timeout=120)
    term.send("/bye\r")
    code = term.wait()
    assert code == 0, term.out.decode(errors="replace")


def test_quiet_chat_prints_no_timings(smollm2_path):
    term = Terminal(["run", "smollm2", "--temp", "0", "-n", "4", "--quiet"])
    term.expect(">>> ")
    term.out = b""
    term.send("Hi\r")
    term.expect("Hi")
    screen = term.expect(">>> ", timeout=120)
    assert "decode" not in screen and "TTFT" not in screen
    term.send("/bye\r")
    assert term.wait() == 0


def test_ctrl_d_exits(smollm2_path):
    term = Terminal(["run", "smollm2"])
    term.expect(">>> ")
    term.send("\x04")
    assert term.wait() == 0
