"""The GEMV's multi-row dot products (several weight rows per pass sharing the activation loads)
give, bit for bit, what the type's single-row vec_dot gives for each row, for every type, ISA,
thread count and row count (tails of 1..3 rows after groups of 4)."""
from __future__ import annotations

import numpy as np
import pytest
from test_kernels import FORMAT_PARAMS, ISAS, random_activations, random_rows

from localinfer.backend import kernels
from localinfer.formats.registry import QuantFormat

pytestmark = pytest.mark.skipif(not kernels.available(), reason="C kernels not built")


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
