"""A small random llama-architecture GGUF for the quantization tests.

Shaped to exercise the mix rules: 8 layers (so ``use_more_bits`` picks some),
rows of 256 (k-quant blocks) and of 320 (not a multiple of 256: the fallback
types), grouped-query attention, tied embeddings unless `untied`.
"""
from __future__ import annotations

import numpy as np
from gguf import GGUFWriter

N_LAYER, N_EMBD, N_FF, N_VOCAB, N_HEAD, N_HEAD_KV = 8, 256, 320, 512, 4, 2


def tensors(seed: int = 0, untied: bool = False) -> dict[str, np.ndarray]:
    """name -> float32 array in numpy order (rows last), llama.cpp's tensor names."""
    rng = np.random.default_rng(seed)

    def w(*shape):  # weights with a spread of row scales, as in real models
        return (rng.standard_normal(shape) * rng.uniform(0.01, 0.2, (*shape[:-1], 1))).astype(np.float32)

    head_dim = N_EMBD // N_HEAD
    t = {"token_embd.weight": w(N_VOCAB, N_EMBD), "output_norm.weight": 1 + w(N_EMBD)}
    if untied:
        t["output.weight"] = w(N_VOCAB, N_EMBD)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        t[p + "attn_norm.weight"] = 1 + w(N_EMBD)
        t[p + "attn_q.weight"] = w(N_EMBD, N_EMBD)
        t[p + "attn_k.weight"] = w(N_HEAD_KV * head_dim, N_EMBD)
        t[p + "attn_v.weight"] = w(N_HEAD_KV * head_dim, N_EMBD)
        t[p + "attn_output.weight"] = w(N_EMBD, N_EMBD)
        t[p + "ffn_norm.weight"] = 1 + w(N_EMBD)
        t[p + "ffn_gate.weight"] = w(N_FF, N_EMBD)
        t[p + "ffn_up.weight"] = w(N_FF, N_EMBD)
        t[p + "ffn_down.weight"] = w(N_EMBD, N_FF)  # rows of 320
    return t


def add_hparams(w: GGUFWriter) -> None:
    """The llama hyper-parameters of this shape (every file made from these tensors states them)."""
    w.add_context_length(128)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(N_VOCAB)


def write(path, weight_dtype=np.float16, seed: int = 0, untied: bool = False,
          extra: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Write the model with 2-D weights in `weight_dtype` (norms stay F32), plus the `extra` tensors
    (float32, written as they are); returns the tensors as written."""
    w = GGUFWriter(str(path), "llama")
    w.add_name("synthetic")
    add_hparams(w)
    w.add_file_type(1 if weight_dtype == np.float16 else 0)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(N_VOCAB)])
    w.add_token_types([1] * N_VOCAB)
    w.add_token_merges(["t 1", "t 2"])
    w.add_array("synthetic.floats", [0.5, -1.25])
    written = {}
    for name, x in tensors(seed, untied).items():
        x = x.astype(weight_dtype) if x.ndim == 2 else x
        w.add_tensor(name, x)
        written[name] = x.astype(np.float32)
    for name, x in (extra or {}).items():
        w.add_tensor(name, x)
        written[name] = x.astype(np.float32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return written


def metadata_equal(a: dict, b: dict) -> bool:
    """Two GGUF metadata dicts hold the same keys and values; numeric arrays are numpy views
    (files/gguf_file.py), compared element by element (and by dtype)."""
    import numpy as np

    if a.keys() != b.keys():
        return False
    for k, v in a.items():
        w = b[k]
        if isinstance(v, np.ndarray) or isinstance(w, np.ndarray):
            if not (isinstance(v, np.ndarray) and isinstance(w, np.ndarray) and v.dtype == w.dtype
                    and np.array_equal(v, w)):
                return False
        elif v != w:
            return False
    return True
