"""The qwen3moe architecture (Qwen3-30B-A3B, Qwen3-235B-A22B): qwen3's attention (per-head Q/K
norms, NeoX rope) with a routed mixture of experts in place of every dense MLP (moe.py), as
llama.cpp's src/models/qwen3moe.cpp. The experts come from the file's expert_* keys, which
LlamaConfig reads for any llama-family file (mixtral is "llama" with them)."""
from __future__ import annotations

from .qwen3 import Qwen3Model


class Qwen3MoeModel(Qwen3Model):
    pass
