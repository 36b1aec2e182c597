"""Small random GGUF models: the tests' one GGUF writer.

`Shape` names a model's size and layout; `LLAMA` is the default, shaped to exercise the
quantization mix rules: 8 layers (so ``use_more_bits`` picks some), rows of 256 (k-quant blocks)
and of 320 (not a multiple of 256: the fallback types), grouped-query attention, tied embeddings.
`MIX_SHAPES` are the cases llama_tensor_get_type's rules tell apart: tied or untied output, GQA 1,
2 or 4, rows of 640, dense or mixture-of-experts (a llama with 8 experts, as Mixtral is written,
or a qwen3moe with 4: the rules test n_expert == 8 and n_expert >= 4).

    tensors(shape, seed)           name -> float32 array in numpy order, llama.cpp's tensor names
    write(path, shape, seed, ...)  those tensors in a file (matrices in weight_dtype), returned as written
    write_file(path, tensors, shape, tokens=..., more=...)   any tensors (or raw quantized blocks)
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from gguf import GGUFWriter


@dataclass(frozen=True)
class Shape:
    name: str
    arch: str
    n_embd: int
    n_ff: int  # the dense MLP's width, or each expert's
    n_head: int
    n_head_kv: int
    untied: bool = False
    n_expert: int = 0
    n_layer: int = 8
    n_vocab: int = 512

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


LLAMA = Shape("llama", "llama", n_embd=256, n_ff=320, n_head=4, n_head_kv=2)
N_LAYER, N_EMBD, N_FF, N_VOCAB, N_HEAD, N_HEAD_KV = (LLAMA.n_layer, LLAMA.n_embd, LLAMA.n_ff, LLAMA.n_vocab,
                                                     LLAMA.n_head, LLAMA.n_head_kv)

MIX_SHAPES = {s.name: s for s in [
    Shape("tied-gqa1", "llama", n_embd=256, n_ff=512, n_head=4, n_head_kv=4),
    Shape("untied-gqa4", "llama", n_embd=256, n_ff=768, n_head=8, n_head_kv=2, untied=True),
    # every row of 640 but ffn_down's (1280 = 5 x 256): the fallbacks and the output's Q8_0
    Shape("rows640-gqa2", "llama", n_embd=640, n_ff=1280, n_head=10, n_head_kv=5, untied=True),
    Shape("rows640-tied", "llama", n_embd=640, n_ff=640, n_head=10, n_head_kv=10),
    Shape("mixtral-8x", "llama", n_embd=256, n_ff=256, n_head=4, n_head_kv=2, untied=True, n_expert=8),
    Shape("qwen3moe-4x", "qwen3moe", n_embd=256, n_ff=256, n_head=4, n_head_kv=4, n_expert=4),
]}


def _shape(shape: Shape | None, untied: bool | None) -> Shape:
    shape = shape or LLAMA
    return shape if untied is None else dataclasses.replace(shape, untied=untied)


def tensors(seed: int = 0, untied: bool | None = None, shape: Shape | None = None) -> dict[str, np.ndarray]:
    """name -> float32 array in numpy order (rows last); 3-D expert tensors (expert, rows, cols).
    untied: override the shape's (LLAMA's: tied)."""
    s = _shape(shape, untied)
    rng = np.random.default_rng(seed)

    def w(*dims):  # weights with a spread of row scales, as in real models
        return (rng.standard_normal(dims) * rng.uniform(0.01, 0.2, (*dims[:-1], 1))).astype(np.float32)

    e, q, kv = s.n_embd, s.n_head * s.head_dim, s.n_head_kv * s.head_dim
    t = {"token_embd.weight": w(s.n_vocab, e), "output_norm.weight": 1 + w(e)}
    if s.untied:
        t["output.weight"] = w(s.n_vocab, e)
    for i in range(s.n_layer):
        p = f"blk.{i}."
        t[p + "attn_norm.weight"] = 1 + w(e)
        t[p + "attn_q.weight"] = w(q, e)
        t[p + "attn_k.weight"] = w(kv, e)
        t[p + "attn_v.weight"] = w(kv, e)
        t[p + "attn_output.weight"] = w(e, q)
        t[p + "ffn_norm.weight"] = 1 + w(e)
        if s.arch == "qwen3moe":
            t[p + "attn_q_norm.weight"] = 1 + w(s.head_dim)
            t[p + "attn_k_norm.weight"] = 1 + w(s.head_dim)
        if s.n_expert:
            n = s.n_expert
            t[p + "ffn_gate_inp.weight"] = w(n, e)  # the router: never quantized
            t[p + "ffn_gate_exps.weight"] = w(n, s.n_ff, e)
            t[p + "ffn_up_exps.weight"] = w(n, s.n_ff, e)
            t[p + "ffn_down_exps.weight"] = w(n, e, s.n_ff)
        else:
            t[p + "ffn_gate.weight"] = w(s.n_ff, e)
            t[p + "ffn_up.weight"] = w(s.n_ff, e)
            t[p + "ffn_down.weight"] = w(e, s.n_ff)  # LLAMA's: rows of 320
    return t


def add_hparams(w: GGUFWriter, shape: Shape | None = None) -> None:
    """The hyper-parameters of `shape` (every file made from its tensors states them)."""
    s = shape or LLAMA
    w.add_context_length(128)
    w.add_embedding_length(s.n_embd)
    w.add_block_count(s.n_layer)
    w.add_feed_forward_length(s.n_ff)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_rope_dimension_count(s.head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(s.n_vocab)
    if s.n_expert:
        w.add_expert_count(s.n_expert)
        w.add_expert_used_count(2)
        w.add_expert_feed_forward_length(s.n_ff)


def write_file(path, tensors: dict, shape: Shape | None = None, tokens: list[str] | None = None,
               tokenizer_model: str | None = "gpt2", merges=("t 1", "t 2"), file_type: int = 1, more=None):
    """A GGUF of `shape`'s hyper-parameters and these tensors: numpy arrays written as they are, or
    (raw bytes array, GGMLQuantizationType) pairs as quantized blocks. The vocabulary: `tokens` (else
    t0, t1, ...) of a `tokenizer_model` BPE (None: no tokenizer keys). more(writer): further keys
    (a chat template, a value of the wrong type ...), written last."""
    s = shape or LLAMA
    w = GGUFWriter(str(path), s.arch)
    w.add_name(f"synthetic {s.name}")
    add_hparams(w, s)
    w.add_file_type(file_type)
    if tokenizer_model is not None:
        w.add_tokenizer_model(tokenizer_model)
        w.add_token_list(tokens if tokens is not None else [f"t{i}" for i in range(s.n_vocab)])
        w.add_token_types([1] * s.n_vocab)
        w.add_token_merges(list(merges))
    w.add_array("synthetic.floats", [0.5, -1.25])  # a float array, which a quantizer copies as it is
    if more is not None:
        more(w)
    for name, x in tensors.items():
        if isinstance(x, tuple):
            raw, qtype = x
            w.add_tensor(name, raw, raw_dtype=qtype)  # the byte shape: gguf-py derives ne
        else:
            w.add_tensor(name, x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write(path, shape: Shape | None = None, seed: int = 0, weight_dtype=np.float16, untied: bool | None = None,
          overrides: dict[str, np.ndarray] | None = None, extra: dict[str, np.ndarray] | None = None,
          **file_options) -> dict[str, np.ndarray]:
    """Write `shape`'s random model (LLAMA's by default) with its matrices in `weight_dtype` (norms and
    the router F32), `overrides` replacing tensors of the same shape and `extra` ones added as they
    are; returns the tensors as written (float32). file_options: write_file's (tokens, more ...)."""
    s = _shape(shape, untied)
    written = {}
    for name, x in tensors(seed, shape=s).items():
        if overrides and name in overrides:
            assert overrides[name].shape == x.shape, name
            x = overrides[name]
        if x.ndim >= 2 and "ffn_gate_inp" not in name:
            x = x.astype(weight_dtype)
        written[name] = x
    written.update(extra or {})
    file_type = 1 if weight_dtype == np.float16 else 0
    write_file(path, written, s, file_type=file_type, **file_options)
    return {name: x.astype(np.float32) for name, x in written.items()}


def metadata_equal(a: dict, b: dict) -> bool:
    """Two GGUF metadata dicts hold the same keys and values; numeric arrays are numpy views
    (files/gguf_file.py), compared element by element (and by dtype)."""
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
