"""The phi3 architecture: the llama layout with fused weights, NeoX rope, and Q scaled before
the attention (llama.cpp's src/models/phi3.cpp).

- attn_qkv: one (n_head*head_dim + 2*n_head_kv*head_dim, n_embd) matrix, rows q ‖ k ‖ v (HF qkv_proj);
- ffn_up: (2*n_ff, n_embd), rows gate ‖ up (HF gate_up_proj), so there is no ffn_gate;
- rope.dimension_count may be below head_dim (partial rotary): the other dimensions pass through.

Long-context files (Phi-3-128k, Phi-3.5, Phi-4-mini) use longrope: rope_factors_short/long.weight
divide the frequencies (the long ones when the context exceeds rope.scaling.original_context_length)
and rope.scaling.attn_factor scales the rotated dimensions (LlamaModel handles both).
"""
from __future__ import annotations

from .llama import LlamaModel


class Phi3Model(LlamaModel):
    rope_neox = True
    scale_q = True
    rope_scaling_types = ("none", "linear", "longrope")
