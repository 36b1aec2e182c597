"""The gpt-oss architecture (gpt-oss-20b, gpt-oss-120b; GGUF "gpt-oss", llama.cpp's
src/models/openai-moe.cpp, transformers' GptOssForCausalLM): llama's pre-norm layout with

- attention sinks: a learned logit per head (attn_sinks, (n_head,)) that joins each softmax's
  denominator and attends to nothing (ops.attention's `sinks`; in the C softmax on the C backend);
- sliding-window (attention.sliding_window, 128) and full attention alternating, the even
  layers sliding (llama.cpp's load_swa_pattern(ml, 2); transformers' layer_types); their
  K/V live in a ring (InterleavedKVCache, as gemma3's);
- biases on q/k/v/o, on the router and on every expert matrix;
- routed experts only (no dense MLP): top-k of the router logits, then softmax over those k
  (moe.SOFTMAX_AFTER_TOP_K), with the clamped SwiGLU (layer.swiglu_oai), after post_attention_norm;
- NeoX rope with YaRN scaling, computed as transformers does (yarn_inv_freq).

The experts of released files are MXFP4; WeightLoader.experts reads them like any type (the C
kernels' MXFP4 matmul, or dequantized on the reference backend), and the converter keeps them
MXFP4 (quant/convert_gptoss.py).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ..files.gguf_file import GGUFFile, GGUFError
from ..backend import ops_reference
from .batch import Batch
from .blocks import Attention
from .gemma3 import _swa_layers
from .hparams import HParams
from .layer import DecoderLayer, LayerParams
from .llama import LlamaConfig, LlamaModel, LlamaWeights
from .moe import SparseMoE
from .weights import WeightLoader

SWA_PERIOD = 2  # llama.cpp's load_swa_pattern(ml, 2): layer i slides unless i % 2 == 1


def yarn_inv_freq(head_dim: int, base: float, factor: float, n_ctx_orig: int, beta_fast: float, beta_slow: float,
                  truncate: bool) -> np.ndarray:
    """(head_dim/2,) YaRN frequencies as transformers' _compute_yarn_parameters: the original
    frequencies for dimensions that turn more than beta_fast times over the original context,
    those divided by `factor` for ones that turn fewer than beta_slow times, a linear ramp
    between (its ends rounded outwards with `truncate`; llama.cpp always rounds them)."""
    def correction_dim(rotations: float) -> float:
        return head_dim * math.log(n_ctx_orig / (rotations * 2 * math.pi)) / (2 * math.log(base))
    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # as transformers: no division by zero
    ramp = np.clip((np.arange(head_dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    extrapolation = base ** -(np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    return extrapolation / factor * ramp + extrapolation * (1 - ramp)


@dataclass(frozen=True)
class GptOssConfig(LlamaConfig):
    sliding_window: int = 0  # attention.sliding_window
    is_swa: tuple[bool, ...] = ()  # (n_layer,) True for a sliding-window layer
    yarn: tuple | None = None  # (factor, n_ctx_orig, beta_fast, beta_slow, truncate) when rope.scaling.type is yarn
    rope_mscale: float = 1.0  # YaRN's attention factor on cos and sin: 0.1 ln(factor) + 1 unless the file says

    @classmethod
    def from_gguf(cls, f: GGUFFile) -> "GptOssConfig":
        base = super().from_gguf(f)
        h = HParams(f)
        window = h.count("attention.sliding_window")
        extra = dict(sliding_window=window, is_swa=_swa_layers(h, base.n_layer, window, SWA_PERIOD))
        if base.rope_scaling == "yarn":
            factor = h.real("rope.scaling.factor")
            truncate = f.metadata.get(h.key("rope.scaling.yarn_truncate"), False)
            if not isinstance(truncate, bool):
                raise h.error("rope.scaling.yarn_truncate", truncate, "must be a boolean")
            extra["yarn"] = (factor, h.count("rope.scaling.original_context_length"),
                             h.real("rope.scaling.yarn_beta_fast", 32.0), h.real("rope.scaling.yarn_beta_slow", 1.0),
                             truncate)
            extra["rope_mscale"] = h.real("rope.scaling.attn_factor", 0.1 * math.log(factor) + 1 if factor > 1 else 1.0)
        return dataclasses.replace(base, **extra)


class GptOssModel(LlamaModel):
    rope_neox = True
    rope_scaling_types = ("none", "yarn")
    config_class = GptOssConfig

    def __init__(self, config: GptOssConfig, weights: LlamaWeights, ops=ops_reference):
        super().__init__(config, weights, ops)
        if config.yarn is not None:
            self.inv_freq = self.inv_freq_long = yarn_inv_freq(config.n_rot, config.rope_base, *config.yarn)

    @classmethod
    def check_config(cls, f: GGUFFile, config: GptOssConfig) -> None:
        super().check_config(f, config)
        if not config.n_expert:
            raise GGUFError(f"{f.path}: gpt-oss needs {f.architecture}.expert_count (its layers are all experts)")

    @classmethod
    def load_weights(cls, w: WeightLoader, c: GptOssConfig) -> LlamaWeights:
        layers = [DecoderLayer(attn_norm=w.vector(f"blk.{i}.attn_norm.weight", (c.n_embd,)),
                               attn=Attention.from_gguf(w, f"blk.{i}.", c),
                               ffn_norm=w.vector(f"blk.{i}.post_attention_norm.weight", (c.n_embd,)),
                               mlp=SparseMoE.from_gguf(w, f"blk.{i}.", c), act="swiglu_oai",
                               sinks=w.vector(f"blk.{i}.attn_sinks.weight", (c.n_head,)),
                               window=c.sliding_window if c.is_swa[i] else None)
                  for i in range(c.n_layer)]
        output = w.optional_linear("output.weight", (c.n_vocab, c.n_embd))
        return LlamaWeights(token_embd=w.embedding("token_embd.weight", (c.n_vocab, c.n_embd)), layers=layers,
                            output_norm=w.vector("output_norm.weight", (c.n_embd,)),
                            output=output or w.linear("token_embd.weight", (c.n_vocab, c.n_embd)),
                            rope_freqs=None, rope_factors_long=None, rope_factors_short=None)

    def layer_params(self, batch: Batch) -> LayerParams:
        # the (YaRN) frequencies, scale on the scores, YaRN's mscale, NeoX pairs
        c = self.config
        return LayerParams(self.inv_freq, 1.0 / np.sqrt(c.head_dim), None, c.rope_mscale, self.rope_neox)
