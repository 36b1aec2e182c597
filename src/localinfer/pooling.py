"""Pooling an encoder's hidden states into one result per text, as llama.cpp's build_pooling does
(src/llama-graph.cpp) for a batch of padded texts (arch/encoder.py's EncoderBatch):

    none: every token's vector, (n_i, n_embd)        (LLAMA_POOLING_TYPE_NONE)
    mean: the mean of the text's rows, (n_embd,)      cls: its first row ([CLS])      last: its last row
    rank: the classification head over the first row (or the mean, when the file's
          classifier.pooling_type says so), (n_cls_out,) scores: a re-ranker's relevance, a classifier's logits

Padding rows never enter a result. Means are summed in float64; L2 normalization (llama.cpp's
--embd-normalize 2, the default) is done in float64 too, as common_embd_normalize does, and a zero
vector stays zero.
"""
from __future__ import annotations

import numpy as np

POOLINGS = ("none", "mean", "cls", "last", "rank")


def check_pooling(pooling: str) -> str:
    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}; got {pooling!r}")
    return pooling


def pool_rows(hidden: np.ndarray, lengths: np.ndarray, pooling: str) -> np.ndarray | list[np.ndarray]:
    """hidden (B, L, n_embd), lengths (B,) -> (B, n_embd) float64 for mean/cls/last, or for "none" a
    list of B arrays (n_i, n_embd) float32. ("rank" is EncoderModel.pooled: it needs the head.)"""
    lengths = np.asarray(lengths)
    if pooling == "none":
        return [hidden[b, :n] for b, n in enumerate(lengths)]
    if pooling == "mean":
        valid = np.arange(hidden.shape[1])[None, :] < lengths[:, None]  # (B, L)
        sums = np.einsum("bl,bld->bd", valid.astype(np.float64), hidden.astype(np.float64))
        return sums / lengths[:, None]
    if pooling == "cls":
        return hidden[:, 0].astype(np.float64)
    if pooling == "last":
        return hidden[np.arange(len(lengths)), lengths - 1].astype(np.float64)
    raise ValueError(f"pool_rows: pooling {pooling!r} is not one of none, mean, cls, last")


def normalize(v: np.ndarray) -> np.ndarray:
    """Each row (or the vector) divided by its L2 norm in float64, zero rows left zero -> float32."""
    v = np.asarray(v, dtype=np.float64)
    norm = np.sqrt(np.sum(v * v, axis=-1, keepdims=True))
    return np.divide(v, norm, out=np.zeros_like(v), where=norm > 0).astype(np.float32)
