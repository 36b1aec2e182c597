"""Embedding, re-ranking and classification with encoder models (bert, nomic-bert, jina-bert-v2, modern-bert:
arch/encoder.py), the layer between `Model` and the architectures. `Model.embed` / `rerank` /
`classify` call these; a server or a command line that has tokenized and counted already calls
the token-level functions.

Library (Model's methods):

    Model.embed(texts, pooling=None, normalize=True) -> np.ndarray (len(texts), n_embd) float32
        pooling "mean" | "cls" | "last" (the file's pooling_type by default, else "mean");
        "none" -> a list of (n_tokens_i, n_embd) arrays, one row per token; "rank" -> (n, n_cls_out)
        head scores, never normalized.
    Model.rerank(query, documents, top_n=None) -> list[RerankResult]   best first
        RerankResult(index, relevance_score, document): the head's raw score of
        "[CLS] query [SEP] document [SEP]" (a logit for BERT cross-encoders; llama-server's /rerank
        reports it as it is); top_n keeps the best n.
    Model.classify(texts) -> list[Classification]
        Classification(label, score, labels, logits, probabilities): softmax over the head's outputs
        (the sigmoid of a single output), labels from `{arch}.classifier.output_labels` (LABEL_<i>
        where the file names none).

Token level (runtime: a Model's `serialized`, whose `pooled(batch, pooling)` runs one pass under the
model's lock; tokenizer: Model.tokenizer):

    embed_passes(runtime, token_lists, pooling, normalize, n_batch) -> yields [(index, result), ...] per pass
    embed_tokens(runtime, token_lists, pooling, normalize, n_batch) -> as Model.embed
    pair_tokens(tokenizer, query, document) -> (ids, token types) of one re-ranking input
    score_tokens(runtime, token_lists, type_lists, n_batch) -> (n, n_cls_out) float32 head scores
    score_passes(runtime, token_lists, type_lists, n_batch) -> yields [(index, scores), ...] per pass

Batching: texts are sorted by length and cut into passes of at most `n_batch` padded tokens
(a longer text runs alone), each padded to its longest text; so one pass runs many short texts and
every matmul sees all of their rows (the C GEMM at full width), with little padding.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from .arch.encoder import EncoderBatch
from .kv.cache import ContextFullError
from .pooling import check_pooling, normalize as l2_normalize

DEFAULT_N_BATCH = 2048  # padded tokens per forward pass (llama.cpp's default n_batch)


@dataclass(frozen=True)
class RerankResult:
    index: int  # the document's position in the request
    relevance_score: float  # the head's first output, raw
    document: str | None = None  # the document's text, when it was given as text


@dataclass(frozen=True)
class Classification:
    label: str  # the most probable label
    score: float  # its probability
    labels: tuple[str, ...]  # every label, in the head's output order
    logits: np.ndarray  # (n_labels,) float32, the head's raw outputs
    probabilities: np.ndarray  # (n_labels,) float32, softmax of the logits (sigmoid of a single one)


def default_pooling(config) -> str:
    """The pooling embed() uses when asked for none: the file's pooling_type, else "mean"."""
    if config.pooling == "rank":
        raise ValueError("this model is a re-ranker / classifier (pooling_type rank): use rerank() or classify(), "
                         "or pass pooling='cls' or 'mean' to embed its hidden states")
    return config.pooling or "mean"


def check_lengths(token_lists: Sequence[Sequence[int]], n_ctx: int) -> None:
    """Empty or over-long inputs, refused before any work. An encoder sees a text whole, in one
    pass: it cannot be longer than the positions the model has (context_length)."""
    for i, tokens in enumerate(token_lists):
        if not len(tokens):
            raise ValueError(f"input {i} is empty (no tokens)")
        if len(tokens) > n_ctx:
            raise ContextFullError(f"input {i} is {len(tokens)} tokens long, but this encoder takes at most "
                                   f"{n_ctx} (shorten the input)")


def plan_passes(lengths: Sequence[int], n_batch: int = DEFAULT_N_BATCH) -> list[list[int]]:
    """Indices of the texts in each forward pass: by increasing length, as many as fit in n_batch
    padded tokens (count x the pass's longest length), at least one."""
    if n_batch < 1:
        raise ValueError(f"n_batch must be >= 1, got {n_batch}")
    passes: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        if passes and (len(passes[-1]) + 1) * lengths[i] <= n_batch:
            passes[-1].append(i)
        else:
            passes.append([i])
    return passes


def _passes(runtime, token_lists, pooling: str, type_lists=None,
            n_batch: int = DEFAULT_N_BATCH) -> Iterator[list[tuple[int, np.ndarray]]]:
    check_pooling(pooling)
    check_lengths(token_lists, runtime.config.n_ctx_train)
    for members in plan_passes([len(t) for t in token_lists], n_batch):
        batch = EncoderBatch.pad([token_lists[i] for i in members],
                                 None if type_lists is None else [type_lists[i] for i in members])
        yield list(zip(members, runtime.pooled(batch, pooling)))


def embed_passes(runtime, token_lists: Sequence[Sequence[int]], pooling: str = "mean", normalize: bool = True,
                 n_batch: int = DEFAULT_N_BATCH) -> Iterator[list[tuple[int, np.ndarray]]]:
    """Yields, after each forward pass, (index, result) for the texts it ran: (n_embd,) float32 for
    mean/cls/last, (n_tokens, n_embd) for none (each row normalized), (n_cls_out,) for rank (raw).
    The same contract as embedding.embed_passes (the decoders'); stop iterating to give up early."""
    for finished in _passes(runtime, token_lists, pooling, n_batch=n_batch):
        yield [(i, _finish(v, pooling, normalize)) for i, v in finished]


def _finish(v: np.ndarray, pooling: str, normalize: bool) -> np.ndarray:
    if pooling == "rank" or not normalize:
        return np.asarray(v, np.float32)
    return l2_normalize(v)


def embed_tokens(runtime, token_lists: Sequence[Sequence[int]], pooling: str = "mean", normalize: bool = True,
                 n_batch: int = DEFAULT_N_BATCH) -> np.ndarray | list[np.ndarray]:
    """Model.embed on token ids: (len(token_lists), width) float32 in the order given, or for
    pooling "none" a list of (n_tokens_i, n_embd) arrays."""
    out: list[np.ndarray | None] = [None] * len(token_lists)
    for finished in embed_passes(runtime, token_lists, pooling, normalize, n_batch):
        for i, v in finished:
            out[i] = v
    if pooling == "none":
        return out
    width = runtime.config.n_embd if pooling != "rank" else runtime.n_cls_out
    return np.stack(out) if out else np.zeros((0, width), np.float32)


def score_tokens(runtime, token_lists: Sequence[Sequence[int]], type_lists: Sequence[Sequence[int]] | None = None,
                 n_batch: int = DEFAULT_N_BATCH) -> np.ndarray:
    """(len(token_lists), n_cls_out) float32: the classification head over each input."""
    out = np.zeros((len(token_lists), runtime.n_cls_out), np.float32)
    for finished in _passes(runtime, token_lists, "rank", type_lists, n_batch):
        for i, v in finished:
            out[i] = v
    return out


def score_passes(runtime, token_lists: Sequence[Sequence[int]], type_lists: Sequence[Sequence[int]] | None = None,
                 n_batch: int = DEFAULT_N_BATCH) -> Iterator[list[tuple[int, np.ndarray]]]:
    """score_tokens a forward pass at a time: yields [(index, (n_cls_out,) float32), ...] after each
    pass, for a caller that may stop between passes (the server's /v1/rerank). type_lists as
    pair_tokens makes them (all 0 for a model with one token type)."""
    types = None if type_lists is None else _token_types(runtime, type_lists)
    yield from _passes(runtime, token_lists, "rank", types, n_batch)


def pair_tokens(tokenizer, query: str, document: str) -> tuple[list[int], list[int]]:
    """(ids, token types) of one re-ranking input, laid out as llama-server's format_prompt_rerank
    does from the vocabulary's flags: BOS? query EOS? SEP? document EOS? -- for a BERT vocabulary
    "[CLS] query [SEP] document [SEP]". Types: 0 through the query's closing tokens, 1 after (as
    transformers' tokenizer makes a pair; models with one token type take 0 throughout)."""
    vocab = tokenizer.vocab
    eos = vocab.special.get("eos")
    if eos is None:
        eos = vocab.special.get("sep")
    q = tokenizer.tokenize(query, add_special=False, parse_special=False)
    d = tokenizer.tokenize(document, add_special=False, parse_special=False)
    first = ([tokenizer.bos_id] if vocab.add_bos and tokenizer.bos_id is not None else []) + q
    if vocab.add_eos and eos is not None:
        first.append(eos)
    if getattr(vocab, "add_sep", False) and vocab.special.get("sep") is not None:
        first.append(vocab.special["sep"])
    second = d + ([eos] if vocab.add_eos and eos is not None else [])
    return first + second, [0] * len(first) + [1] * len(second)


def _token_types(runtime, type_lists):
    """Pairs' types as made, or all 0 for a model with one token type (or none)."""
    types = runtime.weights.token_types
    return type_lists if types is not None and types.shape[0] > 1 else None


def rerank(runtime, tokenizer, query: str, documents: Sequence[str], top_n: int | None = None,
           n_batch: int = DEFAULT_N_BATCH) -> list[RerankResult]:
    """Model.rerank: the documents by the head's score of (query, document), best first."""
    if not isinstance(query, str) or isinstance(documents, str) or not all(isinstance(d, str) for d in documents):
        raise TypeError("rerank takes a query string and a list of document strings")
    if top_n is not None and (isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 0):
        raise ValueError(f"top_n must be a non-negative integer, got {top_n!r}")
    pairs = [pair_tokens(tokenizer, query, d) for d in documents]
    scores = score_tokens(runtime, [p[0] for p in pairs], _token_types(runtime, [p[1] for p in pairs]), n_batch)
    results = [RerankResult(i, float(s[0]), documents[i]) for i, s in enumerate(scores)]
    results.sort(key=lambda r: -r.relevance_score)  # stable: equal scores keep the request's order
    return results if top_n is None else results[:top_n]


def classify_tokens(runtime, token_lists: Sequence[Sequence[int]], n_batch: int = DEFAULT_N_BATCH) -> list[Classification]:
    """Model.classify on token ids."""
    logits = score_tokens(runtime, token_lists, None, n_batch)
    labels = runtime.config.labels or tuple(f"LABEL_{i}" for i in range(logits.shape[1]))
    out = []
    for row in logits:
        if row.shape[0] == 1:  # one output (a relevance or binary head): its sigmoid
            p = (1.0 / (1.0 + np.exp(-row.astype(np.float64)))).astype(np.float32)
        else:
            e = np.exp(row.astype(np.float64) - row.max())
            p = (e / e.sum()).astype(np.float32)
        best = int(np.argmax(row))
        out.append(Classification(labels[best], float(p[best]), tuple(labels), row, p))
    return out
