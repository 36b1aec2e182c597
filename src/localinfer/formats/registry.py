"""The quant formats registry: one ``QuantFormat`` per GGML tensor type we can read.

Like ggml's ``type_traits`` table: block size, bytes per block and a
``to_float`` for each type, so adding a type is one entry here plus its
dequantizer, and ``tests/quant/test_dequant.py`` picks it up automatically. The
type always comes from GGUF metadata (``formats.ggml.GGMLType``); an
unknown or unsupported one is an ``UnsupportedQuantType`` naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from .ggml import GGMLType as T

from . import dequant_basic as basic
from . import dequant_grids as grid
from . import dequant_kquants as kq
from . import dequant_tables as tab
from . import dequant_ternary as tern


class UnsupportedQuantType(ValueError):
    """A tensor type that localinfer cannot dequantize (yet)."""


class ImatrixRequired(ValueError):
    """A type that ggml quantizes only with importance weights (IQ1_S, IQ2_XXS, IQ2_XS), asked for without them."""


@dataclass(frozen=True)
class QuantFormat:
    name: str  # ggml name, e.g. "Q4_K"
    ggml_type: T
    block_size: int  # elements per block
    type_size: int  # bytes per block
    # uint8 (n_blocks, type_size) -> float32 (n_blocks, block_size)
    dequantize: Callable[[np.ndarray], np.ndarray]


def _format(qtype: T, block_size: int, type_size: int, fn: Callable[[np.ndarray], np.ndarray]) -> QuantFormat:
    return QuantFormat(qtype.name, qtype, block_size, type_size, fn)


FORMATS: dict[T, QuantFormat] = {
    f.ggml_type: f
    for f in (
        _format(T.F32, basic.F32_BLOCK_SIZE, basic.F32_TYPE_SIZE, basic.dequantize_row_f32),
        _format(T.F16, basic.F16_BLOCK_SIZE, basic.F16_TYPE_SIZE, basic.dequantize_row_f16),
        _format(T.BF16, basic.BF16_BLOCK_SIZE, basic.BF16_TYPE_SIZE, basic.dequantize_row_bf16),
        _format(T.Q4_0, basic.Q4_0_BLOCK_SIZE, basic.Q4_0_TYPE_SIZE, basic.dequantize_row_q4_0),
        _format(T.Q4_1, basic.Q4_1_BLOCK_SIZE, basic.Q4_1_TYPE_SIZE, basic.dequantize_row_q4_1),
        _format(T.Q5_0, basic.Q5_0_BLOCK_SIZE, basic.Q5_0_TYPE_SIZE, basic.dequantize_row_q5_0),
        _format(T.Q5_1, basic.Q5_1_BLOCK_SIZE, basic.Q5_1_TYPE_SIZE, basic.dequantize_row_q5_1),
        _format(T.Q8_0, basic.Q8_0_BLOCK_SIZE, basic.Q8_0_TYPE_SIZE, basic.dequantize_row_q8_0),
        _format(T.Q2_K, kq.Q2_K_BLOCK_SIZE, kq.Q2_K_TYPE_SIZE, kq.dequantize_row_q2_K),
        _format(T.Q3_K, kq.Q3_K_BLOCK_SIZE, kq.Q3_K_TYPE_SIZE, kq.dequantize_row_q3_K),
        _format(T.Q4_K, kq.Q4_K_BLOCK_SIZE, kq.Q4_K_TYPE_SIZE, kq.dequantize_row_q4_K),
        _format(T.Q5_K, kq.Q5_K_BLOCK_SIZE, kq.Q5_K_TYPE_SIZE, kq.dequantize_row_q5_K),
        _format(T.Q6_K, kq.Q6_K_BLOCK_SIZE, kq.Q6_K_TYPE_SIZE, kq.dequantize_row_q6_K),
        _format(T.IQ4_NL, tab.IQ4_NL_BLOCK_SIZE, tab.IQ4_NL_TYPE_SIZE, tab.dequantize_row_iq4_nl),
        _format(T.IQ4_XS, tab.IQ4_XS_BLOCK_SIZE, tab.IQ4_XS_TYPE_SIZE, tab.dequantize_row_iq4_xs),
        _format(T.MXFP4, tab.MXFP4_BLOCK_SIZE, tab.MXFP4_TYPE_SIZE, tab.dequantize_row_mxfp4),
        _format(T.TQ1_0, tern.TQ1_0_BLOCK_SIZE, tern.TQ1_0_TYPE_SIZE, tern.dequantize_row_tq1_0),
        _format(T.TQ2_0, tern.TQ2_0_BLOCK_SIZE, tern.TQ2_0_TYPE_SIZE, tern.dequantize_row_tq2_0),
        _format(T.IQ2_XXS, grid.QK_K, grid.IQ2_XXS_TYPE_SIZE, grid.dequantize_row_iq2_xxs),
        _format(T.IQ2_XS, grid.QK_K, grid.IQ2_XS_TYPE_SIZE, grid.dequantize_row_iq2_xs),
        _format(T.IQ2_S, grid.QK_K, grid.IQ2_S_TYPE_SIZE, grid.dequantize_row_iq2_s),
        _format(T.IQ3_XXS, grid.QK_K, grid.IQ3_XXS_TYPE_SIZE, grid.dequantize_row_iq3_xxs),
        _format(T.IQ3_S, grid.QK_K, grid.IQ3_S_TYPE_SIZE, grid.dequantize_row_iq3_s),
        _format(T.IQ1_S, grid.QK_K, grid.IQ1_S_TYPE_SIZE, grid.dequantize_row_iq1_s),
        _format(T.IQ1_M, grid.QK_K, grid.IQ1_M_TYPE_SIZE, grid.dequantize_row_iq1_m),
    )
}

# Element dtypes that GGUFReader.data uses for non-quantized types (it gives
# raw uint8 bytes for everything else, BF16 included). Raw uint8 is always accepted.
_NATIVE_DTYPES: dict[T, np.dtype] = {T.F32: np.dtype(np.float32), T.F16: np.dtype(np.float16)}

# Blocks dequantized per step: keeps the temporaries (a few times the f32 output
# of a chunk) inside the CPU caches instead of streaming whole tensors through RAM.
_CHUNK_ELEMENTS = 1 << 16


def _describe(value: int) -> str:
    """A name for a type value: 'IQ2_XXS' if GGML defines it, else the integer."""
    try:
        return T(value).name
    except ValueError:
        return f"{value} (not a GGML type)"


def get_format(qtype: T | int) -> QuantFormat:
    """The registry entry for `qtype`; UnsupportedQuantType if there is none."""
    if not isinstance(qtype, (int, np.integer)) or isinstance(qtype, bool):
        raise TypeError(
            f"a GGML tensor type is a GGML type (localinfer.formats.ggml.GGMLType) or int, got {type(qtype).__name__} {qtype!r}"
        )
    fmt = FORMATS.get(int(qtype))  # IntEnum keys hash like their int values
    if fmt is None:
        supported = ", ".join(f.name for f in FORMATS.values())
        raise UnsupportedQuantType(
            f"unsupported GGML tensor type {_describe(int(qtype))}; supported types: {supported}"
        )
    return fmt


def row_nbytes(qtype: T | int, n_per_row: int) -> int:
    """Bytes of one row of `n_per_row` elements (ggml_row_size)."""
    fmt = get_format(qtype)
    if n_per_row < 0 or n_per_row % fmt.block_size != 0:
        raise ValueError(
            f"row length {n_per_row} is not a multiple of the {fmt.name} block size {fmt.block_size}"
        )
    return n_per_row // fmt.block_size * fmt.type_size


def dequantize(data: np.ndarray, qtype: T | int, shape: Sequence[int]) -> np.ndarray:
    """Dequantize a tensor's raw data to a float32 array of `shape`.

    `data` is what ``gguf.GGUFReader`` puts in ``ReaderTensor.data`` (uint8
    (rows, bytes_per_row) for quantized types and BF16, float32 / float16 for
    F32 / F16) or any flat uint8 buffer. `shape` is in numpy order: the last
    dimension is the row length, i.e. the reverse of the GGUF ``ne`` order.
    """
    fmt = get_format(qtype)
    shape = tuple(int(s) for s in shape)
    if not shape or any(s < 0 for s in shape):
        raise ValueError(f"invalid {fmt.name} tensor shape {shape}: need at least one dimension, none negative")
    n_rows = int(np.prod(shape[:-1], dtype=np.int64))
    bytes_per_row = row_nbytes(fmt.ggml_type, shape[-1])
    nbytes = n_rows * bytes_per_row

    data = np.asarray(data)
    native = _NATIVE_DTYPES.get(fmt.ggml_type)
    if data.dtype != np.uint8:
        if native is None or data.dtype.kind != native.kind or data.dtype.itemsize != native.itemsize:
            raise ValueError(
                f"{fmt.name} data must be raw uint8 bytes"
                + (f" or {native.name}" if native is not None else "")
                + f", got dtype {data.dtype}"
            )
        data = data.astype(native, copy=False)  # fixes a big-endian byte order, else no copy
    if data.nbytes != nbytes:
        raise ValueError(
            f"{fmt.name} tensor of shape {shape} needs {nbytes} bytes "
            f"({n_rows} rows x {bytes_per_row} bytes), got {data.nbytes} bytes "
            f"(data shape {data.shape}, dtype {data.dtype})"
        )

    n_blocks = nbytes // fmt.type_size
    blocks = np.ascontiguousarray(data).reshape(-1).view(np.uint8).reshape(n_blocks, fmt.type_size)
    out = np.empty((n_blocks, fmt.block_size), dtype=np.float32)
    step = max(1, _CHUNK_ELEMENTS // fmt.block_size)
    for start in range(0, n_blocks, step):
        out[start : start + step] = fmt.dequantize(blocks[start : start + step])
    return out.reshape(shape)
