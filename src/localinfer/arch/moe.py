"""The sparse mixture-of-experts feed-forward block (qwen3moe, qwen2moe, olmoe, gpt-oss; mixtral,
which is llama with experts): a router picks n_expert_used of n_expert gated MLPs per token, and
only those run.

    p = gating(ffn_gate_inp(h))                   # (n, n_expert), float32 (+ the router's bias: gpt-oss)
    experts, w = top_k(p, n_expert_used)          # (n, k); w /= sum(w) when expert_weights_norm
    out[t] = sum_j w[t, j] * down_e(act(gate_e(h[t]), up_e(h[t])))   for e = experts[t, j]
    out   += sigmoid(h . ffn_gate_inp_shexp) * shared(h)              # qwen2moe's shared expert

as llama.cpp's build_moe_ffn (src/llama-graph.cpp) and transformers' *SparseMoeBlock. The gating
is one mechanism (`Gating`): softmax or sigmoid, applied to all logits before the top-k or to the
k chosen ones after it (gpt-oss: top-k of the logits, then softmax over those k), and optional
renormalisation of the chosen weights (expert_weights_norm). GGUF holds each kind of expert matrix as one
3-D tensor, (n_expert, rows, cols) in numpy order: ffn_gate_exps / ffn_up_exps (n_expert,
n_ff_exp, n_embd) and ffn_down_exps (n_expert, n_embd, n_ff_exp). Each expert is a contiguous
slice of it, kept as its own linear layer over the mmap (WeightLoader.experts), so a token
reads only its chosen experts' rows, and a batch runs one matmul per chosen expert over the
tokens routed to it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np

from ..files.gguf_file import GGUFError
from .blocks import GatedMLP
from .weights import Linear, WeightLoader


class Gating(NamedTuple):
    """How router logits become expert weights: `func` ("softmax" or "sigmoid") over all
    n_expert logits before the top-k, or, with `after_top_k`, over the k chosen logits only."""
    func: str
    after_top_k: bool = False


SOFTMAX = Gating("softmax")
SIGMOID = Gating("sigmoid")
SOFTMAX_AFTER_TOP_K = Gating("softmax", after_top_k=True)
# {arch}.expert_gating_func values: llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_{SOFTMAX, SIGMOID, SOFTMAX_WEIGHT}
GATING_SOFTMAX, GATING_SIGMOID, GATING_SOFTMAX_WEIGHT = 1, 2, 3
GATINGS = {GATING_SOFTMAX: SOFTMAX, GATING_SIGMOID: SIGMOID, GATING_SOFTMAX_WEIGHT: SOFTMAX_AFTER_TOP_K}
# Where the file has no expert_gating_func / expert_weights_norm, llama.cpp's graph for the
# architecture decides (src/models/*.cpp): these three never renormalise, gpt-oss gates after the top-k.
# Every other architecture: softmax, renormalised (qwen3moe, llama/mixtral).
ARCH_GATING = {"qwen2moe": (GATING_SOFTMAX, False), "olmoe": (GATING_SOFTMAX, False),
               "gpt-oss": (GATING_SOFTMAX_WEIGHT, False)}


def expert_hparams(h, n_ff: int) -> dict:
    """The expert keys of a file as LlamaConfig fields; n_expert = 0 for a dense model.
    expert_gating_func and expert_weights_norm default to what llama.cpp's graph for the
    architecture does (ARCH_GATING); our converter writes expert_weights_norm."""
    n_expert = h.count("expert_count", 0, minimum=0)
    if not n_expert:
        return {}
    n_used = h.count("expert_used_count")
    if n_used > n_expert:
        raise h.error("expert_used_count", n_used, f"must be at most expert_count = {n_expert}")
    default_gating, default_norm = ARCH_GATING.get(h.arch, (GATING_SOFTMAX, True))
    gating = h.count("expert_gating_func", default_gating)
    if gating not in GATINGS:
        raise h.error("expert_gating_func", gating, "must be 1 (softmax), 2 (sigmoid) or 3 (softmax after the top-k)")
    norm = h.f.metadata.get(h.key("expert_weights_norm"), default_norm)
    if not isinstance(norm, bool):
        raise h.error("expert_weights_norm", norm, "must be a boolean")
    out = dict(n_expert=n_expert, n_expert_used=n_used, expert_weights_norm=norm,
               n_ff_exp=h.count("expert_feed_forward_length", n_ff))
    if gating != GATING_SOFTMAX:
        out["expert_gating"] = GATINGS[gating]
    if h.has("expert_shared_feed_forward_length"):
        out["n_ff_shexp"] = h.count("expert_shared_feed_forward_length")
    return out


def _softmax(x: np.ndarray) -> np.ndarray:
    z = np.exp(x - x.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def route(logits: np.ndarray, k: int, normalize: bool, gating: Gating = SOFTMAX) -> tuple[np.ndarray, np.ndarray]:
    """Router logits (n, n_expert) -> the k chosen experts (n, k) int64, highest score first
    (ties: the lower index), and their weights (n, k) float32: the gating function's scores
    of the chosen experts (softmax or sigmoid over all logits; with after_top_k, the function
    over the k chosen logits), divided by their sum over the k when `normalize`."""
    logits = np.asarray(logits, dtype=np.float32)
    if logits.ndim != 2 or not 1 <= k <= logits.shape[1]:
        raise ValueError(f"route: logits must be (n, n_expert) with 1 <= k <= n_expert, got {logits.shape}, k={k}")
    if gating.func not in ("softmax", "sigmoid"):
        raise ValueError(f"route: unknown gating function {gating.func!r} (softmax or sigmoid)")
    act = _softmax if gating.func == "softmax" else lambda x: 1 / (1 + np.exp(-x))
    p = logits if gating.after_top_k else act(logits)  # both monotonic: the same choice either way
    experts = np.argsort(-p, axis=1, kind="stable")[:, :k]
    weights = np.take_along_axis(p, experts, axis=1)
    if gating.after_top_k:
        weights = act(weights)
    if normalize:
        weights = weights / weights.sum(axis=1, keepdims=True)
    return experts, weights.astype(np.float32)


@dataclass
class SparseMoE:
    gate_inp: Linear  # (n_expert, n_embd) router, bias (n_expert,) optional (gpt-oss)
    gate: list[Linear]  # per expert (n_ff_exp, n_embd), bias optional (gpt-oss)
    up: list[Linear]  # per expert (n_ff_exp, n_embd)
    down: list[Linear]  # per expert (n_embd, n_ff_exp)
    n_used: int
    normalize: bool
    gating: Gating = SOFTMAX

    @classmethod
    def from_gguf(cls, w: WeightLoader, p: str, c) -> "SparseMoE":
        n, d, f = c.n_expert, c.n_embd, c.n_ff_exp
        if w.has(p + "ffn_gate_up_exps.weight"):
            raise GGUFError(f"{w.f.path}: fused gate/up experts ({p}ffn_gate_up_exps) are not supported yet")
        return cls(gate_inp=w.linear(p + "ffn_gate_inp.weight", (n, d), bias=p + "ffn_gate_inp.bias"),
                   gate=w.experts(p + "ffn_gate_exps.weight", (n, f, d), bias=p + "ffn_gate_exps.bias"),
                   up=w.experts(p + "ffn_up_exps.weight", (n, f, d), bias=p + "ffn_up_exps.bias"),
                   down=w.experts(p + "ffn_down_exps.weight", (n, d, f), bias=p + "ffn_down_exps.bias"),
                   n_used=c.n_expert_used, normalize=c.expert_weights_norm, gating=c.expert_gating)

    def __call__(self, h: np.ndarray, act: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
        """h: (n, n_embd), already normed -> the weighted sum of its chosen experts (n, n_embd)."""
        experts, weights = route(self.gate_inp(h), self.n_used, self.normalize, self.gating)  # (n, k) each
        out = np.zeros(h.shape, dtype=np.float32)
        for e in np.unique(experts):  # each chosen expert once, over every token routed to it
            rows, slot = np.nonzero(experts == e)  # a token chooses an expert at most once
            x = np.ascontiguousarray(h[rows], dtype=np.float32)
            y = self.down[e](act(self.gate[e](x), self.up[e](x)))  # (len(rows), n_embd)
            out[rows] += y * weights[rows, slot][:, None]
        return out


@dataclass
class SharedExpertMoE:
    """Routed experts beside one shared expert that every token runs, scaled by a sigmoid gate
    (qwen2moe; llama.cpp's ffn_*_shexp and ffn_gate_inp_shexp, transformers' shared_expert and
    shared_expert_gate)."""
    routed: SparseMoE
    shared: GatedMLP  # (n_ff_shexp) gate, up, down
    shared_gate: np.ndarray  # (n_embd,)

    @classmethod
    def from_gguf(cls, w: WeightLoader, p: str, c) -> "SharedExpertMoE":
        d, f = c.n_embd, c.n_ff_shexp or c.n_ff  # llama.cpp: n_ff when the file has no shared length
        gate_name = p + "ffn_gate_inp_shexp.weight"
        gate_shape = tuple(w.f.tensors[gate_name].shape)  # llama.cpp takes {n_embd}, i.e. also (1, n_embd)
        if gate_shape not in ((d,), (1, d)):
            raise GGUFError(f"{w.f.path}: tensor {gate_name!r} has shape {gate_shape}, expected ({d},)")
        shared = GatedMLP(w_gate=w.linear(p + "ffn_gate_shexp.weight", (f, d)), w_up=w.linear(p + "ffn_up_shexp.weight", (f, d)),
                          w_down=w.linear(p + "ffn_down_shexp.weight", (d, f)), n_ff=f)
        return cls(routed=SparseMoE.from_gguf(w, p, c), shared=shared,
                   shared_gate=w.vector(gate_name, gate_shape).reshape(d))

    def __call__(self, h: np.ndarray, act: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
        """h: (n, n_embd), already normed -> routed experts + sigmoid(h . gate) * shared(h) (n, n_embd)."""
        gate = 1 / (1 + np.exp(-(h @ self.shared_gate)))  # (n,)
        return self.routed(h, act) + self.shared(h, act) * gate[:, None].astype(np.float32)


def moe_ffn(w: WeightLoader, p: str, c) -> SparseMoE | SharedExpertMoE:
    """The expert block of layer prefix `p`: with a shared expert when the file has one."""
    if w.has(p + "ffn_gate_inp_shexp.weight"):
        return SharedExpertMoE.from_gguf(w, p, c)
    return SparseMoE.from_gguf(w, p, c)
