"""The weight quantizers registry: float32 rows -> the raw bytes of a GGML tensor type.

The counterpart of ``formats.FORMATS`` (which reads types): one ``from_float``
per type we can write, like ggml's ``type_traits[type].from_float_ref``.
``tests/test_quantize.py`` walks this table, so a new type is one entry here
plus its quantizer.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from gguf import GGMLQuantizationType as T

from . import quantize_basic as basic
from . import quantize_kquants as kq
from .formats import UnsupportedQuantType, get_format

# float32 (n_blocks, block_size) -> uint8 (n_blocks, type_size)
QUANTIZERS: dict[T, Callable[[np.ndarray], np.ndarray]] = {
    T.F32: basic.quantize_row_f32,
    T.F16: basic.quantize_row_f16,
    T.BF16: basic.quantize_row_bf16,
    T.Q4_0: basic.quantize_row_q4_0,
    T.Q4_1: basic.quantize_row_q4_1,
    T.Q5_0: basic.quantize_row_q5_0,
    T.Q5_1: basic.quantize_row_q5_1,
    T.Q8_0: basic.quantize_row_q8_0,
    T.Q2_K: kq.quantize_row_q2_K,
    T.Q3_K: kq.quantize_row_q3_K,
    T.Q4_K: kq.quantize_row_q4_K,
    T.Q5_K: kq.quantize_row_q5_K,
    T.Q6_K: kq.quantize_row_q6_K,
}


def can_quantize_to(qtype: T | int) -> bool:
    return int(qtype) in QUANTIZERS


def quantize(x: np.ndarray, qtype: T | int) -> np.ndarray:
    """float32 (..., n_per_row) -> uint8 (..., row bytes) in `qtype`'s block layout.

    The row length must be a multiple of the type's block size (ggml's rule: a
    block never straddles two rows).
    """
    fmt = get_format(qtype)
    fn = QUANTIZERS.get(fmt.ggml_type)
    if fn is None:
        supported = ", ".join(t.name for t in QUANTIZERS)
        raise UnsupportedQuantType(f"cannot quantize to {fmt.name}; supported targets: {supported}")
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim == 0 or x.shape[-1] % fmt.block_size:
        raise ValueError(f"row length {x.shape[-1] if x.ndim else 0} is not a multiple of the "
                         f"{fmt.name} block size {fmt.block_size}")
    blocks = fn(x.reshape(-1, fmt.block_size))
    return blocks.reshape(*x.shape[:-1], x.shape[-1] // fmt.block_size * fmt.type_size)
