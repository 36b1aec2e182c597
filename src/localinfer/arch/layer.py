"""One decoder layer as data, and the readable executor that runs it.

Every architecture here is a stack of pre-norm layers that differ only in which steps they have:

    h = x + post_attn_norm?( attention( rope(qk_norm?(q)), rope(qk_norm?(k)), v; window?, sinks? ) )
    x = h + post_ffn_norm?( ffn( norm(h), act ) )       # ffn: a gated MLP or routed experts

A `DecoderLayer` holds one layer's weights and says which of those steps it has; the steps that
are the same for every layer of a forward pass (rope pairing, scales) are `LayerParams`. An
architecture only builds its layers (at load) and its params (per pass). Two executors read the
same data: `run_layers` here (numpy or C ops, the oracle) and arch/fused.py, which maps each field
onto csrc's `li_decoder_layer` for the whole stack in one C call. Neither knows an architecture.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from .batch import Batch
from .blocks import Attention, GatedMLP, attention_block

if TYPE_CHECKING:
    from .moe import SharedExpertMoE, SparseMoE

SWIGLU_LIMIT, SWIGLU_ALPHA = 7.0, 1.702  # llama.cpp hard-codes both (ggml_swiglu_oai in build_moe_ffn)


def swiglu_oai(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """gpt-oss's gated activation: gate clamped above at 7, up clamped to [-7, 7],
    gate * sigmoid(1.702 * gate) * (up + 1) (transformers' GptOssExperts._apply_gate)."""
    g = np.minimum(gate, np.float32(SWIGLU_LIMIT))
    u = np.clip(up, np.float32(-SWIGLU_LIMIT), np.float32(SWIGLU_LIMIT))
    return g / (np.float32(1.0) + np.exp(np.float32(-SWIGLU_ALPHA) * g)) * (u + np.float32(1.0))


# act name -> the gated activation, given the ops module (numpy or C)
ACTIVATIONS = {
    "swiglu": lambda ops: ops.swiglu,  # silu(gate) * up: llama and most others
    "geglu": lambda ops: ops.geglu,  # gelu_tanh(gate) * up from ggml's f16 table: gemma3
    "swiglu_oai": lambda ops: swiglu_oai,  # gpt-oss's clamped SwiGLU
}


@dataclass
class DecoderLayer:
    """One layer: its weights, and by which optional fields are set, which variant of each step."""

    attn_norm: np.ndarray  # (n_embd,) RMSNorm before the attention
    attn: Attention  # q/k/v (fused or not, biases optional), optional Q/K norms, output projection
    ffn_norm: np.ndarray  # (n_embd,) RMSNorm before the FFN
    mlp: GatedMLP | SparseMoE | SharedExpertMoE  # gate/up/down, or routed experts (+ a shared one)
    act: str = "swiglu"  # the FFN's gated activation, a key of ACTIVATIONS
    attn_post_norm: np.ndarray | None = None  # (n_embd,) on the attention output before the residual add (gemma3)
    ffn_post_norm: np.ndarray | None = None  # (n_embd,) on the FFN output before the residual add (gemma3)
    sinks: np.ndarray | None = None  # (n_head,) attention sink logits (gpt-oss)
    window: int | None = None  # a sliding-window layer: attends to the last `window` keys, its K/V in a ring
    inv_freq: np.ndarray | None = None  # (n_rot/2,) the layer's own rope frequencies, else the pass's

    def __post_init__(self):
        if self.act not in ACTIVATIONS:
            raise ValueError(f"unknown activation {self.act!r} (known: {', '.join(ACTIVATIONS)})")
        if self.window is not None and self.window < 1:
            raise ValueError(f"a sliding window of {self.window} keys")


@dataclass(frozen=True)
class LayerParams:
    """What every layer of one forward pass shares besides the model's config: the architecture's
    `layer_params(batch)` (the rope frequencies may depend on the batch's context size)."""

    inv_freq: np.ndarray  # (n_rot/2,) rope frequencies; a layer with its own (DecoderLayer.inv_freq) uses those
    attn_scale: float  # multiplies q.k in the attention; 1.0 when the queries were scaled beforehand
    q_scale: float | None = None  # multiplies the queries after rope (phi3, gemma3); None: not scaled
    rope_mscale: float = 1.0  # multiplies the rotated dimensions (longrope's and YaRN's attention factor)
    neox: bool = False  # NeoX rope pairs (x[i], x[i + n_rot/2]) instead of adjacent ones


def run_layers(ops, layers: list[DecoderLayer], x: np.ndarray, batch: Batch, c, p: LayerParams,
               first: int = 0) -> np.ndarray:
    """x (n, n_embd) after the embedding -> x after every layer, written with `ops` (ops_reference or
    ops): the readable path, and the oracle of the fused C call. c: the config (rms_eps, shapes).
    first: the model's index of layers[0] (the layers before it ran elsewhere: the CUDA device)."""
    for li, layer in enumerate(layers, start=first):
        inv_freq = p.inv_freq if layer.inv_freq is None else layer.inv_freq
        attention = partial(ops.attention, scale=p.attn_scale, sliding_window=layer.window, sinks=layer.sinks)
        h = ops.rms_norm(x, layer.attn_norm, c.rms_eps)
        a = attention_block(ops, batch, li, layer.attn, h, c, inv_freq, p.neox, attention, p.q_scale, p.rope_mscale)
        if layer.attn_post_norm is not None:
            a = ops.rms_norm(a, layer.attn_post_norm, c.rms_eps)
        x = x + a
        f = layer.mlp(ops.rms_norm(x, layer.ffn_norm, c.rms_eps), ACTIVATIONS[layer.act](ops))
        if layer.ffn_post_norm is not None:
            f = ops.rms_norm(f, layer.ffn_post_norm, c.rms_eps)
        x = x + f
    return x
