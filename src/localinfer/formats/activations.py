"""Reference quantizers for activations: float32 rows -> ggml's Q8_0, Q8_1, Q8_K (and F16, BF16, F32).

The numpy oracle for the C kernels' activation quantization (csrc/quantize_*.c),
which must match these bit for bit. They follow ggml's reference functions
(``quantize_row_q8_0_ref``, ``_q8_1_ref``, ``_q8_K_ref`` in ggml/src/ggml-quants.c):

- Q8_0 / Q8_1: per 32 values d = amax / 127 (f32), q = roundf(x * (1/d)) -- rounding
  half away from zero -- and d stored as fp16 (round to nearest even). Q8_1 also
  stores s = fp16(clamp(sum(q) * d, +-65504)).
- Q8_K: per 256 values, max = the value of largest magnitude (the first one),
  iscale = -127 / max, q = min(127, nearest_int(iscale * x)) -- rounding half to
  even through the f32 adder -- d = 1 / iscale (f32), and bsums = the sum of each
  16 quants. An all-zero block is all zeros (ggml leaves its bsums unset).

Every intermediate is float32 as in C, so the results are exact, not approximate.
``VEC_DOT_TYPE`` is ggml's pairing of weight types with activation types.
"""

from __future__ import annotations

import numpy as np
from .ggml import GGMLType as T

QK8 = 32
QK_K = 256

# The activation format each weight type's dot product takes (ggml's type_traits_cpu vec_dot_type).
VEC_DOT_TYPE: dict[T, T] = {
    T.F32: T.F32, T.F16: T.F16, T.BF16: T.BF16,
    T.Q4_0: T.Q8_0, T.Q5_0: T.Q8_0, T.Q8_0: T.Q8_0,
    T.Q4_1: T.Q8_1, T.Q5_1: T.Q8_1,
    T.Q2_K: T.Q8_K, T.Q3_K: T.Q8_K, T.Q4_K: T.Q8_K, T.Q5_K: T.Q8_K, T.Q6_K: T.Q8_K,
    T.IQ4_NL: T.Q8_0, T.IQ4_XS: T.Q8_K, T.MXFP4: T.Q8_0, T.TQ1_0: T.Q8_K, T.TQ2_0: T.Q8_K,
    T.IQ2_XXS: T.Q8_K, T.IQ2_XS: T.Q8_K, T.IQ2_S: T.Q8_K, T.IQ3_XXS: T.Q8_K, T.IQ3_S: T.Q8_K,
    T.IQ1_S: T.Q8_K, T.IQ1_M: T.Q8_K,
}

# (block size, bytes per block)
SIZES: dict[T, tuple[int, int]] = {
    T.Q8_0: (QK8, 2 + QK8), T.Q8_1: (QK8, 4 + QK8), T.Q8_K: (QK_K, 4 + QK_K + 2 * QK_K // 16),
    T.F32: (1, 4), T.F16: (1, 2), T.BF16: (1, 2),
}


def _round_half_away(v: np.ndarray) -> np.ndarray:
    """C's roundf on float32 values, computed exactly in float64 (v + 0.5 is exact there)."""
    v = v.astype(np.float64)
    return np.trunc(v + np.copysign(0.5, v))


def _blocks(x: np.ndarray, size: int) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype != np.float32:
        raise TypeError(f"activations must be float32, got {x.dtype}")
    if x.shape[-1] % size:
        raise ValueError(f"row length {x.shape[-1]} is not a multiple of the block size {size}")
    return x.reshape(-1, size)


def _q8_scale(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """d = amax / 127, id = 1 / d (0 for an all-zero block), q = roundf(x * id); all f32."""
    amax = np.abs(blocks).max(axis=1, keepdims=True)
    d = amax / np.float32(127)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    q = _round_half_away(blocks * inv).astype(np.int8)
    return d, inv, q


def quantize_q8_0(x: np.ndarray) -> np.ndarray:
    """float32 (..., k) -> uint8 (..., k/32*34): block_q8_0 { fp16 d; int8 qs[32] }."""
    blocks = _blocks(x, QK8)
    d, _, q = _q8_scale(blocks)
    out = np.concatenate([d.astype(np.float16).view(np.uint8), q.view(np.uint8)], axis=1)
    return out.reshape(*np.shape(x)[:-1], -1)


def quantize_q8_1(x: np.ndarray) -> np.ndarray:
    """float32 (..., k) -> uint8 (..., k/32*36): block_q8_1 { fp16 d; fp16 s; int8 qs[32] }."""
    blocks = _blocks(x, QK8)
    d, _, q = _q8_scale(blocks)
    s = q.astype(np.int32).sum(axis=1, keepdims=True).astype(np.float32) * d
    s = np.clip(s, np.float32(-65504), np.float32(65504))
    out = np.concatenate(
        [d.astype(np.float16).view(np.uint8), s.astype(np.float16).view(np.uint8), q.view(np.uint8)], axis=1
    )
    return out.reshape(*np.shape(x)[:-1], -1)


def quantize_q8_K(x: np.ndarray) -> np.ndarray:
    """float32 (..., k) -> uint8 (..., k/256*292): block_q8_K { f32 d; int8 qs[256]; int16 bsums[16] }."""
    blocks = _blocks(x, QK_K)
    n = blocks.shape[0]
    first_max = np.abs(blocks).argmax(axis=1)  # the first value of largest magnitude
    vmax = blocks[np.arange(n), first_max][:, None]
    zero = vmax == 0
    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = np.where(zero, np.float32(0), np.float32(-127) / vmax).astype(np.float32)
        d = np.where(zero, np.float32(0), np.float32(1) / iscale).astype(np.float32)
    q = np.minimum(np.rint(iscale * blocks), 127).astype(np.int8)  # rint: half to even, as nearest_int
    q[zero[:, 0]] = 0
    bsums = q.reshape(n, QK_K // 16, 16).astype(np.int16).sum(axis=2, dtype=np.int16)
    out = np.concatenate([d.view(np.uint8), q.view(np.uint8), bsums.view(np.uint8)], axis=1)
    return out.reshape(*np.shape(x)[:-1], -1)


def quantize_f32(x: np.ndarray) -> np.ndarray:
    b = _blocks(x, 1)
    return b.reshape(np.shape(x)).view(np.uint8).copy()


def quantize_f16(x: np.ndarray) -> np.ndarray:
    b = _blocks(x, 1)
    return b.astype(np.float16).reshape(np.shape(x)).view(np.uint8)


def quantize_bf16(x: np.ndarray) -> np.ndarray:
    """ggml_compute_fp32_to_bf16: round to nearest even; NaN made quiet."""
    u = _blocks(x, 1).reshape(np.shape(x)).view(np.uint32)
    rounded = ((u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16))
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    bits = np.where(nan, (u >> np.uint32(16)) | np.uint32(64), rounded).astype(np.uint16)
    return bits.view(np.uint8)


QUANTIZERS = {
    T.Q8_0: quantize_q8_0, T.Q8_1: quantize_q8_1, T.Q8_K: quantize_q8_K,
    T.F32: quantize_f32, T.F16: quantize_f16, T.BF16: quantize_bf16,
}


def quantize(x: np.ndarray, act_type: T) -> np.ndarray:
    """float32 (..., k) -> uint8 (..., row_bytes) in `act_type`."""
    try:
        fn = QUANTIZERS[T(act_type)]
    except (KeyError, ValueError):
        raise ValueError(f"{act_type!r} is not an activation type; use one of {[t.name for t in QUANTIZERS]}") from None
    return fn(x)


def dequantize(raw: np.ndarray, act_type: T, k: int) -> np.ndarray:
    """Raw activation rows (m, row_bytes) -> their exact values as float64 (m, k): q * d."""
    act_type = T(act_type)
    block, size = SIZES[act_type]
    raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1, k // block * size)
    m = raw.shape[0]
    b = raw.reshape(m * (k // block), size)
    if act_type == T.Q8_0:
        d, q = b[:, 0:2].view(np.float16).astype(np.float64), b[:, 2:].view(np.int8)
    elif act_type == T.Q8_1:
        d, q = b[:, 0:2].view(np.float16).astype(np.float64), b[:, 4:].view(np.int8)
    elif act_type == T.Q8_K:
        d, q = b[:, 0:4].view(np.float32).astype(np.float64), b[:, 4 : 4 + QK_K].view(np.int8)
    elif act_type == T.F32:
        return b.view(np.float32).astype(np.float64).reshape(m, k)
    elif act_type == T.F16:
        return b.view(np.float16).astype(np.float64).reshape(m, k)
    else:  # BF16
        return (b.view(np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64).reshape(m, k)
    return (q.astype(np.float64) * d).reshape(m, k)
