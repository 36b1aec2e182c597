"""What a GGUF file holds, for `localinfer info` and Model.info()."""
from __future__ import annotations

import os
from collections import Counter

from .gguf_file import GGUFFile

HYPERPARAMETERS = ("context_length", "embedding_length", "block_count", "feed_forward_length",
                   "attention.head_count", "attention.head_count_kv", "attention.key_length",
                   "attention.sliding_window", "rope.freq_base", "rope.dimension_count", "rope.scaling.type",
                   "rope.scaling.factor", "rope.scaling.attn_factor", "rope.scaling.original_context_length",
                   "attention.layer_norm_rms_epsilon", "vocab_size")


def describe(f: GGUFFile) -> dict:
    arch = f.metadata.get("general.architecture", "?")
    types = Counter(t.ggml_type.name for t in f.tensors.values())
    bytes_by_type = Counter()
    for t in f.tensors.values():
        bytes_by_type[t.ggml_type.name] += t.nbytes
    n_params = sum(t.n_elements for t in f.tensors.values())
    tokens = f.metadata.get("tokenizer.ggml.tokens") or []
    return {
        "path": f.path,
        "file_size": os.path.getsize(f.path),
        "gguf_version": f.version,
        "name": f.metadata.get("general.name"),
        "architecture": arch,
        "file_type": f.metadata.get("general.file_type"),
        "n_params": n_params,
        "n_tensors": len(f.tensors),
        "tensor_types": dict(types.most_common()),
        "tensor_bytes": dict(bytes_by_type.most_common()),
        "hyperparameters": {k: f.metadata[f"{arch}.{k}"] for k in HYPERPARAMETERS if f"{arch}.{k}" in f.metadata},
        "tokenizer": {"model": f.metadata.get("tokenizer.ggml.model"), "pre": f.metadata.get("tokenizer.ggml.pre"),
                      "n_vocab": len(tokens), "bos_id": f.metadata.get("tokenizer.ggml.bos_token_id"),
                      "eos_id": f.metadata.get("tokenizer.ggml.eos_token_id")},
        "chat_template": f.metadata.get("tokenizer.chat_template"),
    }
