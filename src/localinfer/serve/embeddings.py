"""/v1/embeddings: OpenAI's request checked field by field, and its response shape.

    {"input": "text" | ["text", ...] | [id, ...] | [[id, ...], ...], "model": ...,
     "encoding_format": "float" | "base64", "dimensions": n_embd (only), "user": ...}
 -> {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [...] | "base64"}],
     "model": ..., "usage": {"prompt_tokens": n, "total_tokens": n}}

The vectors are Model.embed's: the server's pooling (`serve --pooling`, by default the file's
or mean), L2-normalized as llama-server returns them. An encoder (bert, nomic-bert, jina-bert-v2, modern-bert:
encoder_tasks.py) runs many texts per forward pass and takes each text whole, up to the positions
it was trained with; a re-ranker (pooling rank) is asked for /v1/rerank instead, unless the server
was started with a --pooling that reads its hidden states. `dimensions` would have to cut the vector
short, which only models trained for it (Matryoshka) allow: any other value than n_embd is a 400.
Each forward pass runs in a worker thread under the model's lock, so the engine's steps go between
the passes of a long request; the route (openai_routes.py) stops between passes when its client goes.
"""
from __future__ import annotations

import base64
from typing import Iterator

import numpy as np

from ..embedding import DEFAULT_N_BATCH, POOLINGS, default_pooling, embed_passes
from ..tokenizer import TooManyTokensError
from .api import ApiError, bad

MAX_INPUTS = 2048  # OpenAI's limit on the inputs of one request
MAX_TOTAL_TOKENS = 300_000  # and on their tokens together: bounds the work one request can ask


class EmbeddingJob:
    """A validated request: its token lists, then (after run) its vectors and the answer."""

    def __init__(self, token_lists: list[list[int]], pooling: str, as_base64: bool, model_name: str,
                 normalize: bool = True):
        self.token_lists, self.pooling, self.as_base64, self.model_name = token_lists, pooling, as_base64, model_name
        self.normalize = normalize  # L2: what OpenAI's and Ollama's /api/embed return; Ollama's legacy route does not
        self.vectors: list[np.ndarray | None] = [None] * len(token_lists)

    def run(self, model, n_batch: int | None = None) -> Iterator[None]:
        """One step per forward pass (under the model's lock): stop iterating to give up. n_batch:
        tokens per pass, by default Model.embed's (a decoder's prefill chunk; an encoder's 2048
        padded tokens of whole texts), so the server's vectors are the library's."""
        model._check_open()
        if getattr(model, "is_encoder", False):
            from ..encoder_tasks import DEFAULT_N_BATCH as ENCODER_N_BATCH, embed_passes as encoder_passes
            passes = encoder_passes(model.serialized, self.token_lists, self.pooling, self.normalize,
                                    n_batch or ENCODER_N_BATCH)
        else:
            passes = embed_passes(model.serialized, self.token_lists, self.pooling, self.normalize,
                                  n_batch or DEFAULT_N_BATCH, model.kv_dtype)
        for finished in passes:
            for i, v in finished:
                self.vectors[i] = v
            yield

    def response(self) -> dict:
        data = []
        for i, v in enumerate(self.vectors):
            if self.as_base64:  # OpenAI's encoding: the little-endian float32 bytes
                emb = base64.b64encode(np.asarray(v, "<f4").tobytes()).decode("ascii")
            else:
                emb = [float(x) for x in v]
            data.append({"object": "embedding", "index": i, "embedding": emb})
        n = sum(len(t) for t in self.token_lists)
        return {"object": "list", "data": data, "model": self.model_name,
                "usage": {"prompt_tokens": n, "total_tokens": n}}


def parse_embeddings(body, model, model_name: str, n_ctx: int, pooling: str | None = None) -> EmbeddingJob:
    fmt = body.get("encoding_format")
    if fmt not in (None, "float", "base64"):
        raise bad(f"'encoding_format' must be 'float' or 'base64', got {str(fmt)[:40]!r}", "encoding_format")
    n_embd = model.serialized.config.n_embd
    dims = body.get("dimensions")
    if dims is not None:
        if isinstance(dims, bool) or not isinstance(dims, int):
            raise bad(f"'dimensions' must be an integer, got {type(dims).__name__}", "dimensions")
        if dims != n_embd:
            raise bad(f"'dimensions' {dims} is not supported: this model's embeddings have {n_embd} dimensions "
                      f"and cutting them short is only meaningful for models trained for it", "dimensions",
                      "unsupported_parameter")
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise bad(f"'user' must be a string, got {type(user).__name__}", "user")
    pooling = pooling or _default_pooling(model)
    if pooling not in POOLINGS:  # a file's pooling_type none: a vector per token, not OpenAI's shape
        raise bad(f"this model's pooling is {pooling!r}, which makes no vector per input (llama-server: not OAI "
                  f"compatible); start the server with --pooling mean, cls or last", "model", "model_not_supported")
    encoder = getattr(model, "is_encoder", False)
    n_ctx = longest_input(model, n_ctx)
    token_lists = [_tokens(model, i, item, n_ctx, encoder) for i, item in enumerate(_inputs(body.get("input")))]
    total = 0
    for i, tokens in enumerate(token_lists):
        if len(tokens) > n_ctx:
            raise _too_long(i, len(tokens), n_ctx, encoder, exact=True)
        total += len(tokens)
    if total > MAX_TOTAL_TOKENS:
        raise bad(f"the inputs are {total} tokens together; one request may have at most {MAX_TOTAL_TOKENS}",
                  "input")
    return EmbeddingJob(token_lists, pooling, fmt == "base64", model_name)


def _default_pooling(model) -> str:
    """The file's pooling (else mean); a re-ranker's (rank) makes scores, not embeddings: a 400."""
    if getattr(model, "is_encoder", False):
        from ..encoder_tasks import default_pooling as encoder_pooling
        if model.serialized.config.pooling == "rank":
            raise bad(f"this model is a re-ranker ({model.architecture} with pooling_type rank): it scores a query "
                      f"against documents (POST /v1/rerank) and makes no embeddings; start the server with "
                      f"--pooling cls or mean to embed with its hidden states", "model", "model_not_supported")
        return encoder_pooling(model.serialized.config)
    try:
        return default_pooling(model.metadata, model.architecture)
    except ValueError as e:
        raise ApiError(500, str(e), "server_error") from None


def longest_input(model, n_ctx: int) -> int:
    """The longest input: the slot's context, and for an encoder (which sees each text whole, in one
    pass) at most the positions it was trained with."""
    if getattr(model, "is_encoder", False):
        return min(n_ctx, model.serialized.config.n_ctx_train)
    return n_ctx


def _inputs(value) -> list:
    """'input' as a list of texts and token-id lists (one string or one id list is one input)."""
    shape = "a string, a list of strings, a list of token ids, or a list of token-id lists"
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not value:
        raise bad(f"'input' must be {shape} (not empty)", "input")
    if all(_is_id(t) for t in value):
        return [value]
    if len(value) > MAX_INPUTS:
        raise bad(f"'input' has {len(value)} items; one request may embed at most {MAX_INPUTS}", "input")
    for i, item in enumerate(value):
        if not (isinstance(item, str) or isinstance(item, list) and all(_is_id(t) for t in item)):
            raise bad(f"input[{i}] must be a string or a list of token ids ('input' must be {shape})", "input")
    return value


def _is_id(t) -> bool:
    return isinstance(t, int) and not isinstance(t, bool)


def _too_long(i: int, n_tokens: int, n_ctx: int, encoder: bool, exact: bool = False) -> ApiError:
    """exact=False: n_tokens is a lower bound known before tokenizing (Tokenizer.fewest_tokens)."""
    size = f"input[{i}] is {'' if exact else 'at least '}{n_tokens} tokens long"
    if encoder:
        return bad(f"{size}, but this encoder takes at most {n_ctx} tokens: shorten it", "input",
                   "context_length_exceeded")
    return bad(f"{size}, but the context holds {n_ctx} tokens: shorten it (or start the server with a larger "
               f"--ctx-size)", "input", "context_length_exceeded")


def _tokens(model, i: int, item, n_ctx: int, encoder: bool) -> list[int]:
    if isinstance(item, str):
        if not item:
            raise bad(f"input[{i}] is an empty string", "input")
        try:
            tokens = model.tokenize(item, max_tokens=n_ctx)
        except TooManyTokensError as e:
            raise _too_long(i, e.at_least, n_ctx, encoder) from None
    else:
        bad_ids = [t for t in item if not 0 <= t < model.n_vocab]
        if bad_ids:
            raise bad(f"input[{i}] has the unknown token id {bad_ids[0]} (the vocabulary has {model.n_vocab} "
                      f"tokens)", "input")
        tokens = list(item)
    if not tokens:
        raise bad(f"input[{i}] has no tokens", "input")
    return tokens
