"""TQ1_0, TQ2_0 and MXFP4 quantizers (quant/quantize_ternary_mxfp4.py) against gguf-py's numpy
quantizers and on values they must keep exactly; test_quantize_llamacpp.py and
test_mixes_llamacpp.py compare whole files with llama-quantize."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import quants as gguf_quants

from localinfer.formats import dequantize
from localinfer.formats.dequant_tables import KVALUES_MXFP4
from localinfer.quant.quantizers import quantize

TYPES = [T.TQ1_0, T.TQ2_0, T.MXFP4]


def _rows(n, cols, seed):
    """Rows at many scales, through fp16 as an F16 model's weights are, with exact ternary and
    e2m1 blocks, zeros, -0.0, ties between two levels and a lone outlier mixed in."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, cols)) * 10.0 ** rng.uniform(-4, 1, (n, 1))).astype(np.float16).astype(np.float32)
    x[0] = 0
    x[1] = -0.0
    x[2] = rng.integers(-1, 2, cols) * 0.375  # ternary already: kept exactly by TQ (d = 0.375)
    x[3] = KVALUES_MXFP4[rng.integers(0, 16, cols)] * 2.0**-7  # e2m1 values: kept exactly by MXFP4
    x[3, ::32] = 12 * 2.0**-7  # each 32-block reaches the top value
    x[4] = 0.0
    x[4, 7] = -5.5
    x[5] = np.arange(cols) % 5 * 0.25 - 0.5  # x / d at exact halves for the ternary rounding
    return x


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_same_bytes_as_gguf_py(qtype):
    x = _rows(64, 512, seed=int(qtype))
    np.testing.assert_array_equal(quantize(x, qtype), gguf_quants.quantize(x, qtype))


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_exact_values_survive_and_errors_are_bounded(qtype):
    x = _rows(64, 512, seed=5)
    y = dequantize(quantize(x, qtype), qtype, x.shape)
    exact = 2 if qtype in (T.TQ1_0, T.TQ2_0) else 3
    np.testing.assert_array_equal(y[exact], x[exact])
    assert y[4, 7] == (-5.5 if qtype != T.MXFP4 else -6.0)  # the outlier: d itself, or MXFP4's nearest level
    blocks = x.reshape(-1, 256 if qtype != T.MXFP4 else 32)
    err = np.abs(y.reshape(blocks.shape) - blocks).max(axis=1)
    amax = np.abs(blocks).max(axis=1)
    # ternary: half the step d = max |x| (plus d's fp16 rounding). MXFP4: with 2^k <= max |x| < 2^(k+1)
    # the unit is s = 2^k / 4, the levels reach 6s, so the error is at most 2s (a max near 8s rounded
    # to 6s; the widest gap, 4s to 6s, costs s): 2s <= max |x| / 2
    assert (err <= 0.5 * amax * (1 + 2**-10)).all()
    # deterministic and blockwise: a row alone gives the same bytes
    np.testing.assert_array_equal(quantize(x[7:8], qtype), quantize(x, qtype)[7:8])


def test_tq1_0_packs_five_trits_per_byte():
    """One +1 at element 0 (the most significant trit of qs[0]), one -1 at element 240 (qh[0]'s)."""
    x = np.zeros((1, 256), np.float32)
    x[0, 0], x[0, 240] = 2.0, -2.0
    b = quantize(x, T.TQ1_0)[0]
    # all-ones trits (value 0) give 121 = 11111 in base 3 -> ceil(121 * 256 / 243) = 128
    assert b[0] == (2 * 81 + 40) * 256 // 243 + 1 and b[1] == 128 and b[48] == ((0 * 27 + 13) * 3 * 256 + 242) // 243
    assert b[52:54].view(np.float16)[0] == 2.0
