"""The generic format's answer read as it is written, for answers a grammar holds to the format.

Under the grammar an answer is `{"response": "..."}`, `{"tool_call": {"name": ..., "arguments":
{...}}}` or `{"tool_calls": [...]}`, names and arguments valid: nothing after a call's name can
make it not a call. So a call is announced as soon as its name is written and its arguments
stream as the model writes them (ToolCallStart, then ToolCallArguments pieces), as OpenAI
streams them; a reply streams as text. An answer cut off (max_tokens, the context's end) leaves
the last call's arguments unfinished, as OpenAI's do, with finish_reason "length". Text that is
none of these from its start (only possible without the grammar) is content.
"""
from __future__ import annotations

import json
import re
from typing import Iterable

from .tool_parse import _RESPONSE_START, ToolCallArguments, ToolCallStart, ToolCallStream
from .tools import GENERIC

_STRING = r'"((?:[^"\\]|\\.)*)"'
_CALL_HEAD = re.compile(r'\s*\{\s*"tool_call"\s*:\s*\{\s*"name"\s*:\s*' + _STRING + r'\s*,\s*"arguments"\s*:\s*')
_LIST_HEAD = re.compile(r'\s*\{\s*"tool_calls"\s*:\s*\[\s*')
_ITEM_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*' + _STRING + r'\s*,\s*"arguments"\s*:\s*')
_ITEM_END = re.compile(r'\s*\}\s*([,\]])\s*')


class HeldGenericStream(ToolCallStream):
    def __init__(self, names: Iterable[str]):
        super().__init__(GENERIC, names)
        self.whole = False
        self.shape: str | None = None  # "call", "list" or "text", once the answer's start shows it
        self.args: _ObjectScan | None = None  # the arguments being written
        self.item_done = False  # a list item's arguments are complete: its end comes next

    def feed(self, text: str) -> list:
        if self.done:
            raise ValueError("the stream is finished")
        self.buf += text
        out: list = []
        self._progress(out, final=False)
        return out

    def finish(self) -> list:
        out: list = []
        self._progress(out, final=True)
        if not self.n_calls and self.pending_ws:
            out.append(self.pending_ws)
        self.pending_ws, self.buf, self.done = "", "", True
        return out

    @property
    def calls_whole(self) -> bool:
        """Whether the last call's arguments are complete (not cut off by the end of the text)."""
        return self.args is None

    def _progress(self, out: list, final: bool) -> None:
        while True:
            if self.reply is not None or self.shape == "text":
                return self._scan(out, final)
            if self.args is not None:
                if not self.args.depth:  # space before the arguments is layout, however it arrives
                    self.buf = self.buf.lstrip()
                n = self.args.scan(self.buf)
                if n:
                    out.append(ToolCallArguments(self.buf[:n]))
                    self.buf = self.buf[n:]
                if not self.args.closed:
                    return
                self.args, self.item_done = None, self.shape == "list"
            if self.shape is None:
                start = _RESPONSE_START.match(self.buf)
                call = _CALL_HEAD.match(self.buf)
                listed = _LIST_HEAD.match(self.buf)
                if start:
                    self.reply, self.buf = "open", self.buf[start.end():]
                elif call and self._start(out, call):
                    self.shape = "call"
                elif listed:
                    self.shape, self.buf = "list", self.buf[listed.end():]
                elif final:  # none of the format's shapes: text
                    self.shape = "text"
                else:
                    return
                continue
            if self.shape == "list" and self.item_done:
                end = _ITEM_END.match(self.buf)
                if not end:
                    return self._rest(out, final)
                self.item_done, self.buf = False, self.buf[end.end():]
                if end.group(1) == "]":
                    self.shape = "call"  # only the object's end is left
                continue
            if self.shape == "list":
                item = _ITEM_HEAD.match(self.buf)
                if not (item and self._start(out, item)):
                    return self._rest(out, final)
                continue
            return self._rest(out, final)  # after the call: only the object's end

    def _start(self, out: list, head: re.Match) -> bool:
        """Announce the call `head` names (if it is an offered tool) and scan its arguments."""
        try:
            name = json.loads('"' + head.group(1) + '"')
        except ValueError:
            return False
        if name not in self.names:
            return False
        self.after_call = True
        self.n_calls += 1
        out.append(ToolCallStart(name))
        self.args, self.buf = _ObjectScan(), self.buf[head.end():]
        return True

    def _rest(self, out: list, final: bool) -> None:
        """What is left past the calls at the end: under the grammar, the format's own brackets,
        or a piece of its structure the end cut off (finish_reason "length" says so)."""
        if final:
            self.buf = ""


class _ObjectScan:
    """Finds where a JSON object ends in text that arrives in pieces (depth, strings, escapes)."""

    def __init__(self):
        self.depth, self.in_string, self.escape, self.closed = 0, False, False, False

    def scan(self, text: str) -> int:
        """How much of text belongs to the object (all of it until the closing brace)."""
        for i, ch in enumerate(text):
            if self.in_string:
                if self.escape:
                    self.escape = False
                elif ch == "\\":
                    self.escape = True
                elif ch == '"':
                    self.in_string = False
            elif ch == '"':
                self.in_string = True
            elif ch in "{[":
                self.depth += 1
            elif ch in "}]":
                self.depth -= 1
                if self.depth == 0:
                    self.closed = True
                    return i + 1
        return len(text)
