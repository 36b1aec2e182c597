"""What every encoder architecture (bert, nomic-bert, jina-bert-v2, modern-bert) shares: its
hyper-parameters, its layers as data, the one function that runs them, and the model around it.

    x = layer_norm( token_embd[t] + token_types[type] + position_embd[pos]? )      # embed
    per layer (bidirectional attention, no KV cache), post-norm (bert, nomic, jina):
        h = layer_norm( x + attn_output( attention( q(x), k(x), v(x) ) ) )        # rope on q, k (nomic)
                                                                                 # or ALiBi on the scores (jina)
        x = layer_norm( h + ffn(h) )        # ffn: up -> GELU -> down (bert); gate/up -> SwiGLU (nomic)
                                            # or GEGLU over the halves of up (jina) -> down
    or pre-norm (modern-bert: no biases, layer 0 without attn_norm, a sliding window on its local layers):
        h = x + attn_output( attention( attn_norm(x) ) )
        x = h + ffn( ffn_norm(h) )
    hidden = output_norm(x)?                # (B, L, n_embd): what pooling reads (llama.cpp's t_embd)
    head(pooled) = cls_out( cls_norm( act( cls(pooled) ) ) )   # a re-ranker's / classifier's head, each part
                                                               # optional; act tanh (gelu: modern-bert)

as llama.cpp builds it (src/models/bert.cpp, llm_graph_context::build_pooling), with its tensor
names (src/llama-arch.cpp). A forward pass runs a batch of texts padded to one length (EncoderBatch):
every matmul sees all B*L rows at once, so the C GEMM runs at full width, and padding is masked
out of the attention and of the pooling. `run_encoder_layers` is the one definition of the layer
stack; `ops` is the numpy reference (ops_reference) or the C kernels (ops), and the linear layers
are dense float32 (reference) or the file's quantized rows multiplied in C (weights.py).

An architecture subclasses EncoderModel and says which position scheme and FFN it has
(class attributes); arch/bert.py, nomic_bert.py, jina_bert.py and modern_bert.py (which loads its own
tensor names into these same layers). Differences from llama.cpp:
token types follow the input (a re-ranker's second segment is type 1, as transformers' tokenizer
makes it; llama.cpp always adds row 0), and the encoder runs only whole texts, never a cache.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..backend import ops_reference
from ..files.gguf_file import GGUFError, GGUFFile
from ..pooling import check_pooling, pool_rows
from .blocks import Attention, GatedMLP
from .deferred_repack import reading_weights
from .hparams import HParams, show
from .weights import Embedding, Linear, WeightLoader, build_with_loader

# llama.cpp's enum llama_pooling_type, the value of `{arch}.pooling_type` / `classifier.pooling_type`
GGUF_POOLING_TYPES = {0: "none", 1: "mean", 2: "cls", 3: "last", 4: "rank"}


class EncoderOnlyError(TypeError):
    """Generation asked of an encoder (it has no LM head and no causal attention)."""


class NoHeadError(ValueError):
    """Re-ranking or classification asked of an encoder without a classification head."""


@dataclass(frozen=True)
class EncoderConfig:
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    head_dim: int
    n_ff: int
    n_ctx_train: int  # the longest text (position_embd rows for bert)
    norm_eps: float  # attention.layer_norm_epsilon
    rope_base: float  # nomic-bert's rotary base (rope.freq_base); unused by the others
    pooling: str | None  # `{arch}.pooling_type` by name, None when the file names none
    head_pooling: str  # which row the classification head reads: "cls" or "mean" (classifier.pooling_type)
    labels: tuple[str, ...]  # classifier.output_labels; () when the file has none
    n_swa: int = 0  # attention.sliding_window: a local layer's query i sees keys |i - j| <= n_swa // 2
    swa_layers: tuple[bool, ...] = ()  # per layer, True for a local (sliding-window) layer; () for none
    rope_base_swa: float = 10000.0  # rope.freq_base_swa: the local layers' rotary base (modern-bert)

    default_head_pooling: ClassVar[str] = "cls"  # when the file has no classifier.pooling_type

    @property
    def n_head_kv(self) -> int:  # blocks.Attention reads it; encoders have no grouped K/V
        return self.n_head

    @classmethod
    def from_gguf(cls, f: GGUFFile) -> "EncoderConfig":
        h = HParams(f)
        n_embd, n_head = h.count("embedding_length"), h.count("attention.head_count")
        if h.head_count_kv(n_head) != n_head:
            raise h.error("attention.head_count_kv", h.count("attention.head_count_kv"),
                          f"an encoder needs as many K/V heads as query heads ({n_head})")
        if h.has("attention.causal") and f.metadata[h.key("attention.causal")] is not False:
            raise h.error("attention.causal", f.metadata[h.key("attention.causal")],
                          f"{f.architecture} is an encoder: its attention is bidirectional")
        labels = f.metadata.get(h.key("classifier.output_labels"), [])
        if not isinstance(labels, list) or not all(isinstance(s, str) for s in labels):
            raise h.error("classifier.output_labels", labels, "must be a list of strings")
        head_pooling = _pooling_name(h, "classifier.pooling_type") or cls.default_head_pooling
        if head_pooling not in ("cls", "mean"):
            raise h.error("classifier.pooling_type", head_pooling, "the head reads the first row (cls) or the mean")
        return cls(n_vocab=h.vocab_size(n_embd), n_embd=n_embd, n_layer=h.block_count(), n_head=n_head,
                   head_dim=h.head_dim(n_embd, n_head), n_ff=h.count("feed_forward_length"),
                   n_ctx_train=h.count("context_length", 512), norm_eps=h.real("attention.layer_norm_epsilon", 1e-12),
                   rope_base=h.real("rope.freq_base", 10000.0), pooling=_pooling_name(h, "pooling_type"),
                   head_pooling=head_pooling, labels=tuple(labels))


def _pooling_name(h: HParams, suffix: str) -> str | None:
    if not h.has(suffix):
        return None
    value = h.f.metadata[h.key(suffix)]
    if isinstance(value, bool) or not isinstance(value, int) or value not in GGUF_POOLING_TYPES:
        raise h.error(suffix, value, f"must be one of {GGUF_POOLING_TYPES} (llama.cpp's llama_pooling_type)")
    return GGUF_POOLING_TYPES[value]


@dataclass
class LayerNorm:
    weight: np.ndarray  # (dim,)
    bias: np.ndarray | None  # (dim,); None: a norm without one (modern-bert)

    @classmethod
    def from_gguf(cls, w: WeightLoader, name: str, dim: int, bias: bool = True) -> "LayerNorm":
        """`name`.weight and, with `bias`, `name`.bias, each required (llama.cpp loads bert's norms with
        both and modern-bert's with the weight only)."""
        return cls(w.vector(name + ".weight", (dim,)), w.vector(name + ".bias", (dim,)) if bias else None)

    def __call__(self, ops, x: np.ndarray, eps: float) -> np.ndarray:
        return ops.layer_norm(x, self.weight, self.bias, eps)


@dataclass
class SequentialMLP:
    """down(act(up(h))), biases optional: BERT's intermediate/output dense (llama.cpp's LLM_FFN_SEQ)."""

    w_up: Linear  # (n_ff, n_embd)
    w_down: Linear  # (n_embd, n_ff)

    @classmethod
    def from_gguf(cls, w: WeightLoader, p: str, c) -> "SequentialMLP":
        return cls(w_up=w.linear(p + "ffn_up.weight", (c.n_ff, c.n_embd), bias=p + "ffn_up.bias"),
                   w_down=w.linear(p + "ffn_down.weight", (c.n_embd, c.n_ff), bias=p + "ffn_down.bias"))

    def __call__(self, h: np.ndarray, act) -> np.ndarray:
        return self.w_down(act(self.w_up(h)))


# act name -> the FFN's activation given the ops module: one input (sequential) or gate and up (gated)
ENCODER_ACTIVATIONS = {
    "gelu": lambda ops: ops.gelu,  # bert: ggml_gelu (the tanh form, from ggml's f16 table)
    "swiglu": lambda ops: ops.swiglu,  # nomic-bert: silu(gate) * up
    "geglu": lambda ops: ops.geglu,  # jina-bert-v2: gelu(first half of up) * second half
}


@dataclass
class EncoderLayer:
    attn: Attention  # q/k/v (biases optional) or one fused attn_qkv; attn_output (+ bias)
    mlp: SequentialMLP | GatedMLP  # up -> down, or gate/up -> down (gate ‖ up in one matrix: jina, modern)
    act: str  # a key of ENCODER_ACTIVATIONS
    attn_out_norm: LayerNorm | None = None  # post-norm of x + attention (bert, nomic, jina)
    out_norm: LayerNorm | None = None  # post-norm of h + ffn
    attn_norm: LayerNorm | None = None  # pre-norm of the attention's input (modern-bert; none in layer 0)
    ffn_norm: LayerNorm | None = None  # pre-norm of the ffn's input (modern-bert)
    swa: bool = False  # a local layer: the sliding window and the local rope base (EncoderParams)


@dataclass
class EncoderWeights:
    token_embd: Embedding  # (n_vocab, n_embd)
    token_types: Embedding | None  # (n_token_types, n_embd); the architecture says if it is required
    position_embd: Embedding | None  # (n_ctx_train, n_embd): bert's absolute positions
    embd_norm: LayerNorm  # token_embd_norm
    layers: list[EncoderLayer]
    cls: Linear | None  # (n_cls_hidden, n_embd) + bias, then tanh: the head's dense layer (BERT's pooler)
    cls_out: Linear | None  # (n_cls_out, n_cls_hidden or n_embd) + bias: the head's projection to scores
    output_norm: LayerNorm | None = None  # the norm after the last layer (pre-norm stacks: modern-bert)
    cls_norm: LayerNorm | None = None  # (n_cls_hidden,) the head's norm after its activation (modern-bert)


@dataclass(frozen=True)
class EncoderParams:
    """What every layer of one pass shares: the attention's scale and position scheme."""

    scale: float  # multiplies q.k: 1/sqrt(head_dim)
    inv_freq: np.ndarray | None = None  # (head_dim/2,) NeoX rope frequencies (nomic-bert, modern-bert)
    alibi_slopes: np.ndarray | None = None  # (n_head,) ALiBi slopes (jina-bert-v2)
    inv_freq_swa: np.ndarray | None = None  # (head_dim/2,) the local layers' rope frequencies (modern-bert)
    n_swa: int = 0  # the local layers' window: keys |i - j| <= n_swa // 2 (llama.cpp's SWA_TYPE_SYMMETRIC)


@dataclass
class EncoderBatch:
    """Texts padded to one length: the rows past a text's length are padding (token 0, type 0)."""

    tokens: np.ndarray  # (B, L) int64
    types: np.ndarray  # (B, L) int64 token types: 0 for the first segment, 1 for a pair's second
    lengths: np.ndarray  # (B,) int64, each >= 1

    @classmethod
    def pad(cls, token_lists, type_lists=None) -> "EncoderBatch":
        lengths = np.array([len(t) for t in token_lists], np.int64)
        if not len(lengths) or lengths.min() < 1:
            raise ValueError("an encoder batch needs at least one text, none of them empty")
        tokens = np.zeros((len(lengths), int(lengths.max())), np.int64)
        types = np.zeros_like(tokens)
        for i, t in enumerate(token_lists):
            tokens[i, :len(t)] = t
            if type_lists is not None:
                if len(type_lists[i]) != len(t):
                    raise ValueError(f"text {i}: {len(type_lists[i])} token types for {len(t)} tokens")
                types[i, :len(t)] = type_lists[i]
        return cls(tokens, types, lengths)

    @property
    def positions(self) -> np.ndarray:
        """(B*L,) each row's position within its text."""
        n_batch, n_len = self.tokens.shape
        return np.tile(np.arange(n_len, dtype=np.int64), n_batch)


def run_encoder_layers(ops, layers: list[EncoderLayer], x: np.ndarray, batch: EncoderBatch, c: EncoderConfig,
                       p: EncoderParams) -> np.ndarray:
    """x (B*L, n_embd) after the embedding -> x after every layer, with `ops` (ops_reference or ops):
    the one definition of an encoder's layer stack."""
    n_batch, n_len = batch.tokens.shape
    positions = batch.positions if p.inv_freq is not None else None

    def norm(n: LayerNorm | None, y: np.ndarray) -> np.ndarray:  # a norm the layer may not have
        return y if n is None else n(ops, y, c.norm_eps)
    for layer in layers:
        q, k, v = layer.attn.project(norm(layer.attn_norm, x), c)  # (B*L, n_head, head_dim) each
        inv_freq = p.inv_freq_swa if layer.swa else p.inv_freq
        if positions is not None:
            q = ops.apply_rope(q, positions, inv_freq, True)
            k = ops.apply_rope(k, positions, inv_freq, True)
        shape = (n_batch, n_len, c.n_head, c.head_dim)
        a = ops.encoder_attention(q.reshape(shape), k.reshape(shape), v.reshape(shape), batch.lengths, p.scale,
                                  p.alibi_slopes, p.n_swa if layer.swa else 0)
        h = norm(layer.attn_out_norm, x + layer.attn.wo(a.reshape(n_batch * n_len, -1)))
        x = norm(layer.out_norm, h + layer.mlp(norm(layer.ffn_norm, h), ENCODER_ACTIVATIONS[layer.act](ops)))
    return x


class EncoderModel:
    """hidden(batch) -> (B, L, n_embd); head(pooled) -> scores. No cache, no logits over the vocabulary."""

    is_encoder = True  # Model and the serving layer route embed/rerank/classify here, refuse generation
    positions: ClassVar[str]  # "absolute" (position_embd), "rope" or "alibi"
    ffn: ClassVar[str]  # "sequential" (up -> down) or "gated"
    act: ClassVar[str]  # a key of ENCODER_ACTIVATIONS
    token_types_required: ClassVar[bool] = False  # llama.cpp requires token_types (jina-bert-v2)
    config_class = EncoderConfig

    def __init__(self, config: EncoderConfig, weights: EncoderWeights, ops=ops_reference):
        self.config, self.weights, self.ops = config, weights, ops

    # -- loading ---------------------------------------------------------------------------------
    @classmethod
    def from_gguf(cls, f: GGUFFile, backend: str = "reference", repack: bool = False) -> "EncoderModel":
        config = cls.config_class.from_gguf(f)
        return build_with_loader(cls, f, config, backend, repack)

    @classmethod
    def load_weights(cls, w: WeightLoader, c: EncoderConfig) -> EncoderWeights:
        mlp = SequentialMLP.from_gguf if cls.ffn == "sequential" else GatedMLP.from_gguf
        layers = [EncoderLayer(attn=Attention.from_gguf(w, f"blk.{i}.", c), mlp=mlp(w, f"blk.{i}.", c), act=cls.act,
                               attn_out_norm=LayerNorm.from_gguf(w, f"blk.{i}.attn_output_norm", c.n_embd),
                               out_norm=LayerNorm.from_gguf(w, f"blk.{i}.layer_output_norm", c.n_embd))
                  for i in range(c.n_layer)]
        for layer_tensor in ("attn_q_norm", "attn_k_norm", "attn_norm_2"):  # jina-bert-v2's code variant
            if w.has(f"blk.0.{layer_tensor}.weight"):
                raise GGUFError(f"{w.f.path}: blk.0.{layer_tensor}.weight: this {w.f.architecture} variant "
                                "(norms inside the attention) is not supported")
        return EncoderWeights(
            token_embd=w.embedding("token_embd.weight", (c.n_vocab, c.n_embd)),
            token_types=cls._token_types(w, c),
            position_embd=(w.embedding("position_embd.weight", (c.n_ctx_train, c.n_embd))
                           if cls.positions == "absolute" else None),
            embd_norm=LayerNorm.from_gguf(w, "token_embd_norm", c.n_embd), layers=layers, **_head(w, c))

    @classmethod
    def _token_types(cls, w: WeightLoader, c: EncoderConfig) -> Embedding | None:
        info = w.f.tensors.get("token_types.weight")
        if info is None and not cls.token_types_required:
            return None
        n_types = info.shape[0] if info is not None and len(info.shape) == 2 else 2
        count = w.f.metadata.get("tokenizer.ggml.token_type_count")
        if count is not None and count != n_types:
            raise GGUFError(f"{w.f.path}: tokenizer.ggml.token_type_count = {show(count)}, "
                            f"but token_types.weight has {n_types} rows")
        return w.embedding("token_types.weight", (n_types, c.n_embd))

    # -- what an architecture may change ------------------------------------------------------------
    def layer_params(self) -> EncoderParams:
        return EncoderParams(scale=1.0 / float(np.sqrt(self.config.head_dim)))

    # -- the forward pass --------------------------------------------------------------------------
    def embed(self, batch: EncoderBatch) -> np.ndarray:
        """(B, L) ids -> (B*L, n_embd): token (+ token type) (+ position) embeddings, then their norm.
        The sums in llama.cpp's order: (token + type) + position."""
        w = self.weights
        x = w.token_embd(batch.tokens.reshape(-1))
        if w.token_types is not None:
            x = x + w.token_types(self._checked_types(batch).reshape(-1))
        if w.position_embd is not None:
            x = x + w.position_embd(batch.positions)
        return w.embd_norm(self.ops, x, self.config.norm_eps)

    def _checked_types(self, batch: EncoderBatch) -> np.ndarray:
        n_types = self.weights.token_types.shape[0]
        if batch.types.min() < 0 or batch.types.max() >= n_types:
            raise ValueError(f"token types must be in 0..{n_types - 1} (the model has {n_types})")
        return batch.types

    def hidden(self, batch: EncoderBatch) -> np.ndarray:
        """-> (B, L, n_embd) float32, the last layer's output (padding rows are meaningless)."""
        self.check_batch(batch)
        x = run_encoder_layers(self.ops, self.weights.layers, self.embed(batch), batch, self.config,
                               self.layer_params())
        if self.weights.output_norm is not None:
            x = self.weights.output_norm(self.ops, x, self.config.norm_eps)
        return x.reshape(*batch.tokens.shape, self.config.n_embd)

    def check_batch(self, batch: EncoderBatch) -> None:
        c = self.config
        if batch.tokens.min() < 0 or batch.tokens.max() >= c.n_vocab:
            bad = int(batch.tokens.max() if batch.tokens.max() >= c.n_vocab else batch.tokens.min())
            raise ValueError(f"unknown token id {bad} (the vocabulary has {c.n_vocab} tokens)")
        if batch.lengths.max() > c.n_ctx_train:
            raise ValueError(f"a text of {int(batch.lengths.max())} tokens is longer than the "
                             f"{c.n_ctx_train} this encoder takes")

    def pooled(self, batch: EncoderBatch, pooling: str) -> np.ndarray | list[np.ndarray]:
        """One forward pass, pooled (pooling.py): "none" -> B arrays (n_i, n_embd) float32; "mean",
        "cls", "last" -> (B, n_embd) float64; "rank" -> (B, n_cls_out) float32, the head's scores."""
        check_pooling(pooling)
        if pooling == "rank" and not self.n_cls_out:
            raise NoHeadError(f"this {type(self).__name__} has no classification head (no cls / cls.output "
                              "tensors): it is an embedder; use embed, not rerank or classify")
        with reading_weights(self):   # the matrices being swapped in after load (arch/deferred_repack.py)
            hidden = self.hidden(batch)
            if pooling == "rank":
                return self.head(pool_rows(hidden, batch.lengths, self.config.head_pooling))
        return pool_rows(hidden, batch.lengths, pooling)

    # -- the classification head ---------------------------------------------------------------------
    @property
    def n_cls_out(self) -> int:
        """Scores the head makes per text (1 for a re-ranker); 0 when the model has no head."""
        w = self.weights
        head = w.cls_out if w.cls_out is not None else w.cls
        return 0 if head is None else head.shape[0]

    head_act: ClassVar[str] = "tanh"  # the head's activation after cls: "tanh" or "gelu" (ggml_gelu)

    def head(self, pooled: np.ndarray) -> np.ndarray:
        """pooled (B, n_embd) -> (B, n_cls_out) float32: cls_out(cls_norm(act(cls(pooled)))) with the
        parts the file has (llama.cpp's LLAMA_POOLING_TYPE_RANK head). The caller checks n_cls_out first."""
        w = self.weights
        x = np.ascontiguousarray(pooled, dtype=np.float32)
        if w.cls is not None:
            x = w.cls(x)
            x = np.tanh(x) if self.head_act == "tanh" else self.ops.gelu(x)
            if w.cls_norm is not None:
                x = w.cls_norm(self.ops, x, self.config.norm_eps)
        if w.cls_out is not None:
            x = w.cls_out(x)
        return x

    # -- what a decoder has and an encoder does not -----------------------------------------------------
    def new_cache(self, *args, **kwargs):
        raise EncoderOnlyError(f"encoder model ({type(self).__name__}): use embed/rerank/classify; "
                               "it keeps no cache and cannot generate text")

    forward = forward_batch = hidden_batch = new_cache


def _head(w: WeightLoader, c: EncoderConfig) -> dict:
    """cls (+ bias) and cls.output (+ bias), each optional; their shapes chain, and the labels, when the
    file names them, are one per output."""
    cls_info, out_info = w.f.tensors.get("cls.weight"), w.f.tensors.get("cls.output.weight")
    cls = out = None
    n_hidden = c.n_embd
    if cls_info is not None:
        n_hidden = cls_info.shape[0] if len(cls_info.shape) == 2 else c.n_embd
        cls = w.linear("cls.weight", (n_hidden, c.n_embd), bias="cls.bias")
    if out_info is not None:
        n_out = out_info.shape[0] if len(out_info.shape) == 2 else 1
        out = w.linear("cls.output.weight", (n_out, n_hidden), bias="cls.output.bias")
    n_cls_out = out.shape[0] if out is not None else cls.shape[0] if cls is not None else 0
    if c.labels and len(c.labels) != n_cls_out:
        raise GGUFError(f"{w.f.path}: {w.f.architecture}.classifier.output_labels names {len(c.labels)} labels, "
                        f"but the classification head makes {n_cls_out} scores")
    return {"cls": cls, "cls_out": out}
