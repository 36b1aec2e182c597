"""The 1.5-bit i-quants IQ1_S and IQ1_M: what ``llama-quantize --imatrix`` writes for them.

Each group of 8 weights becomes one point of the 2048-point grid ``iq1s_grid`` (values -1, 0, 1
per element) plus a shift delta = +-1/8, times a per-sub-block scale (2l + 1) * d. ggml's search
(quantize_row_iq1_s_impl / quantize_row_iq1_m_impl in ggml-quants.c), per sub-block:

1. sort the sub-block's values; with three levels the best assignment is two cut points in that
   order, so every (i1, i2) split is scored from prefix sums, for both signs of the shift (IQ1_M:
   each half of 8 picks its own sign);
2. the 8-element groups that are not grid points go to the nearest grid point among their
   precomputed neighbours (the least weighted squared error at the split's scale), and then the
   scale is refitted;
3. one fp16 d per super-block from the largest scale, each sub-block's 3-bit l rounded against it
   (IQ1_M then refits d over the whole super-block).

Error weights are ``qw[j] * sqrt(sigma2 + x[j]^2)``, sigma2 = 2 * mean square of the super-block.
Every float operation is float32 in ggml's order, so the bytes are ggml's.

Ties in the sort: ggml sorts (value, index) pairs with qsort comparing the value alone. glibc's
qsort is a merge sort for arrays this small (stable), so equal values keep their index order, and
so does the sort here. Ties do change the bytes (two equal values with different weights move the
cut points' prefix sums), so another C library's qsort could give other bytes than these.

IQ1_S needs an imatrix (ggml asserts one); IQ1_M quantizes without one too, with weights x^2.

Contract: float32 rows (n_rows, n_per_row), n_per_row a multiple of 256, all finite, and
qw (n_per_row,) finite and >= 0 -> uint8 (n_rows, row bytes). Rows run in parallel (numba).
"""
from __future__ import annotations

import math

import numba
import numpy as np
from gguf import GGMLQuantizationType as T

from localinfer.formats.dequant_grids import IQ1_M_TYPE_SIZE, IQ1_S_TYPE_SIZE, QK_K
from localinfer.formats.registry import ImatrixRequired
from .grid_search import grid_search
from .kquant_search import f32, nearest_int, sum_squares

_jit = numba.njit(cache=True, nogil=True)
_par = numba.njit(cache=True, nogil=True, parallel=True)

GROUP_MAX_EPS_IQ1_S = f32(1e-12)  # ggml-quants.c: a sub-block below this is all zero
GROUP_MAX_EPS_IQ1_M = f32(1e-7)
FLT_MAX = f32(np.finfo(np.float32).max)
# the three levels of a group with a positive / negative shift: (-1, 0, 1) + delta and - delta
X_P = np.array([-1 + 0.125, 0.125, 1 + 0.125], np.float32)
X_M = np.array([-1 - 0.125, -0.125, 1 - 0.125], np.float32)


# --- shared steps ----------------------------------------------------------------------------


@_jit
def _stable_order(xb, order):
    """order <- the indices of xb sorted by value, equal values in index order (as glibc's qsort)."""
    n = xb.shape[0]
    for j in range(n):
        v = xb[j]
        k = j
        while k > 0 and xb[order[k - 1]] > v:
            order[k] = order[k - 1]
            k -= 1
        order[k] = j


@_jit
def _nearest_neighbour(neighbours, start, grid, xg, wg, scale, xx, L):
    """iq1_find_best_neighbour2: of the candidates listed at neighbours[start] (a count, then grid
    indices), the one with the least sum w * (scale * xx[level] - x)^2, the first on a tie; its
    levels go to L. -1 when none scores below FLT_MAX (non-finite weights)."""
    best = FLT_MAX
    best_index = -1
    for n in range(1, int(neighbours[start]) + 1):
        g = int(neighbours[start + n])
        d2 = f32(0)
        for i in range(8):
            diff = scale * xx[(grid[g, i] - 1) // 2] - xg[i]
            d2 += wg[i] * diff * diff
        if d2 < best:
            best = d2
            best_index = g
    if best_index >= 0:
        for i in range(8):
            L[i] = (grid[best_index, i] - 1) // 2
    return best_index


@_jit
def _snap_group(L, xg, wg, scale, xx, index_map, neighbours, grid):
    """The grid index of 8 levels 0..2, or of their best neighbour when they are off the grid
    (L then gets its levels). Returns (index, on_grid); index -1: no neighbour scored."""
    u = 0
    for j in range(8):
        u |= L[j] << (2 * j)
    g = index_map[u]
    if g >= 0:
        return g, True
    return _nearest_neighbour(neighbours, -g - 1, grid, xg, wg, scale, xx, L), False


@_jit
def _weights(xb, qw, has_qw, sigma2, weight):
    for i in range(xb.shape[0]):
        weight[i] = qw[i] * f32(math.sqrt(sigma2 + xb[i] * xb[i])) if has_qw else xb[i] * xb[i]


@_jit
def _sigma2(xbl):
    return f32(2) * sum_squares(xbl) / f32(QK_K)


@_jit
def _abs_max(xb):
    m = abs(xb[0])
    for i in range(1, xb.shape[0]):
        m = max(m, abs(xb[i]))
    return m


# --- IQ1_S { d; qs[32]; qh[8] (u16) }: sub-blocks of 32 ------------------------------------------


@_jit
def _best_split_iq1_s(xb, weight, order, sumx, sumw):
    """Step 1 for 32 values: (scale, i1, i2, shift) of the best split; shift 0 when none scores."""
    n = xb.shape[0]
    sumx[0] = f32(0)
    sumw[0] = f32(0)
    for j in range(n):
        i = order[j]
        sumx[j + 1] = sumx[j] + weight[i] * xb[i]
        sumw[j + 1] = sumw[j] + weight[i]
    best_score = -FLT_MAX
    scale = _abs_max(xb)
    besti1 = -1
    besti2 = -1
    best_shift = 0
    for i1 in range(n + 1):
        for i2 in range(i1, n + 1):
            a = sumx[i1] - sumx[0]
            b = sumx[i2] - sumx[i1]
            c = sumx[n] - sumx[i2]
            wa = sumw[i1] - sumw[0]
            wb = sumw[i2] - sumw[i1]
            wc = sumw[n] - sumw[i2]
            for shift in (1, -1):
                xx = X_P if shift == 1 else X_M
                sumqx = a * xx[0] + b * xx[1] + c * xx[2]
                sumq2 = wa * xx[0] * xx[0] + wb * xx[1] * xx[1] + wc * xx[2] * xx[2]
                if sumq2 > 0 and sumqx * sumqx > best_score * sumq2:
                    scale = sumqx / sumq2
                    best_score = scale * sumqx
                    besti1 = i1
                    besti2 = i2
                    best_shift = shift
    return scale, besti1, besti2, best_shift


@_jit
def _levels_from_split(order, i1, i2, L):
    for j in range(order.shape[0]):
        L[order[j]] = 0 if j < i1 else (1 if j < i2 else 2)


@_jit
def _superblock_iq1_s(xbl, qwbl, ob, dd, index_map, neighbours, grid):
    """One super-block of 256 -> block_iq1_s bytes in ob (d left to the caller, in dd[0]).
    Returns False when a group found no grid point (non-finite arithmetic)."""
    weight = np.empty(32, np.float32)
    order = np.empty(32, np.int64)
    sumx = np.empty(33, np.float32)
    sumw = np.empty(33, np.float32)
    L = np.empty(32, np.int64)
    scales = np.zeros(8, np.float32)
    shifts = np.ones(8, np.int64)
    index = np.empty(4, np.int64)
    qh = np.zeros(8, np.int64)
    sigma2 = _sigma2(xbl)
    max_scale = f32(0)
    for ib in range(8):
        xb = xbl[32 * ib : 32 * ib + 32]
        _weights(xb, qwbl[32 * ib : 32 * ib + 32], True, sigma2, weight)
        if _abs_max(xb) < GROUP_MAX_EPS_IQ1_S:
            continue   # scale 0, positive shift, indices 0
        _stable_order(xb, order)
        scale, i1, i2, shift = _best_split_iq1_s(xb, weight, order, sumx, sumw)
        if i1 < 0 or i2 < 0 or shift == 0:
            continue
        _levels_from_split(order, i1, i2, L)
        if scale < 0:  # the mirrored levels with the opposite shift fit as well with a positive scale
            for j in range(32):
                L[j] = 2 - L[j]
            scale = -scale
            shift = -shift
        xx = X_P if shift == 1 else X_M
        all_on_grid = True
        for k in range(4):
            g, on = _snap_group(L[8 * k : 8 * k + 8], xb[8 * k : 8 * k + 8], weight[8 * k : 8 * k + 8], scale, xx,
                                index_map, neighbours, grid)
            if g < 0:
                return False
            all_on_grid = all_on_grid and on
            index[k] = g
        if not all_on_grid:  # refit the scale to the grid points actually used
            sumqx = f32(0)
            sumq2 = f32(0)
            for k in range(4):
                for j in range(8):
                    w = weight[8 * k + j]
                    q = xx[(grid[index[k], j] - 1) // 2]
                    sumqx += w * q * xb[8 * k + j]
                    sumq2 += w * q * q
            if sumqx > 0 and sumq2 > 0:
                scale = sumqx / sumq2
        h = 0
        for k in range(4):
            ob[2 + 4 * ib + k] = index[k] & 255
            h |= (index[k] >> 8) << (3 * k)
        qh[ib] = h
        scales[ib] = scale
        shifts[ib] = shift
        max_scale = max(max_scale, scale)
    if max_scale != 0:
        d = max_scale / f32(15)
        dd[0] = d * f32(1.125)   # ggml's fudge factor on the stored d
        id_ = f32(1) / d
        for ib in range(8):
            l = max(0, min(7, nearest_int(f32(0.5) * (id_ * scales[ib] - f32(1)))))
            if shifts[ib] == -1:
                l |= 8
            qh[ib] |= l << 12
    for ib in range(8):
        ob[34 + 2 * ib] = qh[ib] & 0xFF
        ob[35 + 2 * ib] = (qh[ib] >> 8) & 0xFF
    return True


@_par
def _rows_iq1_s(x, qw, out, dd, ok, index_map, neighbours, grid):
    nbl = x.shape[1] // QK_K
    for r in numba.prange(x.shape[0]):
        for ibl in range(nbl):
            if not _superblock_iq1_s(x[r, QK_K * ibl : QK_K * ibl + QK_K], qw[QK_K * ibl : QK_K * ibl + QK_K],
                                     out[r, IQ1_S_TYPE_SIZE * ibl : IQ1_S_TYPE_SIZE * (ibl + 1)], dd[r, ibl : ibl + 1],
                                     index_map, neighbours, grid):
                ok[r] = False


# --- IQ1_M { qs[32]; qh[16]; sc[4] (u16) }: sub-blocks of 16, no separate d ----------------------

# qh bits of a sub-block's two delta signs, by its shift code k: bit 3 the first 8 (k >= 2), bit 7
# the second 8 (k odd)
_IQ1_M_SHIFT_BITS = np.array([0x00, 0x80, 0x08, 0x88], np.int64)


@_jit
def _iq1_m_levels(k, half):
    """The levels of half 0 / 1 of a sub-block with shift code k (0: ++, 1: +-, 2: -+, 3: --)."""
    neg = k >= 2 if half == 0 else k % 2 == 1
    return X_M if neg else X_P


@_jit
def _better(sumqx, sumq2, k, best, k_now):
    """ggml's test of one candidate: a better score sumqx^2 / sumq2 replaces best = [score, scale]."""
    if sumq2 > 0 and sumqx * sumqx > best[0] * sumq2:
        best[1] = sumqx / sumq2
        best[0] = best[1] * sumqx
        return k
    return k_now


@_jit
def _best_split_iq1_m(xb, weight, order, sums, best):
    """Step 1 for 16 values, each half of 8 with its own shift sign: (scale, i1, i2, k).

    Prefix sums per half: with levels v0 = v1 - 1 = v2 - 2 the sum over a split of w x v is
    total * v2 - (prefix at i1) - (prefix at i2), and the same for w v^2 with fixed differences."""
    n = xb.shape[0]
    # prefix sums over the sorted order of w x and w, kept apart for the first (0) and second (1) half
    px0 = sums[0]   # sums (4, n + 1) and best (2,): scratch from the caller
    px1 = sums[1]
    pw0 = sums[2]
    pw1 = sums[3]
    sums[:, 0] = 0
    for j in range(n):
        i = order[j]
        wx = weight[i] * xb[i]
        if i < n // 2:
            px0[j + 1] = px0[j] + wx
            px1[j + 1] = px1[j]
            pw0[j + 1] = pw0[j] + weight[i]
            pw1[j + 1] = pw1[j]
        else:
            px0[j + 1] = px0[j]
            px1[j + 1] = px1[j] + wx
            pw0[j + 1] = pw0[j]
            pw1[j + 1] = pw1[j] + weight[i]
    p2 = X_P[2]
    m2 = X_M[2]
    cp1 = X_P[0] * X_P[0] - X_P[1] * X_P[1]
    cp2 = X_P[1] * X_P[1] - X_P[2] * X_P[2]
    cm1 = X_M[0] * X_M[0] - X_M[1] * X_M[1]
    cm2 = X_M[1] * X_M[1] - X_M[2] * X_M[2]
    tx0 = px0[n] * p2
    tx0m = px0[n] * m2
    tx1 = px1[n] * p2
    tx1m = px1[n] * m2
    tw0 = pw0[n] * p2 * p2
    tw0m = pw0[n] * m2 * m2
    tw1 = pw1[n] * p2 * p2
    tw1m = pw1[n] * m2 * m2
    best[0] = -FLT_MAX   # the best score and its scale
    best[1] = _abs_max(xb)
    besti1 = -1
    besti2 = -1
    best_k = -1
    for i1 in range(n + 1):
        for i2 in range(i1, n + 1):
            # per half: the sums for the levels with a + and with a - shift (scalars: the hot loop)
            sx0 = px0[i1] + px0[i2]
            sx1 = px1[i1] + px1[i2]
            qx_p0 = tx0 - sx0
            qx_m0 = tx0m - sx0
            qx_p1 = tx1 - sx1
            qx_m1 = tx1m - sx1
            q2_p0 = tw0 + pw0[i1] * cp1 + pw0[i2] * cp2
            q2_m0 = tw0m + pw0[i1] * cm1 + pw0[i2] * cm2
            q2_p1 = tw1 + pw1[i1] * cp1 + pw1[i2] * cp2
            q2_m1 = tw1m + pw1[i1] * cm1 + pw1[i2] * cm2
            # the shift codes in ggml's order: ++, +-, -+, --
            k = _better(qx_p0 + qx_p1, q2_p0 + q2_p1, 0, best, -1)
            k = _better(qx_p0 + qx_m1, q2_p0 + q2_m1, 1, best, k)
            k = _better(qx_m0 + qx_p1, q2_m0 + q2_p1, 2, best, k)
            k = _better(qx_m0 + qx_m1, q2_m0 + q2_m1, 3, best, k)
            if k >= 0:
                besti1 = i1
                besti2 = i2
                best_k = k
    scale = best[1]
    return scale, besti1, besti2, best_k


@_jit
def _superblock_iq1_m(xbl, qwbl, has_qw, ob, dd, index_map, neighbours, grid):
    """One super-block of 256 -> block_iq1_m bytes in ob, but for d's four nibbles in the top bits
    of sc[0..3] (the caller packs them from dd[0]). False when a group found no grid point."""
    weight = np.empty(16, np.float32)
    order = np.empty(16, np.int64)
    L = np.empty(16, np.int64)
    scales = np.zeros(16, np.float32)
    shifts = np.zeros(16, np.int64)
    index = np.empty(2, np.int64)
    sums = np.empty((4, 17), np.float32)
    best = np.empty(2, np.float32)
    sigma2 = _sigma2(xbl)
    max_scale = f32(0)
    for ib in range(16):
        xb = xbl[16 * ib : 16 * ib + 16]
        _weights(xb, qwbl[16 * ib : 16 * ib + 16], has_qw, sigma2, weight)
        if _abs_max(xb) < GROUP_MAX_EPS_IQ1_M:
            continue   # scale 0, shift code 0, indices 0
        _stable_order(xb, order)
        scale, i1, i2, k_best = _best_split_iq1_m(xb, weight, order, sums, best)
        if i1 < 0 or i2 < 0 or k_best < 0:
            continue
        _levels_from_split(order, i1, i2, L)
        if scale < 0:  # mirrored levels, both halves' shift signs flipped
            for j in range(16):
                L[j] = 2 - L[j]
            scale = -scale
            k_best = 3 - k_best
        all_on_grid = True
        for k in range(2):
            g, on = _snap_group(L[8 * k : 8 * k + 8], xb[8 * k : 8 * k + 8], weight[8 * k : 8 * k + 8], scale,
                                _iq1_m_levels(k_best, k), index_map, neighbours, grid)
            if g < 0:
                return False
            all_on_grid = all_on_grid and on
            index[k] = g
        if not all_on_grid:
            sumqx = f32(0)
            sumq2 = f32(0)
            for k in range(2):
                xx = _iq1_m_levels(k_best, k)
                for j in range(8):
                    w = weight[8 * k + j]
                    q = xx[(grid[index[k], j] - 1) // 2]
                    sumqx += w * q * xb[8 * k + j]
                    sumq2 += w * q * q
            if sumqx > 0 and sumq2 > 0:
                scale = sumqx / sumq2
        ob[2 * ib] = index[0] & 255
        ob[2 * ib + 1] = index[1] & 255
        ob[32 + ib] = (index[0] >> 8) | ((index[1] >> 8) << 4)
        scales[ib] = scale
        shifts[ib] = k_best
        max_scale = max(max_scale, scale)
    if max_scale == 0:
        return True
    # 3-bit scale codes against d = max / 15, then d refitted over the whole super-block
    sc = np.zeros(4, np.int64)
    d = max_scale / f32(15)
    id_ = f32(1) / d
    sumqx = f32(0)
    sumq2 = f32(0)
    for ib in range(16):
        l = max(0, min(7, nearest_int(f32(0.5) * (id_ * scales[ib] - f32(1)))))
        sc[ib // 4] |= l << (3 * (ib % 4))
        ob[32 + ib] |= _IQ1_M_SHIFT_BITS[shifts[ib]]
        xb = xbl[16 * ib : 16 * ib + 16]
        _weights(xb, qwbl[16 * ib : 16 * ib + 16], has_qw, sigma2, weight)
        for k in range(2):
            xx = _iq1_m_levels(shifts[ib], k)
            g = int(ob[2 * ib + k]) | ((int(ob[32 + ib]) >> (4 * k)) & 7) << 8
            for j in range(8):
                w = weight[8 * k + j]
                q = xx[(grid[g, j] - 1) // 2] * f32(2 * l + 1)
                sumqx += w * q * xb[8 * k + j]
                sumq2 += w * q * q
    if sumq2 > 0:
        d = sumqx / sumq2
    dd[0] = d * f32(1.1125)   # ggml's fudge factor on the stored d
    for i in range(4):
        ob[48 + 2 * i] = sc[i] & 0xFF
        ob[49 + 2 * i] = (sc[i] >> 8) & 0xFF
    return True


@_par
def _rows_iq1_m(x, qw, has_qw, out, dd, ok, index_map, neighbours, grid):
    nbl = x.shape[1] // QK_K
    for r in numba.prange(x.shape[0]):
        for ibl in range(nbl):
            if not _superblock_iq1_m(x[r, QK_K * ibl : QK_K * ibl + QK_K], qw[QK_K * ibl : QK_K * ibl + QK_K], has_qw,
                                     out[r, IQ1_M_TYPE_SIZE * ibl : IQ1_M_TYPE_SIZE * (ibl + 1)], dd[r, ibl : ibl + 1],
                                     index_map, neighbours, grid):
                ok[r] = False


# --- the public functions --------------------------------------------------------------------


def _check(x: np.ndarray, qw: np.ndarray | None, name: str) -> tuple[np.ndarray, np.ndarray]:
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim != 2 or x.shape[1] % QK_K:
        raise ValueError(f"{name}: rows must be (n, a multiple of {QK_K}), got {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError(f"{name}: the weights have NaN or infinite values")
    # ggml's sigma2 = 2 * sum(x^2) / 256 in float32: past FLT_MAX every weight is inf and its search
    # compares NaNs (ggml then asserts or writes garbage); such a row is refused instead
    sq = 2 * np.square(x, dtype=np.float64).reshape(x.shape[0], -1, QK_K).sum(axis=2)
    if (sq > np.finfo(np.float32).max).any():
        raise ValueError(f"{name}: row {int(np.nonzero((sq > np.finfo(np.float32).max).any(axis=1))[0][0])} has "
                         f"values too large to quantize (their squares overflow float32)")
    if qw is None:
        return x, np.zeros(x.shape[1], np.float32)
    qw = np.ascontiguousarray(qw, dtype=np.float32)
    if qw.shape != (x.shape[1],):
        raise ValueError(f"{name}: importance weights of shape {qw.shape} for rows of {x.shape[1]}")
    if not np.isfinite(qw).all() or (qw < 0).any():
        raise ValueError(f"{name}: importance weights must be finite and >= 0")
    return x, qw


def _to_f16(dd: np.ndarray) -> np.ndarray:
    """The fp16 d values, rounded to nearest even as GGML_FP32_TO_FP16; a d past 65504 (weights
    near 1e18) becomes inf, as in ggml: the format cannot hold it."""
    with np.errstate(over="ignore"):
        return dd.reshape(-1).astype("<f2")


def _finish(name: str, out: np.ndarray, dd: np.ndarray, ok: np.ndarray, d_offset: int, ts: int) -> np.ndarray:
    if not ok.all():
        raise ValueError(f"{name}: row {int(np.nonzero(~ok)[0][0])} is too large to quantize with these "
                         f"importance weights (the weighted errors overflow float32)")
    if d_offset >= 0:
        blocks = out.reshape(-1, ts)
        blocks[:, d_offset : d_offset + 2] = _to_f16(dd).view(np.uint8).reshape(-1, 2)
    return out


def quantize_rows_iq1_s(x: np.ndarray, qw: np.ndarray | None) -> np.ndarray:
    """float32 rows (n, k * 256), importance qw (k * 256,) -> IQ1_S rows (n, k * 50)."""
    if qw is None:
        raise ImatrixRequired("IQ1_S needs an importance matrix: make one with `localinfer imatrix` "
                              "and pass it with --imatrix")
    x, qw = _check(x, qw, "IQ1_S")
    gs = grid_search(T.IQ1_S)
    nbl = x.shape[1] // QK_K
    out = np.zeros((x.shape[0], nbl * IQ1_S_TYPE_SIZE), np.uint8)
    dd = np.zeros((x.shape[0], nbl), np.float32)
    ok = np.ones(x.shape[0], np.bool_)
    _rows_iq1_s(x, qw, out, dd, ok, gs.index_map, gs.neighbours, gs.grid)
    return _finish("IQ1_S", out, dd, ok, 0, IQ1_S_TYPE_SIZE)


def quantize_rows_iq1_m(x: np.ndarray, qw: np.ndarray | None) -> np.ndarray:
    """float32 rows (n, k * 256), importance qw (k * 256,) or None (weights x^2) -> IQ1_M rows (n, k * 56)."""
    has_qw = qw is not None
    x, qw = _check(x, qw, "IQ1_M")
    gs = grid_search(T.IQ1_M)
    nbl = x.shape[1] // QK_K
    out = np.zeros((x.shape[0], nbl * IQ1_M_TYPE_SIZE), np.uint8)
    dd = np.zeros((x.shape[0], nbl), np.float32)
    ok = np.ones(x.shape[0], np.bool_)
    _rows_iq1_m(x, qw, has_qw, out, dd, ok, gs.index_map, gs.neighbours, gs.grid)
    _finish("IQ1_M", out, dd, ok, -1, IQ1_M_TYPE_SIZE)
    # d's fp16 bits, a nibble in the top of each sc[i] (bytes 49, 51, 53, 55), low nibble first
    bits = _to_f16(dd).view(np.uint16)
    blocks = out.reshape(-1, IQ1_M_TYPE_SIZE)
    for i in range(4):
        blocks[:, 49 + 2 * i] |= (((bits >> (4 * i)) & 0xF) << 4).astype(np.uint8)
    return out


def quantize_row_iq1_m(blocks: np.ndarray) -> np.ndarray:
    """Blocks (n, 256) -> IQ1_M blocks (n, 56) without an imatrix (ggml's weights x^2)."""
    return quantize_rows_iq1_m(blocks, None)
