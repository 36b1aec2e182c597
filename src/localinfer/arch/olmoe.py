"""The olmoe architecture (OLMoE-1B-7B): llama's layout with NeoX rope, an RMSNorm of the whole
Q and K projections before RoPE (attn_q_norm (n_head*head_dim,), attn_k_norm (n_head_kv*head_dim,),
not per head as qwen3's), and routed experts in every layer whose softmax weights are not
renormalised over the chosen k (moe.ARCH_GATING), as llama.cpp's src/models/olmoe.cpp and
transformers' OlmoeForCausalLM (norm_topk_prob = false)."""
from __future__ import annotations

from .llama import LlamaModel


class OlmoeModel(LlamaModel):
    rope_neox = True
    qk_norm = True  # blocks.Attention reads the norm's shape from the file: here the whole projection
