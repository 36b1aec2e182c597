"""Under kernels.batched_rows a few rows get, bit for bit, what they get as the last rows of a long
pass: the matmul's GEMM (both layouts, every ISA) and attention's batched P.V for any row count. A
prompt whose first tokens come from the prefix cache computes only its last rows so
(batching/engine.py), and its logits must be the whole prompt's."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from test_kernels import ISAS, random_activations, random_rows

from localinfer.backend import kernels, ops
from localinfer.formats import FORMATS

pytestmark = pytest.mark.skipif(not kernels.available(), reason="C kernels not built")

N_ROWS = 40  # the long pass: past every few-row path (csrc/core/matmul.c, attention.c)


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("qtype", [T.Q4_0, T.Q4_1, T.Q8_0, T.Q4_K, T.Q6_K, T.IQ4_XS])
@pytest.mark.parametrize("repack", [False, True])
def test_few_rows_get_the_long_pass_bits(isa, qtype, repack):
    fmt = FORMATS[qtype]
    n_blocks = 512 // fmt.block_size
    raw = random_rows(fmt, 64, n_blocks, seed=3)
    x = random_activations(N_ROWS, n_blocks * fmt.block_size, seed=4)
    with kernels._isa(isa):
        w = kernels.prepare(raw, qtype, repack=repack)
        whole = w.matmul(x)
        for m in (1, 2, 3, 5, 15):
            tail = np.ascontiguousarray(x[N_ROWS - m:])
            with kernels.batched_rows():
                got = w.matmul(tail)
            np.testing.assert_array_equal(bits(got), bits(whole[N_ROWS - m:]), err_msg=f"{m} rows")
        plain = w.matmul(np.ascontiguousarray(x[N_ROWS - 2:]))  # and after the block, the GEMV again
    assert not np.array_equal(bits(plain), bits(whole[N_ROWS - 2:]))  # (else this test shows nothing)


@pytest.mark.parametrize("head_dim", [64, 40])  # K and V read in place, or widened
def test_few_queries_attend_with_the_long_pass_bits(head_dim):
    rng = np.random.default_rng(5)
    n_head, n_head_kv, n_kv = 6, 2, 300
    q = rng.standard_normal((N_ROWS, n_head, head_dim)).astype(np.float32)
    k = rng.standard_normal((n_kv, n_head_kv, head_dim)).astype(np.float16)
    v = rng.standard_normal((n_kv, n_head_kv, head_dim)).astype(np.float16)
    pos = np.arange(n_kv - N_ROWS, n_kv)
    scale = head_dim ** -0.5
    whole = ops.attention(q, k, v, pos, scale)
    for m in (1, 2, 7, 15):
        with kernels.batched_rows():
            got = ops.attention(q[N_ROWS - m:], k, v, pos[N_ROWS - m:], scale)
        np.testing.assert_array_equal(bits(got), bits(whole[N_ROWS - m:]), err_msg=f"{m} queries")


def test_batched_rows_outranks_gemv_rows_and_restores_it():
    fmt = FORMATS[T.Q4_0]
    raw = random_rows(fmt, 32, 8, seed=6)
    x = random_activations(N_ROWS, 256, seed=7)
    whole = kernels.matmul(raw, T.Q4_0, x)
    one = kernels.matmul(raw, T.Q4_0, np.ascontiguousarray(x[-1:]))
    with kernels.gemv_rows(4):
        with kernels.batched_rows():
            got = kernels.matmul(raw, T.Q4_0, np.ascontiguousarray(x[-1:]))
        after = kernels.matmul(raw, T.Q4_0, np.ascontiguousarray(x[-1:]))
    np.testing.assert_array_equal(bits(got), bits(whole[-1:]))
    np.testing.assert_array_equal(bits(after), bits(one))
