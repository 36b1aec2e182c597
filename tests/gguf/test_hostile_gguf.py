"""Hostile GGUF files: one metadata value or one tensor info of a real model (SmolLM2, llama
architecture; gemma3) rewritten. Each is refused at load with one line naming the key or tensor
and its value, before anything is sized by it, instead of a traceback, a 16 GiB allocation,
NaN logits or a model that loads and talks garbage.

The copies are sparse: the header (metadata and tensor infos) is the real one with one value
patched, and the tensor data section is a hole of the same length. Every check here happens
before a weight is read, so the tests stay fast.
"""
from __future__ import annotations

import struct
import subprocess
import sys
import tracemalloc

import pytest

from localinfer.arch import build_model
from localinfer.files.gguf_file import GGUFError, GGUFFile
from gguf import GGMLQuantizationType as T, GGUFValueType

_PACK = {GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i", GGUFValueType.FLOAT32: "<f"}


class Header:
    """A real file's header bytes, where each scalar value and tensor info field lies in them,
    and sparse copies of the file with some of those patched."""

    def __init__(self, path):
        with GGUFFile(path) as f:
            self.size, self.data_offset = path.stat().st_size, f.data_offset
            self.spans, self.types = dict(f.metadata_spans), dict(f.metadata_types)
            self.names = list(f.tensors)
        with open(path, "rb") as fh:
            self.data = fh.read(self.data_offset)
        self.type_at, self.offset_at = {}, {}  # tensor name -> position of its ggml type / its offset
        pos = max(end for _, end in self.spans.values())  # the tensor infos follow the metadata
        for _ in self.names:
            (n,) = struct.unpack_from("<Q", self.data, pos)
            name = self.data[pos + 8:pos + 8 + n].decode()
            pos += 8 + n
            (n_dims,) = struct.unpack_from("<I", self.data, pos)
            pos += 4 + 8 * n_dims
            self.type_at[name], self.offset_at[name] = pos, pos + 4
            pos += 12

    def value(self, key: str, value) -> tuple[int, bytes]:
        """A patch setting scalar `key` to `value`, in the key's own type."""
        fmt = _PACK[self.types[key]]
        return self.spans[key][1] - struct.calcsize(fmt), struct.pack(fmt, value)

    def tensor_offset(self, name: str) -> int:
        (off,) = struct.unpack_from("<Q", self.data, self.offset_at[name])
        return off

    def write(self, path, *patches: tuple[int, bytes]):
        data = bytearray(self.data)
        for pos, raw in patches:
            data[pos:pos + len(raw)] = raw
        with open(path, "wb") as fh:
            fh.write(data)
            fh.truncate(self.size)  # the tensor data: a hole as long as the real one
        return path


@pytest.fixture(scope="module")
def smollm2(smollm2_path):
    return Header(smollm2_path)


@pytest.fixture(scope="module")
def gemma3(gemma3_path):
    return Header(gemma3_path)


def _load_error(path) -> str:
    with pytest.raises(GGUFError) as e:
        with GGUFFile(path) as f:
            build_model(f, "reference")
    message = str(e.value)
    assert "\n" not in message
    return message


def test_the_unpatched_sparse_copies_pass_the_checks(smollm2, gemma3, tmp_path):
    """The patches below are the only thing wrong with their files."""
    from localinfer.arch.gemma3 import Gemma3Config
    from localinfer.arch.llama import LlamaConfig
    with GGUFFile(smollm2.write(tmp_path / "s.gguf")) as f:
        assert LlamaConfig.from_gguf(f).n_layer == 30
    with GGUFFile(gemma3.write(tmp_path / "g.gguf")) as f:
        assert Gemma3Config.from_gguf(f).n_layer == 18


NAN, INF = float("nan"), float("inf")

# (key, value, what the error says besides "key = value")
SMOLLM2_VALUES = [
    ("llama.rope.dimension_count", 0xFFFFFFFF, "at most 2147483647"),  # was a 16 GiB rope table
    ("llama.rope.dimension_count", 128, "at most the head size 64"),  # was "the batch does not fit"
    ("llama.rope.dimension_count", 0, "positive"),
    ("llama.rope.dimension_count", 63, "even"),
    ("llama.attention.head_count", 0, "positive"),  # was ZeroDivisionError
    ("llama.attention.head_count", 7, "must divide llama.attention.head_count = 7"),
    ("llama.attention.head_count_kv", 2, "must divide llama.attention.head_count = 9"),
    ("llama.attention.head_count_kv", 0, "positive"),
    ("llama.embedding_length", 577, "not a multiple of llama.attention.head_count = 9"),
    ("llama.embedding_length", 585, "token_embd.weight has shape (49152, 576)"),
    ("llama.context_length", 0, "positive"),  # was "n_ctx must be positive, got None"
    ("llama.block_count", 0, "positive"),  # loaded, and ran no layer at all
    ("llama.block_count", 29, "tensors for 30 layers"),  # loaded, and skipped the last layer
    ("llama.block_count", 31, "tensors for 30 layers"),
    ("llama.feed_forward_length", 0, "positive"),
    ("llama.vocab_size", 49153, "token_embd.weight has shape (49152, 576)"),
    ("llama.vocab_size", 100, "tokenizer.ggml.tokens has 49152 tokens"),
    ("llama.rope.freq_base", 0.0, "positive"),  # these were NaN logits, then a numpy error
    ("llama.rope.freq_base", -1.0, "positive"),
    ("llama.rope.freq_base", NAN, "finite"),
    ("llama.rope.freq_base", INF, "finite"),
    ("llama.attention.layer_norm_rms_epsilon", -1.0, "positive"),
    ("llama.attention.layer_norm_rms_epsilon", NAN, "finite"),
    ("llama.attention.layer_norm_rms_epsilon", 0.0, "positive"),  # loaded, and divided by zero on a zero row
    ("llama.attention.layer_norm_rms_epsilon", INF, "finite"),
    # finite and positive, and nonsense: these loaded and answered with empty text
    ("llama.attention.layer_norm_rms_epsilon", 2.0**100, "between 0 and 1"),
    ("llama.rope.freq_base", 2.0**100, "between 1 and 1e+12"),
    ("llama.rope.freq_base", 0.5, "between 1 and 1e+12"),
]


@pytest.mark.parametrize("key, value, why", SMOLLM2_VALUES, ids=[f"{k.split('.', 1)[1]}={v}" for k, v, _ in SMOLLM2_VALUES])
def test_smollm2_hyperparameter(smollm2, tmp_path, key, value, why):
    message = _load_error(smollm2.write(tmp_path / "m.gguf", smollm2.value(key, value)))
    shown = repr(float(value)) if isinstance(value, float) else str(value)
    assert f"{key} = {shown}" in message and why in message


GEMMA3_VALUES = [
    ("gemma3.attention.head_count", 0, "positive"),
    ("gemma3.attention.key_length", 0, "positive"),
    ("gemma3.attention.value_length", 128, "equal to the key length 256"),
    ("gemma3.attention.head_count_kv", 3, "must divide gemma3.attention.head_count = 4"),
    ("gemma3.block_count", 17, "tensors for 18 layers"),
    ("gemma3.context_length", 0, "positive"),
    ("gemma3.rope.freq_base", NAN, "finite"),
    ("gemma3.attention.layer_norm_rms_epsilon", 0.0, "positive"),
    ("gemma3.rope.freq_base", 2.0**100, "between 1 and 1e+12"),
]


@pytest.mark.parametrize("key, value, why", GEMMA3_VALUES, ids=[f"{k.split('.', 1)[1]}={v}" for k, v, _ in GEMMA3_VALUES])
def test_gemma3_hyperparameter(gemma3, tmp_path, key, value, why):
    message = _load_error(gemma3.write(tmp_path / "m.gguf", gemma3.value(key, value)))
    shown = repr(float(value)) if isinstance(value, float) else str(value)
    assert f"{key} = {shown}" in message and why in message


def test_a_huge_rope_dimension_allocates_nothing(smollm2, tmp_path):
    path = smollm2.write(tmp_path / "m.gguf", smollm2.value("llama.rope.dimension_count", 0xFFFFFFFF))
    with GGUFFile(path) as f:
        tracemalloc.start()
        try:
            with pytest.raises(GGUFError, match="rope.dimension_count = 4294967295"):
                build_model(f, "reference")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 1 << 20


def _tensor_error(h: Header, tmp_path, *patches) -> str:
    with pytest.raises(GGUFError) as e:
        GGUFFile(h.write(tmp_path / "t.gguf", *patches))
    message = str(e.value)
    assert "\n" not in message
    return message


def test_tensors_sharing_bytes_are_refused(smollm2, tmp_path):
    a, b = smollm2.names[5], smollm2.names[6]
    message = _tensor_error(smollm2, tmp_path, (smollm2.offset_at[b], struct.pack("<Q", smollm2.tensor_offset(a))))
    assert f"tensor {b!r} data at offset {smollm2.tensor_offset(a)} overlaps" in message


def test_a_tensor_retyped_smaller_is_refused(smollm2, gemma3, tmp_path):
    """Q4_1 -> Q4_0 (20 -> 18 bytes a block), same shape: it would read the first 90% of its own bytes
    as other weights; its data now ends before the next tensor begins."""
    name = "blk.0.ffn_down.weight"
    with GGUFFile(smollm2.write(tmp_path / "ok.gguf")) as f:
        assert f.tensors[name].ggml_type == T.Q4_1
    message = _tensor_error(smollm2, tmp_path, (smollm2.type_at[name], struct.pack("<I", T.Q4_0)))
    assert f"tensor {name!r} (Q4_0, shape (576, 1536)" in message and "does not match its data" in message
    # the last tensor has no next one: the bytes it leaves after itself give it away
    last = gemma3.names[-1]
    message = _tensor_error(gemma3, tmp_path, (gemma3.type_at[last], struct.pack("<I", T.F16)))
    assert f"after the data of the last tensor {last!r} (F16" in message


def test_a_tensor_retyped_larger_is_refused(smollm2, tmp_path):
    name = "blk.0.ffn_down.weight"  # Q4_1 -> Q5_0: 20 -> 22 bytes a block, into the next tensor
    message = _tensor_error(smollm2, tmp_path, (smollm2.type_at[name], struct.pack("<I", T.Q5_0)))
    assert f"the end of tensor {name!r}, Q5_0" in message


def test_cli_prints_one_line_errors(smollm2, tmp_path):
    hostile = smollm2.write(tmp_path / "m.gguf", smollm2.value("llama.attention.head_count", 0))
    passwd = tmp_path / "passwd"
    passwd.write_text("root:x:0:0:root:/root:/bin/bash\n" * 4)
    for path, says in ((hostile, "llama.attention.head_count = 0: must be a positive integer"),
                       (passwd, "not a GGUF file")):
        r = subprocess.run([sys.executable, "-m", "localinfer.cli.main", "run", str(path), "-p", "hi", "-n", "1"],
                           capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert r.returncode != 0 and "Traceback" not in r.stderr
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("Error: ") and says in r.stderr
        assert str(path) in r.stderr and "root" not in r.stderr.replace(str(path), "")
