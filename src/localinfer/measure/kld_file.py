"""The KL-divergence base file: a base model's next-token distributions over a text, saved so
that a quantized model can be compared with it later (`perplexity --kl-divergence-base`).

llama.cpp saves the whole log-softmax of every scored position (uint16 per vocab entry: about
1 GB for 40 chunks of 512 with a 49k vocab, 5.3 GB with a 262k one). This file keeps, per
scored position, the base model's `top_k` most likely tokens with their log-probabilities,
the log-probability of the token that actually follows, and the probability mass outside the
top k. That is enough for the same statistics: PPL(base) and Δp are exact, "same top" is
exact, and the KL divergence treats the tail as one bucket (exact when top_k = n_vocab; with
top_k = 1024 it is within about 2% of the full-vocab value on SmolLM2 Q4_1 against F16).

Layout (little-endian):
    magic   8 bytes   b"LIKLD01\\n"
    hlen    uint32    length of the JSON header
    header  hlen bytes JSON: n_ctx, n_chunk, n_vocab, top_k, vocab_sha256, model, bos_id
    tokens  int32 (n_chunk, n_ctx)       the evaluated text, as tokenized (before the BOS swap)
    then per chunk, with n = n_ctx - 1 - n_ctx // 2 scored positions:
    ids     int32   (n, top_k)  token ids, most likely first
    logp    float32 (n, top_k)  their log-probabilities
    target  float32 (n,)        log-probability of the token that follows
    rest    float32 (n,)        probability mass of the tokens outside the top k
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
from dataclasses import dataclass

import numpy as np

from .perplexity import bos_for_chunks, log_softmax, n_scored

MAGIC = b"LIKLD01\n"
DEFAULT_TOP_K = 1024


def vocab_fingerprint(tokenizer) -> str:
    """sha256 of the vocabulary's token texts: two models can share a base file only if equal."""
    h = hashlib.sha256()
    for t in tokenizer.vocab.tokens:
        h.update(t.encode("utf-8", "surrogatepass") + b"\0")
    return h.hexdigest()


@dataclass
class BaseChunk:
    """One chunk's base distributions; n = scored positions."""
    ids: np.ndarray     # (n, top_k) int32, most likely first
    logp: np.ndarray    # (n, top_k) float32
    target: np.ndarray  # (n,) float32 log-prob of the next token
    rest: np.ndarray    # (n,) float32 mass outside the top k


def base_chunk(logits: np.ndarray, targets: np.ndarray, top_k: int) -> BaseChunk:
    """(n, n_vocab) scored logits of the base model, (n,) next tokens -> its BaseChunk."""
    n, n_vocab = logits.shape
    k = min(top_k, n_vocab)
    lp = log_softmax(logits)  # (n, n_vocab) float64
    if k < n_vocab:
        ids = np.argpartition(-lp, k - 1, axis=1)[:, :k]
    else:
        ids = np.broadcast_to(np.arange(n_vocab), (n, n_vocab))
    top = np.take_along_axis(lp, ids, axis=1)
    order = np.argsort(-top, axis=1, kind="stable")
    ids = np.take_along_axis(ids, order, axis=1)
    top = np.take_along_axis(top, order, axis=1)
    rest = np.clip(1.0 - np.exp(top).sum(axis=1), 0.0, 1.0) if k < n_vocab else np.zeros(n)
    return BaseChunk(ids.astype(np.int32), top.astype(np.float32),
                     lp[np.arange(n), targets].astype(np.float32), rest.astype(np.float32))


@dataclass
class BaseHeader:
    n_ctx: int
    n_chunk: int
    n_vocab: int
    top_k: int
    vocab_sha256: str
    model: str = ""
    bos_id: int | None = None

    @property
    def n_scored(self) -> int:
        return n_scored(self.n_ctx)

    @property
    def chunk_bytes(self) -> int:
        n, k = self.n_scored, self.top_k
        return n * k * 4 * 2 + n * 4 * 2


def base_header(model, chunks: np.ndarray, top_k: int | None = None) -> BaseHeader:
    """The header of `model`'s base file over `chunks` (n_chunk, n_ctx), keeping its top_k tokens."""
    n_chunk, n_ctx = chunks.shape
    return BaseHeader(n_ctx, n_chunk, model.n_vocab, min(top_k or DEFAULT_TOP_K, model.n_vocab),
                      vocab_fingerprint(model.tokenizer), model=os.path.basename(model.path),
                      bos_id=bos_for_chunks(model))


class BaseWriter:
    """Writes the header and tokens at once, then one chunk at a time (nothing is kept)."""

    def __init__(self, path: str | os.PathLike, header: BaseHeader, chunks: np.ndarray):
        if chunks.shape != (header.n_chunk, header.n_ctx):
            raise ValueError(f"tokens {chunks.shape} do not match the header ({header.n_chunk}, {header.n_ctx})")
        self.header = header
        self.f = open(path, "wb")
        meta = json.dumps(header.__dict__).encode()
        self.f.write(MAGIC + struct.pack("<I", len(meta)) + meta)
        self.f.write(np.ascontiguousarray(chunks, dtype="<i4").tobytes())

    def write(self, c: BaseChunk) -> None:
        n, k = self.header.n_scored, self.header.top_k
        if c.ids.shape != (n, k):
            raise ValueError(f"a chunk has {c.ids.shape} top ids, the file holds ({n}, {k})")
        for a, dt in ((c.ids, "<i4"), (c.logp, "<f4"), (c.target, "<f4"), (c.rest, "<f4")):
            self.f.write(np.ascontiguousarray(a, dtype=dt).tobytes())

    def close(self) -> None:
        self.f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class BaseReader:
    """Reads a base file written by BaseWriter; every size is checked against the file."""

    def __init__(self, path: str | os.PathLike):
        self.path = str(path)
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(12)
            if len(head) < 12 or head[:8] != MAGIC:
                raise ValueError(f"{self.path} is not a localinfer KL-divergence base file "
                                 f"(make one with --kl-divergence-base FILE on the base model)")
            (hlen,) = struct.unpack("<I", head[8:])
            try:
                meta = json.loads(f.read(hlen))
                self.header = BaseHeader(**meta)
            except (ValueError, TypeError) as e:
                raise ValueError(f"{self.path}: unreadable header ({e})") from None
        h = self.header
        if h.n_ctx < 4 or h.n_chunk < 1 or not 1 <= h.top_k <= h.n_vocab:
            raise ValueError(f"{self.path}: inconsistent header {meta}")
        self.tokens_offset = 12 + hlen
        self.chunks_offset = self.tokens_offset + h.n_chunk * h.n_ctx * 4
        want = self.chunks_offset + h.n_chunk * h.chunk_bytes
        if size != want:
            raise ValueError(f"{self.path} is {size} bytes, its header says {want} (truncated or damaged)")

    def tokens(self) -> np.ndarray:
        h = self.header
        t = np.fromfile(self.path, dtype="<i4", count=h.n_chunk * h.n_ctx, offset=self.tokens_offset)
        return t.astype(np.int64).reshape(h.n_chunk, h.n_ctx)

    def chunk(self, i: int) -> BaseChunk:
        h = self.header
        if not 0 <= i < h.n_chunk:
            raise IndexError(f"chunk {i} of {h.n_chunk}")
        n, k = h.n_scored, h.top_k
        raw = np.fromfile(self.path, dtype=np.uint8, count=h.chunk_bytes, offset=self.chunks_offset + i * h.chunk_bytes)
        parts, at = [], 0
        for shape, dt in (((n, k), "<i4"), ((n, k), "<f4"), ((n,), "<f4"), ((n,), "<f4")):
            nbytes = int(np.prod(shape)) * 4
            parts.append(raw[at:at + nbytes].view(dt).reshape(shape))
            at += nbytes
        return BaseChunk(*parts)

    def check_model(self, model, model_name: str = "the model") -> None:
        """A clear error unless `model` has the vocabulary the base file was made with."""
        h = self.header
        if h.n_vocab != model.n_vocab or h.vocab_sha256 != vocab_fingerprint(model.tokenizer):
            raise ValueError(f"{self.path} was made with a different vocabulary ({h.n_vocab} tokens, model "
                             f"{h.model!r}) than {model_name} ({model.n_vocab} tokens): KL divergence compares "
                             f"two models that share a tokenizer")
