"""The HF -> GGUF converter without torch: a hand-made safetensors checkpoint and tokenizer.json,
the safetensors reader, and clear errors for what it cannot convert.
(The comparison with transformers' forward pass is tests/model/test_hf_oracle.py.)"""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from click.testing import CliRunner

from localinfer.arch import build_model
from localinfer.cli.main import main
from localinfer.files.gguf_file import GGUFFile
from localinfer.formats import dequantize
from localinfer.quant.convert_hf import ConversionError, convert_hf, permute_rows
from localinfer.quant.hf_tokenizer import TokenizerConversionError
from localinfer.quant.safetensors_file import SafetensorsError, SafetensorsFile
from localinfer.tokenizer import Tokenizer

N_EMBD, N_HEAD, N_HEAD_KV, N_FF, N_VOCAB = 8, 2, 1, 16, 6


def write_safetensors(path, tensors: dict[str, np.ndarray], bf16: tuple[str, ...] = ()):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        if name in bf16:
            raw, dtype = (np.ascontiguousarray(t, np.float32).view(np.uint32) >> 16).astype(np.uint16), "BF16"
        else:
            raw, dtype = np.ascontiguousarray(t), {np.float32: "F32", np.float16: "F16"}[t.dtype.type]
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + raw.nbytes]}
        blobs.append(raw.tobytes())
        offset += raw.nbytes
    head = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def make_folder(folder, arch="LlamaForCausalLM", drop_config=(), pre_tokenizer=None):
    rng = np.random.default_rng(0)
    config = {"architectures": [arch], "hidden_size": N_EMBD, "num_attention_heads": N_HEAD,
              "num_key_value_heads": N_HEAD_KV, "intermediate_size": N_FF, "num_hidden_layers": 1,
              "max_position_embeddings": 32, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "vocab_size": N_VOCAB,
              "tie_word_embeddings": True}
    for k in drop_config:
        del config[k]
    (folder / "config.json").write_text(json.dumps(config))
    hd = N_EMBD // N_HEAD
    p = "model.layers.0."
    shapes = {"model.embed_tokens.weight": (N_VOCAB, N_EMBD), "model.norm.weight": (N_EMBD,),
              p + "input_layernorm.weight": (N_EMBD,), p + "post_attention_layernorm.weight": (N_EMBD,),
              p + "self_attn.q_proj.weight": (N_HEAD * hd, N_EMBD), p + "self_attn.k_proj.weight": (N_HEAD_KV * hd, N_EMBD),
              p + "self_attn.v_proj.weight": (N_HEAD_KV * hd, N_EMBD), p + "self_attn.o_proj.weight": (N_EMBD, N_HEAD * hd),
              p + "mlp.gate_proj.weight": (N_FF, N_EMBD), p + "mlp.up_proj.weight": (N_FF, N_EMBD),
              p + "mlp.down_proj.weight": (N_EMBD, N_FF)}
    tensors = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    write_safetensors(folder / "model.safetensors", tensors, bf16=(p + "mlp.up_proj.weight",))
    vocab = {"a": 0, "b": 1, "ab": 2, "Ġ": 3, "Ġab": 4}
    (folder / "tokenizer.json").write_text(json.dumps({
        "model": {"type": "BPE", "vocab": vocab, "merges": [["a", "b"], "Ġ ab"]},
        "pre_tokenizer": pre_tokenizer or {"type": "ByteLevel", "use_regex": True},
        "decoder": {"type": "ByteLevel"},
        "added_tokens": [{"id": 5, "content": "<eos>", "special": True}]}))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<eos>", "add_bos_token": False}))
    return tensors


def test_safetensors_reads_f32_f16_bf16(tmp_path):
    t = {"a": np.array([[1.5, -2.0], [0.25, 3.0]], np.float32), "b": np.array([1.0, 2.5], np.float16),
         "c": np.array([-1.0, 0.5, 384.0], np.float32)}
    write_safetensors(tmp_path / "x.safetensors", t, bf16=("c",))
    f = SafetensorsFile(tmp_path / "x.safetensors")
    assert f.shape("a") == (2, 2)
    for k, v in t.items():
        got = f.tensor(k)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, v.astype(np.float32))


@pytest.mark.parametrize("cut", [4, 20])
def test_a_truncated_safetensors_file_is_an_error(tmp_path, cut):
    write_safetensors(tmp_path / "x.safetensors", {"a": np.ones((4, 4), np.float32)})
    data = (tmp_path / "x.safetensors").read_bytes()
    (tmp_path / "x.safetensors").write_bytes(data[:cut] if cut < 10 else data[:-cut])
    with pytest.raises(SafetensorsError):
        SafetensorsFile(tmp_path / "x.safetensors")


def test_a_hand_made_llama_converts_loads_and_runs(tmp_path):
    tensors = make_folder(tmp_path)
    out = convert_hf(tmp_path, tmp_path / "m.gguf", "f32")
    with GGUFFile(out) as f:
        assert f.architecture == "llama"
        assert "output.weight" not in f.tensors  # tied: the token embedding is the output
        q = f.tensors["blk.0.attn_q.weight"]
        got_q = dequantize(f.tensor_data(q.name), q.ggml_type, q.shape)
        np.testing.assert_array_equal(got_q, permute_rows(tensors["model.layers.0.self_attn.q_proj.weight"], N_HEAD))
        up = f.tensors["blk.0.ffn_up.weight"]  # stored bf16 in the checkpoint: read exactly
        bf16 = tensors["model.layers.0.mlp.up_proj.weight"].view(np.uint32) & 0xFFFF0000
        np.testing.assert_array_equal(dequantize(f.tensor_data(up.name), up.ggml_type, up.shape), bf16.view(np.float32))
        tok = Tokenizer.from_metadata(f.metadata)
        m = build_model(f, "reference")
    assert tok.tokenize("ab ab", add_special=False) == [2, 4]
    assert tok.eos_id == 5
    logits = m.forward(np.array([0, 2, 4]), m.new_cache(16))
    assert logits.shape == (3, N_VOCAB) and np.isfinite(logits).all()


def test_permute_rows_pairs_the_two_halves_of_each_head():
    w = np.arange(8)[:, None].astype(np.float32)  # one head of 8 rows: halves 0..3 and 4..7
    assert permute_rows(w, 1)[:, 0].tolist() == [0, 4, 1, 5, 2, 6, 3, 7]


def test_cli_convert_and_info(tmp_path):
    make_folder(tmp_path)
    r = CliRunner().invoke(main, ["convert", str(tmp_path), str(tmp_path / "m.gguf"), "--outtype", "q8_0"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["info", str(tmp_path / "m.gguf")])
    assert r.exit_code == 0 and "architecture  llama" in r.output and "feed_forward_length" in r.output


@pytest.mark.parametrize("change, message", [
    (dict(drop_config=("num_attention_heads",)), "num_attention_heads"),
    (dict(arch="GPT2LMHeadModel"), "not supported"),
    (dict(pre_tokenizer={"type": "Whitespace"}), "--pre"),
])
def test_what_cannot_be_converted_is_a_clear_error(tmp_path, change, message):
    make_folder(tmp_path, **change)
    with pytest.raises(ValueError, match=message):
        convert_hf(tmp_path, tmp_path / "m.gguf", "f16")
    r = CliRunner().invoke(main, ["convert", str(tmp_path), str(tmp_path / "m.gguf")])
    assert r.exit_code == 1 and message in r.output


def test_a_missing_tokenizer_is_a_clear_error(tmp_path):
    make_folder(tmp_path)
    (tmp_path / "tokenizer.json").unlink()
    with pytest.raises(TokenizerConversionError, match="no tokenizer.json"):
        convert_hf(tmp_path, tmp_path / "m.gguf")


def test_an_unknown_pre_tokenizer_can_be_named(tmp_path):
    make_folder(tmp_path, pre_tokenizer={"type": "Whitespace"})
    with GGUFFile(convert_hf(tmp_path, tmp_path / "m.gguf", pre="gpt-2")) as f:
        assert f.metadata["tokenizer.ggml.pre"] == "gpt-2"


def test_missing_weights_and_bad_outtype_are_clear_errors(tmp_path):
    make_folder(tmp_path)
    with pytest.raises(ConversionError, match="output type"):
        convert_hf(tmp_path, tmp_path / "m.gguf", "q4_0")
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(SafetensorsError, match="safetensors"):
        convert_hf(tmp_path, tmp_path / "m.gguf")
