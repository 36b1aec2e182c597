"""Tool calling: which syntax a model calls tools in, the prompt that offers the tools, and the
grammar that keeps a call well-formed.

The syntax comes from the chat template's own text (metadata decides, never the file name):
a template that writes `<tool_call>` is Hermes/Qwen, `[TOOL_CALLS]` Mistral, `<|python_tag|>`
or an `ipython` role Llama 3.x JSON. These templates are handed the tools as the `tools`
variable and the history's calls and results as they are, as Hugging Face does.

A template that knows none of these (SmolLM2's ChatML, gemma's turns) gets the *generic*
format, the one llama.cpp's `--jinja` falls back to: a system message lists the tools and asks
for one JSON object, `{"tool_call": {"name": ..., "arguments": {...}}}` (a `tool_calls` list
when calls may be parallel) or `{"response": "..."}`, and a JSON-schema grammar makes every
answer such an object. The history's calls and results become that same JSON, as text.

Under `required` or a named choice every format is constrained to a well-formed call of an
offered tool whose arguments follow its schema (a named choice is one call); the generic format
is constrained under `auto` (a call or a response) and `none` (a response) too, the native ones
answer freely there and are parsed afterwards (tool_parse.py).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..constrain import lark_json
from .prompt import chat_prompt_tokens
from .template import ChatTemplate
from ..tokenizer import Tokenizer

GENERIC, HERMES, LLAMA3, MISTRAL = "generic", "hermes", "llama3", "mistral"
MAX_TOOLS = 128  # OpenAI's limit on functions per request
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # OpenAI's rule for function names (and '.', as llama.cpp)


class ToolError(ValueError):
    """A malformed tool definition, choice or tool message; `param` names the request field."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


def tool_format(template_source: str) -> str:
    """The tool-call syntax a chat template's text shows it was trained on."""
    if "<tool_call>" in template_source:
        return HERMES
    if "[TOOL_CALLS]" in template_source:
        return MISTRAL
    if "<|python_tag|>" in template_source or "ipython" in template_source:
        return LLAMA3
    return GENERIC


# -- the request's tools ----------------------------------------------------------------------------
def check_tools(tools: Any) -> list[dict]:
    """OpenAI `tools`, checked, as [{"type": "function", "function": {name, description, parameters}}]."""
    if not isinstance(tools, list):
        raise ToolError("'tools' must be a list of {'type': 'function', 'function': {...}} objects", "tools")
    if len(tools) > MAX_TOOLS:
        raise ToolError(f"'tools' holds {len(tools)} tools, the limit is {MAX_TOOLS}", "tools")
    out, seen = [], set()
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
            raise ToolError(f"{where} must be {{'type': 'function', 'function': {{...}}}}", where)
        f = tool["function"]
        name = f.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ToolError(f"{where}.function.name must be 1-64 letters, digits, '_', '-' or '.'",
                            f"{where}.function.name")
        if name in seen:
            raise ToolError(f"{where}.function.name '{name}' is defined twice", f"{where}.function.name")
        seen.add(name)
        description = f.get("description")
        if description is not None and not isinstance(description, str):
            raise ToolError(f"{where}.function.description must be a string", f"{where}.function.description")
        parameters = f.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(parameters, dict) or parameters.get("type", "object") != "object":
            raise ToolError(f"{where}.function.parameters must be a JSON schema of type 'object'",
                            f"{where}.function.parameters")
        clean = {"name": name, **({"description": description} if description else {}), "parameters": parameters}
        out.append({"type": "function", "function": clean})
    return out


def check_tool_choice(choice: Any, tools: Sequence[dict]) -> str | dict:
    """'auto' | 'none' | 'required' | the one tool's name as {'name': ...}."""
    names = [t["function"]["name"] for t in tools]
    if choice is None:
        return "auto" if tools else "none"
    if choice in ("auto", "none", "required"):
        if choice == "required" and not tools:
            raise ToolError("'tool_choice' is 'required' but no 'tools' are given", "tool_choice")
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("function"), dict):
        name = choice["function"].get("name")
        if not isinstance(name, str):
            raise ToolError("'tool_choice'.function.name must be a string", "tool_choice")
        if name not in names:
            raise ToolError(f"'tool_choice' names the function '{name[:64]}', which is not in 'tools'", "tool_choice")
        return {"name": name}
    raise ToolError("'tool_choice' must be 'auto', 'none', 'required' or "
                    "{'type': 'function', 'function': {'name': ...}}", "tool_choice")


@dataclass
class ToolSetup:
    """The tools on offer for one conversation and how the model is to call them."""
    tools: list[dict]            # checked OpenAI tool objects
    choice: str | dict           # 'auto' | 'none' | 'required' | {'name': ...}
    parallel: bool = True        # may the model make several calls in one answer?
    format: str = GENERIC

    @property
    def active(self) -> bool:
        """Whether the model is offered tools at all (not for 'none', or without tools)."""
        return bool(self.tools) and self.choice != "none"

    @property
    def several(self) -> bool:
        """Whether one answer may hold several calls: parallel calls allowed, and not one named
        function (forcing a function is one call of it, as OpenAI answers)."""
        return self.parallel and not isinstance(self.choice, dict)

    @property
    def parsed(self) -> bool:
        """Whether the answer is read for calls: tools on offer, or the generic format's JSON
        (which keeps to `{"response": ...}` under 'none', so that a model that has seen calls
        and results in that JSON answers in kind rather than imitating them)."""
        return self.active or (bool(self.tools) and self.format == GENERIC)

    @property
    def names(self) -> list[str]:
        return [t["function"]["name"] for t in self.offered]

    @property
    def offered(self) -> list[dict]:
        """The tools the model may call: all of them, or the one a named choice picks."""
        if isinstance(self.choice, dict):
            return [t for t in self.tools if t["function"]["name"] == self.choice["name"]]
        return self.tools if self.active else []


# -- the prompt -------------------------------------------------------------------------------------
def tool_prompt_tokens(template: ChatTemplate, tokenizer: Tokenizer, messages: Sequence[Mapping[str, Any]],
                       setup: ToolSetup, max_tokens: int | None = None) -> list[int]:
    """The conversation with its tools as prompt tokens (see chat_prompt_tokens).

    A template that renders a `tools` variable gets the tools, in whatever format: one whose
    call syntax is not known describes them its own way, and the generic instructions ask for
    the JSON answer without listing them again (llama.cpp does the same)."""
    renders_tools = setup.active and re.search(r"\btools\b", template.source) is not None
    extra = {"tools": setup.offered} if renders_tools else {}
    if setup.format == GENERIC:
        _refuse_control_text(tokenizer, [("tools", setup.tools)] if renders_tools else [])
        return chat_prompt_tokens(template, tokenizer, generic_messages(messages, setup, not renders_tools),
                                  extra=extra, max_tokens=max_tokens)
    _refuse_control_text(tokenizer, [("tools", setup.tools)] + [
        (f"messages[{i}].tool_calls", m["tool_calls"]) for i, m in enumerate(messages) if m.get("tool_calls")])
    return chat_prompt_tokens(template, tokenizer, [_native_message(m) for m in messages], extra=extra,
                              max_tokens=max_tokens)


def _refuse_control_text(tokenizer: Tokenizer, values: list[tuple[str, Any]]) -> None:
    """Only message contents are kept apart from control tokens by the prompt builder; tool
    definitions and call arguments go through the template's own variables, so control-token
    text in them would become control tokens: it is refused instead."""
    for where, value in values:
        found = tokenizer.control_text(json.dumps(value, ensure_ascii=False))
        if found is not None:
            raise ToolError(f"{where} holds the control-token text {found!r}, which the chat template would "
                            f"turn into a control token: remove it", where)


def _native_message(m: Mapping[str, Any]) -> dict:
    """A message for a template that knows tools: call arguments as objects (Qwen's, Llama's and
    Mistral's templates write them with `tojson`; OpenAI sends them as JSON text)."""
    if not m.get("tool_calls"):
        return dict(m)
    calls = []
    for c in m["tool_calls"]:
        f = c["function"]
        calls.append({**c, "function": {**f, "arguments": _arguments_object(f["arguments"])}})
    return {**m, "tool_calls": calls}


def _arguments_object(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except json.JSONDecodeError:
        return arguments


def generic_messages(messages: Sequence[Mapping[str, Any]], setup: ToolSetup, list_tools: bool = True) -> list[dict]:
    """The conversation for a template whose call syntax is not known: the format (and, unless
    the template lists them, the tools) in the system message, calls and results written out as
    the format's JSON text."""
    out, called = [], {}  # call id -> the tool's name
    for m in messages:
        if m["role"] == "tool":  # a result: the user's turn, as templates without tools have no other
            # named by its tool, in call order: the calls are written as the model writes them, without ids
            result = {"name": m.get("name") or called.get(m.get("tool_call_id"), ""), "content": m.get("content") or ""}
            out.append({"role": "user", "content": json.dumps({"tool_response": result}, ensure_ascii=False)})
        elif m.get("tool_calls"):
            called.update((c.get("id"), c["function"]["name"]) for c in m["tool_calls"])
            calls = [{"name": c["function"]["name"], "arguments": _arguments_object(c["function"]["arguments"])}
                     for c in m["tool_calls"]]
            said = {"tool_calls": calls} if len(calls) > 1 else {"tool_call": calls[0]}
            text = json.dumps(said, ensure_ascii=False)
            out.append({"role": "assistant", "content": (m.get("content") + "\n" if m.get("content") else "") + text})
        else:
            out.append({"role": m["role"], "content": m.get("content") or ""})
    if not setup.parsed:
        return out
    instructions = generic_instructions(setup, list_tools)
    if out and out[0]["role"] == "system":
        out[0] = {**out[0], "content": out[0]["content"] + "\n\n" + instructions}
    else:
        out.insert(0, {"role": "system", "content": instructions})
    return out


def generic_instructions(setup: ToolSetup, list_tools: bool = True) -> str:
    if not setup.active:
        return 'Answer in JSON, with one object and nothing else: {"response": "<your reply>"}.'
    tools = "\n".join(json.dumps(t["function"], ensure_ascii=False) for t in setup.offered)
    call = '{"tool_call": {"name": "<tool name>", "arguments": {<its arguments>}}}'
    if setup.several:  # said after the single call: a small model that reads the list first repeats it
        call += ', or {"tool_calls": [<a call>, ...]} to make several calls at once,'
    if setup.choice == "auto":
        how = (f'either {call} to call a tool, or {{"response": "<your reply>"}} to reply to the user '
               f'(as soon as a tool_response gives you what you need)')
    else:
        how = f"{call}: you must call " + ("a tool" if setup.choice == "required" else f"'{setup.choice['name']}'")
    return ((f"You can call these tools:\n{tools}\n" if list_tools else "") +
            f"Answer in JSON, with one object and nothing else: {how}.")


# -- the grammar ------------------------------------------------------------------------------------
def _call_schema(tool: dict, arguments_key: str = "arguments") -> dict:
    """A call of `tool`. Arguments whose schema lists properties take no others unless it says
    so (as in llama.cpp's grammars): a small model otherwise pads them with made-up keys, and
    the arguments still validate against the tool's own schema."""
    f = tool["function"]
    arguments = f["parameters"]
    if "properties" in arguments and "additionalProperties" not in arguments:
        arguments = {**arguments, "additionalProperties": False}
    return {"type": "object", "properties": {"name": {"const": f["name"]}, arguments_key: arguments},
            "required": ["name", arguments_key], "additionalProperties": False}


def _one_of(schemas: list[dict]) -> dict:
    return schemas[0] if len(schemas) == 1 else {"anyOf": schemas}


def tool_grammar(setup: ToolSetup, tokenizer: Tokenizer) -> dict | None:
    """compile_grammar's keyword arguments that hold the model to the format, or None where it
    answers freely (no tools, 'none', or 'auto' in a native format)."""
    reply = {"type": "object", "properties": {"response": {"type": "string"}}, "required": ["response"],
             "additionalProperties": False}
    if setup.format == GENERIC and setup.parsed and not setup.active:
        return {"json_schema": reply}
    if not setup.active:
        return None
    constrained_call = setup.choice != "auto"
    if setup.format == GENERIC:
        call = _one_of([_call_schema(t) for t in setup.offered])
        wrapper = {"type": "object", "properties": {"tool_call": call}, "required": ["tool_call"],
                   "additionalProperties": False}
        if setup.several:  # the list is offered beside the single call, which small models keep to
            calls = {"type": "object", "properties": {"tool_calls": {"type": "array", "items": call, "minItems": 1}},
                     "required": ["tool_calls"], "additionalProperties": False}
            wrapper = {"anyOf": [wrapper, calls]}
        if not constrained_call:
            wrapper = {"anyOf": [wrapper, reply]}
        return {"json_schema": wrapper}
    if not constrained_call:
        return None
    if setup.format == LLAMA3:  # one JSON object, Llama 3.x's "parameters"
        return {"json_schema": _one_of([_call_schema(t, "parameters") for t in setup.offered])}
    call = _one_of([_call_schema(t) for t in setup.offered])
    if setup.format == MISTRAL:
        calls = {"type": "array", "items": call, "minItems": 1, **({} if setup.several else {"maxItems": 1})}
        return {"lark": f"start: {_marker(tokenizer, '[TOOL_CALLS]')} calls\ncalls: {lark_json(calls)}\n"}
    repeat = "+" if setup.several else ""  # HERMES
    return {"lark": f'start: ({_marker(tokenizer, "<tool_call>")} "\\n" call "\\n" '
                    f'{_marker(tokenizer, "</tool_call>")} "\\n"?){repeat}\ncall: {lark_json(call)}\n'}


def _marker(tokenizer: Tokenizer, text: str) -> str:
    """A format's marker in lark: its token by id where the vocab has it as one token (a special
    token is not matched by its text), else the text itself."""
    ids = tokenizer.tokenize(text, add_special=False, parse_special=True)
    if len(ids) == 1 and tokenizer.token_text(ids[0]) == text:
        return f"<[{ids[0]}]>"
    return json.dumps(text)
