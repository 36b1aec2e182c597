"""Hugging Face checkpoint (config.json + *.safetensors + tokenizer.json) -> GGUF, with the
metadata keys and tensor names llama.cpp uses, so the file loads there and here.

    convert_hf(folder, out_path, outtype="f16")

Per architecture (config.json "architectures"):
- llama / mistral (GGUF "llama"): Q and K rows are permuted so that RoPE rotates adjacent pairs,
  as llama.cpp's converter does (LlamaModel.permute); "llama3" rope scaling becomes the
  rope_freqs.weight tensor of per-frequency factors (what llama.cpp reads), linear scaling the
  rope.scaling.* keys;
- qwen2 (q/k/v biases), qwen3 (per-head q/k norms): not permuted, NeoX rope at run time;
- phi3: fused qkv_proj / gate_up_proj kept fused (attn_qkv, ffn_up of 2*n_ff rows), partial
  rotary as rope.dimension_count, longrope as rope_factors_long/short.weight + rope.scaling.attn_factor;
- gpt-oss (convert_gptoss.py): attention sinks (attn_sinks), post_attention_norm, the router as
  ffn_gate_inp (+ bias), gate_up_proj split into ffn_gate_exps / ffn_up_exps (+ biases), YaRN as
  rope.scaling.* keys. MXFP4 experts (released checkpoints' *_blocks / *_scales) stay MXFP4,
  repacked; unquantized ones are written in `outtype`;
- qwen3moe, qwen2moe, olmoe (q/k norms over the whole projection), and mixtral (GGUF "llama" with experts): each layer's per-expert HF matrices are stacked
  into llama.cpp's 3-D ffn_{gate,up,down}_exps (n_expert, rows, cols), the router is ffn_gate_inp,
  and the expert_* keys say how many experts there are and how many each token uses; qwen2moe's
  shared expert becomes ffn_{gate,up,down}_shexp and its gate the (n_embd,) ffn_gate_inp_shexp.
- encoders (convert_encoder.py): BertModel / BertForSequenceClassification ("bert"),
  NomicBertModel ("nomic-bert"), JinaBertModel ("jina-bert-v2"), ModernBertModel /
  ModernBertForSequenceClassification ("modern-bert"), with their heads and pooling.
Norms, biases and rope factors stay float32; matrices take `outtype` (q8_0 falls back to f16
for rows whose length is not a multiple of 32, as llama.cpp does).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter, LlamaFileType
from gguf.quants import quantize

from .hf_tokenizer import add_vocab, convert_tokenizer
from .convert_encoder import ENCODER_ARCHS, add_encoder_vocab, encoder_hparams, encoder_tensors, is_classifier, keeps_f32
from .convert_gptoss import FUSED_EXPERT_RE, fused_experts, gpt_oss_hparams, yarn_hparams
from .hf_config import Config, ConversionError, Encoded
from .safetensors_file import Checkpoint

OUTTYPES = {
    "f32": (GGMLQuantizationType.F32, LlamaFileType.ALL_F32),
    "f16": (GGMLQuantizationType.F16, LlamaFileType.MOSTLY_F16),
    "bf16": (GGMLQuantizationType.BF16, LlamaFileType.MOSTLY_BF16),
    "q8_0": (GGMLQuantizationType.Q8_0, LlamaFileType.MOSTLY_Q8_0),
}


@dataclass(frozen=True)
class Recipe:
    gguf_arch: str
    permute_qk: bool = False  # llama: HF rotate_half layout -> GGUF adjacent pairs
    ffn_norm: str = "ffn_norm"  # GGUF name of HF's post_attention_layernorm (gpt-oss: post_attention_norm)


RECIPES = {
    "LlamaForCausalLM": Recipe("llama", permute_qk=True),
    "MistralForCausalLM": Recipe("llama", permute_qk=True),  # llama.cpp converts mistral as llama
    "Qwen2ForCausalLM": Recipe("qwen2"),
    "Qwen3ForCausalLM": Recipe("qwen3"),
    "Phi3ForCausalLM": Recipe("phi3"),
    "Qwen3MoeForCausalLM": Recipe("qwen3moe"),
    "Qwen2MoeForCausalLM": Recipe("qwen2moe"),
    "OlmoeForCausalLM": Recipe("olmoe"),
    "GptOssForCausalLM": Recipe("gpt-oss", ffn_norm="post_attention_norm"),
    "MixtralForCausalLM": Recipe("llama", permute_qk=True),  # llama.cpp converts mixtral as llama + experts
}

# HF tensor name (layer part) -> GGUF name; "{i}" is the layer.
_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.qkv_proj": "attn_qkv", "self_attn.o_proj": "attn_output",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate": "ffn_gate_inp", "block_sparse_moe.gate": "ffn_gate_inp", "mlp.router": "ffn_gate_inp",
    "self_attn.sinks": "attn_sinks.weight",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.gate_up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
    "mlp.shared_expert.gate_proj": "ffn_gate_shexp", "mlp.shared_expert.up_proj": "ffn_up_shexp",
    "mlp.shared_expert.down_proj": "ffn_down_shexp", "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
}
# per-expert HF matrices (qwen3moe: gate/up/down_proj; mixtral: w1/w3/w2) -> the 3-D GGUF tensor they stack into
_EXPERT_RE = re.compile(r"model\.layers\.(\d+)\.(?:mlp|block_sparse_moe)\.experts\.(\d+)\.(\w+)\.weight$")
_EXPERT_NAMES = {"gate_proj": "ffn_gate_exps", "w1": "ffn_gate_exps", "up_proj": "ffn_up_exps", "w3": "ffn_up_exps",
                 "down_proj": "ffn_down_exps", "w2": "ffn_down_exps"}
_GLOBAL_NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
                 "lm_head.weight": "output.weight"}
_LAYER_RE = re.compile(r"model\.layers\.(\d+)\.(.+?)(\.weight|\.bias)?$")
_IGNORED = re.compile(r".*rotary_emb\.inv_freq$")


def gguf_tensor_name(hf_name: str) -> str | None:
    """The GGUF name of a HF tensor; None for tensors that are recomputed (rotary inv_freq)."""
    if _IGNORED.match(hf_name):
        return None
    if hf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[hf_name]
    m = _LAYER_RE.match(hf_name)
    if m:
        layer, part, suffix = m.group(1), m.group(2), m.group(3) or ""
        if part + suffix in _LAYER_NAMES:
            return f"blk.{layer}.{_LAYER_NAMES[part + suffix]}"
        if part in _LAYER_NAMES and suffix:
            return f"blk.{layer}.{_LAYER_NAMES[part]}{suffix}"
    raise ConversionError(f"tensor {hf_name!r} has no GGUF name in this converter")


def permute_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF llama Q/K rows (per head: the first half of the dimensions, then the second, for
    rotate_half) -> per head, dimension i of each half side by side, so that GGUF's "normal"
    RoPE on adjacent pairs (2i, 2i+1) computes the same rotation. w: (n_head*head_dim, ...)."""
    head_dim = w.shape[0] // n_head
    return w.reshape(n_head, 2, head_dim // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(head_dim: int, rope: dict) -> np.ndarray:
    """(head_dim/2,) factors dividing each rope frequency for "llama3" scaling (Llama 3.1+):
    long wavelengths are slowed by `factor`, short ones kept, the band between interpolated."""
    base = float(rope.get("rope_theta", 10000.0))
    factor = float(rope.get("factor", 8.0))
    low, high = float(rope.get("low_freq_factor", 1.0)), float(rope.get("high_freq_factor", 4.0))
    old_ctx = float(rope.get("original_max_position_embeddings", 8192))
    inv_freq = base ** -(np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    wavelen = 2 * math.pi / inv_freq
    smooth = (old_ctx / wavelen - low) / (high - low)
    factors = np.where(wavelen < old_ctx / high, 1.0,
                       np.where(wavelen > old_ctx / low, factor, 1.0 / ((1 - smooth) / factor + smooth)))
    return factors.astype(np.float32)


def longrope_attn_factor(c: Config) -> float:
    """The factor longrope applies to cos and sin: sqrt(1 + ln(s) / ln(n_ctx_orig)) for a context
    stretched s = max_position_embeddings / original_max_position_embeddings times, unless given."""
    rope = c.rope()
    if rope.get("attention_factor") is not None:
        return float(rope["attention_factor"])
    orig = rope.get("original_max_position_embeddings", c.get("original_max_position_embeddings"))
    if orig is None:
        raise ConversionError(f"{c.path}: longrope needs original_max_position_embeddings")
    scale = float(rope.get("factor") or c.need("max_position_embeddings") / orig)
    return math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1.0 else 1.0


def longrope_factors(c: Config, n_rot: int) -> dict[str, np.ndarray]:
    rope = c.rope()
    out = {}
    for kind in ("long", "short"):
        f = rope.get(f"{kind}_factor")
        if f is None or len(f) != n_rot // 2:
            raise ConversionError(f"{c.path}: longrope needs {kind}_factor with {n_rot // 2} values")
        out[f"rope_factors_{kind}.weight"] = np.asarray(f, np.float32)
    return out


def _hparams(w: GGUFWriter, c: Config, arch: str, n_vocab: int) -> tuple[int, int, int, int]:
    """Writes the {arch}.* keys; returns n_head, n_head_kv, head_dim, n_rot."""
    n_embd, n_head = c.need("hidden_size"), c.need("num_attention_heads")
    n_head_kv = c.get("num_key_value_heads", n_head)
    head_dim = c.get("head_dim", n_embd // n_head)
    rope = c.rope()
    w.add_context_length(c.need("max_position_embeddings"))
    w.add_embedding_length(n_embd)
    w.add_block_count(c.need("num_hidden_layers"))
    w.add_feed_forward_length(c.need("intermediate_size"))
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_rms_eps(c.need("rms_norm_eps"))
    w.add_rope_freq_base(float(rope.get("rope_theta", 10000.0)))
    w.add_vocab_size(n_vocab)
    if "head_dim" in c.d:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    n_rot = head_dim
    if arch == "phi3":
        n_rot = int(rope.get("partial_rotary_factor", c.get("partial_rotary_factor", 1.0)) * n_embd) // n_head
        w.add_rope_scaling_orig_ctx_len(c.get("original_max_position_embeddings", c.need("max_position_embeddings")))
        w.add_sliding_window(c.get("sliding_window", 0))
    w.add_rope_dimension_count(n_rot)
    if arch == "gpt-oss":
        gpt_oss_hparams(w, c)
    _expert_hparams(w, c, arch)
    kind = rope.get("rope_type", "default")
    if kind == "linear":
        from gguf import RopeScalingType
        w.add_rope_scaling_type(RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(float(rope["factor"]))
    elif kind == "llama3" and arch == "llama":
        pass  # written as the rope_freqs.weight tensor
    elif kind == "yarn" and arch == "gpt-oss":
        yarn_hparams(w, c, arch, rope)
    elif kind in ("longrope", "su") and arch == "phi3":
        from gguf import RopeScalingType
        w.add_rope_scaling_type(RopeScalingType.LONGROPE)
        w.add_rope_scaling_attn_factors(longrope_attn_factor(c))
    elif kind != "default":
        raise ConversionError(f"{c.path}: rope scaling {kind!r} for {arch} is not supported by this converter")
    return n_head, n_head_kv, head_dim, n_rot


def _expert_hparams(w: GGUFWriter, c: Config, arch: str) -> None:
    n_expert = c.get("num_experts", c.get("num_local_experts", 0))
    if not n_expert:
        return
    if c.get("decoder_sparse_step", 1) != 1 or c.get("mlp_only_layers", []):
        raise ConversionError(f"{c.path}: dense layers between the expert layers are not supported by this converter")
    if c.get("clip_qkv") is not None:
        raise ConversionError(f"{c.path}: clip_qkv (olmoe's clamped q/k/v) is not supported by this converter")
    w.add_expert_count(n_expert)
    w.add_expert_used_count(c.need("num_experts_per_tok"))
    if "moe_intermediate_size" in c.d:  # else the experts are intermediate_size wide (mixtral)
        w.add_expert_feed_forward_length(c.need("moe_intermediate_size"))
    if "shared_expert_intermediate_size" in c.d:
        w.add_expert_shared_feed_forward_length(c.need("shared_expert_intermediate_size"))
    if "norm_topk_prob" in c.d:  # mixtral has none and always renormalises, as llama.cpp does for llama
        w.add_expert_weights_norm(bool(c.get("norm_topk_prob", False)))


def _stacked_experts(ckpt: Checkpoint, c: Config) -> Iterator[tuple[str, Callable[[], np.ndarray]]]:
    """(GGUF name, loader) of each layer's 3-D expert tensors: per-expert HF matrices stacked
    in expert order into (n_expert, rows, cols)."""
    groups: dict[str, dict[int, str]] = {}
    for hf_name in ckpt.names():
        m = _EXPERT_RE.match(hf_name)
        if m:
            if m.group(3) not in _EXPERT_NAMES:
                raise ConversionError(f"tensor {hf_name!r} has no GGUF name in this converter")
            groups.setdefault(f"blk.{m.group(1)}.{_EXPERT_NAMES[m.group(3)]}.weight", {})[int(m.group(2))] = hf_name
    n_expert = c.get("num_experts", c.get("num_local_experts", 0))
    for name, by_expert in groups.items():
        if sorted(by_expert) != list(range(n_expert)):
            raise ConversionError(f"{c.path}: {name} needs experts 0..{n_expert - 1}, found {sorted(by_expert)}")
        yield name, lambda names=[by_expert[e] for e in range(n_expert)]: np.stack(
            [ckpt.tensor(n).astype(np.float32) for n in names])


def _tensors(ckpt: Checkpoint, c: Config, recipe: Recipe, n_head: int, n_head_kv: int
             ) -> Iterator[tuple[str, Callable[[], np.ndarray]]]:
    tied = bool(c.get("tie_word_embeddings", False))
    yield from _stacked_experts(ckpt, c)
    if recipe.gguf_arch == "gpt-oss":
        yield from fused_experts(ckpt)
    for hf_name in ckpt.names():
        if _EXPERT_RE.match(hf_name) or (recipe.gguf_arch == "gpt-oss" and FUSED_EXPERT_RE.match(hf_name)):
            continue
        name = gguf_tensor_name(hf_name)
        if name is not None and name.endswith(".ffn_norm.weight"):
            name = name.replace(".ffn_norm.", f".{recipe.ffn_norm}.")
        if name is None or (tied and name == "output.weight"):
            continue

        def load(hf_name=hf_name, name=name):
            t = ckpt.tensor(hf_name).astype(np.float32)
            if recipe.permute_qk and re.search(r"\.attn_q\.(weight|bias)$", name):
                t = permute_rows(t, n_head)
            elif recipe.permute_qk and re.search(r"\.attn_k\.(weight|bias)$", name):
                t = permute_rows(t, n_head_kv)
            elif name.endswith("ffn_gate_inp_shexp.weight"):
                t = t.reshape(-1)  # HF's (1, n_embd) linear -> llama.cpp's {n_embd} vector
            return t
        yield name, load


def _encode(t: np.ndarray, qtype: GGMLQuantizationType, name: str = "") -> tuple[np.ndarray, GGMLQuantizationType]:
    """A float32 tensor as the bytes of `qtype`; 1-D tensors (norms, biases) stay float32, and so
    does the expert router (as llama.cpp's converter keeps it: a rounded router flips near-tied choices),
    and so do biases, which are 2-D for experts (gpt-oss: (n_expert, n_out))."""
    if (t.ndim < 2 or qtype == GGMLQuantizationType.F32 or name.endswith("ffn_gate_inp.weight")
            or name.endswith(".bias")):
        return t, GGMLQuantizationType.F32
    if qtype == GGMLQuantizationType.F16:
        return t.astype(np.float16), qtype
    if qtype == GGMLQuantizationType.Q8_0 and t.shape[-1] % 32:
        return t.astype(np.float16), GGMLQuantizationType.F16
    return quantize(t, qtype), qtype


def convert_hf(folder: str | Path, out_path: str | Path, outtype: str = "f16", pre: str | None = None,
               log: Callable[[str], None] = lambda s: None) -> Path:
    """Converts the HF model in `folder` to a GGUF file at `out_path`; returns that path."""
    folder, out_path = Path(folder), Path(out_path)
    if outtype not in OUTTYPES:
        raise ConversionError(f"unknown output type {outtype!r} (choose from {', '.join(OUTTYPES)})")
    if not folder.is_dir():
        raise ConversionError(f"{folder}: not a folder")
    c = Config(folder / "config.json")
    archs = c.get("architectures", [])
    hf_arch = next((a for a in archs if a in RECIPES or a in ENCODER_ARCHS), None)
    if hf_arch is None:
        raise ConversionError(f"{c.path}: architecture {archs or '(none)'} is not supported "
                              f"(supported: {', '.join([*RECIPES, *ENCODER_ARCHS])})")
    if hf_arch in ENCODER_ARCHS:
        return _convert_encoder(folder, out_path, c, hf_arch, outtype, log)
    recipe = RECIPES[hf_arch]
    vocab = convert_tokenizer(folder, c.get("vocab_size"), pre)
    ckpt = Checkpoint(folder)
    qtype, ftype = OUTTYPES[outtype]

    w = GGUFWriter(str(out_path), recipe.gguf_arch)
    w.add_name(folder.name)
    w.add_file_type(ftype)
    w.add_quantization_version(2)
    n_head, n_head_kv, head_dim, n_rot = _hparams(w, c, recipe.gguf_arch, len(vocab.tokens))
    add_vocab(w, vocab)
    if recipe.gguf_arch == "llama" and c.rope().get("rope_type") == "llama3":
        w.add_tensor("rope_freqs.weight", llama3_rope_factors(head_dim, c.rope()))
    if recipe.gguf_arch == "phi3" and c.rope().get("rope_type") in ("longrope", "su"):
        for name, factors in longrope_factors(c, n_rot).items():
            w.add_tensor(name, factors)
    _write(w, _tensors(ckpt, c, recipe, n_head, n_head_kv), qtype, log)
    return out_path


def _convert_encoder(folder: Path, out_path: Path, c: Config, hf_arch: str, outtype: str,
                     log: Callable[[str], None]) -> Path:
    """An encoder (convert_encoder.py): its own keys, names and head; the same tensor encoding."""
    qtype, ftype = OUTTYPES[outtype]
    arch, classifier = ENCODER_ARCHS[hf_arch], is_classifier(hf_arch)
    ckpt = Checkpoint(folder)
    w = GGUFWriter(str(out_path), arch)
    w.add_name(folder.name)
    w.add_file_type(ftype)
    w.add_quantization_version(2)
    n_vocab = encoder_hparams(w, c, folder, arch, classifier)
    add_encoder_vocab(w, c, folder, n_vocab, log, arch)
    _write(w, encoder_tensors(ckpt, arch, classifier), qtype, log,
           lambda name: GGMLQuantizationType.F32 if keeps_f32(name) else qtype)
    return out_path


def _write(w: GGUFWriter, tensors, qtype: GGMLQuantizationType, log: Callable[[str], None],
           type_of: Callable[[str], GGMLQuantizationType] | None = None) -> None:
    """Encodes each (name, loader) of `tensors` (in `qtype`, or `type_of(name)`), then writes the file."""
    for name, load in tensors:
        tensor = load()
        t_want = type_of(name) if type_of is not None else qtype
        data, t = (tensor.data, tensor.qtype) if isinstance(tensor, Encoded) else _encode(tensor, t_want, name)
        log(f"{name:<32} {t.name:<5} {_logical_shape(data, t)}")
        # f32/f16 arrays carry their type; bf16/q8_0 are bytes whose type must be named
        raw = t not in (GGMLQuantizationType.F32, GGMLQuantizationType.F16)
        w.add_tensor(name, data, raw_dtype=t if raw else None)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _logical_shape(data: np.ndarray, t: GGMLQuantizationType) -> tuple[int, ...]:
    """(rows, cols) of a tensor encoded as `t`, for the log."""
    from gguf.quants import quant_shape_from_byte_shape
    if t in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
        return data.shape
    return quant_shape_from_byte_shape(data.shape, t)
