"""The second executor of arch/layer.py's DecoderLayer data: the whole layer stack in one C call
(`li_decoder_layers`, csrc/core/decoder_layers.c and core/moe.c), for the C backend.

`run_layers` is the readable version; for a batch whose caches are all f16 or q8_0 / q4_0 rows
(kv/cache_types.py; plain, or full + sliding-window ring), on C kernels, `FusedLayers.run` does the
same steps with the same kernels in C, so the logits are the same bits
(tests/kernels/test_fused_layers.py) and a decode step costs one Python->C call instead of ~13 per
layer. Each DecoderLayer field maps onto one field of `li_decoder_layer` (`_layer`); what every
layer shares (`LayerParams`) onto `li_decoder_config` (`run`). Everything C will dereference is
checked or built here: the weight pointers come from PreparedMatrix (checked when the model
loaded), the per-call arguments (activations, positions, caches, frequencies) are checked on every call.
"""
from __future__ import annotations

import numpy as np

from ..backend import kernels
from ..backend.ops import GELU_F16_TABLE
from ..kv.cache import InterleavedKVCache, KVCache
from ..kv.cache_types import CACHE_TYPES, KVCacheTypes, row_width
from .blocks import GatedMLP
from .layer import DecoderLayer, LayerParams
from .moe import SOFTMAX, SOFTMAX_AFTER_TOP_K, SharedExpertMoE, SparseMoE
from .weights import KernelLinear


def _moe_linears(moe: SparseMoE | SharedExpertMoE) -> list:
    """Every linear layer of an expert block: router, routed experts, and the shared expert's (qwen2moe)."""
    routed = moe.routed if isinstance(moe, SharedExpertMoE) else moe
    linears = [routed.gate_inp, *routed.gate, *routed.up, *routed.down]
    if isinstance(moe, SharedExpertMoE):
        linears += [moe.shared.w_gate, moe.shared.w_up, moe.shared.w_down]
    return linears


def _moe_in_c(moe: SparseMoE | SharedExpertMoE) -> bool:
    """Whether core/moe.c computes this block as moe.py does: softmax over every router logit, then
    the top-k, or softmax over the top-k logits (gpt-oss), renormalised or not; router and routed
    experts with or without biases; a shared expert (qwen2moe) with separate gate and up matrices
    and no biases. Sigmoid gating keeps the Python loop."""
    if isinstance(moe, SharedExpertMoE):
        shared = [moe.shared.w_gate, moe.shared.w_up, moe.shared.w_down]
        if moe.shared.w_gate is None or any(getattr(lin, "bias", None) is not None for lin in shared):
            return False
        moe = moe.routed
    return moe.gating in (SOFTMAX, SOFTMAX_AFTER_TOP_K)


def _qk_norm_whole(attn, head_dim: int) -> bool:
    """Whether the layer's Q/K norms span the whole projection (olmoe) rather than each head (qwen3):
    blocks.Attention took their shape from the file."""
    return any(n is not None and n.shape != (head_dim,) for n in (attn.q_norm, attn.k_norm))


def _expressible(layers: list[DecoderLayer], c) -> bool:
    """Whether li_decoder_layer / li_decoder_config can say what these layers do: every matrix on the
    C kernels, FFN blocks moe.c knows, one sliding-window width, and activations C has per call (the
    GELU table is per call, gpt-oss's clamped SwiGLU exists for experts only)."""
    acts = {layer.act for layer in layers}
    if len(acts) != 1 or len({layer.window for layer in layers} - {None}) > 1:
        return False
    for layer in layers:
        a, m = layer.attn, layer.mlp
        if isinstance(m, (SparseMoE, SharedExpertMoE)):
            if not _moe_in_c(m):
                return False  # routing that core/moe.c does not know (yet) stays in the Python loop
            expert_linears = _moe_linears(m)
        elif isinstance(m, GatedMLP) and layer.act != "swiglu_oai":
            expert_linears = [m.w_gate, m.w_up, m.w_down]
        else:
            return False  # a block the C layers do not have
        whole = _qk_norm_whole(a, c.head_dim)
        q_len, k_len = (c.n_head * c.head_dim, c.n_head_kv * c.head_dim) if whole else (c.head_dim, c.head_dim)
        if (a.q_norm is not None and a.q_norm.shape != (q_len,)) or \
                (a.k_norm is not None and a.k_norm.shape != (k_len,)):
            return False  # one norm per head and the other over the whole projection: no layout does that
        linears = [a.wqkv, a.wq, a.wk, a.wv, a.wo, *expert_linears]
        if not all(lin is None or isinstance(lin, KernelLinear) for lin in linears):
            return False
    return True


def _parts(cache):
    """(full cache, ring cache or None) of a cache the C layers understand, else None."""
    if type(cache) is KVCache:
        return cache, None
    if type(cache) is InterleavedKVCache:
        return cache.full, cache.swa
    return None


class FusedLayers:
    def __init__(self, model, ffi, lib):
        """model: a DecoderModel whose weights.layers `_expressible` accepted."""
        c, layers = model.config, model.weights.layers
        self.ffi, self.lib, self.config = ffi, lib, c
        self._keep = []  # every numpy buffer a pointer below refers to
        self.ring_flags = [layer.window is not None for layer in layers]
        self.window = next((layer.window for layer in layers if layer.window is not None), 0)
        act = layers[0].act
        self.geglu_table = self._floats(GELU_F16_TABLE, 65536) if act == "geglu" else None
        self.moe_act = lib.LI_MOE_SWIGLU_OAI if act == "swiglu_oai" else lib.LI_MOE_GLU
        self.layers = ffi.new("li_decoder_layer[]", c.n_layer)
        self.layer_freq_sizes = set()  # each must match the call's frequencies (C reads n_rot / 2 of each)
        counts = {False: 0, True: 0}
        for layer, spec in zip(layers, self.layers):
            ring = layer.window is not None
            spec.ring, spec.window, spec.cache_layer = int(ring), layer.window or 0, counts[ring]
            counts[ring] += 1
            self._layer(spec, layer)

    @classmethod
    def build(cls, model) -> "FusedLayers | None":
        """None unless the C layer can say what every layer does, on the C kernels (`_expressible`)."""
        if not kernels.available() or not _expressible(model.weights.layers, model.config):
            return None
        ffi, lib = kernels.c_module()
        return cls(model, ffi, lib)

    def _layer(self, spec, layer: DecoderLayer) -> None:
        """Fill one li_decoder_layer from a DecoderLayer, field by field."""
        c, ffi = self.config, self.ffi
        if layer.inv_freq is not None:
            freq = np.ascontiguousarray(layer.inv_freq, dtype=np.float64)
            self._keep.append(freq)
            self.layer_freq_sizes.add(freq.shape)
            spec.inv_freq = ffi.from_buffer("double[]", freq)
        spec.attn_post_norm = self._optional_floats(layer.attn_post_norm, c.n_embd)
        spec.ffn_post_norm = self._optional_floats(layer.ffn_post_norm, c.n_embd)
        spec.attn_sinks = self._optional_floats(layer.sinks, c.n_head)
        spec.attn_norm = self._floats(layer.attn_norm, c.n_embd)
        spec.ffn_norm = self._floats(layer.ffn_norm, c.n_embd)
        attn, mlp = layer.attn, layer.mlp
        # the shapes C sizes its buffers by (the loader checked them against the file; again here)
        q_dim, kv_dim, d = c.n_head * c.head_dim, c.n_head_kv * c.head_dim, c.n_embd
        whole = _qk_norm_whole(attn, c.head_dim)
        spec.qk_norm_whole = int(whole)
        q_len, k_len = (q_dim, kv_dim) if whole else (c.head_dim, c.head_dim)
        spec.q_norm = self._optional_floats(attn.q_norm, q_len)
        spec.k_norm = self._optional_floats(attn.k_norm, k_len)
        if attn.wqkv is not None:
            projections = [(attn.wqkv, (q_dim + 2 * kv_dim, d))]
        else:
            projections = [(attn.wq, (q_dim, d)), (attn.wk, (kv_dim, d)), (attn.wv, (kv_dim, d))]
        spec.n_qkv = len(projections)
        for i, (lin, shape) in enumerate(projections):
            self._linear(spec.qkv[i], lin, shape)
        self._linear(spec.wo, attn.wo, (d, q_dim))
        if isinstance(mlp, (SparseMoE, SharedExpertMoE)):
            spec.moe = self._moe(mlp)
            return
        if mlp.w_gate is None:
            gate_up = [(mlp.w_up, (2 * c.n_ff, d))]
        else:
            gate_up = [(mlp.w_gate, (c.n_ff, d)), (mlp.w_up, (c.n_ff, d))]
        spec.n_gate_up = len(gate_up)
        for i, (lin, shape) in enumerate(gate_up):
            self._linear(spec.gate_up[i], lin, shape)
        self._linear(spec.down, mlp.w_down, (d, c.n_ff))

    def _optional_floats(self, a: np.ndarray | None, n: int):
        return self.ffi.NULL if a is None else self._floats(a, n)

    def _floats(self, a: np.ndarray, n: int):
        a = np.ascontiguousarray(a, dtype=np.float32)
        if a.shape != (n,):
            raise ValueError(f"fused layers: expected ({n},) floats, got {a.shape}")
        self._keep.append(a)
        return self.ffi.from_buffer("float[]", a)

    def _moe(self, block: SparseMoE | SharedExpertMoE):
        """The li_moe of a layer's experts: its router, one li_linear per expert matrix, and the
        shared expert with its gate vector (qwen2moe) when the block has one."""
        c, ffi = self.config, self.ffi
        moe = block.routed if isinstance(block, SharedExpertMoE) else block
        n, d, f = c.n_expert, c.n_embd, c.n_ff_exp
        spec = ffi.new("li_moe *")
        self._linear(spec.router, moe.gate_inp, (n, d))
        for name, lins, shape in (("gate", moe.gate, (f, d)), ("up", moe.up, (f, d)), ("down", moe.down, (d, f))):
            if len(lins) != n:
                raise ValueError(f"fused layers: {len(lins)} {name} experts where {n} belong")
            if len({lin.mat.wtype_id for lin in lins}) != 1:
                raise ValueError(f"fused layers: {name} experts of several types")  # one 3-D tensor has one
            specs = ffi.new("li_linear[]", n)
            for e, lin in enumerate(lins):
                self._linear(specs[e], lin, shape)
            setattr(spec, name, specs)
            self._keep.append(specs)
        if not 1 <= moe.n_used <= n:
            raise ValueError(f"fused layers: {moe.n_used} experts used of {n}")
        spec.n_expert, spec.n_used, spec.normalize = n, moe.n_used, int(moe.normalize)
        spec.after_top_k, spec.act = int(moe.gating == SOFTMAX_AFTER_TOP_K), self.moe_act
        if isinstance(block, SharedExpertMoE):
            sh, fs = block.shared, block.shared.n_ff
            self._linear(spec.shexp_gate, sh.w_gate, (fs, d))
            self._linear(spec.shexp_up, sh.w_up, (fs, d))
            self._linear(spec.shexp_down, sh.w_down, (d, fs))
            if any(lin.bias is not None for lin in (sh.w_gate, sh.w_up, sh.w_down)):
                raise ValueError("fused layers: a shared expert with biases")
            spec.shexp_gate_inp = self._floats(block.shared_gate, d)
        self._keep.append(spec)
        return spec

    def _linear(self, spec, lin: KernelLinear, shape: tuple[int, int]) -> None:
        mat = lin.mat
        if mat.shape != shape:
            raise ValueError(f"fused layers: a {mat.shape} weight where {shape} belongs")
        spec.wtype, spec.w, spec.row_bytes = mat.wtype_id, mat.pointer, mat.row_bytes
        if mat.parts is not None:   # several mapped tensors: their pointers, owned by mat as `pointer` is
            spec.n_parts, spec.parts, spec.part_rows = len(mat.parts), mat.part_pointers, mat.part_rows
        spec.n_out, spec.k, spec.layout = mat.n_out, mat.k, mat.layout
        spec.bias = self._floats(lin.bias, mat.n_out) if lin.bias is not None else self.ffi.NULL

    def applies(self, batch) -> bool:
        """Every sequence's cache is one these layers write: f16 (or q8_0 / q4_0 rows), plain, or split into full and
        ring caches the way this model's layers are."""
        for cache in batch.caches:
            parts = _parts(cache)
            if parts is None or cache.dtype != np.float16:
                return False
            full, ring = parts
            if ring is not None and [c is ring for c, _ in cache.route] != self.ring_flags:
                return False
            if ring is None and any(self.ring_flags):
                return False
            if not all(a.flags.c_contiguous for p in parts if p is not None for a in (p.k, p.v)):
                return False
        return True

    def run(self, x: np.ndarray, batch, params: LayerParams) -> np.ndarray:
        """x (n, n_embd) after the embedding -> x after every layer; stores the batch's K/V."""
        c, ffi, p = self.config, self.ffi, params
        x = np.array(x, dtype=np.float32, order="C", copy=True)
        n = x.shape[0]
        pos = np.ascontiguousarray(batch.positions, dtype=np.int64)
        freq = np.ascontiguousarray(p.inv_freq, dtype=np.float64)
        if x.shape != (n, c.n_embd) or pos.shape != (n,) or 2 * freq.shape[0] > c.head_dim or \
                any(size != freq.shape for size in self.layer_freq_sizes):
            raise ValueError("fused layers: the batch does not fit this model's shapes")
        seqs = ffi.new("li_kv_seq[]", len(batch.spans))
        n_ring = sum(self.ring_flags)
        for seq, span, cache in zip(seqs, batch.spans, batch.caches):
            m = span.stop - span.start
            full, ring = _parts(cache)
            types = full.types or KVCacheTypes()  # f16 rows unless the cache says otherwise (applies() checked)
            (kw, kdt), (vw, vdt) = row_width(types.k, c.head_dim), row_width(types.v, c.head_dim)
            seq.type_k, seq.type_v = int(CACHE_TYPES[types.k]), int(CACHE_TYPES[types.v])
            expect = (c.n_layer - n_ring, full.n_ctx, c.n_head_kv)
            if full.k.shape != expect + (kw,) or full.v.shape != expect + (vw,) or full.k.dtype != kdt or \
                    full.v.dtype != vdt or full.offset + m > full.n_ctx or \
                    not np.array_equal(pos[span], np.arange(full.offset, full.offset + m)):
                raise ValueError("fused layers: a sequence does not fit its cache")
            seq.k = ffi.from_buffer("char[]", full.k, require_writable=True)
            seq.v = ffi.from_buffer("char[]", full.v, require_writable=True)
            seq.n_ctx, seq.offset, seq.n_tokens = full.n_ctx, full.offset, m
            if n_ring:
                expect = (n_ring, ring.n_slots, c.n_head_kv)
                start = max(0, full.offset - self.window + 1)
                if ring.k.shape != expect + (kw,) or ring.v.shape != expect + (vw,) or ring.types != full.types or \
                        ring.window != self.window or \
                        ring.offset != full.offset or start < ring.held_start:
                    raise ValueError("fused layers: a sequence's sliding-window cache does not fit")
                seq.ring_k = ffi.from_buffer("char[]", ring.k, require_writable=True)
                seq.ring_v = ffi.from_buffer("char[]", ring.v, require_writable=True)
                seq.n_slots = ring.n_slots
        cfg = ffi.new("li_decoder_config *", dict(
            n_embd=c.n_embd, n_head=c.n_head, n_head_kv=c.n_head_kv, head_dim=c.head_dim, n_ff=c.n_ff,
            n_rot=2 * freq.shape[0], eps=c.rms_eps, attn_scale=p.attn_scale, q_scale=p.q_scale or 0.0,
            rope_mscale=p.rope_mscale, neox=int(p.neox)))
        cfg.inv_freq = ffi.from_buffer("double[]", freq)
        if self.geglu_table is not None:
            cfg.geglu_table = self.geglu_table
        rc = self.lib.li_decoder_layers(cfg, self.layers, c.n_layer, ffi.from_buffer("float[]", x, require_writable=True),
                                        ffi.from_buffer("int64_t[]", pos), seqs, len(batch.spans))
        kernels.check_status(rc, "fused layers")
        return x
