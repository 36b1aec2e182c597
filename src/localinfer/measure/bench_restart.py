"""Restart benchmark of `serve --prefix-cache-dir` (not a test): TTFT of a request with a long
system prompt on a server that was just started, cold and after a restart.

Each round, with a fresh empty folder:
    1. start `localinfer serve MODEL --prefix-cache-dir DIR` (a real process), ask a chat
       request (the system prompt + question A): the cold TTFT; stop the server (Ctrl-C);
    2. start it again on the same folder, ask the same system prompt + a new question B: the
       restart TTFT, its system prompt read back from the folder instead of computed.
Both are the first request of a fresh process (weights paged in, kernels warmed by nothing
before), measured by the client from sending the request to the first streamed token.
"""
from __future__ import annotations

import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from .bench_serve import system_prompt
from .serve_load import stream_request
from .bench_suite import machine


@dataclass
class ModelResult:
    model: str
    system_tokens: int
    cold: list[float] = field(default_factory=list)
    restart: list[float] = field(default_factory=list)
    cached: list[int] = field(default_factory=list)  # prompt tokens the restarted server reused

    @property
    def speedup(self) -> float:
        return statistics.median(self.cold) / statistics.median(self.restart)

    @property
    def worst_speedup(self) -> float:
        """The fastest cold start against the slowest restart: what the noise cannot have inflated."""
        return min(self.cold) / max(self.restart)


class ServerProcess:
    """`localinfer serve` in a child process, on an ephemeral port, until close()."""

    def __init__(self, args: list[str], timeout: float = 300):
        cmd = [sys.executable, "-m", "localinfer.cli.main", "serve", *args, "--port", "0"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + timeout
        lines = []
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            m = re.search(r"at (http://[\d.]+:\d+)/v1", line)
            if m:
                self.url = m.group(1)
                return
        self.close()
        raise RuntimeError("the server did not start:\n" + "".join(lines[-20:]))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _ask(url: str, system: str, question: str, max_tokens: int) -> tuple[float, int]:
    body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
            "max_tokens": max_tokens, "temperature": 0}
    sample = stream_request(url, "/v1/chat/completions", body)
    return sample.ttft_s, _cached_tokens(url)


def _cached_tokens(url: str) -> int:
    import urllib.request
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    m = re.search(r"^localinfer_prompt_tokens_cached_total (\d+)", text, re.M)
    return int(m.group(1)) if m else -1


def run_model(model: str, system: str, n_system: int, rounds: int, ctx_size: int, threads: int | None,
              max_tokens: int, log) -> ModelResult:
    result = ModelResult(model, n_system)
    extra = ["-np", "1", "-c", str(ctx_size)] + (["-t", str(threads)] if threads else [])
    for i in range(rounds):
        with tempfile.TemporaryDirectory(prefix="localinfer-prefix-") as folder:
            args = [model, *extra, "--prefix-cache-dir", folder]
            server = ServerProcess(args)
            try:
                cold, _ = _ask(server.url, system, f"Question {2 * i}: what is the first word?", max_tokens)
            finally:
                server.close()
            server = ServerProcess(args)
            try:
                warm, cached = _ask(server.url, system, f"Question {2 * i + 1}: which word comes last?", max_tokens)
            finally:
                server.close()
        result.cold.append(cold)
        result.restart.append(warm)
        result.cached.append(cached)
        log(f"  {model} round {i + 1}: cold {cold * 1000:.0f} ms, after a restart {warm * 1000:.0f} ms "
            f"({cached} prompt tokens read back)")
    return result


def run(models: list[str], system_tokens: int = 1000, rounds: int = 3, ctx_size: int = 2048,
        threads: int | None = None, max_tokens: int = 4, log=print) -> list[ModelResult]:
    from ..model import load
    out = []
    for name in models:
        with load(name, n_ctx=ctx_size) as llm:  # only to size the system prompt in this model's tokens
            system = system_prompt(llm, system_tokens)
            n_system = len(llm.tokenize(system))
        log(f"{name}: system prompt of {n_system} tokens, {rounds} rounds ...")
        out.append(run_model(name, system, n_system, rounds, ctx_size, threads, max_tokens, log))
    return out


def markdown(results: list[ModelResult], command: str, isa: str) -> str:
    m = machine()
    lines = [
        "## Restart TTFT (`serve --prefix-cache-dir`)", "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {m['cpu']} ({isa}; {m['n_cpus']} CPUs, "
        f"shared and noisy: load average {os.getloadavg()[0]:.1f} at the end). Regenerate with:", "",
        "```sh", command, "```", "",
        "Each round starts `localinfer serve` on an empty `--prefix-cache-dir` folder and asks a chat request with "
        "a long system prompt (cold: the whole prompt is computed), stops it, starts it again on the same folder and "
        "asks the same system prompt with a new question (restart: the system prompt's blocks are read from the "
        "folder). TTFT is the client's, from sending the request to the first streamed token, each the first request "
        "of a new process.", "",
        "| model | system prompt tokens | cold TTFT ms (median) | after restart ms (median) | speed-up | "
        "fastest cold / slowest restart | tokens read back | all cold ms | all restart ms |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.model} | {r.system_tokens} | {statistics.median(r.cold) * 1000:.0f} | "
            f"{statistics.median(r.restart) * 1000:.0f} | **{r.speedup:.1f}x** | {r.worst_speedup:.1f}x | "
            f"{statistics.median(r.cached):.0f} | "
            f"{', '.join(f'{x * 1000:.0f}' for x in r.cold)} | {', '.join(f'{x * 1000:.0f}' for x in r.restart)} |")
    lines += ["", "After the restart the request still computes the tail of its prompt past the last whole 32-token "
              "block, attending over every restored position, and reads ~20 KiB of K/V per cached token from the "
              "folder.", ""]
    return "\n".join(lines)
