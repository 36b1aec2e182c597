"""The generic format's answer read as it is written (under its grammar): calls announced at
their name with arguments streaming after, replies as text, cut-off answers kept as far as
they got, and the same result however the text is cut into pieces."""
from __future__ import annotations

import pytest

from localinfer.chat.generic_stream import HeldGenericStream
from localinfer.chat.tool_parse import ToolCallArguments, ToolCallStart

NAMES = ["get_weather", "add"]


def read(text: str, piece: int | None = None) -> tuple[str, list[tuple[str, str]]]:
    """(content, [(name, arguments text)]) after feeding `text` whole or in pieces."""
    s = HeldGenericStream(NAMES)
    step = piece or max(len(text), 1)
    events = [e for i in range(0, len(text), step) for e in s.feed(text[i:i + step])] + s.finish()
    content, calls = "", []
    for e in events:
        if isinstance(e, str):
            content += e
        elif isinstance(e, ToolCallStart):
            calls.append((e.name, ""))
        else:
            assert isinstance(e, ToolCallArguments) and calls
            calls[-1] = (calls[-1][0], calls[-1][1] + e.text)
    return content, calls


CASES = [
    ('{"tool_call": {"name": "get_weather", "arguments": {"city": "Par}is", "x": [1, {"y": "\\"}"}]}}}', "",
     [("get_weather", '{"city": "Par}is", "x": [1, {"y": "\\"}"}]}')]),  # brackets inside strings
    ('{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "add", "arguments": {"a": 1}}]}',
     "", [("get_weather", '{"city": "Paris"}'), ("add", '{"a": 1}')]),
    ('{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "ad', "",
     [("get_weather", '{"city": "Paris"}')]),  # cut off before the second call's name is whole
    ('{"tool_call": {"name": "get_weather", "arguments": {"city": "Pa', "", [("get_weather", '{"city": "Pa')]),
    ('{"tool_call": {"name": "get_weather", "arguments":', "", [("get_weather", "")]),  # cut before the arguments
    ('{"tool_call": {"name": "get_wea', '{"tool_call": {"name": "get_wea', []),  # no name yet: text
    ('{"response": "It is \\"sunny\\"."}', 'It is "sunny".', []),
    ('{"response": "cut', "cut", []),
    ("plain words", "plain words", []),
    ('{"tool_call": {"name": "launch", "arguments": {}}}', '{"tool_call": {"name": "launch", "arguments": {}}}', []),
]


@pytest.mark.parametrize("piece", [None, 1, 2, 3, 7])
@pytest.mark.parametrize("text,content,calls", CASES)
def test_read_the_same_however_cut(text, content, calls, piece):
    assert read(text, piece) == (content, calls)


def test_a_call_is_announced_at_its_name():
    s = HeldGenericStream(NAMES)
    assert s.feed('{"tool_call": {"name": "add", "argu') == []
    assert s.feed('ments": {"a"') == [ToolCallStart("add"), ToolCallArguments('{"a"')]
    assert not s.calls_whole
    assert s.feed(': 1}}}') == [ToolCallArguments(": 1}")]
    assert s.finish() == [] and s.calls_whole
