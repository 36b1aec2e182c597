"""Quantizers for the 3-bit grid i-quants IQ3_XXS and IQ3_S (ggml-quants.c's quantize_row_iq3_*_impl).

Each group of 4 elements becomes one point of a fixed grid (256 points for IQ3_XXS, 512 for IQ3_S)
whose coordinates are odd levels 2l+1, l in 0..7, times a per-32 scale, with the signs stored
apart. Per sub-block of 32 elements the search is:

1. signs out: xval = |x|. IQ3_XXS stores 7 sign bits per 8 elements (the 8th is implied: the count
   of minus signs is even), so with an odd count the element of least weight*x^2 keeps the wrong
   sign (its xval turns negative);
2. for 31 (IQ3_XXS) or 19 (IQ3_S) inverse scales (15 + 0.2 * is) / max: round each element to a
   level, look the group of 4 up in the lattice map, and if it is not a grid point take the
   nearest of its precomputed neighbours (weighted distance, weights sqrt(w)); keep the rounding
   with the best weighted least-squares fit sumqx^2 / sumq2;
3. with the best scale, re-round the groups that were off the grid (IQ3_S: all groups) and fit the
   scale once more;
4. per super-block of 256: d = max scale / 31 (times 1.0125 or 1.033, ggml's fudge factors) and a
   4-bit scale per sub-block.

The weights are qw[j] * sqrt(sigma2 + x[j]^2) with an importance matrix (sigma2 = 2 * mean square of
the super-block), x^2 without one. Every float operation is float32 in ggml's order, so the bytes are
ggml's (ggml's qsort of neighbours orders by (distance, index), so there are no ties left to chance).

Layouts (see dequant_grids): IQ3_XXS { d; u8 qs[64]; u32 scales_signs[8] } = 98,
IQ3_S { d; u8 qs[64]; u8 qh[8]; u8 signs[32]; u8 scales[4] } = 110.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from gguf import GGMLQuantizationType as T

from localinfer.formats.dequant_grids import IQ3_S_TYPE_SIZE, IQ3_XXS_TYPE_SIZE, QK_K
from .grid_search import grid_search
from .kquant_search import f32, sum_squares

_jit = numba.njit(cache=True, nogil=True)
_par = numba.njit(cache=True, nogil=True, parallel=True)

_MAGIC = f32(12582912.0)  # 1.5 * 2^23
_KMAXQ = 8  # levels per coordinate
_FLT_MAX = f32(3.4028234663852886e38)
GROUP_MAX_EPS_IQ3_XXS = f32(1e-8)  # ggml-quants.c: an IQ3_XXS sub-block below this is all zero
_FUDGE_XXS, _FUDGE_S = f32(1.0125), f32(1.033)  # ggml: "small improvement via this fudge factor"


@_jit
def nearest_int_bits(v):
    """ggml's nearest_int, including what it returns outside |v| < 2^22 (ggml does not check there).

    ggml adds 1.5 * 2^23 and reads the low 23 bits of the float as the integer: exact rounding
    (ties to even) for |v| < 2^22; beyond that it is the sum's mantissa field minus 2^22, which a
    2nd pass over a scale from near-zero weights can meet. Clamped to 0..7 afterwards, so the
    difference matters for the bytes."""
    r = v + _MAGIC
    if abs(v) < f32(4194303.5):
        return int(r - _MAGIC)
    if r != r:  # the quiet NaN of an invalid operation: mantissa field 2^22
        return 0
    a = abs(float(r))
    if a == 0.0 or a == math.inf:
        return -4194304
    m, _ = math.frexp(a)  # a = m * 2^e, 0.5 <= m < 1: mantissa field (2m - 1) * 2^23
    return int((2.0 * m - 1.0) * 8388608.0) - 4194304


@_jit
def _level(id_, v):
    """The level 0..7 nearest to v at inverse scale id_: coordinate 2l+1 ~ id_ * v."""
    return max(0, min(_KMAXQ - 1, nearest_int_bits(f32(0.5) * (id_ * v - f32(1)))))


@_jit
def _lattice_index(L, o):
    return L[o] | (L[o + 1] << 3) | (L[o + 2] << 6) | (L[o + 3] << 9)


@_jit
def _nearest_on_grid(gs_grid, index_map, neighbours, u, xval, waux, o, scale, L):
    """iq3_find_best_neighbour: of the grid points listed for off-grid lattice point u, the one that
    fits xval[o:o+4] best at `scale` (error weighted by waux, the first of equals); its levels go to
    L[o:o+4]. -1 (ggml aborts there) when every candidate's error is inf or NaN: weights too large
    for float32. grid_search.find_best_neighbour's search, on offsets instead of slices: numba's
    slice views in this innermost loop made the whole quantizer twice as slow."""
    start = -index_map[u] - 1
    best_d2 = _FLT_MAX
    best = -1
    for j in range(1, int(neighbours[start]) + 1):
        g = int(neighbours[start + j])
        d2 = f32(0)
        for i in range(4):
            diff = scale * f32(gs_grid[g, i]) - xval[o + i]
            d2 += waux[o + i] * diff * diff
        if d2 < best_d2:
            best_d2 = d2
            best = g
    if best < 0:
        return -1
    for i in range(4):
        L[o + i] = (gs_grid[best, i] - 1) // 2
    return best


@_jit
def _fit(weight, xval, L):
    """Weighted least squares of xval against the coordinates 2L+1: (sumqx, sumq2)."""
    sumqx = f32(0)
    sumq2 = f32(0)
    for i in range(xval.shape[0]):
        q = f32(2 * L[i] + 1)
        sumqx += weight[i] * xval[i] * q
        sumq2 += weight[i] * q * q
    return sumqx, sumq2


@_jit
def _take_signs(xb, weight, xval, signs, even_signs):
    """xval = |xb|, one sign byte per 8 (bit i: element i negative). With even_signs (IQ3_XXS: 7
    stored bits) an odd count of minus signs leaves the least important element's sign wrong."""
    for k in range(xb.shape[0] // 8):
        s = 0
        nflip = 0
        for i in range(8):
            v = xb[8 * k + i]
            if v >= 0:
                xval[8 * k + i] = v
            else:
                xval[8 * k + i] = -v
                nflip += 1
                s |= 1 << i
        if even_signs and nflip % 2:
            imin = 0
            vmin = weight[8 * k] * xb[8 * k] * xb[8 * k]
            for i in range(1, 8):
                a = weight[8 * k + i] * xb[8 * k + i] * xb[8 * k + i]
                if a < vmin:
                    vmin = a
                    imin = i
            xval[8 * k + imin] = -xval[8 * k + imin]
            s ^= 1 << imin
        signs[k] = s & 127 if even_signs else s


@_jit
def _sub_block(tables, xval, vmax, weight, waux, L, Laux, gidx, xxs):
    """Steps 2 and 3 for one sub-block of 32 (vmax: the largest xval, > 0): fills L with levels and gidx with
    the 8 grid indices. Returns (scale, ok): the scale is >= 0 except in cases ggml calls impossible;
    not ok where ggml would abort (float32 overflow), L and gidx then unusable."""
    gs_grid, kmap, neighbours = tables
    on_grid = np.empty(8, np.bool_)
    on_grid_aux = np.empty(8, np.bool_)
    on_grid[:] = xxs  # ggml starts IQ3_XXS "all on the grid", IQ3_S "all off"
    best = f32(0)
    ok = True
    scale = vmax / f32(2 * _KMAXQ - 1)
    n_steps = 15 if xxs else 9
    for is_ in range(-n_steps, n_steps + 1):
        id_ = (f32(2 * _KMAXQ - 1) + f32(is_) * f32(0.2)) / vmax
        this_scale = f32(1) / id_
        for k in range(8):
            for i in range(4):
                Laux[4 * k + i] = _level(id_, xval[4 * k + i])
            u = _lattice_index(Laux, 4 * k)
            on_grid_aux[k] = kmap[u] >= 0
            if not on_grid_aux[k]:
                ok &= _nearest_on_grid(gs_grid, kmap, neighbours, u, xval, waux, 4 * k, this_scale, Laux) >= 0
        sumqx, sumq2 = _fit(weight, xval, Laux)
        if sumq2 > 0 and sumqx * sumqx > best * sumq2:
            scale = sumqx / sumq2
            best = scale * sumqx
            L[:] = Laux
            on_grid[:] = on_grid_aux
    if not on_grid.all() and scale > 0:
        id_ = f32(1) / scale
        for k in range(8):
            if xxs and on_grid[k]:  # IQ3_S redoes every group
                continue
            for i in range(4):
                L[4 * k + i] = _level(id_, xval[4 * k + i])
            u = _lattice_index(L, 4 * k)
            if kmap[u] < 0:
                ok &= _nearest_on_grid(gs_grid, kmap, neighbours, u, xval, waux, 4 * k, scale, L) >= 0
        sumqx, sumq2 = _fit(weight, xval, L)
        if sumq2 > 0:
            scale = sumqx / sumq2
    for k in range(8):
        gidx[k] = kmap[_lattice_index(L, 4 * k)]
        ok &= gidx[k] >= 0
    return scale, ok


@_jit
def _super_block(tables, x, qw, has_qw, xxs, ob, dd):
    """One super-block of 256 into ob (its bytes after d, zeroed by the caller); dd[0] = d unrounded.
    False where ggml would abort: the weighted errors overflow float32."""
    sigma2 = f32(2) * sum_squares(x[:QK_K]) / f32(QK_K)
    weight = np.empty(32, np.float32)
    waux = np.empty(32, np.float32)
    xval = np.empty(32, np.float32)
    L = np.zeros(32, np.int32)
    Laux = np.zeros(32, np.int32)
    gidx = np.zeros(8, np.int32)
    signs = np.zeros(4, np.int32)
    scales = np.zeros(8, np.float32)
    max_scale = f32(0)
    pos = 0  # IQ3_S: where the next sub-block's qs / signs go (see below)
    for ib in range(8):
        xb = x[32 * ib : 32 * ib + 32]
        for i in range(32):
            if has_qw:
                weight[i] = qw[32 * ib + i] * f32(math.sqrt(sigma2 + xb[i] * xb[i]))
            else:
                weight[i] = xb[i] * xb[i]
            waux[i] = f32(math.sqrt(weight[i]))
        _take_signs(xb, weight, xval, signs, xxs)
        vmax = xval[0]
        for i in range(1, 32):
            vmax = vmax if vmax > xval[i] else xval[i]
        L[:] = 0
        # An empty sub-block is skipped. In IQ3_S ggml then also skips advancing its qs / signs
        # pointers, so the following sub-blocks' indices and signs land 8 / 4 bytes early while their
        # qh bits and scales stay in place: kept, because the bytes must be ggml's.
        if (xxs and vmax < GROUP_MAX_EPS_IQ3_XXS) or (not xxs and vmax == 0):
            scales[ib] = 0
            continue
        scale, ok = _sub_block(tables, xval, vmax, weight, waux, L, Laux, gidx, xxs)
        if not ok:
            return False
        if scale < 0:  # ggml: "should never happen"; the stored scale is unsigned, so flip the signs
            scale = -scale
            for k in range(4):
                signs[k] = ~signs[k] & (127 if xxs else 255)
        if xxs:  # qs[8*ib + k]: 8-bit indices; u32 at 64 + 4*ib: signs, 4-bit scale added below
            for k in range(8):
                ob[8 * ib + k] = gidx[k]
            ss = signs[0] | (signs[1] << 7) | (signs[2] << 14) | (signs[3] << 21)
            for b in range(4):
                ob[64 + 4 * ib + b] = (ss >> (8 * b)) & 0xFF
        else:  # qs[64]; qh[8] at 64 (bit 8 of each index); signs[32] at 72
            for k in range(8):
                ob[8 * pos + k] = gidx[k] & 255
                ob[64 + ib] |= (gidx[k] >> 8) << k
            for k in range(4):
                ob[72 + 4 * pos + k] = signs[k]
            pos += 1
        scales[ib] = scale
        max_scale = max_scale if max_scale > scale else scale
    if max_scale == 0:  # IQ3_XXS clears the whole block; IQ3_S keeps what its sub-blocks wrote
        if xxs:
            ob[:] = 0
        return True
    d = max_scale / f32(31)
    dd[0] = d * (_FUDGE_XXS if xxs else _FUDGE_S)
    id_ = f32(1) / d
    for ib in range(8):
        l = max(0, min(15, nearest_int_bits(f32(0.5) * (id_ * scales[ib] - f32(1)))))
        if xxs:
            ob[64 + 4 * ib + 3] |= l << 4
        elif ib % 2 == 0:
            ob[104 + ib // 2] = l
        else:
            ob[104 + ib // 2] |= l << 4
    return True


@_par
def _rows(tables, x, qw, has_qw, xxs, out, dd, failed):
    nb = x.shape[1] // QK_K
    ts = out.shape[1] // nb
    for r in numba.prange(x.shape[0]):
        for ib in range(nb):
            if not _super_block(tables, x[r, QK_K * ib : QK_K * ib + QK_K], qw[QK_K * ib : QK_K * ib + QK_K], has_qw,
                                xxs, out[r, ts * ib + 2 : ts * ib + ts], dd[r, ib]):
                failed[r] = True
                break


_TYPE_SIZES = {T.IQ3_XXS: IQ3_XXS_TYPE_SIZE, T.IQ3_S: IQ3_S_TYPE_SIZE}
IQ3_TYPES = frozenset(_TYPE_SIZES)


def quantize_rows_iq3(x: np.ndarray, qtype: T, qw: np.ndarray | None = None) -> np.ndarray:
    """float32 rows (n_rows, n_per_row), optional importance qw (n_per_row,) -> uint8 (n_rows, row bytes).

    Raises ValueError for rows that are not whole super-blocks of 256, hold NaN / inf (ggml would
    read garbage from its tables there) or values so large that the weighted errors overflow float32
    (ggml aborts) or the fp16 scale does (llama-quantize refuses), and for a qw of the wrong shape or
    with non-finite values."""
    qtype = T(qtype)
    ts = _TYPE_SIZES[qtype]
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim != 2 or x.shape[1] % QK_K:
        raise ValueError(f"{qtype.name}: rows must be (n, a multiple of {QK_K}), got {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError(f"{qtype.name}: cannot quantize NaN or infinite weights")
    has_qw = qw is not None
    qw = np.zeros(x.shape[1], np.float32) if qw is None else np.ascontiguousarray(qw, dtype=np.float32)
    if qw.shape != (x.shape[1],):
        raise ValueError(f"importance weights of shape {qw.shape} for rows of {x.shape[1]}")
    if not np.isfinite(qw).all():
        raise ValueError(f"{qtype.name}: the importance weights have NaN or infinite values")
    nb = x.shape[1] // QK_K
    out = np.zeros((x.shape[0], nb * ts), np.uint8)
    dd = np.zeros((x.shape[0], nb, 1), np.float32)
    gs = grid_search(qtype)
    failed = np.zeros(x.shape[0], np.bool_)
    _rows((gs.grid, gs.index_map, gs.neighbours), x, qw, has_qw, qtype == T.IQ3_XXS, out, dd, failed)
    if failed.any():
        raise ValueError(f"{qtype.name}: row {int(np.argmax(failed))} of the {x.shape[0]} x {x.shape[1]} input has "
                         f"values too large to quantize: its weighted errors overflow float32 (llama.cpp aborts)")
    with np.errstate(over="ignore"):
        d16 = dd.reshape(-1).astype("<f2")  # rounds to even, as ggml
    if not np.isfinite(d16).all():
        row = int(np.argmax(~np.isfinite(d16))) // nb
        raise ValueError(f"{qtype.name}: row {row} of the {x.shape[0]} x {x.shape[1]} input has values too large "
                         f"for the fp16 scale (llama-quantize's validation refuses the result too)")
    out.reshape(-1, ts)[:, 0:2] = d16.view(np.uint8).reshape(-1, 2)
    return out


def quantize_row_iq3_xxs(x: np.ndarray) -> np.ndarray:
    """Blocks (n, 256) -> IQ3_XXS blocks (n, 98), no imatrix (weights x^2)."""
    return quantize_rows_iq3(x, T.IQ3_XXS)


def quantize_row_iq3_s(x: np.ndarray) -> np.ndarray:
    """Blocks (n, 256) -> IQ3_S blocks (n, 110), no imatrix (weights x^2)."""
    return quantize_rows_iq3(x, T.IQ3_S)


def quantize_iq3_xxs(x: np.ndarray, qw: np.ndarray) -> np.ndarray:
    """Rows (n, n_per_row) with importance weights (n_per_row,) -> IQ3_XXS rows."""
    return quantize_rows_iq3(x, T.IQ3_XXS, qw)


def quantize_iq3_s(x: np.ndarray, qw: np.ndarray) -> np.ndarray:
    """Rows (n, n_per_row) with importance weights (n_per_row,) -> IQ3_S rows."""
    return quantize_rows_iq3(x, T.IQ3_S, qw)
