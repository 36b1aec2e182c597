"""The bert architecture (BERT, bge, e5, gte-small, MiniLM; BertForSequenceClassification
re-rankers such as the ms-marco cross-encoders): absolute position embeddings, token types,
post-norm blocks with biases everywhere, a GELU FFN (llama.cpp: src/models/bert.cpp).

    x = layer_norm(token_embd[t] + token_types[type] + position_embd[pos])
    per layer:  h = layer_norm(x + attn_output(attention(q(x), k(x), v(x))))
                x = layer_norm(h + ffn_down(gelu(ffn_up(h))))

Everything else is arch/encoder.py's.
"""
from __future__ import annotations

from .encoder import EncoderModel


class BertModel(EncoderModel):
    positions = "absolute"
    ffn = "sequential"
    act = "gelu"
