"""Weight quantizers for the ternary types TQ1_0 / TQ2_0 and for MXFP4.

Same contract as ``quantize_basic``: float32 blocks (n_blocks, block_size) -> uint8 blocks
(n_blocks, type_size), the inverse of ``dequant_ternary`` / ``dequant_tables.dequantize_row_mxfp4``,
bit for bit what ggml's ``quantize_row_{tq1_0,tq2_0,mxfp4}_ref`` write (llama-quantize uses
them with or without an importance matrix: none of the three reads one).

* TQ1_0 / TQ2_0: d = the block's max |x| (not divided by anything: the trits are -1, 0, 1),
  each trit ``lroundf(x / d) + 1`` (half away from zero, computed exactly in float64 from the
  float32 product ``x * (1/d)``). TQ2_0 stores it in 2 bits; TQ1_0 packs five trits (four in
  ``qh``) as a base-3 number q, the first trit most significant, stored as ceil(q * 256 / 243)
  so that the decoder's ``(uint8)(b * 3^k) * 3 >> 8`` recovers digit k.
* MXFP4: e = floor(log2(max |x|)) - 2 + 127, the largest scale 2^(e - 127) whose top value 6
  reaches the block's max (e = 0 for an all-zero block); each element the nearest of the 16
  e2m1 values times ``2^(e - 128)`` (the table is doubled), the first one on a tie.
"""

from __future__ import annotations

import numba
import numpy as np

from localinfer.formats.dequant_tables import KVALUES_MXFP4, e8m0_to_fp32_half
from localinfer.formats.dequant_ternary import QK_K, TQ1_0_TYPE_SIZE, TQ2_0_TYPE_SIZE

_F32 = np.float32


def _f16_bytes(v: np.ndarray) -> np.ndarray:
    return v.astype("<f2").view(np.uint8).reshape(-1, 2)


def _trits(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n, 256) -> trits 0..2 (n, 256) uint8 and d = max |x| (n,) float32."""
    d = np.abs(x).max(axis=1)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, _F32(1) / d, _F32(0)).astype(np.float32)
    v = (x * inv[:, None]).astype(np.float64)  # the float32 product, rounded below without error
    r = np.copysign(np.floor(np.abs(v) + 0.5), v)  # lroundf: half away from zero
    return (r + 1).astype(np.uint8), d


def _base3_ceil(t: np.ndarray, extra_shift: bool = False) -> np.ndarray:
    """(n, k, w) trits -> (n, w) bytes: digit 0 most significant, then ceil(q * 256 / 243)."""
    q = np.zeros(t.shape[::2], np.uint16)
    for k in range(t.shape[1]):
        q = q * 3 + t[:, k, :]
    if extra_shift:  # four trits: the first brought to the top of a five-trit number
        q = q * 3
    return ((q * 256 + 242) // 243).astype(np.uint8)


def quantize_row_tq1_0(x: np.ndarray) -> np.ndarray:
    """block_tq1_0 { uint8_t qs[48]; uint8_t qh[4]; ggml_half d; }: qs[m] holds elements m + 32k
    (k < 5), qs[32 + m] elements 160 + m + 16k, qh[j] elements 240 + j + 4k (k < 4)."""
    n = x.shape[0]
    t, d = _trits(x)
    out = np.empty((n, TQ1_0_TYPE_SIZE), np.uint8)
    out[:, :32] = _base3_ceil(t[:, :160].reshape(n, 5, 32))
    out[:, 32:48] = _base3_ceil(t[:, 160:240].reshape(n, 5, 16))
    out[:, 48:52] = _base3_ceil(t[:, 240:].reshape(n, 4, 4), extra_shift=True)
    out[:, 52:54] = _f16_bytes(d)
    return out


def quantize_row_tq2_0(x: np.ndarray) -> np.ndarray:
    """block_tq2_0 { uint8_t qs[64]; ggml_half d; }: bits 2l..2l+1 of qs[32c + m] hold element
    128c + 32l + m."""
    n = x.shape[0]
    t, d = _trits(x)
    t = t.reshape(n, 2, 4, 32)  # (block, c, l, m)
    qs = (t << (2 * np.arange(4, dtype=np.uint8))[None, None, :, None]).sum(axis=2, dtype=np.uint8)
    out = np.empty((n, TQ2_0_TYPE_SIZE), np.uint8)
    out[:, :64] = qs.reshape(n, 64)
    out[:, 64:66] = _f16_bytes(d)
    return out


assert QK_K == 256  # the layouts above are for 256-element blocks

_KVALUES_MXFP4_F32 = KVALUES_MXFP4.astype(np.float32)


def _e8m0_exponent(amax: np.ndarray) -> np.ndarray:
    """ggml's (uint8_t)(floorf(log2f(amax)) - 2 + 127), 0 for amax == 0. log2 is taken in float64
    and rounded to float32, as a correctly rounded log2f gives it (it matters only for a max within
    one float32 ulp of a power of two). A max below 2^-125 wraps as the x86 conversion does."""
    with np.errstate(divide="ignore"):
        lg = np.floor(np.log2(amax.astype(np.float64)).astype(np.float32))
    e = np.where(amax > 0, lg, _F32(-125)).astype(np.int64) + 125
    return (e & 0xFF).astype(np.uint8)


@numba.njit(cache=True, nogil=True)
def _best_indices_mxfp4(x: np.ndarray, d: np.ndarray, kvalues: np.ndarray, out: np.ndarray) -> None:
    """ggml's best_index_mxfp4 for every element: |kvalue * d - x| in float32, the first of equal
    errors (strict <). A loop, not a (n, 32, 16) numpy array of errors: ~10x faster, same arithmetic."""
    for b in range(x.shape[0]):
        db = d[b]
        for j in range(x.shape[1]):
            v = x[b, j]
            best, best_err = 0, abs(kvalues[0] * db - v)
            for i in range(1, 16):
                err = abs(kvalues[i] * db - v)
                if err < best_err:
                    best, best_err = i, err
            out[b, j] = best


def quantize_row_mxfp4(x: np.ndarray) -> np.ndarray:
    """block_mxfp4 { uint8_t e; uint8_t qs[16]; }: element j in the low nibble of qs[j], j + 16 in
    the high one (Q4_0's order)."""
    n = x.shape[0]
    e = _e8m0_exponent(np.abs(x).max(axis=1))
    d = e8m0_to_fp32_half(e)  # (n,) float32
    idx = np.empty(x.shape, np.uint8)
    _best_indices_mxfp4(np.ascontiguousarray(x, np.float32), np.ascontiguousarray(d), _KVALUES_MXFP4_F32, idx)
    out = np.empty((n, 17), np.uint8)
    out[:, 0] = e
    out[:, 1:] = idx[:, :16] | (idx[:, 16:] << 4)
    return out
