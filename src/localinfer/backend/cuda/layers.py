"""The first N decoder layers of a model on the CUDA device (llama.cpp's -ngl N), executed from the same
DecoderLayer data the CPU path runs (arch/layer.py): this module is a third executor of that data, beside
`run_layers` (numpy or C ops) and the fused C call, and knows no architecture.

    gpu = CudaLayers(runtime, gguf_file, n_layers)   # uploads those layers' matrices once
    x = gpu.run(x, batch, params)                    # (n_rows, n_embd) through layers 0..n_layers-1

Per layer and row, on the device: RMSNorm, the Q/K/V GEMVs (+ biases), per-head or whole Q/K norms,
RoPE, the row's K/V into the device cache, attention over positions 0..pos, the output GEMV, the
optional post-norm, the residual add, then the FFN the same way. Rows go in order, so a prefilling
sequence's later rows see the K/V of its earlier ones.

The KV cache. The host cache (kv/cache.py) stays the one every other part of localinfer reads and
writes: prefix reuse, forks, saved states. Each GPU layer's K/V rows are also copied there, and the
device holds a mirror of the host cache per cache object: `synced` positions known equal. A host cache
that was trimmed or reset (its offset below `synced`) needs nothing; one rewritten from outside (a
restored state, a fork: `generation` changed) or advanced by a path that did not run here is brought
up to date from the host before the pass. So the device never decides what the context holds.

Sliding-window layers (gemma3) keep every position on the device and attend to the window's; their host
cache is a ring, so a re-upload brings what the ring still holds, which is all a later query can see.
Not on the device yet, each refused by name: attention sinks (gpt-oss), mixtures of experts, a quantized
KV cache, scaled rope attention (rope_mscale). The output matrix goes to the device for -ngl above the layer
count, as in llama.cpp (offload_output); the token embedding stays on the CPU, as there.
"""
from __future__ import annotations

import dataclasses
import weakref
from dataclasses import dataclass

import numpy as np

from ...arch.blocks import Attention, GatedMLP
from ...arch.layer import DecoderLayer
from ...files.gguf_file import GGUFFile
from . import kernels as k
from .weights import DeviceMatrix, upload


@dataclass
class _DeviceLinear:
    """A Linear's matrices on the device: one (a file tensor) or several stacked (q ‖ k ‖ v)."""

    parts: list[DeviceMatrix]
    bias: object | None   # (n_out,) f32 on the device

    def __call__(self, x):
        """x (k,) -> y (n_out,) on the device (the parts' outputs joined in order)."""
        y = k.cuda.device_array(sum(p.n_out for p in self.parts), np.float32)
        at = 0
        for p in self.parts:
            k.gemv(p, x, out=y[at:at + p.n_out])
            at += p.n_out
        return y if self.bias is None else k.add(y, self.bias)


class CudaLayers:
    def __init__(self, runtime, f: GGUFFile, n_layers: int):
        """runtime: a DecoderModel; f: its GGUF file (the matrices are uploaded from the file's own
        bytes, never from a CPU layout such as a repacked copy); n_layers: how many layers, from the first."""
        c = self.config = runtime.config
        layers = runtime.weights.layers
        if not 1 <= n_layers <= len(layers):
            raise ValueError(f"n_layers {n_layers} outside 1..{len(layers)}")
        for i, layer in enumerate(layers[:n_layers]):
            _check(i, layer)
        self.n_layers = n_layers
        self.windows = [layer.window for layer in layers[:n_layers]]
        self.n_head, self.n_head_kv, self.head_dim = c.n_head, c.n_head_kv, c.head_dim
        self._layers = [self._upload(f, layer) for layer in layers[:n_layers]]
        self._mirrors: "weakref.WeakKeyDictionary[object, _Mirror]" = weakref.WeakKeyDictionary()

    # -- upload ---------------------------------------------------------------------------------
    def _upload(self, f: GGUFFile, layer: DecoderLayer) -> dict:
        vec = _vector
        a, m = layer.attn, layer.mlp
        return {
            "attn_norm": vec(layer.attn_norm), "ffn_norm": vec(layer.ffn_norm),
            "attn_post_norm": vec(layer.attn_post_norm), "ffn_post_norm": vec(layer.ffn_post_norm),
            "q_norm": vec(a.q_norm), "k_norm": vec(a.k_norm), "inv_freq": vec(layer.inv_freq),
            "qkv": _linear(f, a.wqkv) if a.wqkv is not None else None,
            "q": _linear(f, a.wq), "k": _linear(f, a.wk), "v": _linear(f, a.wv), "o": _linear(f, a.wo),
            "gate": _linear(f, m.w_gate), "up": _linear(f, m.w_up), "down": _linear(f, m.w_down),
            "n_ff": m.n_ff, "gelu": layer.act == "geglu",
        }

    def drop_host_copies(self, runtime, f: GGUFFile) -> int:
        """Frees the CPU's copies of the layers now on the device, as llama.cpp holds an offloaded layer
        once: mapped pages go back to the file (f.release), copies (stacked, repacked, dequantized) are
        dropped with their layers' attention and MLP. Returns the bytes of copies dropped."""
        dropped = 0
        for i, layer in enumerate(runtime.weights.layers[:self.n_layers]):
            a, m = layer.attn, layer.mlp
            for lin in (a.wq, a.wk, a.wv, a.wqkv, a.wo, m.w_gate, m.w_up, m.w_down):
                dropped += _drop_host(f, lin)
            runtime.weights.layers[i] = dataclasses.replace(layer, attn=None, mlp=None)   # only its window stays read
        return dropped

    # -- the pass -------------------------------------------------------------------------------
    def run(self, x: np.ndarray, batch, params) -> np.ndarray:
        """x (n_rows, n_embd) f32 after the embedding -> after layers 0..n_layers-1; every sequence's
        K/V of those layers stored in its host cache and the device mirror (the caller advances)."""
        if params.rope_mscale != 1.0:
            raise ValueError("the CUDA layers do not scale rope attention (rope_mscale) yet")
        cuda = k.cuda
        mirrors = [self._mirror(cache) for cache in batch.caches]
        rows = [cuda.to_device(np.ascontiguousarray(row, np.float32)) for row in x]
        seq_of = np.empty(batch.n_rows, np.int64)
        for i, s in enumerate(batch.spans):
            seq_of[s] = i
        positions = [cuda.to_device(np.array([p], np.int32)) for p in batch.positions]
        inv_freq = cuda.to_device(np.ascontiguousarray(params.inv_freq, np.float32))
        scale = params.attn_scale * (params.q_scale if params.q_scale is not None else 1.0)
        for li, L in enumerate(self._layers):
            kv_rows = np.empty((2, batch.n_rows, self.n_head_kv, self.head_dim), np.float32)
            for r in range(batch.n_rows):
                mirror, pos = mirrors[seq_of[r]], int(batch.positions[r])
                a, kk, vv = self._attention(L, rows[r], positions[r], inv_freq if L["inv_freq"] is None else L["inv_freq"],
                                            params.neox, mirror, li, pos, scale)
                kv_rows[0, r], kv_rows[1, r] = kk, vv
                h = k.add(rows[r], a)
                f = self._ffn(L, h)
                rows[r] = k.add(h, f)
            for i, s in enumerate(batch.spans):   # the host cache, the one everything else reads
                batch.caches[i].update_and_fetch(li, kv_rows[0, s], kv_rows[1, s])
        for mirror, s in zip(mirrors, batch.spans):
            mirror.synced = mirror.cache.offset + (s.stop - s.start)
        return np.stack([row.copy_to_host() for row in rows])

    def _attention(self, L, x, position, inv_freq, neox, mirror, li, pos, scale):
        c = self.config
        h = _norm(x, L["attn_norm"], c.rms_eps)
        q_dim, kv_dim = self.n_head * self.head_dim, self.n_head_kv * self.head_dim
        if L["qkv"] is not None:
            qkv = L["qkv"](h)
            q, kk, v = qkv[:q_dim], qkv[q_dim:q_dim + kv_dim], qkv[q_dim + kv_dim:]
        else:
            q, kk, v = L["q"](h), L["k"](h), L["v"](h)
        q = _head_norm(q, L["q_norm"], self.n_head, self.head_dim, c.rms_eps)
        kk = _head_norm(kk, L["k_norm"], self.n_head_kv, self.head_dim, c.rms_eps)
        q = k.rope(q.reshape(1, self.n_head, self.head_dim), position, inv_freq, neox)
        kk = k.rope(kk.reshape(1, self.n_head_kv, self.head_dim), position, inv_freq, neox)
        kk, v = kk.reshape(self.n_head_kv, self.head_dim), v.reshape(self.n_head_kv, self.head_dim)
        k.store_kv(kk, v, mirror.k[li], mirror.v[li], pos)
        window = self.windows[li]
        start = max(0, pos - window + 1) if window else 0
        a = k.attention(q.reshape(self.n_head, self.head_dim), mirror.k[li], mirror.v[li], pos + 1, scale, start)
        a = L["o"](a.reshape(q_dim))
        if L["attn_post_norm"] is not None:
            a = _norm(a, L["attn_post_norm"], c.rms_eps)
        return a, kk.copy_to_host(), v.copy_to_host()

    def _ffn(self, L, x):
        c = self.config
        h = _norm(x, L["ffn_norm"], c.rms_eps)
        if L["gate"] is not None:
            g, u = L["gate"](h), L["up"](h)
        else:
            gu = L["up"](h)
            g, u = gu[:L["n_ff"]], gu[L["n_ff"]:]
        f = L["down"](k.glu(g, u, L["gelu"]))
        if L["ffn_post_norm"] is not None:
            f = _norm(f, L["ffn_post_norm"], c.rms_eps)
        return f

    # -- the KV mirror --------------------------------------------------------------------------
    def _mirror(self, cache) -> "_Mirror":
        """The device copy of `cache`'s first n_layers layers, brought up to its host contents."""
        if cache.kv_types is not None:
            raise ValueError("the CUDA layers keep an f16/f32 KV cache, not quantized rows (cache_type_k/v)")
        m = self._mirrors.get(cache)
        if m is None:
            shape = (cache.n_ctx, self.n_head_kv, self.head_dim)
            m = _Mirror(cache, [k.cuda.device_array(shape, np.float16) for _ in range(self.n_layers)],
                        [k.cuda.device_array(shape, np.float16) for _ in range(self.n_layers)])
            self._mirrors[cache] = m
        generation = _generation(cache)
        if m.generation != generation:   # rewritten from outside: nothing on the device is known
            m.generation, m.synced = generation, 0
        m.synced = min(m.synced, cache.offset)   # trimmed or reset: the rest is still right
        if m.synced < cache.offset:
            for li in range(self.n_layers):
                a, keys, values = _host_kv(cache, li, m.synced, cache.offset)
                if a < cache.offset:
                    m.k[li][a:cache.offset].copy_to_device(np.ascontiguousarray(keys, np.float16))
                    m.v[li][a:cache.offset].copy_to_device(np.ascontiguousarray(values, np.float16))
            m.synced = cache.offset
        return m


class DeviceOutput:
    """The output matrix on the device (llama.cpp offloads it for -ngl above the layer count), called as the
    CPU's Linear is, so that each architecture's head (output norm, this matrix, any soft cap) stays as written:
    x (n, n_embd) -> (n, n_vocab)."""

    def __init__(self, f: GGUFFile, lin):
        self.names, self.shape, self._lin = lin.names, lin.shape, _linear(f, lin)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, np.float32)
        return np.stack([self._lin(k.cuda.to_device(row)).copy_to_host() for row in x])


def _drop_host(f: GGUFFile, lin) -> int:
    """Gives a Linear's mapped pages back to the file; the bytes of its copy outside the mapping (which go
    when the caller drops it)."""
    if lin is None:
        return 0
    if hasattr(lin, "mat"):   # the C kernels' matrix: a copy when its file pages were released
        dropped = lin.mat.data.nbytes if any(n in f.released for n in lin.names) else 0
    else:                     # numpy's: a copy unless a read-only view of the mapping
        dropped = lin.w.nbytes if lin.w.flags.writeable else 0
    for name in lin.names:
        if name in f.tensors and name not in f.released:
            f.release(name)
    return dropped


def offload_output(runtime, f: GGUFFile) -> int:
    """Puts runtime.weights.output on the device (a DeviceOutput in its place); returns the bytes of the CPU
    copy dropped."""
    lin = runtime.weights.output
    runtime.weights.output = DeviceOutput(f, lin)
    return _drop_host(f, lin)


@dataclass
class _Mirror:
    cache: object
    k: list   # per layer (n_ctx, n_head_kv, head_dim) f16 on the device
    v: list
    synced: int = 0   # positions [0, synced) equal the host cache's
    generation: int = -1


def _generation(cache) -> int:
    """Changes whenever any part of the cache was rewritten from outside (KVCache.rewritten)."""
    parts = (cache.full, cache.swa) if hasattr(cache, "route") else (cache,)
    return sum(part.generation for part in parts)


def _host_kv(cache, layer: int, a: int, b: int):
    """(first, keys, values): the host cache's K/V of model layer `layer` at positions first..b-1, where
    first is `a`, or later for a ring that no longer holds the older ones (a query from b on does not
    look that far back)."""
    part, index = cache.route[layer] if hasattr(cache, "route") else (cache, layer)
    if not hasattr(part, "n_slots"):
        return a, part.k[index, a:b], part.v[index, a:b]
    first = max(a, part.held_start)
    slots = np.arange(first, b) % part.n_slots
    return first, part.k[index, slots], part.v[index, slots]


def _check(i: int, layer: DecoderLayer) -> None:
    """A ValueError naming what layer i has that the CUDA layers do not run."""
    what = None
    if layer.sinks is not None:
        what = "attention sinks"
    elif not isinstance(layer.mlp, GatedMLP):
        what = "a mixture of experts"
    elif layer.act not in ("swiglu", "geglu"):
        what = f"the {layer.act} activation"
    elif not isinstance(layer.attn, Attention):
        what = "an attention block it does not know"
    if what:
        raise ValueError(f"layer {i} has {what}, which the CUDA path does not run yet")


def _vector(a):
    return None if a is None else k.cuda.to_device(np.ascontiguousarray(a, np.float32).reshape(-1))


def _linear(f: GGUFFile, lin) -> _DeviceLinear | None:
    if lin is None:
        return None
    names = [n for n in lin.names if n in f.tensors]
    if not names or len(names) != len(lin.names):
        raise ValueError(f"the CUDA path uploads matrices from the file, and {lin.names} are not all in it")
    parts = [upload(f.tensor_data(n), f.tensors[n].ggml_type, _rows_cols(f, n)) for n in names]
    return _DeviceLinear(parts, _vector(lin.bias))


def _rows_cols(f: GGUFFile, name: str) -> tuple[int, int]:
    info = f.tensors[name]
    shape = tuple(int(s) for s in info.shape)
    if len(shape) != 2:
        raise ValueError(f"{name}: a {len(shape)}-d matrix")
    return shape


def _norm(x, weight, eps):
    return k.rms_norm(x.reshape(1, x.shape[0]), weight, eps).reshape(x.shape[0])


def _head_norm(x, weight, heads: int, head_dim: int, eps):
    """x (heads*head_dim,): RMSNorm per head with a (head_dim,) weight, or of the whole with (heads*head_dim,)."""
    if weight is None:
        return x
    if weight.shape[0] == head_dim:
        return k.rms_norm(x.reshape(heads, head_dim), weight, eps).reshape(heads * head_dim)
    return _norm(x, weight, eps)
