"""Tool calls read back from a model's text, in each syntax: calls, content, malformed output
(content, never a crash), and the same events however the text is cut into stream pieces."""
from __future__ import annotations

import json

import pytest

from localinfer.chat.tool_parse import ToolCall, ToolCallStream
from localinfer.chat.tools import GENERIC, HERMES, LLAMA3, MISTRAL

NAMES = ["get_weather", "add"]
WEATHER = ToolCall("get_weather", '{"city": "Paris"}')
ADD = ToolCall("add", '{"a": 1, "b": 2}')


def read(fmt: str, text: str, piece: int | None = None) -> tuple[str, list[ToolCall]]:
    """(content, calls) after feeding `text` whole or in pieces of `piece` characters."""
    s = ToolCallStream(fmt, NAMES)
    events = []
    for i in range(0, len(text), piece or max(len(text), 1)):
        events += s.feed(text[i:i + (piece or len(text))])
    events += s.finish()
    return "".join(e for e in events if isinstance(e, str)), [e for e in events if isinstance(e, ToolCall)]


CASES = [
    # Hermes / Qwen: calls anywhere in the text, content around them
    (HERMES, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', "", [WEATHER]),
    (HERMES, 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
             '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>\n', "Let me check.",
     [WEATHER, ADD]),
    (HERMES, 'The answer is 3 < 4, see <tool_ma', "The answer is 3 < 4, see <tool_ma", []),
    (HERMES, '<tool_call>{"name": "get_weather", "arguments": {"city": </tool_call> ok',
     '<tool_call>{"name": "get_weather", "arguments": {"city": </tool_call> ok', []),  # bad JSON: text
    (HERMES, '<tool_call>{"name": "delete_all", "arguments": {}}</tool_call>',
     '<tool_call>{"name": "delete_all", "arguments": {}}</tool_call>', []),  # not an offered tool
    (HERMES, '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}', "", [ADD]),  # closed by the end
    (HERMES, '<tool_call>{"name": "add", "arguments": {"a": 1, ', '<tool_call>{"name": "add", "arguments": {"a": 1, ',
     []),  # cut off: text, all of it (the trailing space is held back, then kept: no call came)
    # Llama 3.x: the whole answer one JSON object with "parameters"
    (LLAMA3, '{"name": "get_weather", "parameters": {"city": "Paris"}}', "", [WEATHER]),
    (LLAMA3, '<|python_tag|>{"name": "add", "parameters": {"a": 1, "b": 2}}', "", [ADD]),
    (LLAMA3, '{"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "add", "parameters": {"a": 1, "b": 2}}',
     "", [WEATHER, ADD]),
    (LLAMA3, 'Paris is sunny {"name": "add"}', 'Paris is sunny {"name": "add"}', []),
    (LLAMA3, '{"name": "add", "parameters": [1, 2]}', '{"name": "add", "parameters": [1, 2]}', []),
    (LLAMA3, '{"name": "add", "parameters": {"a": 1,', '{"name": "add", "parameters": {"a": 1,', []),
    # Mistral: [TOOL_CALLS] then a list (the marker is a control token, so it may be missing)
    (MISTRAL, '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, '
              '{"name": "add", "arguments": {"a": 1, "b": 2}}]', "", [WEATHER, ADD]),
    (MISTRAL, '[{"name": "add", "arguments": {"a": 1, "b": 2}}]', "", [ADD]),
    (MISTRAL, '[TOOL_CALLS][{"name": "add", "arguments": "{\\"a\\": 1, \\"b\\": 2}"}]', "", [ADD]),  # args as text
    (MISTRAL, '[1, 2, 3] are numbers', '[1, 2, 3] are numbers', []),
    (MISTRAL, 'Hello there', 'Hello there', []),
    # generic: the whole answer one object
    (GENERIC, '{"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}', "", [WEATHER]),
    (GENERIC, '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}, '
              '{"name": "add", "arguments": {"a": 1, "b": 2}}]}', "", [WEATHER, ADD]),
    (GENERIC, '{"response": "It is sunny in Paris."}', "It is sunny in Paris.", []),
    (GENERIC, '{"response": "  spaced  "}', "  spaced  ", []),
    (GENERIC, '{"response": "say \\"hi\\" \\ud83d\\ude00 \\u00e9\\n"}', 'say "hi" \U0001F600 \u00e9\n', []),
    (GENERIC, '{"response": "cut off \\u00', "cut off ", []),  # a reply cut off: its text so far
    (GENERIC, '{"response": "cut off \\ud83d', "cut off \ufffd", []),  # half a surrogate pair
    (GENERIC, '{"response": "ok"} and more', "ok} and more", []),  # not the object's end: kept as text
    (GENERIC, '{"tool_call": {"name": "get_weather", "arguments": {"city": "Pa',
     '{"tool_call": {"name": "get_weather", "arguments": {"city": "Pa', []),  # cut off
    (GENERIC, '{"tool_calls": []}', '{"tool_calls": []}', []),
    (GENERIC, '{"tool_call": {"name": "get_weather"}}', '{"tool_call": {"name": "get_weather"}}', []),
    (GENERIC, "just words", "just words", []),
    (GENERIC, "[" * 100_000, "[" * 100_000, []),  # nested past the recursion limit: text, not a crash
]


@pytest.mark.parametrize("fmt,text,content,calls", CASES)
def test_parse(fmt, text, content, calls):
    assert read(fmt, text) == (content, calls)


@pytest.mark.parametrize("piece", [1, 2, 5, 13])
@pytest.mark.parametrize("fmt,text,content,calls", [c for c in CASES if len(c[1]) < 1000])
def test_pieces_give_the_same_events(fmt, text, content, calls, piece):
    assert read(fmt, text, piece) == (content, calls)


def test_arguments_are_json_objects():
    _, calls = read(HERMES, '<tool_call>{"name": "add", "arguments": {"a": "\\u00e9", "b": [1, {"c": null}]}}</tool_call>')
    assert json.loads(calls[0].arguments) == {"a": "é", "b": [1, {"c": None}]}


def test_content_streams_before_the_end():
    """Plain text is not held back (only what could begin a call marker, and trailing spaces)."""
    s = ToolCallStream(HERMES, NAMES)
    assert s.feed("Hello world, ") == ["Hello world,"]
    assert s.feed("<tool") == []
    assert s.feed("s are great") == [" <tools are great"]
    s = ToolCallStream(LLAMA3, NAMES)
    assert s.feed("  Sure") == ["  Sure"]
    s = ToolCallStream(LLAMA3, NAMES)
    assert s.feed('  {"name"') == []  # may be a call: held until the end
    s = ToolCallStream(GENERIC, NAMES)
    assert s.feed('{"response": "It is') == ["It is"]  # a reply streams as it is written
    assert s.feed(' sunny\\') == [" sunny"]  # half an escape waits
    assert s.feed('n"}') + s.finish() == ["\n"]


def test_a_finished_stream_takes_no_more_text():
    s = ToolCallStream(GENERIC, NAMES)
    s.finish()
    with pytest.raises(ValueError):
        s.feed("x")
    with pytest.raises(ValueError, match="unknown tool-call format"):
        ToolCallStream("xml", NAMES)
