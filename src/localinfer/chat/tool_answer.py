"""The answer side of tool calling, shared by the OpenAI server (serve/tool_calls.py) and the
llama-cpp-python shim (compat/llama_cpp/): a conversation's tool messages checked, its prompt with
the tools, and the generated text read as content and tool calls, whole or as stream deltas.

Both shapes come from one parser stream over the generated text (a whole answer is the stream
fed at once), so a streamed answer and a whole one always agree. A call's first delta carries
index, id, type, the name and `arguments: ""`, the next ones the arguments: as the model writes
them in the generic format (its grammar makes a named call certain), in one piece once the call
is complete in the others. finish_reason is "tool_calls" when the model called a tool and was
not cut off.
"""
from __future__ import annotations

import uuid
from typing import Any

from .generic_stream import HeldGenericStream
from .tool_parse import ToolCall, ToolCallArguments, ToolCallStart, ToolCallStream
from .tools import GENERIC, MISTRAL, ToolError, ToolSetup, tool_grammar, tool_prompt_tokens


def message_fields(i: int, m: dict) -> dict:
    """The tool fields of messages[i] (an assistant's `tool_calls`, a tool result's
    `tool_call_id` and `name`), checked; ToolError names the field."""
    where = f"messages[{i}]"
    out: dict[str, Any] = {}
    if m["role"] == "tool":
        if not isinstance(m.get("tool_call_id"), str) or not m["tool_call_id"]:
            raise ToolError(f"{where}.tool_call_id must be the id of the call this message answers",
                            f"{where}.tool_call_id")
        out["tool_call_id"] = m["tool_call_id"]
        if m.get("name") is not None:
            if not isinstance(m["name"], str):
                raise ToolError(f"{where}.name must be a string", f"{where}.name")
            out["name"] = m["name"]
    calls = m.get("tool_calls")
    if calls is None or calls == []:
        return out
    if m["role"] != "assistant":
        raise ToolError(f"{where}.tool_calls: only assistant messages carry tool calls", f"{where}.tool_calls")
    if not isinstance(calls, list):
        raise ToolError(f"{where}.tool_calls must be a list", f"{where}.tool_calls")
    clean = []
    for j, c in enumerate(calls):
        at = f"{where}.tool_calls[{j}]"
        f = c.get("function") if isinstance(c, dict) else None
        if (not isinstance(f, dict) or c.get("type", "function") != "function" or not isinstance(f.get("name"), str)
                or not isinstance(f.get("arguments"), str) or not isinstance(c.get("id", ""), str)):
            raise ToolError(f"{at} must be {{'id': str, 'type': 'function', 'function': {{'name': str, "
                            f"'arguments': str}}}}", at)
        clean.append({"id": c.get("id") or f"call_{j}", "type": "function",
                      "function": {"name": f["name"], "arguments": f["arguments"]}})
    out["tool_calls"] = clean
    return out


def tool_prompt(model, messages: list[dict], setup: ToolSetup, max_tokens: int | None = None) -> tuple[list[int], Any]:
    """The prompt tokens, and the grammar that keeps the answer to the tool-call format (or None)."""
    _check_results(messages)
    tokens = tool_prompt_tokens(model.chat_template, model.tokenizer, messages, setup, max_tokens)
    spec = tool_grammar(setup, model.tokenizer)
    if spec is None:
        return tokens, None
    from ..constrain import GrammarError, compile_grammar
    try:
        return tokens, compile_grammar(model.tokenizer, **spec)
    except GrammarError as e:
        raise ToolError(f"the tools' parameter schemas cannot be made a grammar: {e}", "tools") from None


def _check_results(messages: list[dict]) -> None:
    """Each tool result answers a call the assistant made before it (as OpenAI requires)."""
    made: set[str] = set()
    for i, m in enumerate(messages):
        made.update(c["id"] for c in m.get("tool_calls", ()))
        if m["role"] == "tool" and m["tool_call_id"] not in made:
            raise ToolError(f"messages[{i}] is a tool result for '{m['tool_call_id'][:64]}', but no earlier "
                            f"assistant message has a tool call with that id", f"messages[{i}].tool_call_id")


def _call_id(format: str) -> str:
    """A new call's id. Mistral's templates refuse any but 9 letters and digits (as llama.cpp
    makes them for that format)."""
    return uuid.uuid4().hex[:9] if format == MISTRAL else "call_" + uuid.uuid4().hex[:24]


class ToolAnswer:
    """One answer's text read as content and tool calls, whole or as stream deltas."""

    def __init__(self, setup: ToolSetup):
        # the generic format is always held by its grammar (tools.tool_grammar): its calls can
        # stream as they are written; the others' are reported once complete and valid
        self.stream = (HeldGenericStream(setup.names) if setup.format == GENERIC
                       else ToolCallStream(setup.format, setup.names))
        self.n_calls, self.format = 0, setup.format

    def finish_reason(self, finish: str) -> str:
        """"tool_calls" for an answer that ended with its calls whole (not one a stop string cut)."""
        return "tool_calls" if self.n_calls and finish == "stop" and self.stream.calls_whole else finish

    def _deltas(self, events: list) -> list[dict]:
        deltas = []
        for e in events:
            if isinstance(e, (ToolCall, ToolCallStart)):
                head = {"index": self.n_calls, "id": _call_id(self.format), "type": "function",
                        "function": {"name": e.name, "arguments": ""}}
                deltas.append({"tool_calls": [head]})
                self.n_calls += 1
            if isinstance(e, (ToolCall, ToolCallArguments)):
                text = e.arguments if isinstance(e, ToolCall) else e.text
                deltas.append({"tool_calls": [{"index": self.n_calls - 1, "function": {"arguments": text}}]})
            elif isinstance(e, str):
                deltas.append({"content": e})
        return deltas

    def deltas(self, text: str, finished: bool) -> list[dict]:
        """The deltas `text` settles (and, when `finished`, the end of the answer)."""
        events = self.stream.feed(text) if text else []
        return self._deltas(events + (self.stream.finish() if finished else []))

    def message(self, text: str) -> dict:
        """The whole answer as a chat.completion message."""
        content, calls = [], []
        for d in self.deltas(text, finished=True):
            if "content" in d:
                content.append(d["content"])
            elif "id" in d["tool_calls"][0]:  # a call's first delta; a message's calls carry no index
                calls.append({k: v for k, v in d["tool_calls"][0].items() if k != "index"})
            else:
                calls[-1]["function"]["arguments"] += d["tool_calls"][0]["function"]["arguments"]
        message = {"role": "assistant", "content": "".join(content) if content or not calls else None}
        if calls:
            message["tool_calls"] = calls
        return message
