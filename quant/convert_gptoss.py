"""What converting gpt-oss adds to convert_hf.py: its experts, its YaRN keys and its fixed choices.

Experts come in one of two forms (transformers' GptOssExperts, llama.cpp's conversion/gpt_oss.py):
- unquantized: gate_up_proj (n_expert, n_embd, 2*n_ff), its columns gate, up, gate, up, ...,
  down_proj (n_expert, n_ff, n_embd) -- transposed against a linear layer -- and their biases;
  written as ffn_{gate,up,down}_exps (n_expert, n_out, n_in) in the output type;
- MXFP4, as released: *_blocks (n_expert, n_out, n_in/32, 16) uint8 and *_scales (n_expert,
  n_out, n_in/32) uint8, rows (not columns) interleaved gate/up. They are repacked byte for byte
  into ggml's block_mxfp4 (no rounding: the same e8m0 scale and 4-bit codes), as llama.cpp does.
"""
from __future__ import annotations

import re
from functools import partial
from typing import Callable, Iterator

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter

from .hf_config import Config, ConversionError, Encoded
from .safetensors_file import Checkpoint

FUSED_EXPERT_RE = re.compile(r"model\.layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)(_bias|_blocks|_scales)?$")


def yarn_hparams(w: GGUFWriter, c: Config, arch: str, rope: dict) -> None:
    """YaRN as transformers computes it; `truncate` (rounding the ramp's ends, which llama.cpp
    always does and gpt-oss's config turns off) goes in a key of ours, rope.scaling.yarn_truncate."""
    from gguf import RopeScalingType
    if rope.get("mscale") or rope.get("mscale_all_dim"):
        raise ConversionError(f"{c.path}: YaRN mscale / mscale_all_dim are not supported by this converter")
    orig = rope.get("original_max_position_embeddings")
    if orig is None:
        raise ConversionError(f"{c.path}: YaRN needs original_max_position_embeddings")
    w.add_rope_scaling_type(RopeScalingType.YARN)
    w.add_rope_scaling_factor(float(rope.get("factor") or c.need("max_position_embeddings") / orig))
    w.add_rope_scaling_orig_ctx_len(int(orig))
    w.add_rope_scaling_yarn_beta_fast(float(rope.get("beta_fast") or 32.0))
    w.add_rope_scaling_yarn_beta_slow(float(rope.get("beta_slow") or 1.0))
    w.add_bool(f"{arch}.rope.scaling.yarn_truncate", bool(rope.get("truncate", True)))
    if rope.get("attention_factor") is not None:
        w.add_rope_scaling_attn_factors(float(rope["attention_factor"]))


def gpt_oss_hparams(w: GGUFWriter, c: Config) -> None:
    """The sliding window and what llama.cpp hard-codes for gpt-oss, checked against the config."""
    n_layer = c.need("num_hidden_layers")
    alternating = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n_layer)]
    if c.get("layer_types", alternating) != alternating:
        raise ConversionError(f"{c.path}: gpt-oss layer_types other than sliding/full alternating are not supported")
    if (c.get("swiglu_limit", 7.0), c.get("swiglu_alpha", 1.702)) != (7.0, 1.702):
        raise ConversionError(f"{c.path}: swiglu_limit / swiglu_alpha other than 7.0 / 1.702 are not supported")
    w.add_sliding_window(c.need("sliding_window"))
    w.add_expert_feed_forward_length(c.need("intermediate_size"))  # every expert is intermediate_size wide


def mxfp4_from_openai(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """OpenAI's MXFP4 (blocks (..., n_blocks, 16) uint8: value 2i in the low nibble of byte i,
    2i+1 in the high one; scales (..., n_blocks) e8m0 bytes) -> ggml's block_mxfp4 rows
    (..., n_blocks * 17) uint8: the scale byte, then qs[j] = value j | value j+16 << 4. ggml's
    codes are twice the FP4 values and its scale 2^(e-128), so the same bytes mean the same numbers."""
    if blocks.shape[-1] != 16 or blocks.shape[:-1] != scales.shape:
        raise ConversionError(f"MXFP4 blocks {blocks.shape} and scales {scales.shape} do not fit together")
    codes = np.stack([blocks & 0x0F, blocks >> 4], axis=-1).reshape(*blocks.shape[:-1], 32)  # value order
    qs = (codes[..., :16] | (codes[..., 16:] << 4)).astype(np.uint8)
    out = np.concatenate([scales[..., None].astype(np.uint8), qs], axis=-1)  # (..., n_blocks, 17)
    return out.reshape(*blocks.shape[:-2], blocks.shape[-2] * 17)


def fused_experts(ckpt: Checkpoint) -> Iterator[tuple[str, Callable[[], np.ndarray | Encoded]]]:
    """(GGUF name, loader) of each layer's expert tensors, from either form (module docstring)."""
    names = set(ckpt.names())
    for hf_name in sorted(names):
        m = FUSED_EXPERT_RE.match(hf_name)
        if not m or m.group(3) == "_scales":
            continue
        p, kind, form = f"blk.{m.group(1)}.", m.group(2), m.group(3) or ""
        gguf = {"down_proj": ["ffn_down_exps"], "gate_up_proj": ["ffn_gate_exps", "ffn_up_exps"]}[kind]
        suffix = ".bias" if form == "_bias" else ".weight"
        if form == "_blocks":
            scales = hf_name[:-len("_blocks")] + "_scales"
            if scales not in names:
                raise ConversionError(f"tensor {hf_name!r} has no {scales!r}")

            def load(hf_name=hf_name, scales=scales, part=None):
                b, s = ckpt.tensor(hf_name), ckpt.tensor(scales)  # rows are outputs, already
                if part is not None:
                    b, s = b[:, part::2], s[:, part::2]
                return Encoded(mxfp4_from_openai(b, s), GGMLQuantizationType.MXFP4)
        else:
            def load(hf_name=hf_name, part=None, bias=form == "_bias"):
                t = ckpt.tensor(hf_name).astype(np.float32)
                if part is not None:
                    t = t[..., part::2]
                return t if bias else np.ascontiguousarray(t.swapaxes(1, 2))
        if len(gguf) == 1:
            yield p + gguf[0] + suffix, load
        else:
            yield p + gguf[0] + suffix, partial(load, part=0)
            yield p + gguf[1] + suffix, partial(load, part=1)
