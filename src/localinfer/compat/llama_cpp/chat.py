"""create_chat_completion: the chat format's prompt, completed as a completion, answered in
OpenAI's chat shapes the way llama-cpp-python 0.3 answers them.

The prompt: a named format (llama_chat_format.py) is tokenized with the model's BOS rule; the
file's own template ("chat_template.*") is rendered with the messages, tools and functions and
tokenized as it is, without adding BOS (the template writes it when the model wants one), and its
EOS text becomes a stop string -- both as llama-cpp-python does, so the prompts are the same ids.

Tools, three ways:
- a named tool_choice (or a named function_call): as llama-cpp-python, the answer is held by a
  grammar to the tool's parameter schema and returned as that call (`tool_calls` and the legacy
  `function_call`, content None, finish_reason "tool_calls");
- tool_choice "auto"/"required" (or tools without a choice) with the file's template: localinfer's
  tool calling (chat/tools.py: the template's own call syntax, or the generic JSON format held by
  a grammar), its calls parsed into `tool_calls` (and `function_call` when `functions` were
  given), finish_reason "tool_calls". llama-cpp-python's default handler leaves such an answer
  as text; llama-server's --jinja parses it, as here;
- "none", or a named format: the tools are only given to the template, as there.
"""
from __future__ import annotations

import json
from typing import Iterator

from ...chat import tool_answer as tool_calls
from ...chat.tools import ToolSetup, check_tool_choice, check_tools, tool_format
from .llama_chat_format import FORMATS
from .llama_grammar import JSON_OBJECT_SCHEMA, LlamaGrammar


def chat_completion(llama, messages: list, *, functions, function_call, tools, tool_choice, stream, stop,
                    response_format, grammar, logprobs, top_logprobs, model, sampling: dict):
    if functions is not None:  # the legacy spelling, as tools (as there)
        tools = [{"type": "function", "function": f} for f in functions]
    if isinstance(function_call, str) and function_call in ("none", "auto"):
        tool_choice = function_call
    elif isinstance(function_call, dict) and "name" in function_call:
        tool_choice = {"type": "function", "function": {"name": function_call["name"]}}
    if response_format is not None and response_format.get("type") == "json_object":
        grammar = LlamaGrammar.from_json_schema(json.dumps(response_format.get("schema", JSON_OBJECT_SCHEMA)))
    forced = _named_tool(tools, tool_choice)
    if forced is not None:
        schema = forced["function"].get("parameters", {"type": "object", "properties": {}})
        grammar = LlamaGrammar.from_json_schema(json.dumps(schema))
    elif tools and tool_choice != "none" and llama.chat_format not in FORMATS:
        return _tool_chat(llama, messages, tools, tool_choice, functions is not None, stop, stream, model, sampling)
    tokens, format_stop = chat_prompt_tokens(llama, messages, tools, tool_choice, functions, function_call)
    stops = [] if stop is None else [stop] if isinstance(stop, str) else list(stop)
    options = llama._stream_options(grammar=grammar, stop=stops + format_stop,
                                    logprobs=top_logprobs if logprobs else None, **sampling)
    completion = llama._generate(tokens, tokens, options, stream, False, model)
    if forced is not None:
        name = forced["function"]["name"]
        return _call_chunks(name, completion) if stream else _call_message(name, completion)
    return _chat_chunks(completion) if stream else _chat_message(completion)


def _named_tool(tools, tool_choice) -> dict | None:
    if not isinstance(tool_choice, dict) or tools is None:
        return None
    name = tool_choice.get("function", {}).get("name")
    tool = next((t for t in tools if t.get("function", {}).get("name") == name), None)
    if tool is None:
        raise ValueError(f"Tool choice '{name}' not found in tools.")
    return tool


def chat_prompt_tokens(llama, messages, tools=None, tool_choice=None, functions=None,
                       function_call=None) -> tuple[list[int], list[str]]:
    """The conversation's prompt ids under the Llama's chat format, and the stop strings it adds."""
    model = llama._model
    if llama.chat_format in FORMATS:
        r = FORMATS[llama.chat_format](messages=messages, tools=tools, tool_choice=tool_choice)
        stops = [] if r.stop is None else [r.stop] if isinstance(r.stop, str) else list(r.stop)
        return model.tokenize(r.prompt, add_special=not r.added_special, parse_special=True), stops
    template = llama._chat_template(llama.chat_format)
    text = template.render(messages, add_generation_prompt=True, tools=tools, tool_choice=tool_choice,
                           functions=functions, function_call=function_call)
    return model.tokenize(text, add_special=False, parse_special=True), [template.eos_token]


# -- llama-cpp-python's shapes of a completion as a chat answer ----------------------------------------
def _chat_logprobs(logprobs: dict | None) -> dict | None:
    if logprobs is None:
        return None
    return {"content": [{"token": token, "bytes": None, "logprob": lp,
                         "top_logprobs": [{"token": t, "logprob": v, "bytes": None} for t, v in (top or {}).items()]}
                        for token, lp, top in zip(logprobs["tokens"], logprobs["token_logprobs"],
                                                  logprobs["top_logprobs"])],
            "refusal": None}


def _head(completion: dict, obj: str) -> dict:
    return {"id": "chat" + completion["id"], "object": obj, "created": completion["created"], "model": completion["model"]}


def _chat_message(completion: dict) -> dict:
    choice = completion["choices"][0]
    return {**_head(completion, "chat.completion"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": choice["text"]},
                         "logprobs": _chat_logprobs(choice["logprobs"]), "finish_reason": choice["finish_reason"]}],
            "usage": completion["usage"]}


def _chat_chunks(chunks: Iterator[dict]) -> Iterator[dict]:
    for i, chunk in enumerate(chunks):
        head, choice = _head(chunk, "chat.completion.chunk"), chunk["choices"][0]
        if i == 0:
            yield {**head, "choices": [{"index": 0, "delta": {"role": "assistant"}, "logprobs": None,
                                        "finish_reason": None}]}
        delta = {"content": choice["text"]} if choice["finish_reason"] is None else {}
        yield {**head, "choices": [{"index": 0, "delta": delta, "logprobs": _chat_logprobs(choice["logprobs"]),
                                    "finish_reason": choice["finish_reason"]}]}


def _call(name: str, arguments: str, call_id: str, index: int | None = None) -> dict:
    return {**({} if index is None else {"index": index}), "id": call_id, "type": "function",
            "function": {"name": name, "arguments": arguments}}


def _call_message(name: str, completion: dict) -> dict:
    """A named tool's answer: its arguments are the text (the grammar held it to their schema)."""
    choice, call_id = completion["choices"][0], "call__0_" + name + "_" + completion["id"]
    message = {"role": "assistant", "content": None, "function_call": {"name": name, "arguments": choice["text"]},
               "tool_calls": [_call(name, choice["text"], call_id)]}
    return {**_head(completion, "chat.completion"),
            "choices": [{"index": 0, "message": message, "logprobs": _chat_logprobs(choice["logprobs"]),
                         "finish_reason": "tool_calls"}],
            "usage": completion["usage"]}


def _call_chunks(name: str, chunks: Iterator[dict]) -> Iterator[dict]:
    """A named tool's answer streamed: each piece of the arguments as a delta of the one call."""
    head = None
    for chunk in chunks:
        if head is None:
            head = _head(chunk, "chat.completion.chunk")
            call_id = "call__0_" + name + "_" + chunk["id"]
            yield {**head, "choices": [{"index": 0, "finish_reason": None, "logprobs": None, "delta": {
                "role": "assistant", "content": None, "function_call": None, "tool_calls": None}}]}
        text = chunk["choices"][0]["text"]
        yield {**head, "choices": [{"index": 0, "finish_reason": None,
                                    "logprobs": _chat_logprobs(chunk["choices"][0]["logprobs"]),
                                    "delta": {"role": None, "content": None,
                                              "function_call": {"name": name, "arguments": text},
                                              "tool_calls": [_call(name, text, call_id, index=0)]}}]}
    if head is not None:
        yield {**head, "choices": [{"index": 0, "finish_reason": "tool_calls", "logprobs": None, "delta": {
            "role": None, "content": None, "function_call": None, "tool_calls": None}}]}


# -- localinfer's tool calling: "auto" and "required" ----------------------------------------------------
def _tool_chat(llama, messages, tools, tool_choice, legacy: bool, stop, stream: bool, model, sampling: dict):
    model_obj = llama._model
    clean = [{"role": m["role"], "content": m.get("content") or "", **tool_calls.message_fields(i, m)}
             for i, m in enumerate(messages)]
    checked = check_tools(tools)
    setup = ToolSetup(checked, check_tool_choice(tool_choice, checked), True,
                      tool_format(model_obj.chat_template.source))  # tool_prompt renders the file's template
    tokens, grammar = tool_calls.tool_prompt(model_obj, clean, setup)
    options = llama._stream_options(grammar=grammar, stop=stop, logprobs=None, **sampling)
    completion = llama._generate(tokens, tokens, options, stream, False, model)
    answer = tool_calls.ToolAnswer(setup)
    if stream:
        return _tool_chunks(answer, completion, legacy)
    choice = completion["choices"][0]
    message = answer.message(choice["text"])
    if legacy and message.get("tool_calls"):
        message["function_call"] = dict(message["tool_calls"][0]["function"])
    return {**_head(completion, "chat.completion"),
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": answer.finish_reason(choice["finish_reason"])}],
            "usage": completion["usage"]}


def _tool_chunks(answer, chunks: Iterator[dict], legacy: bool) -> Iterator[dict]:
    head = None
    for chunk in chunks:
        choice = chunk["choices"][0]
        if head is None:
            head = _head(chunk, "chat.completion.chunk")
            yield {**head, "choices": [{"index": 0, "delta": {"role": "assistant"}, "logprobs": None,
                                        "finish_reason": None}]}
        finished = choice["finish_reason"] is not None
        for delta in answer.deltas(choice["text"], finished):
            if legacy and "tool_calls" in delta:
                f = delta["tool_calls"][0]["function"]
                delta = {**delta, "function_call": {k: v for k, v in f.items()}}
            yield {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]}
        if finished:
            yield {**head, "choices": [{"index": 0, "delta": {}, "logprobs": None,
                                        "finish_reason": answer.finish_reason(choice["finish_reason"])}]}

