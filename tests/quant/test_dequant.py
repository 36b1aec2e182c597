"""The quant registry and its numpy dequantizers, checked bit for bit against gguf-py.

Like ggml's test-quantize-fns, the tests walk the whole registry, so a new
entry in ``localinfer.formats.registry.FORMATS`` is tested without editing this file.
Values are compared as uint32 bit patterns, which also tells -0.0 from +0.0 and
one NaN payload from another.
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
import gguf.quants

from localinfer.formats import FORMATS, QuantFormat, UnsupportedQuantType, dequantize, get_format
from localinfer.formats import registry as formats_module
from localinfer.formats.dequant_grids import iq1_m_d
from localinfer.formats.registry import row_nbytes
from localinfer.formats.ggml import GGMLType

REQUIRED = {T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K}

# Byte offsets of the ggml_half fields in each block (ggml-common.h). Random bytes
# there are NaN/inf for 1 value in 32; the "finite" tests overwrite them with finite
# halves. A type missing here is still tested, with whatever the random bytes give.
F16_FIELDS: dict[T, tuple[int, ...]] = {
    T.F16: (0,),
    T.Q4_0: (0,),
    T.Q4_1: (0, 2),
    T.Q5_0: (0,),
    T.Q5_1: (0, 2),
    T.Q8_0: (0,),
    T.Q2_K: (80, 82),
    T.Q3_K: (108,),
    T.Q4_K: (0, 2),
    T.Q5_K: (0, 2),
    T.Q6_K: (208,),
    T.IQ4_NL: (0,),
    T.IQ4_XS: (0,),
    T.TQ1_0: (52,),
    T.TQ2_0: (64,),
    T.IQ2_XXS: (0,),
    T.IQ2_XS: (0,),
    T.IQ2_S: (0,),
    T.IQ3_XXS: (0,),
    T.IQ3_S: (0,),
    T.IQ1_S: (0,),
}

FORMAT_PARAMS = [pytest.param(f, id=f.name) for f in FORMATS.values()]


def random_blocks(fmt: QuantFormat, n_blocks: int, seed: int, *, finite: bool = True) -> np.ndarray:
    """(n_blocks, type_size) random bytes; with `finite`, every fp16 scale field is a finite half."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(n_blocks, fmt.type_size), dtype=np.uint8)
    if finite:
        for offset in F16_FIELDS.get(fmt.ggml_type, ()):
            bits = rng.integers(0, 1 << 16, size=n_blocks, dtype=np.uint16)
            special = (bits & 0x7C00) == 0x7C00  # exponent all ones: inf or NaN
            bits[special] &= np.uint16(0xBFFF)  # clear the exponent's top bit: a large finite value
            blocks[:, offset : offset + 2] = bits.view(np.uint8).reshape(n_blocks, 2)
        if fmt.ggml_type == T.IQ1_M:
            finite_iq1_m_d(blocks)
    return blocks


def finite_iq1_m_d(blocks: np.ndarray) -> None:
    """IQ1_M has no d field: its fp16 d is the top nibbles of the four scale u16 (bytes 48..55). An
    inf/NaN one gets its exponent's top bit (bit 14 of d: bit 6 of byte 55) cleared, in place."""
    d = iq1_m_d(blocks)[:, 0]
    blocks[~np.isfinite(d), 55] &= np.uint8(0xBF)


def reference(blocks: np.ndarray, qtype: T) -> np.ndarray:
    """gguf-py's dequantization of raw blocks, as (n_blocks, block_size) float32."""
    out = gguf.quants.dequantize(blocks, qtype)
    assert out.dtype == np.float32
    return out.reshape(blocks.shape[0], -1)


def assert_bits_equal(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == np.float32 and want.dtype == np.float32
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


# --- the registry ------------------------------------------------------------------


def test_registry_has_the_required_types():
    assert REQUIRED <= set(FORMATS)


@pytest.mark.parametrize("fmt", FORMAT_PARAMS)
def test_sizes_match_gguf(fmt: QuantFormat):
    assert FORMATS[fmt.ggml_type] is fmt
    assert isinstance(fmt.ggml_type, GGMLType) and fmt.ggml_type == T[fmt.name]   # gguf-py's number
    assert fmt.name == fmt.ggml_type.name
    assert (fmt.block_size, fmt.type_size) == GGML_QUANT_SIZES[fmt.ggml_type]
    assert get_format(fmt.ggml_type) is fmt
    assert get_format(int(fmt.ggml_type)) is fmt


def test_quant_format_is_frozen():
    with pytest.raises(AttributeError):
        FORMATS[T.Q4_0].block_size = 64  # type: ignore[misc]


@pytest.mark.parametrize("fmt", FORMAT_PARAMS)
def test_row_nbytes_matches_gguf(fmt: QuantFormat):
    for n_blocks in (0, 1, 3, 17):
        n = n_blocks * fmt.block_size
        assert row_nbytes(fmt.ggml_type, n) == gguf.quants.quant_shape_to_byte_shape((n,), fmt.ggml_type)[0]


# --- bit-for-bit against gguf-py ---------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("n_blocks", [1, 3, 17, 64])
@pytest.mark.parametrize("fmt", FORMAT_PARAMS)
def test_blocks_match_gguf(fmt: QuantFormat, n_blocks: int, seed: int):
    blocks = random_blocks(fmt, n_blocks, seed)
    got = fmt.dequantize(blocks)
    assert got.shape == (n_blocks, fmt.block_size)
    assert_bits_equal(got, reference(blocks, fmt.ggml_type))


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("fmt", FORMAT_PARAMS)
def test_raw_scales_match_gguf_including_nan_and_inf(fmt: QuantFormat, seed: int):
    # Scales left as random bytes, plus planted inf / NaN / -0 / subnormal halves:
    # gguf gives NaN for inf * 0 and propagates NaN; the bit patterns must agree too.
    blocks = random_blocks(fmt, 97, seed, finite=False)
    specials = np.array([0x7C00, 0xFC00, 0x7E00, 0x7D01, 0xFE55, 0x8000, 0x0001], dtype=np.uint16)
    for offset in F16_FIELDS.get(fmt.ggml_type, ()):
        blocks[: len(specials), offset : offset + 2] = specials.view(np.uint8).reshape(-1, 2)
    with np.errstate(invalid="ignore", over="ignore"):
        want = reference(blocks, fmt.ggml_type)
        got = fmt.dequantize(blocks)
    if fmt.ggml_type in F16_FIELDS:
        assert np.isnan(want).any()
    assert_bits_equal(got, want)


@pytest.mark.parametrize("fmt", FORMAT_PARAMS)
def test_tensor_shapes_and_layouts(fmt: QuantFormat):
    """dequantize() on reader-style (rows, bytes_per_row) data and on a flat buffer, in odd shapes."""
    for seed, shape_in_blocks in enumerate([(1,), (17,), (3, 5), (2, 3, 7)]):
        n_blocks = int(np.prod(shape_in_blocks))
        blocks = random_blocks(fmt, n_blocks, 100 + seed)
        want = reference(blocks, fmt.ggml_type)
        shape = (*shape_in_blocks[:-1], shape_in_blocks[-1] * fmt.block_size)
        byte_shape = (*shape_in_blocks[:-1], shape_in_blocks[-1] * fmt.type_size)
        for data in (blocks.reshape(byte_shape), blocks.reshape(-1)):
            got = dequantize(data, fmt.ggml_type, shape)
            assert got.shape == shape and got.flags.c_contiguous and got.flags.writeable
            assert_bits_equal(got.reshape(n_blocks, fmt.block_size), want)


@pytest.mark.parametrize("fmt", FORMAT_PARAMS)
def test_chunk_boundaries(fmt: QuantFormat, monkeypatch):
    # dequantize() works through a tensor a chunk of blocks at a time; make the
    # chunks tiny so that several full chunks and a ragged tail are exercised.
    monkeypatch.setattr(formats_module, "_CHUNK_ELEMENTS", 3 * fmt.block_size)
    blocks = random_blocks(fmt, 3 * 4 + 2, 7)
    got = dequantize(blocks, fmt.ggml_type, (2, 7 * fmt.block_size))
    assert_bits_equal(got.reshape(-1, fmt.block_size), reference(blocks, fmt.ggml_type))


def test_float_types_accept_their_element_dtype():
    rng = np.random.default_rng(3)
    x32 = rng.standard_normal((3, 5)).astype(np.float32)
    assert_bits_equal(dequantize(x32, T.F32, (3, 5)), x32)
    assert_bits_equal(dequantize(x32.astype(">f4"), T.F32, (3, 5)), x32)  # big-endian array
    assert_bits_equal(dequantize(x32.view(np.uint8), T.F32, (3, 5)), x32)
    x16 = x32.astype(np.float16)
    assert_bits_equal(dequantize(x16, T.F16, (3, 5)), x16.astype(np.float32))
    # BF16 arrives as raw bytes: the high halves of the f32 values.
    bf16 = (x32.view(np.uint32) >> 16).astype(np.uint16)
    want = (bf16.astype(np.uint32) << 16).view(np.float32)
    assert_bits_equal(dequantize(bf16.view(np.uint8), T.BF16, (3, 5)), want)


def test_empty_tensor():
    out = dequantize(np.zeros(0, dtype=np.uint8), T.Q4_K, (0, 256))
    assert out.shape == (0, 256) and out.dtype == np.float32


# --- bad input -----------------------------------------------------------------------


def test_wrong_byte_count_is_a_clear_error():
    blocks = random_blocks(FORMATS[T.Q4_0], 3, 0)
    with pytest.raises(ValueError, match=r"Q4_0 tensor of shape \(2, 64\) needs 72 bytes.*got 54 bytes"):
        dequantize(blocks, T.Q4_0, (2, 64))
    with pytest.raises(ValueError, match=r"Q4_0 tensor of shape \(96,\) needs 54 bytes.*got 53 bytes"):
        dequantize(blocks.reshape(-1)[:-1], T.Q4_0, (96,))
    with pytest.raises(ValueError, match="needs 4 bytes"):
        dequantize(np.zeros(2, dtype=np.float32), T.F32, (1,))


def test_row_length_not_a_multiple_of_block_size():
    with pytest.raises(ValueError, match="row length 33 is not a multiple of the Q4_0 block size 32"):
        dequantize(np.zeros(36, dtype=np.uint8), T.Q4_0, (2, 33))
    with pytest.raises(ValueError, match="row length 288 is not a multiple of the Q6_K block size 256"):
        row_nbytes(T.Q6_K, 288)


def test_bad_shape_or_dtype():
    with pytest.raises(ValueError, match="shape"):
        dequantize(np.zeros(4, dtype=np.uint8), T.F32, ())
    with pytest.raises(ValueError, match="shape"):
        dequantize(np.zeros(4, dtype=np.uint8), T.F32, (-1,))
    with pytest.raises(ValueError, match="dtype float64"):
        dequantize(np.zeros(2, dtype=np.float64), T.F32, (4,))
    with pytest.raises(ValueError, match="Q4_0 data must be raw uint8 bytes, got dtype float32"):
        dequantize(np.zeros(18 // 2, dtype=np.float16).astype(np.float32), T.Q4_0, (32,))


@pytest.mark.parametrize(
    "qtype, name",
    [(T.NVFP4, "NVFP4"), (T.Q1_0, "Q1_0"), (T.Q8_K, "Q8_K"), (int(T.I8), "I8"), (99, "99")],
)
def test_unsupported_type_names_itself(qtype, name):
    for call in (
        lambda: get_format(qtype),
        lambda: row_nbytes(qtype, 256),
        lambda: dequantize(np.zeros(1024, dtype=np.uint8), qtype, (256,)),
    ):
        with pytest.raises(UnsupportedQuantType, match=rf"\b{name}\b") as exc:
            call()
        assert isinstance(exc.value, ValueError)
        assert "Q4_K" in str(exc.value)  # the message lists what is supported


@pytest.mark.parametrize("qtype", ["Q4_K", None, True, 2.0])
def test_type_that_is_not_a_type_value(qtype):
    with pytest.raises(TypeError, match="GGML type .* or int"):
        get_format(qtype)


# --- a real model ----------------------------------------------------------------------


@pytest.mark.parametrize("model_fixture", ["smollm2_path", "gemma3_path"])
def test_real_model_tensors(request, model_fixture):
    """The smallest tensor of each type in a real model, as the loader hands it over.

    SmolLM2-135M has Q4_1, Q8_0 and F32; Gemma-3-270M Q4_K_M adds Q4_K, Q5_0 and Q6_K.
    The file is read with localinfer's GGUFFile, which gives the same arrays as
    gguf.GGUFReader (uint8 (rows, bytes_per_row) blocks, float32 / float16 for
    F32 / F16) but parses Gemma's 262k-token vocabulary in 0.4 s instead of 15 s.
    """
    try:
        path = request.getfixturevalue(model_fixture)
    except pytest.FixtureLookupError:
        pytest.skip(f"no {model_fixture} fixture")
    except Exception as e:  # not downloaded, offline, ...
        pytest.skip(f"{model_fixture}: model unavailable: {e}")
    from localinfer.files.gguf_file import GGUFFile

    with GGUFFile(path) as f:
        smallest_of_type = {}
        for info in f.tensors.values():
            best = smallest_of_type.get(info.ggml_type)
            if best is None or info.n_elements < best.n_elements:
                smallest_of_type[info.ggml_type] = info
        assert smallest_of_type, "no tensors in the model"
        for qtype, info in smallest_of_type.items():
            data = f.tensor_data(info.name)
            got = dequantize(data, qtype, info.shape)
            assert got.shape == info.shape
            want = gguf.quants.dequantize(data, qtype).reshape(info.shape)
            assert_bits_equal(got, want)
            assert np.isfinite(got).all(), info.name
            del data, got, want  # no views into the mmap may outlive the file
