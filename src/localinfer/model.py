"""The public Model: a loaded GGUF file with its tokenizer, chat template and runtime."""
from __future__ import annotations

import os
import threading
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from .arch import build_model
from .chat_prompt import chat_prompt_tokens
from .chat_template import ChatTemplate, template_for
from .context import Context
from .fetch import resolve_model
from .generate import GenerationChunk, GenerationResult, Timings, check_prompt_fits, stream_generate
from .gguf_file import GGUFFile
from .kv_cache import ContextFullError
from .sampling import make_logits_processors, make_sampler
from .tokenizer import Tokenizer

DEFAULT_N_CTX = 4096
DEFAULT_N_PARALLEL = 4


class SerializedRuntime:
    """An architecture model whose forward passes run one at a time: the kernels' thread pool and
    scratch buffers serve one pass at a time, and several Python threads may share one Model."""

    def __init__(self, runtime, lock: threading.Lock):
        self.runtime, self.lock = runtime, lock

    def forward(self, *args, **kwargs):
        with self.lock:
            return self.runtime.forward(*args, **kwargs)

    def forward_batch(self, *args, **kwargs):
        with self.lock:
            return self.runtime.forward_batch(*args, **kwargs)

    def __getattr__(self, name):  # config, new_cache, weights ...
        return getattr(self.runtime, name)


class Model:
    def __init__(self, path: str | os.PathLike, n_ctx: int | None = None, n_threads: int | None = None,
                 kv_dtype: str = "f16", backend: str = "auto", n_parallel: int = DEFAULT_N_PARALLEL):
        """backend: "c" (the C kernels), "reference" (numpy, the oracle) or "auto" (C when built).
        n_parallel: sequences generated together when several threads call generate/stream/chat."""
        self.path = str(path)
        self.gguf = GGUFFile(path)
        self.metadata: Mapping[str, Any] = self.gguf.metadata
        self.architecture = self.gguf.architecture
        self.tokenizer = Tokenizer.from_metadata(self.metadata)
        self.backend = _choose_backend(backend, n_threads)
        self.runtime = build_model(self.gguf, self.backend)
        self._lock = threading.Lock()
        self.serialized = SerializedRuntime(self.runtime, self._lock)  # what contexts and the engine call
        if n_parallel < 1:
            raise ValueError(f"n_parallel must be >= 1, got {n_parallel}")
        self.n_parallel = n_parallel
        self._engine = None
        n_ctx_train = self.runtime.config.n_ctx_train
        self.n_ctx = int(n_ctx) if n_ctx else min(DEFAULT_N_CTX, n_ctx_train)
        if self.n_ctx <= 0:
            raise ValueError(f"n_ctx must be positive, got {n_ctx}")
        self.n_threads = n_threads
        if kv_dtype not in ("f16", "f32"):
            raise ValueError(f"kv_dtype must be 'f16' or 'f32', got {kv_dtype!r}")
        self.kv_dtype = np.float16 if kv_dtype == "f16" else np.float32
        bos = self.tokenizer.bos_id
        eos = self.tokenizer.eos_id
        self.chat_template = ChatTemplate(
            template_for(self.metadata),
            bos_token=self.tokenizer.token_text(bos) if bos is not None else "",
            eos_token=self.tokenizer.token_text(eos) if eos is not None else "")

    # -- tokens ----------------------------------------------------------------------------------
    @property
    def n_vocab(self) -> int:
        return self.tokenizer.n_vocab

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        return self.tokenizer.tokenize(text, add_special=add_special, parse_special=parse_special)

    def detokenize(self, ids: Sequence[int]) -> str:
        return self.tokenizer.detokenize(ids)

    def _check_ids(self, ids: Sequence[int]) -> list[int]:
        out = []
        for t in ids:
            if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)):
                raise TypeError(f"token ids must be integers, got {t!r}")
            if not 0 <= int(t) < self.n_vocab:
                raise ValueError(f"unknown token id {int(t)} (the vocabulary has {self.n_vocab} tokens)")
            out.append(int(t))
        return out

    def _prompt_tokens(self, prompt: str | Sequence[int]) -> list[int]:
        if isinstance(prompt, str):
            return self.tokenize(prompt, add_special=True, parse_special=True)
        return self._check_ids(prompt)

    # -- running ---------------------------------------------------------------------------------
    def new_context(self, n_ctx: int | None = None) -> Context:
        return Context(self.serialized, n_ctx or self.n_ctx, self.kv_dtype)

    @property
    def engine(self):
        """The batched engine behind generate/stream/chat without an explicit context: calls from
        several threads are decoded together, one forward pass per step (made on first use)."""
        with self._lock:
            if self._engine is None:
                from .serve.engine import Engine
                self._engine = Engine(self.serialized, self.tokenizer, n_slots=self.n_parallel, n_ctx=self.n_ctx,
                                      max_queue=None, kv_dtype=self.kv_dtype, prefix_cache_bytes=64 << 20)
            return self._engine

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        """(len(ids), n_vocab) float32: a fresh context, one batch, every position."""
        ids = self._check_ids(ids)
        if not ids:
            return np.zeros((0, self.n_vocab), np.float32)
        ctx = self.new_context(max(self.n_ctx, len(ids)))
        return np.asarray(ctx.append(ids), dtype=np.float32)

    def stream(self, prompt: str | Sequence[int], max_tokens: int | None = 256, temperature: float = 0.8,
               top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05, repeat_penalty: float = 1.0,
               presence_penalty: float = 0.0, frequency_penalty: float = 0.0, repeat_last_n: int = 64,
               seed: int | None = None, stop: str | Sequence[str] = (),
               context: Context | None = None) -> Iterator[GenerationChunk]:
        """GenerationChunks (text, tokens; the last one has finish_reason and timings).
        The defaults are llama.cpp's; temperature <= 0 is greedy. Close it to stop early.
        Without `context` the request goes through the model's batched engine (several threads
        may call this at once); with one, it runs in that context (a chat session's cache)."""
        tokens = self._prompt_tokens(prompt)
        if not tokens:
            raise ValueError("the prompt is empty (no tokens to start from)")
        if context is None:  # through the engine: safe from several threads, and batched
            from .serve.request import Request, SamplingParams
            params = SamplingParams(temperature, top_k, top_p, min_p, repeat_penalty, presence_penalty,
                                    frequency_penalty, repeat_last_n, seed)
            return self.engine.submit(Request(tokens, max_tokens, stop, params)).chunks()
        ctx = context
        check_prompt_fits(len(tokens), ctx.n_ctx)
        sampler = make_sampler(temperature, top_k, top_p, min_p, seed)
        processors = make_logits_processors(repeat_penalty, presence_penalty, frequency_penalty, repeat_last_n)
        return stream_generate(ctx, self.tokenizer, tokens, sampler, processors, max_tokens, stop)

    def generate(self, prompt: str | Sequence[int], stream: bool = False, **kwargs):
        """Text or token ids in; a GenerationResult (.text, .tokens, .finish_reason, .timings)
        out, or with stream=True an iterator of text chunks (close it to stop early).
        Keyword arguments as for `stream`."""
        tokens = self._prompt_tokens(prompt)
        chunks = self.stream(tokens, **kwargs)
        if stream:
            return _text_stream(chunks)
        return collect(chunks, tokens)

    # -- chat ------------------------------------------------------------------------------------
    def apply_chat_template(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True) -> str:
        return self.chat_template.render(messages, add_generation_prompt=add_generation_prompt)

    def chat_tokens(self, messages: Sequence[Mapping[str, Any]], allow_special_in_content: bool = False) -> list[int]:
        """The rendered conversation as tokens; BOS is added by the model's rules unless the
        template already wrote it (llama.cpp does the same).

        Message content is plain text: control-token text in it (`<|im_end|>`, `<start_of_turn>`)
        becomes ordinary text tokens, so a message cannot forge a turn; only the template's own
        control tokens are control tokens. A content with control-token text that the template
        does not write as it is raises ChatContentError (a ValueError). allow_special_in_content=True
        tokenizes content like the template (llama.cpp's behaviour): only for trusted content."""
        return chat_prompt_tokens(self.chat_template, self.tokenizer, messages, allow_special_in_content)

    def chat(self, messages: Sequence[Mapping[str, Any]], allow_special_in_content: bool = False, **kwargs):
        """Like generate, with the conversation rendered by the chat template (see chat_tokens)."""
        return self.generate(self.chat_tokens(messages, allow_special_in_content), **kwargs)

    def chat_session(self, system: str | None = None, allow_special_in_content: bool = False,
                     **defaults) -> "ChatSession":
        from .chat import ChatSession
        return ChatSession(self, system=system, allow_special_in_content=allow_special_in_content, **defaults)

    # -- description -----------------------------------------------------------------------------
    def info(self) -> dict:
        from .describe import describe
        return describe(self.gguf)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
        self.gguf.close()

    def __repr__(self) -> str:
        return f"Model({self.path!r}, architecture={self.architecture!r}, n_ctx={self.n_ctx})"


def _choose_backend(backend: str, n_threads: int | None) -> str:
    if backend not in ("auto", "c", "reference"):
        raise ValueError(f"backend must be 'auto', 'c' or 'reference', got {backend!r}")
    from . import kernels
    if backend == "auto":
        backend = "c" if kernels.available() else "reference"
    if backend == "c":
        if not kernels.available():
            raise RuntimeError(kernels.unavailable_reason())
        if n_threads:
            kernels.set_threads(n_threads)
    return backend


def collect(chunks: Iterator, prompt_tokens: list[int]) -> GenerationResult:
    text, tokens, finish, timings = [], [], "stop", Timings()
    for chunk in chunks:
        text.append(chunk.text)
        tokens.extend(chunk.tokens)
        if chunk.finish_reason:
            finish, timings = chunk.finish_reason, chunk.timings
    return GenerationResult("".join(text), tokens, finish, timings, prompt_tokens)


def _text_stream(chunks) -> Iterator[str]:
    try:
        for chunk in chunks:
            if chunk.text:
                yield chunk.text
    finally:
        chunks.close()


def load(model: str | os.PathLike | None = None, **options) -> Model:
    """A path to a GGUF file or a catalog name (fetched on first use); None is the default model."""
    return Model(resolve_model(model), **options)
