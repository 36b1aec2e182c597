"""What a GGUF file holds, for `localinfer info` and Model.info()."""
from __future__ import annotations

import os
from collections import Counter

import numpy as np

from .files.gguf_file import GGUFError, GGUFFile

HYPERPARAMETERS = ("context_length", "embedding_length", "block_count", "feed_forward_length",
                   "attention.head_count", "attention.head_count_kv", "attention.key_length",
                   "attention.sliding_window", "rope.freq_base", "rope.dimension_count", "rope.scaling.type",
                   "rope.scaling.factor", "rope.scaling.attn_factor", "rope.scaling.original_context_length",
                   "attention.layer_norm_rms_epsilon", "vocab_size", "expert_count", "expert_used_count",
                   "expert_feed_forward_length", "expert_shared_feed_forward_length", "expert_gating_func",
                   "expert_weights_norm")


def active_share(f: GGUFFile, arch: str) -> tuple[int, int]:
    """(parameters, bytes) a token reads: everything but the experts the router does not choose,
    i.e. of each *_exps tensor (3-D weights, 2-D biases: gpt-oss) only expert_used_count / expert_count;
    shared experts (*_shexp) run for every token. The whole model when dense."""
    n_expert = f.metadata.get(f"{arch}.expert_count") or 0
    n_used = f.metadata.get(f"{arch}.expert_used_count") or 0
    params = nbytes = 0
    for name, t in f.tensors.items():
        share = n_used / n_expert if n_expert and name.endswith(("_exps.weight", "_exps.bias")) else 1.0
        params += round(t.n_elements * share)
        nbytes += round(t.nbytes * share)
    return params, nbytes


MAX_SHOWN_ELEMENTS = 16


def summarize(value):
    """A metadata value as plain JSON data: a numeric array (a numpy view, per-layer values) as a
    list when short, else as one line saying what it is -- a file may hold millions of elements."""
    if not isinstance(value, np.ndarray):
        return value
    if len(value) <= MAX_SHOWN_ELEMENTS:
        return value.tolist()
    return f"array of {len(value)} {value.dtype.name} (min {value.min()}, max {value.max()})"


def describe(f: GGUFFile) -> dict:
    arch = f.metadata.get("general.architecture", "?")
    types = Counter(t.ggml_type.name for t in f.tensors.values())
    bytes_by_type = Counter()
    for t in f.tensors.values():
        bytes_by_type[t.ggml_type.name] += t.nbytes
    n_params = sum(t.n_elements for t in f.tensors.values())
    n_active, active_bytes = active_share(f, arch)
    tokens = _typed(f, "tokenizer.ggml.tokens", list, "an array") or []
    template = _typed(f, "tokenizer.chat_template", str, "a string")
    return {
        "path": f.path,
        "file_size": os.path.getsize(f.path),
        "gguf_version": f.version,
        "name": f.metadata.get("general.name"),
        "architecture": arch,
        "file_type": f.metadata.get("general.file_type"),
        "n_params": n_params,
        "n_active_params": n_active,  # read per token: n_params less the experts not chosen (MoE)
        "active_bytes": active_bytes,
        "n_tensors": len(f.tensors),
        "tensor_types": dict(types.most_common()),
        "tensor_bytes": dict(bytes_by_type.most_common()),
        "hyperparameters": {k: summarize(f.metadata[f"{arch}.{k}"]) for k in HYPERPARAMETERS
                            if f"{arch}.{k}" in f.metadata},
        "tokenizer": {"model": f.metadata.get("tokenizer.ggml.model"), "pre": f.metadata.get("tokenizer.ggml.pre"),
                      "n_vocab": len(tokens), "bos_id": f.metadata.get("tokenizer.ggml.bos_token_id"),
                      "eos_id": f.metadata.get("tokenizer.ggml.eos_token_id")},
        "chat_template": template,
    }


def _typed(f: GGUFFile, key: str, kind: type, what: str):
    """The key's value, None when absent; a value of another type is the file's error, named."""
    value = f.metadata.get(key)
    if value is not None and not isinstance(value, kind):
        raise GGUFError(f"{f.path}: {key} = {repr(value)[:60]}: must be {what}")
    return value
