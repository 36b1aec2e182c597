"""Reference dequantizers for the table ("non-linear") 4-bit types: IQ4_NL, IQ4_XS, MXFP4.

Each element is a 4-bit index into a table of 16 int8 values (ggml-common.h's
``kvalues_iq4nl`` and ``kvalues_mxfp4``), times a per-block scale. Same signature
as the other dequantizers (uint8 (n_blocks, type_size) -> float32 (n_blocks,
block_size)), checked bit for bit against ``gguf.quants.dequantize``: the scale is
an f32 (IQ4_XS's ``d * (ls - 32)`` rounded once), then ``scale * value``.
Nibble order is Q4_0's: byte j holds element j (low) and element j + 16 (high).
"""

from __future__ import annotations

import numpy as np

from .dequant_basic import _f16_field, _unpack_nibbles

QK_K = 256

# ggml's kvalues_iq4nl: a non-uniform grid fitted to the distribution of weights.
KVALUES_IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.int8)
# ggml's kvalues_mxfp4: the e2m1 values 0, 0.5, 1, 1.5, 2, 3, 4, 6 (and negatives) doubled, so that
# they are integers; the e8m0 scale is halved to compensate (ggml_e8m0_to_fp32_half).
KVALUES_MXFP4 = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.int8)


# block_iq4_nl { ggml_half d; uint8_t qs[16]; } = 18 bytes; y = d * kvalues_iq4nl[q].
IQ4_NL_BLOCK_SIZE, IQ4_NL_TYPE_SIZE = 32, 2 + 16


def dequantize_row_iq4_nl(blocks: np.ndarray) -> np.ndarray:
    d = _f16_field(blocks, 0)
    return d * KVALUES_IQ4NL[_unpack_nibbles(blocks[:, 2:])].astype(np.float32)


# block_iq4_xs { ggml_half d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; } = 136 bytes:
# 8 sub-blocks of 32; 6-bit ls = nibble s%2 of scales_l[s/2] | (bits 2s, 2s+1 of scales_h) << 4;
# y = (d * (ls - 32)) * kvalues_iq4nl[q], sub-block s in qs[16s : 16s + 16].
IQ4_XS_BLOCK_SIZE, IQ4_XS_TYPE_SIZE = QK_K, 2 + 2 + QK_K // 64 + QK_K // 2


def iq4_xs_scales(blocks: np.ndarray) -> np.ndarray:
    """(n_blocks, 8) int32 sub-block scales ls - 32."""
    low = _unpack_nibbles(blocks[:, 4:8])                        # nibble order: s = 0, 2, 4, 6, 1, 3, 5, 7
    low = low.reshape(-1, 2, 4).transpose(0, 2, 1).reshape(-1, 8)  # -> s = 0..7
    high = blocks[:, 2:4].view(np.uint16).astype(np.int32) >> (2 * np.arange(8, dtype=np.int32))
    return (low.astype(np.int32) | (high & 3) << 4) - 32


def dequantize_row_iq4_xs(blocks: np.ndarray) -> np.ndarray:
    n_blocks = blocks.shape[0]
    dl = _f16_field(blocks, 0) * iq4_xs_scales(blocks).astype(np.float32)   # (n_blocks, 8)
    q = _unpack_nibbles(blocks[:, 8:].reshape(n_blocks, 8, 16))              # (n_blocks, 8, 32)
    return (dl[:, :, None] * KVALUES_IQ4NL[q].astype(np.float32)).reshape(n_blocks, QK_K)


# block_mxfp4 { uint8_t e; uint8_t qs[16]; } = 17 bytes; y = 2^(e - 128) * kvalues_mxfp4[q].
MXFP4_BLOCK_SIZE, MXFP4_TYPE_SIZE = 32, 1 + 16


def e8m0_to_fp32_half(e: np.ndarray) -> np.ndarray:
    """2^(e - 128) as f32 bits: a subnormal for e < 2 (ggml_e8m0_to_fp32_half)."""
    e = e.astype(np.uint32)
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - np.uint32(1)) << np.uint32(23))
    return bits.astype(np.uint32).view(np.float32)


def dequantize_row_mxfp4(blocks: np.ndarray) -> np.ndarray:
    d = e8m0_to_fp32_half(blocks[:, :1])
    with np.errstate(over="ignore"):  # the largest exponents overflow f32 to inf, as in ggml: data, not a fault
        return d * KVALUES_MXFP4[_unpack_nibbles(blocks[:, 1:])].astype(np.float32)
