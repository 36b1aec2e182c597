"""The public Model: a loaded GGUF file with its tokenizer, chat template and runtime."""
from __future__ import annotations

import contextlib
import gc
import os
import threading
import warnings
import weakref
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from .arch import build_model
from .chat.prompt import chat_prompt_tokens
from .chat.template import ChatTemplate, template_for
from .context import Context, prefills_batched
from .files.fetch import resolve_model
from .generate import GenerationChunk, GenerationResult, check_prompt_fits, collect, stream_generate
from .files.gguf_file import GGUFFile
from .kv.cache import ContextFullError
from .kv.cache_types import CacheTypeError, KVCacheTypes, row_width
from .sampling.logit_bias import check_logit_bias
from .sampling.logprobs import check_n_top
from .sampling.params import SamplingParams
from .tokenizer import Tokenizer

D = SamplingParams  # the sampling defaults, llama.cpp's
DEFAULT_N_CTX = 4096
DEFAULT_N_PARALLEL = 4


class ModelClosedError(RuntimeError):
    """The Model was closed: its weights, caches and engine are gone."""


class SerializedRuntime:
    """An architecture model whose forward passes run one at a time: the kernels' thread pool and
    scratch buffers serve one pass at a time, and several Python threads may share one Model.
    Contexts hold this, not the runtime: closing the Model drops the runtime (its weights) even
    while a context or chat session is still referenced, and their next pass raises."""

    def __init__(self, runtime, lock: threading.Lock, path: str):
        self.runtime, self.lock, self.path = runtime, lock, path

    def _open(self):
        if self.runtime is None:
            raise ModelClosedError(f"the model {self.path} is closed; load it again to use it")
        return self.runtime

    def forward(self, *args, **kwargs):
        with self.lock:
            return self._open().forward(*args, **kwargs)

    def forward_batch(self, *args, **kwargs):
        with self.lock:
            return self._open().forward_batch(*args, **kwargs)

    def hidden_batch(self, *args, **kwargs):
        with self.lock:
            return self._open().hidden_batch(*args, **kwargs)

    def pooled(self, *args, **kwargs):  # an encoder's pass (arch/encoder.py)
        with self.lock:
            return self._open().pooled(*args, **kwargs)

    def __getattr__(self, name):  # config, new_cache, weights ...
        if name == "runtime":  # not set yet (or while unpickling): no recursion
            raise AttributeError(name)
        return getattr(self._open(), name)


@contextlib.contextmanager
def _collector_paused():
    """Python's cycle collector off while a model loads: the vocabulary and its merges are ~100k new
    objects with no cycles among them, and the collections their allocations set off scanned them
    again and again -- about 40 ms of a 0.43 s start to the first token (SmolLM2). Left as it was
    found: an application that keeps it off keeps it off."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Model:
    def __init__(self, path: str | os.PathLike, n_ctx: int | None = None, n_threads: int | None = None,
                 kv_dtype: str = "f16", backend: str = "auto", n_parallel: int = DEFAULT_N_PARALLEL,
                 prefix_cache_dir: str | os.PathLike | None = None, prefix_cache_dir_bytes: int = 4 << 30,
                 draft: "str | os.PathLike | Model | None" = None, draft_max: int = 8, draft_min: int = 0,
                 draft_p_min: float = 0.75, lookup_ngram: int = 0,
                 cache_type_k: str = "f16", cache_type_v: str = "f16", progress=None, repack: bool | None = None,
                 n_gpu_layers: int | None = None, device: str | None = None):
        """backend: "c" (the C kernels), "reference" (numpy, the oracle) or "auto" (C when built).
        n_parallel: sequences generated together when several threads call generate/stream/chat.
        prefix_cache_dir: a folder where the engine keeps computed prompt prefixes (at most
        prefix_cache_dir_bytes of this model's), reused by the next Model of the same file.
        Speculative decoding (speculative/): draft, a smaller model with the same vocabulary (a
        path or a Model), proposes up to draft_max tokens (it stops below draft_p_min; fewer than
        draft_min are not verified); lookup_ngram N > 0 without a draft drafts from the longest
        matching n-gram (<= N tokens) of the prompt and text so far. Greedy output is unchanged.
        cache_type_k / cache_type_v: "f16", "q8_0" or "q4_0", the KV cache's keys / values
        (llama.cpp's --cache-type-k / -v; kv/cache_types.py).
        progress: a callable(fraction, stage) told how far the load is (0.0 .. 1.0, ending with
        1.0 "ready"), for a splash screen (files/load_progress.py).
        repack: copy the matrices the ISA has a faster decode layout for into it at load (llama.cpp's
        repack; the mapped pages are released, so memory stays about the file's size); None: on
        unless the environment sets LOCALINFER_REPACK=0. False keeps every weight in the mapping.
        n_gpu_layers / device: llama.cpp's -ngl N: the first N layers run on the CUDA device
        (backend/cuda/layers.py), the rest on the CPU; above the model's layer count (or -1) every
        layer and the output matrix; device="cuda" alone is that too, "cpu" none. Needs numba-cuda (the cuda extra)
        and a device: without them, device="cuda" is a CudaUnavailable saying which is missing, and
        n_gpu_layers alone a warning (as llama.cpp's -ngl on a machine without a GPU)."""
        from .files.load_progress import LoadProgress
        loading = LoadProgress(progress)
        loading.report(0.0, "mapping")
        self.path = str(path)
        with _collector_paused():
            self.gguf = GGUFFile(path)
            self.metadata: Mapping[str, Any] = self.gguf.metadata
            self.architecture = self.gguf.architecture
            loading.report(0.05, "tokenizer")
            self.tokenizer = Tokenizer.from_metadata(self.metadata)
            self.backend = _choose_backend(backend, n_threads)
            loading.watch_weights(self.gguf)
            self.repack = _choose_repack(repack) and self.backend == "c"
            self.runtime = build_model(self.gguf, self.backend, self.repack)
            self.n_gpu_layers = _offload(self.runtime, self.gguf, n_gpu_layers, device)
        self._lock = threading.Lock()
        self.serialized = SerializedRuntime(self.runtime, self._lock, self.path)  # what contexts and the engine call
        self._contexts = weakref.WeakSet()  # live contexts, for memory()
        self._engine_finalizer = None
        self.closed = False
        if n_parallel < 1:
            raise ValueError(f"n_parallel must be >= 1, got {n_parallel}")
        self.n_parallel = n_parallel
        self.prefix_cache_dir, self.prefix_cache_dir_bytes = prefix_cache_dir, prefix_cache_dir_bytes
        self._engine = None
        n_ctx_train = self.runtime.config.n_ctx_train
        self.n_ctx = int(n_ctx) if n_ctx else min(DEFAULT_N_CTX, n_ctx_train)
        if self.n_ctx <= 0:
            raise ValueError(f"n_ctx must be positive, got {n_ctx}")
        self.n_threads = n_threads
        # an encoder (bert, nomic-bert, jina-bert-v2, modern-bert) embeds, re-ranks and classifies; it cannot generate
        self.is_encoder = bool(getattr(self.runtime, "is_encoder", False))
        if kv_dtype not in ("f16", "f32"):
            raise ValueError(f"kv_dtype must be 'f16' or 'f32', got {kv_dtype!r}")
        self.kv_dtype = np.float16 if kv_dtype == "f16" else np.float32
        kv_types = KVCacheTypes(cache_type_k, cache_type_v)  # CacheTypeError (a ValueError) names a bad one
        if kv_types.quantized:
            if kv_dtype != "f16":
                raise CacheTypeError(f"cache_type_k / cache_type_v other than f16 need kv_dtype 'f16', got {kv_dtype!r}")
            head_dim = getattr(self.runtime.config, "head_dim", None)
            for name in sorted({kv_types.k, kv_types.v} - {"f16"}):
                if head_dim is not None:
                    row_width(name, head_dim)  # a head size the blocks divide, else CacheTypeError
            self.kv_dtype = kv_types  # flows where the numpy dtype does: Context, Engine, new_cache
        # made and dropped (its pages are never touched): a context the memory cannot hold is a
        # ContextMemoryError now, at load, not an ENOMEM at the first request
        if not self.is_encoder:
            self.runtime.new_cache(self.n_ctx, self.kv_dtype)
        if self.n_ctx > n_ctx_train:  # llama.cpp warns too: positions past training give poor text
            warnings.warn(f"n_ctx {self.n_ctx} is more than the {n_ctx_train} tokens {self.path} was trained on",
                          UserWarning, stacklevel=2)
        bos = self.tokenizer.bos_id
        eos = self.tokenizer.eos_id
        self.draft_model, self.speculative = _speculation(self, draft, draft_max, draft_min, draft_p_min,
                                                          lookup_ngram)
        self._proposers = weakref.WeakKeyDictionary()  # context -> its drafter: a chat's draft cache lives on
        self.chat_template = ChatTemplate(
            template_for(self.metadata),
            bos_token=self.tokenizer.token_text(bos) if bos is not None else "",
            eos_token=self.tokenizer.token_text(eos) if eos is not None else "")
        repack = self._deferred_repack
        if repack is not None and not self.n_gpu_layers:   # (a device's layers drop their CPU copies)
            repack.start()   # the matrices that give the same bits either way: now, in the background
        loading.finish()

    # -- tokens ----------------------------------------------------------------------------------
    @property
    def n_vocab(self) -> int:
        return self.tokenizer.n_vocab

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True,
                 max_tokens: int | None = None) -> list[int]:
        """max_tokens: see Tokenizer.tokenize (a text certainly longer is refused before any work)."""
        return self.tokenizer.tokenize(text, add_special=add_special, parse_special=parse_special,
                                       max_tokens=max_tokens)

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
    def _check_open(self) -> None:
        if self.closed:
            raise ModelClosedError(f"the model {self.path} is closed; load it again to use it")

    def _check_generative(self) -> None:
        self._check_open()
        if self.is_encoder:
            from .arch.encoder import EncoderOnlyError
            raise EncoderOnlyError(f"encoder model ({self.architecture}): use embed/rerank/classify; it cannot generate")

    def new_context(self, n_ctx: int | None = None) -> Context:
        self._check_generative()
        ctx = Context(self.serialized, n_ctx or self.n_ctx, self.kv_dtype)
        ctx.identity, ctx.n_vocab = self.identity, self.n_vocab
        self._contexts.add(ctx)
        return ctx

    @property
    def engine(self):
        """The batched engine behind generate/stream/chat without an explicit context: calls from
        several threads are decoded together, one forward pass per step (made on first use).
        It holds a KV cache per slot that has run a request (n_ctx positions each, resident as far
        as they were used) and a prefix cache of at most 64 MiB."""
        with self._lock:
            self._check_generative()
            if self._engine is None:
                from .batching.config import MIB, EngineConfig, start_engine
                # the server's engine but for an unbounded queue (a library caller waits, never gets a
                # 503) and a smaller prefix cache (a script's few prompts, not a server's many users)
                config = EngineConfig(n_slots=self.n_parallel, n_ctx=self.n_ctx, max_queue=None,
                                      prefix_cache_bytes=64 * MIB, **self._prefix_dir_options())
                self._engine = start_engine(self, config)
                # a Model dropped without close() still stops its engine thread and frees the slots
                self._engine_finalizer = weakref.finalize(self, self._engine.close)
            return self._engine

    def _prefix_dir_options(self) -> dict:
        if self.prefix_cache_dir is None:
            return {}
        return {"prefix_cache_dir": os.fspath(self.prefix_cache_dir), "prefix_cache_dir_bytes": self.prefix_cache_dir_bytes}

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        """(len(ids), n_vocab) float32: a fresh context just large enough, one batch, every position."""
        ids = self._check_ids(ids)
        self._check_generative()
        if not ids:
            return np.zeros((0, self.n_vocab), np.float32)
        ctx = self.new_context(len(ids))
        return np.asarray(ctx.append(ids, batched=prefills_batched(len(ids))), dtype=np.float32)

    def embed(self, texts: str | Sequence[str | Sequence[int]], pooling: str | None = None,
              normalize: bool = True) -> np.ndarray:
        """(len(texts), n_embd) float32, one row per text (a string, or a list of token ids; one
        string alone gives one row): the final hidden states (after the output norm, before the
        LM head) pooled by "mean", "last" token or "cls" (first token), L2-normalized unless
        normalize=False -- as llama.cpp's llama-embedding --pooling. pooling=None: the file's
        pooling_type, else "mean"; "none" gives a list of (n_tokens, n_embd) arrays, a vector per
        token. Texts share forward passes; safe from several threads.
        A text longer than n_ctx raises ContextFullError (a ValueError).
        An encoder (encoder_tasks.py) runs each text whole, up to its context_length, and pools also
        by "rank" (its head's scores)."""
        self._check_open()
        from .embedding import check_embed_args, default_pooling, embed_tokens
        token_lists = self._token_lists(texts)
        if self.is_encoder:
            from . import encoder_tasks
            pooling = pooling or encoder_tasks.default_pooling(self.runtime.config)
            return encoder_tasks.embed_tokens(self.serialized, token_lists, pooling, normalize)
        pooling = pooling or default_pooling(self.metadata, self.architecture)
        check_embed_args(token_lists, pooling, self.n_ctx)
        return embed_tokens(self.serialized, token_lists, pooling, normalize, kv_dtype=self.kv_dtype)

    def _token_lists(self, texts) -> list[list[int]]:
        texts = [texts] if isinstance(texts, str) else list(texts)
        for t in texts:
            if not isinstance(t, (str, Sequence, np.ndarray)):
                raise TypeError(f"each text must be a string or a list of token ids, got {type(t).__name__}")
        return [self._prompt_tokens(t) for t in texts]

    def rerank(self, query: str, documents: Sequence[str], top_n: int | None = None) -> list:
        """The documents by relevance to the query, best first, the top_n best (all with None):
        encoder_tasks.RerankResult(index, relevance_score, document), the score the raw output of the
        model's head over "[CLS] query [SEP] document [SEP]". Needs a re-ranker (an encoder with a
        classification head, e.g. a converted BertForSequenceClassification)."""
        from . import encoder_tasks
        return encoder_tasks.rerank(self._encoder(), self.tokenizer, query, documents, top_n)

    def classify(self, texts: str | Sequence[str | Sequence[int]]) -> list:
        """One encoder_tasks.Classification(label, score, labels, logits, probabilities) per text:
        softmax over the classification head's outputs (sigmoid of a single one), labelled by
        classifier.output_labels."""
        from . import encoder_tasks
        runtime = self._encoder()
        return encoder_tasks.classify_tokens(runtime, self._token_lists(texts))

    def _encoder(self):
        self._check_open()
        if not self.is_encoder:
            raise TypeError(f"rerank/classify need an encoder with a classification head (bert, nomic-bert, "
                            f"jina-bert-v2, modern-bert); this model is {self.architecture!r}")
        return self.serialized

    def stream(self, prompt: str | Sequence[int], max_tokens: int | None = 256, temperature: float = D.temperature,
               top_k: int = D.top_k, top_p: float = D.top_p, min_p: float = D.min_p,
               repeat_penalty: float = D.repeat_penalty, presence_penalty: float = D.presence_penalty,
               frequency_penalty: float = D.frequency_penalty, repeat_last_n: int = D.repeat_last_n,
               seed: int | None = D.seed, stop: str | Sequence[str] = (),
               context: Context | None = None, json_schema=None, grammar=None, lark: str | None = None,
               regex: str | None = None, logprobs: int | None = None,
               logit_bias: Mapping[int, float] | None = None) -> Iterator[GenerationChunk]:
        """GenerationChunks (text, tokens; the last one has finish_reason and timings).
        The defaults are llama.cpp's; temperature <= 0 is greedy. Close it to stop early.
        logprobs=N (0..20): each chunk's .logprobs holds a TokenLogprob per token (its logprob
        and the N most likely tokens), the log-softmax of the model's raw logits, before bias,
        penalties and sampling (sampling/logprobs.py). logit_bias {token id: -100..100} is added to the
        logits before sampling (-100 bans a token).
        Without `context` the request goes through the model's batched engine (several threads
        may call this at once); with one, it runs in that context (a chat session's cache).
        Constrained output (at most one): json_schema (a dict or JSON text), grammar (GBNF text,
        llama.cpp's format, or a Grammar from constrain.compile_grammar), lark (llguidance's Lark),
        regex. The answer then follows it and ends ("stop") when it is complete; one that cannot
        be used raises GrammarError (a ValueError) here, before anything runs."""
        self._check_generative()
        tokens = self._prompt_tokens(prompt)
        if not tokens:
            raise ValueError("the prompt is empty (no tokens to start from)")
        logprobs = check_n_top(logprobs)
        bias = check_logit_bias(logit_bias, self.n_vocab)
        constraint = self._grammar(json_schema, grammar, lark, regex)
        params = SamplingParams(temperature, top_k, top_p, min_p, repeat_penalty, presence_penalty,
                                frequency_penalty, repeat_last_n, seed, bias)
        if context is None:  # through the engine: safe from several threads, and batched
            from .batching.request import ChunkStream, Request
            request = Request(tokens, max_tokens, stop, params, grammar=constraint, logprobs=logprobs)
            return ChunkStream(self.engine.submit(request))
        ctx = context
        check_prompt_fits(len(tokens), ctx.n_ctx)
        matcher = constraint.matcher() if constraint is not None else None
        speculator = None
        if self.speculative is not None:
            from .speculative.decode import Speculator, make_proposer
            proposer = self._proposers.get(ctx)
            if proposer is None:
                proposer = self._proposers[ctx] = make_proposer(self.speculative, self._draft_runtime(), ctx.n_ctx,
                                                                self.kv_dtype)
            speculator = Speculator(self.speculative, params, proposer)
        return stream_generate(ctx, self.tokenizer, tokens, params, max_tokens, stop, matcher, logprobs, speculator)

    def _draft_runtime(self):
        return self.draft_model.serialized if self.draft_model is not None else None

    def _grammar(self, json_schema, grammar, lark, regex):
        """The compiled constraint of a generate/stream/chat call, or None."""
        if json_schema is None and grammar is None and lark is None and regex is None:
            return None
        from .constrain import Grammar, compile_grammar
        if isinstance(grammar, Grammar):
            if json_schema is not None or lark is not None or regex is not None:
                from .constrain import GrammarError
                raise GrammarError("give one of json_schema, grammar, lark, regex")
            return grammar
        return compile_grammar(self.tokenizer, json_schema=json_schema, gbnf=grammar, lark=lark, regex=regex)

    def generate(self, prompt: str | Sequence[int], stream: bool = False, **kwargs):
        """Text or token ids in; a GenerationResult (.text, .tokens, .finish_reason, .timings)
        out, or with stream=True an iterator of text chunks (close it to stop early).
        Keyword arguments as for `stream`."""
        self._check_open()
        tokens = self._prompt_tokens(prompt)
        chunks = self.stream(tokens, **kwargs)
        if stream:
            return _text_stream(chunks)
        return collect(chunks, tokens)

    # -- asyncio (aio.py): the loop's thread never runs or waits on a forward pass ------------------
    def astream(self, prompt: str | Sequence[int], **kwargs):
        """`async for chunk in model.astream(...)`: stream's chunks; cancelling the task (or leaving
        the loop) cancels the request within one token. Keyword arguments as for `stream`."""
        from .aio import astream
        return astream(self, prompt, **kwargs)

    async def agenerate(self, prompt: str | Sequence[int], **kwargs) -> GenerationResult:
        """`await model.agenerate(...)`: generate's GenerationResult. Keyword arguments as for `stream`."""
        from .aio import agenerate
        return await agenerate(self, prompt, **kwargs)

    async def achat(self, messages: Sequence[Mapping[str, Any]], **kwargs) -> GenerationResult:
        from .aio import achat
        return await achat(self, messages, **kwargs)

    # -- chat ------------------------------------------------------------------------------------
    def apply_chat_template(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True) -> str:
        return self.chat_template.render(messages, add_generation_prompt=add_generation_prompt)

    def chat_tokens(self, messages: Sequence[Mapping[str, Any]], allow_special_in_content: bool = False,
                    max_tokens: int | None = None) -> list[int]:
        """The rendered conversation as tokens; BOS is added by the model's rules unless the
        template already wrote it (llama.cpp does the same).

        Message content is plain text: control-token text in it (`<|im_end|>`, `<start_of_turn>`)
        becomes ordinary text tokens, so a message cannot forge a turn; only the template's own
        control tokens are control tokens. A content with control-token text that the template
        does not write as it is raises ChatContentError (a ValueError). allow_special_in_content=True
        tokenizes content like the template (llama.cpp's behaviour): only for trusted content.
        max_tokens: a conversation certainly longer raises TooManyTokensError before it is tokenized."""
        return chat_prompt_tokens(self.chat_template, self.tokenizer, messages, allow_special_in_content,
                                  max_tokens=max_tokens)

    def chat(self, messages: Sequence[Mapping[str, Any]], allow_special_in_content: bool = False, **kwargs):
        """Like generate, with the conversation rendered by the chat template (see chat_tokens)."""
        return self.generate(self.chat_tokens(messages, allow_special_in_content), **kwargs)

    def chat_session(self, system: str | None = None, allow_special_in_content: bool = False,
                     **defaults) -> "ChatSession":
        self._check_open()
        from .chat.session import ChatSession
        return ChatSession(self, system=system, allow_special_in_content=allow_special_in_content, **defaults)

    # -- saved state -----------------------------------------------------------------------------
    @property
    def identity(self) -> str:
        """A hash naming this model file's contents, recorded in saved states (kv/session_state.py)."""
        if getattr(self, "_identity", None) is None:
            self._check_open()
            from .kv.session_state import model_identity
            self._identity = model_identity(self.gguf)
        return self._identity

    @property
    def compute_identity(self) -> str:
        """The model's identity and the kernels that compute its K/V (backend and ISA): prefix
        blocks computed by other kernels round differently, so a folder shared with another
        machine or backend does not hand them to this one (its requests stay bit-exact)."""
        from .backend import kernels
        isa = kernels.isa() if self.backend == "c" else "numpy"
        layout = "-repacked" if getattr(self.runtime, "layout_rounds", False) else ""  # its GEMV rows round otherwise
        return f"{self.identity}/{self.backend}-{isa}{layout}"

    def save_state(self, path: str | os.PathLike, state) -> None:
        """Writes a ChatSession or Context (its tokens and KV cache) to `path`, atomically."""
        state.save(path)

    def load_state(self, path: str | os.PathLike, **session_defaults):
        """A new ChatSession (or Context) holding what save_state wrote, continuing bit-exactly.
        Raises StateMismatchError (another model, cache type or n_ctx) or StateFileError (corrupt,
        truncated), both ValueErrors."""
        from .kv.state_file import read_header
        kind = read_header(path).get("kind")
        if kind == "chat":
            session = self.chat_session(**session_defaults)
            session.load(path)
            return session
        n_ctx = read_header(path).get("n_ctx")
        ctx = self.new_context(n_ctx if isinstance(n_ctx, int) and 0 < n_ctx <= self.n_ctx else None)
        ctx.load(path)
        return ctx

    # -- description -----------------------------------------------------------------------------
    def info(self) -> dict:
        from .describe import describe
        return describe(self.gguf)

    def memory(self) -> dict:
        """Where this model's memory goes, in bytes (allocated; what is resident is at most that):
        weights_mapped: tensors read in place from the mmapped file (their pages are the file's);
        weight_copies: weights held outside the mmap (repacked matrices, concatenated q|k|v and
        gate|up, dequantized matrices of the reference backend, float32 norm vectors); while the
        repack after load runs (wait_repacked), bytes move from the first to the second;
        kv_cache: the KV caches of live contexts and of the engine's slots (a slot gets its
        cache when it first runs a request; pages become resident as positions are written);
        prefix_cache: K/V blocks the engine keeps to reuse prompt prefixes (at most 64 MiB);
        scratch: None -- the C kernels' per-thread buffers (csrc/core/scratch.c) and numpy's
        activations are not counted (they follow the largest batch run, not the model)."""
        self._check_open()
        mapped = sum(t.nbytes for name, t in self.gguf.tensors.items() if name not in self.gguf.released)
        caches = [ctx.cache for ctx in list(self._contexts)]
        prefix = 0
        engine = self._engine
        if engine is not None:
            caches += [slot.cache for slot in engine.slots if slot.cache is not None]
            prefix = engine.prefix_cache.nbytes if engine.prefix_cache is not None else 0
        kv = sum(c.nbytes for c in {id(c): c for c in caches}.values())
        return {"weights_mapped": mapped, "weight_copies": int(getattr(self.runtime, "weight_copy_bytes", 0)),
                "kv_cache": kv, "prefix_cache": prefix, "scratch": None}

    def close(self) -> None:
        """Stops the engine thread and drops its slots' caches, the weights (the stacked copies and
        the mmap) and the runtime; contexts made from this model fail from now on. Idempotent."""
        if self.closed:
            return
        self.closed = True
        if self._engine_finalizer is not None:
            self._engine_finalizer()  # engine.close(), once
        self._engine = None
        if self.draft_model is not None and self._owns_draft:
            self.draft_model.close()
        self._stop_repack()   # before the mapping it reads goes
        with self._lock:  # after a forward pass in flight on another thread
            self.serialized.runtime = None
        self.runtime = None
        self.gguf.close()  # the mapping goes when the last view of it does (with the runtime)
        _give_back_freed_memory()

    def wait_repacked(self, timeout: float | None = None) -> bool:
        """Blocks until the matrices repacked after load (arch/deferred_repack.py) are all in place, or
        `timeout` seconds pass (then False). Results are the same before and after; decode is faster
        after. A benchmark waits here so that it measures the layout the model keeps."""
        self._check_open()
        repack = self._deferred_repack
        return repack is None or repack.wait(timeout)

    @property
    def _deferred_repack(self):
        """The runtime's repack after load (arch/deferred_repack.py); None without one or once closed."""
        return getattr(self.runtime, "deferred_repack", None)

    def _stop_repack(self) -> None:
        repack = self._deferred_repack
        if repack is not None:
            repack.stop()

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        closed = ", closed" if self.closed else ""
        return f"Model({self.path!r}, architecture={self.architecture!r}, n_ctx={self.n_ctx}{closed})"


def _give_back_freed_memory() -> None:
    """glibc keeps what a closed model freed (its per-thread arenas, and arrays below the mmap
    threshold it raises as big arrays come and go) for the process's next allocations: 20-40 MiB
    after SmolLM2. Collect the model's cycles, then hand free heap memory back to the OS (glibc's
    malloc_trim; elsewhere nothing to do)."""
    import ctypes
    import gc

    gc.collect()
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    trim(0)


def _choose_repack(repack: bool | None) -> bool:
    """load()'s repack option: as given, else LOCALINFER_REPACK (0/false/off/no: off), else on."""
    if repack is not None:
        if not isinstance(repack, bool):
            raise TypeError(f"repack is True, False or None, got {type(repack).__name__}")
        return repack
    env = os.environ.get("LOCALINFER_REPACK", "").strip().lower()
    if env in ("", "1", "true", "on", "yes"):
        return True
    if env in ("0", "false", "off", "no"):
        return False
    raise ValueError(f"LOCALINFER_REPACK={env!r}: use 1 or 0")


def _choose_backend(backend: str, n_threads: int | None) -> str:
    if backend not in ("auto", "c", "reference"):
        raise ValueError(f"backend must be 'auto', 'c' or 'reference', got {backend!r}")
    from .backend import kernels
    if backend == "auto":
        backend = "c" if kernels.available() else "reference"
        if backend == "reference":  # installed without a C compiler (setup.py): it works, slowly
            warnings.warn(f"localinfer is using its numpy path, many times slower than the C kernels: "
                          f"{kernels.unavailable_reason()}", RuntimeWarning, stacklevel=3)
    if backend == "c":
        if not kernels.available():
            raise RuntimeError(kernels.unavailable_reason())
        if n_threads:
            kernels.set_threads(n_threads)
    return backend


def _offload(runtime, f, n_gpu_layers: int | None, device: str | None) -> int:
    """How many layers went to the CUDA device, after putting them there, with llama.cpp's -ngl meaning:
    the first N layers; above the layer count (or -1, or device="cuda") the output matrix too."""
    if device not in (None, "cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if device == "cpu" and n_gpu_layers:
        raise ValueError(f"n_gpu_layers={n_gpu_layers} asks for the GPU and device='cpu' for none: give one")
    if not n_gpu_layers and device != "cuda":
        return 0
    from .arch.layer import DecoderLayer
    if not all(isinstance(layer, DecoderLayer) for layer in runtime.weights.layers):
        raise ValueError(f"the CUDA path runs decoder layers; this model's are not ({type(runtime).__name__}): "
                         f"leave n_gpu_layers and device unset")
    asked, n_layer = n_gpu_layers, len(runtime.weights.layers)
    if n_gpu_layers is None or n_gpu_layers < 0:
        n_gpu_layers = n_layer + 1
    n = min(int(n_gpu_layers), n_layer)
    from .backend.cuda.device import CudaUnavailable, check_available   # numba-cuda only when asked for
    try:
        check_available()
    except CudaUnavailable as e:
        if device == "cuda":
            raise
        # llama.cpp's habit: -ngl on a machine without a usable GPU warns and runs on the CPU
        warnings.warn(f"n_gpu_layers {asked} ignored, every layer runs on the CPU: {e}", UserWarning,
                      stacklevel=3)
        return 0
    from .backend.cuda.layers import CudaLayers, offload_output
    runtime.gpu_layers = CudaLayers(runtime, f, n)
    dropped = runtime.gpu_layers.drop_host_copies(runtime, f)
    if n_gpu_layers > n_layer:
        dropped += offload_output(runtime, f)
    runtime.weight_copy_bytes = getattr(runtime, "weight_copy_bytes", 0) - dropped
    return n


def _speculation(target: Model, draft, draft_max, draft_min, draft_p_min, lookup_ngram):
    """(the draft Model or None, SpeculativeConfig or None) of Model's speculative options, checked."""
    from .speculative import SpeculativeConfig, check_same_vocab
    config = SpeculativeConfig(draft_max, draft_min, draft_p_min, lookup_ngram)
    target._owns_draft = False
    if draft is None:
        return None, (config if lookup_ngram > 0 else None)
    if not isinstance(draft, Model):
        draft = Model(resolve_model(draft), n_ctx=target.n_ctx, n_threads=target.n_threads,
                      kv_dtype="f16" if target.kv_dtype == np.float16 else "f32", backend=target.backend,
                      repack=target.repack)
        target._owns_draft = True
    try:
        check_same_vocab(target.tokenizer, draft.tokenizer, target.path, draft.path)
    except ValueError:
        if target._owns_draft:
            draft.close()
        raise
    return draft, config


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
