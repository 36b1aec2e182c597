"""`llama_cpp.Llama` over localinfer: the class, its one context, and its vocabulary and state.

Like llama-cpp-python's, a Llama holds one context (a KV cache and the tokens in it): each call
generates in it, reusing the prefix it shares with the previous one, save_state/load_state copy
it, eval() extends it, and a call computes only what its prompt does not share with what the
context holds, the last prompt token at least. Unlike there, a reused prefix never changes an
answer: only the K/V of prompts of MIN_PREFILL_ROWS tokens or more are kept, computed batched (a
row's result does not depend on the pass it is in, context.py), not a generated token's, so a call
gives the bits a fresh context would; with llama-cpp-python a repeated greedy call can part from
the first at a near tie. Calls from several
threads take turns (llama-cpp-python leaves that to the caller); a new call on the thread of a
stream left open ends that stream first, which llama-cpp-python's single context would have
garbled. Generation runs through Model.stream in that context: sampling, grammars, logprobs, stop
strings and prompt-lookup drafting are localinfer's own.
"""
from __future__ import annotations

import os
import random
import threading
import time
import uuid
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from ...context import prefills_batched
from . import options as opts
from . import state as llama_state
from .completion import Answer, prompt_tokens
from .llama_chat_format import GGUF_TEMPLATE, check_chat_format, default_chat_format
from .llama_grammar import LlamaGrammar
from .llama_speculative import LlamaDraftModel, LlamaPromptLookupDecoding  # noqa: F401  (llama_cpp.llama's names)
from .state import LlamaState

LLAMA_DEFAULT_SEED = opts.LLAMA_DEFAULT_SEED

# llama-cpp-python's generation arguments without a counterpart here, at the value that leaves each
# off (LangChain and LlamaIndex pass them along so): any other value is refused, never ignored
_OFF = {"typical_p": 1.0, "tfs_z": 1.0, "mirostat_mode": 0, "mirostat_tau": 5.0, "mirostat_eta": 0.1,
        "logits_processor": None, "stopping_criteria": None}


class Llama:
    def __init__(self, model_path: str, *, n_ctx: int = 512, n_threads: int | None = None,
                 seed: int = LLAMA_DEFAULT_SEED, chat_format: str | None = None, draft_model=None,
                 type_k: int | None = None, type_v: int | None = None, pooling_type: int = -1,
                 last_n_tokens_size: int = 64, spm_infill: bool = False, **kwargs):
        opts.check_names(kwargs)
        from ...files.fetch import ModelNotFoundError, resolve_model
        try:  # a path, or (localinfer's own) a catalog or Hugging Face name
            path = model_path if os.path.exists(model_path) else str(resolve_model(model_path))
        except ModelNotFoundError:  # llama-cpp-python's error, which scripts catch
            raise ValueError(f"Model path does not exist: {model_path}") from None
        speculative = opts.speculation(draft_model)
        cache_k, cache_v = opts.cache_type("type_k", type_k), opts.cache_type("type_v", type_v)
        self._pooling = opts.pooling(pooling_type)
        opts.note_gpu_options(kwargs)
        import localinfer
        self.model_path = model_path
        self._model = localinfer.load(path, n_ctx=n_ctx or None, n_threads=n_threads, n_parallel=1,
                                      cache_type_k=cache_k, cache_type_v=cache_v, **speculative)
        try:
            opts.check_as_the_file(kwargs, self._model.metadata)
            self.chat_format = (default_chat_format(self._model.metadata) if chat_format is None
                                else check_chat_format(chat_format, self._model.metadata))
        except ValueError:
            self._model.close()
            raise
        if self._pooling is None and f"{self._model.architecture}.pooling_type" not in self._model.metadata:
            self._pooling = "none"   # llama.cpp's default for a model that names none: a vector per token
        self._ctx = self._model.new_context()
        self._exact = 0  # leading tokens of the context whose K/V a fresh prefill would compute bit for bit
        self._seed = seed
        self.draft_model, self.spm_infill, self.verbose = draft_model, spm_infill, kwargs.get("verbose", True)
        self._repeat_last_n = last_n_tokens_size
        self._turn = threading.Condition()  # guards _running: (owner token, thread id) of the open generation
        self._running: tuple[object, int, Any] | None = None
        self._templates: dict = {}

    @classmethod
    def from_pretrained(cls, repo_id: str, filename: str | None, additional_files: Sequence[str] | None = None,
                        local_dir: str | os.PathLike | None = None, local_dir_use_symlinks: Any = "auto",
                        cache_dir: str | os.PathLike | None = None, **kwargs) -> "Llama":
        """The file of the Hugging Face repository `repo_id` that `filename` (a glob) matches,
        downloaded through huggingface_hub (its cache, token and HF_ENDPOINT), then Llama(path, **kwargs)."""
        from .pretrained import download
        path = download(repo_id, filename, additional_files, local_dir, cache_dir)
        return cls(model_path=path, **kwargs)

    # -- the vocabulary ------------------------------------------------------------------------------
    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        if not isinstance(text, bytes):
            raise TypeError(f"tokenize takes bytes, as llama-cpp-python's does, got {type(text).__name__}")
        return self._model.tokenize(text.decode("utf-8", errors="replace"), add_special=add_bos,
                                    parse_special=special)

    def detokenize(self, tokens: Sequence[int], prev_tokens: Sequence[int] | None = None,
                   special: bool = False) -> bytes:
        """The tokens' bytes; a leading space after a leading BOS is dropped, as llama-cpp-python does."""
        t = self._model.tokenizer
        ids = self._model._check_ids(tokens)
        out = b"".join(t.token_to_bytes(i, render_special=special) for i in ids)
        return out[1:] if ids[:1] == [t.bos_id] and out[:1] == b" " else out

    def n_ctx(self) -> int:
        return self._ctx.n_ctx

    def n_vocab(self) -> int:
        return self._model.n_vocab

    def n_embd(self) -> int:
        return int(self._model.runtime.config.n_embd)

    def token_bos(self) -> int:
        return -1 if self._model.tokenizer.bos_id is None else self._model.tokenizer.bos_id

    def token_eos(self) -> int:
        return -1 if self._model.tokenizer.eos_id is None else self._model.tokenizer.eos_id

    def token_nl(self) -> int:
        ids = self._model.tokenize("\n", add_special=False, parse_special=False)
        return ids[0] if len(ids) == 1 else -1

    @property
    def metadata(self) -> dict[str, str]:
        """The GGUF's scalar metadata as strings, as llama.cpp's API hands them out (arrays left out)."""
        return {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in self._model.metadata.items()
                if not isinstance(v, (list, tuple, np.ndarray))}

    # -- the context ---------------------------------------------------------------------------------
    @property
    def n_tokens(self) -> int:
        return len(self._ctx.tokens)

    @property
    def input_ids(self) -> np.ndarray:
        return np.asarray(self._ctx.tokens, dtype=np.intc)

    def set_seed(self, seed: int) -> None:
        self._seed = seed

    def reset(self) -> None:
        """Forget the evaluated tokens (the next call computes its whole prompt)."""
        with self._held():
            self._ctx.reset()
            self._exact = 0

    def eval(self, tokens: Sequence[int]) -> None:
        """Evaluate `tokens` after those the context holds (a prompt prefilled ahead of time)."""
        ids = self._model._check_ids(tokens)
        if self.n_tokens + len(ids) > self.n_ctx():
            raise ValueError(f"Requested tokens ({self.n_tokens + len(ids)}) exceed context window of {self.n_ctx()}")
        with self._held():
            n = self.n_tokens
            batched = prefills_batched(n + len(ids))  # as the whole prompt would be computed
            if ids:
                self._ctx.append(ids, last_only=True, batched=batched)
            if self._exact == n and batched:
                self._exact = n + len(ids)

    def save_state(self) -> LlamaState:
        with self._held():
            state = llama_state.save(self._ctx, self._seed)
            state.exact_prefix = min(self._exact, state.n_tokens)
            return state

    def load_state(self, state: LlamaState) -> None:
        with self._held():
            llama_state.load(self._ctx, state)
            self._seed, self._exact = state.seed, getattr(state, "exact_prefix", 0)

    def close(self) -> None:
        self._model.close()

    # -- taking turns at the context ------------------------------------------------------------------
    def _claim(self, owner: object, chunks) -> None:
        """Make `owner` the context's user: a stream left open on this thread is ended; another
        thread's generation is waited for."""
        me = threading.get_ident()
        with self._turn:
            while self._running is not None:
                _, thread, open_chunks = self._running
                if thread != me:
                    self._turn.wait()
                    continue
                self._running = None
                open_chunks.close()  # suspended at a yield: it ends, the context keeps what it computed
            self._running = (owner, me, chunks)

    def _release(self, owner: object) -> None:
        with self._turn:
            if self._running is not None and self._running[0] is owner:
                self._running = None
                self._turn.notify_all()

    def _held(self):
        llama = self

        class Held:
            def __enter__(self):
                self.owner = object()
                llama._claim(self.owner, _Closed())

            def __exit__(self, *exc):
                llama._release(self.owner)
        return Held()

    def _in_context(self, chunks, tokens: list[int]) -> Iterator:
        """Model.stream's chunks (made, and checked, already) for the prompt `tokens`, run when the
        context is ours, from the prefix it may keep (see the module's docstring)."""
        owner = object()
        self._claim(owner, chunks)
        try:
            # the rest of a prompt this long is computed batched (Context.evaluate): the whole prompt's bits
            keep = min(self._ctx.common_prefix(tokens), self._exact, len(tokens) - 1)
            whole = prefills_batched(len(tokens))
            self._ctx.truncate(keep if whole else 0)
            self._exact = len(tokens) if whole else 0
            yield from chunks
        finally:
            chunks.close()
            self._release(owner)

    # -- generation ----------------------------------------------------------------------------------
    def _stream_options(self, max_tokens, temperature, top_p, min_p, top_k, stop, seed, repeat_penalty,
                        presence_penalty, frequency_penalty, logit_bias, grammar, logprobs, unsupported) -> dict:
        for name, value in sorted(unsupported.items()):
            if name not in _OFF:
                raise TypeError(f"got an unexpected keyword argument {name!r}")
            if value != _OFF[name]:
                raise ValueError(f"{name}={value!r} is not supported by localinfer's llama-cpp-python shim")
        if seed is None:  # llama-cpp-python draws each call's seed from the Llama's, so it repeats too
            seed = random.Random(self._seed).randint(0, 2 ** 32 - 1)
        options = dict(max_tokens=None if max_tokens is None or max_tokens <= 0 else max_tokens,
                       temperature=temperature, top_p=top_p, min_p=min_p, top_k=top_k,
                       stop=[stop] if isinstance(stop, str) else list(stop or []), seed=seed,
                       repeat_penalty=repeat_penalty, repeat_last_n=self._repeat_last_n,
                       presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
                       logit_bias={int(k): float(v) for k, v in (logit_bias or {}).items()} or None,
                       logprobs=logprobs)
        if isinstance(grammar, LlamaGrammar):
            options.update(grammar.constraint())
        elif grammar is not None and type(grammar).__name__ == "Grammar":  # compiled here (tool calls)
            options["grammar"] = grammar
        elif grammar is not None:
            raise TypeError(f"grammar must be a LlamaGrammar, got {type(grammar).__name__}")
        return options

    def _generate(self, prompt, tokens: list[int], options: dict, stream: bool, echo: bool,
                  model: str | None):
        """The completion of `tokens` (the dict, or its stream chunks)."""
        if len(tokens) >= self.n_ctx():
            raise ValueError(f"Requested tokens ({len(tokens)}) exceed context window of {self.n_ctx()}")
        if not tokens:
            raise ValueError("the prompt is empty (no tokens to start from)")
        chunks = self._model.stream(tokens, context=self._ctx, **options)  # checks everything before it runs
        head = {"id": "cmpl-" + str(uuid.uuid4()), "object": "text_completion", "created": int(time.time()),
                "model": model if model is not None else self.model_path}
        answer = Answer(self, head, prompt, tokens, self._in_context(chunks, tokens), options.get("logprobs"))
        return answer.stream() if stream else answer.whole(echo)

    def create_completion(self, prompt: str | Sequence[int], suffix: str | None = None, max_tokens: int | None = 16,
                          temperature: float = 0.8, top_p: float = 0.95, min_p: float = 0.05,
                          logprobs: int | None = None, echo: bool = False, stop: str | Sequence[str] | None = None,
                          frequency_penalty: float = 0.0, presence_penalty: float = 0.0, repeat_penalty: float = 1.0,
                          top_k: int = 40, stream: bool = False, seed: int | None = None, model: str | None = None,
                          grammar: LlamaGrammar | None = None, logit_bias: Mapping[int, float] | None = None,
                          **unsupported):
        """llama-cpp-python's completion: the dict (id, object, created, model, choices, usage) or,
        with stream=True, its chunks. echo puts the prompt before the text (not in a stream, as
        there); suffix fills in the middle (completion.prompt_tokens)."""
        tokens = prompt_tokens(self._model, prompt, suffix, self.spm_infill)
        options = self._stream_options(max_tokens, temperature, top_p, min_p, top_k, stop, seed, repeat_penalty,
                                       presence_penalty, frequency_penalty, logit_bias, grammar, logprobs, unsupported)
        return self._generate(prompt, tokens, options, stream, echo and suffix is None, model)

    def __call__(self, prompt: str | Sequence[int], *args, **kwargs):
        return self.create_completion(prompt, *args, **kwargs)

    def create_chat_completion(self, messages: Sequence[Mapping[str, Any]], functions=None, function_call=None,
                               tools=None, tool_choice=None, temperature: float = 0.2, top_p: float = 0.95,
                               top_k: int = 40, min_p: float = 0.05, stream: bool = False,
                               stop: str | Sequence[str] | None = None, seed: int | None = None,
                               response_format: Mapping | None = None, max_tokens: int | None = None,
                               presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
                               repeat_penalty: float = 1.0, model: str | None = None,
                               grammar: LlamaGrammar | None = None, logit_bias: Mapping[int, float] | None = None,
                               logprobs: bool | None = None, top_logprobs: int | None = None, **unsupported):
        """OpenAI-shaped chat answers as llama-cpp-python gives them (chat.py): the chat format's
        prompt, tools offered and calls returned as tool_calls, response_format's JSON."""
        from .chat import chat_completion
        sampling = dict(max_tokens=max_tokens, temperature=temperature, top_p=top_p, min_p=min_p, top_k=top_k,
                        seed=seed, repeat_penalty=repeat_penalty, presence_penalty=presence_penalty,
                        frequency_penalty=frequency_penalty, logit_bias=logit_bias, unsupported=unsupported)
        return chat_completion(self, list(messages), functions=functions, function_call=function_call, tools=tools,
                               tool_choice=tool_choice, stream=stream, stop=stop, response_format=response_format,
                               grammar=grammar, logprobs=logprobs, top_logprobs=top_logprobs, model=model,
                               sampling=sampling)

    def _chat_template(self, name: str):
        """The Jinja template of a "chat_template.<x>" format, compiled once (localinfer's sandbox)."""
        if name == GGUF_TEMPLATE:
            return self._model.chat_template
        if name not in self._templates:
            from ...chat.template import ChatTemplate
            from .llama_chat_format import template_source
            default = self._model.chat_template
            self._templates[name] = ChatTemplate(template_source(name, self._model.metadata),
                                                 bos_token=default.bos_token, eos_token=default.eos_token)
        return self._templates[name]

    # -- embeddings ----------------------------------------------------------------------------------
    def embed(self, input: str | Sequence[str], normalize: bool = False, truncate: bool = True,
              return_count: bool = False):
        """One vector per text, or with pooling none (a chat model's, as llama.cpp's default) a list of
        vectors per text, one per token; L2-normalized with normalize=True; a text alone gives its own."""
        texts = [input] if isinstance(input, str) else list(input)
        vectors = [v.tolist() for v in self._model.embed(texts, pooling=self._pooling, normalize=normalize)]
        out = vectors[0] if isinstance(input, str) else vectors
        if return_count:
            return out, sum(len(self._model.tokenize(t)) for t in texts)
        return out

    def create_embedding(self, input: str | Sequence[str], model: str | None = None) -> dict:
        texts = [input] if isinstance(input, str) else list(input)
        vectors, n = self.embed(texts, return_count=True)
        return {"object": "list", "model": model or self.model_path,
                "data": [{"object": "embedding", "embedding": v, "index": i} for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": n, "total_tokens": n}}


class _Closed:
    """What a synchronous holder of the context gives _claim to close: nothing to end."""

    def close(self) -> None:
        pass
