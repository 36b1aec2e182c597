"""The model architectures, one module each (llama, qwen2, qwen3, qwen2moe, qwen3moe, olmoe, gpt-oss, phi3, gemma3) over shared transformer
blocks, the DecoderModel wrapper and the fused C layer call; the encoders (bert, nomic-bert,
jina-bert-v2, modern-bert) over arch/encoder.py; this registry maps `general.architecture`
to the model class, with an alias table. Adding one: docs/architectures.md.
"""
from __future__ import annotations

from ..files.gguf_file import GGUFFile
from .bert import BertModel
from .gemma3 import Gemma3Model
from .gptoss import GptOssModel
from .jina_bert import JinaBertModel
from .llama import LlamaModel
from .modern_bert import ModernBertModel
from .nomic_bert import NomicBertModel
from .olmoe import OlmoeModel
from .phi3 import Phi3Model
from .qwen2 import Qwen2Model
from .qwen2moe import Qwen2MoeModel
from .qwen3 import Qwen3Model
from .qwen3moe import Qwen3MoeModel

ARCHITECTURES = {
    "llama": LlamaModel,
    "gemma3": Gemma3Model,
    "qwen2": Qwen2Model,
    "qwen3": Qwen3Model,
    "qwen2moe": Qwen2MoeModel,
    "qwen3moe": Qwen3MoeModel,
    "olmoe": OlmoeModel,
    "gpt-oss": GptOssModel,
    "phi3": Phi3Model,
    "bert": BertModel,  # encoders (arch/encoder.py): embed / rerank / classify, no generation
    "nomic-bert": NomicBertModel,
    "jina-bert-v2": JinaBertModel,
    "modern-bert": ModernBertModel,
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
    return ARCHITECTURES[name]


def build_model(f: GGUFFile, backend: str = "reference", repack: bool = False):
    """The architecture's model for file `f`; `backend` is "reference" (numpy) or "c" (kernels);
    `repack`: matrices in the ISA's decode layout where it has one (kernels.repack_layout)."""
    return model_class(f.architecture).from_gguf(f, backend, repack)
