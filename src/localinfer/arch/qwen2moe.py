"""The qwen2moe architecture (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B): qwen2's attention (Q/K/V biases,
NeoX rope) with, in every layer, routed experts beside one shared expert that every token runs,
gated by sigmoid(h . ffn_gate_inp_shexp) (moe.SharedExpertMoE), as llama.cpp's
src/models/qwen2moe.cpp. llama.cpp never renormalises its chosen weights (moe.ARCH_GATING), which
is transformers' norm_topk_prob = false, the default."""
from __future__ import annotations

from .qwen2 import Qwen2Model


class Qwen2MoeModel(Qwen2Model):
    pass
