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
from .gemm import add_bias, gemm
from .weights import DeviceMatrix, upload


@dataclass
class _DeviceLinear:
    """A Linear's matrix on the device as parts of its output rows (q | k | v, gate | up: a fused file tensor
    is split at upload, stacked ones stay apart), each with its part of the bias."""

    parts: list[DeviceMatrix]
    biases: list   # per part, (n_out_part,) f32 on the device, or None

    def __call__(self, x) -> list:
        """x (m, k) on the device -> one (m, n_out_part) array per part: the GEMV for one row (decode),
        the tiled GEMM for several (prefill)."""
        out = []
        for p, bias in zip(self.parts, self.biases):
            y = k.gemv(p, x.reshape(x.shape[1])).reshape(1, p.n_out) if x.shape[0] == 1 else gemm(p, x)
            if bias is not None:
                add_bias(y, bias)
            out.append(y)
        return out


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
        vec, c = _vector, self.config
        a, m = layer.attn, layer.mlp
        q_dim, kv_dim = c.n_head * c.head_dim, c.n_head_kv * c.head_dim
        return {
            "attn_norm": vec(layer.attn_norm), "ffn_norm": vec(layer.ffn_norm),
            "attn_post_norm": vec(layer.attn_post_norm), "ffn_post_norm": vec(layer.ffn_post_norm),
            "q_norm": vec(a.q_norm), "k_norm": vec(a.k_norm), "inv_freq": vec(layer.inv_freq),
            "qkv": (_linear(f, a.wqkv, [q_dim, kv_dim, kv_dim]) if a.wqkv is not None
                    else _joined([_linear(f, a.wq), _linear(f, a.wk), _linear(f, a.wv)])),
            "o": _linear(f, a.wo),
            "gate_up": (_linear(f, m.w_up, [m.n_ff, m.n_ff]) if m.w_gate is None
                        else _joined([_linear(f, m.w_gate), _linear(f, m.w_up)])),
            "down": _linear(f, m.w_down), "gelu": layer.act == "geglu",
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
        K/V of those layers stored in its host cache and the device mirror (the caller advances).
        The matmuls take all rows at once; RoPE too; each row's attention sees its own sequence."""
        if params.rope_mscale != 1.0:
            raise ValueError("the CUDA layers do not scale rope attention (rope_mscale) yet")
        cuda, c = k.cuda, self.config
        mirrors = [self._mirror(cache) for cache in batch.caches]
        seq_of = np.empty(batch.n_rows, np.int64)
        for i, s in enumerate(batch.spans):
            seq_of[s] = i
        rows = _Rows(batch, [mirrors[i] for i in seq_of])
        positions = cuda.to_device(np.ascontiguousarray(batch.positions, np.int32))
        inv_freq = cuda.to_device(np.ascontiguousarray(params.inv_freq, np.float32))
        scale = params.attn_scale * (params.q_scale if params.q_scale is not None else 1.0)
        h = cuda.to_device(np.ascontiguousarray(x, np.float32))   # (n_rows, n_embd)
        for li, L in enumerate(self._layers):
            own = L["inv_freq"] if L["inv_freq"] is not None else inv_freq
            a, kv = self._attention(L, h, positions, own, params.neox, rows, li, scale)
            for i, s in enumerate(batch.spans):   # the host cache, the one everything else reads
                batch.caches[i].update_and_fetch(li, kv[0, s], kv[1, s])
            h = _add2(h, a)
            h = _add2(h, self._ffn(L, h))
        for mirror, s in zip(mirrors, batch.spans):
            mirror.synced = mirror.cache.offset + (s.stop - s.start)
        return h.copy_to_host()

    def _attention(self, L, x, positions, inv_freq, neox, rows, li, scale):
        """x (n, n_embd) -> (the attention block's output (n, n_embd), the rows' K and V (2, n, kv_heads,
        head_dim) on the host)"""
        c, n = self.config, x.shape[0]
        hq, hkv, hd = self.n_head, self.n_head_kv, self.head_dim
        q, kk, v = L["qkv"](k.rms_norm(x, L["attn_norm"], c.rms_eps))
        q = _head_norm(q, L["q_norm"], n, hq, hd, c.rms_eps).reshape(n, hq, hd)
        kk = _head_norm(kk, L["k_norm"], n, hkv, hd, c.rms_eps).reshape(n, hkv, hd)
        v = v.reshape(n, hkv, hd)
        k.rope(q, positions, inv_freq, neox)
        k.rope(kk, positions, inv_freq, neox)
        out = k.cuda.device_array((n, hq * hd), np.float32)
        window = self.windows[li]
        for r in range(n):   # in order: a prefilling row sees the K/V of the rows before it
            mirror, pos = rows.mirrors[r], int(rows.batch.positions[r])
            k.store_kv(kk[r], v[r], mirror.k[li], mirror.v[li], pos)
            start = max(0, pos - window + 1) if window else 0
            a = k.attention(q[r], mirror.k[li], mirror.v[li], pos + 1, scale, start)
            out[r].copy_to_device(a.reshape(hq * hd))
        (o,) = L["o"](out)
        if L["attn_post_norm"] is not None:
            o = k.rms_norm(o, L["attn_post_norm"], c.rms_eps)
        return o, np.stack([kk.copy_to_host(), v.copy_to_host()])

    def _ffn(self, L, x):
        c = self.config
        g, u = L["gate_up"](k.rms_norm(x, L["ffn_norm"], c.rms_eps))
        act = k.glu(g.reshape(g.size), u.reshape(u.size), L["gelu"]).reshape(g.shape)
        (f,) = L["down"](act)
        if L["ffn_post_norm"] is not None:
            f = k.rms_norm(f, L["ffn_post_norm"], c.rms_eps)
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
        (y,) = self._lin(k.cuda.to_device(np.ascontiguousarray(x, np.float32)))
        return y.copy_to_host()


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


def _linear(f: GGUFFile, lin, split: list[int] | None = None) -> _DeviceLinear | None:
    """lin's matrices uploaded from the file; `split`: one file tensor's rows cut into parts of these sizes."""
    if lin is None:
        return None
    names = [n for n in lin.names if n in f.tensors]
    if not names or len(names) != len(lin.names):
        raise ValueError(f"the CUDA path uploads matrices from the file, and {lin.names} are not all in it")
    pieces = []   # (raw rows, type, n_out, k)
    for n in names:
        raw, (n_out, width) = f.tensor_data(n), _rows_cols(f, n)
        sizes = split if split and len(names) == 1 else [n_out]
        if sum(sizes) != n_out:
            raise ValueError(f"{n}: {n_out} rows, not the {sizes} expected")
        at = 0
        for size in sizes:
            pieces.append((raw[at:at + size], f.tensors[n].ggml_type, size, width))
            at += size
    bias = None if lin.bias is None else np.asarray(lin.bias, np.float32).reshape(-1)
    parts, biases, at = [], [], 0
    for raw, qtype, n_out, width in pieces:
        parts.append(upload(raw, qtype, (n_out, width)))
        biases.append(None if bias is None else _vector(bias[at:at + n_out]))
        at += n_out
    return _DeviceLinear(parts, biases)


def _joined(linears: list[_DeviceLinear]) -> _DeviceLinear:
    """Separate file tensors (attn_q, attn_k, attn_v) as the parts of one."""
    return _DeviceLinear([p for lin in linears for p in lin.parts], [b for lin in linears for b in lin.biases])


@dataclass
class _Rows:
    batch: object
    mirrors: list   # each row's sequence's device mirror


def _add2(a, b):
    """a + b for two (n, d) f32 device arrays"""
    return k.add(a.reshape(a.size), b.reshape(b.size)).reshape(a.shape)


def _rows_cols(f: GGUFFile, name: str) -> tuple[int, int]:
    info = f.tensors[name]
    shape = tuple(int(s) for s in info.shape)
    if len(shape) != 2:
        raise ValueError(f"{name}: a {len(shape)}-d matrix")
    return shape


def _head_norm(x, weight, n: int, heads: int, head_dim: int, eps):
    """x (n, heads*head_dim): RMSNorm per head with a (head_dim,) weight, or of each row's heads together with a
    (heads*head_dim,) one (olmoe)"""
    if weight is None:
        return x
    if weight.shape[0] == head_dim:
        return k.rms_norm(x.reshape(n * heads, head_dim), weight, eps).reshape(n, heads * head_dim)
    return k.rms_norm(x, weight, eps)
