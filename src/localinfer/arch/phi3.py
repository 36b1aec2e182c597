"""The phi3 architecture: the llama layout with fused weights, NeoX rope, and Q scaled before
the attention (llama.cpp's src/models/phi3.cpp).

- attn_qkv: one (n_head*head_dim + 2*n_head_kv*head_dim, n_embd) matrix, rows q ‖ k ‖ v (HF qkv_proj);
- ffn_up: (2*n_ff, n_embd), rows gate ‖ up (HF gate_up_proj), so there is no ffn_gate;
- rope.dimension_count may be below head_dim (partial rotary): the other dimensions pass through.

Long-context (longrope) files carry rope_factors_long/short.weight and rope.scaling.attn_factor;
only the short factors are used (llama.cpp switches to the long ones for contexts beyond
rope.scaling.original_context_length, which this runtime does not do), so such files are refused.
"""
from __future__ import annotations

from ..gguf_file import GGUFError, GGUFFile
from .llama import LlamaModel


class Phi3Model(LlamaModel):
    rope_neox = True
    scale_q = True

    @classmethod
    def from_gguf(cls, f: GGUFFile, backend: str = "reference") -> "Phi3Model":
        if "rope_factors_long.weight" in f.tensors or "rope_factors_short.weight" in f.tensors:
            raise GGUFError(f"{f.path}: phi3 with longrope scaling (rope_factors_long/short) is not supported")
        return super().from_gguf(f, backend)
