"""The weight quantizers registry: float32 rows -> the raw bytes of a GGML tensor type.

The counterpart of ``formats.FORMATS`` (which reads types): one ``from_float``
per type we can write, like ggml's ``type_traits[type].from_float_ref``.
``tests/quant/test_quantize.py`` walks this table, so a new type is one entry here
plus its quantizer.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numba
import numpy as np
from gguf import GGMLQuantizationType as T

from localinfer.formats import quantize_basic as basic
from . import quantize_iq1 as iq1
from . import quantize_iq2 as iq2
from . import quantize_iq3 as iq3
from . import quantize_kquants as kq
from . import quantize_ternary_mxfp4 as tm
from . import quantize_weighted as qw
from localinfer.formats.registry import ImatrixRequired, UnsupportedQuantType, get_format  # noqa: F401 (ImatrixRequired: re-exported)

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
    T.IQ4_NL: qw.quantize_row_iq4_nl,
    T.IQ4_XS: qw.quantize_row_iq4_xs,
    T.TQ1_0: tm.quantize_row_tq1_0,
    T.TQ2_0: tm.quantize_row_tq2_0,
    T.MXFP4: tm.quantize_row_mxfp4,
    T.IQ2_S: iq2.quantize_row_iq2_s,
    T.IQ3_XXS: iq3.quantize_row_iq3_xxs,
    T.IQ3_S: iq3.quantize_row_iq3_s,
    T.IQ1_M: iq1.quantize_row_iq1_m,
}

# The weighted quantizers outside quantize_weighted: float32 rows (n, n_per_row) and importance
# weights (n_per_row,) -> uint8 (n, row bytes). A type here but not in QUANTIZERS is one that ggml
# refuses to quantize without an imatrix.
WEIGHTED_QUANTIZERS: dict[T, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    T.IQ2_XXS: iq2.quantize_iq2_xxs,
    T.IQ2_XS: iq2.quantize_iq2_xs,
    T.IQ2_S: iq2.quantize_iq2_s,
    T.IQ3_XXS: iq3.quantize_iq3_xxs,
    T.IQ3_S: iq3.quantize_iq3_s,
    T.IQ1_S: iq1.quantize_rows_iq1_s,
    T.IQ1_M: iq1.quantize_rows_iq1_m,
}


# The k-quant kernels spread their blocks over numba's threads themselves.
_PARALLEL_INSIDE = {T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.IQ4_NL, T.IQ4_XS, T.IQ2_S, T.IQ3_XXS, T.IQ3_S, T.IQ1_M}
# Blocks quantized per step by the numpy quantizers: the temporaries stay in the CPU caches
# (several times faster than whole-slab passes) and the steps run on a thread pool (numpy
# releases the GIL).
_CHUNK_ELEMENTS = 1 << 16
_threads = os.cpu_count() or 1
_pool: ThreadPoolExecutor | None = None


def set_num_threads(n: int) -> None:
    """Threads for quantizing: the numpy steps' pool and numba's k-quant kernels."""
    global _threads, _pool
    _threads = max(1, int(n))
    numba.set_num_threads(min(_threads, numba.config.NUMBA_NUM_THREADS))
    if _pool is not None:
        _pool.shutdown()
        _pool = None


def _map(fn, items) -> None:
    global _pool
    if _threads == 1 or len(items) == 1:
        for i in items:
            fn(i)
        return
    if _pool is None:
        _pool = ThreadPoolExecutor(_threads, thread_name_prefix="localinfer-quantize")
    for _ in _pool.map(fn, items):
        pass


def can_quantize_to(qtype: T | int) -> bool:
    return int(qtype) in QUANTIZERS or int(qtype) in WEIGHTED_QUANTIZERS


def needs_imatrix(qtype: T | int) -> bool:
    """Whether ggml only quantizes `qtype` with an importance matrix (quantize() refuses it without)."""
    return int(qtype) in WEIGHTED_QUANTIZERS and int(qtype) not in QUANTIZERS


def uses_imatrix(qtype: T | int) -> bool:
    """Whether ggml quantizes `qtype` differently given an importance matrix."""
    return int(qtype) in qw.WEIGHTED_TYPES or int(qtype) in WEIGHTED_QUANTIZERS


def quantize(x: np.ndarray, qtype: T | int, imatrix: np.ndarray | None = None) -> np.ndarray:
    """float32 (..., n_per_row) -> uint8 (..., row bytes) in `qtype`'s block layout.

    The row length must be a multiple of the type's block size (ggml's rule: a
    block never straddles two rows). `imatrix` (n_per_row,): the importance of each
    input column; the types of `uses_imatrix` then take ggml's weighted path, the
    others ignore it (as ggml does).
    """
    fmt = get_format(qtype)
    fn = QUANTIZERS.get(fmt.ggml_type)
    if fn is None and fmt.ggml_type in WEIGHTED_QUANTIZERS and imatrix is None:
        raise ImatrixRequired(f"{fmt.name} needs an importance matrix: make one with `localinfer imatrix` "
                              f"and pass it with --imatrix")
    if fn is None and fmt.ggml_type not in WEIGHTED_QUANTIZERS:
        supported = ", ".join(t.name for t in {**QUANTIZERS, **WEIGHTED_QUANTIZERS})
        raise UnsupportedQuantType(f"cannot quantize to {fmt.name}; supported targets: {supported}")
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim == 0 or x.shape[-1] % fmt.block_size:
        raise ValueError(f"row length {x.shape[-1] if x.ndim else 0} is not a multiple of the "
                         f"{fmt.name} block size {fmt.block_size}")
    out_shape = (*x.shape[:-1], x.shape[-1] // fmt.block_size * fmt.type_size)
    if imatrix is not None and uses_imatrix(fmt.ggml_type):
        imatrix = np.asarray(imatrix, dtype=np.float32)
        if imatrix.shape != (x.shape[-1],):
            raise ValueError(f"imatrix has shape {imatrix.shape}, rows have {x.shape[-1]} columns")
        rows = x.reshape(-1, x.shape[-1])
        weighted = WEIGHTED_QUANTIZERS.get(fmt.ggml_type)
        q = weighted(rows, imatrix) if weighted else qw.quantize_rows_weighted(rows, fmt.ggml_type, imatrix)
        return q.reshape(out_shape)
    src = x.reshape(-1, fmt.block_size)
    if fmt.ggml_type in _PARALLEL_INSIDE:
        blocks = fn(src)
    else:
        blocks = np.empty((src.shape[0], fmt.type_size), np.uint8)
        step = max(1, _CHUNK_ELEMENTS // fmt.block_size)

        def one_step(start: int) -> None:
            blocks[start : start + step] = fn(src[start : start + step])

        _map(one_step, list(range(0, src.shape[0], step)))
    return blocks.reshape(out_shape)
