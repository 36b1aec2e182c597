"""Weight quantizers for the float types and the 32-element ("legacy") quants.

Every function here has the same contract: float32 blocks of shape
(n_blocks, block_size) -> raw uint8 blocks of shape (n_blocks, type_size), the
inverse of the matching ``dequant_basic.dequantize_row_*``.

They reproduce ggml's reference quantizers (``quantize_row_*_ref`` in
ggml/src/ggml-quants.c, which is what ``llama-quantize`` runs without an
importance matrix) bit for bit. The details that matter:

* every step is one float32 operation, in ggml's order (``x * id`` then
  ``+ 8.5``; never a fused or float64 expression);
* ``id = d ? 1/d : 0`` uses the float32 ``d``, not the fp16 one that is stored;
* the block's max / min is the *first* element that reaches it (ggml's strict
  ``<`` / ``>`` scan), which decides the sign of ``d`` and of a zero minimum;
* Q4_0/Q4_1/Q5_0/Q5_1 round by truncating ``v + 0.5`` (``(int8_t)`` cast),
  Q8_0 by ``roundf`` (half away from zero, unlike numpy's half to even);
* fp16 fields are rounded to nearest even (``GGML_FP32_TO_FP16``).
"""

from __future__ import annotations

import numpy as np

from .dequant_basic import QK

_F32 = np.float32


def _f16_bytes(v: np.ndarray) -> np.ndarray:
    """float32 (n,) -> (n, 2) bytes of the nearest fp16 (ties to even), little-endian."""
    return v.astype("<f2").view(np.uint8).reshape(-1, 2)


def _first_max_abs(x: np.ndarray) -> np.ndarray:
    """The signed value with the largest magnitude in each block, the first one on ties.

    ggml starts from ``amax = 0, max = 0`` and replaces only on ``amax < |v|``,
    so an all-zero block (even of -0.0) gives +0.0.
    """
    idx = np.argmax(np.abs(x), axis=1)  # argmax: the first index on ties, like the strict `<`
    m = np.take_along_axis(x, idx[:, None], axis=1)[:, 0]
    return np.where(m == 0, _F32(0), m).astype(np.float32)


def _first_min_max(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each block's min and max as the first element reaching them (keeps the sign of a zero)."""
    mn = np.take_along_axis(x, np.argmin(x, axis=1)[:, None], axis=1)[:, 0]
    mx = np.take_along_axis(x, np.argmax(x, axis=1)[:, None], axis=1)[:, 0]
    return mn, mx


def _inverse(d: np.ndarray) -> np.ndarray:
    """ggml's ``id = d ? 1.0f/d : 0.0f`` in float32."""
    with np.errstate(divide="ignore"):
        return np.where(d != 0, _F32(1) / d, _F32(0)).astype(np.float32)


def _pack_nibbles(q: np.ndarray) -> np.ndarray:
    """(n, 32) values 0..15 -> (n, 16) bytes: element j in the low nibble of byte j, j+16 in the high one."""
    q = q.astype(np.uint8)
    return (q[:, : QK // 2] & np.uint8(0x0F)) | ((q[:, QK // 2 :] & np.uint8(0x0F)) << np.uint8(4))


def _pack_high_bits(q: np.ndarray) -> np.ndarray:
    """(n, 32) 5-bit values -> (n, 4) bytes of a little-endian uint32 holding bit 4 of element j at bit j."""
    bits = (q.astype(np.uint8) >> np.uint8(4)) & np.uint8(1)
    return np.packbits(bits, axis=1, bitorder="little")


def _trunc_u8(v: np.ndarray) -> np.ndarray:
    """C's ``(int8_t)v`` / ``(uint8_t)v`` for the small non-negative values the quantizers make."""
    return np.trunc(v).astype(np.int32)


def _roundf(v: np.ndarray) -> np.ndarray:
    """C's ``roundf``: to nearest, halfway cases away from zero (exact: v - trunc(v) is exact)."""
    t = np.trunc(v)
    half = np.abs(v - t) == _F32(0.5)
    return np.where(half, t + np.sign(v), np.rint(v))


# --- float targets ---------------------------------------------------------------------


def quantize_row_f32(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype="<f4").view(np.uint8).reshape(x.shape[0], 4)


def quantize_row_f16(x: np.ndarray) -> np.ndarray:
    # numpy's f32 -> f16 is IEEE round-to-nearest-even, as ggml_fp32_to_fp16_row.
    return np.ascontiguousarray(x, dtype=np.float32).astype("<f2").view(np.uint8).reshape(x.shape[0], 2)


def quantize_row_bf16(x: np.ndarray) -> np.ndarray:
    """ggml_compute_fp32_to_bf16: round to nearest even on the top 16 bits; a NaN stays a quiet NaN."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).reshape(-1)
    rounded = ((u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16))
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    bits = np.where(nan, (u >> np.uint32(16)) | np.uint32(64), rounded).astype("<u2")
    return bits.view(np.uint8).reshape(x.shape[0], 2)


# --- 32-element quants -------------------------------------------------------------------


def quantize_row_q4_0(x: np.ndarray) -> np.ndarray:
    """block_q4_0 { d; qs[16] }: d = max / -8 (max: signed, largest |x|), q = min(15, (int8)(x*id + 8.5))."""
    d = _first_max_abs(x) / _F32(-8)
    q = np.minimum(15, _trunc_u8(x * _inverse(d)[:, None] + _F32(8.5)))
    return np.concatenate([_f16_bytes(d), _pack_nibbles(q)], axis=1)


def quantize_row_q4_1(x: np.ndarray) -> np.ndarray:
    """block_q4_1 { d; m; qs[16] }: d = (max - min) / 15, m = min, q = min(15, (int8)((x - min)*id + 0.5))."""
    mn, mx = _first_min_max(x)
    d = (mx - mn) / _F32(15)
    q = np.minimum(15, _trunc_u8((x - mn[:, None]) * _inverse(d)[:, None] + _F32(0.5)))
    return np.concatenate([_f16_bytes(d), _f16_bytes(mn), _pack_nibbles(q)], axis=1)


def quantize_row_q5_0(x: np.ndarray) -> np.ndarray:
    """block_q5_0 { d; qh[4]; qs[16] }: d = max / -16, q = min(31, (int8)(x*id + 16.5))."""
    d = _first_max_abs(x) / _F32(-16)
    q = np.minimum(31, _trunc_u8(x * _inverse(d)[:, None] + _F32(16.5)))
    return np.concatenate([_f16_bytes(d), _pack_high_bits(q), _pack_nibbles(q)], axis=1)


def quantize_row_q5_1(x: np.ndarray) -> np.ndarray:
    """block_q5_1 { d; m; qh[4]; qs[16] }: d = (max - min) / 31, q = (uint8)((x - min)*id + 0.5), no clamp."""
    mn, mx = _first_min_max(x)
    d = (mx - mn) / _F32(31)
    q = _trunc_u8((x - mn[:, None]) * _inverse(d)[:, None] + _F32(0.5))
    return np.concatenate([_f16_bytes(d), _f16_bytes(mn), _pack_high_bits(q), _pack_nibbles(q)], axis=1)


def quantize_row_q8_0(x: np.ndarray) -> np.ndarray:
    """block_q8_0 { d; qs[32] }: d = amax / 127, q = roundf(x * id)."""
    d = np.max(np.abs(x), axis=1) / _F32(127)
    q = _roundf(x * _inverse(d)[:, None]).astype(np.int8)
    return np.concatenate([_f16_bytes(d), q.view(np.uint8)], axis=1)
