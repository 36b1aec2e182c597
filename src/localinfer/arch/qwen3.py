"""The qwen3 architecture: the llama layout with an RMSNorm of each Q and K head before RoPE
(attn_q_norm / attn_k_norm, (head_dim,)), NeoX rope, no biases; head_dim may differ from
n_embd / n_head (attention.key_length).

    q, k = rope(q_norm(q)), rope(k_norm(k))     # as llama.cpp's src/models/qwen3.cpp
"""
from __future__ import annotations

from .llama import LlamaModel


class Qwen3Model(LlamaModel):
    rope_neox = True
    qk_norm = True
