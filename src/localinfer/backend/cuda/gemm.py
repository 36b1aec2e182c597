"""The prefill matmul on the device: Y (m, n_out) = X (m, k) . W^T for a weights.DeviceMatrix W of any kind,
dequantizing tiles of W into shared memory (each weight element is read and dequantized once per TILE rows
of X, not once per row as m GEMVs would).

A block of TILE x TILE threads owns a TILE x TILE tile of Y: thread (tx, ty) the row i0 + ty, output j0 + tx.
For each TILE-wide slice of k the block loads TILE weight rows' elements (dequantized) and TILE rows of X
into shared memory, then every thread sums its row's slice against its output's. The element readers are
the GEMV's formulas (kernels.py) for one element.
"""
from __future__ import annotations

import numpy as np

from . import device
from .kernels import _need, cuda

# 16 x 16 threads on a device; in the simulator, where each thread is a Python thread, 4 x 4 (the same code)
TILE = 4 if device.simulated() else 16


@cuda.jit(device=True)
def _int8_at(scales, mins, qs, w, p, r, e):
    """Q8_0 / Q5_0 / Q6_K as int8 quants, p = elements per scale"""
    return scales[r, e // p] * np.float32(qs[r, e])


@cuda.jit(device=True)
def _nibbles_at(scales, mins, qs, w, p, r, e):
    """Q4_0 / Q4_1 / Q4_K as the file packs them, p = half (weights.py)"""
    inner = e % (2 * p)
    byte = qs[r, (e // (2 * p)) * p + inner % p]
    nib = np.float32(byte & 0x0F) if inner < p else np.float32(byte >> 4)
    return scales[r, e // 32] * nib + mins[r, e // 32]


@cuda.jit(device=True)
def _f16_at(scales, mins, qs, w, p, r, e):
    return np.float32(w[r, e])


def _make(element):
    @cuda.jit
    def kernel(scales, mins, qs, w, p, x, y):
        ws = cuda.shared.array((TILE, TILE), np.float32)   # (output, k) of this slice, dequantized
        xs = cuda.shared.array((TILE, TILE), np.float32)   # (row, k)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        j0, i0 = cuda.blockIdx.x * TILE, cuda.blockIdx.y * TILE
        m, n_out, k = x.shape[0], y.shape[1], x.shape[1]
        acc = np.float32(0.0)
        for k0 in range(0, k, TILE):
            # thread (tx, ty) loads weight row j0 + ty and x row i0 + ty at column k0 + tx
            wr, xr, col = j0 + ty, i0 + ty, k0 + tx
            ws[ty, tx] = element(scales, mins, qs, w, p, wr, col) if wr < n_out and col < k else np.float32(0.0)
            xs[ty, tx] = x[xr, col] if xr < m and col < k else np.float32(0.0)
            cuda.syncthreads()
            for t in range(TILE):
                acc += xs[ty, t] * ws[tx, t]
            cuda.syncthreads()
        if i0 + ty < m and j0 + tx < n_out:
            y[i0 + ty, j0 + tx] = acc
    return kernel


_KERNELS = {"int8": _make(_int8_at), "nibbles": _make(_nibbles_at), "f16": _make(_f16_at)}
_NONE = None   # a 2-d placeholder for the arrays a kind does not have (made on first use)


def gemm(weight, x):
    """weight: a weights.DeviceMatrix; x (m, k) f32 on the device -> (m, n_out) f32 on the device."""
    global _NONE
    _need(x, "x", np.float32, 2)
    if x.shape[1] != weight.k:
        raise ValueError(f"x has rows of {x.shape[1]}, the matrix {weight.k} columns")
    if weight.kind not in _KERNELS:
        raise ValueError(f"no GEMM for weights of kind {weight.kind!r}")
    if _NONE is None:
        _NONE = cuda.to_device(np.zeros((1, 1), np.float32))
    m = x.shape[0]
    y = cuda.device_array((m, weight.n_out), np.float32)
    if m == 0:
        return y
    none = _NONE
    p = weight.group if weight.kind == "int8" else weight.half
    grid = ((weight.n_out + TILE - 1) // TILE, (m + TILE - 1) // TILE)
    _KERNELS[weight.kind][grid, (TILE, TILE)](
        weight.scales if weight.scales is not None else none, weight.mins if weight.mins is not None else none,
        weight.qs if weight.qs is not None else none, weight.w if weight.w is not None else none, p, x, y)
    return y


@cuda.jit
def _add_bias(y, b):
    i = cuda.grid(1)
    if i < y.shape[0] * y.shape[1]:
        y[i // y.shape[1], i % y.shape[1]] += b[i % y.shape[1]]


def add_bias(y, b) -> None:
    """In place: y (m, n) f32 += b (n,) f32 on every row."""
    _need(y, "y", np.float32, 2)
    _need(b, "b", np.float32, 1)
    if b.shape[0] != y.shape[1]:
        raise ValueError(f"a bias of {b.shape[0]} for rows of {y.shape[1]}")
    n = y.shape[0] * y.shape[1]
    if n:
        _add_bias[(n + TILE * TILE - 1) // (TILE * TILE), TILE * TILE](y, b)
