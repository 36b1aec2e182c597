"""Compute an importance matrix the way llama.cpp's llama-imatrix does (tools/imatrix/imatrix.cpp).

The text is tokenized and cut into chunks of n_ctx tokens exactly as for perplexity
(``measure.perplexity``: the vocab's BOS rule, each chunk's first token swapped for BOS, each
chunk from an empty cache). While each chunk runs, every linear layer's input x (m, n_in) is
seen through ``arch.weights.observe_matmuls`` and, for the weights llama-imatrix collects,

    in_sum2[name][expert] += sum over the m rows of x**2      counts[name][expert] += m

Which weights: those named ``blk.*`` (and ``output.weight`` with `process_output`); a dense
matmul only when it has at least 16 rows (llama-imatrix skips smaller batches); an expert's
matmul always, over the tokens routed to it. A stacked q/k/v matmul counts for each of its
tensors. Sums are accumulated in float64 and stored as float32: llama-imatrix sums in float32
token by token, so the two differ in the last bits even on equal activations.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..arch.weights import observe_matmuls
from ..quant.imatrix_file import Imatrix, ImatrixEntry, ImatrixError
from . import perplexity as ppl

MIN_ROWS = 16  # llama-imatrix ignores dense matmuls of fewer tokens ("why are small batches ignored?")


class ImatrixCollector:
    """The observer: accumulates the squared inputs per weight (and per expert)."""

    def __init__(self, n_mats: dict[str, int], process_output: bool = False):
        self.n_mats = n_mats  # tensor name -> number of matrices (experts) in it
        self.process_output = process_output
        self.sums: dict[str, np.ndarray] = {}  # name -> (n_mat, n_in) float64
        self.counts: dict[str, np.ndarray] = {}  # name -> (n_mat,) int64

    def wants(self, name: str) -> bool:
        return name.startswith("blk.") or (self.process_output and name == "output.weight")

    def __call__(self, names: tuple, expert: int | None, x: np.ndarray) -> None:
        if expert is None and x.shape[0] < MIN_ROWS:
            return
        names = [n for n in names if self.wants(n)]
        if not names:
            return
        x = np.asarray(x, dtype=np.float32).reshape(-1, x.shape[-1])
        sq = np.einsum("ij,ij->j", x, x, dtype=np.float64)  # (n_in,)
        if not np.isfinite(sq).all():
            raise ImatrixError(f"non-finite activations at the input of {names[0]}")
        for name in names:
            if name not in self.sums:
                n_mat = self.n_mats.get(name, 1)
                self.sums[name] = np.zeros((n_mat, x.shape[1]), np.float64)
                self.counts[name] = np.zeros(n_mat, np.int64)
            m = 0 if expert is None else expert
            self.sums[name][m] += sq
            self.counts[name][m] += x.shape[0]

    def result(self, datasets: list[str], chunk_count: int, chunk_size: int) -> Imatrix:
        entries = {n: ImatrixEntry(self.sums[n].astype(np.float32), self.counts[n].copy()) for n in sorted(self.sums)}
        return Imatrix(entries, list(datasets), chunk_count, chunk_size)


@dataclass
class ImatrixRun:
    imatrix: Imatrix
    ppl: float  # the text's perplexity over the chunks (llama-imatrix prints it too)
    n_tokens: int


def compute_imatrix(model, text: str, n_ctx: int = 512, n_chunks: int | None = None, process_output: bool = False,
                    dataset: str = "", progress: Callable[[int, int, float], None] | None = None) -> ImatrixRun:
    """The importance matrix of `model` (a localinfer Model) on `text`.

    `progress(done, total, running_ppl)` after each chunk. Raises ValueError (from the
    chunking) for a text shorter than two chunks, as llama-imatrix refuses it."""
    tokens = ppl.text_tokens(model, text)
    chunks = ppl.make_chunks(tokens, n_ctx, n_chunks)
    n_mats = {name: (t.shape[0] if len(t.shape) == 3 else 1) for name, t in model.gguf.tensors.items()}
    collector = ImatrixCollector(n_mats, process_output)
    stats = ppl.PerplexityStats()
    with observe_matmuls(collector):
        for i, (logits, targets) in enumerate(ppl.scored_logits(model, chunks)):
            stats.add(ppl.token_nll(logits, targets))
            if progress:
                progress(i + 1, len(chunks), stats.ppl)
    if not collector.sums:
        raise ImatrixError("no matmul was observed: the model has no blk.* weights that multiply activations")
    im = collector.result([dataset] if dataset else [], len(chunks), n_ctx)
    return ImatrixRun(im, stats.ppl if stats.count else math.nan, len(tokens))
