"""modern-bert beyond what tests/model/test_encoder_oracle.py checks for every embedder: the local
layers' sliding window is really exercised, the re-ranker's head (dense -> GELU -> norm -> classifier
over the mean of the rows) against ModernBertForSequenceClassification, the byte-level BPE vocabulary
token for token against the `tokenizers` library, the text-level calls, what the converter writes
and what it refuses.

Tolerances as test_encoder_oracle.py: our GELU is ggml's tanh form, transformers' the erf form
(< 1e-3 per activation), so f32 and f16 agree to ~1e-3 of the values' scale and q8_0 (8-bit weights
and activations, ~1% relative) to ~1e-2. Needs the `oracle` extra (torch, transformers, tokenizers).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from encoder_oracle import (MODERN_WINDOW, N_VOCAB, SENTENCES, make_bpe_tokenizer, make_encoder, texts,  # noqa: E402
                            torch_hidden, torch_scores)
from localinfer import Model  # noqa: E402
from localinfer.arch import build_model  # noqa: E402
from localinfer.arch.encoder import EncoderParams  # noqa: E402
from localinfer.encoder_tasks import embed_tokens, score_tokens  # noqa: E402
from localinfer.files.gguf_file import GGUFFile  # noqa: E402
from localinfer.quant.convert_hf import convert_hf  # noqa: E402
from localinfer.quant.hf_config import ConversionError  # noqa: E402

QUERY = "which fox jumps over the dog?"
DOCUMENTS = ["The quick brown fox jumps over the lazy dog.", "Numbers like 12345 stay words.",
             "Café and résumé keep their accents here.", "the re-ranker reads the query and the document together",
             "东京 and 北京", "short"]


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """family -> (torch model, HF folder, f32 GGUF path); "tok_" families carry the BPE tokenizer."""
    made = {}

    def get(family: str):
        if family not in made:
            folder = tmp_path_factory.mktemp(family)
            tokenizer = make_bpe_tokenizer() if family.startswith("tok_") else None
            model = make_encoder(family.removeprefix("tok_"), folder, seed=7, tokenizer=tokenizer)
            made[family] = model, folder, convert_hf(folder, folder / "model-f32.gguf", "f32")
        return made[family]
    return get


def _load(path, backend="reference"):
    with GGUFFile(path) as f:
        return build_model(f, backend)


def _cos(a, b):
    a, b = np.atleast_2d(a).astype(np.float64), np.atleast_2d(b).astype(np.float64)
    return np.sum(a * b, -1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def test_the_file_says_which_layers_are_local(build):
    _, _, path = build("modern")
    m = _load(path)
    c = m.config
    assert (c.n_swa, c.swa_layers, c.rope_base, c.rope_base_swa) == (MODERN_WINDOW, (False, True, False), 160000.0, 10000.0)
    assert [layer.swa for layer in m.weights.layers] == [False, True, False]
    assert m.weights.layers[0].attn_norm is None and m.weights.layers[1].attn_norm is not None
    assert m.weights.token_types is None and m.weights.position_embd is None


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_the_sliding_window_and_the_local_rope_base_matter(build, backend):
    """Texts of 12..30 tokens, longer than the window (8): without the window, or with the global
    rope base on the local layer, the hidden states move far past the 0.9999 they otherwise keep."""
    model, _, path = build("modern")
    ids = texts(4, 4, lo=12, hi=30)
    m = _load(path, backend)

    def worst():
        got = embed_tokens(m, ids, "none", normalize=False)
        return min(_cos(g, torch_hidden("modern", model, t)).min() for g, t in zip(got, ids))
    assert worst() >= 0.9999
    params = m.layer_params()
    m.layer_params = lambda: EncoderParams(params.scale, params.inv_freq, None, params.inv_freq_swa, 0)
    assert worst() < 0.999
    m.layer_params = lambda: EncoderParams(params.scale, params.inv_freq, None, params.inv_freq, params.n_swa)
    assert worst() < 0.999


def _rerank_inputs():
    """[CLS] query [SEP] document [SEP], each document one word repeated 24..39 times (as
    test_encoder_oracle.py does, so that the scores spread)."""
    rng = np.random.default_rng(0)
    query = texts(5, 1, lo=8, hi=8)[0]
    words, counts = rng.choice(np.arange(4, N_VOCAB), 6, replace=False), rng.integers(24, 40, 6)
    return [query + [int(w)] * int(n) + [query[-1]] for w, n in zip(words, counts)]


@pytest.mark.parametrize("outtype", ["f32", "f16", "q8_0"])
def test_rerank_scores_match_modern_bert_for_sequence_classification(build, outtype):
    """The head (dense, GELU, norm, classifier) over the mean of the rows. Scores within 2e-3 (f32,
    f16) or 4e-2 (q8_0) of their scale; every pair of documents further apart than twice that keeps
    its order. q8_0 gets twice bert's 2e-2: the head's LayerNorm rescales the dense layer's output
    to unit variance, so the ~1% relative error that 8-bit weights and activations leave in the
    pooled row reaches the scores undamped, and the head adds two more 8-bit products (seen: 2.3e-2)."""
    model, folder, _ = build("modern_rerank")
    path = convert_hf(folder, folder / f"model-{outtype}.gguf", outtype)
    inputs = _rerank_inputs()
    want = np.array([torch_scores(model, ids, None)[0] for ids in inputs])
    tol = (4e-2 if outtype == "q8_0" else 2e-3) * np.abs(want).max()
    for backend in ("reference", "c"):
        m = _load(path, backend)
        assert m.n_cls_out == 1 and m.config.pooling == "rank" and m.config.head_pooling == "mean"
        got = score_tokens(m, inputs)[:, 0]
        assert np.abs(got - want).max() < tol, (backend, np.abs(got - want).max())
        apart = np.abs(want[:, None] - want[None, :]) > 2 * tol
        assert apart.sum() >= 10, want  # most of the 15 pairs are far apart: the order check has teeth
        same_order = np.sign(got[:, None] - got[None, :]) == np.sign(want[:, None] - want[None, :])
        assert same_order[apart].all()


def test_the_bpe_vocabulary_is_the_tokenizers_librarys(build):
    """Token for token ([CLS] ... [SEP]), and written as llama.cpp names it: gpt2 / modern-bert."""
    tokenizer = make_bpe_tokenizer()
    _, _, path = build("tok_modern")
    with GGUFFile(path) as f:
        meta = f.metadata
        assert meta["tokenizer.ggml.model"] == "gpt2" and meta["tokenizer.ggml.pre"] == "modern-bert"
        assert (meta["tokenizer.ggml.bos_token_id"], meta["tokenizer.ggml.eos_token_id"]) == (1, 2)
        assert meta["tokenizer.ggml.add_sep_token"] is False
        assert list(meta["modern-bert.attention.sliding_window_pattern"]) == [False, True, False]
    with Model(path) as m:
        for text in SENTENCES + ["  spaces  and\ttabs\n", "ünïcödé 123 4567", "[MASK] stays text"]:
            assert m.tokenize(text) == tokenizer.encode(text).ids, text


def test_embed_and_rerank_texts_match_torch(build):
    tokenizer = make_bpe_tokenizer()
    model, _, path = build("tok_modern")
    with Model(path, backend="c") as m:
        got = m.embed(SENTENCES)  # mean: the file names no pooling
        want = np.stack([torch_hidden("modern", model, tokenizer.encode(t).ids).mean(0) for t in SENTENCES])
        assert _cos(got, want).min() >= 0.9999
    ranker, _, path = build("tok_modern_rerank")
    want = np.array([torch_scores(ranker, tokenizer.encode(QUERY, d).ids, None)[0] for d in DOCUMENTS])
    with Model(path, backend="c") as m:
        results = m.rerank(QUERY, DOCUMENTS)
    for r in results:
        assert abs(r.relevance_score - want[r.index]) < 2e-3 * np.abs(want).max()
    scores = np.array([r.relevance_score for r in results])
    apart = np.abs(want[[r.index for r in results]][:, None] - want[[r.index for r in results]][None, :])
    # the order is transformers' wherever two documents' logits are further apart than the tolerance
    order = np.sign(scores[:, None] - scores[None, :])
    want_order = np.sign(want[[r.index for r in results]][:, None] - want[[r.index for r in results]][None, :])
    assert (order == want_order)[apart > 4e-3 * np.abs(want).max()].all()


def test_the_older_config_keys_convert_alike(build, tmp_path):
    """global_attn_every_n_layers and global/local_rope_theta (hub checkpoints before transformers 5)
    give the same layers as layer_types and rope_parameters."""
    _, folder, path = build("modern")
    config = json.loads((folder / "config.json").read_text())
    for key in ("layer_types", "rope_parameters"):
        config.pop(key)
    config.update(global_rope_theta=160000.0, local_rope_theta=10000.0)
    old = tmp_path / "old"
    old.mkdir()
    (old / "config.json").write_text(json.dumps(config))
    (old / "model.safetensors").symlink_to(folder / "model.safetensors")
    m_old, m_new = _load(convert_hf(old, old / "m.gguf", "f32")), _load(path)
    assert m_old.config == m_new.config
    ids = texts(6, 3, lo=10, hi=20)
    np.testing.assert_array_equal(embed_tokens(m_old, ids, "mean"), embed_tokens(m_new, ids, "mean"))


@pytest.mark.parametrize("key,value,message", [
    ("attention_bias", True, "attention_bias"), ("norm_bias", True, "norm_bias"),
    ("hidden_activation", "relu", "hidden_activation"), ("classifier_pooling", "max", "classifier_pooling")])
def test_what_the_converter_refuses(build, tmp_path, key, value, message):
    _, folder, _ = build("modern")
    config = json.loads((folder / "config.json").read_text())
    config[key] = value
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").symlink_to(folder / "model.safetensors")
    with pytest.raises(ConversionError, match=message):
        convert_hf(tmp_path, tmp_path / "m.gguf", "f32")
