"""The scale searches behind the k-quants, numba-compiled (ggml-quants.c's make_*_quants).

Given a small group of weights x (16 or 32), each finds integer quants L and a
scale (and a min) that fit x well:

* ``make_qkx2_quants`` (Q2_K, Q4_K, Q5_K: asymmetric, scale and min): try
  ``nstep + 1`` candidate inverse scales around ``nmax / (max - min)``, solve
  the weighted least-squares scale and min for each rounding, keep the best;
* ``make_qx_quants_rmse1`` (Q6_K: symmetric): try 19 scales around ``-nmax / max``,
  keep the one with the best ``sumlx^2 / suml2`` (weights ``x^2``);
* ``make_q3_quants_rmse`` (Q3_K): symmetric, then up to 5 passes that move single
  quants when that improves the weighted fit.

Every float operation is float32 in ggml's order, an int converted to float32
before it meets a float, as C does; so the results are ggml's, bit for bit.
"""

from __future__ import annotations

import math

import numba
import numpy as np

f32 = np.float32
GROUP_MAX_EPS = f32(1e-15)  # ggml-quants.c: below this a group counts as all zero
_MAGIC = f32(12582912.0)  # 1.5 * 2^23

_jit = numba.njit(cache=True, nogil=True)


@_jit
def sum_squares(x):
    """The float32 sum of x^2 in element order (the sigma2 of ggml's weighted quantizers)."""
    s = f32(0)
    for v in x:
        s += v * v
    return s


@_jit
def nearest_int(v):
    """ggml's nearest_int: round to nearest, ties to even, for |v| < 2^22.

    Adding 1.5 * 2^23 in float32 leaves no fraction bits, so the addition itself
    rounds (to even); subtracting it back is exact. Same trick as ggml, no libm call."""
    return int((v + _MAGIC) - _MAGIC)


@_jit
def fp16_round(v):
    """float32 -> the float32 value of the nearest fp16 (ties to even), as GGML_FP32_TO_FP16."""
    a = abs(float(v))
    if a != a:
        return v
    if a >= 65520.0:
        return f32(math.copysign(math.inf, v))
    if a < 6.103515625e-05:  # below 2^-14: fp16 subnormals, a fixed step of 2^-24
        return f32(math.copysign(np.rint(a * 16777216.0) / 16777216.0, v))
    _, e = math.frexp(a)  # a = m * 2^e, 0.5 <= m < 1; fp16 keeps 11 significant bits
    step = math.ldexp(1.0, e - 11)
    return f32(math.copysign(np.rint(a / step) * step, v))


@_jit
def make_qkx2_quants(nmax, x, weights, L, Laux, rmin, rdelta, nstep, use_mad):
    """Asymmetric quants L in 0..nmax with x ~ scale * L - the_min. Returns (scale, the_min)."""
    n = x.shape[0]
    mn = x[0]
    mx = x[0]
    sum_w = weights[0]
    sum_x = sum_w * x[0]
    for i in range(1, n):
        if x[i] < mn:
            mn = x[i]
        if x[i] > mx:
            mx = x[i]
        w = weights[i]
        sum_w += w
        sum_x += w * x[i]
    if mn > 0:
        mn = f32(0)
    if mx == mn:
        for i in range(n):
            L[i] = 0
        return f32(0), -mn
    iscale = f32(nmax) / (mx - mn)
    scale = f32(1) / iscale
    best_error = f32(0)
    for i in range(n):
        l = nearest_int(iscale * (x[i] - mn))
        L[i] = max(0, min(nmax, l))
        diff = scale * f32(L[i]) + mn - x[i]
        diff = abs(diff) if use_mad else diff * diff
        best_error += weights[i] * diff
    if nstep < 1:
        return scale, -mn
    for step in range(nstep + 1):
        iscale = (rmin + rdelta * f32(step) + f32(nmax)) / (mx - mn)
        sum_l = f32(0)
        sum_l2 = f32(0)
        sum_xl = f32(0)
        for i in range(n):
            l = max(0, min(nmax, nearest_int(iscale * (x[i] - mn))))
            Laux[i] = l
            w = weights[i]
            fl = f32(l)
            sum_l += w * fl
            sum_l2 += w * fl * fl
            sum_xl += w * fl * x[i]
        D = sum_w * sum_l2 - sum_l * sum_l
        if D > 0:
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / D
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D
            if this_min > 0:
                this_min = f32(0)
                this_scale = sum_xl / sum_l2
            cur_error = f32(0)
            for i in range(n):
                diff = this_scale * f32(Laux[i]) + this_min - x[i]
                diff = abs(diff) if use_mad else diff * diff
                cur_error += weights[i] * diff
            if cur_error < best_error:
                for i in range(n):
                    L[i] = Laux[i]
                best_error = cur_error
                scale = this_scale
                mn = this_min
    return scale, -mn


@_jit
def _signed_max(x):
    """(the element of largest magnitude, that magnitude); the first one on ties."""
    mx = f32(0)
    amax = f32(0)
    for i in range(x.shape[0]):
        ax = abs(x[i])
        if ax > amax:
            amax = ax
            mx = x[i]
    return mx, amax


@_jit
def _signed_sums(nmax, x, iscale, L, offset, store):
    """l = clamp(round(iscale * x), -nmax, nmax - 1) per element (into L as l + offset when
    `store`) -> (sum w x l, sum w l^2) with weights w = x^2."""
    sumlx = f32(0)
    suml2 = f32(0)
    for i in range(x.shape[0]):
        l = max(-nmax, min(nmax - 1, nearest_int(iscale * x[i])))
        if store:
            L[i] = l + offset
        w = x[i] * x[i]
        fl = f32(l)
        sumlx += w * x[i] * fl
        suml2 += w * fl * fl
    return sumlx, suml2


@_jit
def make_qx_quants_rmse1(nmax, x, L):
    """Symmetric quants L in 0..2*nmax-1 (offset nmax), weights x^2 (ggml's rmse_type 1). Returns scale."""
    mx, amax = _signed_max(x)
    if amax < GROUP_MAX_EPS:
        L[:] = 0
        return f32(0)
    sumlx, suml2 = _signed_sums(nmax, x, f32(-nmax) / mx, L, nmax, True)
    scale = sumlx / suml2 if suml2 != 0 else f32(0)
    best = scale * sumlx
    for step in range(-9, 10):
        if step == 0:
            continue
        iscale = -(f32(nmax) + f32(0.1) * f32(step)) / mx
        sumlx, suml2 = _signed_sums(nmax, x, iscale, L, nmax, False)
        if suml2 > 0 and sumlx * sumlx > best * suml2:
            _signed_sums(nmax, x, iscale, L, nmax, True)
            scale = sumlx / suml2
            best = scale * sumlx
    return scale


@_jit
def make_q3_quants_rmse(nmax, x, L):
    """Symmetric quants L in 0..2*nmax-1 refined element by element (weights x^2). Returns scale."""
    n = x.shape[0]
    mx, amax = _signed_max(x)
    if amax < GROUP_MAX_EPS:
        L[:] = 0
        return f32(0)
    sumlx, suml2 = _signed_sums(nmax, x, f32(-nmax) / mx, L, 0, True)
    for _ in range(5):
        n_changed = 0
        for i in range(n):
            w = x[i] * x[i]
            fli = f32(L[i])
            slx = sumlx - w * x[i] * fli
            if slx > 0:
                sl2 = suml2 - w * fli * fli
                new_l = max(-nmax, min(nmax - 1, nearest_int(x[i] * sl2 / slx)))
                if new_l != L[i]:
                    fnew = f32(new_l)
                    slx += w * x[i] * fnew
                    sl2 += w * fnew * fnew
                    if sl2 > 0 and slx * slx * suml2 > sumlx * sumlx * sl2:
                        L[i] = new_l
                        sumlx = slx
                        suml2 = sl2
                        n_changed += 1
        if n_changed == 0:
            break
    for i in range(n):
        L[i] += nmax
    return sumlx / suml2 if suml2 > 0 else f32(0)
