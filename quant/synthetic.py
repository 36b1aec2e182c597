"""Random-weight GGUF files with the shapes of real models, for speed measurements without a hub.

    path = synthetic_model("llama-8b", "Q4_K_M")   # cached; F16 written first, then quantized

A synthetic file has a real model's hyper-parameters and every one of its matrices at the real
shape (output layer included), llama.cpp's metadata keys and tensor names, and a real tokenizer
(the catalog's SmolLM2 BPE): llama.cpp's tools load the same file, so `bench --compare-llama-bench`
measures both runtimes on it. The weights are random, so the text is noise; the speed is real.

Why the vocabulary is padded: SmolLM2's tokenizer has 49152 tokens, Llama 3's 128256 and Qwen2's
embedding 152064 rows. The token list is padded to the real size with `[PAD{i}]` tokens of type
UNUSED (what llama.cpp's convert_hf_to_gguf.py writes for Qwen2's own unused rows), so the token
embedding and the output matmul have the real cost. UNUSED tokens are never produced by tokenizing
and render as nothing; CONTROL would make ~80k special tokens that every tokenization scans.

Weights: `normal * 0.02` per matrix from `numpy.random.default_rng([seed, tensor index])`, norms
ones, so activations stay finite (residual RMS grows like sqrt(layers), far from F16's range).
The F16 file is written tensor by tensor, a slab of rows at a time (memory stays bounded: the 8B
F16 file is 16 GB), through `AtomicFile`; other types come from it through `quantize_file`, as
`localinfer quantize` would make them. Files are cached under `<cache>/synthetic/`, keyed by
shape, type, seed and FORMAT_VERSION (raise it whenever the bytes written for a key change:
weights, metadata, or the tokenizer source).
"""
from __future__ import annotations

import shutil
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import TokenType
from gguf.constants import GGUFValueType as V

from .convert_hf import llama3_rope_factors
from localinfer.formats.registry import row_nbytes
from .gguf_out import AtomicFile, TensorEntry, data_size, encode_header, encode_string
from .mixes import ModelShape, plan_tensor_types
from .quantizers import quantize
from .synthetic_types import synthetic_file_type

FORMAT_VERSION = 1
ALIGNMENT = 32  # GGUF's default general.alignment
WEIGHT_SCALE = 0.02
SLAB_ELEMENTS = 1 << 22  # random values generated per step; part of the bytes a seed gives
TOKENIZER_MODEL = "smollm2"  # the catalog model whose tokenizer is embedded
MOSTLY_F16 = 1  # llama_ftype LLAMA_FTYPE_MOSTLY_F16


class SyntheticError(ValueError):
    """A synthetic model cannot be made as asked; the message says why."""


# Llama 3.1 / 3.2 config.json "rope_scaling" ("llama3"): stored as the rope_freqs.weight tensor.
_LLAMA31_ROPE = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                 "original_max_position_embeddings": 8192}
_LLAMA32_ROPE = dict(_LLAMA31_ROPE, factor=32.0)


@dataclass(frozen=True)
class Shape:
    """A model's blueprint: what its public config.json says (hidden size, layers, heads ...)."""
    name: str
    source: str  # the real model the numbers come from
    arch: str  # GGUF general.architecture: "llama", "qwen2", "qwen3moe", "qwen2moe", "olmoe" or "gpt-oss"
    size_label: str
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_vocab: int
    rope_theta: float
    n_ctx_train: int
    rms_eps: float
    tied: bool  # output.weight is token_embd.weight (no separate tensor)
    qkv_bias: bool = False  # qwen2: attn_q/k/v have biases
    llama3_rope: dict = field(default_factory=dict)  # "llama3" rope scaling, empty for none
    head_dim_override: int = 0  # config.json's head_dim where it is not n_embd / n_head (Qwen3)
    n_expert: int = 0  # routed experts per layer (qwen3moe); 0: a dense MLP of width n_ff
    n_expert_used: int = 0
    n_ff_exp: int = 0  # an expert's hidden width (moe_intermediate_size)
    n_ff_shexp: int = 0  # qwen2moe's shared expert's width (shared_expert_intermediate_size); 0: none
    sliding_window: int = 0  # gpt-oss: the even layers' window (attention.sliding_window)

    @property
    def head_dim(self) -> int:
        return self.head_dim_override or self.n_embd // self.n_head


SHAPES = {s.name: s for s in [
    Shape("llama-1b", "Llama-3.2-1B", "llama", "1B", n_embd=2048, n_layer=16, n_head=32, n_head_kv=8, n_ff=8192,
          n_vocab=128256, rope_theta=500000.0, n_ctx_train=131072, rms_eps=1e-5, tied=True, llama3_rope=_LLAMA32_ROPE),
    Shape("llama-3b", "Llama-3.2-3B", "llama", "3B", n_embd=3072, n_layer=28, n_head=24, n_head_kv=8, n_ff=8192,
          n_vocab=128256, rope_theta=500000.0, n_ctx_train=131072, rms_eps=1e-5, tied=True, llama3_rope=_LLAMA32_ROPE),
    Shape("llama-8b", "Llama-3.1-8B", "llama", "8B", n_embd=4096, n_layer=32, n_head=32, n_head_kv=8, n_ff=14336,
          n_vocab=128256, rope_theta=500000.0, n_ctx_train=131072, rms_eps=1e-5, tied=False, llama3_rope=_LLAMA31_ROPE),
    Shape("qwen2-7b", "Qwen2-7B", "qwen2", "7B", n_embd=3584, n_layer=28, n_head=28, n_head_kv=4, n_ff=18944,
          n_vocab=152064, rope_theta=1e6, n_ctx_train=131072, rms_eps=1e-6, tied=False, qkv_bias=True),
    # Qwen3-30B-A3B's config.json: 128 experts of width 768, 8 per token, head_dim 128 (not 2048 / 32);
    # intermediate_size 6144 is written as feed_forward_length but sizes no tensor
    Shape("qwen3moe-30b-a3b", "Qwen3-30B-A3B", "qwen3moe", "30B.A3B", n_embd=2048, n_layer=48, n_head=32,
          n_head_kv=4, n_ff=6144, n_vocab=151936, rope_theta=1e6, n_ctx_train=40960, rms_eps=1e-6, tied=False,
          head_dim_override=128, n_expert=128, n_expert_used=8, n_ff_exp=768),
    # The same with 8 of its 48 layers (3.4 GB): a file that stays in a small machine's page cache, so
    # that decode measures memory bandwidth, not the disk (the whole model's 18.6 GB may not fit)
    Shape("qwen3moe-30b-a3b-8l", "Qwen3-30B-A3B, 8 of 48 layers", "qwen3moe", "30B.A3B-8L", n_embd=2048,
          n_layer=8, n_head=32, n_head_kv=4, n_ff=6144, n_vocab=151936, rope_theta=1e6, n_ctx_train=40960,
          rms_eps=1e-6, tied=False, head_dim_override=128, n_expert=128, n_expert_used=8, n_ff_exp=768),
    # Small expert models for measuring the layer stack itself (C against the Python loop): Qwen1.5-MoE-A2.7B's
    # and OLMoE-1B-7B's layouts (a shared expert beside the routed ones; whole-projection Q/K norms) at a
    # quarter of their width and a few layers, so a decode step is dominated by the per-layer work, not the disk
    Shape("qwen2moe-small", "Qwen1.5-MoE-A2.7B's layout, scaled down", "qwen2moe", "small", n_embd=512, n_layer=4,
          n_head=8, n_head_kv=8, n_ff=1408, n_vocab=49152 + 256, rope_theta=1e6, n_ctx_train=8192, rms_eps=1e-6,
          tied=True, qkv_bias=True, n_expert=16, n_expert_used=4, n_ff_exp=352, n_ff_shexp=1408),
    Shape("olmoe-small", "OLMoE-1B-7B's layout, scaled down", "olmoe", "small", n_embd=512, n_layer=4, n_head=8,
          n_head_kv=8, n_ff=256, n_vocab=49152 + 256, rope_theta=10000.0, n_ctx_train=4096, rms_eps=1e-5,
          tied=True, n_expert=16, n_expert_used=4, n_ff_exp=256),
    # gpt-oss-20b's layout (sinks, biases everywhere, a 128-token window on the even layers) at about a quarter
    # of its width, 8 of its 32 experts and 4 of its 24 layers
    Shape("gptoss-small", "gpt-oss-20b's layout, scaled down", "gpt-oss", "small", n_embd=768, n_layer=4, n_head=16,
          n_head_kv=2, n_ff=768, n_vocab=49152 + 256, rope_theta=150000.0, n_ctx_train=4096, rms_eps=1e-5,
          tied=True, qkv_bias=True, head_dim_override=64, n_expert=8, n_expert_used=4, n_ff_exp=768,
          sliding_window=128),
    # For tests: tiny, but every code path of the real ones (GQA, padded vocab, biases, rope factors).
    Shape("tiny", "test shape", "llama", "tiny", n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=128,
          n_vocab=49152 + 256, rope_theta=500000.0, n_ctx_train=2048, rms_eps=1e-5, tied=True,
          llama3_rope=dict(_LLAMA32_ROPE, original_max_position_embeddings=256)),
    Shape("tiny-qwen2", "test shape", "qwen2", "tiny", n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=128,
          n_vocab=49152 + 256, rope_theta=1e6, n_ctx_train=2048, rms_eps=1e-6, tied=False, qkv_bias=True),
    Shape("tiny-qwen3moe", "test shape", "qwen3moe", "tiny", n_embd=256, n_layer=2, n_head=4, n_head_kv=2, n_ff=512,
          n_vocab=49152 + 256, rope_theta=1e6, n_ctx_train=2048, rms_eps=1e-6, tied=False,
          head_dim_override=64, n_expert=8, n_expert_used=2, n_ff_exp=256),
    Shape("tiny-qwen2moe", "test shape", "qwen2moe", "tiny", n_embd=256, n_layer=2, n_head=4, n_head_kv=2, n_ff=512,
          n_vocab=49152 + 256, rope_theta=1e6, n_ctx_train=2048, rms_eps=1e-6, tied=False, qkv_bias=True,
          n_expert=8, n_expert_used=2, n_ff_exp=256, n_ff_shexp=512),
    Shape("tiny-olmoe", "test shape", "olmoe", "tiny", n_embd=256, n_layer=2, n_head=4, n_head_kv=4, n_ff=256,
          n_vocab=49152 + 256, rope_theta=10000.0, n_ctx_train=2048, rms_eps=1e-5, tied=False,
          n_expert=8, n_expert_used=2, n_ff_exp=256),
]}


def get_shape(name: str) -> Shape:
    if name not in SHAPES:
        raise SyntheticError(f"unknown synthetic shape {name!r}; known: {', '.join(SHAPES)}")
    return SHAPES[name]


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]  # numpy order: shape[-1] is the row length
    init: str  # "normal" (weights, biases), "ones" (norms) or "rope_freqs"
    f32: bool = False  # kept F32 although a matrix: the router, as llama.cpp's converter keeps it

    @property
    def ggml_type(self) -> T:
        # 1-D tensors stay F32, as converters write them
        return T.F16 if len(self.shape) >= 2 and not self.f32 else T.F32

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.shape))


def tensor_specs(s: Shape) -> list[TensorSpec]:
    """Every tensor of the model, in file order, with llama.cpp's names."""
    q, kv = s.n_head * s.head_dim, s.n_head_kv * s.head_dim
    out = []
    if s.llama3_rope:
        out.append(TensorSpec("rope_freqs.weight", (s.head_dim // 2,), "rope_freqs"))
    out.append(TensorSpec("token_embd.weight", (s.n_vocab, s.n_embd), "normal"))  # (vocab, embd)
    for i in range(s.n_layer):
        p = f"blk.{i}."
        out.append(TensorSpec(p + "attn_norm.weight", (s.n_embd,), "ones"))
        for w, rows in (("attn_q", q), ("attn_k", kv), ("attn_v", kv)):
            out.append(TensorSpec(p + w + ".weight", (rows, s.n_embd), "normal"))  # (heads*head_dim, embd)
            if s.qkv_bias:
                out.append(TensorSpec(p + w + ".bias", (rows,), "normal"))
        out.append(TensorSpec(p + "attn_output.weight", (s.n_embd, q), "normal"))
        if s.arch == "gpt-oss":  # the output's bias and a sink logit per head
            out += [TensorSpec(p + "attn_output.bias", (s.n_embd,), "normal"),
                    TensorSpec(p + "attn_sinks.weight", (s.n_head,), "normal")]
        if s.arch == "qwen3moe":  # qwen3's per-head Q/K norms
            out += [TensorSpec(p + "attn_q_norm.weight", (s.head_dim,), "ones"),
                    TensorSpec(p + "attn_k_norm.weight", (s.head_dim,), "ones")]
        if s.arch == "olmoe":  # norms of the whole Q and K projections
            out += [TensorSpec(p + "attn_q_norm.weight", (q,), "ones"),
                    TensorSpec(p + "attn_k_norm.weight", (kv,), "ones")]
        out.append(TensorSpec(p + ("post_attention_norm" if s.arch == "gpt-oss" else "ffn_norm") + ".weight",
                              (s.n_embd,), "ones"))
        if s.n_expert:
            e, f = s.n_expert, s.n_ff_exp
            out += [TensorSpec(p + "ffn_gate_inp.weight", (e, s.n_embd), "normal", f32=True),  # (expert, embd)
                    TensorSpec(p + "ffn_gate_exps.weight", (e, f, s.n_embd), "normal"),  # (expert, ff_exp, embd)
                    TensorSpec(p + "ffn_up_exps.weight", (e, f, s.n_embd), "normal"),  # (expert, ff_exp, embd)
                    TensorSpec(p + "ffn_down_exps.weight", (e, s.n_embd, f), "normal")]  # (expert, embd, ff_exp)
            if s.arch == "gpt-oss":  # biases on the router and on every expert matrix
                out += [TensorSpec(p + "ffn_gate_inp.bias", (e,), "normal"),  # (expert)
                        TensorSpec(p + "ffn_gate_exps.bias", (e, f), "normal", f32=True),  # (expert, ff_exp)
                        TensorSpec(p + "ffn_up_exps.bias", (e, f), "normal", f32=True),  # (expert, ff_exp)
                        TensorSpec(p + "ffn_down_exps.bias", (e, s.n_embd), "normal", f32=True)]  # (expert, embd)
            if s.n_ff_shexp:  # the shared expert and its sigmoid gate vector
                fs = s.n_ff_shexp
                out += [TensorSpec(p + "ffn_gate_inp_shexp.weight", (s.n_embd,), "normal"),  # (embd)
                        TensorSpec(p + "ffn_gate_shexp.weight", (fs, s.n_embd), "normal"),  # (ff_shexp, embd)
                        TensorSpec(p + "ffn_up_shexp.weight", (fs, s.n_embd), "normal"),  # (ff_shexp, embd)
                        TensorSpec(p + "ffn_down_shexp.weight", (s.n_embd, fs), "normal")]  # (embd, ff_shexp)
        else:
            out += [TensorSpec(p + "ffn_gate.weight", (s.n_ff, s.n_embd), "normal"),  # (ff, embd)
                    TensorSpec(p + "ffn_up.weight", (s.n_ff, s.n_embd), "normal"),  # (ff, embd)
                    TensorSpec(p + "ffn_down.weight", (s.n_embd, s.n_ff), "normal")]  # (embd, ff)
    out.append(TensorSpec("output_norm.weight", (s.n_embd,), "ones"))
    if not s.tied:
        out.append(TensorSpec("output.weight", (s.n_vocab, s.n_embd), "normal"))  # (vocab, embd)
    return out


def n_params(s: Shape) -> int:
    """Parameters as Hugging Face counts them (rope_freqs is a computed buffer, not a parameter)."""
    return sum(t.n_elements for t in tensor_specs(s) if t.init != "rope_freqs")


# --- metadata -------------------------------------------------------------------------------

def _kv(key: str, vtype: V, value) -> bytes:
    return encode_string(key) + struct.pack("<I", vtype) + _value(vtype, value)


_SCALARS = {V.UINT32: "<I", V.INT32: "<i", V.FLOAT32: "<f", V.BOOL: "<?"}


def _value(vtype: V, value) -> bytes:
    if vtype == V.STRING:
        return encode_string(value)
    return struct.pack(_SCALARS[vtype], value)


def _kv_array(key: str, item: V, values: list) -> bytes:
    head = encode_string(key) + struct.pack("<IIQ", V.ARRAY, item, len(values))
    if item == V.STRING:
        return head + b"".join(encode_string(v) for v in values)
    return head + np.asarray(values, dtype=_SCALARS[item]).tobytes()


def metadata_entries(s: Shape, seed: int, tokenizer_gguf, file_type: int = MOSTLY_F16) -> list[bytes]:
    """general.*, the {arch}.* hyper-parameters, and the tokenizer of `tokenizer_gguf` (a
    GGUFFile) with its token list padded to the shape's vocabulary size."""
    meta = tokenizer_gguf.metadata
    tokens, types = list(meta["tokenizer.ggml.tokens"]), list(meta["tokenizer.ggml.token_type"])
    if len(tokens) > s.n_vocab:
        raise SyntheticError(f"the tokenizer has {len(tokens)} tokens, more than {s.name}'s vocabulary "
                             f"({s.n_vocab})")
    pad = range(len(tokens), s.n_vocab)
    tokens += [f"[PAD{i}]" for i in pad]  # llama.cpp's convert_hf_to_gguf.py names unused rows so
    types += [int(TokenType.UNUSED)] * len(pad)

    a = s.arch
    entries = [
        _kv("general.architecture", V.STRING, a),
        _kv("general.type", V.STRING, "model"),
        _kv("general.name", V.STRING, f"synthetic {s.name}"),
        _kv("general.description", V.STRING, f"{s.source}'s shape with random weights (seed {seed}) and "
                                             f"{TOKENIZER_MODEL}'s tokenizer: the text is noise, the speed is real"),
        _kv("general.size_label", V.STRING, s.size_label),
        _kv(f"{a}.context_length", V.UINT32, s.n_ctx_train),
        _kv(f"{a}.embedding_length", V.UINT32, s.n_embd),
        _kv(f"{a}.block_count", V.UINT32, s.n_layer),
        _kv(f"{a}.feed_forward_length", V.UINT32, s.n_ff),
        _kv(f"{a}.attention.head_count", V.UINT32, s.n_head),
        _kv(f"{a}.attention.head_count_kv", V.UINT32, s.n_head_kv),
        _kv(f"{a}.rope.freq_base", V.FLOAT32, s.rope_theta),
        _kv(f"{a}.attention.layer_norm_rms_epsilon", V.FLOAT32, s.rms_eps),
        _kv(f"{a}.rope.dimension_count", V.UINT32, s.head_dim),
        # only where head_dim is not n_embd / n_head: the dense shapes' bytes stay those of FORMAT_VERSION 1
        *([_kv(f"{a}.attention.key_length", V.UINT32, s.head_dim),
           _kv(f"{a}.attention.value_length", V.UINT32, s.head_dim)] if s.head_dim_override else []),
        _kv(f"{a}.vocab_size", V.UINT32, s.n_vocab),
        *([_kv(f"{a}.expert_count", V.UINT32, s.n_expert),
           _kv(f"{a}.expert_used_count", V.UINT32, s.n_expert_used),
           _kv(f"{a}.expert_feed_forward_length", V.UINT32, s.n_ff_exp)] if s.n_expert else []),
        *([_kv(f"{a}.expert_shared_feed_forward_length", V.UINT32, s.n_ff_shexp)] if s.n_ff_shexp else []),
        *([_kv(f"{a}.attention.sliding_window", V.UINT32, s.sliding_window)] if s.sliding_window else []),
        _kv("general.file_type", V.UINT32, file_type),
        _kv("general.quantization_version", V.UINT32, 2),
        _kv_array("tokenizer.ggml.tokens", V.STRING, tokens),
        _kv_array("tokenizer.ggml.token_type", V.INT32, types),
    ]
    # the rest of the tokenizer (model, pre, merges, special ids, chat template) verbatim
    entries += [tokenizer_gguf.raw_bytes(*span) for key, span in tokenizer_gguf.metadata_spans.items()
                if key.startswith("tokenizer.") and key not in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type")]
    return entries


# --- weights --------------------------------------------------------------------------------

def _tensor_slabs(s: Shape, spec: TensorSpec, index: int, seed: int):
    """The tensor's bytes as written, a slab of rows at a time."""
    if spec.init == "ones":
        yield np.ones(spec.shape, np.float32).tobytes()
        return
    if spec.init == "rope_freqs":
        yield llama3_rope_factors(s.head_dim, dict(s.llama3_rope, rope_theta=s.rope_theta)).tobytes()
        return
    rng = np.random.default_rng([seed, index])  # one stream per tensor: any tensor is reproducible alone
    if spec.ggml_type == T.F32:
        yield (rng.standard_normal(spec.shape, dtype=np.float32) * WEIGHT_SCALE).tobytes()
        return
    n_cols = spec.shape[-1]
    n_rows = spec.n_elements // n_cols  # a 3-D expert tensor: its experts' rows one after another
    step = max(1, SLAB_ELEMENTS // n_cols)
    for r in range(0, n_rows, step):
        x = rng.standard_normal((min(step, n_rows - r), n_cols), dtype=np.float32)
        x *= WEIGHT_SCALE
        yield x.astype(np.float16).tobytes()


def write_f16(s: Shape, path: str | Path, seed: int = 0, tokenizer_path: str | Path | None = None,
              progress: Callable[[int, int], None] | None = None) -> Path:
    """Write the F16 file of shape `s` at `path` (atomically), streamed tensor by tensor."""
    from localinfer.files.gguf_file import GGUFFile

    path = Path(path)
    if tokenizer_path is None:
        from localinfer.files.fetch import resolve_model
        tokenizer_path = resolve_model(TOKENIZER_MODEL)
    specs = tensor_specs(s)
    entries = [TensorEntry(t.name, t.ggml_type, t.shape, t.n_elements * (2 if t.ggml_type == T.F16 else 4))
               for t in specs]
    with GGUFFile(tokenizer_path) as tok:
        header, _ = encode_header(metadata_entries(s, seed, tok), entries, ALIGNMENT)
    total = len(header) + data_size(entries, ALIGNMENT)
    free = shutil.disk_usage(path.parent).free
    if total > free:
        raise SyntheticError(f"not enough disk space for {path}: it needs {total / 2**30:.2f} GiB, "
                             f"{free / 2**30:.2f} GiB are free")
    with AtomicFile(path) as out:
        out.write(header)
        for i, spec in enumerate(specs):
            for chunk in _tensor_slabs(s, spec, i, seed):
                out.write(chunk)
                if progress:
                    progress(out.written, total)
            out.pad_to(ALIGNMENT)
    return path


# --- the cache ------------------------------------------------------------------------------

def cache_path(shape: str, ftype: str = "F16", seed: int = 0) -> Path:
    from localinfer.files.fetch import cache_dir
    return cache_dir() / "synthetic" / f"{shape}-{ftype.upper()}-seed{seed}-v{FORMAT_VERSION}.gguf"


def parse_spec(spec: str) -> tuple[Shape, list[str]]:
    """"SHAPE[:TYPE[,TYPE...]]" -> (shape, file types); the type defaults to Q4_0 (llama-bench's usual).
    A type is llama-quantize's file type of that name or a pure one of synthetic_types (MXFP4)."""
    name, _, types = spec.partition(":")
    shape = get_shape(name.strip())
    ftypes = [t.strip().upper() for t in types.split(",") if t.strip()] or ["Q4_0"]
    for t in ftypes:
        synthetic_file_type(t)  # UnsupportedQuantType naming the type
    return shape, ftypes


def synthetic_model(shape: str | Shape, ftype: str = "F16", seed: int = 0, *, tokenizer_path=None,
                    log: Callable[[str], None] = lambda msg: None,
                    progress: Callable[[str], Callable[[int, int], None] | None] = lambda what: None) -> Path:
    """The cached file of `shape` in llama.cpp file type `ftype` (F16, Q8_0, Q4_0, Q4_K_M ...),
    written first if absent: F16 from the seed, any other type quantized from the cached F16 --
    except for shapes with experts and the pure types (MXFP4: no llama-quantize mix gives a dense
    shape MXFP4 matrices), whose files write_quantized (below) writes directly.
    `progress(what)` may return a `(done, total)` callback for each file written."""
    from .quantize_file import quantize_file

    s = shape if isinstance(shape, Shape) else get_shape(shape)
    ft_type, pure = synthetic_file_type(ftype)
    ft = ft_type.name
    path = cache_path(s.name, ft, seed)
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    if (s.n_expert and ft != "F16") or pure:  # Qwen3-30B-A3B's F16 is 61 GB: quantized tensors written directly
        log(f"writing {path} ({n_params(s) / 1e9:,.1f}B parameters, {ft} written directly, seed {seed})")
        return write_quantized(s, path, ft, seed, tokenizer_path, progress(f"writing {s.name} {ft}"))
    f16 = cache_path(s.name, "F16", seed)
    if not f16.exists():
        log(f"writing {f16} ({n_params(s) / 1e6:,.0f}M parameters, random weights, seed {seed})")
        write_f16(s, f16, seed, tokenizer_path, progress(f"writing {s.name} F16"))
    if ft != "F16":
        log(f"quantizing to {path}")
        quantize_file(f16, path, ft, progress=progress(f"quantizing {s.name} to {ft}"))
    return path


# -- quantized files written directly ------------------------------------------------------------
# Quantized synthetic files written directly, for shapes whose F16 file does not fit a disk.
#
#     write_quantized(get_shape("qwen3moe-30b-a3b"), path, "Q4_K_M")   # ~17 GB, no 61 GB F16 first
#
# synthetic_model makes a quantized file by quantizing its F16 file, as llama-quantize would. For
# Qwen3-30B-A3B's shape that F16 file is 61 GB, so this writes the quantized tensors straight
# away, streamed tensor by tensor through `AtomicFile` (memory stays a few MB). The pure types
# (synthetic_types: MXFP4 on every matrix, a mix llama-quantize has only with --pure) are written
# here too, for any shape.
#
# What the bytes are: every tensor gets the type llama-quantize's mix gives it (mixes.py's plan,
# the same call quantize_file makes). Per (type, row length), one slab of SLAB_ROWS rows of
# `normal * WEIGHT_SCALE` (seeded) is quantized once (the quantizers registry); a tensor's rows are
# that slab's rows in turn, starting at a row that depends on the tensor's index (so neighbouring
# tensors differ). Every block is therefore a real quantization of Gaussian weights (sane scales,
# finite values), but the weights repeat: they measure speed only. Norms are ones and the router
# and other float tensors are random F32 as in write_f16.

SLAB_ROWS = 1024  # rows quantized per (type, row length); part of the bytes a seed gives
_ROW_STRIDE = 7919  # a prime: tensor i starts at slab row (i * _ROW_STRIDE) % SLAB_ROWS


def planned_types(s: Shape, ftype: str) -> dict[str, T]:
    """Tensor name -> the type llama-quantize's `ftype` mix gives it in a file of shape `s` (a pure
    type: every quantizable tensor, as `llama-quantize --pure`)."""
    ft, pure = synthetic_file_type(ftype)
    model = ModelShape(s.arch, s.n_layer, s.n_head, s.n_head_kv, s.n_expert)
    return plan_tensor_types([(t.name, t.ggml_type, t.shape) for t in tensor_specs(s)], ft, model, pure=pure)


def _slab(qtype: T, n_cols: int, seed: int) -> np.ndarray:
    """(2 * SLAB_ROWS, row bytes) uint8: the quantized slab twice, so any SLAB_ROWS rows from any
    start are one contiguous window."""
    rng = np.random.default_rng([seed, int(qtype), n_cols])
    x = rng.standard_normal((SLAB_ROWS, n_cols), dtype=np.float32) * WEIGHT_SCALE
    q = quantize(x, qtype)
    return np.concatenate([q, q])


def write_quantized(s: Shape, path: str | Path, ftype: str, seed: int = 0, tokenizer_path=None,
                    progress: Callable[[int, int], None] | None = None) -> Path:
    """Write the `ftype` (e.g. "Q4_K_M", or a pure "MXFP4") file of shape `s` at `path` (atomically),
    tensor by tensor."""
    from localinfer.files.gguf_file import GGUFFile

    path = Path(path)
    ft, _ = synthetic_file_type(ftype)
    if tokenizer_path is None:
        from localinfer.files.fetch import resolve_model
        tokenizer_path = resolve_model(TOKENIZER_MODEL)
    specs, plan = tensor_specs(s), planned_types(s, ft.name)
    entries = [TensorEntry(t.name, plan[t.name], t.shape,
                           row_nbytes(plan[t.name], t.shape[-1]) * (t.n_elements // t.shape[-1])) for t in specs]
    with GGUFFile(tokenizer_path) as tok:
        header, _ = encode_header(metadata_entries(s, seed, tok, ft.ftype), entries, ALIGNMENT)
    total = len(header) + data_size(entries, ALIGNMENT)
    free = shutil.disk_usage(path.parent).free
    if total > free:
        raise SyntheticError(f"not enough disk space for {path}: it needs {total / 2**30:.2f} GiB, "
                             f"{free / 2**30:.2f} GiB are free")
    slabs: dict[tuple[T, int], np.ndarray] = {}
    with AtomicFile(path) as out:
        out.write(header)
        for i, (spec, entry) in enumerate(zip(specs, entries)):
            if entry.ggml_type == spec.ggml_type:  # kept as written unquantized: norms, router, biases
                for chunk in _tensor_slabs(s, spec, i, seed):
                    out.write(chunk)
            else:
                n_cols = spec.shape[-1]
                key = (entry.ggml_type, n_cols)
                if key not in slabs:
                    slabs[key] = _slab(entry.ggml_type, n_cols, seed)
                slab, left, at = slabs[key], spec.n_elements // n_cols, (i * _ROW_STRIDE) % SLAB_ROWS
                while left:
                    take = min(left, SLAB_ROWS)
                    out.write(memoryview(slab[at:at + take]).cast("B"))
                    left, at = left - take, (at + take) % SLAB_ROWS
                    if progress:
                        progress(out.written, total)
            out.pad_to(ALIGNMENT)
    return path
