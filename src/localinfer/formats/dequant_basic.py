"""Reference dequantizers for the float types and the 32-element ggml quants.

Every function here has the registry's signature: raw blocks as a uint8 array
of shape (n_blocks, type_size) -> float32 array of shape (n_blocks, block_size).
They are the readable numpy counterparts of ggml's ``dequantize_row_*``
(ggml/src/ggml-quants.c) and are checked bit for bit against
``gguf.quants.dequantize``, so the order of the float operations follows ggml:
an fp16 scale is first widened to f32, then ``q * d`` (``+ m`` afterwards for
the ``_1`` types). Nothing is fused, so no step is rounded differently.

Layouts are little-endian, as in a GGUF file; ``ggml_half`` is IEEE fp16.
"""

from __future__ import annotations

import numpy as np

# Elements per block of the "legacy" quants (ggml-common.h: QK4_0, QK4_1, QK5_0, QK5_1, QK8_0).
QK = 32


def _f16_field(blocks: np.ndarray, offset: int) -> np.ndarray:
    """The ggml_half at byte `offset` of every block, widened to f32: shape (n_blocks, 1)."""
    return blocks[:, offset : offset + 2].view(np.float16).astype(np.float32)


def _unpack_nibbles(qs: np.ndarray) -> np.ndarray:
    """(..., k) bytes -> (..., 2k) values 0..15: all low nibbles first, then all high nibbles.

    That is ggml's order for 4-bit quants: byte j holds element j (low nibble)
    and element j + k (high nibble).
    """
    return np.concatenate([qs & np.uint8(0x0F), qs >> np.uint8(4)], axis=-1)


def _unpack_high_bits(qh: np.ndarray) -> np.ndarray:
    """(n_blocks, 4) bytes of a little-endian uint32 -> (n_blocks, 32) bits, bit j at index j."""
    return np.unpackbits(qh, axis=-1, bitorder="little")


# --- float types: one element per "block" --------------------------------------------

# F32: float value[1]; 4 bytes, returned unchanged.
F32_BLOCK_SIZE, F32_TYPE_SIZE = 1, 4


def dequantize_row_f32(blocks: np.ndarray) -> np.ndarray:
    return blocks.view(np.float32).copy()


# F16: ggml_half value[1]; 2 bytes, widened exactly (ggml_fp16_to_fp32).
F16_BLOCK_SIZE, F16_TYPE_SIZE = 1, 2


def dequantize_row_f16(blocks: np.ndarray) -> np.ndarray:
    return blocks.view(np.float16).astype(np.float32)


# BF16: ggml_bf16_t value[1]; 2 bytes, the top half of an f32 (ggml_bf16_to_fp32: bits << 16).
BF16_BLOCK_SIZE, BF16_TYPE_SIZE = 1, 2


def dequantize_row_bf16(blocks: np.ndarray) -> np.ndarray:
    return (blocks.view(np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


# --- 32-element quants ---------------------------------------------------------------

# block_q4_0 { ggml_half d; uint8_t qs[16]; } = 18 bytes; y = (nibble - 8) * d.
Q4_0_BLOCK_SIZE, Q4_0_TYPE_SIZE = QK, 2 + QK // 2


def dequantize_row_q4_0(blocks: np.ndarray) -> np.ndarray:
    d = _f16_field(blocks, 0)
    q = _unpack_nibbles(blocks[:, 2:]).astype(np.int8) - np.int8(8)
    return q.astype(np.float32) * d


# block_q4_1 { ggml_half d; ggml_half m; uint8_t qs[16]; } = 20 bytes; y = nibble * d + m.
Q4_1_BLOCK_SIZE, Q4_1_TYPE_SIZE = QK, 2 + 2 + QK // 2


def dequantize_row_q4_1(blocks: np.ndarray) -> np.ndarray:
    d = _f16_field(blocks, 0)
    m = _f16_field(blocks, 2)
    q = _unpack_nibbles(blocks[:, 4:]).astype(np.float32)
    return q * d + m


# block_q5_0 { ggml_half d; uint8_t qh[4]; uint8_t qs[16]; } = 22 bytes;
# 5-bit q = nibble | (bit j of qh) << 4; y = (q - 16) * d.
Q5_0_BLOCK_SIZE, Q5_0_TYPE_SIZE = QK, 2 + 4 + QK // 2


def dequantize_row_q5_0(blocks: np.ndarray) -> np.ndarray:
    d = _f16_field(blocks, 0)
    high = _unpack_high_bits(blocks[:, 2:6])
    q = (_unpack_nibbles(blocks[:, 6:]) | (high << np.uint8(4))).astype(np.int8) - np.int8(16)
    return q.astype(np.float32) * d


# block_q5_1 { ggml_half d; ggml_half m; uint8_t qh[4]; uint8_t qs[16]; } = 24 bytes;
# 5-bit q = nibble | (bit j of qh) << 4; y = q * d + m.
Q5_1_BLOCK_SIZE, Q5_1_TYPE_SIZE = QK, 2 + 2 + 4 + QK // 2


def dequantize_row_q5_1(blocks: np.ndarray) -> np.ndarray:
    d = _f16_field(blocks, 0)
    m = _f16_field(blocks, 2)
    high = _unpack_high_bits(blocks[:, 4:8])
    q = (_unpack_nibbles(blocks[:, 8:]) | (high << np.uint8(4))).astype(np.float32)
    return q * d + m


# block_q8_0 { ggml_half d; int8_t qs[32]; } = 34 bytes; y = q * d.
Q8_0_BLOCK_SIZE, Q8_0_TYPE_SIZE = QK, 2 + QK


def dequantize_row_q8_0(blocks: np.ndarray) -> np.ndarray:
    d = _f16_field(blocks, 0)
    return blocks[:, 2:].view(np.int8).astype(np.float32) * d
