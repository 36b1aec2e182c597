"""The GEMM's integer sums at their limits: every quant at 0 or at its largest value, against
activations that quantize to +-127 everywhere. The AVX2 tile adds u8 x s8 products in 16-bit slots
for as long as their sum cannot overflow (csrc/x86/gemm_avx2.c), starting, for the offset types,
from the panel's per-slot corr (csrc/core/panel.c): there sum(u * q) alone passes 16 bits while the
slot's end value sum((u - o) * q) does not. Random blocks never come near those limits; these do.
One slot off by 2^16 moves an output by 1-6% of sum |w| |a| at these sizes, far past the 1e-4
tolerance."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from test_kernels import ISAS, assert_close, reference

from localinfer.backend import kernels
from localinfer.formats import FORMATS

pytestmark = pytest.mark.skipif(not kernels.available(), reason="C kernels not built")

# per type: (block bytes whose every bit is a quant bit, scale bytes to set, their value); the fp16
# scale stays 1.0. Q6_K's int8 sub-scales are set to 127; Q3_K's packed 6-bit ones are left as the
# quant bytes make them (0x00: -32, 0xff: 31), never 0.
LAYOUT = {
    T.Q4_0: (slice(2, 18), None, 0, 0),
    T.Q5_0: (slice(2, 22), None, 0, 0),
    T.Q6_K: (slice(0, 192), slice(192, 208), 127, 208),
    T.Q3_K: (slice(0, 108), None, 0, 108),
}
ONE_F16 = np.array([1.0], np.float16).view(np.uint8)


def extreme_rows(qtype, n_rows: int, n_blocks: int) -> np.ndarray:
    """Rows alternating all-zero and all-one quant bits: u = 0 and u = umax everywhere."""
    fmt = FORMATS[qtype]
    quants, scales, scale_value, d_at = LAYOUT[qtype]
    blocks = np.zeros((n_rows, n_blocks, fmt.type_size), np.uint8)
    blocks[1::2, :, quants] = 0xFF
    if scales is not None:
        blocks[:, :, scales] = scale_value
    blocks[:, :, d_at:d_at + 2] = ONE_F16
    return blocks.reshape(n_rows, n_blocks * fmt.type_size)


def extreme_activations(m: int, k: int) -> np.ndarray:
    """+1 everywhere, -1 everywhere, and sign patterns by element, by pair and by half block."""
    idx = np.arange(k)
    rows = [np.ones(k), -np.ones(k), np.where(idx % 2, 1.0, -1.0), np.where(idx // 2 % 2, 1.0, -1.0),
            np.where(idx // 16 % 2, 1.0, -1.0), np.where(idx // 64 % 2, -1.0, 1.0)]
    return np.array([rows[i % len(rows)] for i in range(m)], np.float32)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("qtype", list(LAYOUT), ids=lambda t: t.name)
@pytest.mark.parametrize("n_blocks", [1, 3, 9])   # full super-groups and every kind of tail
def test_gemm_exact_at_the_sums_limits(isa, qtype, n_blocks):
    fmt = FORMATS[qtype]
    if fmt.block_size == 32:
        n_blocks *= 8   # past a whole super-group of 32-element groups, and its tails
    k = n_blocks * fmt.block_size
    w = extreme_rows(qtype, 8, n_blocks)
    x = extreme_activations(24, k)
    with kernels._isa(isa):
        got = kernels.matmul(w, qtype, x)   # 24 rows: the tiled GEMM for every type (csrc/core/matmul.c)
    want, scale = reference(w, fmt, x)
    assert_close(got, want, scale)
