"""What converting an encoder adds to convert_hf.py: BERT-family checkpoints -> the GGUF layout
llama.cpp reads for `bert`, `nomic-bert`, `jina-bert-v2` and `modern-bert` (its conversion/bert.py and
gguf-py's tensor_mapping.py give the names; the runtime is src/localinfer/arch/encoder.py).

- BertModel / BertForMaskedLM (embedders: bge, e5, MiniLM) and BertForSequenceClassification
  (cross-encoder re-rankers, classifiers) -> "bert". A classifier's pooler (dense + tanh on the
  [CLS] row) becomes cls.weight/bias and its classifier cls.output.weight/bias, so the GGUF's
  rank head computes what transformers does: classifier(tanh(pooler(h[CLS]))). (llama.cpp's
  converter drops a BERT pooler, which changes a BERT re-ranker's scores; its graph runs ours
  as written.) The labels (config id2label) go in `bert.classifier.output_labels`, and
  pooling_type is rank. A MaskedLM's prediction head is not needed and not written.
- NomicBertModel (nomic-embed-text v1/v1.5) -> "nomic-bert": fused Wqkv, fc11 (up), fc12 (gate),
  fc2 (down), rotary base rotary_emb_base; the config in nomic's own keys (n_embd, n_head, ...)
  or in transformers' (hidden_size, ...). nomic's n_positions 8192 trained at 2048 is 2048, as
  llama.cpp writes it.
- JinaBertModel / JinaBertForMaskedLM (jina-embeddings-v2-*-en) -> "jina-bert-v2": ALiBi (no
  position tensor), mlp.gated_layers (gate ‖ up) as ffn_up of 2*n_ff rows, mlp.wo as ffn_down.
  Its code variant (up_gated_layer, layer_norm_1/2) is refused.
- ModernBertModel / ModernBertForMaskedLM / ModernBertForSequenceClassification -> "modern-bert":
  Wqkv, Wo, Wi (input ‖ gate as ffn_up of 2*n_ff rows), attn_norm (none in layer 0), mlp_norm as
  ffn_norm, final_norm as output_norm; attention.sliding_window = local_attention, the local layers
  from layer_types (an array) or global_attn_every_n_layers (a period, global first), the rope bases
  of both kinds, hidden_activation. A classifier's head.dense / head.norm become cls / cls.norm and
  its classifier cls.output, with classifier.pooling_type from classifier_pooling. Biases
  (attention_bias, mlp_bias, norm_bias, classifier_bias) are refused: llama.cpp loads none.
  Its byte-level BPE tokenizer is written as model "gpt2", pre-tokenizer "modern-bert".

The vocabulary (tokenizer.json or vocab.txt, WordPiece) is hf_tokenizer.write_wordpiece_vocab's
(modern-bert's BPE: add_bpe_encoder_vocab); a folder without one makes a GGUF of token ids only.

Keys: context_length, embedding_length, feed_forward_length, attention.head_count,
attention.layer_norm_epsilon, attention.causal = false, vocab_size, tokenizer.ggml.token_type_count,
pooling_type (from a sentence-transformers Pooling module; rank for a classifier). Norms, biases,
position and token-type tables stay float32, as llama.cpp keeps them.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
from gguf import GGUFWriter, PoolingType

from .hf_config import Config, ConversionError
from .safetensors_file import Checkpoint

# config.json "architectures" -> GGUF architecture
ENCODER_ARCHS = {
    "BertModel": "bert", "BertForMaskedLM": "bert", "BertForSequenceClassification": "bert",
    "NomicBertModel": "nomic-bert",
    "JinaBertModel": "jina-bert-v2", "JinaBertForMaskedLM": "jina-bert-v2",
    "ModernBertModel": "modern-bert", "ModernBertForMaskedLM": "modern-bert",
    "ModernBertForSequenceClassification": "modern-bert",
}
_CLASSIFIERS = {"BertForSequenceClassification", "ModernBertForSequenceClassification"}


def is_classifier(hf_arch: str) -> bool:
    """A checkpoint with a sequence-classification head (a cross-encoder re-ranker or a classifier)."""
    return hf_arch in _CLASSIFIERS

_EMBEDDINGS = {
    "embeddings.word_embeddings": "token_embd", "embeddings.position_embeddings": "position_embd",
    "embeddings.token_type_embeddings": "token_types", "embeddings.LayerNorm": "token_embd_norm",
    "emb_ln": "token_embd_norm",  # nomic
    "embeddings.tok_embeddings": "token_embd", "embeddings.norm": "token_embd_norm",  # modern-bert
    "final_norm": "output_norm",
}
# per family: the layer part of a HF name -> the GGUF layer tensor
_LAYERS = {
    "bert": (r"encoder\.layer\.(\d+)\.", {
        "attention.self.query": "attn_q", "attention.self.key": "attn_k", "attention.self.value": "attn_v",
        "attention.output.dense": "attn_output", "attention.output.LayerNorm": "attn_output_norm",
        "intermediate.dense": "ffn_up", "output.dense": "ffn_down", "output.LayerNorm": "layer_output_norm"}),
    "nomic-bert": (r"encoder\.layers\.(\d+)\.", {
        "attn.Wqkv": "attn_qkv", "attn.out_proj": "attn_output", "norm1": "attn_output_norm",
        "mlp.fc11": "ffn_up", "mlp.fc12": "ffn_gate", "mlp.fc2": "ffn_down", "norm2": "layer_output_norm"}),
    "jina-bert-v2": (r"encoder\.layer\.(\d+)\.", {
        "attention.self.query": "attn_q", "attention.self.key": "attn_k", "attention.self.value": "attn_v",
        "attention.output.dense": "attn_output", "attention.output.LayerNorm": "attn_output_norm",
        "mlp.gated_layers": "ffn_up", "mlp.wo": "ffn_down", "mlp.layernorm": "layer_output_norm"}),
    "modern-bert": (r"layers\.(\d+)\.", {
        "attn_norm": "attn_norm", "attn.Wqkv": "attn_qkv", "attn.Wo": "attn_output", "mlp_norm": "ffn_norm",
        "mlp.Wi": "ffn_up", "mlp.Wo": "ffn_down"}),
}
# modern-bert's head: a classifier's dense + act + norm before its classifier (a MaskedLM's is unused)
_MODERN_BERT_HEAD = {"head.dense": "cls", "head.norm": "cls.norm"}
# tensors no encoder needs: the MLM / next-sentence heads, buffers, an embedder's pooler
_SKIPPED = re.compile(r"(cls\.predictions|cls\.seq_relationship|lm_head|mlm)\.|.*position_ids$|.*rotary_emb\.inv_freq$")
_GELUS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast")  # run as ggml_gelu, the tanh form


def _hf_name(name: str) -> tuple[str, str]:
    """(the name without its model prefix, the .weight/.bias suffix); LayerNorm gamma/beta are
    weight/bias (old BERT checkpoints)."""
    for prefix in ("bert.", "model."):
        if name.startswith(prefix):
            name = name[len(prefix):]
    for old, new in ((".gamma", ".weight"), (".beta", ".bias")):
        if name.endswith(old):
            name = name[:-len(old)] + new
    base, dot, suffix = name.rpartition(".")
    return (base, "." + suffix) if dot and suffix in ("weight", "bias") else (name, "")


def gguf_encoder_name(hf_name: str, arch: str, classifier: bool) -> str | None:
    """The GGUF name of a HF encoder tensor; None for one the GGUF does not hold."""
    base, suffix = _hf_name(hf_name)
    if _SKIPPED.match(base + suffix + "."):
        return None
    if base in _EMBEDDINGS:
        return _EMBEDDINGS[base] + suffix
    if base == "pooler.dense":
        return "cls" + suffix if classifier else None  # the head's dense layer; an embedder's is unused
    if arch == "modern-bert" and (base in _MODERN_BERT_HEAD or base == "decoder"):
        return _MODERN_BERT_HEAD[base] + suffix if classifier and base != "decoder" else None
    if base == "classifier" and classifier:
        return "cls.output" + suffix
    layer_re, parts = _LAYERS[arch]
    m = re.match(layer_re + r"(.+)$", base)
    if m and m.group(2) in parts:
        return f"blk.{m.group(1)}.{parts[m.group(2)]}{suffix}"
    raise ConversionError(f"tensor {hf_name!r} has no GGUF name in this converter ({arch})")


def _find(c: Config, keys: tuple[str, ...], default=...):
    """The first of `keys` the config has (nomic's own names or transformers')."""
    for key in keys:
        if c.get(key) is not None:
            return c.get(key)
    if default is ...:
        raise ConversionError(f"{c.path}: missing required key {keys[0]!r}")
    return default


def _check_family(c: Config, arch: str) -> None:
    """Refuse what the runtime does not compute, naming the key."""
    act = _find(c, ("hidden_act", "activation_function"), "gelu")
    if arch == "bert":
        if act not in _GELUS:
            raise ConversionError(f"{c.path}: hidden_act {act!r}: bert runs GELU only")
        if c.get("position_embedding_type", "absolute") != "absolute":
            raise ConversionError(f"{c.path}: position_embedding_type {c.get('position_embedding_type')!r} "
                                  "(bert: absolute only)")
    elif arch == "nomic-bert":
        if act not in ("swiglu", "silu"):
            raise ConversionError(f"{c.path}: activation {act!r}: nomic-bert runs SwiGLU (the MoE variant is not supported)")
        for key, want in (("prenorm", False), ("rotary_emb_fraction", 1.0), ("rotary_emb_interleaved", False),
                          ("rotary_emb_scale_base", None)):
            if key in c.d and c.d[key] != want:
                raise ConversionError(f"{c.path}: {key} = {c.d[key]!r} is not supported (nomic-bert: {want!r})")
        if c.get("moe_every_n_layers"):
            raise ConversionError(f"{c.path}: the mixture-of-experts variant (moe_every_n_layers) is not supported")
    elif arch == "modern-bert":
        _check_modern_bert(c)
    elif arch == "jina-bert-v2":
        if c.get("position_embedding_type", "alibi") != "alibi":
            raise ConversionError(f"{c.path}: position_embedding_type {c.get('position_embedding_type')!r} (jina-bert-v2: alibi)")
        if c.get("feed_forward_type", "geglu") != "geglu":
            raise ConversionError(f"{c.path}: feed_forward_type {c.get('feed_forward_type')!r} (jina-bert-v2: geglu)")


def _check_modern_bert(c: Config) -> None:
    from localinfer.arch.modern_bert import FFN_ACTIVATIONS
    for key in ("attention_bias", "mlp_bias", "norm_bias", "classifier_bias"):
        if c.get(key):
            raise ConversionError(f"{c.path}: {key} = true: modern-bert runs without biases (llama.cpp loads none)")
    act = c.get("hidden_activation", "gelu")
    if act not in FFN_ACTIVATIONS:
        raise ConversionError(f"{c.path}: hidden_activation {act!r} (modern-bert: {', '.join(FFN_ACTIVATIONS)})")
    if c.get("classifier_activation", "gelu") not in _GELUS:
        raise ConversionError(f"{c.path}: classifier_activation {c.get('classifier_activation')!r}: the head runs GELU")
    if c.get("classifier_pooling", "cls") not in ("cls", "mean"):
        raise ConversionError(f"{c.path}: classifier_pooling {c.get('classifier_pooling')!r} (cls or mean)")
    for kind, rope in _modern_bert_ropes(c).items():
        if rope.get("rope_type", "default") != "default":
            raise ConversionError(f"{c.path}: {kind} rope_type {rope['rope_type']!r} (modern-bert: default)")


def _modern_bert_ropes(c: Config) -> dict[str, dict]:
    """{"full_attention": {...}, "sliding_attention": {...}}: transformers 5's rope_parameters, or
    the older global_rope_theta / local_rope_theta keys (ModernBERT's own defaults 160000 / 10000)."""
    ropes = c.get("rope_parameters") or {}
    return {"full_attention": {"rope_theta": c.get("global_rope_theta", 160000.0),
                               **(ropes.get("full_attention") or {})},
            "sliding_attention": {"rope_theta": c.get("local_rope_theta", 10000.0),
                                  **(ropes.get("sliding_attention") or {})}}


def _modern_bert_hparams(w: GGUFWriter, c: Config, arch: str, n_layer: int) -> None:
    ropes = _modern_bert_ropes(c)
    w.add_rope_freq_base(float(ropes["full_attention"]["rope_theta"]))
    w.add_rope_freq_base_swa(float(ropes["sliding_attention"]["rope_theta"]))
    w.add_sliding_window(int(c.get("local_attention", 128)))
    layer_types = c.get("layer_types")
    if layer_types is not None:
        if len(layer_types) != n_layer or not set(layer_types) <= {"full_attention", "sliding_attention"}:
            raise ConversionError(f"{c.path}: layer_types {layer_types!r} (one full_attention or "
                                  f"sliding_attention per layer, {n_layer})")
        w.add_sliding_window_pattern([t == "sliding_attention" for t in layer_types])
    else:
        w.add_sliding_window_pattern(int(c.get("global_attn_every_n_layers", 3)))
    w.add_string(f"{arch}.hidden_activation", str(c.get("hidden_activation", "gelu")))


def _context_length(c: Config, arch: str) -> int:
    if arch == "nomic-bert" and c.get("n_positions") is not None:
        # nomic-embed-text v1/v1.5 say n_positions 8192 but were trained at 2048 (llama.cpp writes 2048)
        return min(int(c.get("n_positions")), int(c.get("max_trained_positions", c.get("n_positions"))))
    return int(_find(c, ("max_position_embeddings", "n_positions")))


def _sentence_transformers_pooling(folder: Path) -> PoolingType | None:
    """The pooling of a sentence-transformers model (modules.json -> its Pooling module's config)."""
    modules = folder / "modules.json"
    if not modules.is_file():
        return None
    for module in json.loads(modules.read_text(encoding="utf-8")):
        if str(module.get("type", "")).endswith("Pooling"):
            config = json.loads((folder / module["path"] / "config.json").read_text(encoding="utf-8"))
            for key, kind in (("pooling_mode_mean_tokens", PoolingType.MEAN), ("pooling_mode_cls_token", PoolingType.CLS),
                              ("pooling_mode_lasttoken", PoolingType.LAST)):
                if config.get(key):
                    return kind
            mode = {"mean": PoolingType.MEAN, "cls": PoolingType.CLS, "lasttoken": PoolingType.LAST}.get(
                config.get("pooling_mode"))
            if mode is None:
                raise ConversionError(f"{folder / module['path']}: pooling {config} is not mean, cls or lasttoken")
            return mode
    return None


def encoder_hparams(w: GGUFWriter, c: Config, folder: Path, arch: str, classifier: bool) -> int:
    """Writes the {arch}.* keys; returns n_vocab."""
    _check_family(c, arch)
    n_vocab = int(c.need("vocab_size"))
    w.add_context_length(_context_length(c, arch))
    w.add_embedding_length(int(_find(c, ("hidden_size", "n_embd"))))
    w.add_block_count(int(_find(c, ("num_hidden_layers", "n_layer"))))
    w.add_feed_forward_length(int(_find(c, ("intermediate_size", "n_inner"))))
    w.add_head_count(int(_find(c, ("num_attention_heads", "n_head"))))
    w.add_layer_norm_eps(float(_find(c, ("layer_norm_eps", "layer_norm_epsilon", "norm_eps"), 1e-12)))
    w.add_causal_attention(False)
    w.add_vocab_size(n_vocab)
    if arch == "nomic-bert":
        w.add_rope_freq_base(float(c.rope().get("rope_theta", c.get("rotary_emb_base", 10000.0))))
    if arch == "modern-bert":
        _modern_bert_hparams(w, c, arch, int(_find(c, ("num_hidden_layers", "n_layer"))))
    pooling = PoolingType.RANK if classifier else _sentence_transformers_pooling(folder)
    if pooling is not None:
        w.add_pooling_type(pooling)
    if classifier and arch == "modern-bert":  # which row(s) the head reads (llama.cpp's default: mean)
        w.add_uint32(f"{arch}.classifier.pooling_type", int({"cls": PoolingType.CLS, "mean": PoolingType.MEAN}[
            c.get("classifier_pooling", "cls")]))
    if classifier:
        id2label = c.get("id2label", {})
        labels = [id2label[k] for k in sorted(id2label, key=int)] if id2label else ["LABEL_0"]
        w.add_classifier_output_labels(labels)
    return n_vocab


def encoder_tensors(ckpt: Checkpoint, arch: str, classifier: bool) -> Iterator[tuple[str, Callable[[], np.ndarray]]]:
    names = ckpt.names()
    dense = "head.dense" if arch == "modern-bert" else "pooler.dense"
    if classifier and not any(_hf_name(n)[0] == dense for n in names):
        raise ConversionError(f"a sequence classifier without its head's dense layer ({dense}) is not supported")
    for hf_name in names:
        name = gguf_encoder_name(hf_name, arch, classifier)
        if name is not None:
            yield name, lambda hf_name=hf_name: ckpt.tensor(hf_name).astype(np.float32)


def keeps_f32(name: str) -> bool:
    """Position and token-type tables stay float32 (llama.cpp's converter keeps POS_EMBD and TOKEN_TYPES so)."""
    return name in ("position_embd.weight", "token_types.weight")


def add_encoder_vocab(w: GGUFWriter, c: Config, folder: Path, n_vocab: int, log: Callable[[str], None],
                      arch: str = "bert") -> None:
    """The WordPiece vocabulary as tokenizer.ggml.* keys (model "bert", hf_tokenizer.py), which
    include tokenizer.ggml.token_type_count. A folder with no tokenizer files makes a GGUF of token
    ids only (the library then takes token ids, not text)."""
    if not any((folder / name).is_file() for name in ("tokenizer.json", "vocab.txt")):
        log("no tokenizer.json / vocab.txt: the GGUF holds no vocabulary (token ids only)")
        if arch != "modern-bert":
            w.add_token_type_count(int(c.get("type_vocab_size", 1)))
        return
    if arch == "modern-bert":
        from .hf_tokenizer import add_bpe_encoder_vocab
        add_bpe_encoder_vocab(w, folder, n_vocab, pre="modern-bert")
        return
    from .hf_tokenizer import write_wordpiece_vocab
    v = write_wordpiece_vocab(w, folder, n_vocab)
    if len(v.tokens) != n_vocab:
        raise ConversionError(f"{folder}: the vocabulary has {len(v.tokens)} tokens, config.json's vocab_size {n_vocab}")
