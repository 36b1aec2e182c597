"""numba.cuda kernels of the decode step: the dequantizing GEMV (int8 quants with a scale per group:
Q8_0, Q5_0, Q6_K; 4-bit nibbles with a scale and min per 32: Q4_0, Q4_1, Q4_K; F16), RMSNorm, RoPE,
SwiGLU / GeGLU and attention of one query row over an F16 KV cache.

Each kernel is a direct translation of its numpy reference in backend/ops_reference.py, which the
tests compare it with under the simulator. Launch shapes: a GEMV block of THREADS threads for ROWS
output rows (each row's elements strided over the threads, coalesced, then summed in shared memory);
the vector ops one thread per element; attention one block per query head. The host wrappers check
shapes and dtypes before anything is launched, as the C kernels' Python wrappers do. The sums are
plain shared-memory ones for now; warp shuffles, fused per-layer kernels and a CUDA graph are for
when a device can time them.
"""
from __future__ import annotations

import math

import numpy as np

from . import device

cuda = device.cuda_module()
# a block's threads; a power of two (the tree sum halves it). The simulator runs each thread as a Python
# thread: 8 there keeps a tiny model's forward pass to seconds, and tests the same reductions
THREADS = 8 if device.simulated() else 128
SUM_SLOTS = THREADS + 1   # a block sum's shared slots: a constant, as a device's shared array size must be
# output rows per GEMV block: one on a device (blocks are cheap there); in the simulator, whose cost is
# per block and per barrier, several
ROWS = 16 if device.simulated() else 1
MAX_CTX = 1 << 20


@cuda.jit(device=True)
def _block_sum(shared, value):
    """The sum of `value` over the block's THREADS threads, for every thread (`shared`: THREADS + 1)."""
    t = cuda.threadIdx.x
    shared[t] = value
    cuda.syncthreads()
    if t == 0:
        total = np.float32(0.0)
        for j in range(THREADS):
            total += shared[j]
        shared[THREADS] = total
    cuda.syncthreads()
    total = shared[THREADS]
    cuda.syncthreads()   # before the next use of `shared`
    return total


@cuda.jit
def _gemv_int8(scales, qs, group, x, y):
    """Q8_0, Q5_0, Q6_K uploaded as int8 quants: y[r] = sum_e scales[r, e // group] * qs[r, e] * x[e]"""
    shared = cuda.shared.array(SUM_SLOTS, np.float32)
    for r in range(cuda.blockIdx.x * ROWS, min(y.shape[0], (cuda.blockIdx.x + 1) * ROWS)):
        acc = np.float32(0.0)
        for i in range(cuda.threadIdx.x, x.shape[0], THREADS):
            acc += scales[r, i // group] * np.float32(qs[r, i]) * x[i]
        total = _block_sum(shared, acc)
        if cuda.threadIdx.x == 0:
            y[r] = total


@cuda.jit
def _gemv_nibbles(scales, mins, qs, half, x, y):
    """Q4_0, Q4_1, Q4_K as the file packs them: in each run of 2*half elements, byte j holds element j
    (low nibble) and element half + j (high); element e is scales[r, e // 32] * nibble + mins[r, e // 32]."""
    shared = cuda.shared.array(SUM_SLOTS, np.float32)
    for r in range(cuda.blockIdx.x * ROWS, min(y.shape[0], (cuda.blockIdx.x + 1) * ROWS)):
        acc = np.float32(0.0)
        for i in range(cuda.threadIdx.x, x.shape[0] // 2, THREADS):
            lo_e = 2 * half * (i // half) + i % half
            hi_e = lo_e + half
            byte = qs[r, i]
            lo = np.float32(byte & 0x0F)
            hi = np.float32(byte >> 4)
            acc += (scales[r, lo_e // 32] * lo + mins[r, lo_e // 32]) * x[lo_e]
            acc += (scales[r, hi_e // 32] * hi + mins[r, hi_e // 32]) * x[hi_e]
        total = _block_sum(shared, acc)
        if cuda.threadIdx.x == 0:
            y[r] = total


@cuda.jit
def _gemv_f16(w, x, y):
    shared = cuda.shared.array(SUM_SLOTS, np.float32)
    for r in range(cuda.blockIdx.x * ROWS, min(y.shape[0], (cuda.blockIdx.x + 1) * ROWS)):
        acc = np.float32(0.0)
        for i in range(cuda.threadIdx.x, x.shape[0], THREADS):
            acc += np.float32(w[r, i]) * x[i]
        total = _block_sum(shared, acc)
        if cuda.threadIdx.x == 0:
            y[r] = total


@cuda.jit
def _rms_norm(x, weight, eps, out):
    """One block per row of x (n, dim)."""
    row = cuda.blockIdx.x
    shared = cuda.shared.array(SUM_SLOTS, np.float32)
    acc = np.float32(0.0)
    for i in range(cuda.threadIdx.x, x.shape[1], THREADS):
        acc += x[row, i] * x[row, i]
    scale = np.float32(1.0) / math.sqrt(_block_sum(shared, acc) / x.shape[1] + eps)
    for i in range(cuda.threadIdx.x, x.shape[1], THREADS):
        out[row, i] = x[row, i] * scale * weight[i]


@cuda.jit
def _rope(x, positions, inv_freq, neox):
    """In place on x (n, heads, head_dim): one thread per (token, head, pair)."""
    i = cuda.grid(1)
    n_pairs = inv_freq.shape[0]
    if i >= x.shape[0] * x.shape[1] * n_pairs:
        return
    t, rest = i // (x.shape[1] * n_pairs), i % (x.shape[1] * n_pairs)
    h, p = rest // n_pairs, rest % n_pairs
    a, b = (p, p + n_pairs) if neox else (2 * p, 2 * p + 1)
    angle = positions[t] * inv_freq[p]
    c, s = math.cos(angle), math.sin(angle)
    x0, x1 = x[t, h, a], x[t, h, b]
    x[t, h, a] = x0 * c - x1 * s
    x[t, h, b] = x0 * s + x1 * c


@cuda.jit
def _glu(gate, up, gelu, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        g = gate[i]
        if gelu:   # ggml's gelu, tanh form
            act = np.float32(0.5) * g * (np.float32(1.0) + math.tanh(np.float32(0.7978845608028654) *
                                                                     (g + np.float32(0.044715) * g * g * g)))
        else:      # silu
            act = g / (np.float32(1.0) + math.exp(-g))
        out[i] = act * up[i]


@cuda.jit
def _attention(q, k, v, start, n_past, scale, scores, out):
    """One block per query head h of q (n_head, hd) over positions start..n_past-1 of the caches
    k, v (n_ctx, n_kv_head, hd) f16; scores (n_head, n_ctx) f32 scratch; out (n_head, hd)."""
    h = cuda.blockIdx.x
    kv = h // (q.shape[0] // k.shape[1])   # grouped-query attention: n_head / n_kv_head heads per KV head
    shared = cuda.shared.array(SUM_SLOTS, np.float32)
    t = cuda.threadIdx.x
    best = np.float32(-np.inf)
    for p in range(start + t, n_past, THREADS):
        dot = np.float32(0.0)
        for d in range(q.shape[1]):
            dot += q[h, d] * np.float32(k[p, kv, d])
        dot *= scale
        scores[h, p] = dot
        best = max(best, dot)
    shared[t] = best
    cuda.syncthreads()
    step = THREADS // 2
    while step > 0:
        if t < step:
            shared[t] = max(shared[t], shared[t + step])
        cuda.syncthreads()
        step //= 2
    top = shared[0]
    cuda.syncthreads()
    part = np.float32(0.0)
    for p in range(start + t, n_past, THREADS):
        e = math.exp(scores[h, p] - top)
        scores[h, p] = e
        part += e
    total = _block_sum(shared, part)
    for d in range(t, q.shape[1], THREADS):
        acc = np.float32(0.0)
        for p in range(start, n_past):
            acc += scores[h, p] * np.float32(v[p, kv, d])
        out[h, d] = acc / total


# -- host wrappers --------------------------------------------------------------------------------


def _need(a, name: str, dtype, ndim: int):
    if not hasattr(a, "shape") or len(a.shape) != ndim or np.dtype(a.dtype) != np.dtype(dtype):
        raise ValueError(f"{name} must be a {ndim}-d {np.dtype(dtype).name} array, got "
                         f"{getattr(a, 'dtype', type(a).__name__)} of shape {getattr(a, 'shape', '?')}")


def gemv(weight, x, out=None):
    """weight: a weights.DeviceMatrix; x (k,) f32 on the device -> y (n_out,) f32 on the device,
    written into `out` when given (a (n_out,) f32 device array or a slice of a longer one)."""
    _need(x, "x", np.float32, 1)
    if x.shape[0] != weight.k:
        raise ValueError(f"x has {x.shape[0]} elements, the matrix {weight.k} columns")
    if out is not None:
        _need(out, "out", np.float32, 1)
        if out.shape[0] != weight.n_out:
            raise ValueError(f"out has {out.shape[0]} elements, the matrix {weight.n_out} rows")
    y = cuda.device_array(weight.n_out, np.float32) if out is None else out
    blocks = (weight.n_out + ROWS - 1) // ROWS
    if weight.kind == "int8":
        _gemv_int8[blocks, THREADS](weight.scales, weight.qs, weight.group, x, y)
    elif weight.kind == "nibbles":
        _gemv_nibbles[blocks, THREADS](weight.scales, weight.mins, weight.qs, weight.half, x, y)
    else:
        _gemv_f16[blocks, THREADS](weight.w, x, y)
    return y


def rms_norm(x, weight, eps: float):
    _need(x, "x", np.float32, 2)
    _need(weight, "weight", np.float32, 1)
    if weight.shape[0] != x.shape[1]:
        raise ValueError(f"the norm has {weight.shape[0]} weights for rows of {x.shape[1]}")
    out = cuda.device_array(x.shape, np.float32)
    _rms_norm[x.shape[0], THREADS](x, weight, np.float32(eps), out)
    return out


def rope(x, positions, inv_freq, neox: bool):
    """In place: x (n, heads, head_dim) f32, positions (n,) i32, inv_freq (n_rot/2,) f32."""
    _need(x, "x", np.float32, 3)
    _need(positions, "positions", np.int32, 1)
    _need(inv_freq, "inv_freq", np.float32, 1)
    if positions.shape[0] != x.shape[0] or 2 * inv_freq.shape[0] > x.shape[2]:
        raise ValueError(f"rope: {positions.shape[0]} positions for {x.shape[0]} rows, {2 * inv_freq.shape[0]} "
                         f"rotated dimensions of {x.shape[2]}")
    n = x.shape[0] * x.shape[1] * inv_freq.shape[0]
    if n:
        _rope[(n + THREADS - 1) // THREADS, THREADS](x, positions, inv_freq, bool(neox))
    return x


def glu(gate, up, gelu: bool):
    """silu(gate) * up (SwiGLU) or gelu(gate) * up (GeGLU), over (n,) f32."""
    _need(gate, "gate", np.float32, 1)
    _need(up, "up", np.float32, 1)
    if gate.shape != up.shape:
        raise ValueError(f"gate {gate.shape} and up {up.shape} differ")
    out = cuda.device_array(gate.shape, np.float32)
    if gate.shape[0]:
        _glu[(gate.shape[0] + THREADS - 1) // THREADS, THREADS](gate, up, bool(gelu), out)
    return out


def attention(q, k, v, n_past: int, scale: float, start: int = 0):
    """q (n_head, hd) f32; k, v (n_ctx, n_kv_head, hd) f16 caches holding n_past positions -> (n_head, hd),
    attending to positions start..n_past-1 (a sliding window's first key at start)."""
    _need(q, "q", np.float32, 2)
    _need(k, "k", np.float16, 3)
    _need(v, "v", np.float16, 3)
    if k.shape != v.shape or k.shape[2] != q.shape[1] or q.shape[0] % k.shape[1]:
        raise ValueError(f"attention: q {q.shape}, k {k.shape}, v {v.shape} do not fit together")
    if not 1 <= n_past <= k.shape[0]:
        raise ValueError(f"n_past {n_past} outside 1..{k.shape[0]}")
    if not 0 <= start < n_past:
        raise ValueError(f"first key {start} outside 0..{n_past - 1}")
    scores = cuda.device_array((q.shape[0], k.shape[0]), np.float32)
    out = cuda.device_array(q.shape, np.float32)
    _attention[q.shape[0], THREADS](q, k, v, start, n_past, np.float32(scale), scores, out)
    return out


@cuda.jit
def _add(a, b, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = a[i] + b[i]


@cuda.jit
def _store_kv(k, v, k_cache, v_cache, pos):
    """k, v (n_kv_head, hd) f32 -> row `pos` of the f16 caches."""
    i = cuda.grid(1)
    if i < k.shape[0] * k.shape[1]:
        h, d = i // k.shape[1], i % k.shape[1]
        k_cache[pos, h, d] = k[h, d]
        v_cache[pos, h, d] = v[h, d]


def add(a, b):
    _need(a, "a", np.float32, 1)
    _need(b, "b", np.float32, 1)
    if a.shape != b.shape:
        raise ValueError(f"add: {a.shape} and {b.shape} differ")
    out = cuda.device_array(a.shape, np.float32)
    _add[(a.shape[0] + THREADS - 1) // THREADS, THREADS](a, b, out)
    return out


def store_kv(k, v, k_cache, v_cache, pos: int) -> None:
    _need(k, "k", np.float32, 2)
    _need(v, "v", np.float32, 2)
    if k.shape != v.shape or k_cache.shape[1:] != k.shape or v_cache.shape != k_cache.shape:
        raise ValueError(f"store_kv: k {k.shape}, v {v.shape}, caches {k_cache.shape} {v_cache.shape}")
    if not 0 <= pos < k_cache.shape[0]:
        raise ValueError(f"position {pos} outside the cache's {k_cache.shape[0]}")
    n = k.shape[0] * k.shape[1]
    _store_kv[(n + THREADS - 1) // THREADS, THREADS](k, v, k_cache, v_cache, pos)
