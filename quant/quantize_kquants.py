"""Weight quantizers for the k-quants (Q2_K .. Q6_K): 256-element super-blocks, numba.

Same contract as ``quantize_basic``: float32 (n_blocks, 256) -> uint8
(n_blocks, type_size), the inverse of ``dequant_kquants.dequantize_row_*``.

These follow ggml's reference quantizers (``quantize_row_q*_K_ref`` in
ggml/src/ggml-quants.c, what ``llama-quantize`` runs without an importance
matrix). Each sub-block's scale (and min) comes from a small search that
minimises a weighted squared (or absolute) error (``kquant_search``).

The sub-block scales are then quantized themselves (6-bit for Q4_K/Q5_K,
6-bit signed for Q3_K, 8-bit for Q6_K, 4-bit for Q2_K) against an fp16
super-block scale, and the quants are recomputed with the scales as stored.

The search loops are sequential per block, so they run compiled with numba,
super-blocks in parallel. Every float operation is float32 in ggml's order
(an int is converted to float32 before it meets a float, as C does), so the
output matches ggml's bytes wherever ggml's build does not reorder float math.
The fp16 fields are rounded inside the kernel (``fp16_round``) because the
stored value feeds the second pass; their bytes are written afterwards by numpy.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from localinfer.formats.dequant_kquants import (QK_K, Q2_K_TYPE_SIZE, Q3_K_TYPE_SIZE, Q4_K_TYPE_SIZE, Q5_K_TYPE_SIZE,
                              Q6_K_TYPE_SIZE)
from .kquant_search import (GROUP_MAX_EPS, f32, fp16_round, make_q3_quants_rmse, make_qkx2_quants,
                            make_qx_quants_rmse1, nearest_int)

_jit = numba.njit(cache=True, nogil=True)


# --- Q4_K / Q5_K: 8 sub-blocks of 32, 6-bit scales and mins ---------------------------------


@_jit
def _scales_mins_k4(x, L, nmax, rmin, nstep, scales, mins):
    """Q4_K/Q5_K first pass: each sub-block's (scale, min) from make_qkx2_quants."""
    weights = np.empty(32, np.float32)
    Laux = np.empty(32, np.int32)
    for j in range(QK_K // 32):
        xs = x[32 * j : 32 * j + 32]
        sum_x2 = f32(0)
        for l in range(32):
            sum_x2 += xs[l] * xs[l]
        av_x = f32(math.sqrt(sum_x2 / f32(32)))
        for l in range(32):
            weights[l] = av_x + abs(xs[l])
        scales[j], mins[j] = make_qkx2_quants(nmax, xs, weights, L[32 * j : 32 * j + 32], Laux,
                                              rmin, f32(0.1), nstep, False)


@_jit
def _pack_scales_k4(scales, mins, out):
    """6-bit (scale, min) pairs into 12 bytes (get_scale_min_k4's layout); returns the fp16-rounded (d, dmin)."""
    max_scale = f32(0)
    max_min = f32(0)
    for j in range(8):
        if scales[j] > max_scale:
            max_scale = scales[j]
        if mins[j] > max_min:
            max_min = mins[j]
    inv_scale = f32(63) / max_scale if max_scale > 0 else f32(0)
    inv_min = f32(63) / max_min if max_min > 0 else f32(0)
    for j in range(8):
        ls = min(63, nearest_int(inv_scale * scales[j]) & 0xFF)
        lm = min(63, nearest_int(inv_min * mins[j]) & 0xFF)
        if j < 4:
            out[j] = ls
            out[j + 4] = lm
        else:
            out[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4)
            out[j - 4] |= (ls >> 4) << 6
            out[j] |= (lm >> 4) << 6
    return fp16_round(max_scale / f32(63)), fp16_round(max_min / f32(63))


@_jit
def _get_scale_min_k4(j, q):
    if j < 4:
        return int(q[j]) & 63, int(q[j + 4]) & 63
    a, b, c = int(q[j + 4]), int(q[j - 4]), int(q[j])
    return (a & 0xF) | ((b >> 6) << 4), (a >> 4) | ((c >> 6) << 4)


@_jit
def _requantize_k4(x, L, nmax, d, dmin, packed):
    """Second pass: quants against the sub-block scales as stored."""
    for j in range(8):
        sc, m = _get_scale_min_k4(j, packed)
        dl = d * f32(sc)
        if dl == 0:
            continue
        dm = dmin * f32(m)
        for ii in range(32):
            L[32 * j + ii] = max(0, min(nmax, nearest_int((x[32 * j + ii] + dm) / dl)))


@_jit
def _block_q4_K(x, ob, ddb):
    # block_q4_K { d; dmin; scales[12]; qs[128] }; ddb gets the fp16-rounded d, dmin
    L = np.zeros(QK_K, np.int32)
    scales = np.empty(8, np.float32)
    mins = np.empty(8, np.float32)
    _scales_mins_k4(x, L, 15, f32(-1.0), 20, scales, mins)
    packed = ob[4:16]
    packed[:] = 0
    d, dmin = _pack_scales_k4(scales, mins, packed)
    ddb[0] = d
    ddb[1] = dmin
    _requantize_k4(x, L, 15, d, dmin, packed)
    _pack_levels_q4_K(L, ob)


@_jit
def _pack_levels_q4_K(L, ob):
    """Q4_K's 4-bit levels into qs (ob[16:144]): 64 elements per 32 bytes, low nibbles then high."""
    for c in range(4):
        for l in range(32):
            ob[16 + 32 * c + l] = L[64 * c + l] | (L[64 * c + 32 + l] << 4)


@numba.njit(cache=True, nogil=True, parallel=True)
def _quantize_q4_K(x, out, dd):
    for b in numba.prange(x.shape[0]):
        _block_q4_K(x[b], out[b], dd[b])


@_jit
def _block_q5_K(x, ob, ddb):
    # block_q5_K { d; dmin; scales[12]; qh[32]; qs[128] }
    L = np.zeros(QK_K, np.int32)
    scales = np.empty(8, np.float32)
    mins = np.empty(8, np.float32)
    _scales_mins_k4(x, L, 31, f32(-0.5), 15, scales, mins)
    packed = ob[4:16]
    packed[:] = 0
    d, dmin = _pack_scales_k4(scales, mins, packed)
    ddb[0] = d
    ddb[1] = dmin
    _requantize_k4(x, L, 31, d, dmin, packed)
    _pack_levels_q5_K(L, ob)


@_jit
def _pack_levels_q5_K(L, ob):
    """Q5_K's 5-bit levels: the high bits into qh (ob[16:48]), the low nibbles into qs (ob[48:176])."""
    qh = ob[16:48]
    qh[:] = 0
    for c in range(4):  # bit 2c of qh[l]: element 64c + l, bit 2c+1: element 64c + 32 + l
        for l in range(32):
            l1 = L[64 * c + l]
            l2 = L[64 * c + 32 + l]
            if l1 > 15:
                l1 -= 16
                qh[l] |= 1 << (2 * c)
            if l2 > 15:
                l2 -= 16
                qh[l] |= 2 << (2 * c)
            ob[48 + 32 * c + l] = l1 | (l2 << 4)


@numba.njit(cache=True, nogil=True, parallel=True)
def _quantize_q5_K(x, out, dd):
    for b in numba.prange(x.shape[0]):
        _block_q5_K(x[b], out[b], dd[b])


# --- Q2_K: 16 sub-blocks of 16, 4-bit scale and min -------------------------------------------


@_jit
def _pack_2bit(L, qs):
    """256 values of 0..3 -> qs[64]: in each half of 128, element 32k + l in bits 2k of byte l
    (the qs layout of Q2_K and Q3_K)."""
    for h in range(2):
        for l in range(32):
            base = 128 * h + l
            qs[32 * h + l] = L[base] | (L[base + 32] << 2) | (L[base + 64] << 4) | (L[base + 96] << 6)


@_jit
def _block_q2_K(xb, ob, ddb):
    # block_q2_K { scales[16] (scale | min << 4); qs[64]; d; dmin }
    L = np.zeros(QK_K, np.int32)
    Laux = np.empty(16, np.int32)
    weights = np.empty(16, np.float32)
    scales = np.empty(16, np.float32)
    mins = np.empty(16, np.float32)
    max_scale = f32(0)
    max_min = f32(0)
    for j in range(16):
        for l in range(16):
            weights[l] = abs(xb[16 * j + l])
        scales[j], mins[j] = make_qkx2_quants(3, xb[16 * j : 16 * j + 16], weights, L[16 * j : 16 * j + 16],
                                              Laux, f32(-0.5), f32(0.1), 15, True)
        if scales[j] > max_scale:
            max_scale = scales[j]
        if mins[j] > max_min:
            max_min = mins[j]
    sc = ob[0:16]
    d = f32(0)
    dmin = f32(0)
    if max_scale > 0:
        iscale = f32(15) / max_scale
        for j in range(16):
            sc[j] = nearest_int(iscale * scales[j])
        d = fp16_round(max_scale / f32(15))
    else:
        sc[:] = 0
    if max_min > 0:
        iscale = f32(15) / max_min
        for j in range(16):
            sc[j] |= nearest_int(iscale * mins[j]) << 4
        dmin = fp16_round(max_min / f32(15))
    ddb[0] = d
    ddb[1] = dmin
    _finish_q2_K(xb, d, dmin, L, ob)


@_jit
def _finish_q2_K(xb, d, dmin, L, ob):
    """Q2_K's second pass once d, dmin and the packed scales (ob[0:16]) are final: each value's
    2-bit level under its sub-block's rounded scale and min, packed into qs (ob[16:80])."""
    for j in range(16):
        dl = d * f32(int(ob[j]) & 0xF)
        if dl == 0:
            continue
        dm = dmin * f32(int(ob[j]) >> 4)
        for ii in range(16):
            L[16 * j + ii] = max(0, min(3, nearest_int((xb[16 * j + ii] + dm) / dl)))
    _pack_2bit(L, ob[16:80])


@numba.njit(cache=True, nogil=True, parallel=True)
def _quantize_q2_K(x, out, dd):
    for b in numba.prange(x.shape[0]):
        _block_q2_K(x[b], out[b], dd[b])


# --- Q3_K: 16 sub-blocks of 16, 6-bit signed scales -------------------------------------------


@_jit
def _block_q3_K(xb, ob, ddb):
    # block_q3_K { hmask[32]; qs[64]; scales[12]; d }
    L = np.zeros(QK_K, np.int32)
    scales = np.empty(16, np.float32)
    max_scale = f32(0)
    amax = f32(0)
    for j in range(16):
        scales[j] = make_q3_quants_rmse(4, xb[16 * j : 16 * j + 16], L[16 * j : 16 * j + 16])
        a = abs(scales[j])
        if a > amax:
            amax = a
            max_scale = scales[j]
    sc = ob[96:108]
    sc[:] = 0
    d = f32(0)
    if max_scale != 0:
        iscale = f32(-32) / max_scale
        for j in range(16):
            _put_scale_q3_K(sc, j, max(-32, min(31, nearest_int(iscale * scales[j]))) + 32)
        d = fp16_round(f32(1) / iscale)
    ddb[0] = d
    _finish_q3_K(xb, d, L, ob)


@_jit
def _put_scale_q3_K(sc, j, l):
    """Sub-block j's 6-bit scale l (0..63, i.e. scale + 32) into the 12 packed bytes: low nibble in
    byte j (j < 8) or the high nibble of byte j - 8, the top two bits in byte 8 + j % 4."""
    if j < 8:
        sc[j] = l & 0xF
    else:
        sc[j - 8] |= (l & 0xF) << 4
    sc[j % 4 + 8] |= (l >> 4) << (2 * (j // 4))


@_jit
def _finish_q3_K(xb, d, L, ob):
    """Q3_K's second pass once d and the packed scales (ob[96:108]) are final: each value's 3-bit
    level under its sub-block's rounded scale, the high bits into hmask, the low two into qs."""
    sc = ob[96:108]
    for j in range(16):
        low = np.int32(sc[j] & 0xF) if j < 8 else np.int32(sc[j - 8] >> 4)
        high = np.int32((sc[8 + j % 4] >> (2 * (j // 4))) & 3)
        dl = d * f32((low | (high << 4)) - 32)
        if dl == 0:
            continue
        for ii in range(16):
            L[16 * j + ii] = max(-4, min(3, nearest_int(xb[16 * j + ii] / dl))) + 4
    hmask = ob[0:32]
    hmask[:] = 0
    for j in range(QK_K):  # high bit of element 32s + m goes to bit s of hmask[m]
        if L[j] > 3:
            hmask[j % 32] |= 1 << (j // 32)
            L[j] -= 4
    _pack_2bit(L, ob[32:96])


@numba.njit(cache=True, nogil=True, parallel=True)
def _quantize_q3_K(x, out, dd):
    for b in numba.prange(x.shape[0]):
        _block_q3_K(x[b], out[b], dd[b])


# --- Q6_K: 16 sub-blocks of 16, 8-bit signed scales -------------------------------------------


@_jit
def _block_q6_K(xb, ob, ddb):
    # block_q6_K { ql[128]; qh[64]; scales[16] (int8); d }
    L = np.zeros(QK_K, np.int32)
    scales = np.empty(16, np.float32)
    max_scale = f32(0)
    max_abs_scale = f32(0)
    for ib in range(16):
        scales[ib] = make_qx_quants_rmse1(32, xb[16 * ib : 16 * ib + 16], L[16 * ib : 16 * ib + 16])
        a = abs(scales[ib])
        if a > max_abs_scale:
            max_abs_scale = a
            max_scale = scales[ib]
    _finish_q6_K(xb, L, scales, max_scale, max_abs_scale, ob, ddb)


@_jit
def _finish_q6_K(xb, L, scales, max_scale, max_abs_scale, ob, ddb):
    """Q6_K after the sub-block scales (shared with the importance-weighted path): 8-bit
    scales against the fp16 d, the quants again with the scales as stored, then packing."""
    ob[:] = 0
    if max_abs_scale < GROUP_MAX_EPS:
        ddb[0] = f32(0)
        return
    iscale = f32(-128) / max_scale
    d = fp16_round(f32(1) / iscale)
    ddb[0] = d
    sc = np.empty(16, np.int32)
    for ib in range(16):
        sc[ib] = min(127, nearest_int(iscale * scales[ib]))
        ob[192 + ib] = sc[ib] & 0xFF
    for j in range(16):
        dl = d * f32(sc[j])
        if dl == 0:
            continue
        for ii in range(16):
            L[16 * j + ii] = max(-32, min(31, nearest_int(xb[16 * j + ii] / dl))) + 32
    for h in range(2):  # per half of 128: ql holds low nibbles (64 bytes), qh the 2 high bits (32 bytes)
        for l in range(32):
            base = 128 * h + l
            q1, q2, q3, q4 = L[base], L[base + 32], L[base + 64], L[base + 96]
            ob[64 * h + l] = (q1 & 0xF) | ((q3 & 0xF) << 4)
            ob[64 * h + 32 + l] = (q2 & 0xF) | ((q4 & 0xF) << 4)
            ob[128 + 32 * h + l] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6)


@numba.njit(cache=True, nogil=True, parallel=True)
def _quantize_q6_K(x, out, dd):
    for b in numba.prange(x.shape[0]):
        _block_q6_K(x[b], out[b], dd[b])


# --- the public functions -----------------------------------------------------------------------

def _run(kernel, x: np.ndarray, type_size: int, f16_offsets: tuple[int, ...]) -> np.ndarray:
    """Run a block kernel; then write its fp16 fields (at `f16_offsets` of each block) as bytes."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim != 2 or x.shape[1] != QK_K:
        raise ValueError(f"k-quants take float32 blocks of shape (n, {QK_K}), got {x.shape}")
    out = np.zeros((x.shape[0], type_size), np.uint8)
    dd = np.zeros((x.shape[0], len(f16_offsets)), np.float32)
    kernel(x, out, dd)
    for col, off in enumerate(f16_offsets):  # already fp16 values: the conversion is exact
        out[:, off : off + 2] = dd[:, col].astype("<f2").view(np.uint8).reshape(-1, 2)
    return out


def quantize_row_q2_K(x: np.ndarray) -> np.ndarray:
    return _run(_quantize_q2_K, x, Q2_K_TYPE_SIZE, (80, 82))


def quantize_row_q3_K(x: np.ndarray) -> np.ndarray:
    return _run(_quantize_q3_K, x, Q3_K_TYPE_SIZE, (108,))


def quantize_row_q4_K(x: np.ndarray) -> np.ndarray:
    return _run(_quantize_q4_K, x, Q4_K_TYPE_SIZE, (0, 2))


def quantize_row_q5_K(x: np.ndarray) -> np.ndarray:
    return _run(_quantize_q5_K, x, Q5_K_TYPE_SIZE, (0, 2))


def quantize_row_q6_K(x: np.ndarray) -> np.ndarray:
    return _run(_quantize_q6_K, x, Q6_K_TYPE_SIZE, (208,))
