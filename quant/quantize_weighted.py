"""Importance-weighted quantizers: what ``llama-quantize --imatrix`` runs, and IQ4_NL / IQ4_XS.

With an importance matrix, ggml quantizes through ``quantize_row_*_impl`` (ggml-quants.c)
instead of the ``_ref`` functions: each weight's error counts in proportion to
``qw[j] * sqrt(sigma2 + x[j]^2)``, qw the imatrix value of its input column, sigma2 the mean
square of the row (Q4_0..Q5_1) or super-block (Q2_K..Q5_K; Q6_K uses qw alone). The scale
searches are ``kquant_search_weighted``'s.

Contract: float32 rows (n_rows, n_per_row) and qw (n_per_row,) -> uint8 (n_rows, row bytes).
Rows run in parallel (numba); inside a row everything is sequential in ggml's order, so the
bytes are ggml's. IQ4_NL and IQ4_XS take qw = None too: their only quantizer is this one
(``quantize_iq4_nl`` with ``ntry = 7``, weights x^2 without an imatrix).
"""
from __future__ import annotations

import math

import numba
import numpy as np
from gguf import GGMLQuantizationType as T

from localinfer.formats.dequant_kquants import Q2_K_TYPE_SIZE, Q3_K_TYPE_SIZE, Q4_K_TYPE_SIZE, Q5_K_TYPE_SIZE, Q6_K_TYPE_SIZE, QK_K
from .kquant_search import GROUP_MAX_EPS, f32, fp16_round, make_qkx2_quants, nearest_int, sum_squares
from .kquant_search_weighted import best_index_int8, make_qp_quants, make_qx_quants_w
from .quantize_kquants import (_finish_q2_K, _finish_q3_K, _finish_q6_K, _pack_levels_q4_K, _pack_levels_q5_K,
                               _put_scale_q3_K, _requantize_k4)

_jit = numba.njit(cache=True, nogil=True)
_par = numba.njit(cache=True, nogil=True, parallel=True)

KVALUES_IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.int8)


@_jit
def _weights(x, qw, sigma2, out):
    """out[j] = qw[j] * sqrtf(sigma2 + x[j]^2): the error weight of each element."""
    for j in range(x.shape[0]):
        out[j] = qw[j] * f32(math.sqrt(sigma2 + x[j] * x[j]))


# --- 32-element quants: sigma2 over the whole row ----------------------------------------------


@_jit
def _pack_nibbles32(L, qs):
    for j in range(16):
        qs[j] = (L[j] & 0xF) | ((L[j + 16] & 0xF) << 4)


@_jit
def _pack_qh32(L, qh):
    bits = 0
    for j in range(16):
        bits |= ((L[j] >> 4) & 1) << j
        bits |= ((L[j + 16] >> 4) & 1) << (j + 16)
    for b in range(4):
        qh[b] = (bits >> (8 * b)) & 0xFF


@_par
def _rows_legacy(x, qw, out, dd, kind):
    """kind 0: Q4_0 { d; qs[16] }, 1: Q4_1 { d; m; qs[16] }, 2: Q5_0 { d; qh[4]; qs[16] },
    3: Q5_1 { d; m; qh[4]; qs[16] }. dd gets each block's (d, m) before fp16 rounding."""
    n_per_row = x.shape[1]
    ts = out.shape[1] // (n_per_row // 32)
    for r in numba.prange(x.shape[0]):
        xr = x[r]
        sigma2 = sum_squares(xr) / f32(n_per_row)
        weight = np.empty(32, np.float32)
        L = np.zeros(32, np.int32)
        Laux = np.empty(32, np.int32)
        for ib in range(n_per_row // 32):
            xb = xr[32 * ib : 32 * ib + 32]
            ob = out[r, ts * ib : ts * ib + ts]
            _weights(xb, qw[32 * ib : 32 * ib + 32], sigma2, weight)
            if kind == 0 or kind == 2:
                dd[r, ib, 0] = make_qx_quants_w(8 if kind == 0 else 16, xb, L, weight)
                off = 2
            else:
                d, the_min = make_qkx2_quants(15 if kind == 1 else 31, xb, weight, L, Laux,
                                              f32(-0.9), f32(0.05), 36, False)
                dd[r, ib, 0] = d
                dd[r, ib, 1] = -the_min
                off = 4
            if kind >= 2:
                _pack_qh32(L, ob[off : off + 4])
                off += 4
            _pack_nibbles32(L, ob[off : off + 16])


# --- k-quants: sigma2 per super-block -----------------------------------------------------------


@_jit
def _block_q2_K_w(x, qw, ob, ddb):
    # block_q2_K { scales[16] (scale | min << 4); qs[64]; d; dmin }
    L = np.zeros(QK_K, np.int32)
    Laux = np.empty(16, np.int32)
    weight = np.empty(16, np.float32)
    scales = np.empty(16, np.float32)
    mins = np.empty(16, np.float32)
    sw = np.zeros(16, np.float32)
    Ls = np.zeros(16, np.int32)
    Lm = np.zeros(16, np.int32)
    sigma2 = sum_squares(x) / f32(QK_K)
    for j in range(16):
        _weights(x[16 * j : 16 * j + 16], qw[16 * j : 16 * j + 16], sigma2, weight)
        for l in range(16):
            sw[j] += weight[l]
        scales[j], mins[j] = make_qkx2_quants(3, x[16 * j : 16 * j + 16], weight, L[16 * j : 16 * j + 16], Laux,
                                              f32(-0.9), f32(0.05), 36, False)
    d = fp16_round(make_qp_quants(15, scales, Ls, sw))
    dmin = fp16_round(make_qp_quants(15, mins, Lm, sw))
    ddb[0] = d
    ddb[1] = dmin
    for j in range(16):
        ob[j] = (Ls[j] | (Lm[j] << 4)) & 0xFF
    _finish_q2_K(x, d, dmin, L, ob)


@_jit
def _block_q3_K_w(x, qw, ob, ddb):
    # block_q3_K { hmask[32]; qs[64]; scales[12]; d }
    L = np.zeros(QK_K, np.int32)
    weight = np.empty(16, np.float32)
    scales = np.empty(16, np.float32)
    sw = np.zeros(16, np.float32)
    Ls = np.zeros(16, np.int32)
    sigma2 = f32(2) * sum_squares(x) / f32(QK_K)
    for j in range(16):
        _weights(x[16 * j : 16 * j + 16], qw[16 * j : 16 * j + 16], sigma2, weight)
        for l in range(16):
            sw[j] += weight[l]
        scales[j] = make_qx_quants_w(4, x[16 * j : 16 * j + 16], L[16 * j : 16 * j + 16], weight)
    d_block = make_qx_quants_w(32, scales, Ls, sw)
    sc = ob[96:108]
    sc[:] = 0
    for j in range(16):
        _put_scale_q3_K(sc, j, Ls[j])
    d = fp16_round(d_block)
    ddb[0] = d
    _finish_q3_K(x, d, L, ob)


@_jit
def _scales_mins_k4_w(x, qw, L, nmax, scales, mins, sw):
    """Q4_K/Q5_K first pass with weights: each sub-block of 32's (scale, min), and its weight sum."""
    weight = np.empty(32, np.float32)
    Laux = np.empty(32, np.int32)
    sigma2 = f32(2) * sum_squares(x) / f32(QK_K)
    for j in range(8):
        _weights(x[32 * j : 32 * j + 32], qw[32 * j : 32 * j + 32], sigma2, weight)
        s = f32(0)
        for l in range(32):
            s += weight[l]
        sw[j] = s
        scales[j], mins[j] = make_qkx2_quants(nmax, x[32 * j : 32 * j + 32], weight, L[32 * j : 32 * j + 32], Laux,
                                              f32(-0.9), f32(0.05), 36, False)


@_jit
def _pack_k4_w(scales, mins, sw, packed):
    """6-bit scales and mins from make_qp_quants into get_scale_min_k4's 12 bytes -> fp16 (d, dmin)."""
    Ls = np.zeros(8, np.int32)
    Lm = np.zeros(8, np.int32)
    d_block = make_qp_quants(63, scales, Ls, sw)
    m_block = make_qp_quants(63, mins, Lm, sw)
    packed[:] = 0
    for j in range(8):
        ls = min(63, Ls[j])
        lm = min(63, Lm[j])
        if j < 4:
            packed[j] = ls
            packed[j + 4] = lm
        else:
            packed[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4)
            packed[j - 4] |= (ls >> 4) << 6
            packed[j] |= (lm >> 4) << 6
    return fp16_round(d_block), fp16_round(m_block)


@_jit
def _block_q4_K_w(x, qw, ob, ddb):
    # block_q4_K { d; dmin; scales[12]; qs[128] }
    L = np.zeros(QK_K, np.int32)
    scales = np.empty(8, np.float32)
    mins = np.empty(8, np.float32)
    sw = np.empty(8, np.float32)
    _scales_mins_k4_w(x, qw, L, 15, scales, mins, sw)
    d, dmin = _pack_k4_w(scales, mins, sw, ob[4:16])
    ddb[0] = d
    ddb[1] = dmin
    _requantize_k4(x, L, 15, d, dmin, ob[4:16])
    _pack_levels_q4_K(L, ob)


@_jit
def _block_q5_K_w(x, qw, ob, ddb):
    # block_q5_K { d; dmin; scales[12]; qh[32]; qs[128] }
    L = np.zeros(QK_K, np.int32)
    scales = np.empty(8, np.float32)
    mins = np.empty(8, np.float32)
    sw = np.empty(8, np.float32)
    _scales_mins_k4_w(x, qw, L, 31, scales, mins, sw)
    d, dmin = _pack_k4_w(scales, mins, sw, ob[4:16])
    ddb[0] = d
    ddb[1] = dmin
    _requantize_k4(x, L, 31, d, dmin, ob[4:16])
    _pack_levels_q5_K(L, ob)


@_jit
def _block_q6_K_w(x, qw, ob, ddb):
    # block_q6_K { ql[128]; qh[64]; scales[16]; d }: the imatrix values are the weights as they are
    L = np.zeros(QK_K, np.int32)
    scales = np.empty(16, np.float32)
    max_scale = f32(0)
    max_abs_scale = f32(0)
    for ib in range(16):
        scales[ib] = make_qx_quants_w(32, x[16 * ib : 16 * ib + 16], L[16 * ib : 16 * ib + 16],
                                      qw[16 * ib : 16 * ib + 16])
        a = abs(scales[ib])
        if a > max_abs_scale:
            max_abs_scale = a
            max_scale = scales[ib]
    _finish_q6_K(x, L, scales, max_scale, max_abs_scale, ob, ddb)


@_jit
def _block_k(kind, x, qw, ob, ddb):
    if kind == 0:
        _block_q2_K_w(x, qw, ob, ddb)
    elif kind == 1:
        _block_q3_K_w(x, qw, ob, ddb)
    elif kind == 2:
        _block_q4_K_w(x, qw, ob, ddb)
    elif kind == 3:
        _block_q5_K_w(x, qw, ob, ddb)
    else:
        _block_q6_K_w(x, qw, ob, ddb)


@_par
def _rows_k(x, qw, out, dd, kind):
    nb = x.shape[1] // QK_K
    ts = out.shape[1] // nb
    for r in numba.prange(x.shape[0]):
        for ib in range(nb):
            _block_k(kind, x[r, QK_K * ib : QK_K * ib + QK_K], qw[QK_K * ib : QK_K * ib + QK_K],
                     out[r, ts * ib : ts * ib + ts], dd[r, ib])


# --- IQ4_NL (32) and IQ4_XS (256): a non-linear 4-bit table ------------------------------------


@_jit
def _iq4_superblock(x, qw, has_qw, values, ntry, ob, ddb, L, scales, weight):
    """quantize_row_iq4_nl_impl for one super-block of x.shape[0] (32: IQ4_NL, 256: IQ4_XS)."""
    sbs = x.shape[0]
    nb = sbs // 32
    sigma2 = sum_squares(x) * (f32(2) / f32(sbs))
    max_scale = f32(0)
    amax_scale = f32(0)
    v0 = f32(values[0])
    for ib in range(nb):
        xb = x[32 * ib : 32 * ib + 32]
        if has_qw:
            _weights(xb, qw[32 * ib : 32 * ib + 32], sigma2, weight)
        else:
            for j in range(32):
                weight[j] = xb[j] * xb[j]
        amax = f32(0)
        mx = f32(0)
        for j in range(32):
            ax = abs(xb[j])
            if ax > amax:
                amax = ax
                mx = xb[j]
        if amax < GROUP_MAX_EPS:
            scales[ib] = f32(0)
            continue
        d = -mx / v0 if ntry > 0 else mx / v0
        id_ = f32(1) / d
        sumqx = f32(0)
        sumq2 = f32(0)
        for j in range(32):
            l = best_index_int8(values, id_ * xb[j])
            L[32 * ib + j] = l
            q = f32(values[l])
            w = weight[j]
            sumqx += w * q * xb[j]
            sumq2 += w * q * q
        d = sumqx / sumq2 if sumq2 > 0 else f32(0)
        best = d * sumqx
        for itry in range(-ntry, ntry + 1):
            id_ = f32(itry + int(values[0])) / mx
            sumqx = f32(0)
            sumq2 = f32(0)
            for j in range(32):
                q = f32(values[best_index_int8(values, id_ * xb[j])])
                w = weight[j]
                sumqx += w * q * xb[j]
                sumq2 += w * q * q
            if sumq2 > 0 and sumqx * sumqx > best * sumq2:
                d = sumqx / sumq2
                best = d * sumqx
        scales[ib] = d
        if abs(d) > amax_scale:
            amax_scale = abs(d)
            max_scale = d
    if nb > 1:  # IQ4_XS { d; scales_h (u16); scales_l[4]; qs[128] }: 6-bit sub-block scales
        scales_h = 0
        for k in range(4):
            ob[4 + k] = 0
        d = -max_scale / f32(32)
        ddb[0] = fp16_round(d)
        id_ = f32(1) / d if d != 0 else f32(0)
        for ib in range(nb):
            l = max(-32, min(31, nearest_int(id_ * scales[ib])))
            dl = d * f32(l)
            idl = f32(1) / dl if dl != 0 else f32(0)
            for j in range(32):
                L[32 * ib + j] = best_index_int8(values, idl * x[32 * ib + j])
            l += 32
            if ib % 2 == 0:
                ob[4 + ib // 2] = l & 0xF
            else:
                ob[4 + ib // 2] |= (l & 0xF) << 4
            scales_h |= (l >> 4) << (2 * (ib % 8))
        ob[2] = scales_h & 0xFF
        ob[3] = (scales_h >> 8) & 0xFF
        q4 = 8
    else:  # IQ4_NL { d; qs[16] }
        ddb[0] = fp16_round(scales[0])
        if ntry > 0:
            id_ = f32(1) / scales[0] if scales[0] != 0 else f32(0)
            for j in range(sbs):
                L[j] = best_index_int8(values, id_ * x[j])
        q4 = 2
    for i in range(sbs // 32):
        for j in range(16):
            ob[q4 + 16 * i + j] = L[32 * i + j] | (L[32 * i + 16 + j] << 4)


@_par
def _rows_iq4(x, qw, has_qw, sbs, out, dd):
    nb = x.shape[1] // sbs
    ts = out.shape[1] // nb
    for r in numba.prange(x.shape[0]):
        L = np.zeros(sbs, np.int32)
        scales = np.zeros(sbs // 32, np.float32)
        weight = np.empty(32, np.float32)
        for ib in range(nb):
            _iq4_superblock(x[r, sbs * ib : sbs * ib + sbs], qw[sbs * ib : sbs * ib + sbs], has_qw, KVALUES_IQ4NL, 7,
                            out[r, ts * ib : ts * ib + ts], dd[r, ib], L, scales, weight)


# --- the public function --------------------------------------------------------------------------

# type -> (kernel family, kind, block elements, block bytes, offsets of the fp16 fields in a block)
_LAYOUTS = {
    T.Q4_0: ("legacy", 0, 32, 18, (0,)),
    T.Q4_1: ("legacy", 1, 32, 20, (0, 2)),
    T.Q5_0: ("legacy", 2, 32, 22, (0,)),
    T.Q5_1: ("legacy", 3, 32, 24, (0, 2)),
    T.Q2_K: ("k", 0, QK_K, Q2_K_TYPE_SIZE, (80, 82)),
    T.Q3_K: ("k", 1, QK_K, Q3_K_TYPE_SIZE, (108,)),
    T.Q4_K: ("k", 2, QK_K, Q4_K_TYPE_SIZE, (0, 2)),
    T.Q5_K: ("k", 3, QK_K, Q5_K_TYPE_SIZE, (0, 2)),
    T.Q6_K: ("k", 4, QK_K, Q6_K_TYPE_SIZE, (208,)),
    T.IQ4_NL: ("iq4", 0, 32, 18, (0,)),
    T.IQ4_XS: ("iq4", 0, QK_K, 136, (0,)),
}
WEIGHTED_TYPES = frozenset(_LAYOUTS)


def quantize_rows_weighted(x: np.ndarray, qtype: T, qw: np.ndarray | None) -> np.ndarray:
    """float32 rows (n_rows, n_per_row), importance qw (n_per_row,) -> uint8 (n_rows, row bytes).

    qw None is allowed for IQ4_NL / IQ4_XS only (their one quantizer, unweighted)."""
    family, kind, bs, ts, f16_offsets = _LAYOUTS[T(qtype)]
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim != 2 or x.shape[1] % bs:
        raise ValueError(f"{T(qtype).name}: rows must be (n, a multiple of {bs}), got {x.shape}")
    nb = x.shape[1] // bs
    has_qw = qw is not None
    if qw is None:
        if family != "iq4":
            raise ValueError(f"{T(qtype).name}: the weighted quantizer needs importance weights")
        qw = np.zeros(x.shape[1], np.float32)
    qw = np.ascontiguousarray(qw, dtype=np.float32)
    if qw.shape != (x.shape[1],):
        raise ValueError(f"importance weights of shape {qw.shape} for rows of {x.shape[1]}")
    out = np.zeros((x.shape[0], nb * ts), np.uint8)
    dd = np.zeros((x.shape[0], nb, 2), np.float32)
    if family == "legacy":
        _rows_legacy(x, qw, out, dd, kind)
    elif family == "k":
        _rows_k(x, qw, out, dd, kind)
    else:
        _rows_iq4(x, qw, has_qw, bs, out, dd)
    blocks = out.reshape(-1, ts)
    flat = dd.reshape(-1, 2)
    for col, off in enumerate(f16_offsets):  # the legacy kernels leave d, m unrounded: astype rounds to even
        blocks[:, off : off + 2] = flat[:, col].astype("<f2").view(np.uint8).reshape(-1, 2)
    return out


def quantize_row_iq4_nl(x: np.ndarray) -> np.ndarray:
    """Blocks (n, 32) -> IQ4_NL blocks (n, 18), no imatrix (each block is its own super-block)."""
    return quantize_rows_weighted(x, T.IQ4_NL, None)


def quantize_row_iq4_xs(x: np.ndarray) -> np.ndarray:
    """Blocks (n, 256) -> IQ4_XS blocks (n, 136), no imatrix."""
    return quantize_rows_weighted(x, T.IQ4_XS, None)
