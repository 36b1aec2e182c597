"""Tokenizing speed and working memory on long texts, beside llama.cpp's llama-tokenize (not a test).

For each model and text: `Tokenizer.tokenize` on the whole text (BOS/EOS as the vocabulary asks,
special tokens in the text left as text, as llama-tokenize does by default), the best of `reps` runs
in CPU time of the calling thread, so that other processes on a shared machine count less; the
working memory beyond the result (tracemalloc's peak, one more run); and, when llama-tokenize is
given, its CPU time (user + system of the process) on the same text less its CPU time on a two-letter
text (loading the vocabulary), and whether its token ids are ours.

Texts: "random letters" and "one letter" (made here, seeded), and files given by the user, each
repeated to `size` bytes and cut at a character.
"""
from __future__ import annotations

import os
import random
import resource
import subprocess
import tempfile
import time
import tracemalloc
from pathlib import Path

from .bench_suite import machine

def make_texts(size: int, files: list[str]) -> dict[str, str]:
    texts = {"random letters": "".join(random.Random(0).choices("abcdefghijklmnopqrstuvwxyz", k=size)),
             "one letter": "a" * size}
    for name in files:
        text = Path(name).read_text(encoding="utf-8")
        if not text:
            raise ValueError(f"{name} is empty")
        text = text * (size // len(text.encode("utf-8")) + 1)
        texts[Path(name).name] = text.encode("utf-8")[:size].decode("utf-8", "ignore")
    return texts


def _ours(tokenizer, text: str, reps: int) -> tuple[float, list[int], int]:
    """-> (best CPU seconds, the ids, working memory beyond the result in bytes)."""
    best = float("inf")
    for _ in range(reps):
        t0 = time.thread_time()
        tokenizer.tokenize(text, add_special=True, parse_special=False)
        best = min(best, time.thread_time() - t0)
    tracemalloc.start()
    try:
        ids = tokenizer.tokenize(text, add_special=True, parse_special=False)
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return best, ids, peak - held


def _child_cpu(argv: list[str]) -> tuple[float, str]:
    """Runs argv; -> (its user + system CPU seconds, its stdout)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done.stdout


def _llama(llama_tokenize: str, model_path: str, text: str) -> tuple[float, list[int]]:
    """llama-tokenize's CPU seconds for `text` beyond loading the vocabulary, and its ids."""
    with tempfile.TemporaryDirectory() as tmp:
        runs = {}
        for name, body in (("load", "hi"), ("text", text)):
            path = os.path.join(tmp, name)
            with open(path, "w", encoding="utf-8") as f:
                f.write(body)
            runs[name] = _child_cpu([llama_tokenize, "-m", model_path, "-f", path, "--ids", "--no-escape",
                                     "--log-disable"])
    ids = [int(t) for t in runs["text"][1].strip().strip("[]").split(",") if t.strip()]
    return max(runs["text"][0] - runs["load"][0], 1e-6), ids


def run_model(path: str, texts: dict[str, str], reps: int, llama_tokenize: str | None = None, log=None) -> list[dict]:
    from ..files.gguf_file import GGUFFile
    from ..tokenizer import Tokenizer

    with GGUFFile(path) as f:
        tokenizer = Tokenizer.from_metadata(dict(f.metadata))
    tokenizer.tokenize("warm up: merge indexes and the special tokens' pieces are built on first use " * 8)
    rows = []
    for name, text in texts.items():
        n_bytes = len(text.encode("utf-8"))
        seconds, ids, memory = _ours(tokenizer, text, reps)
        row = {"model": os.path.basename(path), "text": name, "bytes": n_bytes, "tokens": len(ids),
               "seconds": seconds, "mb_s": n_bytes / seconds / 1e6, "memory_x": memory / n_bytes}
        if llama_tokenize:
            theirs, their_ids = _llama(llama_tokenize, path, text)
            row.update(llama_seconds=theirs, llama_mb_s=n_bytes / theirs / 1e6, ratio=theirs / seconds,
                       same_ids=their_ids == ids)
        if log:
            log(line(row))
        rows.append(row)
    return rows


def line(row: dict) -> str:
    out = (f"{row['model']} / {row['text']}: {row['tokens']} tokens, {row['mb_s']:.2f} MB/s, "
           f"working memory {row['memory_x']:.2f}x the text")
    if "ratio" in row:
        out += (f"; llama-tokenize {row['llama_mb_s']:.2f} MB/s ({row['ratio']:.1f}x), "
                f"ids {'the same' if row['same_ids'] else 'DIFFER'}")
    return out


def table(rows: list[dict]) -> str:
    compare = any("ratio" in r for r in rows)
    head = "| model | text | MB | tokens | MB/s | working memory / text |"
    rule = "|---|---|---:|---:|---:|---:|"
    if compare:
        head += " llama-tokenize MB/s | ours / theirs | same ids |"
        rule += "---:|---:|---|"
    lines = [head, rule]
    for r in rows:
        cells = (f"| {r['model']} | {r['text']} | {r['bytes'] / 1e6:.1f} | {r['tokens']} | {r['mb_s']:.2f} "
                 f"| {r['memory_x']:.2f}x |")
        if compare:
            cells += (f" {r['llama_mb_s']:.2f} | **{r['ratio']:.1f}** | {'yes' if r['same_ids'] else 'no'} |"
                      if "ratio" in r else " | | |")
        lines.append(cells)
    return "\n".join(lines)


def report(rows: list[dict], command: str, reps: int) -> str:
    m = machine()
    return "\n".join([
        "## Tokenizing long texts (`localinfer bench tokenize`)", "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {m['cpu']} ({m['cpu_detail']}; "
        f"{m['n_cpus']} CPUs). Regenerate with:", "", "```sh", command, "```", "",
        f"Ours: the best of {reps} runs in CPU time of the calling thread, one core; working memory is "
        "tracemalloc's peak beyond the result, over the text's UTF-8 bytes. llama-tokenize (built by the user "
        "outside this repository, `$LLAMA_TOKENIZE`): CPU time of one run on the text less one on a two-letter "
        "text (its vocabulary load); its ids printed with `--ids` are compared with ours. Special tokens written "
        "in the text stay text in both (llama-tokenize's default).", "",
        table(rows)])
