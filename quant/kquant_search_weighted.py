"""The scale searches that take explicit weights (ggml-quants.c), numba-compiled.

``kquant_search`` holds the ones the reference quantizers use (weights fixed to x^2 or
|x|); these take a weight per element, which is how an importance matrix enters:

* ``make_qx_quants_w``: make_qx_quants with rmse_type 1 and ``qw`` given: symmetric quants,
  19 candidate scales, keep the best weighted ``sumlx^2 / suml2``;
* ``make_qp_quants``: non-negative quants of non-negative values (the k-quants' sub-block
  scales and mins), a scale search then up to 5 passes moving single quants;
* ``best_index_int8``: the nearest entry of a sorted non-linear table (IQ4_NL's values).

make_qkx3_quants (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K with weights) is ``kquant_search.make_qkx2_quants``:
the two C functions differ only in ``max == min`` against ``max <= min``, the same test for
finite x.

Float32 arithmetic in ggml's order, ints converted to float32 before they meet a float.
"""
from __future__ import annotations

import numba

from .kquant_search import GROUP_MAX_EPS, _signed_max, f32, nearest_int

_jit = numba.njit(cache=True, nogil=True)


@_jit
def _qx_sums(nmax, x, qw, iscale):
    sumlx = f32(0)
    suml2 = f32(0)
    for i in range(x.shape[0]):
        l = max(-nmax, min(nmax - 1, nearest_int(iscale * x[i])))
        fl = f32(l)
        w = qw[i]
        sumlx += w * x[i] * fl
        suml2 += w * fl * fl
    return sumlx, suml2


@_jit
def _qx_store(nmax, x, iscale, L):
    for i in range(x.shape[0]):
        L[i] = nmax + max(-nmax, min(nmax - 1, nearest_int(iscale * x[i])))


@_jit
def make_qx_quants_w(nmax, x, L, qw):
    """Symmetric quants L in 0..2*nmax-1 (offset nmax) fitting x ~ scale * (L - nmax) under
    weights qw. Returns scale (0 for an all-zero group)."""
    mx, amax = _signed_max(x)
    if amax < GROUP_MAX_EPS:
        L[:] = 0
        return f32(0)
    iscale = f32(-nmax) / mx
    sumlx, suml2 = _qx_sums(nmax, x, qw, iscale)
    _qx_store(nmax, x, iscale, L)
    scale = sumlx / suml2 if suml2 != 0 else f32(0)
    best = scale * sumlx
    for step in range(-9, 10):
        if step == 0:
            continue
        iscale = -(f32(nmax) + f32(0.1) * f32(step)) / mx
        sumlx, suml2 = _qx_sums(nmax, x, qw, iscale)
        if suml2 > 0 and sumlx * sumlx > best * suml2:
            _qx_store(nmax, x, iscale, L)
            scale = sumlx / suml2
            best = scale * sumlx
    return scale


@_jit
def make_qp_quants(nmax, x, L, qw):
    """Quants L in 0..nmax with x ~ scale * L (x >= 0), weights qw. Returns scale."""
    n = x.shape[0]
    mx = f32(0)
    for i in range(n):
        mx = max(mx, x[i])
    if mx < GROUP_MAX_EPS:
        L[:] = 0
        return f32(0)
    iscale = f32(nmax) / mx
    for i in range(n):
        L[i] = nearest_int(iscale * x[i]) & 0xFF  # uint8_t L[i] in C
    scale = f32(1) / iscale
    best_mse = f32(0)
    for i in range(n):
        diff = x[i] - scale * f32(L[i])
        best_mse += qw[i] * diff * diff
    for step in range(-4, 5):
        if step == 0:
            continue
        iscale_is = (f32(0.1) * f32(step) + f32(nmax)) / mx
        scale_is = f32(1) / iscale_is
        mse = f32(0)
        for i in range(n):
            l = min(nmax, nearest_int(iscale_is * x[i]))
            diff = x[i] - scale_is * f32(l)
            mse += qw[i] * diff * diff
        if mse < best_mse:
            best_mse = mse
            iscale = iscale_is
    sumlx = f32(0)
    suml2 = f32(0)
    for i in range(n):
        l = min(nmax, nearest_int(iscale * x[i]))
        L[i] = l & 0xFF
        fl = f32(l)  # C sums the int l, not the uint8 L[i]: they differ for an x < 0 (IQ2_XXS's xval)
        sumlx += qw[i] * x[i] * fl
        suml2 += qw[i] * fl * fl
    for _ in range(5):
        n_changed = 0
        for i in range(n):
            w = qw[i]
            fli = f32(L[i])
            slx = sumlx - w * x[i] * fli
            sl2 = suml2 - w * fli * fli
            if slx > 0 and sl2 > 0:
                new_l = min(nmax, nearest_int(x[i] * sl2 / slx))
                if new_l != L[i]:
                    fnew = f32(new_l)
                    slx += w * x[i] * fnew
                    sl2 += w * fnew * fnew
                    if slx * slx * suml2 > sumlx * sumlx * sl2:
                        L[i] = new_l & 0xFF
                        sumlx = slx
                        suml2 = sl2
                        n_changed += 1
        if n_changed == 0:
            break
    return sumlx / suml2 if suml2 > f32(0) else f32(0)


@_jit
def best_index_int8(values, x):
    """Index of the entry of the sorted table `values` nearest to x (ggml's best_index_int8)."""
    n = values.shape[0]
    if x <= f32(values[0]):
        return 0
    if x >= f32(values[n - 1]):
        return n - 1
    ml = 0
    mu = n - 1
    while mu - ml > 1:
        mav = (ml + mu) // 2
        if x < f32(values[mav]):
            mu = mav
        else:
            ml = mav
    return mu - 1 if x - f32(values[mu - 1]) < f32(values[mu]) - x else mu
