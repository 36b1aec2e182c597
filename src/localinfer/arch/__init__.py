"""The model architectures, one module each (llama, qwen2, qwen3, qwen2moe, qwen3moe, olmoe, gpt-oss, phi3, gemma3) over shared transformer
blocks, the DecoderModel wrapper and the fused C layer call; the encoders (bert, nomic-bert,
jina-bert-v2, modern-bert) over arch/encoder.py; this registry maps `general.architecture`
to the model class, with an alias table. Adding one: docs/architectures.md.
"""
from __future__ import annotations

import importlib

from ..files.gguf_file import GGUFFile

# `general.architecture` -> (module of this package, model class). A module is imported when a file of
# its architecture loads: one Llama file does not import the encoders, gemma3 or gpt-oss (~12 ms at
# every start of the program).
ARCHITECTURES = {
    "llama": ("llama", "LlamaModel"),
    "gemma3": ("gemma3", "Gemma3Model"),
    "qwen2": ("qwen2", "Qwen2Model"),
    "qwen3": ("qwen3", "Qwen3Model"),
    "qwen2moe": ("qwen2moe", "Qwen2MoeModel"),
    "qwen3moe": ("qwen3moe", "Qwen3MoeModel"),
    "olmoe": ("olmoe", "OlmoeModel"),
    "gpt-oss": ("gptoss", "GptOssModel"),
    "phi3": ("phi3", "Phi3Model"),
    "bert": ("bert", "BertModel"),  # encoders (arch/encoder.py): embed / rerank / classify, no generation
    "nomic-bert": ("nomic_bert", "NomicBertModel"),
    "jina-bert-v2": ("jina_bert", "JinaBertModel"),
    "modern-bert": ("modern_bert", "ModernBertModel"),
}
ALIASES = {
    "mistral": "llama",
}


class UnsupportedArchitectureError(ValueError):
    pass


def model_class(arch: str):
    name = ALIASES.get(arch, arch)
    if name not in ARCHITECTURES:
        supported = ", ".join(sorted(set(ARCHITECTURES) | set(ALIASES)))
        raise UnsupportedArchitectureError(f"unsupported architecture {arch!r} (supported: {supported})")
    module, cls = ARCHITECTURES[name]
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)


def is_encoder(arch: str) -> bool:
    """Whether `arch` is a known encoder-only architecture (embeds, cannot generate)."""
    try:
        return bool(getattr(model_class(arch), "is_encoder", False))
    except UnsupportedArchitectureError:
        return False


def build_model(f: GGUFFile, backend: str = "reference", repack: bool = False):
    """The architecture's model for file `f`; `backend` is "reference" (numpy) or "c" (kernels);
    `repack`: matrices in the ISA's decode layout where it has one (kernels.repack_layout)."""
    return model_class(f.architecture).from_gguf(f, backend, repack)
