"""Perplexity of a text, measured the way llama.cpp's llama-perplexity does.

The method (tools/perplexity/perplexity.cpp, `perplexity()`):
- the whole text is tokenized once, with the vocab's BOS when it adds one (no special-token
  parsing: the text is data);
- it is cut into `n_chunk` back-to-back chunks of exactly `n_ctx` tokens (the tail that does
  not fill a chunk is dropped); each chunk is evaluated from an empty KV cache;
- where the vocab adds BOS, the first token of every chunk is replaced by BOS (only for
  evaluation: the stored tokens stay as they are);
- only the second half of each chunk is scored, so that every scored token has at least
  n_ctx/2 tokens of context: the logits at positions first .. n_ctx-2 (first = n_ctx // 2)
  predict the tokens at first+1 .. n_ctx-1, i.e. n_ctx - 1 - first tokens per chunk;
- PPL = exp(mean NLL) over every scored token so far, printed after each chunk as
  `[1]15.5928,[2]18.0898,...`; the final estimate's error is
  PPL * sqrt(var(NLL) / (count - 1)) (population variance), printed as
  `Final estimate: PPL = 22.5191 +/- 0.62083`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np

ROW_BLOCK = 32  # rows of logits widened to float64 at a time: (32, 262144) f64 is 64 MiB


def scored_slice(n_ctx: int) -> slice:
    """Rows of a chunk's logits that are scored: first .. n_ctx-2, first = n_ctx // 2."""
    return slice(n_ctx // 2, n_ctx - 1)


def n_scored(n_ctx: int) -> int:
    return n_ctx - 1 - n_ctx // 2


def check_n_ctx(n_ctx: int) -> None:
    if n_ctx < 4:
        raise ValueError(f"the context must hold at least 4 tokens to score any, got {n_ctx}")


def n_chunks_for(n_tokens: int, n_ctx: int, n_chunks: int | None = None) -> int:
    """How many chunks llama-perplexity evaluates: all full ones, or at most `n_chunks`."""
    check_n_ctx(n_ctx)
    if n_chunks is not None and n_chunks < 1:
        raise ValueError(f"the number of chunks must be at least 1, got {n_chunks}")
    if n_tokens < 2 * n_ctx:
        raise ValueError(f"the text has {n_tokens} tokens; perplexity with a context of {n_ctx} needs at "
                         f"least {2 * n_ctx} (a longer text, or a smaller context)")
    n_max = n_tokens // n_ctx
    return n_max if n_chunks is None else min(n_chunks, n_max)


def make_chunks(tokens: Sequence[int], n_ctx: int, n_chunks: int | None = None) -> np.ndarray:
    """(n_chunk, n_ctx) int64: the text's first n_chunk * n_ctx tokens, as stored (no BOS swap)."""
    n = n_chunks_for(len(tokens), n_ctx, n_chunks)
    return np.asarray(tokens[:n * n_ctx], dtype=np.int64).reshape(n, n_ctx)


def chunk_input(chunk: np.ndarray, bos_id: int | None) -> np.ndarray:
    """The tokens a chunk is evaluated with: the first replaced by BOS where the vocab adds one."""
    chunk = np.array(chunk, dtype=np.int64)
    if bos_id is not None:
        chunk[0] = bos_id
    return chunk


def chunk_targets(chunk: np.ndarray) -> np.ndarray:
    """(n_scored,) the tokens the scored rows predict: the original tokens first+1 .. n_ctx-1."""
    n_ctx = chunk.shape[0]
    return np.asarray(chunk[n_ctx // 2 + 1:], dtype=np.int64)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """(n, n_vocab) float32/64 -> (n, n_vocab) float64 log-probabilities (max-subtracted, stable)."""
    x = np.asarray(logits, dtype=np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def token_nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """(n, n_vocab) logits, (n,) target ids -> (n,) float64 negative log-likelihoods,
    -log softmax(logits[i])[targets[i]], computed ROW_BLOCK rows at a time."""
    n = logits.shape[0]
    if targets.shape != (n,):
        raise ValueError(f"{n} rows of logits but {targets.shape} targets")
    out = np.empty(n, dtype=np.float64)
    rows = np.arange(n)
    for s in range(0, n, ROW_BLOCK):
        e = min(n, s + ROW_BLOCK)
        lp = log_softmax(logits[s:e])
        out[s:e] = -lp[rows[:e - s], targets[s:e]]
    return out


def mean_and_error(total: float, total_sq: float, count: int) -> tuple[float, float]:
    """Mean and its standard error from a sum and a sum of squares, as llama-perplexity:
    sqrt((E[x^2] - E[x]^2) / (count - 1)); 0 where it cannot be estimated."""
    if count < 1:
        return 0.0, 0.0
    mean = total / count
    var = total_sq / count - mean * mean
    return mean, (np.sqrt(var / (count - 1)) if var > 0 and count > 1 else 0.0)


@dataclass
class PerplexityStats:
    """Running sums of the NLL of every scored token."""
    nll: float = 0.0
    nll2: float = 0.0
    count: int = 0

    def add(self, nll: np.ndarray) -> None:
        nll = np.asarray(nll, dtype=np.float64)
        self.nll += float(nll.sum())
        self.nll2 += float((nll * nll).sum())
        self.count += int(nll.size)

    @property
    def ppl(self) -> float:
        return float(np.exp(self.nll / self.count)) if self.count else float("nan")

    @property
    def ppl_error(self) -> float:
        """The standard error of PPL: PPL * the standard error of the mean NLL."""
        return self.ppl * mean_and_error(self.nll, self.nll2, self.count)[1]


def format_running(chunk_number: int, ppl: float) -> str:
    """llama-perplexity's per-chunk running value, e.g. "[3]17.1735," (1-based chunk)."""
    return f"[{chunk_number}]{ppl:.4f},"


def format_final(stats: PerplexityStats) -> str:
    return f"Final estimate: PPL = {stats.ppl:.4f} +/- {stats.ppl_error:.5f}"


def text_tokens(model, text: str) -> list[int]:
    """The whole text as llama-perplexity tokenizes it: the vocab's BOS rule, text as data."""
    return model.tokenize(text, add_special=True, parse_special=False)


def bos_for_chunks(model) -> int | None:
    """The token that replaces each chunk's first one: BOS where the vocab adds it, else none."""
    return model.tokenizer.bos_id if model.tokenizer.add_bos else None


def scored_logits(model, chunks: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """For each chunk: (scored logits (n_scored, n_vocab) float32, targets (n_scored,)),
    each chunk evaluated from an empty cache in one batch."""
    n_ctx = chunks.shape[1]
    bos = bos_for_chunks(model)
    ctx = model.new_context(n_ctx)
    for chunk in chunks:
        ctx.reset()
        logits = ctx.append(chunk_input(chunk, bos))  # (n_ctx, n_vocab)
        yield logits[scored_slice(n_ctx)], chunk_targets(chunk)


def perplexity_pass(model, chunks: np.ndarray,
                    keep: Callable[[np.ndarray, np.ndarray], None] | None = None) -> Iterator[PerplexityStats]:
    """Scores the chunks one by one, yielding the running stats after each; `keep(logits, targets)`
    also sees each chunk's scored logits (to save a base model's distributions)."""
    stats = PerplexityStats()
    for logits, targets in scored_logits(model, chunks):
        stats.add(token_nll(logits, targets))
        if keep is not None:
            keep(logits, targets)
        yield stats
