"""Small random GGUF models in the shapes that the mix rules of llama_tensor_get_type tell apart.

Each `MixShape` is one case: tied or untied output, grouped-query attention (n_head / n_head_kv of
1, 2 or 4), rows of 256 multiples or of 640 (the fallback types), dense or mixture-of-experts (a
llama with 8 experts, as Mixtral is written, or a qwen3moe with 4: the rules test n_expert == 8
and n_expert >= 4). 8 layers, so that the "first eighth" and "middle layers" rules pick some.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gguf import GGUFWriter


@dataclass(frozen=True)
class MixShape:
    name: str
    arch: str
    n_embd: int
    n_ff: int  # the dense MLP's width, or each expert's
    n_head: int
    n_head_kv: int
    untied: bool
    n_expert: int = 0
    n_layer: int = 8
    n_vocab: int = 512

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


MIX_SHAPES = {s.name: s for s in [
    MixShape("tied-gqa1", "llama", n_embd=256, n_ff=512, n_head=4, n_head_kv=4, untied=False),
    MixShape("untied-gqa4", "llama", n_embd=256, n_ff=768, n_head=8, n_head_kv=2, untied=True),
    # every row of 640 but ffn_down's (1280 = 5 x 256): the fallbacks and the output's Q8_0
    MixShape("rows640-gqa2", "llama", n_embd=640, n_ff=1280, n_head=10, n_head_kv=5, untied=True),
    MixShape("rows640-tied", "llama", n_embd=640, n_ff=640, n_head=10, n_head_kv=10, untied=False),
    MixShape("mixtral-8x", "llama", n_embd=256, n_ff=256, n_head=4, n_head_kv=2, untied=True, n_expert=8),
    MixShape("qwen3moe-4x", "qwen3moe", n_embd=256, n_ff=256, n_head=4, n_head_kv=4, untied=False, n_expert=4),
]}


def tensors(s: MixShape, seed: int = 0) -> dict[str, np.ndarray]:
    """name -> float32 array in numpy order (rows last); 3-D expert tensors (expert, rows, cols)."""
    rng = np.random.default_rng(seed)

    def w(*shape):
        return (rng.standard_normal(shape) * rng.uniform(0.01, 0.2, (*shape[:-1], 1))).astype(np.float32)

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
            t[p + "ffn_down.weight"] = w(e, s.n_ff)
    return t


def write(path, s: MixShape, seed: int = 0, weight_dtype=np.float16,
          overrides: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Write `s` with `weight_dtype` matrices (norms and the router F32), `overrides` replacing
    tensors of the same shape; returns the tensors as written."""
    w = GGUFWriter(str(path), s.arch)
    w.add_name(f"synthetic {s.name}")
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
    w.add_file_type(1)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(s.n_vocab)])
    w.add_token_types([1] * s.n_vocab)
    w.add_token_merges(["t 1", "t 2"])
    written = {}
    for name, x in tensors(s, seed).items():
        if overrides and name in overrides:
            assert overrides[name].shape == x.shape, name
            x = overrides[name]
        if x.ndim >= 2 and "ffn_gate_inp" not in name:
            x = x.astype(weight_dtype)
        w.add_tensor(name, x)
        written[name] = x.astype(np.float32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return written
