"""The README's code runs as written: every python block, in order, in one process (the `openai` and
`ollama` blocks against a real server on a free port in place of 8080), and every `localinfer`
command line of the sh blocks parses with the options it gives (the commands are not run: they
serve, fetch other models and benchmark for minutes)."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.DOTALL | re.MULTILINE)


def blocks(lang: str) -> list[tuple[int, str]]:
    text = README.read_text(encoding="utf-8")
    return [(text[:m.start()].count("\n") + 1, m[2]) for m in _BLOCK.finditer(text) if m[1] == lang]


# Run in a fresh process with the cwd a temporary folder: the blocks write files (chat.state) and
# a draft model is made there as the README's comment says, with `localinfer quantize`.
_DRIVER = r"""
import subprocess, sys
import localinfer
from localinfer.serve.app import BackgroundServer

subprocess.run([sys.executable, "-m", "localinfer.cli.main", "quantize", "smollm2", "smollm2-q2_k.gguf", "Q2_K",
                "--allow-requantize"], check=True, capture_output=True)
# the encoder files the README names: tiny random ones of the same layouts, converted as its comment says
from pathlib import Path
from localinfer.quant.convert_hf import convert_hf
from localinfer.quant.synthetic_encoder import get_encoder_shape, write_folder
for shape, name in (("tiny-bert", "bge-small-en-v1.5-f16.gguf"), ("tiny-rerank", "bge-reranker-base-f16.gguf")):
    convert_hf(write_folder(get_encoder_shape(shape), Path(shape)), name, "f16")
blocks = eval(sys.stdin.read())
with localinfer.load("smollm2", n_ctx=1024) as served, BackgroundServer(served, "smollm2", port=0, n_ctx=1024) as s:
    port = s.url.rsplit(":", 1)[1].split("/")[0]
    namespace = {"__name__": "__readme__"}
    for line, code in blocks:
        code = code.replace("127.0.0.1:8080", "127.0.0.1:" + port)
        print(f"--- README.md line {line}", flush=True)
        exec(compile(code, f"README.md:{line}", "exec"), namespace)
print("--- all blocks ran")
"""


@pytest.mark.slow
def test_every_python_block_runs(tmp_path, smollm2_path):
    pytest.importorskip("ollama", reason="the README's Ollama client block needs the ollama package")
    code = blocks("python")
    assert len(code) >= 8
    run = subprocess.run([sys.executable, "-c", _DRIVER], input=repr(code), capture_output=True, text=True,
                         cwd=tmp_path, timeout=280)
    assert run.returncode == 0 and "--- all blocks ran" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]


def _commands() -> list[tuple[int, list[str]]]:
    out = []
    for line, code in blocks("sh"):
        for i, text in enumerate(code.replace("\\\n", " ").splitlines()):
            for part in re.split(r"&&|\|", text.split("#")[0] if "curl" not in text else ""):
                words = shlex.split(part)
                while words and ("=" in words[0] and not words[0].startswith("-")):   # VAR=value before it
                    words.pop(0)
                if words and Path(words[0]).name == "localinfer":
                    out.append((line + i + 1, words[1:]))
    return out


def test_every_localinfer_command_line_parses(tmp_path):
    commands = _commands()
    assert len(commands) >= 15
    for _, args in commands:   # the files the lines name are the user's: empty ones stand in for them
        for a in args:
            # a file name, or a placeholder such as PATH
            if (re.fullmatch(r"[\w./-]+\.(txt|gguf|json|md|gbnf)", a) or re.fullmatch(r"[A-Z_]{3,}", a)) \
                    and not a.startswith(("-", "/")):
                (tmp_path / a).parent.mkdir(parents=True, exist_ok=True)
                (tmp_path / a).touch()
    run = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", _PARSER], input=repr(commands),
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr


# click parses each line as the command would (names, option types, choices) without running it; the
# options' callbacks that touch files or the environment run in this throwaway process only
_PARSER = r"""
import sys
import click
from localinfer.cli.main import main

bad = []
for line, args in eval(sys.stdin.read()):
    try:
        with main.make_context("localinfer", list(args), resilient_parsing=False) as ctx:
            name, cmd, rest = main.resolve_command(ctx, ctx.protected_args + ctx.args)
            while isinstance(cmd, click.Group) and rest:
                sub = cmd.make_context(name, rest, parent=ctx)
                name, cmd, rest = cmd.resolve_command(sub, sub.protected_args + sub.args)
                ctx = sub
            cmd.make_context(name, rest, parent=ctx)
    except click.UsageError as e:
        bad.append(f"README.md:{line}: localinfer {' '.join(args)}: {e.format_message()}")
    except click.exceptions.Exit:
        pass
print("\n".join(bad))
sys.exit(1 if bad else 0)
"""
