"""The nomic-bert architecture (nomic-embed-text v1 / v1.5): rotary positions instead of
position embeddings, one fused attn_qkv matrix, no biases in the attention or FFN, a SwiGLU FFN,
post-norm blocks (llama.cpp: src/models/nomic-bert.cpp, which builds bert's graph).

    x = layer_norm(token_embd[t] + token_types[type])
    per layer:  q, k, v = attn_qkv(x);  q, k = rope_neox(q), rope_neox(k)
                h = layer_norm(x + attn_output(attention(q, k, v)))
                x = layer_norm(h + ffn_down(silu(ffn_gate(h)) * ffn_up(h)))

RoPE pairs dimension i with i + head_dim/2 (NeoX; HF's rotate_half, rotary_emb_interleaved false),
over the whole head, with the base `rope.freq_base` (nomic's rotary_emb_base, 1000).
"""
from __future__ import annotations

from ..backend.ops_reference import rope_freqs
from .encoder import EncoderModel, EncoderParams


class NomicBertModel(EncoderModel):
    positions = "rope"
    ffn = "gated"
    act = "swiglu"

    def layer_params(self) -> EncoderParams:
        c = self.config
        return EncoderParams(scale=1.0 / float(c.head_dim) ** 0.5, inv_freq=rope_freqs(c.head_dim, c.rope_base))
