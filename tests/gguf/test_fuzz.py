"""Fuzz tests, bounded to seconds: the GGUF reader over mutated files, the tokenizers over random text.

GGUF: every mutated file either opens (and then every tensor view can be taken) or raises
GGUFError; never another exception, a hang (pytest-timeout) or an allocation out of proportion
to the file (tracemalloc's peak). Mutations are aimed at the fields that steer the parser (each
length, count, type and offset, found from a valid file's layout) as well as at random bytes.

Tokenizers: detokenize(tokenize(text, add_special=False, parse_special=False)) gives the text back,
exactly as far as the vocab type promises:
- byte-level BPE (SmolLM2) keeps every byte that has a token in the vocab: the text itself when all
  have one; a byte without one is dropped, as llama.cpp drops it (SmolLM2 lacks 21 of the 256);
- SentencePiece writes a space as "▁" (U+2581) and reads every "▁" back as a space (llama.cpp's
  llama_escape_whitespace / llama_unescape_whitespace, as sentencepiece itself), so a literal "▁"
  comes back as " "; anything else is kept (characters outside the vocab via <0xXX> byte tokens);
- with add_space_prefix (llama-2-style SPM vocabs; gemma-3 has it off) tokenize puts one space in
  front and detokenize takes it off the first token: the text comes back when it is one plain
  fragment. After a USER_DEFINED token such as "\\n" llama.cpp adds the space again, and
  detokenize does not remove that one (tests/tokenizer/test_spm.py pins that rule).
The streaming detokenizer, fed the same ids one by one, gives what detokenize gives.

Hypothesis keeps its example database in .hypothesis/ (it git-ignores that folder itself), so a
failure found once is tried first on the next run.
"""
from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from localinfer.files.gguf_file import GGUFError, GGUFFile
from localinfer.tokenizer import StreamingDetokenizer, Tokenizer
from localinfer.tokenizer.bpe import BYTE_TO_UNICODE
from localinfer.tokenizer.vocab import TokenAttr

FUZZ = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
# LOCALINFER_FUZZ_SCALE=20 multiplies every example count, for a longer hunt than the suite's seconds.
SCALE = max(1, int(os.environ.get("LOCALINFER_FUZZ_SCALE", "1")))

# ---- GGUF reader ------------------------------------------------------------------------------

# Values that land on the edges of the reader's checks when written over a count, length or offset.
INTERESTING = [0, 1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 16, 24, 31, 32, 33, 63, 64, 255, 256, 1023, 4096,
               2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40, 2**40 + 1, 2**62, 2**63 - 1, 2**63, 2**64 - 1]


def _write_small_gguf(path: Path) -> None:
    """Every metadata value type (scalars, arrays of each, arrays of strings) and four tensor types."""
    rng = np.random.default_rng(0)
    w = GGUFWriter(str(path), "llama")
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -3)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -300)
    w.add_uint32("llama.block_count", 1)
    w.add_int32("t.i32", -70000)
    w.add_float32("t.f32", 1.5)
    w.add_bool("t.bool", True)
    w.add_string("general.name", "fuzz")
    w.add_uint64("t.u64", 2**40)
    w.add_int64("t.i64", -(2**40))
    w.add_float64("t.f64", -2.25)
    w.add_uint32("general.alignment", 32)
    w.add_array("tokenizer.ggml.tokens", ["a", "b", "<s>", "ü"])
    w.add_array("t.ints", [1, 2, 3])
    w.add_array("t.floats", [0.5, -1.0])
    w.add_array("t.bools", [True, False])
    w.add_tensor("f32.weight", rng.standard_normal((3, 32)).astype(np.float32))
    w.add_tensor("f16.weight", rng.standard_normal((2, 64)).astype(np.float16))
    w.add_tensor("q8.weight", rng.integers(0, 256, (2, 34), dtype=np.uint8),
                 raw_dtype=GGMLQuantizationType.Q8_0)  # 2 rows of one 32-weight block
    w.add_tensor("q4k.weight", rng.integers(0, 256, (1, 144), dtype=np.uint8),
                 raw_dtype=GGMLQuantizationType.Q4_K)  # 1 row of one 256-weight block
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _fields(f: GGUFFile) -> list[tuple[int, int]]:
    """(offset, width) of every number that steers the parser in a valid file: counts, string
    lengths, value types, array types and counts, scalar values, tensor dims, types, offsets."""
    out = [(4, 4), (8, 8), (16, 8)]  # version, tensor count, metadata count
    end = 24
    for key, (start, end) in f.metadata_spans.items():
        out.append((start, 8))
        p = start + 8 + len(key.encode())
        out.append((p, 4))
        p += 4
        vtype, value = f.metadata_types[key], f.metadata[key]
        if vtype == GGUFValueType.STRING:
            out.append((p, 8))
        elif vtype == GGUFValueType.ARRAY:
            out += [(p, 4), (p + 4, 8)]
            p += 12
            if isinstance(value, list) and value and isinstance(value[0], str):
                for s in value:
                    out.append((p, 8))
                    p += 8 + len(s.encode())
        else:
            out.append((p, end - p))
    p = end
    for name, info in f.tensors.items():
        out.append((p, 8))
        p += 8 + len(name.encode())
        out.append((p, 4))
        p += 4
        for _ in info.shape:
            out.append((p, 8))
            p += 8
        out += [(p, 4), (p + 4, 8)]
        p += 12
    assert p <= f.data_offset < p + f.alignment  # the walk covered the whole header
    return out


def _mutations(size: int, fields: list[tuple[int, int]]):
    field = st.tuples(st.just("field"), st.sampled_from(fields),
                      st.one_of(st.sampled_from(INTERESTING), st.integers(0, 2**64 - 1),
                                st.integers(-40, 40)))  # small ints: a nudge of the field's value
    byte = st.tuples(st.just("byte"), st.integers(0, size - 1), st.integers(0, 255))
    splice = st.tuples(st.just("splice"), st.integers(0, size), st.integers(0, 16), st.binary(max_size=16))
    truncate = st.tuples(st.just("truncate"), st.integers(0, size))
    return st.lists(st.one_of(field, field, byte, splice, truncate), min_size=1, max_size=6)


def _apply(data: bytes, ops) -> bytes:
    out = bytearray(data)
    for op in ops:
        if op[0] == "field":
            (pos, width), value = op[1], op[2]
            if pos + width > len(out):
                continue
            if -40 <= value <= 40:
                value += int.from_bytes(out[pos:pos + width], "little")
            out[pos:pos + width] = (value % (1 << 8 * width)).to_bytes(width, "little")
        elif op[0] == "byte":
            if op[1] < len(out):
                out[op[1]] = op[2]
        elif op[0] == "splice":
            out[op[1]:op[1] + op[2]] = op[3]
        else:
            del out[op[1]:]
    return bytes(out)


def _open_everything(path: Path) -> str:
    """'ok' or 'error'; any exception other than GGUFError propagates and fails the test."""
    try:
        with GGUFFile(path) as f:
            for name, info in f.tensors.items():
                view = f.tensor_data(name)
                assert view.nbytes == info.nbytes
                del view
        return "ok"
    except GGUFError:
        return "error"


@pytest.fixture(scope="module")
def small_gguf(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz_gguf")
    path = d / "small.gguf"
    _write_small_gguf(path)
    with GGUFFile(path) as f:
        fields = _fields(f)
    return d, path.read_bytes(), fields


# A file this small has no business making the parser allocate more than this.
SMALL_FILE_PEAK_BYTES = 4 << 20


def test_the_small_file_is_valid(small_gguf):
    d, data, fields = small_gguf
    assert _open_everything(d / "small.gguf") == "ok"
    assert len(data) < 4096 and len(fields) > 50


@pytest.mark.timeout(120)
@settings(max_examples=400 * SCALE, **FUZZ)
@given(data=st.data())
def test_mutated_small_gguf_opens_or_raises_gguf_error(small_gguf, data):
    d, original, fields = small_gguf
    mutated = _apply(original, data.draw(_mutations(len(original), fields)))
    path = d / "mutated.gguf"
    path.write_bytes(mutated)
    tracemalloc.start()
    try:
        event(_open_everything(path))  # pytest --hypothesis-show-statistics shows how many opened
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < SMALL_FILE_PEAK_BYTES, f"{peak} bytes allocated for a {len(mutated)}-byte file"


@pytest.fixture(scope="module")
def real_header(smollm2_path, tmp_path_factory):
    """The real SmolLM2 file's header, metadata (its 49k-token vocab and merges) and tensor
    infos; the mutated copies get a sparse tail of the real length, so a valid header opens."""
    with GGUFFile(smollm2_path) as f:
        fields = _fields(f)
        header_end = f.data_offset
    with open(smollm2_path, "rb") as src:
        header = src.read(header_end)
    return tmp_path_factory.mktemp("fuzz_real"), header, smollm2_path.stat().st_size, fields


@pytest.mark.slow
@pytest.mark.timeout(120)
@settings(max_examples=25 * SCALE, **FUZZ)
@given(data=st.data())
def test_mutated_real_header_opens_or_raises_gguf_error(real_header, data):
    d, header, file_size, fields = real_header
    mutated = _apply(header, data.draw(_mutations(len(header), fields)))
    path = d / "mutated.gguf"
    with open(path, "wb") as out:
        out.write(mutated)
        out.truncate(max(len(mutated), file_size - len(header) + len(mutated)))
    event(_open_everything(path))


# ---- tokenizers --------------------------------------------------------------------------------

SPACE = "\u2581"  # SentencePiece's escaped space


def _edges(tok: Tokenizer) -> list[str]:
    """Fragments worth mixing into random text: every USER_DEFINED token (cut out before the
    encoder runs), some CONTROL ones (plain text here, parse_special=False), byte-token names,
    the pieces of some ordinary tokens, and whitespace / Unicode corner cases."""
    attrs, tokens = tok.vocab.attrs, tok.vocab.tokens
    user = [tokens[i] for i in range(tok.n_vocab) if attrs[i] & TokenAttr.USER_DEFINED]
    control = [tokens[i] for i in range(tok.n_vocab) if attrs[i] & TokenAttr.CONTROL][:40]
    rng = np.random.default_rng(0)
    pieces = [tok.token_to_bytes(int(i)).decode("utf-8", "ignore") for i in rng.integers(0, tok.n_vocab, 300)]
    corners = [" ", "  ", "\n", "\n\n", "\t", "\r\n", " \n ", SPACE, SPACE + "x", "<0x41>", "<0xE2>", "\x00",
               "é", "e\u0301", "\u200b", "\ufeff", "🙂", "👩‍👩‍👧", "\U0010ffff", "\u0130", "ﬃ", "１２３", "٣"]
    return user + control + pieces + corners


def _texts(tok: Tokenizer):
    return st.lists(st.one_of(st.text(max_size=24), st.sampled_from(_edges(tok))), max_size=12).map("".join)


def _streamed(tok: Tokenizer, ids: list[int]) -> str:
    stream = StreamingDetokenizer(tok, strip_leading_space=True)
    return "".join(stream.feed(i) for i in ids) + stream.flush()


@pytest.fixture(scope="module")
def bpe_tok(smollm2_metadata) -> Tokenizer:
    tok = Tokenizer.from_metadata(smollm2_metadata)
    assert tok.model.kind == "BPE" and not tok.model.clean_spaces  # what the exact round trip rests on
    return tok


@pytest.fixture(scope="module")
def spm_tok(gemma3_metadata) -> Tokenizer:
    tok = Tokenizer.from_metadata(gemma3_metadata)
    assert tok.model.kind == "SPM" and not tok.vocab.add_space_prefix
    return tok


@pytest.fixture(scope="module")
def spm_prefix_tok(gemma3_metadata) -> Tokenizer:
    return Tokenizer.from_metadata({**gemma3_metadata, "tokenizer.ggml.add_space_prefix": True})


def _bytes_the_vocab_has(tok: Tokenizer, text: str) -> bytes:
    """The text's UTF-8 without the bytes that have no one-byte token in a byte-level BPE vocab."""
    return bytes(b for b in text.encode() if BYTE_TO_UNICODE[b] in tok.vocab.token_to_id)


def test_bpe_drops_bytes_missing_from_the_vocab_as_llama_cpp_does(bpe_tok):
    """SmolLM2's vocab has no token for 21 of the 256 bytes, among them the controls 0x04, 0x06,
    0x13, 0x14, 0x16, 0x1d and the UTF-8 lead bytes 0xf1, 0xf2 (code points U+40000..U+BFFFF, all
    unassigned). llama.cpp (llm_tokenizer_bpe_session::tokenize) drops a byte it cannot find, and so
    do we: token-for-token equality with llama.cpp wins over a lossless round trip here."""
    missing = [b for b in range(256) if BYTE_TO_UNICODE[b] not in bpe_tok.vocab.token_to_id]
    assert {0x04, 0xF1, 0xF2} <= set(missing)
    for text, kept in (("a\x04b", "ab"), ("x\U00040000y", "x\ufffd\ufffd\ufffdy")):
        ids = bpe_tok.tokenize(text, add_special=False, parse_special=False)
        assert bpe_tok.detokenize(ids) == kept


@pytest.mark.timeout(120)
def test_bpe_round_trip(bpe_tok):
    @settings(max_examples=300 * SCALE, **FUZZ)
    @given(_texts(bpe_tok))
    @example("<|im_start|>user\n  hi\t<|endoftext|>")
    @example("\U00040000\x04")
    def check(text):
        ids = bpe_tok.tokenize(text, add_special=False, parse_special=False)
        kept = _bytes_the_vocab_has(bpe_tok, text)
        assert bpe_tok.detokenize_bytes(ids) == kept  # every byte the vocab has, nothing else
        if len(kept) == len(text.encode()):
            assert bpe_tok.detokenize(ids) == text
        assert _streamed(bpe_tok, ids) == bpe_tok.detokenize(ids)
    check()


@pytest.mark.timeout(120)
def test_spm_round_trip(spm_tok):
    @settings(max_examples=300 * SCALE, **FUZZ)
    @given(_texts(spm_tok))
    @example(f"<start_of_turn>user\n  a{SPACE}b <0x41> \n\n\n")
    def check(text):
        ids = spm_tok.tokenize(text, add_special=False, parse_special=False)
        assert spm_tok.detokenize(ids) == text.replace(SPACE, " ")
        assert _streamed(spm_tok, ids) == text.replace(SPACE, " ")
    check()


@pytest.mark.timeout(120)
def test_spm_with_space_prefix_round_trip(spm_prefix_tok):
    tok = spm_prefix_tok

    @settings(max_examples=200 * SCALE, **FUZZ)
    @given(_texts(tok))
    @example(" leading and trailing ")
    def check(text):
        ids = tok.tokenize(text, add_special=False, parse_special=False)
        streamed = _streamed(tok, ids)
        assert streamed == tok.detokenize(ids)
        if not any(tok.vocab.attrs[i] & TokenAttr.USER_DEFINED for i in ids):  # one plain fragment
            assert streamed == text.replace(SPACE, " ")
    check()
