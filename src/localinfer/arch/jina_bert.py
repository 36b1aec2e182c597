"""The jina-bert-v2 architecture (jina-embeddings-v2-*-en): no position embeddings but ALiBi,
biases in the attention, a GEGLU FFN whose ffn_up holds gate ‖ up (llama.cpp:
src/models/jina-bert-v2.cpp, which builds bert's graph).

    x = layer_norm(token_embd[t] + token_types[type])
    per layer:  scores(i, j) = q_i . k_j / sqrt(head_dim) - slope[head] * |i - j|
                h = layer_norm(x + attn_output(attention(q(x), k(x), v(x))))
                g ‖ u = ffn_up(h);  x = layer_norm(h + ffn_down(gelu(g) * u))

The ALiBi slopes are ggml_soft_max_ext's with max_bias 8 (llama.cpp hard-codes f_max_alibi_bias =
8 for this architecture): for n_head rounded down to a power of two, n2, head h < n2 has slope
2^(-8 (h+1) / n2), and the heads past n2 take the odd powers of 2^(-4 / n2) -- the slopes of the
ALiBi paper and of jina's own model code.
"""
from __future__ import annotations

import numpy as np

from .encoder import EncoderModel, EncoderParams

MAX_ALIBI_BIAS = 8.0


def alibi_slopes(n_head: int, max_bias: float = MAX_ALIBI_BIAS) -> np.ndarray:
    """(n_head,) float32 slopes, as ggml_soft_max_ext computes them."""
    n2 = 2 ** int(np.floor(np.log2(n_head)))
    m0, m1 = 2.0 ** (-max_bias / n2), 2.0 ** (-max_bias / 2.0 / n2)
    h = np.arange(n_head, dtype=np.float64)
    return np.where(h < n2, m0 ** (h + 1), m1 ** (2 * (h - n2) + 1)).astype(np.float32)


class JinaBertModel(EncoderModel):
    positions = "alibi"
    ffn = "gated"
    act = "geglu"
    token_types_required = True

    def layer_params(self) -> EncoderParams:
        c = self.config
        return EncoderParams(scale=1.0 / float(c.head_dim) ** 0.5, alibi_slopes=alibi_slopes(c.n_head))
