"""The GEMV's multi-row dot products (several weight rows per pass sharing the activation loads)
give, bit for bit, what the type's single-row vec_dot gives for each row, for every type, ISA,
thread count and row count (tails of 1..3 rows after groups of 4). So do several activation rows
where the ISA has a dot for them over the row-major layout (vec_dot_m: each block of a weight row
unpacked once for all of them), up to 17; from 18 the GEMM, which rounds otherwise
(csrc/core/matmul.c LI_GEMM_MIN_M_DOT_M)."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from test_kernels import FORMAT_PARAMS, ISAS, random_activations, random_rows

from localinfer.backend import kernels
from localinfer.formats import FORMATS
from localinfer.formats.registry import QuantFormat

pytestmark = pytest.mark.skipif(not kernels.available(), reason="C kernels not built")

DOT_M_TYPES_OF = {"avx2": [T.Q6_K]}  # the ISA tables' vec_dot_m
DOT_M_MAX = 17


def vec_dot_rows_one_by_one(raw: np.ndarray, fmt: QuantFormat, x: np.ndarray) -> np.ndarray:
    ffi, lib = kernels._ffi, kernels._lib
    act_type = kernels._type_info(fmt.ggml_type)[3]
    xq = kernels.quantize_activations(x, act_type)
    out = np.empty(raw.shape[0], np.float32)
    k = x.shape[0]
    for r in range(raw.shape[0]):
        rc = lib.li_vec_dot(int(fmt.ggml_type), k, ffi.from_buffer(raw[r]), ffi.from_buffer(xq),
                            ffi.cast("float *", ffi.from_buffer(out[r:r + 1])))
        assert rc == 0
    return out


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("fmt", FORMAT_PARAMS)
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("n_out,n_blocks", [(1, 1), (7, 3), (37, 18), (66, 5)])
def test_gemv_equals_vec_dot_per_row(isa, fmt, threads, n_out, n_blocks):
    before = kernels.get_threads()
    try:
        with kernels._isa(isa):
            kernels.set_threads(threads)
            raw = random_rows(fmt, n_out, n_blocks, seed=n_out)
            x = random_activations(1, n_blocks * fmt.block_size, seed=n_blocks)[0]
            got = kernels.matmul(raw, fmt.ggml_type, x)
            want = vec_dot_rows_one_by_one(raw, fmt, x)
    finally:
        kernels.set_threads(before)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


DOT_M_CASES = [(isa, t) for isa in ISAS for t in DOT_M_TYPES_OF.get(isa, [])]


@pytest.mark.parametrize("isa,qtype", DOT_M_CASES or [pytest.param(None, None, marks=pytest.mark.skip(
    reason="no ISA on this CPU has a dot for several activation rows"))], ids=lambda v: getattr(v, "name", v))
@pytest.mark.parametrize("n_out,n_blocks", [(5, 1), (64, 3), (260, 2)])
def test_up_to_17_activation_rows_each_equal_vec_dot(isa, qtype, n_out, n_blocks):
    fmt = FORMATS[qtype]
    raw = random_rows(fmt, n_out, n_blocks, seed=n_out + n_blocks)
    x = random_activations(DOT_M_MAX + 1, n_blocks * fmt.block_size, seed=9)
    with kernels._isa(isa):
        w = kernels.prepare(raw, qtype, repack=True)
        assert w.layout == kernels.LAYOUT_ROWS  # the ISA keeps this type row-major
        one = np.stack([vec_dot_rows_one_by_one(raw, fmt, xi) for xi in x])
        for m in (2, 3, 6, 11, DOT_M_MAX):
            got = w.matmul(np.ascontiguousarray(x[:m]))
            np.testing.assert_array_equal(got.view(np.uint32), one[:m].view(np.uint32), err_msg=f"{m} rows")
        gemm = w.matmul(x)  # 18 rows: the GEMM's roundings (else this test would show nothing)
    assert not np.array_equal(gemm.view(np.uint32), one.view(np.uint32))
    np.testing.assert_allclose(gemm, one, rtol=1e-4, atol=1e-4 * float(np.abs(one).max()))
