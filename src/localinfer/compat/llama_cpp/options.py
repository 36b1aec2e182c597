"""Llama()'s keyword arguments: llama-cpp-python's names, and what each becomes on localinfer.

Every name llama-cpp-python 0.3 takes is in one of the tables below; any other is a TypeError
naming it (llama-cpp-python swallows unknown ones in **kwargs, so a misspelt n_cxt went unnoticed
there). Three kinds: GPU placement, accepted whatever its value and noted once (localinfer runs
on the CPU); settings that do not change an answer (batch sizes, mmap, verbose ...); and model
overrides, accepted at the value that means "as the model file says" and refused otherwise,
because localinfer takes them from the file (metadata decides) and ignoring one would change the
answers silently.
"""
from __future__ import annotations

import warnings
from typing import Any, Mapping

LLAMA_DEFAULT_SEED = 0xFFFFFFFF
# ggml type numbers of type_k / type_v (llama_cpp.GGML_TYPE_*) -> localinfer's cache types
GGML_TYPE_F16, GGML_TYPE_Q4_0, GGML_TYPE_Q8_0 = 1, 2, 8
CACHE_TYPES = {GGML_TYPE_F16: "f16", GGML_TYPE_Q8_0: "q8_0", GGML_TYPE_Q4_0: "q4_0"}
# llama_cpp.LLAMA_POOLING_TYPE_*: -1 (the model's), MEAN, CLS, LAST
POOLING = {0: "none", 1: "mean", 2: "cls", 3: "last"}

# name -> llama-cpp-python's default (a value other than it is what gets noted)
GPU_ONLY = {"n_gpu_layers": 0, "split_mode": 1, "main_gpu": 0, "tensor_split": None, "offload_kqv": True,
            "flash_attn": False, "op_offload": None, "rpc_servers": None}
NO_EFFECT = ("n_batch", "n_ubatch", "n_threads_batch", "use_mmap", "use_mlock", "numa", "no_perf", "verbose",
             "logits_all", "embedding", "vocab_only", "swa_full",
             # LangChain's LlamaCpp still passes these, which llama-cpp-python dropped long ago
             "n_parts", "f16_kv")
AS_THE_FILE = {"rope_scaling_type": -1, "attention_type": -1, "rope_freq_base": 0.0, "rope_freq_scale": 0.0,
               "yarn_ext_factor": -1.0, "yarn_attn_factor": 1.0, "yarn_beta_fast": 32.0, "yarn_beta_slow": 1.0,
               "yarn_orig_ctx": 0, "kv_overrides": None, "lora_base": None, "lora_path": None, "lora_scale": 1.0,
               "chat_handler": None, "tokenizer": None}
TAKEN = ("n_ctx", "n_threads", "seed", "chat_format", "draft_model", "type_k", "type_v", "pooling_type",
         "last_n_tokens_size", "spm_infill")
_noted_gpu = False


def check_names(kwargs: Mapping[str, Any]) -> None:
    known = set(GPU_ONLY) | set(NO_EFFECT) | set(AS_THE_FILE) | set(TAKEN)
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise TypeError(f"Llama() got an unexpected keyword argument {unknown[0]!r}")


def note_gpu_options(kwargs: Mapping[str, Any]) -> None:
    """One warning per process when GPU placement is asked for: localinfer computes on the CPU."""
    global _noted_gpu
    asked = sorted(k for k, default in GPU_ONLY.items() if k in kwargs and kwargs[k] != default)
    if asked and not _noted_gpu:
        _noted_gpu = True
        warnings.warn(f"{', '.join(asked)}: localinfer's llama-cpp-python shim runs on the CPU; GPU placement "
                      f"is ignored", UserWarning, stacklevel=3)


def check_as_the_file(kwargs: Mapping[str, Any], metadata: Mapping[str, Any]) -> None:
    """Model overrides at their "as the file says" value pass, or at the file's own value (a RoPE
    base equal to the file's); any other is a ValueError naming it."""
    arch = metadata.get("general.architecture", "")
    own = {"rope_freq_base": metadata.get(f"{arch}.rope.freq_base")}
    if metadata.get(f"{arch}.rope.scaling.type") in (None, "none"):
        own["rope_freq_scale"] = 1.0
    for name, default in AS_THE_FILE.items():
        value = kwargs.get(name, default)
        if value != default and (name not in own or value != own[name]):
            raise ValueError(f"{name}={value!r}: localinfer's llama-cpp-python shim takes this from the model file "
                             f"(or cannot do it); leave it at {default!r}")


def cache_type(name: str, value: Any) -> str:
    """type_k / type_v: None or a GGML_TYPE_* number -> localinfer's cache type name."""
    if value is None:
        return "f16"
    if isinstance(value, bool) or value not in CACHE_TYPES:
        raise ValueError(f"{name}={value!r}: the KV cache holds GGML_TYPE_F16 ({GGML_TYPE_F16}), GGML_TYPE_Q8_0 "
                         f"({GGML_TYPE_Q8_0}) or GGML_TYPE_Q4_0 ({GGML_TYPE_Q4_0}) here")
    return CACHE_TYPES[value]


def pooling(value: Any) -> str | None:
    """pooling_type: -1 (None: the model's own) or LLAMA_POOLING_TYPE_NONE / MEAN / CLS / LAST."""
    if value == -1:
        return None
    if isinstance(value, bool) or value not in POOLING:
        raise ValueError(f"pooling_type={value!r}: -1 (the model's), 0 (none), 1 (mean), 2 (cls) or 3 (last) here")
    return POOLING[value]


def speculation(draft_model: Any) -> dict:
    """draft_model -> localinfer.load's speculative options: a LlamaPromptLookupDecoding drafts
    from n-grams (speculative/); a program's own LlamaDraftModel is refused by name."""
    if draft_model is None:
        return {}
    from ...speculative.config import MAX_DRAFT_IDENTICAL
    if type(draft_model).__name__ != "LlamaPromptLookupDecoding" or not hasattr(draft_model, "max_ngram_size"):
        raise ValueError(f"draft_model={type(draft_model).__name__}: localinfer drafts with its own proposers; "
                         f"LlamaPromptLookupDecoding is the draft model it maps")
    # drafts longer than MAX_DRAFT_IDENTICAL would make a verification pass round differently
    return {"lookup_ngram": min(int(draft_model.max_ngram_size), 16),
            "draft_max": min(int(draft_model.num_pred_tokens), MAX_DRAFT_IDENTICAL)}
