"""KV cache element types: f16, or ggml's q8_0 / q4_0 blocks (llama.cpp's --cache-type-k / -v).

A quantized cache keeps each (position, KV head) row of head_dim values as head_dim / 32 blocks:

    block_q8_0 { f16 d; int8 qs[32] }   34 bytes per 32 values: 34/64 of f16
    block_q4_0 { f16 d; u8 qs[16] }     18 bytes per 32 values: 18/64 of f16 (nibbles, x = (q - 8) * d)

Each new token's row is quantized once when it is stored (ggml's quantize_row_*_ref rounding,
per head: a block never straddles two heads since head_dim is a multiple of 32). The C attention
(csrc/core/attention_kv.c) reads the blocks in place; the numpy reference dequantizes them.

`KVCacheTypes(k, v)` travels where a cache's numpy dtype used to (Model.kv_dtype -> Context /
Engine -> runtime.new_cache -> the cache classes).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ..formats.ggml import GGMLType as T

from ..formats import dequant_basic, quantize_basic

# name (llama.cpp's -ctk / -ctv spelling) -> ggml type
CACHE_TYPES = {"f16": T.F16, "q8_0": T.Q8_0, "q4_0": T.Q4_0}
_BLOCK_BYTES = {"q8_0": 34, "q4_0": 18}  # bytes per block of 32 values
_QUANTIZE = {"q8_0": quantize_basic.quantize_row_q8_0, "q4_0": quantize_basic.quantize_row_q4_0}
_DEQUANTIZE = {"q8_0": dequant_basic.dequantize_row_q8_0, "q4_0": dequant_basic.dequantize_row_q4_0}


class CacheTypeError(ValueError):
    """An unknown KV cache type, or one the model's head size cannot use."""


def check_cache_type(name, what: str = "cache_type_k") -> str:
    """`name` if it is one of CACHE_TYPES, else a CacheTypeError naming `what` and the choices."""
    if not isinstance(name, str) or name not in CACHE_TYPES:
        raise CacheTypeError(f"{what} must be one of {', '.join(CACHE_TYPES)}, got {name!r}")
    return name


@dataclass(frozen=True)
class KVCacheTypes:
    """The element types of a cache's keys and values."""

    k: str = "f16"
    v: str = "f16"

    def __post_init__(self):
        check_cache_type(self.k, "cache_type_k")
        check_cache_type(self.v, "cache_type_v")

    @property
    def quantized(self) -> bool:
        return self.k != "f16" or self.v != "f16"


def row_width(type_name: str, head_dim: int) -> tuple[int, np.dtype]:
    """(last dimension, dtype) of the cache array holding one (position, head) row of `type_name`."""
    if type_name == "f16":
        return head_dim, np.dtype(np.float16)
    if head_dim % 32:
        raise CacheTypeError(f"a {type_name} KV cache needs a head size that is a multiple of 32 "
                             f"(its block size); this model's head_dim is {head_dim}: use f16")
    return head_dim // 32 * _BLOCK_BYTES[type_name], np.dtype(np.uint8)


def bytes_per_value(type_name: str) -> float:
    return 2.0 if type_name == "f16" else _BLOCK_BYTES[type_name] / 32


def quantize_rows(x: np.ndarray, type_name: str, use_c: bool = True) -> np.ndarray:
    """float (..., head_dim) -> the cache's rows (..., row bytes) uint8; on the C kernels when built
    and `use_c` (the same bits as the numpy quantizers: ggml's reference rounding)."""
    from ..backend import kernels
    head_dim = x.shape[-1]
    width, _ = row_width(type_name, head_dim)
    x = np.ascontiguousarray(x, dtype=np.float32)
    if use_c and kernels.available():
        flat = kernels.quantize_kv(x.reshape(-1), CACHE_TYPES[type_name])
    else:
        flat = _QUANTIZE[type_name](x.reshape(-1, 32))
    return flat.reshape(x.shape[:-1] + (width,))


def dequantize_rows(raw: np.ndarray, type_name: str, head_dim: int) -> np.ndarray:
    """The cache's rows (..., row bytes) -> float32 (..., head_dim) (numpy, the oracle's way)."""
    if type_name == "f16":
        return raw.astype(np.float32)
    blocks = np.ascontiguousarray(raw).reshape(-1, _BLOCK_BYTES[type_name])
    return _DEQUANTIZE[type_name](blocks).reshape(raw.shape[:-1] + (head_dim,))


def cache_types(dtype) -> KVCacheTypes | None:
    """The KVCacheTypes a cache was made with, or None for a plain numpy float dtype (f16, f32)."""
    return dtype if isinstance(dtype, KVCacheTypes) else None


def storage(dtype, head_dim: int) -> tuple[tuple[int, np.dtype], tuple[int, np.dtype]]:
    """((last dim, dtype) of K, of V) for a cache made with `dtype` (a numpy dtype or KVCacheTypes)."""
    types = cache_types(dtype)
    if types is None:
        return (head_dim, np.dtype(dtype)), (head_dim, np.dtype(dtype))
    return row_width(types.k, head_dim), row_width(types.v, head_dim)


def cache_rows(x: np.ndarray, type_name: str) -> np.ndarray:
    """New keys or values (n, n_head_kv, head_dim) in the form the cache stores for `type_name`."""
    return x if type_name == "f16" else quantize_rows(x, type_name)
