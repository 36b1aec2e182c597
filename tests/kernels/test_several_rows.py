"""A row-major matrix against a few activation rows (several sequences decoding together): where the
ISA has a dot for several activation rows (vec_dot_m: each block of a weight row unpacked once for all
of them), up to 17 rows go through it, and every row has the bits of a 1-row call; from 18 rows the
GEMM, which rounds otherwise (csrc/core/matmul.c LI_GEMM_MIN_M_DOT_M)."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from test_kernels import ISAS, random_activations, random_rows

from localinfer.backend import kernels
from localinfer.formats import FORMATS

pytestmark = pytest.mark.skipif(not kernels.available(), reason="C kernels not built")

DOT_M_TYPES_OF = {"avx2": [T.Q6_K]}  # the ISA tables' vec_dot_m
DOT_M_MAX = 17


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


CASES = [(isa, t) for isa in ISAS for t in DOT_M_TYPES_OF.get(isa, [])]


@pytest.mark.parametrize("isa,qtype", CASES or [pytest.param(None, None, marks=pytest.mark.skip(
    reason="no ISA on this CPU has a dot for several activation rows"))], ids=lambda v: getattr(v, "name", v))
@pytest.mark.parametrize("n_out,n_blocks", [(5, 1), (64, 3), (260, 2)])
def test_up_to_17_rows_each_have_the_one_row_bits(isa, qtype, n_out, n_blocks):
    fmt = FORMATS[qtype]
    raw = random_rows(fmt, n_out, n_blocks, seed=n_out + n_blocks)
    x = random_activations(DOT_M_MAX + 1, n_blocks * fmt.block_size, seed=9)
    with kernels._isa(isa):
        w = kernels.prepare(raw, qtype, repack=True)
        assert w.layout == kernels.LAYOUT_ROWS  # the ISA keeps this type row-major
        one = np.stack([w.matmul(np.ascontiguousarray(x[i])) for i in range(len(x))])
        for m in (2, 3, 6, 11, DOT_M_MAX):
            np.testing.assert_array_equal(bits(w.matmul(np.ascontiguousarray(x[:m]))), bits(one[:m]), err_msg=f"{m} rows")
        gemm = w.matmul(x)  # 18 rows: the GEMM's roundings (else this test would show nothing)
    assert not np.array_equal(bits(gemm), bits(one))
    np.testing.assert_allclose(gemm, one, rtol=1e-4, atol=1e-4 * float(np.abs(one).max()))
