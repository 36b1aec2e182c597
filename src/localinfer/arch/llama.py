"""The llama architecture (also mistral, SmolLM2, and the base of qwen2, qwen3, phi3): readable
numpy reference forward pass.

    x = token_embd[tokens]
    per layer:  h = x + attn_output( attention( rope(q(norm(x))), rope(k(norm(x))), v(norm(x)) ) )
                x = h + ffn_down( silu(ffn_gate(norm(h))) * ffn_up(norm(h)) )
    logits = output( norm(x) )       # output = token_embd when the file has no output.weight

GGUF stores llama's Q/K rows permuted by the HF converter so that RoPE rotates adjacent pairs
("normal" rope, not NeoX). Llama 3.1-style rope scaling comes as the rope_freqs.weight tensor
(factors the converter computes from config.json's rope_scaling, as llama.cpp reads it).
This file stays as the oracle for the fast path.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..files.gguf_file import GGUFFile, GGUFError
from ..backend import ops_reference
from ..backend.ops_reference import rope_freqs
from .batch import Batch
from .blocks import Attention, GatedMLP
from .decoder import DecoderModel
from .hparams import HParams, show
from .layer import DecoderLayer, LayerParams
from .moe import SOFTMAX, Gating, expert_hparams, moe_ffn
from .weights import Embedding, Linear, WeightLoader


@dataclass(frozen=True)
class LlamaConfig:
    n_vocab: int
    n_embd: int  # model width
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_ctx_train: int
    rms_eps: float
    rope_base: float
    n_rot: int
    rope_scaling: str  # rope.scaling.type: "none", "linear" or "longrope"
    rope_scale: float  # linear rope scaling: positions (i.e. frequencies) are multiplied by this
    rope_attn_factor: float  # rotated dimensions of q and k are multiplied by this (longrope's mscale)
    n_ctx_orig: int  # beyond this context, long rope factors replace the short ones
    n_expert: int = 0  # experts per layer (expert_count); 0: a dense gated MLP (moe.py)
    n_expert_used: int = 0  # experts each token runs (expert_used_count)
    n_ff_exp: int = 0  # an expert's hidden width (expert_feed_forward_length, else n_ff)
    expert_weights_norm: bool = True  # the chosen experts' weights are renormalised to sum to 1
    expert_gating: Gating = SOFTMAX  # router logits -> weights (expert_gating_func; moe.Gating)
    n_ff_shexp: int = 0  # the shared expert's hidden width (expert_shared_feed_forward_length; 0: n_ff)

    @classmethod
    def from_gguf(cls, f: GGUFFile) -> "LlamaConfig":
        """Every value checked before it sizes anything (hparams.py): a bad one is an error naming its key."""
        h = HParams(f)
        n_embd, n_head = h.count("embedding_length"), h.count("attention.head_count")
        n_head_kv, head_dim = h.head_count_kv(n_head), h.head_dim(n_embd, n_head)
        scaling = h.text("rope.scaling.type", "none")  # llama3 scaling is a tensor, rope_freqs
        factor = h.real("rope.scaling.factor", 0.0, zero_means_none=True) if scaling == "linear" else 0.0
        n_ctx_train = h.count("context_length", 2048)
        n_ff = h.count("feed_forward_length")
        return cls(
            n_vocab=h.vocab_size(n_embd), n_embd=n_embd, n_layer=h.block_count(), n_head=n_head,
            n_head_kv=n_head_kv, head_dim=head_dim, n_ff=n_ff, n_ctx_train=n_ctx_train,
            rms_eps=h.real("attention.layer_norm_rms_epsilon", 1e-5),
            rope_base=h.real("rope.freq_base", 10000.0),
            n_rot=h.rope_dimension_count(head_dim),
            rope_scaling=scaling, rope_scale=1.0 / factor if factor else 1.0,
            rope_attn_factor=h.real("rope.scaling.attn_factor", 1.0),
            n_ctx_orig=h.count("rope.scaling.original_context_length", n_ctx_train),
            **expert_hparams(h, n_ff),
        )


@dataclass
class LlamaWeights:
    token_embd: Embedding  # (n_vocab, n_embd)
    # attention: biases optional (qwen2), fused q/k/v (phi3), per-head norms (qwen3); FFN: gate, up, down
    # (gate ‖ up fused: phi3), routed experts (qwen3moe, mixtral), + a shared one (qwen2moe)
    layers: list[DecoderLayer]
    output_norm: np.ndarray  # (n_embd,)
    output: Linear  # (n_vocab, n_embd), the token embedding matrix itself when tied
    # (n_rot/2,) factors dividing the rope frequencies: rope_freqs (llama3) always, else the long
    # ones for contexts past n_ctx_orig and the short ones below (longrope), as llama.cpp's
    # llama_model::get_rope_factors chooses
    rope_freqs: np.ndarray | None
    rope_factors_long: np.ndarray | None
    rope_factors_short: np.ndarray | None

    @classmethod
    def from_gguf(cls, w: WeightLoader, c: LlamaConfig, qk_norm: bool = False) -> "LlamaWeights":
        layers = [DecoderLayer(attn_norm=w.vector(f"blk.{i}.attn_norm.weight", (c.n_embd,)),
                               attn=Attention.from_gguf(w, f"blk.{i}.", c, qk_norm),
                               ffn_norm=w.vector(f"blk.{i}.ffn_norm.weight", (c.n_embd,)),
                               mlp=(moe_ffn if c.n_expert else GatedMLP.from_gguf)(w, f"blk.{i}.", c))
                  for i in range(c.n_layer)]
        output = w.optional_linear("output.weight", (c.n_vocab, c.n_embd))
        return cls(token_embd=w.embedding("token_embd.weight", (c.n_vocab, c.n_embd)), layers=layers,
                   output_norm=w.vector("output_norm.weight", (c.n_embd,)),
                   output=output or w.linear("token_embd.weight", (c.n_vocab, c.n_embd)),
                   rope_freqs=w.optional_vector("rope_freqs.weight", (c.n_rot // 2,)),
                   rope_factors_long=w.optional_vector("rope_factors_long.weight", (c.n_rot // 2,)),
                   rope_factors_short=w.optional_vector("rope_factors_short.weight", (c.n_rot // 2,)))


class LlamaModel(DecoderModel):
    """The llama layout. The variants of it (qwen2, qwen3, phi3) subclass this and set these class
    attributes, which are properties of the architecture in llama.cpp (llama_model_rope_type), not of the file."""

    rope_neox = False  # NeoX rope pairs (x[i], x[i + n_rot/2]); llama's permuted Q/K use adjacent pairs
    qk_norm = False  # every layer has per-head attn_q_norm / attn_k_norm (qwen3)
    scale_q = False  # queries are scaled by 1/sqrt(head_dim) before the attention, not the scores (phi3)
    rope_scaling_types = ("none", "linear")  # rope.scaling.type values this architecture runs
    config_class = LlamaConfig

    def __init__(self, config: LlamaConfig, weights: LlamaWeights, ops=ops_reference):
        super().__init__(config, weights, ops)
        c, w = config, weights

        def inv_freq(factors):  # (n_rot/2,)
            return rope_freqs(c.head_dim, c.rope_base, c.n_rot, factors) * c.rope_scale
        long_factors = w.rope_freqs if w.rope_freqs is not None else w.rope_factors_long
        self.inv_freq = inv_freq(w.rope_freqs if w.rope_freqs is not None else w.rope_factors_short)
        self.inv_freq_long = inv_freq(long_factors) if long_factors is not None else self.inv_freq

    @classmethod
    def check_config(cls, f: GGUFFile, config: LlamaConfig) -> None:
        if config.rope_scaling not in cls.rope_scaling_types:
            raise GGUFError(f"{f.path}: rope scaling {show(config.rope_scaling)} is not supported for "
                            f"{f.architecture} (supported: {', '.join(cls.rope_scaling_types)})")

    @classmethod
    def load_weights(cls, loader, config: LlamaConfig) -> LlamaWeights:
        return LlamaWeights.from_gguf(loader, config, cls.qk_norm)

    def rope_inv_freq(self, batch: Batch) -> np.ndarray:
        """The long-context frequencies when a cache of the batch holds more than n_ctx_orig
        positions (llama.cpp decides by the context size, not by the tokens seen so far)."""
        if max(cache.n_ctx for cache in batch.caches) > self.config.n_ctx_orig:
            return self.inv_freq_long
        return self.inv_freq

    def _scales(self) -> tuple[float, float | None]:
        """(attention's scale of q.k, the queries' scale before it): 1/sqrt(head_dim) goes to one of them."""
        scale = 1.0 / np.sqrt(self.config.head_dim)
        return (1.0, scale) if self.scale_q else (scale, None)

    def embed(self, tokens: np.ndarray) -> np.ndarray:
        return self.weights.token_embd(tokens)

    def layer_params(self, batch: Batch) -> LayerParams:
        attn_scale, q_scale = self._scales()
        return LayerParams(self.rope_inv_freq(batch), attn_scale, q_scale, self.config.rope_attn_factor,
                           self.rope_neox)

    def head(self, x: np.ndarray) -> np.ndarray:
        return self.weights.output(self.output_norm(x))
