"""A model's tool calls read back out of its text, as it streams.

ToolCallStream takes the text in pieces and gives back events: content text, or a ToolCall.
A call is given only once its block is complete and valid (a known tool, arguments that are a
JSON object), so a stream never announces a call it would have to take back; text that looks
like a call but is not one (malformed JSON, an unknown tool, a block cut off at the end) is
content. The events depend only on the text, never on how it was cut into pieces: a whole
answer is the same stream fed at once, so streamed and non-streamed answers agree.

Formats (see tools.py): Hermes/Qwen `<tool_call>{"name", "arguments"}</tool_call>` anywhere in
the text; Llama 3.x one JSON object `{"name", "parameters"}` (after `<|python_tag|>`, or `;`
between several); Mistral `[TOOL_CALLS][{"name", "arguments"}, ...]`; generic, the whole answer
one object `{"tool_call": ...}`, `{"tool_calls": [...]}` or `{"response": "..."}`. Control tokens
are not text in the output, so markers that are control tokens (`[TOOL_CALLS]`,
`<|python_tag|>`) may be missing: the JSON alone is recognized too.

Whitespace next to a call is layout, not content: it is dropped (and trailing whitespace is held
back until more text shows it is not at the end).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterable

from .tools import GENERIC, HERMES, LLAMA3, MISTRAL

HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"
MISTRAL_MARKER, PYTHON_TAG = "[TOOL_CALLS]", "<|python_tag|>"
_RESPONSE_START = re.compile(r'\s*\{\s*"response"\s*:\s*"')  # the generic format's reply
_RESPONSE_END = re.compile(r'\s*\}\s*')
_STRING_PIECE = re.compile(r'(?:[^"\\]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*')  # complete characters of a JSON string


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # a JSON object, as text (what OpenAI's function.arguments holds)


@dataclass(frozen=True)
class ToolCallStart:
    """A call announced before its arguments are written (ToolCallArguments follow)."""
    name: str


@dataclass(frozen=True)
class ToolCallArguments:
    """The next piece of the last announced call's arguments, as the model wrote them."""
    text: str


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _call(obj: Any, names: Iterable[str], keys=("arguments",)) -> ToolCall | None:
    """A call from {"name": ..., <key>: {...}}, or None if it is not a call of a known tool."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or obj["name"] not in names:
        return None
    args = next((obj[k] for k in keys if k in obj), None)
    if isinstance(args, str):  # some models write the arguments as JSON text
        args = _loads(args)
    if not isinstance(args, dict):
        return None
    return ToolCall(obj["name"], json.dumps(args, ensure_ascii=False))


def _calls(objs: Any, names, keys=("arguments",)) -> list[ToolCall] | None:
    """All of a list of calls, or None if any is not one."""
    if not isinstance(objs, list) or not objs:
        return None
    calls = [_call(o, names, keys) for o in objs]
    return None if any(c is None for c in calls) else calls


def parse_generic(text: str, names) -> list | None:
    obj = _loads(text)
    if not isinstance(obj, dict) or len(obj) != 1:
        return None
    if "tool_call" in obj:
        call = _call(obj["tool_call"], names)
        return None if call is None else [call]
    if "tool_calls" in obj:
        return _calls(obj["tool_calls"], names)
    if isinstance(obj.get("response"), str):
        return [obj["response"]]
    return None


def parse_llama3(text: str, names) -> list[ToolCall] | None:
    text = text.strip()
    if text.startswith(PYTHON_TAG):
        text = text[len(PYTHON_TAG):].strip()
    obj = _loads(text)
    if obj is None and ";" in text:  # several calls, one object each: `{...}; {...}`
        objs = [_loads(part) for part in text.split(";")]
        return None if any(o is None for o in objs) else _calls(objs, names, ("parameters", "arguments"))
    return _calls(obj if isinstance(obj, list) else [obj], names, ("parameters", "arguments"))


def parse_mistral(text: str, names) -> list[ToolCall] | None:
    text = text.strip()
    if text.startswith(MISTRAL_MARKER):
        text = text[len(MISTRAL_MARKER):].strip()
    return _calls(_loads(text), names)


class ToolCallStream:
    """Feed the answer's text; take content strings and ToolCalls, in order."""

    def __init__(self, format: str, names: Iterable[str]):
        if format not in (GENERIC, HERMES, LLAMA3, MISTRAL):
            raise ValueError(f"unknown tool-call format {format!r}")
        self.format, self.names = format, frozenset(names)
        self.buf = ""            # text not yet settled
        self.pending_ws = ""     # trailing whitespace held back
        self.after_call = False  # drop whitespace that follows a call
        self.n_calls = 0
        self.whole = format in (GENERIC, LLAMA3, MISTRAL)  # may the whole answer be calls? (undecided)
        self.reply: str | None = None  # the generic reply's string: None before it, "open", "closed"
        self.done = False

    # -- the interface ----------------------------------------------------------------------------
    def feed(self, text: str) -> list:
        if self.done:
            raise ValueError("the stream is finished")
        self.buf += text
        out: list = []
        if self.whole:
            self._decide_whole()
        if not self.whole:
            self._scan(out, final=False)
        return out

    def finish(self) -> list:
        """The events the end of the text settles; the stream takes no more text after."""
        out: list = []
        if self.whole:
            parsed = self._parse_whole(self.buf)
            if parsed is not None:
                self.buf = ""
                for item in parsed:
                    self._emit(out, item)
            self.whole = False
        self._scan(out, final=True)
        if not self.n_calls:
            out.extend([self.pending_ws] if self.pending_ws else [])
        self.pending_ws, self.done = "", True
        return out

    @property
    def calls_whole(self) -> bool:
        """Whether every call given so far is complete (here always: calls are given whole)."""
        return True

    # -- formats where the whole answer is one JSON document ------------------------------------------
    def _decide_whole(self) -> None:
        """Stop holding the text back once it cannot start a call (plain text streams live)."""
        head = self.buf.lstrip()
        if not head:
            return
        if self.format == GENERIC:  # a reply streams as it is written, its JSON string decoded
            start = _RESPONSE_START.match(self.buf)
            if start:
                self.whole, self.reply, self.buf = False, "open", self.buf[start.end():]
                return
        starts = {GENERIC: ("{",), LLAMA3: ("{", "[", PYTHON_TAG), MISTRAL: ("[", MISTRAL_MARKER)}[self.format]
        if not any(head.startswith(s) or s.startswith(head) for s in starts):
            self.whole = False

    def _parse_whole(self, text: str) -> list | None:
        parse = {GENERIC: parse_generic, LLAMA3: parse_llama3, MISTRAL: parse_mistral}[self.format]
        return parse(text, self.names)

    # -- text with calls inside (Hermes), and plain text ----------------------------------------------
    def _scan(self, out: list, final: bool) -> None:
        if self.reply is not None:
            return self._reply(out, final)
        while self.buf:
            if self.format != HERMES:
                self._content(out, self.buf)
                self.buf = ""
                return
            start = self.buf.find(HERMES_OPEN)
            if start < 0:
                keep = 0 if final else _partial_suffix(self.buf, HERMES_OPEN)
                self._content(out, self.buf[:len(self.buf) - keep])
                self.buf = self.buf[len(self.buf) - keep:]
                return
            if start:
                self._content(out, self.buf[:start])
                self.buf = self.buf[start:]
            end = self.buf.find(HERMES_CLOSE)
            if end < 0 and not final:
                return  # the block is still open
            inner = self.buf[len(HERMES_OPEN):end if end >= 0 else len(self.buf)]
            block_end = end + len(HERMES_CLOSE) if end >= 0 else len(self.buf)
            call = _call(_loads(inner), self.names)
            if call is not None:
                self._emit(out, call)
            else:  # not a call after all: the block is text
                self._content(out, self.buf[:block_end])
            self.buf = self.buf[block_end:]

    def _reply(self, out: list, final: bool) -> None:
        """The generic reply's string so far as text; what follows its closing quote must be the
        object's end (the grammar sees to it), anything else is kept as text too."""
        if self.reply == "open":
            piece = _STRING_PIECE.match(self.buf).group()
            if re.search(r"\\u[dD][89abAB][0-9a-fA-F]{2}$", piece) and not final:
                piece = piece[:-6]  # a surrogate pair's first half: wait for the second
            if piece:
                self._content(out, json.loads('"' + piece + '"', strict=False).encode("utf-16", "surrogatepass")
                              .decode("utf-16", "replace"))
                self.buf = self.buf[len(piece):]
            if self.buf.startswith('"'):
                self.reply, self.buf = "closed", self.buf[1:]
        if self.reply == "closed":
            rest = self.buf if final else ""
            if rest and not _RESPONSE_END.fullmatch(rest):
                self._content(out, rest)
            if final:
                self.buf = ""

    def _emit(self, out: list, item) -> None:
        if isinstance(item, ToolCall):
            self.pending_ws, self.after_call = "", True
            self.n_calls += 1
            out.append(item)
        else:
            self._content(out, item)

    def _content(self, out: list, text: str) -> None:
        if self.after_call:
            text = text.lstrip()
            if not text:
                return
            self.after_call = False
        body = text.rstrip()
        if body:
            out.append(self.pending_ws + body)
            self.pending_ws = ""
        self.pending_ws += text[len(body):]


def _partial_suffix(text: str, marker: str) -> int:
    """The length of the longest end of `text` that begins `marker` (it may be completed next)."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0
