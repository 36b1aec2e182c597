"""The numpy reference of the layer ops (`backend/ops.py` is the same functions on the C core).

Every function works on float32 arrays of shape (n_tokens, ...). These are the oracle for the
fast kernels of the C core: clarity over speed, but no per-element Python loops.
The arithmetic follows ggml's CPU ops where that changes results (noted per function).
"""
from __future__ import annotations

import contextlib

import numpy as np

from ..kv.cache_types import dequantize_rows, quantize_rows


def batched_rows() -> contextlib.AbstractContextManager:
    """Inside: every row as in a pass of many rows (the C core's kernels.batched_rows). numpy's
    results do not depend on the row count, so nothing to do."""
    return contextlib.nullcontext()


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x: (n, dim) -> x / sqrt(mean(x^2) + eps) * weight.
    ggml_rms_norm sums the squares in double, then scales in float."""
    mean_sq = np.mean(np.square(x, dtype=np.float64), axis=-1, keepdims=True)
    scale = (1.0 / np.sqrt(mean_sq + eps)).astype(np.float32)
    return (x * scale) * weight


def rope_freqs(head_dim: int, base: float, n_rot: int | None = None,
               freq_factors: np.ndarray | None = None) -> np.ndarray:
    """theta_i = base^(-2i/n_rot) for i < n_rot/2; (n_rot/2,) float64.
    `freq_factors` (llama3-style rope_freqs.weight) divide the frequencies."""
    n_rot = head_dim if n_rot is None else n_rot
    inv = base ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)
    if freq_factors is not None:
        inv = inv / freq_factors.astype(np.float64)
    return inv


def apply_rope(x: np.ndarray, positions: np.ndarray, inv_freq: np.ndarray, neox: bool) -> np.ndarray:
    """Rotate pairs of x: (n, heads, head_dim) at `positions` (n,).

    Normal mode (llama as GGUF stores it): pairs are adjacent, (x[2i], x[2i+1]); the HF->GGUF
    converter permutes the Q/K weight rows so that this matches HF's rotate_half.
    NeoX mode: pairs are (x[i], x[i + n_rot/2]). Dimensions past n_rot pass through.
    """
    n_rot = 2 * inv_freq.shape[0]
    angles = positions.astype(np.float64)[:, None] * inv_freq[None, :]  # (n, n_rot/2)
    cos = np.cos(angles).astype(np.float32)[:, None, :]
    sin = np.sin(angles).astype(np.float32)[:, None, :]
    out = x.copy()
    if neox:
        half = n_rot // 2
        a, b = x[..., :half], x[..., half:n_rot]
        out[..., :half] = a * cos - b * sin
        out[..., half:n_rot] = a * sin + b * cos
    else:
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = a * cos - b * sin
        out[..., 1:n_rot:2] = a * sin + b * cos
    return out


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True, dtype=np.float64).astype(np.float32)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, q_positions: np.ndarray,
              scale: float, kv_dtype=np.float16, sliding_window: int | None = None,
              softcap: float | None = None, key_start: int = 0, kv_types=None,
              sinks: np.ndarray | None = None) -> np.ndarray:
    """Causal multi-head attention with grouped K/V heads.

    q: (n, n_head, head_dim) at absolute positions q_positions (n,);
    k, v: (n_kv, n_head_kv, head_dim), key j at position key_start + j (a sliding-window cache
    returns only the most recent keys). Returns (n, n_head, head_dim).
    With `sliding_window` w, a query at position p sees keys p-w+1..p (llama.cpp's
    LLAMA_SWA_TYPE_STANDARD: masked when p - key_pos >= w).
    `sinks` (n_head,): gpt-oss's attention sinks, a learned logit per head that joins the softmax's
    denominator and attends to nothing: probs = exp(s_j) / (sum_j exp(s_j) + exp(sink)).

    llama.cpp (flash attention off, f16 KV cache) multiplies f16 K with Q rounded to f16, and
    the softmax weights rounded to f16 with f16 V; rounding to `kv_dtype` here reproduces that.

    kv_types (kv_types.KVCacheTypes): k / v hold q8_0 / q4_0 rows (uint8 (n_kv, n_head_kv, row
    bytes)); they are dequantized, and against quantized keys the query is rounded to q8_0 (the
    type ggml's dot products of q8_0 / q4_0 rows take) instead of f16.
    """
    n, n_head, head_dim = q.shape
    n_kv, n_head_kv = k.shape[:2]
    group = n_head // n_head_kv
    k_type, v_type = (kv_types.k, kv_types.v) if kv_types is not None else ("f16", "f16")
    if k_type != "f16":
        q = dequantize_rows(quantize_rows(q, "q8_0", use_c=False), "q8_0", head_dim)
    elif kv_dtype is not None:
        q = q.astype(kv_dtype).astype(np.float32)
    k32 = dequantize_rows(k, k_type, head_dim) if k_type != "f16" else k.astype(np.float32)
    v32 = dequantize_rows(v, v_type, head_dim) if v_type != "f16" else v.astype(np.float32)
    # (n_head_kv, group, n, head_dim) x (n_head_kv, head_dim, n_kv) -> (n_head_kv, group, n, n_kv)
    qg = q.reshape(n, n_head_kv, group, head_dim).transpose(1, 2, 0, 3)
    scores = np.matmul(qg, k32.transpose(1, 2, 0)[:, None]) * np.float32(scale)
    if softcap is not None:
        scores = np.tanh(scores / softcap) * softcap
    key_pos = key_start + np.arange(n_kv)
    mask = key_pos[None, :] > q_positions[:, None]  # (n, n_kv): future keys
    if sliding_window is not None:
        mask |= key_pos[None, :] <= q_positions[:, None] - sliding_window
    scores = np.where(mask, np.float32(-np.inf), scores)
    if sinks is None:
        probs = softmax(scores)
    else:  # the sink is one more column of the softmax, dropped afterwards
        sink = np.asarray(sinks, np.float32).reshape(n_head_kv, group, 1, 1)
        m = np.maximum(scores.max(axis=-1, keepdims=True), sink)
        e = np.exp(scores - m)
        denom = np.sum(e, axis=-1, keepdims=True, dtype=np.float64) + np.exp(sink - m)
        probs = e / denom.astype(np.float32)
    if kv_dtype is not None:
        probs = probs.astype(kv_dtype).astype(np.float32)
    out = np.matmul(probs, v32.transpose(1, 0, 2)[:, None])  # (n_head_kv, group, n, head_dim)
    return out.transpose(2, 0, 1, 3).reshape(n, n_head, head_dim)


def silu(x: np.ndarray) -> np.ndarray:
    return x / (np.float32(1.0) + np.exp(-x))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    c = np.float32(np.sqrt(2.0 / np.pi))
    return np.float32(0.5) * x * (np.float32(1.0) + np.tanh(c * (x + np.float32(0.044715) * x * x * x)))


def swiglu(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    return silu(gate) * up


def geglu(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """gelu_tanh(gate) * up as ggml_geglu computes it on the CPU: GELU read from a table indexed
    by the input rounded to f16 and holding f16 results (GGML_GELU_FP16 in ggml-cpu/vec.h);
    the input itself above 10, and 0 below -10."""
    table_in = np.clip(gate, -10, 10).astype(np.float16).astype(np.float32)
    act = gelu_tanh(table_in).astype(np.float16).astype(np.float32)
    act = np.where(gate >= 10, gate, np.where(gate <= -10, np.float32(0), act))
    return act * up


# -- encoders (arch/encoder.py): BERT-style post-norm blocks, GELU, attention without a causal mask --

def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, eps: float) -> np.ndarray:
    """x: (n, dim) -> (x - mean) / sqrt(var + eps) * weight + bias, per row.
    As ggml_norm (LLM_NORM): mean and variance summed in double, the squares and the scaling in float."""
    mean = np.mean(x, axis=-1, keepdims=True, dtype=np.float64).astype(np.float32)
    d = x - mean
    var = np.mean(np.square(d), axis=-1, keepdims=True, dtype=np.float64)
    y = d * (1.0 / np.sqrt(var + eps)).astype(np.float32)
    y = y * weight
    return y if bias is None else y + bias


def gelu(x: np.ndarray) -> np.ndarray:
    """ggml_gelu on the CPU: gelu_tanh read from a table indexed by the input rounded to f16 and
    holding f16 results (GGML_GELU_FP16); the input itself above 10, 0 below -10 (as geglu's gate)."""
    return geglu(x, np.float32(1.0))


ENCODER_SCORES_BLOCK = 1 << 24  # attention scores held at once (64 MiB): a long text's queries go in blocks


def encoder_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, lengths: np.ndarray, scale: float,
                      alibi_slopes: np.ndarray | None = None, n_swa: int = 0) -> np.ndarray:
    """Bidirectional multi-head attention over a batch of padded texts (no causal mask, no cache).

    q, k, v: (B, L, n_head, head_dim) float32; text b is its first lengths[b] rows, the rest padding,
    which no query attends to. alibi_slopes (n_head,): ALiBi, the score of key j for query i is
    lowered by slope * |i - j| (jina-bert-v2; ggml_soft_max_ext with a -|i-j| mask and max_bias).
    n_swa > 0: a symmetric sliding window, query i sees only keys with |i - j| <= n_swa // 2
    (llama.cpp's LLAMA_SWA_TYPE_SYMMETRIC; ModernBERT's local layers, local_attention = n_swa).
    Everything in float32, as llama.cpp computes an encoder's attention without a KV cache (no
    f16 rounding of K, V or the probabilities). Returns (B, L, n_head, head_dim); padding rows
    hold values that nothing reads. The (B, n_head, queries, L) scores are made for a block of
    queries at a time, at most ENCODER_SCORES_BLOCK floats (an 8192-token text has 12 x 8192^2)."""
    n_batch, n_len, n_head = q.shape[:3]
    kt = k.transpose(0, 2, 3, 1)  # (B, H, head_dim, L)
    vt = v.transpose(0, 2, 1, 3)  # (B, H, L, head_dim)
    pos = np.arange(n_len)
    padding = pos[None, :] >= np.asarray(lengths)[:, None]  # (B, L): keys past each text
    slopes = None if alibi_slopes is None else np.asarray(alibi_slopes, np.float32)[:, None, None]
    out = np.empty((n_batch, n_head, n_len, q.shape[3]), np.float32)
    block = max(1, ENCODER_SCORES_BLOCK // max(1, n_batch * n_head * n_len))
    for i0 in range(0, n_len, block):
        i1 = min(n_len, i0 + block)
        scores = np.matmul(q[:, i0:i1].transpose(0, 2, 1, 3), kt) * np.float32(scale)  # (B, H, i1-i0, L)
        if slopes is not None:
            scores = scores - slopes * np.abs(pos[i0:i1, None] - pos[None, :]).astype(np.float32)
        masked = padding[:, None, None, :]
        if n_swa > 0:  # not on padding queries: a window of padding keys only would make NaN rows
            outside = np.abs(pos[i0:i1, None] - pos[None, :]) > n_swa // 2  # (i1-i0, L)
            masked = masked | (outside[None] & ~padding[:, i0:i1, None])[:, None]
        scores = np.where(masked, np.float32(-np.inf), scores)
        out[:, :, i0:i1] = np.matmul(softmax(scores), vt)
    return np.ascontiguousarray(out.transpose(0, 2, 1, 3))
