"""The OpenAI API's request validation and response shapes (chat completions, completions).

Requests are checked field by field before anything reaches the engine: a wrong type, an
out-of-range value, an unsupported option or a prompt that does not fit is an ApiError (400)
in OpenAI's error shape that names the parameter, never a silent fix-up or truncation.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, replace
from typing import Any, Mapping

from ..chat.prompt import ChatContentError
from ..chat.template import ChatTemplateError
from ..batching.fork import Choices
from ..batching.request import Request
from ..sampling.params import SamplingParams
from .choices import ChoiceOptions, LogprobFormat, parse_choice_options
from .response_format import ResponseFormatError, request_grammar
from .timings import timings_json
from ..chat.tools import ToolError
from ..tokenizer import TooManyTokensError
from . import tool_calls

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions; chat has none


class ApiError(Exception):
    def __init__(self, status: int, message: str, type_: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None, headers: Mapping[str, str] | None = None,
                 details: Mapping[str, Any] | None = None):
        """details: more fields of the error object (a long prompt's n_prompt_tokens and n_ctx)."""
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code
        self.headers = dict(headers or {})
        self.details = dict(details or {})

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code,
                          **self.details}}


def bad(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


# -- field checks ---------------------------------------------------------------------------------
def _number(body, name, default, lo, hi):
    v = body.get(name, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise bad(f"'{name}' must be a number, got {type(v).__name__}", name)
    if not lo <= v <= hi:
        raise bad(f"'{name}' must be between {lo} and {hi}, got {v}", name)
    return float(v)


def _integer(body, name, default, lo, hi):
    v = body.get(name, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise bad(f"'{name}' must be an integer, got {type(v).__name__}", name)
    if not lo <= v <= hi:
        raise bad(f"'{name}' must be between {lo} and {hi}, got {v}", name)
    return v


def _boolean(body, name, default=False):
    v = body.get(name, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise bad(f"'{name}' must be a boolean, got {type(v).__name__}", name)
    return v


def _stop(body) -> list[str]:
    v = body.get("stop")
    if v is None:
        return []
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise bad("'stop' must be a string or a list of strings", "stop")
    if len(v) > 16:
        raise bad(f"'stop' takes at most 16 sequences, got {len(v)}", "stop")
    return [s for s in v if s]


def _unsupported(body, name, allowed=(None, False)):
    if body.get(name) not in allowed:
        raise bad(f"'{name}' is not supported by this server", name, "unsupported_parameter")


D = SamplingParams  # the defaults


def sampling_params(body: Mapping[str, Any]) -> SamplingParams:
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise bad(f"'seed' must be an integer, got {type(seed).__name__}", "seed")
    if seed is not None and not -2**63 <= seed < 2**64:
        raise bad("'seed' is out of range", "seed")
    return SamplingParams(
        temperature=_number(body, "temperature", D.temperature, 0.0, 2.0),
        top_k=_integer(body, "top_k", D.top_k, 0, 1 << 20),
        top_p=_number(body, "top_p", D.top_p, 0.0, 1.0),
        min_p=_number(body, "min_p", D.min_p, 0.0, 1.0),
        repeat_penalty=_number(body, "repeat_penalty", D.repeat_penalty, 0.01, 10.0),
        presence_penalty=_number(body, "presence_penalty", D.presence_penalty, -2.0, 2.0),
        frequency_penalty=_number(body, "frequency_penalty", D.frequency_penalty, -2.0, 2.0),
        repeat_last_n=_integer(body, "repeat_last_n", D.repeat_last_n, 0, 1 << 20),
        seed=None if seed is None else seed % 2**64,
    )


@dataclass
class Job:
    """A validated request: what to run, and how to answer it."""
    kind: str  # "chat" | "completion"
    request: Request
    stream: bool
    include_usage: bool
    model: str
    choices: Choices | None = None  # the n choices; `request` is the first
    options: ChoiceOptions = ChoiceOptions()
    logprobs: LogprobFormat | None = None  # how to shape logprobs, when asked for
    echo: str | None = None  # /v1/completions echo: the prompt's text, put before each choice's
    tools: Any = None  # chat with tools on offer: a ToolSetup, whose calls are parsed out of the answer

    @property
    def scores_prompt(self) -> bool:
        return self.request.prompt_logprobs is not None

    def echo_logprobs(self, index: int) -> list | None:
        """The prompt tokens' TokenLogprobs (echo with logprobs) for choice `index`: scored by the
        engine in the request's slot, there once that choice's first chunk has come. Choices that
        share a prefill share the first one's; each choice of a group of max_tokens 0 scores its own."""
        own = self.choices.requests[index].prompt_scores
        return own if own is not None else self.request.prompt_scores


def _common(body, kind: str, model_name: str, tokens: list[int], n_ctx: int, default_max, model,
            tool_grammar=None, max_logprobs: int | None = None) -> Job:
    """tool_grammar: the grammar that holds a chat's answer to its tools' call syntax (parse_chat).
    max_logprobs: the most alternatives per token a completion may ask for (OpenAI's 5 by default)."""
    if kind != "chat":
        _unsupported(body, "tools", (None, []))
    _unsupported(body, "best_of", (None, 1))
    if kind == "chat":
        _unsupported(body, "echo", (None, False))
    _unsupported(body, "suffix", (None, ""))
    choosing = parse_choice_options(body, kind, model.n_vocab, bad, max_logprobs)
    stream = _boolean(body, "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise bad("'stream_options' must be an object", "stream_options")
    include_usage = _boolean(options or {}, "include_usage")
    if options and not stream:
        raise bad("'stream_options' is only allowed with 'stream': true", "stream_options")
    name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = body.get(name)
    if max_tokens is None:
        max_tokens = default_max
    elif isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        raise bad(f"'{name}' must be an integer, got {type(max_tokens).__name__}", name)
    elif max_tokens == -1:  # llama.cpp's "no limit": until a stop, the end of generation or the context's end
        max_tokens = None
    elif max_tokens < 0 or max_tokens > n_ctx:  # can never be honoured: an error, not a silent clamp
        raise bad(f"'{name}' is {max_tokens}, but it must be -1 (until the context is full) or between 0 and "
                  f"the context size {n_ctx}", name, "invalid_value")
    if not tokens:
        raise bad("the prompt is empty", "messages" if kind == "chat" else "prompt")
    if len(tokens) >= n_ctx:
        raise _too_long(len(tokens), n_ctx, "messages" if kind == "chat" else "prompt", exact=True)
    stop, params = _stop(body), replace(sampling_params(body), logit_bias=choosing.logit_bias)
    grammar = tool_grammar
    try:  # last: compiling a schema is the costliest check
        if grammar is None:
            grammar = request_grammar(body, model.tokenizer)
    except ResponseFormatError as e:
        raise bad(str(e), e.param) from None
    choices = Choices(tokens, choosing.n, max_tokens, stop, params, choosing.n_top, grammar)
    logprobs = LogprobFormat(model.tokenizer, kind) if choosing.n_top is not None else None
    return Job(kind, choices.requests[0], stream, include_usage, model_name, choices, choosing, logprobs)


def _text_content(i: int, content) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):  # content parts: text only
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise bad(f"messages[{i}].content: only text parts are supported", f"messages[{i}].content")
            parts.append(part["text"])
        return "".join(parts)
    raise bad(f"messages[{i}].content must be a string or a list of text parts", f"messages[{i}].content")


def _too_long(n_tokens: int, n_ctx: int, param: str, exact: bool = False) -> ApiError:
    """A prompt that leaves no room to generate; `exact=False`: n_tokens is a lower bound, known
    before tokenizing (Tokenizer.fewest_tokens), so that a huge prompt costs nothing."""
    error = bad(f"the prompt is {'' if exact else 'at least '}{n_tokens} tokens long, but the context holds {n_ctx} "
                f"tokens and at least one more is needed to generate: shorten the prompt (or start the server with "
                f"a larger --ctx-size)", param, "context_length_exceeded")
    error.details = {"n_prompt_tokens": n_tokens, "n_ctx": n_ctx}  # llama-server's fields (a lower bound unless exact)
    return error


def parse_chat(body, model, model_name: str, n_ctx: int) -> Job:
    tokens, grammar, setup = chat_prompt(body, model, n_ctx)
    if grammar is not None and body.get("response_format") not in (None, {"type": "text"}):
        raise bad("'response_format' cannot be combined with 'tools' (both constrain the answer)",
                  "response_format", "unsupported_parameter")
    for name in ("grammar", "json_schema"):
        if grammar is not None and body.get(name) is not None:
            raise bad(f"'{name}' cannot be combined with 'tools' (both constrain the answer)",
                      name, "unsupported_parameter")
    if setup.parsed and body.get("logprobs"):
        raise bad("'logprobs' cannot be combined with 'tools' (tool-call deltas carry no logprobs yet)",
                  "logprobs", "unsupported_parameter")
    job = _common(body, "chat", model_name, tokens, n_ctx, None, model, grammar)
    if setup.parsed:
        job.tools = setup
    return job


def chat_prompt(body, model, n_ctx: int):
    """A chat request's prompt tokens as the model will read them (template, tools, their history),
    the grammar its tools impose (or None) and the tools' setup."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad("'messages' must be a non-empty list of {'role': ..., 'content': ...} objects", "messages")
    clean = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise bad(f"messages[{i}] must be an object with a string 'role'", f"messages[{i}]")
        if m["role"] not in ("system", "user", "assistant", "developer", "tool"):
            raise bad(f"messages[{i}].role '{m['role'][:40]}' is not supported", f"messages[{i}].role")
        role = "system" if m["role"] == "developer" else m["role"]
        try:
            clean.append({"role": role, "content": _text_content(i, m.get("content")), **tool_calls.message_fields(i, m)})
        except ToolError as e:
            raise bad(str(e), e.param) from None
    try:
        setup, grammar = tool_calls.tool_setup(body, model.chat_template.source), None
        if setup.parsed or any("tool_calls" in m or m["role"] == "tool" for m in clean):  # tools, or their history
            tokens, grammar = tool_calls.tool_prompt(model, clean, setup, max_tokens=n_ctx - 1)
        else:
            tokens = model.chat_tokens(clean, max_tokens=n_ctx - 1)
    except TooManyTokensError as e:
        raise _too_long(e.at_least, n_ctx, "messages") from None
    except ToolError as e:
        raise bad(str(e), e.param) from None
    except ChatTemplateError as e:
        raise bad(str(e), "messages") from None
    except ChatContentError as e:  # control-token text in content the template rewrites
        raise bad(str(e), f"messages[{e.index}].content") from None
    return tokens, grammar, setup


def parse_completion(body, model, model_name: str, n_ctx: int, max_logprobs: int | None = None) -> Job:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        try:
            tokens = model.tokenize(prompt, max_tokens=n_ctx - 1)
        except TooManyTokensError as e:
            raise _too_long(e.at_least, n_ctx, "prompt") from None
    elif isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        bad_ids = [t for t in prompt if not 0 <= t < model.n_vocab]
        if bad_ids:
            raise bad(f"unknown token id {bad_ids[0]} (the vocabulary has {model.n_vocab} tokens)", "prompt")
        tokens = list(prompt)
    else:
        raise bad("'prompt' must be a string or a list of token ids (one prompt per request)", "prompt")
    job = _common(body, "completion", model_name, tokens, n_ctx, COMPLETIONS_DEFAULT_MAX_TOKENS, model,
                  max_logprobs=max_logprobs)
    if job.options.echo:
        job.echo = prompt if isinstance(prompt, str) else model.detokenize(tokens)
        if job.options.n_top is not None:  # the engine scores the prompt as it prefills it, in the slot
            for r in job.choices.requests:
                r.prompt_logprobs = job.options.n_top
    return job


# -- responses ------------------------------------------------------------------------------------
FINISH = {"stop": "stop", "length": "length", "context_full": "length"}


class Shaper:
    """OpenAI response objects for one job: the whole answer, or its stream chunks."""

    def __init__(self, job: Job):
        self.job = job
        chat = job.kind == "chat"
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.object = "chat.completion" if chat else "text_completion"
        self.tools = {} if job.tools is not None else None  # a ToolAnswer per choice index, when tools are on offer

    def _logprobs(self, entries, index: int):
        if self.job.logprobs is None or entries is None:
            return None
        return self.job.logprobs.format(entries, index)

    def usage(self, n_generated: int) -> dict:
        r = self.job.request
        n_prompt = len(r.prompt)
        return {"prompt_tokens": n_prompt, "completion_tokens": n_generated, "total_tokens": n_prompt + n_generated,
                "prompt_tokens_details": {"cached_tokens": r.timings.prompt_cached}}

    def _head(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.job.model,
                "system_fingerprint": "localinfer"}

    def timings(self, index: int) -> dict:
        """llama-server's `timings` of choice `index` (serve/timings.py)."""
        return timings_json(self.job.choices.requests[index].timings)

    def whole(self, text: str, finish: str, n_generated: int, index: int = 0, logprobs=None) -> dict:
        """One choice's answer; `combine` joins the n of them. logprobs: its TokenLogprobs."""
        lp = self._logprobs(logprobs, index)
        if self.job.kind == "chat":
            message = (self._tool_answer(index).message(text) if self.tools is not None
                       else {"role": "assistant", "content": text})
            choice = {"index": index, "message": message, "logprobs": lp, "finish_reason": self._finish(finish, index)}
        else:
            choice = {"index": index, "text": text, "logprobs": lp, "finish_reason": FINISH[finish]}
        return {**self._head(self.object), "choices": [choice], "usage": self.usage(n_generated),
                "timings": self.timings(index)}

    @staticmethod
    def combine(answers: list[dict]) -> dict:
        """The answers of the n choices (from `whole`, the last with the usage of all) as one."""
        return {**answers[-1], "choices": [a["choices"][0] for a in answers]}

    def chunk(self, text: str | None, finish: str | None = None, first: bool = False, index: int = 0,
              logprobs=None) -> dict:
        """A stream chunk; the one that finishes a choice carries its timings, as llama-server's does."""
        extra = {"usage": None} if self.job.include_usage else {}
        if finish:
            extra["timings"] = self.timings(index)
        lp = self._logprobs(logprobs, index)
        if self.job.kind == "chat":
            delta = {"role": "assistant", "content": ""} if first else ({"content": text} if text else {})
            choice = {"index": index, "delta": delta, "logprobs": lp,
                      "finish_reason": self._finish(finish, index) if finish else None}
            return {**self._head("chat.completion.chunk"), "choices": [choice], **extra}
        choice = {"index": index, "text": text or "", "logprobs": lp, "finish_reason": FINISH[finish] if finish else None}
        return {**self._head("text_completion"), "choices": [choice], **extra}

    def _tool_answer(self, index: int) -> "tool_calls.ToolAnswer":
        if index not in self.tools:
            self.tools[index] = tool_calls.ToolAnswer(self.job.tools)
        return self.tools[index]

    def _finish(self, finish: str, index: int = 0) -> str:
        return self._tool_answer(index).finish_reason(FINISH[finish]) if self.tools is not None else FINISH[finish]

    def tool_chunks(self, text: str, finish: str | None, index: int = 0) -> list[dict]:
        """The stream chunks for generated text when tools are on offer (the finish chunk apart):
        what the parser has settled, and at the finish what the end settles."""
        usage = {"usage": None} if self.job.include_usage else {}
        return [{**self._head("chat.completion.chunk"),
                 "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": None}], **usage}
                for delta in self._tool_answer(index).deltas(text, finished=finish is not None)]

    def usage_chunk(self, n_generated: int) -> dict:
        obj = "chat.completion.chunk" if self.job.kind == "chat" else "text_completion"
        return {**self._head(obj), "choices": [], "usage": self.usage(n_generated)}


def model_card(model_name: str, created: int) -> dict:
    return {"id": model_name, "object": "model", "created": created, "owned_by": "localinfer"}
