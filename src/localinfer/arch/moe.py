"""The sparse mixture-of-experts feed-forward block (qwen3moe; mixtral, which is llama with experts):
a router picks n_expert_used of n_expert gated MLPs per token, and only those run.

    p = softmax(ffn_gate_inp(h))                  # (n, n_expert), float32
    experts, w = top_k(p, n_expert_used)          # (n, k); w /= sum(w) when expert_weights_norm
    out[t] = sum_j w[t, j] * down_e(silu(gate_e(h[t])) * up_e(h[t]))   for e = experts[t, j]

as llama.cpp's build_moe_ffn with softmax gating (src/llama-graph.cpp) and transformers'
Qwen3MoeSparseMoeBlock / MixtralSparseMoeBlock. GGUF holds each kind of expert matrix as one
3-D tensor, (n_expert, rows, cols) in numpy order: ffn_gate_exps / ffn_up_exps (n_expert,
n_ff_exp, n_embd) and ffn_down_exps (n_expert, n_embd, n_ff_exp). Each expert is a contiguous
slice of it, kept as its own linear layer over the mmap (WeightLoader.experts), so a token
reads only its chosen experts' rows, and a batch runs one matmul per chosen expert over the
tokens routed to it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..gguf_file import GGUFError
from .weights import Linear, WeightLoader

GATING_SOFTMAX = 1  # {arch}.expert_gating_func (llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX)


def expert_hparams(h, n_ff: int) -> dict:
    """The expert keys of a file as LlamaConfig fields; n_expert = 0 for a dense model.
    expert_weights_norm defaults to true: llama.cpp renormalises the chosen weights for
    qwen3moe and llama (mixtral) whatever the file says; our converter writes the key."""
    n_expert = h.count("expert_count", 0, minimum=0)
    if not n_expert:
        return {}
    n_used = h.count("expert_used_count")
    if n_used > n_expert:
        raise h.error("expert_used_count", n_used, f"must be at most expert_count = {n_expert}")
    gating = h.count("expert_gating_func", GATING_SOFTMAX)
    if gating != GATING_SOFTMAX:
        raise h.error("expert_gating_func", gating, "only softmax gating (1) is supported")
    norm = h.f.metadata.get(h.key("expert_weights_norm"), True)
    if not isinstance(norm, bool):
        raise h.error("expert_weights_norm", norm, "must be a boolean")
    return dict(n_expert=n_expert, n_expert_used=n_used, expert_weights_norm=norm,
                n_ff_exp=h.count("expert_feed_forward_length", n_ff))


def route(logits: np.ndarray, k: int, normalize: bool) -> tuple[np.ndarray, np.ndarray]:
    """Router logits (n, n_expert) -> the k chosen experts (n, k) int64, highest probability
    first (ties: the lower index), and their weights (n, k) float32: softmax probabilities,
    divided by their sum over the k when `normalize`."""
    logits = np.asarray(logits, dtype=np.float32)
    if logits.ndim != 2 or not 1 <= k <= logits.shape[1]:
        raise ValueError(f"route: logits must be (n, n_expert) with 1 <= k <= n_expert, got {logits.shape}, k={k}")
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    p = z / z.sum(axis=1, keepdims=True)
    experts = np.argsort(-p, axis=1, kind="stable")[:, :k]
    weights = np.take_along_axis(p, experts, axis=1)
    if normalize:
        weights = weights / weights.sum(axis=1, keepdims=True)
    return experts, weights.astype(np.float32)


@dataclass
class SparseMoE:
    gate_inp: Linear  # (n_expert, n_embd) router
    gate: list[Linear]  # per expert (n_ff_exp, n_embd)
    up: list[Linear]  # per expert (n_ff_exp, n_embd)
    down: list[Linear]  # per expert (n_embd, n_ff_exp)
    n_used: int
    normalize: bool

    @classmethod
    def from_gguf(cls, w: WeightLoader, p: str, c) -> "SparseMoE":
        n, d, f = c.n_expert, c.n_embd, c.n_ff_exp
        if w.has(p + "ffn_gate_up_exps.weight") or w.has(p + "ffn_gate_shexp.weight"):
            raise GGUFError(f"{w.f.path}: fused gate/up experts or shared experts ({p}) are not supported yet")
        return cls(gate_inp=w.linear(p + "ffn_gate_inp.weight", (n, d)),
                   gate=w.experts(p + "ffn_gate_exps.weight", (n, f, d)),
                   up=w.experts(p + "ffn_up_exps.weight", (n, f, d)),
                   down=w.experts(p + "ffn_down_exps.weight", (n, d, f)),
                   n_used=c.n_expert_used, normalize=c.expert_weights_norm)

    def __call__(self, h: np.ndarray, act: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
        """h: (n, n_embd), already normed -> the weighted sum of its chosen experts (n, n_embd)."""
        experts, weights = route(self.gate_inp(h), self.n_used, self.normalize)  # (n, k) each
        out = np.zeros(h.shape, dtype=np.float32)
        for e in np.unique(experts):  # each chosen expert once, over every token routed to it
            rows, slot = np.nonzero(experts == e)  # a token chooses an expert at most once
            x = np.ascontiguousarray(h[rows], dtype=np.float32)
            y = self.down[e](act(self.gate[e](x), self.up[e](x)))  # (len(rows), n_embd)
            out[rows] += y * weights[rows, slot][:, None]
        return out
