"""What every decoder architecture shares around its own layers: loading, the cache, the two
executors of the layer stack, and the forward pass's frame.

    x = embed(tokens)                                   # the architecture's (gemma3 scales it)
    x = run_layers(...)   or   FusedLayers.run(...)     # the same DecoderLayer data, numpy/C ops or one C call
    logits = head(x)                                    # final norm, output matrix (gemma3: softcap)

An architecture subclasses DecoderModel and writes `config_class`, `load_weights` (whose result has
`layers`, a list of arch/layer.py's DecoderLayer), `embed`, `head` and `layer_params`;
docs/architectures.md says how.
"""
from __future__ import annotations

import contextlib
from typing import Any, ClassVar

import numpy as np

from ..backend import ops_reference
from ..files.gguf_file import GGUFFile
from ..kv.cache import InterleavedKVCache, KVCache
from .batch import Batch
from .deferred_repack import reading_weights
from .fused import FusedLayers
from .layer import LayerParams, run_layers
from .weights import WeightLoader, build_with_loader, observing


class DecoderModel:
    """forward(tokens, cache) -> logits; the cache holds everything that depends on the past."""

    config_class: ClassVar[Any]  # has from_gguf(f) -> the frozen hyper-parameters

    def __init__(self, config, weights, ops=ops_reference):
        self.config, self.weights = config, weights
        self.ops = ops  # ops_reference (numpy) or ops (C): the same functions, so the model never branches
        self.fuse, self._fused = True, None  # fuse = False keeps the Python loop (to compare the two)
        self._fused_version = 0  # the weights_version _fused was built from
        self.gpu_layers = None  # backend/cuda/layers.py's CudaLayers: the first layers on the device (-ngl)

    # -- what an architecture writes ------------------------------------------------------------
    @classmethod
    def load_weights(cls, loader: WeightLoader, config):
        raise NotImplementedError

    def embed(self, tokens: np.ndarray) -> np.ndarray:
        """(n,) ids -> (n, n_embd) float32"""
        raise NotImplementedError

    def head(self, x: np.ndarray) -> np.ndarray:
        """(n, n_embd) -> (n, n_vocab) logits: output_norm, then the output matrix (and any cap)"""
        raise NotImplementedError

    def output_norm(self, x: np.ndarray) -> np.ndarray:
        """(n, n_embd) -> (n, n_embd): the final norm before the output matrix. Its result is the
        hidden state llama.cpp pools into embeddings (t_embd, "result_norm" in its graphs)."""
        w = self.weights
        return self.ops.rms_norm(x, w.output_norm, self.config.rms_eps)

    def layer_params(self, batch: Batch) -> LayerParams:
        """What every layer of this batch's forward pass shares (rope frequencies, scales, pairing)."""
        raise NotImplementedError

    # -- shared ---------------------------------------------------------------------------------
    @classmethod
    def from_gguf(cls, f: GGUFFile, backend: str = "reference", repack: bool = False) -> "DecoderModel":
        config = cls.config_class.from_gguf(f)
        cls.check_config(f, config)
        return build_with_loader(cls, f, config, backend, repack)

    @classmethod
    def check_config(cls, f: GGUFFile, config) -> None:
        """A GGUFError for a file this class reads but cannot run (llama: an unknown rope scaling)."""

    def new_cache(self, n_ctx: int, dtype=np.float16):
        """A KVCache; with sliding-window layers (gemma3, gpt-oss), an InterleavedKVCache whose ring
        holds their K/V, so that their memory does not grow with the context."""
        c = self.config
        windows = [layer.window for layer in self.weights.layers]
        if not any(windows):
            return KVCache(c.n_layer, n_ctx, c.n_head_kv, c.head_dim, dtype)
        if len(set(windows) - {None}) > 1:
            raise ValueError(f"sliding-window layers of several widths: {sorted(set(windows) - {None})}")
        window = next(w for w in windows if w)
        return InterleavedKVCache([w is not None for w in windows], n_ctx, c.n_head_kv, c.head_dim, window, dtype)

    def layers(self, x: np.ndarray, batch: Batch) -> np.ndarray:
        """(n, n_embd) -> (n, n_embd) through every layer with self.ops: the readable path."""
        return run_layers(self.ops, self.weights.layers, x, batch, self.config, self.layer_params(batch))

    def fused_layers(self) -> FusedLayers | None:
        """The layer stack as one C call (arch/fused.py) when every weight is on the C kernels
        (built on first use); None with `self.fuse = False`."""
        if not self.fuse:
            return None
        version = getattr(self, "weights_version", 0)   # a matrix swapped in (arch/deferred_repack.py)
        if self._fused is None or self._fused_version != version:
            self._fused, self._fused_version = FusedLayers.build(self) or False, version
        return self._fused or None

    def forward(self, tokens: np.ndarray, cache, last_only: bool = False, batched: bool = False) -> np.ndarray:
        """tokens: (n,) int ids at positions cache.offset.. -> logits (n, n_vocab) float32,
        or (1, n_vocab) for the last token only with `last_only`; batched as forward_batch."""
        return self.forward_batch([(tokens, cache)], last_only, batched=batched)[0]

    def forward_batch(self, seqs, last_only: bool = False, n_last: list[int] | None = None,
                      batched: bool = False, alone: list[bool] | None = None) -> list[np.ndarray]:
        """seqs: [(tokens, cache), ...], each sequence with its own cache -> its logits, as forward().
        n_last: per sequence, logits of its last n_last[i] rows only (speculative verification
        needs several rows of a decoding sequence, a prefilling one its last). batched: each row
        has the bits of a pass of many rows, however few there are (ops.batched_rows: the rest of a
        prompt whose first tokens came from a cache, a prompt scored in chunks) -- the output matrix
        too, except for last_only's last rows, which the pass of a whole prompt computes alone.
        alone (with n_last): per sequence, whether its last row's logits are also computed by
        themselves, as a decode step or the last row of a plain prompt gets them (the token after a
        scored prompt: its logits as without the scoring)."""
        with reading_weights(self):
            return self._forward_batch(seqs, last_only, n_last, batched, alone)

    def _forward_batch(self, seqs, last_only, n_last, batched, alone) -> list[np.ndarray]:
        batch = Batch(seqs)
        with self.ops.batched_rows() if batched else contextlib.nullcontext():
            x = self._run_layers(batch)
            if n_last is not None:
                rows = np.concatenate([np.arange(s.stop - n, s.stop) for s, n in zip(batch.spans, n_last)])
                out = np.split(self.head(x[rows]), np.cumsum(n_last)[:-1])
            elif not last_only:
                return batch.split(self.head(x), last_only=False)
        if n_last is None:
            return batch.split(self.head(batch.last_rows(x)), last_only=True)
        for i, span in enumerate(batch.spans):
            if alone is not None and alone[i]:
                out[i] = out[i].copy()
                out[i][-1] = self.head(x[span.stop - 1:span.stop])[0]
        return out

    def hidden_batch(self, seqs) -> list[np.ndarray]:
        """seqs as forward_batch -> each sequence's final hidden states (n_i, n_embd) float32,
        after output_norm and before the output matrix (what embeddings pool; no logits made).
        Batched (forward_batch): a text's vector does not depend on the texts beside it."""
        batch = Batch(seqs)
        with reading_weights(self), self.ops.batched_rows():
            x = self._run_layers(batch)
        return batch.split(self.output_norm(x), last_only=False)

    def _run_layers(self, batch: Batch) -> np.ndarray:
        """The batch's tokens through embed and every layer -> (n_rows, n_embd); caches advanced."""
        x = self.embed(batch.tokens)  # (n, n_embd)
        if self.gpu_layers is not None:  # the first layers on the device, the rest here
            params, first = self.layer_params(batch), self.gpu_layers.n_layers
            x = self.gpu_layers.run(x, batch, params)
            x = run_layers(self.ops, self.weights.layers[first:], x, batch, self.config, params, first)
            batch.advance()
            return x
        fused = self.fused_layers()
        # `layers` in one C call, bit for bit (arch/fused.py); not while a matmul observer watches
        if fused is not None and fused.applies(batch) and not observing():
            x = fused.run(x, batch, self.layer_params(batch))
        else:
            x = self.layers(x, batch)
        batch.advance()
        return x
