"""Ollama's /api/chat and /api/generate requests, checked and turned into the OpenAI route's.

Each Ollama request becomes the equivalent OpenAI body (`options.num_predict` -> `max_tokens`,
`format` -> `response_format`, ...) which api.py parses into an engine Job, so both APIs share
one set of field checks and give one model the same answer; an ApiError from there is renamed
back to the Ollama field it came from. What Ollama offers and this server cannot do (images,
thinking, Go templates, token contexts, mirostat) is a 400 naming the field, never ignored.

The answer's sampling defaults are the server's (the OpenAI route's), not Ollama's: a model
answers the same whichever API asks. Errors are Ollama's shape, `{"error": "..."}`.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ..sampling.logprobs import MAX_TOP_LOGPROBS
from . import api, units

KEEP_ALIVE_FOREVER = -1.0  # the registry's "keep it loaded until the server stops", as Ollama's negative values

# option -> the OpenAI field that carries it (num_ctx and num_predict are handled apart)
SAMPLING_OPTIONS = {"temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p",
                    "seed": "seed", "stop": "stop", "repeat_penalty": "repeat_penalty",
                    "repeat_last_n": "repeat_last_n", "presence_penalty": "presence_penalty",
                    "frequency_penalty": "frequency_penalty"}
# options that choose where and how the model is computed, not what it computes: accepted and
# without effect here (this server loads each model once, for every request, on the CPU)
PLACEMENT_OPTIONS = {"numa", "num_batch", "num_gpu", "main_gpu", "low_vram", "use_mmap", "use_mlock",
                     "num_thread", "f16_kv", "num_keep"}  # num_keep: only used when the context shifts, which we never do
# options whose neutral value is the only one this sampler has
NEUTRAL_OPTIONS = {"mirostat": (0,), "tfs_z": (1, 1.0), "typical_p": (1, 1.0), "penalize_newline": (False,),
                   "mirostat_tau": None, "mirostat_eta": None, "logits_all": (False,), "vocab_only": (False,),
                   "embedding_only": (False,)}  # None: any value (it only matters with mirostat on)


class OllamaError(Exception):
    """A request Ollama's clients get back as {"error": message} with this HTTP status."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message

    def body(self) -> dict:
        return {"error": self.message}


def bad(message: str) -> OllamaError:
    return OllamaError(400, message)


def renamed(e: api.ApiError, names: dict[str, str]) -> OllamaError:
    """An OpenAI-route error about a field this API spells differently, in this API's words."""
    message = e.message
    for openai_name, ollama_name in sorted(names.items(), key=lambda kv: -len(kv[0])):  # the longest path first
        message = re.sub(rf"(?<![\w.]){re.escape(openai_name)}(?![\w])", ollama_name, message)
    return OllamaError(e.status, message)


# -- fields every request shares --------------------------------------------------------------------
def model_name(body: dict) -> str:
    """The served name a request asks for (Ollama's default tag ':latest' means the name itself)."""
    name = body.get("model")
    if not isinstance(name, str) or not name:
        raise bad("'model' is required: the name of a model this server serves (GET /api/tags lists them)")
    return name[: -len(":latest")] if name.endswith(":latest") else name


def parse_keep_alive(value: Any) -> float | None:
    """Seconds a model stays loaded after this request: None for the server's default, 0 to
    unload it at once, KEEP_ALIVE_FOREVER for a negative value. A number is seconds; a string is
    a Go duration ("5m", "1h30m", "300ms") as Ollama reads it, or a number of seconds ("-1")."""
    if value is None:
        return None
    try:
        return units.parse_duration(value, "'keep_alive'")  # negative -> -1.0 == KEEP_ALIVE_FOREVER
    except units.DurationError as e:
        raise bad(str(e)) from None


def _boolean(body: dict, name: str, default: bool) -> bool:
    v = body.get(name)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise bad(f"'{name}' must be a boolean, got {type(v).__name__}")
    return v


def _refuse(body: dict, name: str, why: str, allowed=(None, False, "", [])) -> None:
    if body.get(name) not in allowed:
        raise bad(f"'{name}' is not supported by this server: {why}")


def _sampling(options: Any) -> tuple[dict, int | None, dict]:
    """(the OpenAI sampling fields, num_ctx or None, {openai field: 'options.x'}) from `options`."""
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise bad(f"'options' must be an object, got {type(options).__name__}")
    fields, names, num_ctx = {}, {}, None
    for key, value in options.items():
        if value is None or key in PLACEMENT_OPTIONS:
            continue
        if key in SAMPLING_OPTIONS:
            if key == "seed" and value == -1:  # Ollama's "no seed": a random one each time
                continue
            if key == "repeat_last_n" and value == -1:  # Ollama's "the whole context": filled in with n_ctx
                value = "n_ctx"
            fields[SAMPLING_OPTIONS[key]] = value
            names[SAMPLING_OPTIONS[key]] = f"options.{key}"
        elif key == "num_predict":
            if isinstance(value, bool) or not isinstance(value, int):
                raise bad(f"'options.num_predict' must be an integer, got {type(value).__name__}")
            if value < -2:
                raise bad(f"'options.num_predict' must be -1 (no limit), -2 (until the context is full) or a count "
                          f"of tokens, got {value}")
            if value >= 0:  # -1 and -2 both run until a stop, the end of generation or the context's end
                fields["max_tokens"] = value
            names["max_tokens"] = "options.num_predict"
        elif key == "num_ctx":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise bad(f"'options.num_ctx' must be a positive integer, got {str(value)[:40]}")
            num_ctx = value
        elif key in NEUTRAL_OPTIONS:
            allowed = NEUTRAL_OPTIONS[key]
            if allowed is not None and value not in allowed:
                raise bad(f"'options.{key}' {str(value)[:40]} is not supported: this server's sampler has no "
                          f"{key} (leave it out, or give {allowed[0]!r})")
        else:
            raise bad(f"'options.{str(key)[:40]}' is not an option this server knows")
    return fields, num_ctx, names


def _format(value: Any) -> dict | None:
    """Ollama's `format` as OpenAI's response_format: "json" is any JSON object, an object is a schema."""
    if value is None or value == "":
        return None
    if value == "json":
        return {"type": "json_object"}
    if isinstance(value, dict):
        return {"type": "json_schema", "json_schema": {"schema": value}}
    raise bad("'format' must be \"json\" or a JSON schema object")


FORMAT_NAMES = {"response_format.json_schema.schema": "format", "response_format": "format"}


@dataclass
class OllamaRequest:
    """A checked /api/chat or /api/generate request, before its model is at hand."""
    kind: str  # "chat" | "generate"
    model: str
    keep_alive: float | None
    stream: bool
    openai: dict | None  # the equivalent OpenAI body; None: an empty request, which only loads or unloads
    num_ctx: int | None  # the context the client asked for (at most the slot's)
    names: dict  # OpenAI field -> this API's, for errors
    n_top: int | None = None  # logprobs: None, or the alternatives shown per token

    @property
    def load_only(self) -> bool:
        return self.openai is None


def _logprobs(body: dict) -> int | None:
    """None: no logprobs; n: each token's logprob and its n likeliest alternatives."""
    want = _boolean(body, "logprobs", False)
    top = body.get("top_logprobs")
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= MAX_TOP_LOGPROBS):
        raise bad(f"'top_logprobs' must be an integer between 0 and {MAX_TOP_LOGPROBS}, got {str(top)[:40]}")
    if top and not want:
        raise bad("'top_logprobs' needs 'logprobs': true")
    return (top or 0) if want else None


def _common(body: dict, kind: str) -> tuple[str, float | None, bool, dict, int | None, dict]:
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object")
    name, keep_alive = model_name(body), parse_keep_alive(body.get("keep_alive"))
    stream = _boolean(body, "stream", True)  # Ollama streams unless told not to
    _refuse(body, "think", "none of its models' answers carry separate thinking")
    fields, num_ctx, names = _sampling(body.get("options"))
    fmt = _format(body.get("format"))
    if fmt is not None:
        fields["response_format"] = fmt
    names.update(FORMAT_NAMES)
    return name, keep_alive, stream, fields, num_ctx, names


def parse_generate(body: dict) -> OllamaRequest:
    name, keep_alive, stream, fields, num_ctx, names = _common(body, "generate")
    for field in ("prompt", "system", "template", "suffix"):
        if body.get(field) is not None and not isinstance(body[field], str):
            raise bad(f"'{field}' must be a string, got {type(body[field]).__name__}")
    _refuse(body, "template", "its prompts are formatted by the model's own chat template (or give 'raw': true "
                              "and the formatted prompt)", (None, ""))
    _refuse(body, "suffix", "fill-in-the-middle is not implemented", (None, ""))
    _refuse(body, "context", "a previous answer's token context cannot be continued; send the text (or use "
                             "/api/chat)", (None, []))
    _refuse(body, "images", "its models read text only", (None, []))
    for field in ("width", "height", "steps"):
        _refuse(body, field, "it does not generate images", (None,))
    raw = _boolean(body, "raw", False)
    prompt, system = body.get("prompt") or "", body.get("system") or ""
    if raw and system:
        raise bad("'system' cannot be combined with 'raw': true (a raw prompt is used as it is)")
    if not prompt and not system:  # Ollama: loads the model (or unloads it with keep_alive 0)
        return OllamaRequest("generate", name, keep_alive, stream, None, num_ctx, names)
    if raw:
        openai = {**fields, "prompt": prompt}
        names["prompt"] = "prompt"
    else:  # the prompt as the user's turn of the model's chat template, as Ollama does
        openai = {**fields, "messages": ([{"role": "system", "content": system}] if system else [])
                  + [{"role": "user", "content": prompt}]}
        names["messages"] = "prompt"
    return OllamaRequest("generate", name, keep_alive, stream, openai, num_ctx, names, _logprobs(body))


def parse_chat(body: dict) -> OllamaRequest:
    name, keep_alive, stream, fields, num_ctx, names = _common(body, "chat")
    messages = body.get("messages")
    if messages is None or messages == []:  # Ollama: loads the model (or unloads it with keep_alive 0)
        return OllamaRequest("chat", name, keep_alive, stream, None, num_ctx, names)
    if not isinstance(messages, list):
        raise bad("'messages' must be a list of {'role': ..., 'content': ...} objects")
    tools, n_top = body.get("tools"), _logprobs(body)
    if tools not in (None, []):
        if n_top is not None:
            raise bad("'logprobs' cannot be combined with 'tools' (tool calls carry no logprobs)")
        fields["tools"] = tools
    openai_messages = [_message(i, m) for i, m in enumerate(messages)]
    _link_tool_results(openai_messages)
    return OllamaRequest("chat", name, keep_alive, stream, {**fields, "messages": openai_messages}, num_ctx, names,
                         n_top)


def _message(i: int, m: Any) -> dict:
    where = f"messages[{i}]"
    if not isinstance(m, dict) or not isinstance(m.get("role"), str):
        raise bad(f"{where} must be an object with a string 'role'")
    if m.get("images") not in (None, []):
        raise bad(f"{where}.images is not supported: this server's models read text only")
    if m.get("thinking") not in (None, ""):
        raise bad(f"{where}.thinking is not supported: this server's models answer without separate thinking")
    content = m.get("content")
    if content is not None and not isinstance(content, str):
        raise bad(f"{where}.content must be a string, got {type(content).__name__}")
    out = {"role": m["role"], "content": content or ""}
    calls = m.get("tool_calls")
    if calls not in (None, []):
        if not isinstance(calls, list):
            raise bad(f"{where}.tool_calls must be a list")
        out["tool_calls"] = [_tool_call(f"{where}.tool_calls[{j}]", i, j, c) for j, c in enumerate(calls)]
    if m["role"] == "tool":
        tool_name = m.get("tool_name", m.get("name"))
        if tool_name is not None and not isinstance(tool_name, str):
            raise bad(f"{where}.tool_name must be a string")
        out["name"] = tool_name
    return out


def _tool_call(where: str, i: int, j: int, call: Any) -> dict:
    """Ollama's {"function": {"name", "arguments": {...}}} as OpenAI's call, with an id to answer."""
    f = call.get("function") if isinstance(call, dict) else None
    if not isinstance(f, dict) or not isinstance(f.get("name"), str) or not isinstance(f.get("arguments", {}), dict):
        raise bad(f"{where} must be {{'function': {{'name': str, 'arguments': {{...}}}}}}")
    return {"id": f"call_{i}_{j}", "type": "function",
            "function": {"name": f["name"], "arguments": json.dumps(f.get("arguments", {}))}}


def _link_tool_results(messages: list[dict]) -> None:
    """Ollama's tool results name the tool (or nothing), OpenAI's answer a call's id: each result
    answers the earliest unanswered call with its name (or the earliest unanswered call)."""
    open_calls: list[dict] = []
    for i, m in enumerate(messages):
        open_calls.extend(c for c in m.get("tool_calls", ()))
        if m["role"] != "tool":
            continue
        name = m.pop("name")
        match = next((c for c in open_calls if name is None or c["function"]["name"] == name), None)
        if match is None:
            raise bad(f"messages[{i}] is a tool result" + (f" from '{name[:64]}'" if name else "")
                      + ", but no earlier assistant message has an unanswered call" + (" to it" if name else ""))
        open_calls.remove(match)
        m["tool_call_id"] = match["id"]
        if name:
            m["name"] = name


# -- the engine's job ---------------------------------------------------------------------------------
def build_job(request: OllamaRequest, model, served_name: str, n_ctx: int) -> api.Job:
    """The engine Job for a request with content, now that its model is loaded (tokenizes, and
    compiles a format's grammar: run it off the event loop)."""
    body = dict(request.openai)
    ctx = check_num_ctx(request.num_ctx, n_ctx)
    if body.get("repeat_last_n") == "n_ctx":
        body["repeat_last_n"] = ctx
    try:
        if request.kind == "chat" or "messages" in body:
            job = api.parse_chat(body, model, served_name, ctx)
        else:
            job = api.parse_completion(body, model, served_name, ctx)
    except api.ApiError as e:
        raise renamed(e, request.names) from None
    for r in job.choices.requests:
        r.logprobs = request.n_top  # shaped by ollama_shapes (Ollama's shape is neither OpenAI route's)
        if "max_tokens" not in body:  # Ollama's default is no limit (the completions route's is 16 tokens)
            r.max_tokens = None
        if request.num_ctx is not None:  # the answer ends where the client's context would be full
            room = ctx - len(r.prompt)
            r.max_tokens = room if r.max_tokens is None else min(r.max_tokens, room)
    return job


# -- embeddings -----------------------------------------------------------------------------------
@dataclass
class EmbedRequest:
    """A checked /api/embed (or legacy /api/embeddings) request."""
    model: str
    keep_alive: float | None
    openai: dict | None  # the /v1/embeddings body; None: nothing to embed (an empty answer)
    num_ctx: int | None
    legacy: bool  # /api/embeddings: one prompt, its vector not normalized, {"embedding": [...]}


def parse_embed(body: dict, legacy: bool = False) -> EmbedRequest:
    """Inputs longer than the context are refused (a 400), whatever `truncate` says: a vector of
    part of a text would be taken for the whole text's."""
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object")
    name, keep_alive = model_name(body), parse_keep_alive(body.get("keep_alive"))
    _, num_ctx, _ = _sampling(body.get("options"))  # only num_ctx matters to embeddings: the rest is checked
    if legacy:
        prompt = body.get("prompt")
        if prompt is not None and not isinstance(prompt, str):
            raise bad(f"'prompt' must be a string, got {type(prompt).__name__}")
        openai = {"input": prompt} if prompt else None
    else:
        _boolean(body, "truncate", True)
        value = body.get("input")
        if not (isinstance(value, str) or isinstance(value, list) and all(isinstance(s, str) for s in value)):
            raise bad("'input' must be a string or a list of strings")
        openai = {"input": value} if value != [] else None
        if body.get("dimensions") is not None and openai is not None:
            openai["dimensions"] = body["dimensions"]
    return EmbedRequest(name, keep_alive, openai, num_ctx, legacy)


def check_num_ctx(num_ctx: int | None, n_ctx: int) -> int:
    """The context a request may use: its options.num_ctx, at most the slots' n_ctx."""
    if num_ctx is None:
        return n_ctx
    if num_ctx > n_ctx:
        raise bad(f"'options.num_ctx' is {num_ctx}, but this server's slots hold {n_ctx} tokens "
                  f"(start it with a larger --ctx-size)")
    return num_ctx
