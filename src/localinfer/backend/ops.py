"""The layer ops on the C core, with exactly the signatures of the numpy reference in
`backend/ops_reference.py`, so a model swaps one namespace for the other (`model.ops`) and never branches.

Arguments are checked here before C sees them (dtypes, shapes, contiguity); anything the C
op does not cover (an f32 KV cache, say) goes to the reference.
"""
from __future__ import annotations

import numpy as np

from . import kernels
from . import ops_reference as reference
from ..kv.cache_types import CACHE_TYPES
from .kernels import _check, _ffi, _lib, available  # noqa: F401  (the same compiled module)

rope_freqs = reference.rope_freqs


def batched_rows():
    """Inside: matmul and attention take their many-row paths for any row count (kernels.batched_rows)."""
    return kernels.batched_rows() if available() else reference.batched_rows()


def _gelu_f16_table() -> np.ndarray:
    """(65536,) float32: the reference GELU at every f16 value, rounded to f16 (ggml's table)."""
    x = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    with np.errstate(all="ignore"):
        return reference.gelu_tanh(x).astype(np.float16).astype(np.float32)


GELU_F16_TABLE = _gelu_f16_table()


def _f32(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32)


_ARRAY_TYPES = {p: _ffi.typeof(a) for p, a in
                (("float *", "float[]"), ("void *", "char[]"), ("int64_t *", "int64_t[]"), ("double *", "double[]"))
                } if _ffi is not None else {}
_from_buffer = _ffi.from_buffer if _ffi is not None else None


def _ptr(a: np.ndarray, ctype: str = "float *"):
    """a's buffer (read-only is fine) as a C array of the parameter's element type, which
    converts to the pointer with no cast: a decode step makes ~500 of these, and from_buffer +
    cast, or a keyword argument, cost 2-3x as much per call."""
    return _from_buffer(_ARRAY_TYPES[ctype], a)


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    x, w = _f32(x), _f32(weight)
    dim = x.shape[-1]
    if w.shape != (dim,):
        raise ValueError(f"rms_norm: weight shape {w.shape} does not match rows of {dim}")
    y = np.empty_like(x)
    _check(_lib.li_rms_norm(_ptr(x), _ptr(w), _ptr(y), x.size // dim if dim else 0, dim, float(eps)), "rms_norm")
    return y


def apply_rope(x: np.ndarray, positions: np.ndarray, inv_freq: np.ndarray, neox: bool) -> np.ndarray:
    if x.ndim != 3:
        raise ValueError(f"apply_rope: x must be (n_tokens, n_heads, head_dim), got {x.shape}")
    n, n_head, head_dim = x.shape
    n_rot = 2 * inv_freq.shape[0]
    pos = np.ascontiguousarray(positions, dtype=np.int64)
    if pos.shape != (n,) or n_rot > head_dim:
        raise ValueError(f"apply_rope: {pos.shape} positions for {n} tokens, n_rot {n_rot} > head_dim {head_dim}?")
    out = np.array(x, dtype=np.float32, order="C", copy=True)
    freq = np.ascontiguousarray(inv_freq, dtype=np.float64)
    _check(_lib.li_rope(_ptr(out), n, n_head, head_dim, n_rot, _ptr(pos, "int64_t *"), _ptr(freq, "double *"),
                        int(bool(neox))), "apply_rope")
    return out


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, q_positions: np.ndarray, scale: float,
              kv_dtype=np.float16, sliding_window: int | None = None, softcap: float | None = None,
              key_start: int = 0, kv_types=None, sinks: np.ndarray | None = None) -> np.ndarray:
    # sinks (gpt-oss): (n_head,) logits that join each head's softmax denominator, inside the C softmax
    if kv_types is not None and kv_types.quantized:  # q8_0 / q4_0 rows, read in place by C
        return kernels.attention_kv(_f32(q), k, CACHE_TYPES[kv_types.k], v, CACHE_TYPES[kv_types.v],
                                    np.ascontiguousarray(q_positions, dtype=np.int64), scale,
                                    int(sliding_window or 0), float(softcap or 0.0), int(key_start), sinks)
    if k.dtype != np.float16 or v.dtype != np.float16 or kv_dtype != np.float16:
        return reference.attention(q, k, v, q_positions, scale, kv_dtype, sliding_window, softcap, key_start,
                                   sinks=sinks)
    n, n_head, head_dim = q.shape
    n_kv, n_head_kv, kd = k.shape
    if v.shape != k.shape or kd != head_dim or n_head % n_head_kv:
        raise ValueError(f"attention: q {q.shape}, k {k.shape}, v {v.shape} do not fit together")
    q = _f32(q)
    k, v = np.ascontiguousarray(k), np.ascontiguousarray(v)
    pos = np.ascontiguousarray(q_positions, dtype=np.int64)
    if pos.shape != (n,):
        raise ValueError(f"attention: {pos.shape} positions for {n} queries")
    sinks = kernels.check_sinks(sinks, n_head)
    out = np.empty_like(q)
    rc = _lib.li_attention_f16(_ptr(q), _ptr(k, "void *"), _ptr(v, "void *"), _ptr(out), n, n_head, n_head_kv,
                               head_dim, n_kv, _ptr(pos, "int64_t *"), int(key_start), float(scale),
                               int(sliding_window or 0), float(softcap or 0.0),
                               _ffi.NULL if sinks is None else _ptr(sinks))
    _check(rc, "attention")
    return out


def _view_ptr(a: np.ndarray, ctype: str = "float *"):
    """The address of a's first element, for a strided view cffi's from_buffer refuses; the
    caller keeps `a` alive across the call and tells C the strides."""
    return _ffi.cast(ctype, a.__array_interface__["data"][0])


def _rows(a: np.ndarray) -> tuple[np.ndarray, int]:
    """a as float32 rows whose elements are adjacent -> (2-D array, row stride in floats); a column
    slice of a matrix (one half of a fused gate|up output) is used in place, not copied."""
    a = a.reshape(-1, a.shape[-1]) if a.ndim != 2 else a
    if a.dtype != np.float32 or a.strides[-1] != 4 or a.strides[0] % 4 or a.strides[0] < 4 * a.shape[1]:
        a = np.ascontiguousarray(a, dtype=np.float32)
    return a, a.strides[0] // 4 if a.shape[0] > 1 else a.shape[1]


def _glu(gate: np.ndarray, up: np.ndarray, table, name: str) -> np.ndarray:
    if gate.shape != up.shape:
        raise ValueError(f"{name}: gate {gate.shape} and up {up.shape} differ")
    shape = gate.shape
    g, ldg = _rows(gate)
    u, ldu = _rows(up)
    y = np.empty(shape, np.float32)
    _check(_lib.li_glu(_view_ptr(g), ldg, _view_ptr(u), ldu, _ptr(y), g.shape[0], g.shape[1],
                       _ptr(table) if table is not None else _ffi.NULL), name)
    return y


def geglu(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    return _glu(gate, up, GELU_F16_TABLE, "geglu")


def swiglu(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    return _glu(gate, up, None, "swiglu")


# -- encoders (arch/encoder.py) --

def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, eps: float) -> np.ndarray:
    if np.ndim(x) < 1:  # (np.ascontiguousarray would make it a row of one)
        raise ValueError("layer_norm: x must have rows, got a scalar")
    x, w = _f32(x), _f32(weight)
    dim = x.shape[-1]
    b = None if bias is None else _f32(bias)
    if w.shape != (dim,) or (b is not None and b.shape != (dim,)):
        raise ValueError(f"layer_norm: weight {w.shape} / bias {None if b is None else b.shape} "
                         f"do not match rows of {dim}")
    y = np.empty_like(x)
    _check(_lib.li_layer_norm(_ptr(x), _ptr(w), _ffi.NULL if b is None else _ptr(b), _ptr(y),
                              x.size // dim if dim else 0, dim, float(eps)), "layer_norm")
    return y


def _f32_floats(a: np.ndarray, what: str) -> np.ndarray:
    a = np.asarray(a)
    if not np.issubdtype(a.dtype, np.floating):
        raise ValueError(f"encoder_attention: {what} must hold floats, got {a.dtype}")
    return _f32(a)


def encoder_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, lengths: np.ndarray, scale: float,
                      alibi_slopes: np.ndarray | None = None, n_swa: int = 0) -> np.ndarray:
    if isinstance(n_swa, bool) or not isinstance(n_swa, (int, np.integer)) or n_swa < 0:
        raise ValueError(f"encoder_attention: n_swa must be an integer >= 0 (0: no window), got {n_swa!r}")
    q, k, v = _f32_floats(q, "q"), _f32_floats(k, "k"), _f32_floats(v, "v")
    if q.ndim != 4 or k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"encoder_attention: q {q.shape}, k {k.shape}, v {v.shape} must be one "
                         "(n_batch, n_len, n_head, head_dim) shape")
    n_batch, n_len, n_head, head_dim = q.shape
    lens = np.asarray(lengths)
    if lens.shape != (n_batch,) or not (np.issubdtype(lens.dtype, np.integer) or lens.size == 0):
        raise ValueError(f"encoder_attention: lengths must be {n_batch} integers, got {lens.dtype} {lens.shape}")
    lens = np.ascontiguousarray(lens, dtype=np.int64)
    if lens.size and (lens.min() < 0 or lens.max() > n_len):
        raise ValueError(f"encoder_attention: every length must be in 0..{n_len}, got {lens.min()}..{lens.max()}")
    slopes = None
    if alibi_slopes is not None:
        slopes = _f32_floats(alibi_slopes, "alibi_slopes")
        if slopes.shape != (n_head,):
            raise ValueError(f"encoder_attention: {slopes.shape} ALiBi slopes for {n_head} heads")
    out = np.empty_like(q)
    if out.size == 0:
        return out
    _check(_lib.li_encoder_attention(_ptr(q), _ptr(k), _ptr(v), _ptr(out), n_batch, n_len, n_head, head_dim,
                                     _ptr(lens, "int64_t *"), float(scale),
                                     _ffi.NULL if slopes is None else _ptr(slopes), int(n_swa)),
           "encoder_attention")
    return out


_GELU_BLOCK = 1 << 20  # elements per C call, so that the `up` of ones below stays 4 MiB
_ones_row = np.ones(0, np.float32)


def _ones(n: int) -> np.ndarray:
    """n float32 ones, from one buffer that grows to the largest block asked for (read-only use)."""
    global _ones_row
    ones = _ones_row
    if ones.size < n:
        ones = _ones_row = np.ones(n, np.float32)
    return ones[:n]


def gelu(x: np.ndarray) -> np.ndarray:
    """ggml_gelu (BERT's FFN): li_glu's GELU-table path times an `up` of ones -- the C core has no
    one-input GELU, and multiplying by 1.0 changes no bit, so this is the reference's result, ~10x
    faster than looking the table up in numpy. A block of rows at a time."""
    x = _f32(x)
    rows2d = x.reshape(-1, x.shape[-1]) if x.ndim != 2 else x
    n_rows, n_cols = rows2d.shape
    out = np.empty_like(rows2d)
    if out.size == 0:
        return out.reshape(x.shape)
    block = max(1, _GELU_BLOCK // n_cols)
    ones = _ones(min(block, n_rows) * n_cols)
    for r in range(0, n_rows, block):
        k = min(block, n_rows - r)
        _check(_lib.li_glu(_ptr(rows2d[r:r + k]), n_cols, _ptr(ones), n_cols, _ptr(out[r:r + k]), k, n_cols,
                           _ptr(GELU_F16_TABLE)), "gelu")
    return out.reshape(x.shape)
