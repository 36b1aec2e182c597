"""The qwen2 architecture: the llama layout with biases on Q, K and V, and NeoX rope.

llama.cpp's HF->GGUF converter does not permute qwen2's Q/K rows (only llama's), so RoPE rotates
the pairs (x[i], x[i + n_rot/2]) as HF's rotate_half does (LLAMA_ROPE_TYPE_NEOX in
llama_model_rope_type). The q/k/v biases are loaded whenever the file has them (blocks.Attention).
"""
from __future__ import annotations

from .llama import LlamaModel


class Qwen2Model(LlamaModel):
    rope_neox = True
