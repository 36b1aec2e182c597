"""llama-cpp-python's high-level API over localinfer: change one import,

    from localinfer.compat.llama_cpp import Llama      # was: from llama_cpp import Llama

and a script's `Llama(model_path=...)`, `llm(prompt)`, `llm.create_chat_completion(messages)`,
`llm.tokenize(b"...")` and their dict results work as llama-cpp-python's do, on localinfer's engine.

Covered so far: the constructor's common arguments (GPU-only ones are accepted and ignored, an
unknown one is a TypeError naming it); create_completion / __call__ and create_chat_completion
(whole or streamed, stop, sampling, seed, logit_bias, grammar, response_format json_object/schema,
logprobs); create_embedding / embed; tokenize, detokenize, n_ctx, n_vocab, token_bos, token_eos,
reset; LlamaGrammar.from_string / from_json_schema. A prompt longer than the context is a
ValueError, as there. Not yet: tools/functions, suffix (infill), echo, from_pretrained, save_state.
"""
from __future__ import annotations

import json
import time
import uuid
from typing import Any, Iterator, Mapping, Sequence

LLAMA_DEFAULT_SEED = 0xFFFFFFFF
# llama-cpp-python's constructor arguments that localinfer has no use for, accepted as there
_IGNORED = {"n_gpu_layers", "split_mode", "main_gpu", "tensor_split", "vocab_only", "use_mmap", "use_mlock",
            "kv_overrides", "rpc_servers", "n_ubatch", "n_threads_batch", "rope_scaling_type", "pooling_type",
            "rope_freq_base", "rope_freq_scale", "yarn_ext_factor", "yarn_attn_factor", "yarn_beta_fast",
            "yarn_beta_slow", "yarn_orig_ctx", "logits_all", "offload_kqv", "flash_attn", "op_offload",
            "swa_full", "no_perf", "last_n_tokens_size", "lora_base", "lora_scale", "lora_path", "numa",
            "chat_handler", "tokenizer", "spm_infill", "verbose", "n_batch", "embedding", "mul_mat_q"}


class LlamaGrammar:
    """A grammar for `grammar=`: GBNF text or a JSON schema, compiled for a model when it is used."""

    def __init__(self, gbnf: str | None = None, json_schema: str | None = None):
        self.gbnf, self.json_schema = gbnf, json_schema

    @classmethod
    def from_string(cls, grammar: str, verbose: bool = True) -> "LlamaGrammar":
        return cls(gbnf=grammar)

    @classmethod
    def from_json_schema(cls, json_schema: str, verbose: bool = True) -> "LlamaGrammar":
        return cls(json_schema=json_schema)


class Llama:
    def __init__(self, model_path: str, *, n_ctx: int = 512, n_threads: int | None = None, seed: int = LLAMA_DEFAULT_SEED,
                 chat_format: str | None = None, draft_model=None, type_k: int | None = None, type_v: int | None = None,
                 **kwargs):
        unknown = sorted(set(kwargs) - _IGNORED)
        if unknown:
            raise TypeError(f"Llama() got an unexpected keyword argument {unknown[0]!r}")
        if chat_format is not None:
            raise ValueError(f"chat_format {chat_format!r}: localinfer renders the GGUF's own chat template only")
        if draft_model is not None or type_k is not None or type_v is not None:
            raise ValueError("draft_model, type_k and type_v are not supported by this shim yet")
        import localinfer
        self.model_path = model_path
        self._model = localinfer.load(model_path, n_ctx=n_ctx or None, n_threads=n_threads)
        self._seed = None if seed == LLAMA_DEFAULT_SEED else seed
        self.verbose = kwargs.get("verbose", True)

    # -- the vocabulary ------------------------------------------------------------------------------
    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        if not isinstance(text, bytes):
            raise TypeError(f"tokenize takes bytes, as llama-cpp-python's does, got {type(text).__name__}")
        return self._model.tokenize(text.decode("utf-8", errors="replace"), add_special=add_bos,
                                    parse_special=special)

    def detokenize(self, tokens: Sequence[int], prev_tokens: Sequence[int] | None = None,
                   special: bool = False) -> bytes:
        t = self._model.tokenizer
        ids = self._model._check_ids(tokens)
        return b"".join(t.token_to_bytes(i, render_special=special) for i in ids)

    def n_ctx(self) -> int:
        return self._model.n_ctx

    def n_vocab(self) -> int:
        return self._model.n_vocab

    def token_bos(self) -> int:
        return -1 if self._model.tokenizer.bos_id is None else self._model.tokenizer.bos_id

    def token_eos(self) -> int:
        return -1 if self._model.tokenizer.eos_id is None else self._model.tokenizer.eos_id

    def reset(self) -> None:
        """llama-cpp-python forgets its evaluated tokens; localinfer's engine keeps none per caller."""

    def close(self) -> None:
        self._model.close()

    # -- generation ----------------------------------------------------------------------------------
    def _options(self, max_tokens, temperature, top_p, min_p, top_k, stop, seed, repeat_penalty,
                 presence_penalty, frequency_penalty, logit_bias, grammar, logprobs) -> dict:
        options = dict(max_tokens=None if max_tokens is None or max_tokens <= 0 else max_tokens,
                       temperature=temperature, top_p=top_p, min_p=min_p, top_k=top_k,
                       stop=[stop] if isinstance(stop, str) else list(stop or []),
                       seed=self._seed if seed is None else seed, repeat_penalty=repeat_penalty,
                       presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
                       logit_bias={int(k): float(v) for k, v in (logit_bias or {}).items()} or None,
                       logprobs=logprobs)
        if isinstance(grammar, LlamaGrammar):
            options["grammar" if grammar.gbnf is not None else "json_schema"] = grammar.gbnf or grammar.json_schema
        elif grammar is not None:
            raise TypeError("grammar must be a LlamaGrammar")
        return options

    def _stream(self, tokens: list[int], options: dict):
        from ..generate import check_prompt_fits
        try:
            check_prompt_fits(len(tokens), self._model.n_ctx)
        except ValueError:
            raise ValueError(f"Requested tokens ({len(tokens)}) exceed context window of {self._model.n_ctx}") from None
        return self._model.stream(tokens, **options)

    def create_completion(self, prompt: str | Sequence[int], suffix: str | None = None, max_tokens: int | None = 16,
                          temperature: float = 0.8, top_p: float = 0.95, min_p: float = 0.05, typical_p: float = 1.0,
                          logprobs: int | None = None, echo: bool = False, stop: str | Sequence[str] | None = None,
                          frequency_penalty: float = 0.0, presence_penalty: float = 0.0, repeat_penalty: float = 1.0,
                          top_k: int = 40, stream: bool = False, seed: int | None = None, logit_bias=None,
                          grammar: LlamaGrammar | None = None, **unsupported):
        for name, value in (("suffix", suffix), ("echo", echo or None), ("typical_p", None if typical_p == 1.0 else 1)):
            if value is not None:
                raise ValueError(f"{name} is not supported by localinfer's llama-cpp-python shim yet")
        _refuse(unsupported)
        tokens = self.tokenize(prompt.encode(), add_bos=True, special=True) if isinstance(prompt, str) else list(prompt)
        options = self._options(max_tokens, temperature, top_p, min_p, top_k, stop, seed, repeat_penalty,
                                presence_penalty, frequency_penalty, logit_bias, grammar, logprobs)
        chunks = self._stream(tokens, options)
        head = {"id": "cmpl-" + uuid.uuid4().hex, "object": "text_completion", "created": int(time.time()),
                "model": self.model_path}
        if stream:
            return self._completion_chunks(head, chunks)
        text, n, finish = _collect(chunks)
        return {**head, "choices": [{"text": text, "index": 0, "logprobs": None,
                                     "finish_reason": _finish(finish)}],
                "usage": {"prompt_tokens": len(tokens), "completion_tokens": n, "total_tokens": len(tokens) + n}}

    __call__ = create_completion

    def _completion_chunks(self, head: dict, chunks) -> Iterator[dict]:
        try:
            for chunk in chunks:
                if chunk.text or chunk.finish_reason:
                    yield {**head, "choices": [{"text": chunk.text, "index": 0, "logprobs": None,
                                                "finish_reason": _finish(chunk.finish_reason) if chunk.finish_reason
                                                else None}]}
        finally:
            chunks.close()

    def create_chat_completion(self, messages: Sequence[Mapping[str, Any]], temperature: float = 0.2,
                               top_p: float = 0.95, top_k: int = 40, min_p: float = 0.05, stream: bool = False,
                               stop: str | Sequence[str] | None = None, seed: int | None = None,
                               response_format: Mapping | None = None, max_tokens: int | None = None,
                               presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
                               repeat_penalty: float = 1.0, logit_bias=None, grammar: LlamaGrammar | None = None,
                               tools=None, tool_choice=None, functions=None, function_call=None, **unsupported):
        if tools or functions:
            raise ValueError("tools and functions are not supported by localinfer's llama-cpp-python shim yet")
        _refuse(unsupported)
        if response_format and response_format.get("type") == "json_object":
            schema = response_format.get("schema") or {"type": "object"}
            grammar = LlamaGrammar.from_json_schema(json.dumps(schema))
        tokens = self._model.chat_tokens(list(messages))
        options = self._options(max_tokens, temperature, top_p, min_p, top_k, stop, seed, repeat_penalty,
                                presence_penalty, frequency_penalty, logit_bias, grammar, None)
        chunks = self._stream(tokens, options)
        head = {"id": "chatcmpl-" + uuid.uuid4().hex, "created": int(time.time()), "model": self.model_path}
        if stream:
            return self._chat_chunks(head, chunks)
        text, n, finish = _collect(chunks)
        return {**head, "object": "chat.completion",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "logprobs": None, "finish_reason": _finish(finish)}],
                "usage": {"prompt_tokens": len(tokens), "completion_tokens": n, "total_tokens": len(tokens) + n}}

    def _chat_chunks(self, head: dict, chunks) -> Iterator[dict]:
        chunk_head = {**head, "object": "chat.completion.chunk"}
        try:
            yield {**chunk_head, "choices": [{"index": 0, "delta": {"role": "assistant"}, "logprobs": None,
                                              "finish_reason": None}]}
            for chunk in chunks:
                if chunk.text:
                    yield {**chunk_head, "choices": [{"index": 0, "delta": {"content": chunk.text}, "logprobs": None,
                                                      "finish_reason": None}]}
                if chunk.finish_reason:
                    yield {**chunk_head, "choices": [{"index": 0, "delta": {}, "logprobs": None,
                                                      "finish_reason": _finish(chunk.finish_reason)}]}
        finally:
            chunks.close()

    # -- embeddings ----------------------------------------------------------------------------------
    def embed(self, input: str | Sequence[str], normalize: bool = True, truncate: bool = True):
        texts = [input] if isinstance(input, str) else list(input)
        vectors = self._model.embed(texts).tolist()
        return vectors[0] if isinstance(input, str) else vectors

    def create_embedding(self, input: str | Sequence[str], model: str | None = None) -> dict:
        texts = [input] if isinstance(input, str) else list(input)
        vectors = self._model.embed(texts).tolist()
        n = sum(len(self._model.tokenize(t)) for t in texts)
        return {"object": "list", "model": model or self.model_path,
                "data": [{"object": "embedding", "embedding": v, "index": i} for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": n, "total_tokens": n}}


def _collect(chunks) -> tuple[str, int, str]:
    """A whole answer's text, its token count and its finish reason, from its chunks."""
    text, n, finish = [], 0, "stop"
    for chunk in chunks:
        text.append(chunk.text)
        n += len(chunk.tokens)
        finish = chunk.finish_reason or finish
    return "".join(text), n, finish


def _finish(reason: str | None) -> str:
    return "length" if reason in ("length", "context_full") else "stop"


# llama-cpp-python's generation arguments the shim lacks, at the value that leaves each off (what
# LangChain and LlamaIndex pass along): another value is refused, never ignored
_OFF = {"tfs_z": 1.0, "mirostat_mode": 0, "mirostat_tau": 5.0, "mirostat_eta": 0.1, "model": None,
        "logits_processor": None, "stopping_criteria": None, "top_logprobs": None, "logprobs": None}


def _refuse(unsupported: dict) -> None:
    for name, value in sorted(unsupported.items()):
        if name not in _OFF:
            raise TypeError(f"got an unexpected keyword argument {name!r}")
        if value != _OFF[name] and not (name == "logprobs" and value is False):
            raise ValueError(f"{name}={value!r} is not supported by localinfer's llama-cpp-python shim yet")
