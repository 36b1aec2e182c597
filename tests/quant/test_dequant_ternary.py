"""TQ1_0 and TQ2_0 on every byte value, bit for bit against gguf-py and the C kernels (every ISA).

The random-block tests of test_dequant.py and tests/kernels walk the registry; these make sure each
of the 256 byte values appears at every position kind (TQ1_0: the 5-trit qs bytes and the 4-trit
qh bytes, whose base-3 digits come out of a wrapping uint8 multiply; TQ2_0: all four 2-bit codes,
the unused code 3 included).
"""

from __future__ import annotations

import gguf.quants
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from localinfer.backend import kernels
from localinfer.formats import dequantize
from localinfer.formats import dequant_ternary as tern


def _blocks(type_size: int, d_offset: int) -> np.ndarray:
    """blocks whose byte j of block b is (b * 7 + j) % 256 for every b < 256: each position sees all
    256 values; d is a finite half that changes per block (-2.5 .. 2.5)."""
    b = np.arange(256)[:, None]
    raw = ((b * 7 + np.arange(type_size)[None, :]) % 256).astype(np.uint8)
    d = np.linspace(-2.5, 2.5, 256).astype(np.float16)
    raw[:, d_offset : d_offset + 2] = d.view(np.uint8).reshape(-1, 2)
    return raw


@pytest.mark.parametrize("qtype, d_offset", [(T.TQ1_0, 52), (T.TQ2_0, 64)], ids=["TQ1_0", "TQ2_0"])
def test_every_byte_value_bit_identical(qtype, d_offset):
    size = tern.TQ1_0_TYPE_SIZE if qtype == T.TQ1_0 else tern.TQ2_0_TYPE_SIZE
    raw = _blocks(size, d_offset)
    want = gguf.quants.dequantize(raw, qtype).reshape(-1)
    got = dequantize(raw.reshape(-1), qtype, (256 * 256,))
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    if kernels.available():
        for isa in kernels.supported_isas():
            with kernels._isa(isa):
                c = kernels.dequantize_row(np.ascontiguousarray(raw.reshape(-1)), qtype, 256 * 256)
            np.testing.assert_array_equal(c.view(np.uint32), want.view(np.uint32), err_msg=isa)


def test_tq1_0_trits_are_base3_digits():
    # a byte written by gguf-py's quantizer for trits (t0..t4) is ceil(sum t_k 3^(4-k) * 256 / 243)
    trits = np.random.default_rng(0).integers(0, 3, size=(64, 5))
    value = (trits * np.array([81, 27, 9, 3, 1])).sum(axis=1)
    b = ((value * 256 + 242) // 243).astype(np.uint8)
    np.testing.assert_array_equal(tern._digits(b[None, :], 5).reshape(5, 64).T, trits)
