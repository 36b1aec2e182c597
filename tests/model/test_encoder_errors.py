"""Bad input to the encoders, each a clear error: a GGUF with a missing tensor or contradicting
metadata, generation asked of an encoder, token ids, lengths and token types out of range,
re-ranking with an embedder; and the converter's refusals and choices (keys in nomic's own
spelling, sentence-transformers pooling, a classifier's head and labels).

Tiny random torch models (tests/encoder_oracle.py); needs the `oracle` extra.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from gguf import GGUFReader, GGUFValueType, GGUFWriter  # noqa: E402

from encoder_oracle import N_CTX, N_VOCAB, make_encoder, texts  # noqa: E402
from localinfer.arch import build_model  # noqa: E402
from localinfer.arch.encoder import EncoderOnlyError, NoHeadError  # noqa: E402
from localinfer.encoder_tasks import default_pooling, embed_tokens, plan_passes, score_tokens  # noqa: E402
from localinfer.files.gguf_file import GGUFError, GGUFFile  # noqa: E402
from localinfer.kv.cache import ContextFullError  # noqa: E402
from localinfer.quant.convert_hf import convert_hf  # noqa: E402
from localinfer.quant.hf_config import ConversionError  # noqa: E402


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """family -> (HF folder, converted f32 GGUF), made once."""
    made = {}

    def get(family):
        if family not in made:
            folder = tmp_path_factory.mktemp(family)
            make_encoder(family, folder)
            made[family] = folder, convert_hf(folder, folder / "model.gguf", "f32")
        return made[family]
    return get


def _load(path, backend="reference"):
    with GGUFFile(path) as f:
        return build_model(f, backend)


def rewrite(src, dst, drop=(), metadata=None):
    """A copy of the GGUF `src` without the tensors `drop` and with `metadata` {key: (value, type,
    array element type or None)} set; everything else as it was."""
    r = GGUFReader(str(src))
    w = GGUFWriter(str(dst), str(r.fields["general.architecture"].contents()))
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture" or name in (metadata or {}):
            continue
        sub = field.types[-1] if field.types[0] == GGUFValueType.ARRAY else None
        w.add_key_value(name, field.contents(), field.types[0], sub_type=sub)
    for name, (value, vtype, sub) in (metadata or {}).items():
        w.add_key_value(name, value, vtype, sub_type=sub)
    for t in r.tensors:
        if t.name not in drop:
            w.add_tensor(t.name, np.asarray(t.data).reshape([int(n) for n in reversed(t.shape)]), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def test_a_missing_tensor_is_named(folders, tmp_path):
    _, path = folders("bert")
    for name in ("blk.1.layer_output_norm.bias", "position_embd.weight", "token_embd_norm.weight"):
        with pytest.raises(GGUFError, match=f"missing tensor '{name}'"):
            _load(rewrite(path, tmp_path / "m.gguf", drop=[name]))
    _, jina = folders("jina")
    with pytest.raises(GGUFError, match="missing tensor 'token_types.weight'"):  # jina-bert-v2 requires it
        _load(rewrite(jina, tmp_path / "j.gguf", drop=["token_types.weight"]))


def test_contradicting_metadata_is_named(folders, tmp_path):
    _, path = folders("bert_classify")
    labels = {"bert.classifier.output_labels": (["a", "b"], GGUFValueType.ARRAY, GGUFValueType.STRING)}
    with pytest.raises(GGUFError, match="names 2 labels, but the classification head makes 3 scores"):
        _load(rewrite(path, tmp_path / "labels.gguf", metadata=labels))
    causal = {"bert.attention.causal": (True, GGUFValueType.BOOL, None)}
    with pytest.raises(GGUFError, match="bert.attention.causal = True"):
        _load(rewrite(path, tmp_path / "causal.gguf", metadata=causal))
    pooling = {"bert.pooling_type": (9, GGUFValueType.UINT32, None)}
    with pytest.raises(GGUFError, match="bert.pooling_type = 9"):
        _load(rewrite(path, tmp_path / "pooling.gguf", metadata=pooling))
    types = {"tokenizer.ggml.token_type_count": (5, GGUFValueType.UINT32, None)}
    with pytest.raises(GGUFError, match="token_type_count = 5, but token_types.weight has 2 rows"):
        _load(rewrite(path, tmp_path / "types.gguf", metadata=types))


def test_an_encoder_cannot_generate(folders):
    m = _load(folders("nomic")[1])
    for call in (lambda: m.forward(np.array([1, 2]), None), lambda: m.new_cache(64),
                 lambda: m.forward_batch([]), lambda: m.hidden_batch([])):
        with pytest.raises(EncoderOnlyError, match="encoder model .*use embed/rerank"):
            call()


def test_bad_token_lists_are_refused_before_any_work(folders):
    m = _load(folders("bert")[1])
    with pytest.raises(ValueError, match=f"unknown token id {N_VOCAB}"):
        embed_tokens(m, [[2, 5, 3], [2, N_VOCAB, 3]])
    with pytest.raises(ValueError, match="unknown token id -1"):
        embed_tokens(m, [[2, -1, 3]])
    with pytest.raises(ValueError, match="input 1 is empty"):
        embed_tokens(m, [[2, 3], []])
    with pytest.raises(ContextFullError, match=f"input 0 is {N_CTX + 1} tokens long, .* at most {N_CTX}"):
        embed_tokens(m, texts(0, 1, lo=N_CTX + 1, hi=N_CTX + 1))
    with pytest.raises(ValueError, match="pooling must be one of"):
        embed_tokens(m, [[2, 3]], "max")
    with pytest.raises(ValueError, match=r"token types must be in 0..1"):
        score_tokens(_load(folders("bert_rerank")[1]), [[2, 5, 3]], [[0, 2, 0]])
    assert embed_tokens(m, []).shape == (0, m.config.n_embd)


def test_rerank_needs_a_head(folders):
    m = _load(folders("bert")[1])
    assert m.n_cls_out == 0
    with pytest.raises(NoHeadError, match="no classification head .* use embed"):
        score_tokens(m, [[2, 5, 3]])
    reranker = _load(folders("bert_rerank")[1])
    with pytest.raises(ValueError, match="re-ranker .* use rerank"):
        default_pooling(reranker.config)
    assert default_pooling(m.config) == "mean"  # the file names no pooling


def test_passes_are_sorted_by_length_and_bounded():
    lengths = [5, 30, 6, 5, 100, 7]
    passes = plan_passes(lengths, n_batch=32)
    assert sorted(i for p in passes for i in p) == list(range(6))
    for p in passes:
        assert len(p) == 1 or len(p) * max(lengths[i] for i in p) <= 32
    assert passes[0] == [0, 3, 2, 5]  # 4 texts of at most 7 tokens: 28 padded tokens
    assert passes[-1] == [4]  # longer than a pass: alone
    with pytest.raises(ValueError, match="n_batch must be >= 1"):
        plan_passes(lengths, 0)


def _edit_config(folder, **changes):
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


def test_converter_refuses_what_the_runtime_does_not_compute(tmp_path):
    nomic = tmp_path / "nomic"
    make_encoder("nomic", nomic)
    _edit_config(nomic, prenorm=True)
    with pytest.raises(ConversionError, match="prenorm = True is not supported"):
        convert_hf(nomic, tmp_path / "n.gguf", "f32")
    jina = tmp_path / "jina"
    make_encoder("jina", jina)
    _edit_config(jina, feed_forward_type="reglu")
    with pytest.raises(ConversionError, match="feed_forward_type 'reglu'"):
        convert_hf(jina, tmp_path / "j.gguf", "f32")
    bert = tmp_path / "bert"
    make_encoder("bert", bert)
    _edit_config(bert, hidden_act="relu")
    with pytest.raises(ConversionError, match="hidden_act 'relu'"):
        convert_hf(bert, tmp_path / "b.gguf", "f32")


def test_nomic_config_in_its_own_keys_converts_the_same(folders, tmp_path):
    """nomic's hub config.json spells the keys its own way (n_embd, n_positions, rotary_emb_base ...)."""
    folder, path = folders("nomic")
    hub = tmp_path / "hub"
    hub.mkdir()
    (hub / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes())
    c = json.loads((folder / "config.json").read_text())
    (hub / "config.json").write_text(json.dumps({
        "architectures": ["NomicBertModel"], "model_type": "nomic_bert", "vocab_size": c["vocab_size"],
        "n_embd": c["hidden_size"], "n_head": c["num_attention_heads"], "n_layer": c["num_hidden_layers"],
        "n_inner": c["intermediate_size"], "n_positions": 8 * N_CTX, "max_trained_positions": N_CTX,
        "rotary_emb_base": 1000, "rotary_emb_fraction": 1.0, "rotary_emb_interleaved": False,
        "rotary_emb_scale_base": None, "activation_function": "swiglu", "prenorm": False, "causal": False,
        "qkv_proj_bias": False, "mlp_fc1_bias": False, "mlp_fc2_bias": False,
        "layer_norm_epsilon": c["layer_norm_eps"], "type_vocab_size": c["type_vocab_size"]}))
    ids = texts(0, 3)
    want = embed_tokens(_load(path), ids)
    other = _load(convert_hf(hub, tmp_path / "hub.gguf", "f32"))
    assert other.config == _load(path).config
    np.testing.assert_array_equal(embed_tokens(other, ids), want)


def test_sentence_transformers_pooling_is_written(folders, tmp_path):
    folder, _ = folders("bert")
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    try:
        m = _load(convert_hf(folder, tmp_path / "st.gguf", "f32"))
    finally:
        (folder / "modules.json").unlink()
    assert m.config.pooling == "cls" and default_pooling(m.config) == "cls"


def test_a_classifier_keeps_its_pooler_as_the_head(folders):
    """BertForSequenceClassification: pooler.dense -> cls, classifier -> cls.output, labels and rank pooling."""
    _, path = folders("bert_classify")
    with GGUFFile(path) as f:
        assert tuple(f.tensors["cls.weight"].shape) == (64, 64)
        assert tuple(f.tensors["cls.output.weight"].shape) == (3, 64)
        assert f.metadata["bert.classifier.output_labels"] == ["negative", "neutral", "positive"]
        assert f.metadata["bert.pooling_type"] == 4 and f.metadata["bert.attention.causal"] is False
    with GGUFFile(folders("bert")[1]) as f:  # an embedder's pooler is not needed
        assert "cls.weight" not in f.tensors and "bert.classifier.output_labels" not in f.metadata
