"""Hyperparameters read from GGUF metadata, each checked where it is read, before anything is
sized by it.

A GGUF file is untrusted: one metadata value sizes the rope tables, the KV cache and every weight
the loader expects, and a zero, a NaN or a negative value turns into a division by zero or NaN
logits far from the key that caused it. So the architectures' configs read their keys through
`HParams`, which checks
- each value alone: counts are integers in 1..MAX_COUNT (0 only where the key means "none"),
  floats are finite and positive (or >= 0 where 0 means "none"), and in REAL_RANGES where a key
  has a range outside which no model works;
- the values against each other: a head size derived from n_embd / n_head divides evenly,
  n_head is a multiple of n_head_kv, the rope dimension is even and at most the head size;
- the counts against the tensors: block_count is the number of blk.N layers the file has,
  embedding_length and the vocabulary are the shape of token_embd.weight.
Every weight's own shape is then checked against the config by the loader (weights.py) before
its buffer is made. A failure is one line naming the key and its value, e.g.

    model.gguf: llama.attention.head_count = 0: must be a positive integer
"""
from __future__ import annotations

import math
import re
from typing import Any

from ..files.gguf_file import GGUFError, GGUFFile

MAX_COUNT = 2**31 - 1  # llama.cpp keeps hyperparameters in 32-bit integers; no real model comes near
# Floats that are finite and positive can still be nonsense that loads and talks garbage (an epsilon
# of 1e30 flattens every norm to zero; empty output, no error): suffix -> (least, most) accepted.
REAL_RANGES = {
    # a guard against dividing by zero, far below an activation's mean square; real models: 1e-6 .. 1e-5
    "attention.layer_norm_rms_epsilon": (0.0, 1.0),
    # RoPE's wavelengths grow with the base; below 1 they shrink instead. Real models: 1e4 .. ~4e9
    # (Llama-3 long-context fine-tunes); 1e12 leaves room without reaching float32's limits.
    "rope.freq_base": (1.0, 1e12),
    "rope.freq_base_swa": (1.0, 1e12),
}
_LAYER_TENSOR = re.compile(r"blk\.(\d{1,9})\.")  # llama.cpp's per-layer tensor names, "blk.N.*"


def show(value: Any) -> str:
    """A value from the file for an error message: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class HParams:
    """The `{architecture}.*` keys of one file, read as checked integers, floats and strings."""

    def __init__(self, f: GGUFFile):
        self.f, self.arch = f, f.architecture

    def key(self, suffix: str) -> str:
        return f"{self.arch}.{suffix}"

    def has(self, suffix: str) -> bool:
        return self.key(suffix) in self.f.metadata

    def error(self, suffix: str, value: Any, why: str) -> GGUFError:
        return GGUFError(f"{self.f.path}: {self.key(suffix)} = {show(value)}: {why}")

    def _value(self, suffix: str, default: Any) -> tuple[bool, Any]:
        """(present, value): the key's value, or the default when it is absent and has one."""
        if self.has(suffix):
            return True, self.f.metadata[self.key(suffix)]
        if default is ...:
            raise GGUFError(f"{self.f.path}: missing metadata key {self.key(suffix)!r}")
        return False, default

    # -- single values --------------------------------------------------------------------------
    def count(self, suffix: str, default: Any = ..., minimum: int = 1) -> Any:
        """An integer in minimum..MAX_COUNT (minimum 0 where 0 means "none"), or `default`."""
        present, value = self._value(suffix, default)
        if not present:
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(suffix, value, "must be an integer")
        if value < minimum:
            raise self.error(suffix, value, "must be a positive integer" if minimum == 1 else f"must be >= {minimum}")
        if value > MAX_COUNT:
            raise self.error(suffix, value, f"must be at most {MAX_COUNT}")
        return value

    def real(self, suffix: str, default: Any = ..., zero_means_none: bool = False) -> Any:
        """A finite float, > 0 (>= 0 with `zero_means_none`), or `default`."""
        present, value = self._value(suffix, default)
        if not present:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(suffix, value, "must be a number")
        value = float(value)
        if not math.isfinite(value):
            raise self.error(suffix, value, "must be a finite number")
        if value < 0 or (value == 0 and not zero_means_none):
            raise self.error(suffix, value, "must be >= 0 (0: none)" if zero_means_none else "must be positive")
        least, most = REAL_RANGES.get(suffix, (0.0, math.inf))
        if not least <= value <= most:
            raise self.error(suffix, value, f"must be between {least:g} and {most:g}")
        return value

    def text(self, suffix: str, default: Any = ...) -> Any:
        present, value = self._value(suffix, default)
        if present and not isinstance(value, str):
            raise self.error(suffix, value, "must be a string")
        return value

    # -- values checked against each other and against the tensors --------------------------------
    def head_count_kv(self, n_head: int) -> int:
        n_head_kv = self.count("attention.head_count_kv", n_head)
        if n_head % n_head_kv:  # each KV head serves the same number of query heads
            raise self.error("attention.head_count_kv", n_head_kv,
                             f"must divide {self.key('attention.head_count')} = {n_head}")
        return n_head_kv

    def head_dim(self, n_embd: int, n_head: int) -> int:
        """attention.key_length, or n_embd / n_head when the file does not say."""
        if self.has("attention.key_length"):
            return self.count("attention.key_length")
        if n_embd % n_head:
            raise self.error("embedding_length", n_embd, f"is not a multiple of {self.key('attention.head_count')} "
                             f"= {n_head} (and there is no {self.key('attention.key_length')})")
        return n_embd // n_head

    def rope_dimension_count(self, head_dim: int) -> int:
        """How many dimensions of each head RoPE rotates: pairs of them, at most the whole head."""
        n_rot = self.count("rope.dimension_count", head_dim)
        if n_rot % 2:
            raise self.error("rope.dimension_count", n_rot, "must be even (RoPE rotates pairs of dimensions)")
        if n_rot > head_dim:
            raise self.error("rope.dimension_count", n_rot, f"must be at most the head size {head_dim}")
        return n_rot

    def block_count(self) -> int:
        """block_count, which must be the number of layers the file has tensors for (blk.0 .. blk.N-1)."""
        n_layer = self.count("block_count")
        layers = {int(m.group(1)) for name in self.f.tensors if (m := _LAYER_TENSOR.match(name))}
        if len(layers) != n_layer or max(layers) != n_layer - 1:
            have = f"{len(layers)} layers (blk.0 .. blk.{max(layers)})" if layers else "no layer"
            raise self.error("block_count", n_layer, f"the file has tensors for {have}")
        return n_layer

    def vocab_size(self, n_embd: int) -> int:
        """vocab_size, else the tokenizer's token count; token_embd.weight must be (n_vocab, n_embd)
        and hold a row for every token (the loader checks the tensor again when it maps it)."""
        tokens = self.f.metadata.get("tokenizer.ggml.tokens")
        n_tokens = len(tokens) if isinstance(tokens, list) else 0
        n_vocab = self.count("vocab_size", n_tokens or None)
        if n_vocab is None:
            raise GGUFError(f"{self.f.path}: cannot tell the vocabulary size "
                            f"(no {self.key('vocab_size')} and no tokenizer.ggml.tokens)")
        if n_tokens > n_vocab:
            raise self.error("vocab_size", n_vocab, f"but tokenizer.ggml.tokens has {n_tokens} tokens")
        embd = self.f.tensors.get("token_embd.weight")
        if embd is not None and len(embd.shape) == 2:  # a missing or 1-D one: the loader names it
            if embd.shape[1] != n_embd:
                raise self.error("embedding_length", n_embd, f"but token_embd.weight has shape {embd.shape}")
            if embd.shape[0] != n_vocab:
                what = (f"{self.key('vocab_size')} = {n_vocab}" if self.has("vocab_size")
                        else f"tokenizer.ggml.tokens has {n_vocab} tokens")
                raise GGUFError(f"{self.f.path}: {what}, but token_embd.weight has shape {embd.shape}")
        return n_vocab
