"""Random-weight encoders of real shapes (embedders), for speed measurements without a hub.

    folder = synthetic_encoder_folder("bge-small")         # a Hugging Face folder, cached
    path = synthetic_encoder("nomic-embed", "Q8_0")         # its GGUF (our converter), cached
    texts = sentences(folder, 256, 30)                      # texts of 30 tokens each, [CLS] and [SEP] included

Each shape is a real embedder's config.json (bge-small-en-v1.5: bert, 33M; nomic-embed-text-v1.5:
nomic-bert, 137M) written as a Hugging Face folder: config.json, model.safetensors (float32 weights
`normal * 0.02`, norm weights one and biases zero, from numpy.random.default_rng([seed, tensor
index])), a BERT WordPiece vocab.txt of the real vocabulary size, and sentence-transformers'
modules.json with the model's pooling (cls for bge, mean for nomic). So the same folder is what
sentence-transformers loads, and what `convert` turns into the GGUF that localinfer and llama.cpp's
llama-embedding load (F16 or Q8_0). The weights are random, so the vectors mean nothing; the speed
is real.

The vocabulary: bert-base-uncased's first 104 ids ([PAD], [unused0..98], [UNK], [CLS], [SEP],
[MASK]), single characters and their ## continuations, then made-up lower-case words of two and
three consonant-vowel syllables ("bako", "zurimo") up to the vocabulary size. `sentences` strings
such words (each one token) and a full stop, so every tokenizer involved makes the same ids and a
text's length in tokens is known exactly.

Files live in `<cache>/synthetic/`, keyed by shape, type, seed and FORMAT_VERSION (raise it when the
bytes written for a key change).
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

FORMAT_VERSION = 1
WEIGHT_SCALE = 0.02
SPECIALS = ["[PAD]", *[f"[unused{i}]" for i in range(99)], "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
_CONSONANTS, _VOWELS = "bdfgklmnprstvz", "aeiou"
_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789"


@dataclass(frozen=True)
class EncoderShape:
    """A real embedder's config.json numbers."""
    name: str
    source: str  # the real model
    hf_arch: str  # config.json "architectures"[0]: BertModel or NomicBertModel
    n_embd: int
    n_layer: int
    n_head: int
    n_ff: int
    n_vocab: int
    n_ctx_train: int
    pooling: str  # sentence-transformers' pooling: "cls" or "mean" (a classifier: the head reads [CLS])
    n_labels: int = 0  # BertForSequenceClassification's outputs (1: a cross-encoder re-ranker); 0: an embedder


ENCODER_SHAPES = {s.name: s for s in [
    EncoderShape("bge-small", "BAAI/bge-small-en-v1.5", "BertModel", n_embd=384, n_layer=12, n_head=12, n_ff=1536,
                 n_vocab=30522, n_ctx_train=512, pooling="cls"),
    EncoderShape("nomic-embed", "nomic-ai/nomic-embed-text-v1.5", "NomicBertModel", n_embd=768, n_layer=12, n_head=12,
                 n_ff=3072, n_vocab=30528, n_ctx_train=2048, pooling="mean"),
    # for tests: every part of the bge layout, tiny; and a tiny bge-reranker-shaped cross-encoder
    EncoderShape("tiny-bert", "test shape", "BertModel", n_embd=64, n_layer=2, n_head=4, n_ff=128, n_vocab=30522,
                 n_ctx_train=512, pooling="cls"),
    EncoderShape("tiny-rerank", "test shape", "BertForSequenceClassification", n_embd=64, n_layer=2, n_head=4,
                 n_ff=128, n_vocab=30522, n_ctx_train=128, pooling="cls", n_labels=1),
]}


def get_encoder_shape(name: str) -> EncoderShape:
    if name not in ENCODER_SHAPES:
        raise ValueError(f"unknown synthetic encoder shape {name!r}; known: {', '.join(ENCODER_SHAPES)}")
    return ENCODER_SHAPES[name]


# -- the Hugging Face folder ----------------------------------------------------------------------
def config_json(s: EncoderShape) -> dict:
    common = {"architectures": [s.hf_arch], "vocab_size": s.n_vocab, "hidden_size": s.n_embd,
              "num_hidden_layers": s.n_layer, "num_attention_heads": s.n_head, "intermediate_size": s.n_ff,
              "max_position_embeddings": s.n_ctx_train, "type_vocab_size": 2, "layer_norm_eps": 1e-12,
              "pad_token_id": 0, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    if s.hf_arch == "NomicBertModel":  # transformers' NomicBertConfig keys (nomic's rotary base 1000)
        return {**common, "model_type": "nomic_bert", "hidden_act": "silu",
                "rope_parameters": {"rope_theta": 1000.0, "rope_type": "default"}}
    bert = {**common, "model_type": "bert", "hidden_act": "gelu", "position_embedding_type": "absolute"}
    if s.n_labels:
        bert["id2label"] = {str(i): f"LABEL_{i}" for i in range(s.n_labels)}
        bert["label2id"] = {f"LABEL_{i}": i for i in range(s.n_labels)}
    return bert


def tensor_shapes(s: EncoderShape) -> list[tuple[str, tuple[int, ...]]]:
    """(HF name, shape) of every weight, in file order: transformers' BertModel names (under "bert."
    with a classifier after them, as BertForSequenceClassification saves them), or the names nomic's
    checkpoints (and transformers' NomicBertModel.save_pretrained) use."""
    d, f = s.n_embd, s.n_ff
    out = [("embeddings.word_embeddings.weight", (s.n_vocab, d)),
           ("embeddings.token_type_embeddings.weight", (2, d))]
    if s.hf_arch != "NomicBertModel":
        out += [("embeddings.position_embeddings.weight", (s.n_ctx_train, d)),
                ("embeddings.LayerNorm.weight", (d,)), ("embeddings.LayerNorm.bias", (d,))]
        for i in range(s.n_layer):
            p = f"encoder.layer.{i}."
            for part, shape in (("attention.self.query", (d, d)), ("attention.self.key", (d, d)),
                                ("attention.self.value", (d, d)), ("attention.output.dense", (d, d)),
                                ("attention.output.LayerNorm", (d,)), ("intermediate.dense", (f, d)),
                                ("output.dense", (d, f)), ("output.LayerNorm", (d,))):
                out += [(p + part + ".weight", shape), (p + part + ".bias", (shape[0],))]
        out += [("pooler.dense.weight", (d, d)), ("pooler.dense.bias", (d,))]
        if s.n_labels:
            out = [("bert." + name, shape) for name, shape in out]
            out += [("classifier.weight", (s.n_labels, d)), ("classifier.bias", (s.n_labels,))]
        return out
    out += [("emb_ln.weight", (d,)), ("emb_ln.bias", (d,))]
    for i in range(s.n_layer):
        p = f"encoder.layers.{i}."
        out += [(p + "attn.Wqkv.weight", (3 * d, d)), (p + "attn.out_proj.weight", (d, d)),
                (p + "norm1.weight", (d,)), (p + "norm1.bias", (d,)),
                (p + "mlp.fc11.weight", (f, d)), (p + "mlp.fc12.weight", (f, d)), (p + "mlp.fc2.weight", (d, f)),
                (p + "norm2.weight", (d,)), (p + "norm2.bias", (d,))]
    return out


def _tensor(name: str, shape: tuple[int, ...], index: int, seed: int) -> np.ndarray:
    if "LayerNorm" in name or "emb_ln" in name or ".norm" in name:  # a norm: weight one, bias zero
        return (np.ones if name.endswith("weight") else np.zeros)(shape, np.float32)
    if name.endswith("bias"):
        return np.zeros(shape, np.float32)
    rng = np.random.default_rng([seed, index])
    return rng.standard_normal(shape, dtype=np.float32) * np.float32(WEIGHT_SCALE)


def write_safetensors(path: Path, s: EncoderShape, seed: int) -> None:
    """model.safetensors (its format: an 8-byte header length, the JSON header, the raw tensors),
    written a tensor at a time."""
    shapes = tensor_shapes(s)
    header, offset = {}, 0
    for name, shape in shapes:
        n = int(np.prod(shape)) * 4
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as out:
        out.write(len(head).to_bytes(8, "little") + head)
        for i, (name, shape) in enumerate(shapes):
            out.write(np.ascontiguousarray(_tensor(name, shape, i, seed), "<f4").tobytes())


def vocabulary(n_vocab: int) -> list[str]:
    """The vocab.txt lines: specials, characters and ## continuations, then made-up words."""
    words = [*SPECIALS, *_CHARS, ".", ",", *("##" + c for c in _CHARS)]
    syllables = [c + v for c in _CONSONANTS for v in _VOWELS]
    for n in (2, 3):
        for idx in np.ndindex(*([len(syllables)] * n)):
            if len(words) >= n_vocab:
                return words
            words.append("".join(syllables[i] for i in idx))
    if len(words) < n_vocab:
        raise ValueError(f"the made-up vocabulary has {len(words)} tokens, fewer than {n_vocab}")
    return words


def _sentence_transformers_files(folder: Path, s: EncoderShape) -> None:
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": s.n_ctx_train,
                                                                  "do_lower_case": False}))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": s.n_embd, "pooling_mode_cls_token": s.pooling == "cls",
        "pooling_mode_mean_tokens": s.pooling == "mean", "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False}))
    (folder / "2_Normalize").mkdir()


def write_folder(s: EncoderShape, folder: Path, seed: int = 0) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config_json(s), indent=1))
    (folder / "vocab.txt").write_text("\n".join(vocabulary(s.n_vocab)) + "\n", encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "BertTokenizer", "do_lower_case": True, "model_max_length": s.n_ctx_train,
        "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
        "mask_token": "[MASK]"}))
    if not s.n_labels:  # an embedder: what sentence-transformers loads
        _sentence_transformers_files(folder, s)
    write_safetensors(folder / "model.safetensors", s, seed)
    return folder


# -- the cache -----------------------------------------------------------------------------------
def _cache(name: str) -> Path:
    from localinfer.files.fetch import cache_dir
    return cache_dir() / "synthetic" / name


def synthetic_encoder_folder(shape: str | EncoderShape, seed: int = 0,
                             log: Callable[[str], None] = lambda msg: None) -> Path:
    """The cached Hugging Face folder of `shape`, written first if absent (whole, or not at all)."""
    s = shape if isinstance(shape, EncoderShape) else get_encoder_shape(shape)
    folder = _cache(f"{s.name}-hf-seed{seed}-v{FORMAT_VERSION}")
    if folder.is_dir():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    log(f"writing {folder} ({s.source}'s shape, random weights, seed {seed})")
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        write_folder(s, tmp / "model", seed)
        os.replace(tmp / "model", folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def synthetic_encoder(shape: str | EncoderShape, ftype: str = "F16", seed: int = 0,
                      log: Callable[[str], None] = lambda msg: None) -> Path:
    """The cached GGUF of `shape` in `ftype` (F32, F16 or Q8_0: what `convert` writes), converted
    from the cached folder by our converter."""
    from .convert_hf import OUTTYPES, convert_hf
    s = shape if isinstance(shape, EncoderShape) else get_encoder_shape(shape)
    if ftype.lower() not in OUTTYPES:
        raise ValueError(f"an encoder is converted to one of {', '.join(t.upper() for t in OUTTYPES)}, not {ftype!r}")
    path = _cache(f"{s.name}-{ftype.upper()}-seed{seed}-v{FORMAT_VERSION}.gguf")
    if path.exists():
        return path
    folder = synthetic_encoder_folder(s, seed, log)
    log(f"converting to {path}")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    os.close(fd)
    try:
        convert_hf(folder, tmp, ftype.lower())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def sentences(folder: Path, count: int, n_tokens: int, seed: int = 0) -> list[str]:
    """`count` texts of made-up words (those of `folder`'s vocab.txt) and a full stop: each is
    exactly n_tokens tokens with [CLS] and [SEP]."""
    if n_tokens < 3:
        raise ValueError(f"a sentence needs at least 3 tokens ([CLS] word [SEP]), got {n_tokens}")
    words = [w for w in (folder / "vocab.txt").read_text(encoding="utf-8").split("\n") if len(w) >= 4
             and w.isalpha() and w.islower()]
    rng = np.random.default_rng(seed)
    return [" ".join(words[i] for i in rng.integers(0, len(words), n_tokens - 3)) + "." for _ in range(count)]
