"""A llama-family model (llama, mistral: no biases, RMSNorm, rotary, SwiGLU) on the CUDA path: the
weights uploaded once, the KV cache in device memory (F16), one token per forward pass. Prefill is
that pass token by token for now; a batched prefill GEMM is still to come.

    m = CudaLlama(model)          # a loaded localinfer Model of a llama-family file
    logits = m.forward(token)     # (n_vocab,) float32 on the host, for the next position
"""
from __future__ import annotations

import numpy as np

from ...arch.llama import LlamaModel
from ..ops_reference import rope_freqs
from . import kernels as k
from .device import check_available
from .weights import upload


class CudaLlama:
    def __init__(self, model, n_ctx: int | None = None):
        check_available()
        runtime = model.runtime
        if type(runtime) is not LlamaModel and getattr(runtime, "arch", None) != "llama":
            raise ValueError(f"the CUDA path runs llama-family models so far, not {model.architecture}")
        c = self.config = runtime.config
        if c.n_expert or c.rope_scaling != "none":
            raise ValueError("the CUDA path does not run mixtures of experts or scaled rope yet")
        f = model.gguf
        self.n_ctx = int(n_ctx or min(model.n_ctx, c.n_ctx_train))
        cuda = k.cuda

        def matrix(name):
            info = f.tensors[name]
            return upload(f.tensor_data(name), info.ggml_type, info.shape)

        def vector(name):
            return cuda.to_device(np.ascontiguousarray(f.tensor_data(name), np.float32))

        for name in f.tensors:
            if name.endswith(".bias") or "attn_q_norm" in name or "rope_freqs" in name:
                raise ValueError(f"the CUDA path does not run {name} yet")
        self.embd = f.tensor_data("token_embd.weight")
        self.embd_type, self.embd_shape = f.tensors["token_embd.weight"].ggml_type, f.tensors["token_embd.weight"].shape
        self.layers = []
        for i in range(c.n_layer):
            p = f"blk.{i}."
            self.layers.append({name: matrix(p + name + ".weight") for name in
                                ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")})
            self.layers[-1].update(attn_norm=vector(p + "attn_norm.weight"), ffn_norm=vector(p + "ffn_norm.weight"))
        self.output_norm = vector("output_norm.weight")
        self.output = matrix("output.weight" if "output.weight" in f.tensors else "token_embd.weight")
        self.inv_freq = cuda.to_device(rope_freqs(c.head_dim, c.rope_base, c.n_rot).astype(np.float32))
        shape = (self.n_ctx, c.n_head_kv, c.head_dim)
        self.k_cache = [cuda.device_array(shape, np.float16) for _ in range(c.n_layer)]
        self.v_cache = [cuda.device_array(shape, np.float16) for _ in range(c.n_layer)]
        self.n_past = 0

    def reset(self) -> None:
        self.n_past = 0

    def _embed(self, token: int) -> np.ndarray:
        from ...formats import dequantize
        if not 0 <= token < self.config.n_vocab:
            raise ValueError(f"unknown token id {token} (the vocabulary has {self.config.n_vocab} tokens)")
        row = self.embd[token:token + 1]
        return dequantize(row, self.embd_type, (1, self.embd_shape[1])).reshape(-1).astype(np.float32)

    def forward(self, token: int) -> np.ndarray:
        """The logits after `token` at the next position; the token's K/V stay in the cache."""
        c, cuda = self.config, k.cuda
        if self.n_past >= self.n_ctx:
            raise ValueError(f"the context is full ({self.n_ctx} tokens)")
        pos = self.n_past
        positions = cuda.to_device(np.array([pos], np.int32))
        x = cuda.to_device(self._embed(token))
        for i, L in enumerate(self.layers):
            h = k.rms_norm(x.reshape(1, c.n_embd), L["attn_norm"], c.rms_eps).reshape(c.n_embd)
            q = k.gemv(L["attn_q"], h).reshape(1, c.n_head, c.head_dim)
            kk = k.gemv(L["attn_k"], h).reshape(1, c.n_head_kv, c.head_dim)
            v = k.gemv(L["attn_v"], h).reshape(c.n_head_kv, c.head_dim)
            k.rope(q, positions, self.inv_freq, neox=False)
            k.rope(kk, positions, self.inv_freq, neox=False)
            k.store_kv(kk.reshape(c.n_head_kv, c.head_dim), v, self.k_cache[i], self.v_cache[i], pos)
            a = k.attention(q.reshape(c.n_head, c.head_dim), self.k_cache[i], self.v_cache[i], pos + 1,
                            c.head_dim ** -0.5)
            x = k.add(x, k.gemv(L["attn_output"], a.reshape(c.n_head * c.head_dim)))
            h = k.rms_norm(x.reshape(1, c.n_embd), L["ffn_norm"], c.rms_eps).reshape(c.n_embd)
            g = k.glu(k.gemv(L["ffn_gate"], h), k.gemv(L["ffn_up"], h), gelu=False)
            x = k.add(x, k.gemv(L["ffn_down"], g))
        h = k.rms_norm(x.reshape(1, c.n_embd), self.output_norm, c.rms_eps).reshape(c.n_embd)
        self.n_past += 1
        return k.gemv(self.output, h).copy_to_host()
