"""The GGUF reader against gguf-py's reader on the real file, and against broken files."""
from __future__ import annotations

import json
import struct
import tracemalloc

import numpy as np
import pytest
from gguf import GGUFReader, GGUFWriter, GGMLQuantizationType

from localinfer.files.gguf_file import GGUFError, GGUFFile


def _tiny_gguf(path, extra_kv=True):
    w = GGUFWriter(str(path), "llama")
    w.add_uint32("llama.block_count", 1)
    if extra_kv:
        w.add_string("general.name", "tiny")
        w.add_array("tokenizer.ggml.tokens", ["a", "b", "c"])
        w.add_array("test.floats", [1.5, 2.5])
    w.add_tensor("a.weight", np.arange(64, dtype=np.float32).reshape(2, 32))
    w.add_tensor("b.weight", np.ones((3, 32), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_matches_gguf_py_on_the_real_file(smollm2_path):
    ref = GGUFReader(str(smollm2_path))
    with GGUFFile(smollm2_path) as f:
        for key, field in ref.fields.items():
            if key.startswith("GGUF."):
                continue
            value = f.metadata[key]
            if isinstance(value, np.ndarray):   # numeric arrays: read-only views
                assert not value.flags.writeable and value.tolist() == field.contents(), key
            else:
                assert value == field.contents(), key
        assert len(f.tensors) == len(ref.tensors)
        for t in ref.tensors[:20]:
            info = f.tensors[t.name]
            assert info.ggml_type == t.tensor_type
            assert info.shape == tuple(reversed([int(d) for d in t.shape]))
            np.testing.assert_array_equal(f.tensor_data(t.name), t.data)


def test_tensor_views_are_zero_copy_and_read_only(smollm2_path):
    with GGUFFile(smollm2_path) as f:
        a = f.tensor_data("blk.0.attn_norm.weight")
        assert not a.flags.owndata and not a.flags.writeable
        assert a.dtype == np.float32 and a.shape == (576,)
        q = f.tensor_data("blk.0.attn_q.weight")
        assert q.dtype == np.uint8 and q.shape == (576, 576 // 32 * 20)


def test_tiny_file_roundtrip(tmp_path):
    path = _tiny_gguf(tmp_path / "tiny.gguf")
    with GGUFFile(path) as f:
        assert f.architecture == "llama"
        assert f.metadata["general.name"] == "tiny"
        assert f.metadata["tokenizer.ggml.tokens"] == ["a", "b", "c"]
        assert f.metadata["test.floats"].tolist() == [1.5, 2.5]
        np.testing.assert_array_equal(f.tensor_data("a.weight"), np.arange(64, dtype=np.float32).reshape(2, 32))
        assert f.tensors["b.weight"].ggml_type == GGMLQuantizationType.F16


def test_not_a_gguf_file(tmp_path):
    p = tmp_path / "x.gguf"
    p.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    with pytest.raises(GGUFError, match="not a GGUF file"):
        GGUFFile(p)
    p.write_bytes(b"GG")
    with pytest.raises(GGUFError, match="not a GGUF file"):
        GGUFFile(p)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        GGUFFile(tmp_path / "nope.gguf")


def test_bad_version(tmp_path):
    data = bytearray(_tiny_gguf(tmp_path / "t.gguf").read_bytes())
    data[4:8] = struct.pack("<I", 99)
    (tmp_path / "v.gguf").write_bytes(data)
    with pytest.raises(GGUFError, match="unsupported GGUF version 99"):
        GGUFFile(tmp_path / "v.gguf")
    data[4:8] = struct.pack(">I", 3)
    (tmp_path / "v.gguf").write_bytes(data)
    with pytest.raises(GGUFError, match="big-endian"):
        GGUFFile(tmp_path / "v.gguf")


def test_every_truncation_of_a_small_file_is_a_clear_error(tmp_path):
    data = _tiny_gguf(tmp_path / "t.gguf").read_bytes()
    p = tmp_path / "cut.gguf"
    for n in range(0, len(data) - 1, 7):
        p.write_bytes(data[:n])
        with pytest.raises(GGUFError):
            GGUFFile(p)


def test_truncated_real_file(smollm2_path, tmp_path):
    p = tmp_path / "cut.gguf"
    with open(smollm2_path, "rb") as src:
        p.write_bytes(src.read(5_000_000))  # header intact, tensor data cut
    with pytest.raises(GGUFError, match="truncated"):
        GGUFFile(p)


def test_huge_counts_are_rejected_without_allocating(tmp_path):
    data = bytearray(_tiny_gguf(tmp_path / "t.gguf").read_bytes())
    for offset, what in ((8, "tensor count"), (16, "metadata count")):
        bad = bytearray(data)
        bad[offset:offset + 8] = struct.pack("<Q", 2**62)
        (tmp_path / "h.gguf").write_bytes(bad)
        with pytest.raises(GGUFError, match="cannot fit"):
            GGUFFile(tmp_path / "h.gguf")


def test_random_bit_flips_never_crash(tmp_path):
    """Flip bits in the header/metadata region: each file either loads or fails with GGUFError."""
    data = _tiny_gguf(tmp_path / "t.gguf").read_bytes()
    with GGUFFile(tmp_path / "t.gguf") as f:
        header_end = f.data_offset
    rng = np.random.default_rng(0)
    p = tmp_path / "flip.gguf"
    outcomes = {"ok": 0, "error": 0}
    for _ in range(400):
        bad = bytearray(data)
        for pos in rng.integers(0, header_end, size=rng.integers(1, 4)):
            bad[pos] ^= 1 << int(rng.integers(0, 8))
        p.write_bytes(bytes(bad))
        try:
            with GGUFFile(p) as f:
                for name in f.tensors:
                    f.tensor_data(name)
            outcomes["ok"] += 1
        except GGUFError:
            outcomes["error"] += 1
    assert outcomes["error"] > 0


def test_hostile_string_length(tmp_path):
    data = bytearray(_tiny_gguf(tmp_path / "t.gguf").read_bytes())
    data[24:32] = struct.pack("<Q", 2**63)  # length of the first key
    (tmp_path / "s.gguf").write_bytes(data)
    with pytest.raises(GGUFError, match="length|claims|truncated"):
        GGUFFile(tmp_path / "s.gguf")


@pytest.mark.parametrize("patch, match", [
    (lambda d, at: d.__setitem__(slice(at, at + 8), struct.pack("<Q", 2**63)), "element 1 of 'tokenizer.ggml.tokens' claims"),
    (lambda d, at: d.__setitem__(at + 8, 0xFF), "element 1 of 'tokenizer.ggml.tokens' is not valid UTF-8"),
])
def test_a_bad_string_in_an_array_is_named(tmp_path, patch, match):
    data = bytearray(_tiny_gguf(tmp_path / "t.gguf").read_bytes())
    # the tokens array holds "a", "b", "c": each an 8-byte length and one byte
    at = data.index(b"\x01\x00\x00\x00\x00\x00\x00\x00b")  # the second element
    patch(data, at)
    (tmp_path / "s.gguf").write_bytes(data)
    with pytest.raises(GGUFError, match=match):
        GGUFFile(tmp_path / "s.gguf")


@pytest.mark.parametrize("strings", [
    ["a", "", "\u0120the", "\u2581\u00e9t\u00e9", "\U0001f31c", "x" * 300],
    ["a", "b\0c", ""],           # a NUL inside a string: the C walk declines, the loop reads it
    [""],
])
def test_string_arrays_read_the_same_through_c_and_the_loop(tmp_path, monkeypatch, strings):
    """The C walk (kernels.string_array) is the fast path for vocabularies; the per-string loop
    the fallback. Both give the strings as written, empty ones and NULs included."""
    import localinfer.files.gguf_file as gguf_file

    w = GGUFWriter(str(tmp_path / "s.gguf"), "llama")
    w.add_array("test.strings", strings)
    w.add_tensor("a.weight", np.ones((1, 32), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with GGUFFile(tmp_path / "s.gguf") as f:
        fast = f.metadata["test.strings"]
    monkeypatch.setattr(gguf_file, "_c_strings", lambda *a: None)
    with GGUFFile(tmp_path / "s.gguf") as f:
        assert f.metadata["test.strings"] == fast == strings
        assert f.tensor_data("a.weight").tolist() == [[1.0] * 32]


def test_a_large_numeric_array_is_a_view_not_a_list(tmp_path):
    """A 20 MB u8 metadata array: as python ints it took 8.6x its size; as a view it costs nothing
    until read, and `info` shows it in one line."""
    from localinfer.describe import describe

    n = 20_000_000
    big_values = (np.arange(n) % 7 + 1).astype(np.uint8)

    def kv(key: str, vtype: int, payload: bytes) -> bytes:
        k = key.encode()
        return struct.pack("<Q", len(k)) + k + struct.pack("<I", vtype) + payload

    def array(etype: int, fmt: str, values) -> bytes:
        return struct.pack("<IQ", etype, len(values)) + struct.pack(f"<{len(values)}{fmt}", *values)

    arch = b"llama"
    entries = [
        kv("general.architecture", 8, struct.pack("<Q", len(arch)) + arch),
        kv("llama.block_count", 4, struct.pack("<I", 1)),
        kv("llama.attention.head_count", 9, struct.pack("<IQ", 0, n) + big_values.tobytes()),   # u8 array
        kv("llama.attention.head_count_kv", 9, array(4, "I", [1, 2, 3])),                      # u32 array
        kv("test.flags", 9, array(7, "?", [True, False, True])),                                # bool array
    ]
    (tmp_path / "big.gguf").write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(entries)) + b"".join(entries))
    del big_values

    tracemalloc.start()
    try:
        with GGUFFile(tmp_path / "big.gguf") as f:
            big = f.metadata["llama.attention.head_count"]
            _, peak = tracemalloc.get_traced_memory()
            assert peak < n // 20, peak
            assert isinstance(big, np.ndarray) and big.dtype == np.uint8 and len(big) == n
            assert not big.flags.writeable and not big.flags.owndata
            assert big[:8].tolist() == [1, 2, 3, 4, 5, 6, 7, 1]
            assert f.metadata["test.flags"].tolist() == [True, False, True]
            hp = describe(f)["hyperparameters"]
    finally:
        tracemalloc.stop()
    assert hp["attention.head_count_kv"] == [1, 2, 3]
    assert hp["attention.head_count"] == f"array of {n} uint8 (min 1, max 7)"
    json.dumps(hp)


def test_a_split_model_reads_as_one(smollm2_path, tmp_path):
    """A model in three files (llama.cpp's gguf-split layout, tests/split_gguf.py) opens by its first
    part: the same metadata and tensors, each tensor's bytes read from its own part."""
    from split_gguf import split
    first, second, third = split(smollm2_path, tmp_path, 3, "smol")
    with GGUFFile(smollm2_path) as whole, GGUFFile(first) as parts:
        assert [p.path for p in parts.parts] == [str(first), str(second), str(third)]
        assert {k: v for k, v in parts.metadata.items() if not k.startswith("split.")}.keys() == whole.metadata.keys()
        assert list(parts.tensors) == list(whole.tensors)
        for name in whole.tensors:
            np.testing.assert_array_equal(parts.tensor_data(name), whole.tensor_data(name))
        last = list(whole.tensors)[-1]
        assert parts.part_of(last).path == str(third)


def test_a_split_model_names_what_is_wrong(smollm2_path, tmp_path):
    from split_gguf import split
    first, second, third = split(smollm2_path, tmp_path, 3, "smol")
    with pytest.raises(GGUFError, match="give its first part"):
        GGUFFile(second)
    third.unlink()
    with pytest.raises(GGUFError, match="part 3 of 3 is missing"):
        GGUFFile(first)
    split(smollm2_path, tmp_path, 3, "smol")
    (tmp_path / "smol-00002-of-00003.gguf").replace(tmp_path / "smol-00003-of-00003.gguf")
    split(smollm2_path, tmp_path / ".." / tmp_path.name, 2, "other")
    (tmp_path / "other-00002-of-00002.gguf").replace(tmp_path / "smol-00002-of-00003.gguf")
    with pytest.raises(GGUFError, match="not part 2 of 3"):
        GGUFFile(first)
