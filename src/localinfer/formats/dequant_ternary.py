"""Reference dequantizers for the ternary types TQ1_0 and TQ2_0 (BitNet b1.58 weights).

Every element is d * (t - 1) with a trit t in {0, 1, 2} and one fp16 d per 256 elements.
Same signature as the other dequantizers, checked bit for bit against ``gguf.quants.dequantize``.

- TQ2_0 { uint8_t qs[64]; ggml_half d; } = 66 bytes: t = (qs[32c + m] >> 2l) & 3 is element
  128c + 32l + m (a 2-bit code of 3 would be t = 3: no writer makes it, but it decodes as 2d).
- TQ1_0 { uint8_t qs[48]; uint8_t qh[4]; ggml_half d; } = 54 bytes: five trits per byte as a
  base-3 fraction, t_k = ((uint8)(b * 3^k) * 3) >> 8, the k-th digit brought to the top by the
  wrapping multiply. qs[0:32] holds elements 32k + m, qs[32:48] 160 + 16k + m, qh (four trits
  each) 240 + 4k + m.
"""

from __future__ import annotations

import numpy as np

QK_K = 256
_POW3 = np.array([1, 3, 9, 27, 81], dtype=np.uint8)

TQ1_0_BLOCK_SIZE, TQ1_0_TYPE_SIZE = QK_K, (QK_K - 4 * QK_K // 64) // 5 + QK_K // 64 + 2
TQ2_0_BLOCK_SIZE, TQ2_0_TYPE_SIZE = QK_K, QK_K // 4 + 2


def _digits(b: np.ndarray, n_digits: int) -> np.ndarray:
    """(n_blocks, w) bytes -> (n_blocks, n_digits * w) trits, digit k of byte m at k * w + m."""
    shifted = b[:, None, :] * _POW3[:n_digits, None]   # uint8: wraps, as in C
    return ((shifted.astype(np.uint16) * 3) >> 8).reshape(b.shape[0], -1)


def dequantize_row_tq1_0(blocks: np.ndarray) -> np.ndarray:
    d = blocks[:, 52:54].view(np.float16).astype(np.float32)
    t = np.concatenate([_digits(blocks[:, :32], 5), _digits(blocks[:, 32:48], 5), _digits(blocks[:, 48:52], 4)],
                       axis=1)
    return d * (t.astype(np.float32) - np.float32(1))


def dequantize_row_tq2_0(blocks: np.ndarray) -> np.ndarray:
    d = blocks[:, 64:66].view(np.float16).astype(np.float32)
    qs = blocks[:, :64].reshape(-1, 2, 1, 32)
    t = (qs >> (2 * np.arange(4, dtype=np.uint8))[None, None, :, None]) & np.uint8(3)
    return d * (t.reshape(-1, QK_K).astype(np.float32) - np.float32(1))
