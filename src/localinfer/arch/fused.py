"""The llama family's decoder layers in one C call (csrc/layers.c), for the C backend.

LlamaModel.forward_batch's loop is the readable version; for a batch whose sequences all use a
plain f16 KV cache, on C kernels, `FusedLayers.run` does the same steps with the same kernels in
C, so the logits are the same bits (tests/test_fused_layers.py) and a decode step costs one
Python->C call instead of ~13 per layer (plus one attention call per sequence). Everything C will dereference is checked or built here: the weight
pointers come from PreparedMatrix (checked when the model loaded), the per-call arguments
(activations, positions, cache, frequencies) are checked on every call.
"""
from __future__ import annotations

import numpy as np

from ..kv_cache import KVCache
from .weights import KernelLinear


class FusedLayers:
    def __init__(self, model, ffi, lib):
        c, w = model.config, model.weights
        self.ffi, self.lib, self.config = ffi, lib, c
        self._keep = []  # every numpy buffer a pointer below refers to
        self.layers = ffi.new("li_llama_layer[]", c.n_layer)
        for layer, spec in zip(w.layers, self.layers):
            spec.attn_norm = self._floats(layer.attn_norm, c.n_embd)
            spec.ffn_norm = self._floats(layer.ffn_norm, c.n_embd)
            attn, mlp = layer.attn, layer.mlp
            spec.q_norm = self._floats(attn.q_norm, c.head_dim) if attn.q_norm is not None else ffi.NULL
            spec.k_norm = self._floats(attn.k_norm, c.head_dim) if attn.k_norm is not None else ffi.NULL
            # the shapes C sizes its buffers by (the loader checked them against the file; again here)
            q_dim, kv_dim, d = c.n_head * c.head_dim, c.n_head_kv * c.head_dim, c.n_embd
            if attn.wqkv is not None:
                projections = [(attn.wqkv, (q_dim + 2 * kv_dim, d))]
            else:
                projections = [(attn.wq, (q_dim, d)), (attn.wk, (kv_dim, d)), (attn.wv, (kv_dim, d))]
            spec.n_qkv = len(projections)
            for i, (lin, shape) in enumerate(projections):
                self._linear(spec.qkv[i], lin, shape)
            self._linear(spec.wo, attn.wo, (d, q_dim))
            if mlp.w_gate is None:
                gate_up = [(mlp.w_up, (2 * c.n_ff, d))]
            else:
                gate_up = [(mlp.w_gate, (c.n_ff, d)), (mlp.w_up, (c.n_ff, d))]
            spec.n_gate_up = len(gate_up)
            for i, (lin, shape) in enumerate(gate_up):
                self._linear(spec.gate_up[i], lin, shape)
            self._linear(spec.down, mlp.w_down, (d, c.n_ff))

    @classmethod
    def build(cls, model) -> "FusedLayers | None":
        """None unless every linear layer of the model runs on the C kernels."""
        from .. import kernels
        if not kernels.available():
            return None
        for layer in model.weights.layers:
            a, m = layer.attn, layer.mlp
            linears = [a.wqkv, a.wq, a.wk, a.wv, a.wo, m.w_gate, m.w_up, m.w_down]
            if not all(lin is None or isinstance(lin, KernelLinear) for lin in linears):
                return None
        return cls(model, kernels._ffi, kernels._lib)

    def _floats(self, a: np.ndarray, n: int):
        a = np.ascontiguousarray(a, dtype=np.float32)
        if a.shape != (n,):
            raise ValueError(f"fused layers: expected ({n},) floats, got {a.shape}")
        self._keep.append(a)
        return self.ffi.from_buffer("float[]", a)

    def _linear(self, spec, lin: KernelLinear, shape: tuple[int, int]) -> None:
        mat = lin.mat
        if mat.shape != shape:
            raise ValueError(f"fused layers: a {mat.shape} weight where {shape} belongs")
        spec.wtype, spec.w, spec.row_bytes = mat._wtype_id, mat._wbuf, mat.row_bytes
        spec.n_out, spec.k = mat.n_out, mat.k
        spec.bias = self._floats(lin.bias, mat.n_out) if lin.bias is not None else self.ffi.NULL

    @staticmethod
    def applies(batch) -> bool:
        """Every sequence over a plain f16 cache (sliding-window or other caches take the loop)."""
        return all(type(cache) is KVCache and cache.dtype == np.float16 and cache.k.flags.c_contiguous
                   and cache.v.flags.c_contiguous for cache in batch.caches)

    def run(self, x: np.ndarray, batch, inv_freq: np.ndarray, attn_scale: float, q_scale: float | None,
            rope_mscale: float, neox: bool) -> np.ndarray:
        """x (n, n_embd) after the embedding -> x after every layer; stores the batch's K/V."""
        c, ffi = self.config, self.ffi
        x = np.array(x, dtype=np.float32, order="C", copy=True)
        n = x.shape[0]
        pos = np.ascontiguousarray(batch.positions, dtype=np.int64)
        freq = np.ascontiguousarray(inv_freq, dtype=np.float64)
        if x.shape != (n, c.n_embd) or pos.shape != (n,) or 2 * freq.shape[0] > c.head_dim:
            raise ValueError("fused layers: the batch does not fit this model's shapes")
        seqs = ffi.new("li_kv_seq[]", len(batch.spans))
        for seq, span, cache in zip(seqs, batch.spans, batch.caches):
            m = span.stop - span.start
            expect = (c.n_layer, cache.n_ctx, c.n_head_kv, c.head_dim)
            if cache.k.shape != expect or cache.v.shape != expect or cache.offset + m > cache.n_ctx or \
                    not np.array_equal(pos[span], np.arange(cache.offset, cache.offset + m)):
                raise ValueError("fused layers: a sequence does not fit its cache")
            seq.k = ffi.from_buffer("char[]", cache.k, require_writable=True)
            seq.v = ffi.from_buffer("char[]", cache.v, require_writable=True)
            seq.n_ctx, seq.offset, seq.n_tokens = cache.n_ctx, cache.offset, m
        cfg = ffi.new("li_llama_config *", dict(
            n_embd=c.n_embd, n_head=c.n_head, n_head_kv=c.n_head_kv, head_dim=c.head_dim, n_ff=c.n_ff,
            n_rot=2 * freq.shape[0], eps=c.rms_eps, attn_scale=attn_scale, q_scale=q_scale or 0.0,
            rope_mscale=rope_mscale, neox=int(neox)))
        cfg.inv_freq = ffi.from_buffer("double[]", freq)
        rc = self.lib.li_llama_layers(cfg, self.layers, c.n_layer, ffi.from_buffer("float[]", x, require_writable=True),
                                      ffi.from_buffer("int64_t[]", pos), seqs, len(batch.spans))
        if rc == -3:
            raise MemoryError("fused layers: out of memory")
        if rc:
            raise ValueError(f"fused layers: the C call failed ({rc})")
        return x
