"""The blocks every architecture here is made of, written once: the self-attention block
(Q/K/V projections, optional per-head Q/K RMSNorm, RoPE, attention over the KV cache, output
projection) and the gated MLP. An architecture module says which variant it uses (NeoX or
normal RoPE, fused or separate weights, the activation); the arithmetic is always `ops.*`.

Weight layouts follow llama.cpp's GGUF tensor names (src/llama-arch.cpp):
- attention: attn_q/attn_k/attn_v/attn_output (+ optional .bias: qwen2, llama attention_bias), or one fused attn_qkv whose rows
  are q ‖ k ‖ v (phi3); attn_q_norm/attn_k_norm are (head_dim,) norms of each head (qwen3, gemma3),
  or (n_head*head_dim,) / (n_head_kv*head_dim,) norms over the whole projection (olmoe).
- MLP: ffn_gate, ffn_up, ffn_down (+ optional .bias, llama mlp_bias); or no ffn_gate and an ffn_up of 2*n_ff rows, gate ‖ up (phi3,
  ggml_swiglu on the halves of one matmul).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .batch import Batch
from .weights import Linear, WeightLoader


@dataclass
class Attention:
    wq: Linear | None  # (n_head*head_dim, n_embd); None when wqkv holds it
    wk: Linear | None  # (n_head_kv*head_dim, n_embd)
    wv: Linear | None  # (n_head_kv*head_dim, n_embd)
    wqkv: Linear | None  # ((n_head + 2*n_head_kv)*head_dim, n_embd), rows q ‖ k ‖ v
    wo: Linear  # (n_embd, n_head*head_dim), bias optional
    q_norm: np.ndarray | None  # (head_dim,) RMSNorm of each query head, or (n_head*head_dim,) of all of them
    k_norm: np.ndarray | None  # (head_dim,) RMSNorm of each key head, or (n_head_kv*head_dim,)

    @classmethod
    def from_gguf(cls, w: WeightLoader, p: str, c, qk_norm: bool = False) -> "Attention":
        """p: the layer's prefix ("blk.3."); c: a config with n_embd, n_head, n_head_kv, head_dim.
        `qk_norm`: the per-head norms are part of the architecture (a file without them is an error)."""
        q_dim, kv_dim = c.n_head * c.head_dim, c.n_head_kv * c.head_dim
        if w.has(p + "attn_qkv.weight"):
            wq = wk = wv = None
            wqkv = w.linear(p + "attn_qkv.weight", (q_dim + 2 * kv_dim, c.n_embd), bias=p + "attn_qkv.bias")
        elif (wqkv := w.stacked_linear([p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"],
                                       [(q_dim, c.n_embd), (kv_dim, c.n_embd), (kv_dim, c.n_embd)],
                                       [p + "attn_q.bias", p + "attn_k.bias", p + "attn_v.bias"])) is not None:
            wq = wk = wv = None
        else:
            wq = w.linear(p + "attn_q.weight", (q_dim, c.n_embd), bias=p + "attn_q.bias")
            wk = w.linear(p + "attn_k.weight", (kv_dim, c.n_embd), bias=p + "attn_k.bias")
            wv = w.linear(p + "attn_v.weight", (kv_dim, c.n_embd), bias=p + "attn_v.bias")
        norm = w.vector if qk_norm else w.optional_vector

        def norm_shape(name: str, whole: int) -> tuple[int]:  # the file's shape says which norm it is
            info = w.f.tensors.get(name)
            return (whole,) if info is not None and tuple(info.shape) == (whole,) else (c.head_dim,)
        q_name, k_name = p + "attn_q_norm.weight", p + "attn_k_norm.weight"
        return cls(wq=wq, wk=wk, wv=wv, wqkv=wqkv, wo=w.linear(p + "attn_output.weight", (c.n_embd, q_dim), bias=p + "attn_output.bias"),
                   q_norm=norm(q_name, norm_shape(q_name, q_dim)), k_norm=norm(k_name, norm_shape(k_name, kv_dim)))

    def project(self, h: np.ndarray, c) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """h: (n, n_embd) -> q (n, n_head, head_dim), k and v (n, n_head_kv, head_dim)."""
        n = h.shape[0]
        if self.wqkv is not None:
            q_dim, kv_dim = c.n_head * c.head_dim, c.n_head_kv * c.head_dim
            qkv = self.wqkv(h)  # (n, q_dim + 2*kv_dim)
            q, k, v = qkv[:, :q_dim], qkv[:, q_dim:q_dim + kv_dim], qkv[:, q_dim + kv_dim:]
        else:
            q, k, v = self.wq(h), self.wk(h), self.wv(h)
        return (np.ascontiguousarray(q).reshape(n, c.n_head, c.head_dim),
                np.ascontiguousarray(k).reshape(n, c.n_head_kv, c.head_dim),
                np.ascontiguousarray(v).reshape(n, c.n_head_kv, c.head_dim))


def attention_block(ops, batch: Batch, layer: int, attn: Attention, h: np.ndarray, c, inv_freq: np.ndarray,
                    neox: bool, attention: Callable[..., np.ndarray], q_scale: float | None = None,
                    rope_mscale: float = 1.0) -> np.ndarray:
    """h: (n, n_embd), already normed -> the attention output (n, n_embd), before the residual add.

    q, k = rope(q_norm(q)), rope(k_norm(k)) (each norm only if the layer has it); queries are
    multiplied by `q_scale` after RoPE when given (gemma3, phi3 scale Q, not the scores);
    `rope_mscale` multiplies the rotated dimensions of q and k (ggml_rope_ext's attn_factor scales
    its cos and sin; longrope); `attention` is ops.attention with the scale/window bound in."""
    q, k, v = attn.project(h, c)
    if attn.q_norm is not None:
        q = _rms_norm_heads(ops, q, attn.q_norm, c.rms_eps)
    if attn.k_norm is not None:
        k = _rms_norm_heads(ops, k, attn.k_norm, c.rms_eps)
    q = ops.apply_rope(q, batch.positions, inv_freq, neox)
    k = ops.apply_rope(k, batch.positions, inv_freq, neox)
    if rope_mscale != 1.0:
        n_rot, m = 2 * inv_freq.shape[0], np.float32(rope_mscale)
        q[..., :n_rot] *= m
        k[..., :n_rot] *= m
    if q_scale is not None:
        q = q * np.float32(q_scale)
    a = batch.attend(layer, q, k, v, attention)  # (n, n_head, head_dim)
    return attn.wo(a.reshape(h.shape[0], -1))


def _rms_norm_heads(ops, x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x (n, heads, head_dim): RMSNorm of each head with a (head_dim,) weight, or of each row's
    heads together with a (heads*head_dim,) one (olmoe normalises the whole projection)."""
    if weight.shape[0] == x.shape[-1]:
        return ops.rms_norm(x, weight, eps)
    return ops.rms_norm(x.reshape(x.shape[0], -1), weight, eps).reshape(x.shape)


@dataclass
class GatedMLP:
    w_gate: Linear | None  # (n_ff, n_embd); None when w_up holds gate ‖ up
    w_up: Linear  # (n_ff, n_embd), or (2*n_ff, n_embd) rows gate ‖ up
    w_down: Linear  # (n_embd, n_ff)
    n_ff: int

    @classmethod
    def from_gguf(cls, w: WeightLoader, p: str, c) -> "GatedMLP":
        if w.has(p + "ffn_gate.weight"):
            gate_up = w.stacked_linear([p + "ffn_gate.weight", p + "ffn_up.weight"], [(c.n_ff, c.n_embd)] * 2,
                                       [p + "ffn_gate.bias", p + "ffn_up.bias"])
            if gate_up is not None:
                return cls(w_gate=None, w_up=gate_up, n_ff=c.n_ff,
                           w_down=w.linear(p + "ffn_down.weight", (c.n_embd, c.n_ff), bias=p + "ffn_down.bias"))
            return cls(w_gate=w.linear(p + "ffn_gate.weight", (c.n_ff, c.n_embd), bias=p + "ffn_gate.bias"),
                       w_up=w.linear(p + "ffn_up.weight", (c.n_ff, c.n_embd), bias=p + "ffn_up.bias"),
                       w_down=w.linear(p + "ffn_down.weight", (c.n_embd, c.n_ff), bias=p + "ffn_down.bias"),
                       n_ff=c.n_ff)
        return cls(w_gate=None, w_up=w.linear(p + "ffn_up.weight", (2 * c.n_ff, c.n_embd), bias=p + "ffn_up.bias"),
                   w_down=w.linear(p + "ffn_down.weight", (c.n_embd, c.n_ff), bias=p + "ffn_down.bias"), n_ff=c.n_ff)

    def __call__(self, h: np.ndarray, act: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
        """h: (n, n_embd), already normed -> ffn_down(act(gate, up)) (n, n_embd);
        act is ops.swiglu or ops.geglu."""
        if self.w_gate is not None:
            return self.w_down(act(self.w_gate(h), self.w_up(h)))
        gate_up = self.w_up(h)  # (n, 2*n_ff)
        return self.w_down(act(gate_up[:, :self.n_ff], gate_up[:, self.n_ff:]))
