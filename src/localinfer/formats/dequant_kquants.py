"""Reference dequantizers for the k-quants (Q2_K .. Q6_K): 256-element super-blocks.

Same contract as ``dequant_basic``: uint8 (n_blocks, type_size) -> float32
(n_blocks, 256), bit-identical to ``gguf.quants.dequantize``. Each function
mirrors ggml's ``dequantize_row_*`` (ggml/src/ggml-quants.c): the fp16 super-
block scale ``d`` (and ``dmin``) is widened to f32, multiplied by the small
integer sub-block scale into an f32 ``dl`` (and ``ml``), and only then applied
to the quant: ``y = dl * q`` or ``y = dl * q - ml``. Computing ``d * (sc * q)``
instead would round differently.

A super-block is split into 8 sub-blocks of 32 (Q4_K, Q5_K) or 16 sub-blocks
of 16 (Q2_K, Q3_K, Q6_K); the arrays below are shaped (n_blocks, sub-blocks,
elements per sub-block) so that one scale broadcasts over one sub-block.
"""

from __future__ import annotations

import numpy as np

QK_K = 256  # elements per super-block (ggml-common.h)
K_SCALE_SIZE = 12  # bytes of packed 6-bit scales and mins in Q4_K / Q5_K

# Shift amounts that pick the four 2-bit fields out of a byte, as a broadcastable column.
_SHIFTS_2BIT = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(4, 1)
# Shift amounts that pick the eight single bits out of a byte.
_SHIFTS_1BIT = np.arange(8, dtype=np.uint8).reshape(8, 1)


def _f16_field(blocks: np.ndarray, offset: int) -> np.ndarray:
    """The ggml_half at byte `offset` of every block, widened to f32: shape (n_blocks, 1, 1)."""
    return blocks[:, offset : offset + 2].view(np.float16).astype(np.float32)[:, :, None]


def _unpack_2bit(qs: np.ndarray) -> np.ndarray:
    """Q2_K / Q3_K low bits: (n, 64) bytes -> (n, 256) values 0..3.

    ggml walks the block in two halves of 128; in half h, element 32*j + l
    (j = 0..3, l = 0..31) is bits 2j..2j+1 of byte qs[32*h + l].
    """
    n = qs.shape[0]
    q = (qs.reshape(n, 2, 1, 32) >> _SHIFTS_2BIT) & np.uint8(3)  # (n, half, j, l)
    return q.reshape(n, QK_K)


def _unpack_hmask(hmask: np.ndarray) -> np.ndarray:
    """Q3_K / Q5_K high bits: (n, 32) bytes -> (n, 256) bits.

    Element 32*s + l (s = 0..7, l = 0..31) is bit s of byte hmask[l].
    """
    n = hmask.shape[0]
    return ((hmask.reshape(n, 1, 32) >> _SHIFTS_1BIT) & np.uint8(1)).reshape(n, QK_K)


def _unpack_nibbles_by_32(qs: np.ndarray) -> np.ndarray:
    """Q4_K / Q5_K low bits: (n, 128) bytes -> (n, 256) values 0..15.

    Each run of 32 bytes holds 64 elements: the low nibbles, then the high nibbles.
    """
    n = qs.shape[0]
    q = qs.reshape(n, 4, 32)
    return np.concatenate([q & np.uint8(0x0F), q >> np.uint8(4)], axis=-1).reshape(n, QK_K)


def get_scale_min_k4(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unpack Q4_K / Q5_K's 12 bytes into 8 six-bit scales and 8 six-bit mins, (n, 8) each.

    ggml's get_scale_min_k4: for j < 4, sc = q[j] & 63 and m = q[j+4] & 63;
    for j >= 4 the low 4 bits come from q[j+4] (sc: low nibble, m: high nibble)
    and the top 2 bits from the spare top bits of q[j-4] (sc) and q[j] (m).
    """
    lo_sc, lo_m, packed = scales[:, 0:4], scales[:, 4:8], scales[:, 8:12]
    hi_sc = (packed & np.uint8(0x0F)) | ((lo_sc >> np.uint8(6)) << np.uint8(4))
    hi_m = (packed >> np.uint8(4)) | ((lo_m >> np.uint8(6)) << np.uint8(4))
    sc = np.concatenate([lo_sc & np.uint8(63), hi_sc], axis=-1)
    m = np.concatenate([lo_m & np.uint8(63), hi_m], axis=-1)
    return sc, m


# block_q2_K { uint8_t scales[16]; uint8_t qs[64]; ggml_half d; ggml_half dmin; } = 84 bytes;
# 16 sub-blocks of 16, scales[i] = min << 4 | scale (4 bits each);
# y = (d * scale) * q - (dmin * min), q 2-bit.  ggml: dequantize_row_q2_K.
Q2_K_BLOCK_SIZE, Q2_K_TYPE_SIZE = QK_K, QK_K // 16 + QK_K // 4 + 2 + 2


def dequantize_row_q2_K(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    scales = blocks[:, 0:16]
    d = _f16_field(blocks, 80)
    dmin = _f16_field(blocks, 82)
    dl = d * (scales & np.uint8(0x0F)).astype(np.float32)[:, :, None]  # (n, 16, 1)
    ml = dmin * (scales >> np.uint8(4)).astype(np.float32)[:, :, None]  # (n, 16, 1)
    q = _unpack_2bit(blocks[:, 16:80]).astype(np.float32).reshape(n, 16, 16)
    return (dl * q - ml).reshape(n, QK_K)


# block_q3_K { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; ggml_half d; } = 110 bytes;
# 16 sub-blocks of 16 with 6-bit scales stored +32; q = (2 low bits) - (hmask bit ? 0 : 4);
# y = (d * (scale - 32)) * q.  ggml: dequantize_row_q3_K.
Q3_K_BLOCK_SIZE, Q3_K_TYPE_SIZE = QK_K, QK_K // 8 + QK_K // 4 + 12 + 2


def _unpack_q3_K_scales(scales: np.ndarray) -> np.ndarray:
    """(n, 12) bytes -> (n, 16) signed scales.

    Scale i's low 4 bits are the low nibble of scales[i] (i < 8) or the high
    nibble of scales[i - 8]; its top 2 bits are bits 2*(i // 4).. of scales[8 + i % 4].
    (ggml unpacks this with the kmask1/kmask2 uint32 tricks.)
    """
    n = scales.shape[0]
    low = np.concatenate([scales[:, 0:8] & np.uint8(0x0F), scales[:, 0:8] >> np.uint8(4)], axis=-1)
    high = ((scales[:, 8:12].reshape(n, 1, 4) >> _SHIFTS_2BIT) & np.uint8(3)).reshape(n, 16)
    return (low | (high << np.uint8(4))).astype(np.int8) - np.int8(32)


def dequantize_row_q3_K(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    hmask, qs, scales = blocks[:, 0:32], blocks[:, 32:96], blocks[:, 96:108]
    d = _f16_field(blocks, 108)
    dl = d * _unpack_q3_K_scales(scales).astype(np.float32)[:, :, None]  # (n, 16, 1)
    # An unset hmask bit subtracts 4 (ggml: `(hm[l] & m) ? 0 : 4`).
    minus4 = (_unpack_hmask(hmask) ^ np.uint8(1)) << np.uint8(2)
    q = _unpack_2bit(qs).astype(np.int8) - minus4.astype(np.int8)
    return (dl * q.astype(np.float32).reshape(n, 16, 16)).reshape(n, QK_K)


# block_q4_K { ggml_half d; ggml_half dmin; uint8_t scales[12]; uint8_t qs[128]; } = 144 bytes;
# 8 sub-blocks of 32 with 6-bit scale and min (get_scale_min_k4);
# y = (d * scale) * q - (dmin * min), q 4-bit.  ggml: dequantize_row_q4_K.
Q4_K_BLOCK_SIZE, Q4_K_TYPE_SIZE = QK_K, 2 + 2 + K_SCALE_SIZE + QK_K // 2


def dequantize_row_q4_K(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    d = _f16_field(blocks, 0)
    dmin = _f16_field(blocks, 2)
    sc, m = get_scale_min_k4(blocks[:, 4:16])
    dl = d * sc.astype(np.float32)[:, :, None]  # (n, 8, 1)
    ml = dmin * m.astype(np.float32)[:, :, None]  # (n, 8, 1)
    q = _unpack_nibbles_by_32(blocks[:, 16:144]).astype(np.float32).reshape(n, 8, 32)
    return (dl * q - ml).reshape(n, QK_K)


# block_q5_K { ggml_half d; ggml_half dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; }
# = 176 bytes; as Q4_K with a 5th bit from qh (bit s of qh[l] for sub-block s);
# y = (d * scale) * q - (dmin * min), q 5-bit.  ggml: dequantize_row_q5_K.
Q5_K_BLOCK_SIZE, Q5_K_TYPE_SIZE = QK_K, 2 + 2 + K_SCALE_SIZE + QK_K // 8 + QK_K // 2


def dequantize_row_q5_K(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    d = _f16_field(blocks, 0)
    dmin = _f16_field(blocks, 2)
    sc, m = get_scale_min_k4(blocks[:, 4:16])
    dl = d * sc.astype(np.float32)[:, :, None]  # (n, 8, 1)
    ml = dmin * m.astype(np.float32)[:, :, None]  # (n, 8, 1)
    q = _unpack_nibbles_by_32(blocks[:, 48:176]) | (_unpack_hmask(blocks[:, 16:48]) << np.uint8(4))
    return (dl * q.astype(np.float32).reshape(n, 8, 32) - ml).reshape(n, QK_K)


# block_q6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; ggml_half d; } = 210 bytes;
# 16 sub-blocks of 16 with signed 8-bit scales; q = (4 low bits | 2 high bits << 4) - 32;
# y = (d * scale) * q.  ggml: dequantize_row_q6_K.
Q6_K_BLOCK_SIZE, Q6_K_TYPE_SIZE = QK_K, QK_K // 2 + QK_K // 4 + QK_K // 16 + 2


def _unpack_q6_K(ql: np.ndarray, qh: np.ndarray) -> np.ndarray:
    """(n, 128) low bytes and (n, 64) high bytes -> (n, 256) signed 6-bit values.

    ggml walks two halves of 128 elements; in half h, quarter k (32 elements,
    l = 0..31) takes its low 4 bits from ql[64h + 32*(k % 2) + l] (low nibble
    for k < 2, high nibble for k >= 2) and its top 2 bits from bits 2k..2k+1
    of qh[32h + l].
    """
    n = ql.shape[0]
    ql = ql.reshape(n, 2, 1, 2, 32)  # (n, half, -, k % 2, l)
    low = np.concatenate([ql & np.uint8(0x0F), ql >> np.uint8(4)], axis=2).reshape(n, 2, 4, 32)
    high = (qh.reshape(n, 2, 1, 32) >> _SHIFTS_2BIT) & np.uint8(3)  # (n, half, k, l)
    q = (low | (high << np.uint8(4))).astype(np.int8) - np.int8(32)
    return q.reshape(n, QK_K)


def dequantize_row_q6_K(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    scales = blocks[:, 192:208].view(np.int8)
    d = _f16_field(blocks, 208)
    dl = d * scales.astype(np.float32)[:, :, None]  # (n, 16, 1)
    q = _unpack_q6_K(blocks[:, 0:128], blocks[:, 128:192]).astype(np.float32).reshape(n, 16, 16)
    return (dl * q).reshape(n, QK_K)
