"""The modern-bert architecture (ModernBERT-base/-large, gte-modernbert, granite-embedding R2; their
ModernBertForSequenceClassification re-rankers): pre-norm blocks with no biases, a final norm,
rotary positions whose base differs between global and local layers, and on the local layers a
symmetric sliding window (llama.cpp: src/models/modern-bert.cpp).

    x = layer_norm(token_embd[t])                         # no token types, no position table
    per layer:  q, k, v = attn_qkv(attn_norm(x))          # layer 0 has no attn_norm (identity)
                q, k = rope_neox(q), rope_neox(k)         # base rope.freq_base, or rope.freq_base_swa
                h = x + attn_output(attention(q, k, v))   # a local layer: keys |i - j| <= sliding_window // 2
                g ‖ u = ffn_up(ffn_norm(h));  x = h + ffn_down(gelu(g) * u)     # (silu: SwiGLU variants)
    hidden = layer_norm(x)                                 # output_norm
    head(pooled) = cls_out(cls_norm(gelu(cls(pooled))))   # ModernBertForSequenceClassification

Every norm is a LayerNorm without a bias. Layer i is local when i % n != 0 for the period n of
`attention.sliding_window_pattern` (3 when absent; an array names each layer), as llama.cpp's
load_swa_pattern(ml, 3, dense_first) reads it, and no layer is local without `attention.sliding_window`.
The FFN's activation is `hidden_activation` (gelu -> GEGLU when absent), the head's is gelu, and a
re-ranker's head reads the mean of the rows unless `classifier.pooling_type` says cls -- llama.cpp's
defaults for this architecture.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from ..backend.ops_reference import rope_freqs
from ..files.gguf_file import GGUFError, GGUFFile
from .blocks import Attention, GatedMLP
from .encoder import EncoderConfig, EncoderLayer, EncoderModel, EncoderParams, EncoderWeights, LayerNorm, _head
from .gemma3 import _swa_layers
from .hparams import HParams
from .weights import WeightLoader

SWA_PATTERN_DEFAULT = 3  # llama.cpp: load_swa_pattern(ml, 3, true), ModernBERT's global_attn_every_n_layers
# `{arch}.hidden_activation` -> the FFN's gated activation (llama.cpp's LLM_FFN_OP_TYPES_FROM_STRING,
# and transformers' GELU spellings, which llama.cpp runs as its GEGLU fallback)
FFN_ACTIVATIONS = {"gelu": "geglu", "geglu": "geglu", "gelu_new": "geglu", "gelu_pytorch_tanh": "geglu",
                   "gelu_fast": "geglu", "silu": "swiglu", "swish": "swiglu", "swiglu": "swiglu"}


@dataclass(frozen=True)
class ModernBertConfig(EncoderConfig):
    act: str = "geglu"  # a key of ENCODER_ACTIVATIONS, from hidden_activation

    default_head_pooling: ClassVar[str] = "mean"  # llama.cpp: gte-reranker-modernbert-base's files name none

    @classmethod
    def from_gguf(cls, f: GGUFFile) -> "ModernBertConfig":
        base = super().from_gguf(f)
        h = HParams(f)
        h.real("attention.layer_norm_epsilon")  # required, as llama.cpp reads it
        window = h.count("attention.sliding_window", 0, minimum=0)
        name = h.text("hidden_activation", "gelu")
        if name not in FFN_ACTIVATIONS:
            raise h.error("hidden_activation", name, f"the FFN runs one of {', '.join(FFN_ACTIVATIONS)}")
        swa = _swa_layers(h, base.n_layer, window or None, SWA_PATTERN_DEFAULT, dense_first=True)
        return cls(**{field.name: getattr(base, field.name) for field in dataclasses.fields(base)} | dict(
            n_swa=window, swa_layers=swa, rope_base_swa=h.real("rope.freq_base_swa", 10000.0),
            act=FFN_ACTIVATIONS[name]))


class ModernBertModel(EncoderModel):
    positions = "rope"
    ffn = "gated"
    act = "geglu"  # the default; each layer takes the file's (config.act)
    head_act = "gelu"
    config_class = ModernBertConfig

    @classmethod
    def load_weights(cls, w: WeightLoader, c: ModernBertConfig) -> EncoderWeights:
        def norm(name: str) -> LayerNorm:
            return LayerNorm.from_gguf(w, name, c.n_embd, bias=False)
        if w.has("blk.0.attn_qkv.bias") or w.has("blk.0.attn_output.bias") or w.has("blk.0.ffn_up.bias"):
            raise GGUFError(f"{w.f.path}: blk.0 has biases; {w.f.architecture} runs its layers without them "
                            "(attention_bias / mlp_bias are not supported)")
        layers = [EncoderLayer(attn=Attention.from_gguf(w, f"blk.{i}.", c), mlp=GatedMLP.from_gguf(w, f"blk.{i}.", c),
                               act=c.act, attn_norm=norm(f"blk.{i}.attn_norm") if i or w.has("blk.0.attn_norm.weight")
                               else None, ffn_norm=norm(f"blk.{i}.ffn_norm"), swa=c.swa_layers[i])
                  for i in range(c.n_layer)]
        head = _head(w, c)
        cls_norm = None
        if head["cls"] is not None and w.has("cls.norm.weight"):
            cls_norm = norm("cls.norm")
        return EncoderWeights(token_embd=w.embedding("token_embd.weight", (c.n_vocab, c.n_embd)), token_types=None,
                              position_embd=None, embd_norm=norm("token_embd_norm"), layers=layers,
                              output_norm=norm("output_norm"), cls_norm=cls_norm, **head)

    def layer_params(self) -> EncoderParams:
        c = self.config
        return EncoderParams(scale=1.0 / float(c.head_dim) ** 0.5, inv_freq=rope_freqs(c.head_dim, c.rope_base),
                             inv_freq_swa=rope_freqs(c.head_dim, c.rope_base_swa), n_swa=c.n_swa)
