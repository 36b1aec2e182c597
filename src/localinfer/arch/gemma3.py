"""The gemma3 architecture: readable numpy reference forward pass.

    x = token_embd[tokens] * sqrt(n_embd)
    per layer:  q, k, v = wq(norm(x)), wk(norm(x)), wv(norm(x))
                q, k = rope(q_norm(q)), rope(k_norm(k))           # RMSNorm per head, NeoX rope
                h = x + post_attn_norm( attn_output( attention(q * attn_scale, k, v) ) )
                x = h + post_ffw_norm( ffn_down( gelu(ffn_gate(norm(h))) * ffn_up(norm(h)) ) )
    logits = token_embd( norm(x) )     # tied output, unless the file has output.weight

Interleaved attention: five sliding-window layers (window 512, rope base 10000) per global
layer (rope base `rope.freq_base`, 1e6). The sliding-window layers get a RotatingKVCache, so
their memory does not grow with the context.

Quirks, checked against llama.cpp's src/models/gemma3.cpp (the version behind the reference data):
- HF Gemma norms compute x * (1 + w); the HF->GGUF converter already stores 1 + w, so the norms
  here are plain RMSNorm with the stored weight.
- There is no query_pre_attn_scalar key in the GGUF: llama.cpp scales queries by 1/sqrt(head_dim),
  except for the 62-layer 27B model, which uses 1/sqrt(n_embd/n_head).
- The query is scaled before the attention (then rounded to f16 with the KV cache), not the scores.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..files.gguf_file import GGUFFile
from ..backend import ops_reference
from ..backend.ops_reference import rope_freqs
from .batch import Batch
from .blocks import Attention, GatedMLP
from .decoder import DecoderModel
from .hparams import HParams
from .layer import DecoderLayer, LayerParams
from .weights import Embedding, Linear, WeightLoader

SWA_PATTERN_DEFAULT = 6  # llama.cpp's load_swa_pattern(ml, 6) for gemma3: every 6th layer is global
ROPE_BASE_SWA_DEFAULT = 10000.0  # llama_hparams::rope_freq_base_train_swa
N_LAYER_27B = 62  # the one gemma3 size whose query scale is 1/sqrt(n_embd/n_head)


@dataclass(frozen=True)
class Gemma3Config:
    n_vocab: int
    n_embd: int  # model width
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int  # key_length == value_length
    n_ff: int
    n_ctx_train: int
    rms_eps: float
    n_rot: int
    rope_base: float  # global layers
    rope_scale: float  # global layers: linear scaling, positions are multiplied by this
    rope_base_swa: float  # sliding-window layers (not scaled)
    sliding_window: int | None  # None: every layer is global
    is_swa: tuple[bool, ...]  # (n_layer,) True for a sliding-window layer
    attn_scale: float  # queries are multiplied by this
    final_logit_softcap: float | None

    @classmethod
    def from_gguf(cls, f: GGUFFile) -> "Gemma3Config":
        """Every value checked before it sizes anything (hparams.py): a bad one is an error naming its key."""
        h = HParams(f)
        n_embd, n_head = h.count("embedding_length"), h.count("attention.head_count")
        n_layer, head_dim = h.block_count(), h.head_dim(n_embd, n_head)
        value_length = h.count("attention.value_length", head_dim)
        if value_length != head_dim:
            raise h.error("attention.value_length", value_length,
                          f"gemma3 needs it equal to the key length {head_dim}")
        window = h.count("attention.sliding_window", 0, minimum=0) or None
        softcap = h.real("final_logit_softcapping", 0.0, zero_means_none=True) or None
        scaling = h.text("rope.scaling.type", "linear")
        if scaling not in ("linear", "none"):
            raise h.error("rope.scaling.type", scaling, "not supported for gemma3 (supported: linear, none)")
        factor = (h.real("rope.scaling.factor", 0.0, zero_means_none=True)
                  or h.real("rope.scale_linear", 0.0, zero_means_none=True))
        head_dim_for_scale = n_embd // n_head if n_layer == N_LAYER_27B else head_dim
        return cls(
            n_vocab=h.vocab_size(n_embd), n_embd=n_embd, n_layer=n_layer, n_head=n_head,
            n_head_kv=h.head_count_kv(n_head), head_dim=head_dim,
            n_ff=h.count("feed_forward_length"), n_ctx_train=h.count("context_length", 8192),
            rms_eps=h.real("attention.layer_norm_rms_epsilon", 1e-6),
            n_rot=h.rope_dimension_count(head_dim),
            rope_base=h.real("rope.freq_base", 10000.0),
            rope_scale=1.0 / factor if factor else 1.0,
            rope_base_swa=h.real("rope.freq_base_swa", ROPE_BASE_SWA_DEFAULT),
            sliding_window=window, is_swa=_swa_layers(h, n_layer, window),
            attn_scale=1.0 / float(np.sqrt(head_dim_for_scale)), final_logit_softcap=softcap,
        )


def _swa_layers(h: HParams, n_layer: int, window: int | None, default_period: int = SWA_PATTERN_DEFAULT,
                dense_first: bool = False) -> tuple[bool, ...]:
    """Which layers use the sliding window: an explicit per-layer array, or a period n where
    layer i is global when i % n == n - 1, or with `dense_first` when i % n == 0 (modern-bert)
    (llama_hparams::set_swa_pattern; 0: all sliding); without the key, the architecture's period
    (gemma3 6, gpt-oss 2, modern-bert 3)."""
    if window is None:
        return (False,) * n_layer
    key = "attention.sliding_window_pattern"
    pattern = h.f.metadata.get(h.key(key))
    if isinstance(pattern, (list, np.ndarray)):
        if len(pattern) != n_layer:
            raise h.error(key, pattern, f"has {len(pattern)} entries for {n_layer} layers")
        return tuple(bool(p) for p in pattern)
    pattern = h.count(key, default_period, minimum=0)
    if dense_first:
        return tuple(pattern == 0 or i % pattern != 0 for i in range(n_layer))
    return tuple(pattern == 0 or i % pattern < pattern - 1 for i in range(n_layer))


@dataclass
class Gemma3Weights:
    token_embd: Embedding  # (n_vocab, n_embd)
    # q/k/v with per-head q_norm/k_norm (head_dim,), GELU-gated MLP, post-attention and post-FFN norms;
    # the sliding-window layers with their own rope frequencies (base rope_base_swa, not scaled)
    layers: list[DecoderLayer]
    output_norm: np.ndarray  # (n_embd,)
    output: Linear  # (n_vocab, n_embd), the token embedding matrix itself when tied

    @classmethod
    def from_gguf(cls, w: WeightLoader, c: Gemma3Config) -> "Gemma3Weights":
        layers = []
        inv_freq_swa = rope_freqs(c.head_dim, c.rope_base_swa, c.n_rot)
        for i in range(c.n_layer):
            p, swa = f"blk.{i}.", c.is_swa[i]
            layers.append(DecoderLayer(
                attn_norm=w.vector(p + "attn_norm.weight", (c.n_embd,)),
                attn=Attention.from_gguf(w, p, c, qk_norm=True),
                attn_post_norm=w.vector(p + "post_attention_norm.weight", (c.n_embd,)),
                ffn_norm=w.vector(p + "ffn_norm.weight", (c.n_embd,)),
                mlp=GatedMLP.from_gguf(w, p, c), act="geglu",
                ffn_post_norm=w.vector(p + "post_ffw_norm.weight", (c.n_embd,)),
                window=c.sliding_window if swa else None, inv_freq=inv_freq_swa if swa else None,
            ))
        output = w.optional_linear("output.weight", (c.n_vocab, c.n_embd))
        return cls(token_embd=w.embedding("token_embd.weight", (c.n_vocab, c.n_embd)), layers=layers,
                   output_norm=w.vector("output_norm.weight", (c.n_embd,)),
                   output=output or w.linear("token_embd.weight", (c.n_vocab, c.n_embd)))


class Gemma3Model(DecoderModel):
    """Gemma 3: the embedding scaled by sqrt(n_embd), norms after the attention and the MLP too,
    GELU gating, five sliding-window layers per global one, and a soft cap on the logits."""

    config_class = Gemma3Config

    def __init__(self, config: Gemma3Config, weights: Gemma3Weights, ops=ops_reference):
        super().__init__(config, weights, ops)
        c = config
        # the global layers' frequencies: linear rope scaling multiplies positions by rope_scale, i.e. the frequencies
        self.inv_freq_global = rope_freqs(c.head_dim, c.rope_base, c.n_rot) * c.rope_scale

    @classmethod
    def load_weights(cls, loader, config: Gemma3Config) -> Gemma3Weights:
        return Gemma3Weights.from_gguf(loader, config)

    def embed(self, tokens: np.ndarray) -> np.ndarray:
        return self.weights.token_embd(tokens) * np.float32(np.sqrt(self.config.n_embd))

    def layer_params(self, batch: Batch) -> LayerParams:
        # queries scaled beforehand (attn_scale 1); the sliding-window layers bring their own frequencies
        return LayerParams(self.inv_freq_global, attn_scale=1.0, q_scale=self.config.attn_scale, neox=True)

    def head(self, x: np.ndarray) -> np.ndarray:
        c = self.config
        logits = self.weights.output(self.output_norm(x))
        if c.final_logit_softcap is not None:
            cap = np.float32(c.final_logit_softcap)
            logits = np.tanh(logits / cap) * cap
        return logits
