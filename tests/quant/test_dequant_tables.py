"""IQ4_NL, IQ4_XS and MXFP4 on their edge values, bit for bit against gguf-py and the C kernels.

The registry-walking tests (test_dequant.py, tests/kernels/test_kernels.py) cover random blocks;
these cover every table index and every scale code explicitly: all 64 IQ4_XS sub-block scales,
all 256 MXFP4 exponents (0 and 1 decode to subnormals, 255 to 2^127, whose products overflow).
"""

from __future__ import annotations

import gguf.quants
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from localinfer.backend import kernels
from localinfer.formats import dequantize
from localinfer.formats import dequant_tables as tab


def _all_nibbles(n_blocks: int) -> np.ndarray:
    """(n_blocks, 16) qs bytes that hold every index 0..15 in both nibbles of each block."""
    j = np.arange(16, dtype=np.uint8)
    rows = [(j + b) % 16 | ((15 - j - b) % 16) << 4 for b in range(n_blocks)]
    return np.array(rows, dtype=np.uint8)


def _check(blocks: np.ndarray, qtype: T, block_size: int) -> None:
    n = blocks.shape[0] * block_size
    with np.errstate(over="ignore", invalid="ignore"):
        want = gguf.quants.dequantize(blocks, qtype).reshape(-1)
        got = dequantize(blocks.reshape(-1), qtype, (n,))
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    if kernels.available():
        for isa in kernels.supported_isas():
            with kernels._isa(isa):
                c = kernels.dequantize_row(np.ascontiguousarray(blocks.reshape(-1)), qtype, n)
            np.testing.assert_array_equal(c.view(np.uint32), want.view(np.uint32), err_msg=isa)


def test_tables_are_gguf_py_tables():
    np.testing.assert_array_equal(tab.KVALUES_IQ4NL, np.array(gguf.quants.IQ4_NL.kvalues, dtype=np.int8))
    np.testing.assert_array_equal(tab.KVALUES_MXFP4, np.array(gguf.quants.MXFP4.kvalues, dtype=np.int8))


@pytest.mark.parametrize("d", [0.0, -0.0, 1.0, -2.5, 65504.0, 6e-8, np.inf, np.nan])
def test_iq4_nl_every_index_and_special_scales(d):
    qs = _all_nibbles(4)
    dbits = np.full((4, 1), d, dtype=np.float16).view(np.uint8).reshape(4, 2)
    _check(np.concatenate([dbits, qs], axis=1), T.IQ4_NL, 32)


def test_iq4_xs_every_sub_block_scale():
    n_blocks = 8   # 64 sub-blocks: ls = 0..63 once each
    ls = np.arange(64).reshape(n_blocks, 8)
    low = ls & 0xF
    scales_l = (low[:, 0::2] | low[:, 1::2] << 4).astype(np.uint8)
    scales_h = np.zeros(n_blocks, dtype=np.uint16)
    for s in range(8):
        scales_h |= ((ls[:, s] >> 4) << (2 * s)).astype(np.uint16)
    d = np.array([1.0, -0.75, 3e-3, 1000.0, 6e-8, -65504.0, 0.0, 2.0], dtype=np.float16)
    qs = np.tile(_all_nibbles(8).reshape(1, -1), (n_blocks, 1))
    blocks = np.concatenate(
        [d.view(np.uint8).reshape(-1, 2), scales_h.view(np.uint8).reshape(-1, 2), scales_l, qs], axis=1
    )
    assert blocks.shape[1] == tab.IQ4_XS_TYPE_SIZE
    _check(np.ascontiguousarray(blocks), T.IQ4_XS, 256)


def test_mxfp4_every_exponent():
    e = np.arange(256, dtype=np.uint8).reshape(-1, 1)
    qs = _all_nibbles(256)
    _check(np.concatenate([e, qs], axis=1), T.MXFP4, 32)
    np.testing.assert_array_equal(tab.e8m0_to_fp32_half(np.array([128, 129, 127, 2, 1, 0], dtype=np.uint8)),
                                  np.array([1.0, 2.0, 0.5, 2.0**-126, 2.0**-127, 2.0**-128], dtype=np.float32))
