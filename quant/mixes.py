"""Which type each tensor gets: llama.cpp's file types ("mixes") and per-tensor policy.

A target such as ``Q4_K_M`` is a ``llama_ftype`` (the number stored in
``general.file_type``) with a default tensor type (Q4_K). ``llama-quantize``
does not give every tensor that type: ``llama_tensor_get_type``
(src/llama-quant.cpp) keeps some tensors as they are, gives the sensitive ones
more bits, and falls back to a 32-element type when a row length is not a
multiple of 256. This module is a readable restatement of that policy for the
file types llama-quantize offers (all but Q1_0, Q2_0 and NVFP4; an unknown target
is an error), on the architectures localinfer supports.

In order (``plan_tensor_types``):

1. Only 2-D+ tensors whose name ends in ``weight`` are quantized; norms, MoE
   router tensors and a few small special tensors keep their type.
2. The float file types (F32, F16, BF16) give every such tensor that type.
3. For the quantized file types:
   * ``output.weight`` -- and ``token_embd.weight`` when the model ties the two
     (no ``output.weight`` tensor) -- becomes Q6_K (Q8_0 stays Q8_0; Q8_0 too
     when its row length is not a multiple of the default type's block, and in
     MXFP4_MOE; Q5_K in the 1- and 2-bit IQ mixes and IQ3_XXS); an untied
     ``token_embd`` gets Q2_K (IQ1_*, IQ2_XXS, IQ2_XS), IQ3_S (IQ2_S, IQ2_M,
     IQ3_XXS) or Q4_K (TQ1_0, TQ2_0);
   * MXFP4_MOE gives the 3-D expert tensors MXFP4 and every other one Q8_0;
   * the 1- and 2-bit IQ mixes (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ2_M) have
     their own short list: attn_v Q4_K with GQA >= 4 or 4+ experts, else Q2_K /
     IQ3_S; the first eighth of ffn_down likewise; attn_output IQ2_XXS / IQ3_S /
     Q5_K (8 experts); nothing else;
   * the 3-bit IQ mixes move attn_q / attn_k down (IQ3_XS: IQ3_XXS, IQ3_XXS:
     IQ2_S), attn_v and some ffn_down up; IQ3_XS gives the middle layers'
     ffn_gate / ffn_up IQ3_XXS;
   * ``attn_v`` gets more bits in the *_M / *_L / Q2_K mixes: Q6_K on the
     layers ``use_more_bits`` picks for Q4_K_M / Q5_K_M, Q5_K on the first
     layers for Q3_K_M / Q4_K_S, ...; ``ffn_down`` likewise;
   * ``attn_output`` gets one step more in Q2_K / Q3_K_M / Q3_K_L;
4. A type whose block does not divide the row length falls back:
   Q2_K/Q3_K/TQ1_0/TQ2_0 -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, the
   256-element IQ types -> IQ4_NL, and F16 if even that does not divide it
   (Gemma 3 270M's rows of 640 take this path).
5. The 1- to 3-bit grid types (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS), and
   Q2_K in a Q2_K_S file, need an importance matrix: without one, llama-quantize
   refuses (``requires_imatrix``), except for the token embedding and the output.

Tensors are visited in llama.cpp's order (by layer number, then by name),
because the "first layers" rules count ``attn_v`` tensors as they go.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES

from localinfer.formats.registry import UnsupportedQuantType


@dataclass(frozen=True)
class FileType:
    name: str  # llama-quantize's name, e.g. "Q4_K_M"
    ftype: int  # LLAMA_FTYPE_* (include/llama.h), stored as general.file_type
    default: T  # the type most tensors get


_FILE_TYPES = [
    FileType("F32", 0, T.F32),
    FileType("F16", 1, T.F16),
    FileType("Q4_0", 2, T.Q4_0),
    FileType("Q4_1", 3, T.Q4_1),
    FileType("Q8_0", 7, T.Q8_0),
    FileType("Q5_0", 8, T.Q5_0),
    FileType("Q5_1", 9, T.Q5_1),
    FileType("Q2_K", 10, T.Q2_K),
    FileType("Q3_K_S", 11, T.Q3_K),
    FileType("Q3_K_M", 12, T.Q3_K),
    FileType("Q3_K_L", 13, T.Q3_K),
    FileType("Q4_K_S", 14, T.Q4_K),
    FileType("Q4_K_M", 15, T.Q4_K),
    FileType("Q5_K_S", 16, T.Q5_K),
    FileType("Q5_K_M", 17, T.Q5_K),
    FileType("Q6_K", 18, T.Q6_K),
    FileType("IQ2_XXS", 19, T.IQ2_XXS),
    FileType("IQ2_XS", 20, T.IQ2_XS),
    FileType("Q2_K_S", 21, T.Q2_K),
    FileType("IQ3_XS", 22, T.IQ3_S),  # a mix of IQ3_S and IQ3_XXS: no type of its own
    FileType("IQ3_XXS", 23, T.IQ3_XXS),
    FileType("IQ1_S", 24, T.IQ1_S),
    FileType("IQ4_NL", 25, T.IQ4_NL),
    FileType("IQ3_S", 26, T.IQ3_S),
    FileType("IQ3_M", 27, T.IQ3_S),
    FileType("IQ2_S", 28, T.IQ2_XS),  # the IQ2_S mix is mostly IQ2_XS tensors,
    FileType("IQ2_M", 29, T.IQ2_S),   # and the IQ2_M mix mostly IQ2_S ones
    FileType("IQ4_XS", 30, T.IQ4_XS),
    FileType("IQ1_M", 31, T.IQ1_M),
    FileType("BF16", 32, T.BF16),
    FileType("TQ1_0", 36, T.TQ1_0),
    FileType("TQ2_0", 37, T.TQ2_0),
    FileType("MXFP4_MOE", 38, T.MXFP4),
]
FILE_TYPES: dict[str, FileType] = {f.name: f for f in _FILE_TYPES}
# llama-quantize's aliases: a bare K type means its _M mix
ALIASES = {"Q3_K": "Q3_K_M", "Q4_K": "Q4_K_M", "Q5_K": "Q5_K_M"}

_FLOAT_TYPES = {T.F32, T.F16, T.BF16}


def get_file_type(name: str) -> FileType:
    key = name.upper()
    key = ALIASES.get(key, key)
    if key not in FILE_TYPES:
        names = ", ".join(list(FILE_TYPES) + [f"{a} (= {b})" for a, b in ALIASES.items()])
        raise UnsupportedQuantType(f"unsupported target type {name!r}; supported: {names}")
    return FILE_TYPES[key]


@dataclass(frozen=True)
class ModelShape:
    """What the policy needs to know about the model (llama.cpp reads the same hparams)."""
    arch: str
    n_layer: int
    n_head: int
    n_head_kv: int
    n_expert: int = 0

    @property
    def n_gqa(self) -> int:
        return self.n_head // self.n_head_kv if self.n_head_kv else 0

    @property
    def is_70b(self) -> bool:
        # llama.cpp's LLM_TYPE_70B for these architectures: 80 layers
        return self.arch == "llama" and self.n_layer == 80

    @classmethod
    def from_metadata(cls, meta: dict) -> "ModelShape":
        arch = meta.get("general.architecture", "")

        def first(key: str, default: int = 0) -> int:
            v = meta.get(f"{arch}.{key}", default)
            if isinstance(v, np.ndarray):   # a per-layer array from the GGUF reader
                v = v.tolist()
            return int(max(v) if isinstance(v, list) and v else v or 0)

        return cls(arch, first("block_count"), first("attention.head_count"),
                   first("attention.head_count_kv") or first("attention.head_count"), first("expert_count"))


# --- 1. which tensors may be quantized (tensor_allows_quantization) ------------------------

_NEVER_QUANTIZED = (  # substrings: small or special tensors llama.cpp keeps as they are
    "_norm.weight", "ffn_gate_inp.weight", "altup", "laurel", "per_layer_model_proj",
    "ssm_conv1d", "shortconv.conv.weight", "attn_rel_b.weight", "time_mix_",
    ".position_embd", ".patch_embd", ".rel_pos",
)
_NEVER_QUANTIZED_EXACT = ("position_embd.weight", "token_types.weight")


def n_dims(shape: tuple[int, ...]) -> int:
    """ggml_n_dims: the number of dimensions, not counting trailing (outer) ones of size 1."""
    ne = list(reversed(shape))
    while len(ne) > 1 and ne[-1] == 1:
        ne.pop()
    return len(ne)


def allows_quantization(name: str, shape: tuple[int, ...]) -> bool:
    if n_dims(shape) < 2 or not name.endswith("weight"):
        return False
    if name in _NEVER_QUANTIZED_EXACT:
        return False
    return not any(s in name for s in _NEVER_QUANTIZED)


# --- 3. the mix rules (llama_tensor_get_type_impl) -------------------------------------------

def category(name: str) -> str:
    if name == "output.weight":
        return "output"
    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return "token_embd"
    for key, cat in (("attn_qkv.weight", "attn_qkv"), ("attn_kv_b.weight", "attn_kv_b"),
                     ("attn_v.weight", "attn_v"), ("attn_k.weight", "attn_k"), ("attn_q.weight", "attn_q"),
                     ("attn_output.weight", "attn_output"), ("ffn_up", "ffn_up"), ("ffn_gate", "ffn_gate"),
                     ("ffn_down", "ffn_down")):
        if key in name:
            return cat
    return "other"


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """The layers the *_M mixes favour: the first and last eighth, and every third in between."""
    return i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8 or (i_layer - n_layers // 8) % 3 == 2


def _layer_of(name: str) -> int:
    m = re.match(r"blk\.(\d+)\.", name)
    return int(m.group(1)) if m else -1


def _block_size(t: T) -> int:
    return GGML_QUANT_SIZES[t][0]


# The 1- and 2-bit IQ mixes: llama.cpp gives them their own short list of rules.
_LOW_BIT_IQ = ("IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M")
# Their output (and tied embedding) gets Q5_K, not Q6_K; so does IQ3_XXS's.
_OUTPUT_Q5_K = _LOW_BIT_IQ + ("IQ3_XXS",)
# An untied token embedding in these mixes gets its own type (every other mix leaves it at the default).
_TOKEN_EMBD = {"IQ1_S": T.Q2_K, "IQ1_M": T.Q2_K, "IQ2_XXS": T.Q2_K, "IQ2_XS": T.Q2_K, "IQ2_S": T.IQ3_S,
               "IQ2_M": T.IQ3_S, "IQ3_XXS": T.IQ3_S, "TQ1_0": T.Q4_K, "TQ2_0": T.Q4_K}
# attn_output of an 8-expert model gets Q5_K in these mixes
_ATTN_OUTPUT_Q5_K_MOE8 = ("Q2_K", "IQ3_XS", "IQ3_XXS", "Q3_K_S", "Q3_K_M", "IQ4_NL", "Q4_K_S", "Q4_K_M",
                          "IQ3_S", "IQ3_M", "IQ4_XS")


class _Policy:
    """llama.cpp's quantize_state_impl: the counters that the "first layers" rules read."""

    def __init__(self, ft: FileType, model: ModelShape, names: list[str], has_imatrix: bool = False):
        self.ft, self.model, self.has_imatrix = ft, model, has_imatrix
        self.n_attention_wv = sum(category(n) in ("attn_v", "attn_qkv", "attn_kv_b") for n in names)
        self.tied_embeddings = "output.weight" not in names
        self.n_layer = model.n_layer
        self.i_attention_wv = self.i_ffn_down = self.i_ffn_gate = self.i_ffn_up = 0

    def _layer(self, counter: int, name: str) -> int:
        if self.model.n_expert > 1:  # experts are not consecutive: read the layer from the name
            return _layer_of(name)
        return counter

    def mix_type(self, name: str, shape: tuple[int, ...]) -> T:
        ft, m, f = self.ft.name, self.model, self.ft.default
        cat, ncols = category(name), shape[-1]
        if cat == "output" or (self.tied_embeddings and cat == "token_embd"):
            if ft == "MXFP4_MOE" or m.arch == "falcon" or ncols % _block_size(f) != 0:
                return T.Q8_0
            if ft in _OUTPUT_Q5_K:
                return T.Q5_K
            return f if f == T.Q8_0 else T.Q6_K
        if ft == "MXFP4_MOE":
            # the 3-D expert tensors (n_expert > 1 matrices); bailingmoe3's attention has 3-D ones too
            expert = len(shape) >= 3 and shape[-3] > 1
            if m.arch == "bailingmoe3":
                expert = expert and cat in ("ffn_up", "ffn_gate", "ffn_down")
            return T.MXFP4 if expert else T.Q8_0
        if cat == "token_embd":
            return _TOKEN_EMBD.get(ft, f)
        if ft in _LOW_BIT_IQ:
            return self._low_bit_iq(cat, ft, f)
        if cat in ("attn_v", "attn_qkv", "attn_kv_b"):
            # (llama.cpp's separate attn_qkv rules come after this branch, which already takes attn_qkv)
            return self._attn_v(ft, f)
        if cat == "attn_k":
            if m.n_expert == 8:
                return T.Q8_0
            return {"IQ3_XS": T.IQ3_XXS, "IQ3_XXS": T.IQ2_S}.get(ft, f)
        if cat == "attn_q":
            return {"IQ3_XS": T.IQ3_XXS, "IQ3_XXS": T.IQ2_S}.get(ft, f)
        if cat == "ffn_down":
            return self._ffn_down(name, ft, f)
        if cat == "attn_output":
            return self._attn_output(ft, f)
        if cat in ("ffn_gate", "ffn_up"):
            counter = "i_ffn_gate" if cat == "ffn_gate" else "i_ffn_up"
            i, n = self._layer(getattr(self, counter), name), self.n_layer
            setattr(self, counter, getattr(self, counter) + 1)
            if ft == "IQ3_XS" and n // 8 <= i < 7 * n // 8:
                return T.IQ3_XXS
        return f

    def _low_bit_iq(self, cat: str, ft: str, f: T) -> T:
        """IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ2_M: a few tensors get more bits, nothing else."""
        m = self.model
        more = T.IQ3_S if ft in ("IQ2_S", "IQ2_M") else T.Q2_K
        if cat in ("attn_v", "attn_qkv", "attn_kv_b"):
            self.i_attention_wv += 1
            return T.Q4_K if m.n_gqa >= 4 or m.n_expert >= 4 else more
        if cat == "attn_k" and m.n_expert == 8:
            return T.Q4_K
        if cat == "ffn_down":
            # the running count of ffn_down tensors, not the layer (llama.cpp reads no name here)
            i = self.i_ffn_down
            self.i_ffn_down += 1
            return more if i < self.n_layer // 8 else f
        if cat == "attn_output":
            if m.n_expert == 8:
                return T.Q5_K
            return {"IQ1_S": T.IQ2_XXS, "IQ1_M": T.IQ2_XXS, "IQ2_S": T.IQ3_S, "IQ2_M": T.IQ3_S}.get(ft, f)
        return f

    def _attn_v(self, ft: str, f: T) -> T:
        m, i = self.model, self.i_attention_wv
        new = f
        if ft == "Q2_K":
            new = T.Q4_K if m.n_gqa >= 4 else T.Q3_K
        elif ft == "Q2_K_S" and m.n_gqa >= 4:
            new = T.Q4_K
        elif ft == "IQ3_XXS":
            new = T.Q4_K if m.n_gqa >= 4 else T.IQ3_XXS if self.has_imatrix else T.IQ3_S
        elif ft in ("IQ3_XS", "IQ3_S") and m.n_gqa >= 4:
            new = T.Q4_K
        elif ft == "IQ3_M":
            new = T.Q4_K
        elif ft == "Q3_K_M":
            new = T.Q5_K if i < 2 else T.Q4_K
        elif ft == "Q3_K_L":
            new = T.Q5_K
        elif ft in ("IQ4_NL", "IQ4_XS") and m.n_gqa >= 4:
            new = T.Q5_K
        elif ft in ("Q4_K_M", "Q5_K_M") and use_more_bits(i, self.n_attention_wv):
            new = T.Q6_K
        elif ft == "Q4_K_S" and i < 4:
            new = T.Q5_K
        if m.is_70b and new in (T.Q3_K, T.Q4_K):  # 8 heads share attn_v: cheap to give it more bits
            new = T.Q5_K
        if m.n_expert == 8:
            new = T.Q8_0
        self.i_attention_wv += 1
        return new

    def _ffn_down(self, name: str, ft: str, f: T) -> T:
        m, falcon = self.model, self.model.arch == "falcon"
        i, n = self._layer(self.i_ffn_down, name), self.n_layer
        self.i_ffn_down += 1
        if ft == "Q2_K":
            return T.Q3_K
        if ft == "Q2_K_S":
            return T.Q4_K if i < n // 8 else f
        if ft == "IQ3_XXS" and not self.has_imatrix:
            return T.Q4_K if i < n // 8 else T.Q3_K
        if ft == "Q3_K_M":
            return T.Q5_K if i < n // 16 else T.Q4_K if not falcon or use_more_bits(i, n) else T.Q3_K
        if ft == "IQ3_M" and (i < n // 8 or (m.n_expert == 8 and use_more_bits(i, n))):
            return T.Q4_K
        if ft == "Q3_K_L":
            return T.Q4_K if falcon else T.Q5_K
        if ft == "Q4_K_M":
            if falcon:
                return T.Q6_K if i < n // 16 else T.Q5_K if use_more_bits(i, n) else T.Q4_K
            return T.Q6_K if use_more_bits(i, n) else f
        if ft in ("IQ4_NL", "IQ4_XS") and i < n // 8 and not self.has_imatrix:
            return T.Q5_K
        if ft == "Q5_K_M" and use_more_bits(i, n):
            return T.Q6_K
        if ft == "Q4_K_S" and not falcon and i < n // 8:
            return T.Q5_K
        if ft in ("Q4_0", "Q5_0") and self.has_imatrix and i < n // 8:
            # llama.cpp: with an imatrix, the first ffn_down layers of Q4_0/Q5_0 go "crazy";
            # only then, so that a file without one stays what it always was
            return T.Q4_1 if ft == "Q4_0" else T.Q5_1
        return f

    def _attn_output(self, ft: str, f: T) -> T:
        if self.model.arch == "falcon":
            return T.Q4_K if ft == "Q3_K_L" else f
        if self.model.n_expert == 8:
            return T.Q5_K if ft in _ATTN_OUTPUT_Q5_K_MOE8 else f
        return {"Q2_K": T.Q3_K, "IQ3_XXS": T.IQ3_S, "Q3_K_M": T.Q4_K, "Q3_K_L": T.Q5_K, "IQ3_M": T.Q4_K}.get(ft, f)


# --- 4. row lengths the type cannot hold (tensor_type_fallback) -------------------------------

_FALLBACK = {
    **{t: T.IQ4_NL for t in (T.IQ1_S, T.IQ1_M, T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ3_XXS, T.IQ3_S, T.IQ4_XS)},
    **{t: T.Q4_0 for t in (T.Q2_K, T.Q3_K, T.TQ1_0, T.TQ2_0)},
    T.Q4_K: T.Q5_0, T.Q5_K: T.Q5_1, T.Q6_K: T.Q8_0,
}  # a 32-element type (Q8_0, IQ4_NL, MXFP4 ...) has none: it goes straight to F16


def fallback_type(t: T, ncols: int) -> T:
    if ncols % _block_size(t) == 0:
        return t
    t = _FALLBACK.get(t, t)
    return t if ncols % _block_size(t) == 0 else T.F16


# The grid types below 3.5 bits: without an importance matrix their result is garbage.
_NEED_IMATRIX = (T.IQ1_S, T.IQ1_M, T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ3_XXS)


def requires_imatrix(name: str, new: T, ft: FileType) -> bool:
    """llama.cpp refuses to write these without an importance matrix: tensors of the types in
    _NEED_IMATRIX, and Q2_K ones in a Q2_K_S file -- the embeddings and the output excepted."""
    if category(name) in ("token_embd", "output"):
        return False
    return new in _NEED_IMATRIX or (ft.name == "Q2_K_S" and new == T.Q2_K)


# --- the plan ----------------------------------------------------------------------------------

def sort_key(name: str) -> tuple[int, str]:
    """llama.cpp's weight_name_comparer: by layer number (non-layer tensors first), then name."""
    return (_layer_of(name), name)


def plan_tensor_types(tensors: Iterable[tuple[str, T, tuple[int, ...]]], ft: FileType,
                      model: ModelShape, pure: bool = False, fallbacks: list[str] | None = None,
                      has_imatrix: bool = False) -> dict[str, T]:
    """name -> output type for every (name, current type, numpy shape), in llama.cpp's order.

    `has_imatrix`: an importance matrix is given (a few rules depend on it).
    `pure` gives every quantizable tensor the default type (llama-quantize --pure);
    the fallback for row lengths still applies. The names of the tensors that
    needed it are appended to `fallbacks`.
    """
    tensors = sorted(tensors, key=lambda t: sort_key(t[0]))
    policy = _Policy(ft, model, [t[0] for t in tensors], has_imatrix)
    plan: dict[str, T] = {}
    for name, cur, shape in tensors:
        if not allows_quantization(name, shape):
            plan[name] = cur
            continue
        new = ft.default
        if ft.default not in _FLOAT_TYPES:
            if not pure:
                new = policy.mix_type(name, shape)
            if fallback_type(new, shape[-1]) != new:
                new = fallback_type(new, shape[-1])
                if fallbacks is not None:
                    fallbacks.append(name)
        plan[name] = new
    return plan
