"""Synthetic random-weight models of real shapes (`bench --synthetic`) and `bench -d`.

Only the tiny test shapes are written; the real ones are checked from their tensor lists,
against the parameter counts their model cards give."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import TokenType

from localinfer.measure.bench import run_model
from localinfer.context import Context
from localinfer.files.gguf_file import GGUFFile
from localinfer.quant import synthetic
from localinfer.quant.synthetic import SHAPES, SyntheticError, n_params, parse_spec, tensor_specs


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCALINFER_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture(scope="module")
def tiny(cache, smollm2_path):
    """The tiny shape's F16 and Q4_0 files, made through the cache."""
    return {t: synthetic.synthetic_model("tiny", t, tokenizer_path=smollm2_path) for t in ("F16", "Q4_0")}


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# The parameter totals of the public safetensors checkpoints (1.24B, 3.21B, 8.03B, 7.62B on the model cards).
@pytest.mark.parametrize("name, params", [("llama-1b", 1_235_814_400), ("llama-3b", 3_212_749_824),
                                          ("llama-8b", 8_030_261_248), ("qwen2-7b", 7_615_616_512)])
def test_real_shapes_have_the_real_parameter_counts(name, params):
    assert n_params(SHAPES[name]) == params


def test_real_shapes_tensors():
    specs = {t.name: t for t in tensor_specs(SHAPES["llama-8b"])}
    assert specs["token_embd.weight"].shape == specs["output.weight"].shape == (128256, 4096)
    assert specs["blk.31.attn_k.weight"].shape == (1024, 4096)  # 8 kv heads x 128
    assert specs["blk.0.ffn_down.weight"].shape == (4096, 14336)
    assert specs["rope_freqs.weight"].shape == (64,)
    assert len([n for n in specs if n.startswith("blk.")]) == 32 * 9
    one_b = {t.name for t in tensor_specs(SHAPES["llama-1b"])}
    assert "output.weight" not in one_b and "blk.15.ffn_up.weight" in one_b  # tied embeddings, 16 layers
    qwen = {t.name: t for t in tensor_specs(SHAPES["qwen2-7b"])}
    assert qwen["blk.27.attn_q.bias"].shape == (3584,) and qwen["blk.0.attn_v.bias"].shape == (512,)
    assert qwen["output.weight"].shape == (152064, 3584) and "rope_freqs.weight" not in qwen


def test_spec_parsing():
    shape, types = parse_spec("llama-8b:q4_0,Q4_K_M")
    assert shape.name == "llama-8b" and types == ["Q4_0", "Q4_K_M"]
    assert parse_spec("qwen2-7b")[1] == ["Q4_0"]
    with pytest.raises(SyntheticError, match="unknown synthetic shape 'llama-70b'.*llama-1b"):
        parse_spec("llama-70b")
    with pytest.raises(ValueError, match="Q9_9"):
        parse_spec("llama-1b:Q9_9")


def test_metadata_and_padded_vocab(tiny, smollm2_path):
    with GGUFFile(tiny["F16"]) as f, GGUFFile(smollm2_path) as tok:
        m, s = f.metadata, SHAPES["tiny"]
        assert m["general.architecture"] == "llama" and m["general.file_type"] == 1
        assert m["llama.vocab_size"] == len(m["tokenizer.ggml.tokens"]) == s.n_vocab
        assert f.tensors["token_embd.weight"].shape == (s.n_vocab, s.n_embd)
        n_real = len(tok.metadata["tokenizer.ggml.tokens"])
        assert m["tokenizer.ggml.tokens"][:n_real] == tok.metadata["tokenizer.ggml.tokens"]
        assert m["tokenizer.ggml.tokens"][n_real] == f"[PAD{n_real}]"
        assert set(m["tokenizer.ggml.token_type"][n_real:]) == {int(TokenType.UNUSED)}
        for key in ("tokenizer.ggml.merges", "tokenizer.ggml.pre", "tokenizer.ggml.eos_token_id",
                    "tokenizer.chat_template"):
            assert m[key] == tok.metadata[key], key
        assert {t.ggml_type for t in f.tensors.values() if len(t.shape) == 2} == {T.F16}
        norm = f.tensor_data("blk.0.attn_norm.weight")
        assert norm.dtype == np.float32 and (norm == 1).all()
    with GGUFFile(tiny["Q4_0"]) as f:
        assert f.metadata["general.file_type"] == 2 and f.tensors["blk.1.ffn_up.weight"].ggml_type == T.Q4_0


@pytest.mark.parametrize("shape, ftype", [("tiny", "F16"), ("tiny", "Q4_0"), ("tiny-qwen2", "F16"), ("tiny", "MXFP4")])
def test_loads_and_gives_finite_logits(tiny, smollm2_path, shape, ftype):
    import localinfer
    model = localinfer.load(str(synthetic.synthetic_model(shape, ftype, tokenizer_path=smollm2_path)), n_ctx=64)
    ids = model.tokenize("The quick brown fox jumps over the lazy dog")
    logits = model.logits(ids)
    assert logits.shape == (len(ids), SHAPES[shape].n_vocab) and np.isfinite(logits).all()


def test_pure_mxfp4_gives_every_matrix_mxfp4():
    """llama-quantize's MXFP4_MOE mix gives a dense model Q8_0 matrices; the synthetic "MXFP4" is its
    --pure form: every matrix MXFP4 (token embedding included), vectors F32."""
    assert parse_spec("llama-1b:mxfp4,IQ4_XS")[1] == ["MXFP4", "IQ4_XS"]
    specs = {t.name: t for t in tensor_specs(SHAPES["llama-1b"])}
    plan = synthetic.planned_types(SHAPES["llama-1b"], "MXFP4")
    assert {plan[n] for n, t in specs.items() if len(t.shape) == 2} == {T.MXFP4}
    assert {plan[n] for n, t in specs.items() if len(t.shape) == 1} == {T.F32}
    # the llama-quantize mix of the same name is not touched: Q4_K_M still mixes Q4_K and Q6_K
    assert {T.Q4_K, T.Q6_K} <= set(synthetic.planned_types(SHAPES["llama-1b"], "Q4_K_M").values())


def test_mxfp4_file(cache, smollm2_path):
    """Written directly (no F16 first), llama.cpp's MXFP4_MOE file type, blocks that our dequantizer
    reads back close to Gaussian weights (the MXFP4 quantizer's bytes are checked against gguf-py in
    test_quantize_ternary_mxfp4.py)."""
    from localinfer.formats.registry import dequantize

    path = synthetic.synthetic_model("tiny", "MXFP4", tokenizer_path=smollm2_path)
    with GGUFFile(path) as f:
        assert f.metadata["general.file_type"] == 38  # LLAMA_FTYPE_MOSTLY_MXFP4_MOE
        assert f.tensors["token_embd.weight"].ggml_type == f.tensors["blk.1.ffn_down.weight"].ggml_type == T.MXFP4
        w = dequantize(f.tensor_data("blk.0.ffn_up.weight"), T.MXFP4, f.tensors["blk.0.ffn_up.weight"].shape)
    # Gaussian * 0.02 through 4-bit e2m1 levels: the spread survives, nothing is NaN or huge
    assert np.isfinite(w).all() and 0.01 < w.std() < 0.03 and np.abs(w).max() < 0.2


def test_bytes_depend_only_on_the_seed(tiny, tmp_path, smollm2_path):
    a, b, c = tmp_path / "a.gguf", tmp_path / "b.gguf", tmp_path / "c.gguf"
    synthetic.write_f16(SHAPES["tiny"], a, seed=0, tokenizer_path=smollm2_path)
    synthetic.write_f16(SHAPES["tiny"], b, seed=0, tokenizer_path=smollm2_path)
    synthetic.write_f16(SHAPES["tiny"], c, seed=1, tokenizer_path=smollm2_path)
    assert sha256(a) == sha256(b) == sha256(tiny["F16"]) != sha256(c)


def test_the_cache_is_reused(tiny, smollm2_path, monkeypatch):
    before = {t: p.stat() for t, p in tiny.items()}

    def no_writes(*a, **kw):
        raise AssertionError("a cached file was written again")

    monkeypatch.setattr(synthetic, "write_f16", no_writes)
    monkeypatch.setattr("localinfer.quant.quantize_file.quantize_file", no_writes)
    for t, p in tiny.items():
        assert synthetic.synthetic_model("tiny", t.lower(), tokenizer_path=smollm2_path) == p
        assert (p.stat().st_ino, p.stat().st_mtime_ns) == (before[t].st_ino, before[t].st_mtime_ns)
    assert [p.name for p in p.parent.iterdir() if p.name.endswith(".partial")] == []


def test_bench_at_depth(tiny, monkeypatch):
    """-d 16: every timed run starts with 16 tokens in the context, computed once, untimed."""
    offsets = []  # (tokens in the call, cache offset before it)
    original = Context.append

    def recording_append(self, tokens, **kw):
        offsets.append((len(tokens), self.cache.offset))
        return original(self, tokens, **kw)

    monkeypatch.setattr(Context, "append", recording_append)
    rows = run_model(str(tiny["Q4_0"]), 1, prompts=[0], gens=[4], reps=2, depths=[16])
    assert [(r["test"], r["n_depth"], r["n_gen"]) for r in rows] == [("tg4 @ d16", 16, 4)]
    assert np.isfinite(rows[0]["avg_ts"]) and len(rows[0]["samples_ns"]) == 2
    # the fill (16 tokens at 0), then warm-up and two repetitions: 4 decode steps from 16 each
    assert offsets == [(16, 0)] + [(1, 16 + i) for i in range(4)] * 3
