"""IQ2_XXS, IQ2_XS and IQ2_S quantizers: ggml's quantize_row_iq2_{xxs,xs,s}_impl (ggml-quants.c).

Each group of 8 weights is stored as |x| on a grid point (``grid_search``'s tables) and 8 signs;
per sub-block (32 elements in IQ2_XXS, 16 in IQ2_XS / IQ2_S) a 4-bit scale times one fp16 d per
256. The search, per sub-block, with error weights ``w = qw * sqrt(sigma2 + x^2)``:

1. signs off: xval = |x|. IQ2_XXS / IQ2_XS store 7 sign bits per group, the 8th implied by an
   even count of minus signs; with an odd count the element of least ``w x^2`` keeps its sign
   (its xval is then negative). IQ2_S stores all 8 signs.
2. try inverse scales ``(5 + 0.1 is) / m`` (IQ2_XXS: is -6..6, m = 3 * make_qp_quants' scale of
   xval with 4 levels; IQ2_XS / IQ2_S: is -9..9, m = max xval): round each xval to a level
   l in 0..2 (position 2l + 1); a group whose levels are no grid point takes the neighbour of
   least error ``sum(sqrt(w) (scale (2l+1) - xval)^2)``; keep the try of best
   ``sumqx^2 / sumq2`` (positions q = 2l + 1), and its least-squares scale;
3. round again with that scale (IQ2_XXS: every group; IQ2_XS / IQ2_S: the groups that were off
   the grid) and refit the scale;
4. d = max scale / 31, each sub-block's 4-bit ls = nearest_int((scale / d - 1) / 2), clamped
   (IQ2_S stores d * 0.9875).

ggml requires importance weights for IQ2_XXS and IQ2_XS (``ggml_quantize_requires_imatrix``);
IQ2_S without them weights by ``sigma2 / 4 + x^2`` (its sigma2 is twice the others').
Contract as quantize_weighted's: float32 rows (n_rows, n_per_row), qw (n_per_row,) -> uint8
(n_rows, row bytes); rows in parallel, each row sequential float32 in ggml's order, so the bytes
are ggml's. Input ggml cannot quantize sensibly (NaN or inf, error weights past float32: ggml
aborts or writes zeros) is an ``IQ2QuantizeError`` (a ValueError) instead.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from gguf import GGMLQuantizationType as T

from localinfer.formats.dequant_grids import IQ2_S_TYPE_SIZE, IQ2_XS_TYPE_SIZE, IQ2_XXS_TYPE_SIZE, QK_K
from .grid_search import find_best_neighbour, grid_search
from .kquant_search import GROUP_MAX_EPS, f32, nearest_int, sum_squares
from .kquant_search_weighted import make_qp_quants

_jit = numba.njit(cache=True, nogil=True)
_par = numba.njit(cache=True, nogil=True, parallel=True)

GROUP_MAX_EPS_IQ2_S = f32(1e-8)
_KMAXQ = 3  # levels 0..2, positions 1, 3, 5

# kernel kinds
_XXS, _XS, _S = 0, 1, 2


class IQ2QuantizeError(ValueError):
    """Input the IQ2 quantizers refuse: NaN or inf, error sums past float32, no importance weights
    for a type that needs them."""


@_jit
def _abs_and_signs(xb, weight, xval, off, even):
    """xval = |x| for the group of 8 at `off`; returns its sign bits (bit i: x[i] < 0). `even`:
    the stored signs must have an even count, so with an odd one the element of least w x^2
    keeps its sign (xval < 0) and only 7 bits are returned."""
    s = 0
    nflip = 0
    for i in range(8):
        v = xb[off + i]
        if v >= 0:
            xval[off + i] = v
        else:
            xval[off + i] = -v
            nflip += 1
            s |= 1 << i
    if not even:
        return s
    if nflip % 2:
        imin = 0
        mn = weight[off] * xb[off] * xb[off]
        for i in range(1, 8):
            ax = weight[off + i] * xb[off + i] * xb[off + i]
            if ax < mn:
                mn = ax
                imin = i
        xval[off + imin] = -xval[off + imin]
        s ^= 1 << imin
    return s & 127


@_jit
def _round_group(xval, off, id_, L):
    """Levels of the group at `off` for inverse scale id_, into L; returns its lattice index."""
    u = 0
    for i in range(8):
        l = nearest_int(f32(0.5) * (id_ * xval[off + i] - f32(1)))
        l = max(0, min(_KMAXQ - 1, l))
        L[off + i] = l
        u |= l << (2 * i)
    return u


@_jit
def _snap_group(xval, waux, off, id_, scale, L, index_map, neighbours, grid):
    """Round the group at `off` and move it onto the grid; returns whether it was on it already,
    or -1 when no neighbour has a finite error."""
    u = _round_group(xval, off, id_, L)
    gi = index_map[u]
    if gi >= 0:
        return 1
    if find_best_neighbour(neighbours, gi, grid, xval[off : off + 8], waux[off : off + 8], scale,
                           L[off : off + 8]) < 0:
        return -1
    return 0


@_jit
def _fit(xval, weight, L):
    """(sumqx, sumq2) of positions q = 2L + 1."""
    sumqx = f32(0)
    sumq2 = f32(0)
    for i in range(xval.shape[0]):
        w = weight[i]
        q = f32(2 * L[i] + 1)
        sumqx += w * xval[i] * q
        sumq2 += w * q * q
    return sumqx, sumq2


@_jit
def _grid_index(L, off, index_map):
    u = 0
    for i in range(8):
        u |= L[off + i] << (2 * i)
    return index_map[u]


# what a sub-block's search returns besides its scale
_OK, _ALL_ZERO, _FAILED = 0, 1, 2


@_jit
def _search_xxs(xval, weight, waux, L, Laux, index_map, neighbours, grid):
    """Steps 2-3 for a sub-block of 32 (IQ2_XXS): (scale, status)."""
    scale = make_qp_quants(_KMAXQ + 1, xval, L, weight)
    eff_max = scale * f32(_KMAXQ)
    if eff_max <= 0:
        return f32(0), _ALL_ZERO
    best = f32(0)
    for is_ in range(-6, 7):
        id_ = (f32(2 * _KMAXQ - 1) + f32(is_) * f32(0.1)) / eff_max
        this_scale = f32(1) / id_
        for k in range(4):
            if _snap_group(xval, waux, 8 * k, id_, this_scale, Laux, index_map, neighbours, grid) < 0:
                return f32(0), _FAILED
        sumqx, sumq2 = _fit(xval, weight, Laux)
        if sumq2 > 0 and sumqx * sumqx > best * sumq2:
            scale = sumqx / sumq2
            best = scale * sumqx
            L[:] = Laux
    if scale > 0:
        id_ = f32(1) / scale
        for k in range(4):
            if _snap_group(xval, waux, 8 * k, id_, scale, L, index_map, neighbours, grid) < 0:
                return f32(0), _FAILED
        sumqx, sumq2 = _fit(xval, weight, L)
        if sumq2 > 0:
            scale = sumqx / sumq2
    return scale, _OK


@_jit
def _search_16(xval, weight, waux, mx, L, Laux, index_map, neighbours, grid):
    """Steps 2-3 for a sub-block of 16 (IQ2_XS, IQ2_S) whose largest xval is mx: (scale, status)."""
    best = f32(0)
    scale = mx / f32(2 * _KMAXQ - 1)
    on_grid0 = True
    on_grid1 = True
    for is_ in range(-9, 10):
        id_ = (f32(2 * _KMAXQ - 1) + f32(is_) * f32(0.1)) / mx
        this_scale = f32(1) / id_
        on0 = _snap_group(xval, waux, 0, id_, this_scale, Laux, index_map, neighbours, grid)
        on1 = _snap_group(xval, waux, 8, id_, this_scale, Laux, index_map, neighbours, grid)
        if on0 < 0 or on1 < 0:
            return f32(0), _FAILED
        sumqx, sumq2 = _fit(xval, weight, Laux)
        if sumq2 > 0 and sumqx * sumqx > best * sumq2:
            scale = sumqx / sumq2
            best = scale * sumqx
            L[:] = Laux
            on_grid0 = on0 == 1
            on_grid1 = on1 == 1
    if (not on_grid0 or not on_grid1) and scale > 0:
        id_ = f32(1) / scale
        for k in range(2):
            if (k == 0 and on_grid0) or (k == 1 and on_grid1):
                continue
            if _snap_group(xval, waux, 8 * k, id_, scale, L, index_map, neighbours, grid) < 0:
                return f32(0), _FAILED
        sumqx, sumq2 = _fit(xval, weight, L)
        if sumq2 > 0:
            scale = sumqx / sumq2
    return scale, _OK


@_jit
def _weights(xb, qw, has_qw, sigma2, weight, waux):
    """The error weights and their square roots; False if one overflows float32 (ggml would go on
    with inf, its sums turn NaN and the sub-block silently becomes zeros: we refuse instead)."""
    for i in range(xb.shape[0]):
        if has_qw:
            weight[i] = qw[i] * f32(math.sqrt(sigma2 + xb[i] * xb[i]))
        else:  # IQ2_S only
            weight[i] = f32(0.25) * sigma2 + xb[i] * xb[i]
        if math.isinf(weight[i]):
            return False
        waux[i] = f32(math.sqrt(weight[i]))
    return True


@_jit
def _sub_scales(scales, max_scale):
    """Step 4: d (unrounded) and the 4-bit ls of each sub-block."""
    d = max_scale / f32(31)
    id_ = f32(1) / d
    ls = np.empty(scales.shape[0], np.int64)
    for ib in range(scales.shape[0]):
        ls[ib] = max(0, min(15, nearest_int(f32(0.5) * (id_ * scales[ib] - f32(1)))))
    return d, ls


@_jit
def _block_iq2_xxs(x, qw, ob, index_map, neighbours, grid):
    """block_iq2_xxs { d; u32 qs[16] }: per 32 elements a u32 of 4 grid indices (bytes) and a u32 of
    4 x 7 sign bits and the 4-bit scale in bits 28..31. Returns (d, ok); ob[0:2] is left for d."""
    weight = np.empty(32, np.float32)
    waux = np.empty(32, np.float32)
    xval = np.empty(32, np.float32)
    L = np.zeros(32, np.int32)
    Laux = np.zeros(32, np.int32)
    scales = np.zeros(8, np.float32)
    q2 = np.zeros(16, np.uint32)
    signs = np.zeros(4, np.int64)
    sigma2 = sum_squares(x) / f32(QK_K)
    max_scale = f32(0)
    for ib in range(8):
        xb = x[32 * ib : 32 * ib + 32]
        if not _weights(xb, qw[32 * ib : 32 * ib + 32], True, sigma2, weight, waux):
            return f32(0), False
        for k in range(4):
            signs[k] = _abs_and_signs(xb, weight, xval, 8 * k, True)
        mx = xval[0]
        for i in range(1, 32):
            mx = max(mx, xval[i])
        if mx < GROUP_MAX_EPS:
            continue
        scale, status = _search_xxs(xval, weight, waux, L, Laux, index_map, neighbours, grid)
        if status == _ALL_ZERO:
            continue
        if status == _FAILED:
            return f32(0), False
        if scale < 0:  # ggml: "should never happen"; the scale is stored unsigned, so flip the signs
            scale = -scale
            for k in range(4):
                signs[k] = ~signs[k] & 127
        if not scale >= 0:  # NaN from overflowing sums: ggml's GGML_ASSERT(scale >= 0) aborts
            return f32(0), False
        for k in range(4):
            gi = _grid_index(L, 8 * k, index_map)
            if gi < 0:
                return f32(0), False
            q2[2 * ib] |= np.uint32(gi) << np.uint32(8 * k)
            q2[2 * ib + 1] |= np.uint32(signs[k]) << np.uint32(7 * k)
        scales[ib] = scale
        max_scale = max(max_scale, scale)
    for j in range(2, ob.shape[0]):
        ob[j] = 0
    if max_scale == 0:
        return f32(0), True
    d, ls = _sub_scales(scales, max_scale)
    for ib in range(8):
        q2[2 * ib + 1] |= np.uint32(ls[ib]) << np.uint32(28)
    for j in range(16):
        for b in range(4):
            ob[2 + 4 * j + b] = (q2[j] >> np.uint32(8 * b)) & np.uint32(0xFF)
    return d, True


@_jit
def _block_iq2_16(x, qw, has_qw, kind, ob, index_map, neighbours, grid):
    """The sub-blocks of 16: IQ2_XS { d; u16 qs[32] = 9-bit grid index | 7 sign bits << 9;
    u8 scales[8] } and IQ2_S { d; u8 qs[32] = grid index bits 0..7; u8 signs[32]; u8 qh[8] = index
    bits 8..9, 2 per group; u8 scales[8] }; 4-bit scales, low nibble first. Returns (d, ok)."""
    weight = np.empty(16, np.float32)
    waux = np.empty(16, np.float32)
    xval = np.empty(16, np.float32)
    L = np.zeros(16, np.int32)
    Laux = np.zeros(16, np.int32)
    scales = np.zeros(16, np.float32)
    signs = np.zeros(2, np.int64)
    xs = kind == _XS
    sign_mask = 127 if xs else 255
    eps = GROUP_MAX_EPS if xs else GROUP_MAX_EPS_IQ2_S
    scales_at = 66 if xs else 74
    sigma2 = sum_squares(x) / f32(QK_K) if xs else f32(2) * sum_squares(x) / f32(QK_K)
    for j in range(2, ob.shape[0]):
        ob[j] = 0
    max_scale = f32(0)
    for ib in range(16):
        xb = x[16 * ib : 16 * ib + 16]
        if not _weights(xb, qw[16 * ib : 16 * ib + 16], has_qw, sigma2, weight, waux):
            return f32(0), False
        for k in range(2):
            signs[k] = _abs_and_signs(xb, weight, xval, 8 * k, xs)
        mx = xval[0]
        for i in range(1, 16):
            mx = max(mx, xval[i])
        L[:] = 0
        if mx < eps:
            continue
        scale, status = _search_16(xval, weight, waux, mx, L, Laux, index_map, neighbours, grid)
        if status == _FAILED:
            return f32(0), False
        if scale < 0:  # ggml: "should never happen"; the scale is stored unsigned, so flip the signs
            scale = -scale
            for k in range(2):
                signs[k] = ~signs[k] & sign_mask
        if not scale >= 0:  # NaN from overflowing sums: ggml's GGML_ASSERT(scale >= 0) aborts
            return f32(0), False
        for k in range(2):
            gi = _grid_index(L, 8 * k, index_map)
            if gi < 0:
                return f32(0), False
            i8 = 2 * ib + k
            if xs:
                q = gi | (signs[k] << 9)
                ob[2 + 2 * i8] = q & 0xFF
                ob[3 + 2 * i8] = q >> 8
            else:
                ob[2 + i8] = gi & 0xFF
                ob[66 + i8 // 4] |= (gi >> 8) << (2 * (i8 % 4))
                ob[34 + i8] = signs[k]
        scales[ib] = scale
        max_scale = max(max_scale, scale)
    if max_scale == 0:
        if xs:  # IQ2_XS clears its indices and signs; IQ2_S keeps what it wrote (ggml does both)
            for j in range(2, 66):
                ob[j] = 0
        return f32(0), True
    d, ls = _sub_scales(scales, max_scale)
    for ib in range(16):
        ob[scales_at + ib // 2] |= ls[ib] << (4 * (ib % 2))
    # IQ2_S stores a slightly smaller d than the one its scales were rounded with (ggml's 0.9875)
    return (d if xs else d * f32(0.9875)), True


@_par
def _rows(x, qw, has_qw, kind, out, dd, ok, index_map, neighbours, grid):
    nb = x.shape[1] // QK_K
    ts = out.shape[1] // nb
    for r in numba.prange(x.shape[0]):
        for ib in range(nb):
            xb = x[r, QK_K * ib : QK_K * ib + QK_K]
            qb = qw[QK_K * ib : QK_K * ib + QK_K]
            ob = out[r, ts * ib : ts * ib + ts]
            if kind == _XXS:
                d, good = _block_iq2_xxs(xb, qb, ob, index_map, neighbours, grid)
            else:
                d, good = _block_iq2_16(xb, qb, has_qw, kind, ob, index_map, neighbours, grid)
            dd[r, ib] = d
            if not good:
                ok[r] = False
                break


# type -> (kernel kind, block bytes, ggml requires importance weights)
_LAYOUTS = {
    T.IQ2_XXS: (_XXS, IQ2_XXS_TYPE_SIZE, True),
    T.IQ2_XS: (_XS, IQ2_XS_TYPE_SIZE, True),
    T.IQ2_S: (_S, IQ2_S_TYPE_SIZE, False),
}
IQ2_TYPES = frozenset(_LAYOUTS)
IQ2_TYPES_REQUIRING_IMATRIX = frozenset(t for t, v in _LAYOUTS.items() if v[2])


def quantize_rows_iq2(x: np.ndarray, qtype: T, qw: np.ndarray | None) -> np.ndarray:
    """float32 rows (n_rows, n_per_row), importance qw (n_per_row,) -> uint8 (n_rows, row bytes).

    qw None only for IQ2_S (ggml refuses the others without importance weights)."""
    qtype = T(qtype)
    kind, ts, needs_qw = _LAYOUTS[qtype]
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim != 2 or x.shape[1] % QK_K:
        raise ValueError(f"{qtype.name}: rows must be (n, a multiple of {QK_K}), got {x.shape}")
    has_qw = qw is not None
    if not has_qw:
        if needs_qw:
            raise IQ2QuantizeError(f"{qtype.name} needs importance weights (an imatrix: --imatrix)")
        qw = np.zeros(x.shape[1], np.float32)
    qw = np.ascontiguousarray(qw, dtype=np.float32)
    if qw.shape != (x.shape[1],):
        raise ValueError(f"importance weights of shape {qw.shape} for rows of {x.shape[1]}")
    for what, a in (("weights", x), ("importance weights", qw)):
        if not np.isfinite(a).all():
            raise IQ2QuantizeError(f"{qtype.name}: the {what} have NaN or infinite values")
    gs = grid_search(qtype)
    nb = x.shape[1] // QK_K
    out = np.zeros((x.shape[0], nb * ts), np.uint8)
    dd = np.zeros((x.shape[0], nb), np.float32)
    ok = np.ones(x.shape[0], np.bool_)
    _rows(x, qw, has_qw, kind, out, dd, ok, gs.index_map, gs.neighbours, gs.grid)
    if not ok.all():
        raise IQ2QuantizeError(f"{qtype.name}: row {int(np.argmin(ok))} cannot be quantized: its error sums "
                               f"overflow float32 (importance values or weights too large)")
    # GGML_FP32_TO_FP16 rounds to nearest even, as astype does
    out.reshape(-1, ts)[:, 0:2] = dd.reshape(-1).astype("<f2").view(np.uint8).reshape(-1, 2)
    return out


def quantize_iq2_xxs(rows: np.ndarray, qw: np.ndarray) -> np.ndarray:
    """Rows (n, a multiple of 256), importance (n_per_row,) -> IQ2_XXS rows."""
    return quantize_rows_iq2(rows, T.IQ2_XXS, qw)


def quantize_iq2_xs(rows: np.ndarray, qw: np.ndarray) -> np.ndarray:
    """Rows (n, a multiple of 256), importance (n_per_row,) -> IQ2_XS rows."""
    return quantize_rows_iq2(rows, T.IQ2_XS, qw)


def quantize_iq2_s(rows: np.ndarray, qw: np.ndarray | None) -> np.ndarray:
    """Rows (n, a multiple of 256), importance (n_per_row,) or None -> IQ2_S rows."""
    return quantize_rows_iq2(rows, T.IQ2_S, qw)


def quantize_row_iq2_s(x: np.ndarray) -> np.ndarray:
    """Blocks (n, 256) -> IQ2_S blocks (n, 82), no imatrix (ggml's quantize_row_iq2_s_ref)."""
    return quantize_rows_iq2(x, T.IQ2_S, None)
