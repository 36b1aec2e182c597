"""Tiny random encoders of each family as Hugging Face folders (config.json + model.safetensors),
with the torch model that is the oracle for each, for tests/model/test_encoder_oracle.py.

- bert: transformers' BertModel; bert_rerank: BertForSequenceClassification with one output (a
  cross-encoder re-ranker); bert_classify: the same with three named labels.
- nomic: transformers' NomicBertModel (in transformers since 5.x), which saves nomic's own tensor
  names (Wqkv, fc11, fc12, emb_ln ...) beside transformers' config keys.
- jina: jina-bert-v2 is trust_remote_code (jinaai/jina-bert-implementation), not in transformers,
  so `JinaBertReference` below is a small readable torch model of the published architecture:
  word + token-type embeddings and a LayerNorm; per layer query/key/value with biases, scores
  q.k/sqrt(d) - slope_h * |i - j| (ALiBi, the paper's slopes), softmax, output dense + LayerNorm
  of the residual; gated_layers (no bias) whose first half goes through GELU (the exact, erf form:
  torch's nn.GELU) and multiplies the second, wo, LayerNorm of the residual. It saves the hub
  checkpoint's tensor names and config keys.
- modern: transformers' ModernBertModel, three layers (global, local, global: every second layer
  global) with a sliding window of MODERN_WINDOW tokens, shorter than most test texts, and rope bases
  160000 (global) / 10000 (local); modern_rerank: ModernBertForSequenceClassification with one
  output whose head reads the mean of the rows (classifier_pooling "mean").

Needs torch and transformers (the `oracle` extra); callers importorskip them.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

N_VOCAB, N_EMBD, N_HEAD, N_FF, N_LAYER, N_CTX = 120, 64, 4, 96, 2, 64
BERT = dict(vocab_size=N_VOCAB, hidden_size=N_EMBD, num_hidden_layers=N_LAYER, num_attention_heads=N_HEAD,
            intermediate_size=N_FF, max_position_embeddings=N_CTX, type_vocab_size=2, layer_norm_eps=1e-12)
FAMILIES = ("bert", "nomic", "jina", "modern", "bert_rerank", "bert_classify")
GGUF_ARCH = {"bert": "bert", "nomic": "nomic-bert", "jina": "jina-bert-v2", "bert_rerank": "bert",
             "bert_classify": "bert", "modern": "modern-bert", "modern_rerank": "modern-bert"}
MODERN_WINDOW = 8  # local_attention: a local layer's token sees 4 on each side
CLASSIFY_LABELS = {0: "negative", 1: "neutral", 2: "positive"}
CLS, SEP = 2, 3  # the token ids the tests use for [CLS] and [SEP] (the folders carry no vocabulary)


def randomize(model, seed: int) -> None:
    """Weights of order 1 so that a layout mistake shows: embedding tables N(0, 1), matrices
    N(0, 1/fan_in), norm weights 1 + N(0, 0.2), biases N(0, 0.5)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g, dtype=p.dtype)
            if "embeddings" in name and p.ndim == 2:
                p.copy_(r)
            elif p.ndim >= 2:
                p.copy_(r / p.shape[-1] ** 0.5)
            elif name.endswith("bias"):
                p.copy_(0.5 * r)
            else:
                p.copy_(1.0 + 0.2 * r)


def alibi_slopes(n_head: int) -> list[float]:
    """The ALiBi paper's slopes (as jina's model code computes them)."""
    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start ** i for i in range(n)]
    if math.log2(n_head).is_integer():
        return power_of_2(n_head)
    closest = 2 ** math.floor(math.log2(n_head))
    return power_of_2(closest) + alibi_slopes(2 * closest)[0::2][:n_head - closest]


def jina_reference_class():
    import torch
    from torch import nn

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.query, self.key, self.value = (nn.Linear(N_EMBD, N_EMBD) for _ in range(3))
            self.dense, self.attn_norm = nn.Linear(N_EMBD, N_EMBD), nn.LayerNorm(N_EMBD, eps=1e-12)
            self.gated_layers = nn.Linear(N_EMBD, 2 * N_FF, bias=False)
            self.wo, self.mlp_norm = nn.Linear(N_FF, N_EMBD), nn.LayerNorm(N_EMBD, eps=1e-12)

        def forward(self, x, bias):  # x (1, L, d), bias (H, L, L)
            n = x.shape[1]
            heads = [f(x).view(1, n, N_HEAD, -1).transpose(1, 2) for f in (self.query, self.key, self.value)]
            q, k, v = heads
            scores = q @ k.transpose(-1, -2) / math.sqrt(N_EMBD // N_HEAD) + bias
            a = (scores.softmax(-1) @ v).transpose(1, 2).reshape(1, n, N_EMBD)
            h = self.attn_norm(self.dense(a) + x)
            gated, non_gated = self.gated_layers(h).split(N_FF, dim=-1)
            return self.mlp_norm(self.wo(nn.functional.gelu(gated) * non_gated) + h)

    class JinaBertReference(nn.Module):
        def __init__(self, n_vocab: int = N_VOCAB):
            super().__init__()
            self.word_embeddings = nn.Embedding(n_vocab, N_EMBD)
            self.token_type_embeddings = nn.Embedding(2, N_EMBD)
            self.emb_norm = nn.LayerNorm(N_EMBD, eps=1e-12)
            self.layers = nn.ModuleList(Layer() for _ in range(N_LAYER))

        def forward(self, ids, types=None):  # ids (1, L) -> (1, L, d)
            n = ids.shape[1]
            types = torch.zeros_like(ids) if types is None else types
            x = self.emb_norm(self.word_embeddings(ids) + self.token_type_embeddings(types))
            pos = torch.arange(n)
            bias = -torch.tensor(alibi_slopes(N_HEAD))[:, None, None] * (pos[None, :] - pos[:, None]).abs()
            for layer in self.layers:
                x = layer(x, bias)
            return x

        def hub_state_dict(self) -> dict:
            """The tensors under jina-embeddings-v2's names."""
            names = {"word_embeddings": "embeddings.word_embeddings", "emb_norm": "embeddings.LayerNorm",
                     "token_type_embeddings": "embeddings.token_type_embeddings"}
            parts = {"query": "attention.self.query", "key": "attention.self.key", "value": "attention.self.value",
                     "dense": "attention.output.dense", "attn_norm": "attention.output.LayerNorm",
                     "gated_layers": "mlp.gated_layers", "wo": "mlp.wo", "mlp_norm": "mlp.layernorm"}
            out = {}
            for name, t in self.state_dict().items():
                head, _, suffix = name.rpartition(".")
                if head.startswith("layers."):
                    _, i, part = head.split(".")
                    out[f"encoder.layer.{i}.{parts[part]}.{suffix}"] = t.contiguous()
                else:
                    out[f"{names[head]}.{suffix}"] = t.contiguous()
            return out

    return JinaBertReference


SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Retrieval works best when the re-ranker reads the query and the document together.",
    "Embeddings of short texts: sentences, titles, product names and questions.",
    "Café, naïve, résumé: accents are stripped when the vocabulary is lower-cased.",
    "东京 and 北京 are split into single characters; numbers like 12345 stay words.",
]


def make_wordpiece_tokenizer(vocab_size: int = 200):
    """A BERT WordPiece tokenizer (lower-casing, accent stripping, [CLS] A [SEP] B [SEP]) trained on
    SENTENCES; [PAD] [UNK] [CLS] [SEP] [MASK] are ids 0..4."""
    from tokenizers import BertWordPieceTokenizer
    tok = BertWordPieceTokenizer(lowercase=True)
    tok.train_from_iterator(SENTENCES * 4, vocab_size=vocab_size, show_progress=False,
                            special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    from tokenizers.processors import BertProcessing  # set after training, once [CLS] and [SEP] have ids
    tok.post_processor = BertProcessing(("[SEP]", tok.token_to_id("[SEP]")), ("[CLS]", tok.token_to_id("[CLS]")))
    return tok


BPE_SPECIALS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]  # ids 0..4, as ModernBERT names them


def make_bpe_tokenizer(vocab_size: int = 300):
    """A ModernBERT-style byte-level BPE tokenizer ([CLS] A [SEP] B [SEP]) trained on SENTENCES."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=BPE_SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(SENTENCES * 4, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
    return tok


def make_encoder(family: str, folder: Path, seed: int = 0, tokenizer=None):
    """Writes a tiny random `family` model into `folder` (with `tokenizer`'s tokenizer.json and its
    vocabulary size, when given); returns the torch model (eval mode)."""
    if tokenizer is not None:
        folder.mkdir(parents=True, exist_ok=True)
        tokenizer.save(str(folder / "tokenizer.json"))
        return _make_encoder(family, folder, seed, {**BERT, "vocab_size": tokenizer.get_vocab_size()})
    return _make_encoder(family, folder, seed, BERT)


def _make_encoder(family: str, folder: Path, seed: int, shape: dict):
    import torch
    import transformers
    torch.manual_seed(seed)
    if family == "jina":
        model = jina_reference_class()(shape["vocab_size"]).eval()
        randomize(model, seed)
        from safetensors.torch import save_file
        folder.mkdir(parents=True, exist_ok=True)
        save_file(model.hub_state_dict(), str(folder / "model.safetensors"))
        (folder / "config.json").write_text(json.dumps({
            **shape, "architectures": ["JinaBertForMaskedLM"], "model_type": "bert", "hidden_act": "gelu",
            "position_embedding_type": "alibi", "feed_forward_type": "geglu", "emb_pooler": "mean"}))
        return model
    if family in ("modern", "modern_rerank"):
        ids = dict(pad_token_id=0, bos_token_id=CLS, cls_token_id=CLS, eos_token_id=SEP, sep_token_id=SEP)
        if shape["vocab_size"] != N_VOCAB:  # with make_bpe_tokenizer's vocabulary: its ids
            ids = dict(pad_token_id=3, bos_token_id=1, cls_token_id=1, eos_token_id=2, sep_token_id=2)
        common = dict(vocab_size=shape["vocab_size"], hidden_size=N_EMBD, intermediate_size=N_FF,
                      num_hidden_layers=3, num_attention_heads=N_HEAD, max_position_embeddings=N_CTX,
                      local_attention=MODERN_WINDOW, global_attn_every_n_layers=2, norm_eps=1e-5, **ids)
        if family == "modern":
            model = transformers.ModernBertModel(transformers.ModernBertConfig(**common))
        else:
            model = transformers.ModernBertForSequenceClassification(transformers.ModernBertConfig(
                **common, num_labels=1, id2label={0: "LABEL_0"}, label2id={"LABEL_0": 0},
                classifier_pooling="mean"))
    elif family == "nomic":
        config = transformers.NomicBertConfig(**{**shape, "hidden_act": "silu"},
                                              rope_parameters={"rope_type": "default", "rope_theta": 1000.0})
        model = transformers.NomicBertModel(config)
    elif family == "bert":
        model = transformers.BertModel(transformers.BertConfig(**shape))
    else:
        labels = {0: "LABEL_0"} if family == "bert_rerank" else CLASSIFY_LABELS
        config = transformers.BertConfig(**shape, num_labels=len(labels), id2label=labels,
                                         label2id={v: k for k, v in labels.items()})
        model = transformers.BertForSequenceClassification(config)
    model.config._attn_implementation = "eager"
    model.eval()
    randomize(model, seed)
    model.save_pretrained(folder, safe_serialization=True)
    return model


def torch_hidden(family: str, model, ids, types=None) -> np.ndarray:
    """(len(ids), n_embd) float32: the last hidden states of one text (no padding, no mask)."""
    import torch
    with torch.no_grad():
        t_ids = torch.tensor([list(ids)])
        t_types = None if types is None else torch.tensor([list(types)])
        if family == "jina":
            return model(t_ids, t_types)[0].numpy()
        if family.startswith("modern"):  # no token types
            return (model.model if hasattr(model, "model") else model)(t_ids).last_hidden_state[0].numpy()
        bert = model.bert if hasattr(model, "bert") else model
        return bert(t_ids, token_type_ids=t_types).last_hidden_state[0].numpy()


def torch_scores(model, ids, types) -> np.ndarray:
    """(num_labels,) the sequence classifier's logits for one input (types None: a model without them)."""
    import torch
    with torch.no_grad():
        if types is None:
            return model(torch.tensor([list(ids)])).logits[0].numpy()
        return model(torch.tensor([list(ids)]), token_type_ids=torch.tensor([list(types)])).logits[0].numpy()


def texts(seed: int, count: int, lo: int = 3, hi: int = 20) -> list[list[int]]:
    """`count` random token-id texts of lengths lo..hi, each [CLS] ... [SEP] (ids 4.. are words)."""
    rng = np.random.default_rng(seed)
    return [[CLS, *rng.integers(4, N_VOCAB, size=int(rng.integers(lo, hi + 1)) - 2).tolist(), SEP]
            for _ in range(count)]


def pair(query: list[int], doc: list[int]) -> tuple[list[int], list[int]]:
    """[CLS] query [SEP] doc [SEP] and its token types (0 for the first segment, 1 for the second)."""
    first, second = [CLS, *query, SEP], [*doc, SEP]
    return first + second, [0] * len(first) + [1] * len(second)
