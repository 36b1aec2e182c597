"""Embedding throughput of encoders: texts/s for a batch of short sentences, beside llama.cpp's
llama-embedding and sentence-transformers on torch, in the same run (not a test).

The models are random-weight encoders of real shapes (quant/synthetic_encoder.py: bge-small, bert
33M; nomic-embed, nomic-bert 137M), converted by our converter to F16 / Q8_0; llama-embedding loads
the same GGUF files and sentence-transformers the Hugging Face folder they were converted from (in
float32, its only CPU type), so all three compute the same model. The texts are made-up words of
the models' vocabulary, each exactly `n_tokens` tokens with [CLS] and [SEP].

Each repetition runs every engine once, interleaved (ours, llama-embedding, sentence-transformers),
so a busy machine slows all of them alike within a repetition; a row gives the median texts/s over
the repetitions and the median of the per-repetition ratios.

What is timed, text in and vectors out:
- ours: Model.embed(texts) -- tokenizing, the forward passes (texts padded per pass of at most 2048
  tokens: encoder_tasks.plan_passes), pooling and L2 normalization -- wall time, after a warm-up call;
- llama-embedding: its own `total time` (llama_perf_context_print, -lv 4 --perf), which runs from
  after its warm-up to the end: tokenizing, every batch (-c/-b 2048, its default-sized batches of
  whole texts), and printing the vectors as JSON (tens of milliseconds of the total); not the
  process start or the model load;
- sentence-transformers: SentenceTransformer.encode(texts, batch_size, normalize_embeddings=True)
  with torch.set_num_threads(threads), wall time, after a warm-up call.
The vectors are compared too: the smallest cosine between ours and each other engine's.
"""
from __future__ import annotations

import os
import re
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np

from .bench_suite import machine

_TOTAL = re.compile(r"llama_perf_context_print:\s+total time =\s+([0-9.]+) ms")


@dataclass
class Row:
    shape: str
    ftype: str
    n_texts: int
    n_tokens: int
    ours_s: list[float] = field(default_factory=list)
    llama_s: list[float] = field(default_factory=list)
    st_s: list[float] = field(default_factory=list)
    llama_cos: float | None = None
    st_cos: float | None = None

    @staticmethod
    def _rate(n: int, seconds: list[float]) -> float | None:
        return n / statistics.median(seconds) if seconds else None

    @property
    def ours(self) -> float:
        return self._rate(self.n_texts, self.ours_s)

    @property
    def llama(self) -> float | None:
        return self._rate(self.n_texts, self.llama_s)

    @property
    def st(self) -> float | None:
        return self._rate(self.n_texts, self.st_s)

    def ratio(self, theirs: list[float]) -> tuple[float, float, float] | None:
        """(median, lowest, highest) of their time / ours, repetition by repetition."""
        if not theirs:
            return None
        r = [t / o for o, t in zip(self.ours_s, theirs)]
        return statistics.median(r), min(r), max(r)


def _min_cos(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.min(np.sum(a * b, -1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)))


def _llama_embedding(binary: str, path: str, texts_file: str, threads: int) -> tuple[float, np.ndarray]:
    """-> (llama-embedding's total time in seconds, its vectors)."""
    import json
    argv = [binary, "-m", path, "-f", texts_file, "-t", str(threads), "-c", "2048", "-b", "2048", "--perf", "-lv", "4",
            "--embd-output-format", "json"]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{binary} failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    m = _TOTAL.search(done.stderr)
    if m is None:
        raise RuntimeError(f"{binary} printed no 'total time' (is it llama.cpp's llama-embedding?)")
    data = json.loads(done.stdout[done.stdout.index("{"):])["data"]
    return float(m.group(1)) / 1e3, np.array([d["embedding"] for d in data], np.float32)


def run(shapes: list[str], ftypes: list[str], n_texts: int = 256, n_tokens: int = 30, threads: int = 2,
        reps: int = 3, llama_embedding: str | None = None, sentence_transformers: bool = False,
        st_batch: int = 32, log=lambda msg: None) -> list[Row]:
    import localinfer
    from ..quant.synthetic_encoder import sentences, synthetic_encoder, synthetic_encoder_folder

    models, st_models, texts, rows = {}, {}, {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for shape in shapes:
            folder = synthetic_encoder_folder(shape, log=log)
            texts[shape] = sentences(folder, n_texts, n_tokens)
            with open(os.path.join(tmp, shape), "w", encoding="utf-8") as f:
                f.write("\n".join(texts[shape]))
            if sentence_transformers:
                st_models[shape] = _load_st(str(folder), threads)
            for ftype in ftypes:
                path = str(synthetic_encoder(shape, ftype, log=log))
                model = localinfer.load(path, n_threads=threads)
                model.wait_repacked()   # measured as the model stays (arch/deferred_repack.py)
                got = [len(t) for t in (model.tokenize(x) for x in texts[shape][:4])]
                if got != [n_tokens] * len(got):
                    raise RuntimeError(f"{shape}: texts of {got} tokens, not {n_tokens}")
                model.embed(texts[shape][:8])  # warm up: the first pass sets up the kernels' buffers
                models[shape, ftype] = path, model
                rows.append(Row(shape, ftype, n_texts, n_tokens))
        for shape, st in st_models.items():
            st.encode(texts[shape][:8], batch_size=st_batch)
        for rep in range(reps):
            st_vectors: dict[str, np.ndarray] = {}  # once per shape and repetition: its rows share the f32 model
            for row in rows:
                path, model = models[row.shape, row.ftype]
                t0 = time.perf_counter()
                ours = model.embed(texts[row.shape])
                row.ours_s.append(time.perf_counter() - t0)
                msg = f"rep {rep + 1}/{reps} {row.shape} {row.ftype}: ours {n_texts / row.ours_s[-1]:.1f} texts/s"
                if llama_embedding:
                    seconds, theirs = _llama_embedding(llama_embedding, path, os.path.join(tmp, row.shape), threads)
                    row.llama_s.append(seconds)
                    row.llama_cos = _min_cos(ours, theirs)
                    msg += f", llama-embedding {n_texts / seconds:.1f}"
                if row.shape in st_models:
                    if row.shape not in st_vectors:
                        t0 = time.perf_counter()
                        st_vectors[row.shape] = st_models[row.shape].encode(
                            texts[row.shape], batch_size=st_batch, normalize_embeddings=True)
                        seconds = time.perf_counter() - t0
                        for other in rows:
                            if other.shape == row.shape:
                                other.st_s.append(seconds)
                    row.st_cos = _min_cos(ours, st_vectors[row.shape])
                    msg += f", sentence-transformers {n_texts / row.st_s[-1]:.1f}"
                log(msg)
    return rows


def _load_st(folder: str, threads: int):
    try:
        import torch
        from sentence_transformers import SentenceTransformer
    except ImportError as e:
        raise RuntimeError(f"--compare-sentence-transformers needs sentence-transformers and torch ({e}): "
                           "pip install sentence-transformers") from None
    torch.set_num_threads(threads)
    return SentenceTransformer(folder, device="cpu")


def _ratio_cell(r) -> str:
    return f"**{r[0]:.2f}x** ({r[1]:.2f}-{r[2]:.2f})" if r else ""


def table(rows: list[Row]) -> str:
    llama, st = any(r.llama_s for r in rows), any(r.st_s for r in rows)
    head, rule = "| model | type | texts/s |", "|---|---|---:|"
    if llama:
        head += " llama-embedding texts/s | ours / llama-embedding | min cos |"
        rule += "---:|---:|---:|"
    if st:
        head += " sentence-transformers (f32) texts/s | ours / sentence-transformers | min cos |"
        rule += "---:|---:|---:|"
    lines = [head, rule]
    for r in rows:
        cells = f"| {r.shape} | {r.ftype} | {r.ours:.1f} |"
        if llama:
            cells += (f" {r.llama:.1f} | {_ratio_cell(r.ratio(r.llama_s))} | {r.llama_cos:.5f} |"
                      if r.llama_s else " | | |")
        if st:
            cells += f" {r.st:.1f} | {_ratio_cell(r.ratio(r.st_s))} | {r.st_cos:.5f} |" if r.st_s else " | | |"
        lines.append(cells)
    return "\n".join(lines)


def report(rows: list[Row], command: str, reps: int, threads: int, st_batch: int) -> str:
    m = machine()
    first = rows[0]
    return "\n".join([
        "## Encoders: embedding throughput (`localinfer bench embed`)", "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {m['cpu']} ({m['cpu_detail']}; "
        f"{m['n_cpus']} CPUs), {threads} threads each. Regenerate with:", "", "```sh", command, "```", "",
        f"A batch of {first.n_texts} texts of {first.n_tokens} tokens ([CLS] and [SEP] included), text in and "
        "L2-normalized vectors out, on random-weight encoders of real shapes (bge-small: bert, 33M; nomic-embed: "
        "nomic-bert, 137M; `quant/synthetic_encoder.py`). llama-embedding (llama.cpp, built by the user outside "
        "this repository, `$LLAMA_EMBEDDING`) loads the same GGUF files; its time is its own `total time` (after "
        "its warm-up: tokenizing, its batches, printing the vectors). sentence-transformers runs the Hugging Face "
        f"folder the files were converted from, in float32 on torch's CPU path, batch_size {st_batch}. Each of "
        f"{reps} repetitions runs the engines one after another; texts/s is the median, the ratio the median of "
        "the per-repetition ratios (lowest-highest in brackets), min cos the smallest cosine between our vectors "
        "and theirs. The machine was shared with other work: the ratios are what to read, not the absolute "
        "numbers.", "",
        table(rows)])
