"""Tool calls through the official openai client against a real server: SmolLM2's template
knows no tools, so it gets the generic format (a system message and one grammar-held JSON
object). An agent loop, streamed and whole answers that agree, calls that always follow the
tool's schema under `required` and a named choice, plain content under `none`, and 400s."""
from __future__ import annotations

import json

import jsonschema
import openai
import pytest

import localinfer
from localinfer.serve.app import BackgroundServer

from serve_helpers import raw, wait_idle

NAME = "smollm2"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
                                                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The local time in a timezone",
    "parameters": {"type": "object", "properties": {"timezone": {"type": "string", "maxLength": 24},
                                                    "offset": {"type": "integer", "minimum": -12, "maximum": 14}},
                   "required": ["timezone", "offset"]}}}
TOOLS = [WEATHER, TIME]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "What is the weather like in Paris?"}]


@pytest.fixture(scope="module")
def server(smollm2_path):
    model = localinfer.load(str(smollm2_path), n_ctx=1024)
    with BackgroundServer(model, NAME, port=0, n_slots=2, n_ctx=1024) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def _calls(message) -> list[tuple[str, dict]]:
    return [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]


def _joined(chunks) -> tuple[str | None, list[tuple[str, str]], str, int]:
    """(content, calls with their arguments' text, finish_reason, number of argument deltas) from
    stream chunks, checking each tool-call delta's shape."""
    content, calls, finish, pieces = [], {}, None, 0
    for c in chunks:
        if not c.choices:
            continue
        delta = c.choices[0].delta
        content.append(delta.content or "")
        for d in delta.tool_calls or []:
            if d.index not in calls:  # the first delta of a call: its id, type, name and no arguments yet
                assert d.id.startswith("call_") and d.type == "function" and d.function.name
                assert d.function.arguments == ""
                calls[d.index] = [d.function.name, ""]
            else:
                assert d.id is None and d.function.name is None
                calls[d.index][1] += d.function.arguments
                pieces += 1
        finish = c.choices[0].finish_reason or finish
    return "".join(content) or None, [(n, a) for _, (n, a) in sorted(calls.items())], finish, pieces


def test_agent_loop_call_result_answer(client):
    """call -> the tool's result -> an answer that uses it. The 135M model keeps calling under
    'auto', so the last turn asks for the answer with tool_choice 'none', as an agent does when
    its step budget is spent."""
    messages = list(ASK)
    r = client.chat.completions.create(model=NAME, messages=messages, tools=TOOLS, tool_choice="required",
                                       temperature=0, max_tokens=60)
    message = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls" and message.content is None
    (name, arguments), = _calls(message)
    assert name == "get_weather" and arguments["city"] == "Paris"
    messages.append(message.model_dump(exclude_none=True))
    for call in message.tool_calls:
        messages.append({"role": "tool", "tool_call_id": call.id,
                         "content": json.dumps({"city": "Paris", "sky": "sunny", "celsius": 21})})
    final = client.chat.completions.create(model=NAME, messages=messages, tools=TOOLS, tool_choice="none",
                                           temperature=0, max_tokens=60)
    answer = final.choices[0].message
    assert answer.tool_calls is None and answer.content and not answer.content.lstrip().startswith("{")
    assert "21" in answer.content or "sunny" in answer.content  # the result reached the model


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_time"}}])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_required_and_named_calls_follow_the_schema(client, choice, seed):
    """Sampled at temperature 1: the grammar, not luck, makes every call well-formed. The
    schemas bound every string and one call is asked for (a named choice is one call), so a
    whole call fits in max_tokens and must be finished: a free string, or a list of parallel
    calls, may run on as long as the sampler likes."""
    r = client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Help me plan my day."}],
                                       tools=TOOLS, tool_choice=choice, temperature=1.0, top_p=1.0, seed=seed,
                                       max_tokens=120, parallel_tool_calls=isinstance(choice, dict))
    assert r.choices[0].finish_reason == "tool_calls"
    calls = _calls(r.choices[0].message)
    assert calls
    for name, arguments in calls:
        if isinstance(choice, dict):
            assert name == "get_time"
        jsonschema.validate(arguments, SCHEMAS[name])


@pytest.mark.parametrize("kw", [dict(tool_choice="required", temperature=0, max_tokens=60),
                                dict(tool_choice="required", temperature=0, max_tokens=20),  # cut mid-call
                                dict(tool_choice="auto", temperature=0.9, seed=5, max_tokens=60),
                                dict(tool_choice="none", temperature=0, max_tokens=60)])
def test_stream_and_whole_agree(client, kw):
    args = dict(model=NAME, messages=ASK, tools=TOOLS, **kw)
    whole = client.chat.completions.create(**args).choices[0]
    content, calls, finish, _ = _joined(client.chat.completions.create(stream=True, **args))
    raw_calls = [(c.function.name, c.function.arguments) for c in whole.message.tool_calls or []]
    assert (content, calls, finish) == (whole.message.content, raw_calls, whole.finish_reason)
    if kw["max_tokens"] == 20:  # a call cut off is kept as far as it got, as OpenAI's are
        assert finish == "length" and calls and calls[0][0] == "get_weather"


def test_generic_call_arguments_stream_as_written(client):
    chunks = list(client.chat.completions.create(model=NAME, messages=ASK, tools=TOOLS, tool_choice="required",
                                                 temperature=0, max_tokens=60, stream=True))
    _, ((name, arguments),), finish, pieces = _joined(chunks)
    assert finish == "tool_calls" and pieces > 1  # token by token, not the whole at the end
    jsonschema.validate(json.loads(arguments), SCHEMAS[name])


def test_a_call_cut_by_a_stop_string_is_not_a_finished_call(client):
    args = dict(model=NAME, messages=ASK, tools=TOOLS, tool_choice="required", temperature=0, max_tokens=60)
    whole = client.chat.completions.create(**args).choices[0]
    assert whole.finish_reason == "tool_calls"
    cut = client.chat.completions.create(stop=["Paris"], **args).choices[0]
    assert cut.finish_reason == "stop" and cut.message.tool_calls[0].function.arguments == '{"city": "'


def test_none_gives_plain_content(client):
    r = client.chat.completions.create(model=NAME, messages=ASK, tools=TOOLS, tool_choice="none",
                                       temperature=0, max_tokens=30)
    message = r.choices[0].message
    assert message.tool_calls is None and message.content and '"response"' not in message.content
    assert r.choices[0].finish_reason in ("stop", "length")


def test_parallel_calls_off_gives_one_call(client):
    r = client.chat.completions.create(model=NAME, messages=ASK, tools=TOOLS, tool_choice="required",
                                       parallel_tool_calls=False, temperature=0, max_tokens=60)
    assert len(r.choices[0].message.tool_calls) == 1


def test_gemma_template_gets_the_generic_format(gemma3_path):
    model = localinfer.load(str(gemma3_path), n_ctx=1024)
    with BackgroundServer(model, "gemma3", port=0, n_slots=1, n_ctx=1024) as s:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=120)
        r = c.chat.completions.create(model="gemma3", messages=ASK, tools=TOOLS, temperature=0, max_tokens=60,
                                      tool_choice={"type": "function", "function": {"name": "get_weather"}})
        (name, arguments), = _calls(r.choices[0].message)
        assert name == "get_weather" and r.choices[0].finish_reason == "tool_calls"
        jsonschema.validate(arguments, SCHEMAS[name])


CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


@pytest.mark.parametrize("extra,param", [
    ({"tools": {"type": "function"}}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools[0].function.name"),
    ({"tools": [WEATHER, {"type": "function", "function": {"name": "x", "parameters": {"type": "object",
                                                                                      "properties": 3}}}]}, "tools"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "launch"}}}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": TOOLS, "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ({"functions": [WEATHER["function"]]}, "functions"),
    ({"tools": [{"type": "function", "function": {"name": "x", "parameters": {
        "type": "object", "properties": {"a": {"type": "strin"}}}}}], "tool_choice": "required"}, "tools"),
    ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}}, "response_format"),
    ({"tools": TOOLS, "logprobs": True}, "logprobs"),
    ({"messages": ASK + [{"role": "tool", "content": "sunny"}]}, "messages[1].tool_call_id"),
    ({"messages": ASK + [{"role": "assistant", "tool_calls": [CALL]}, {"role": "tool", "tool_call_id": "call_2",
                                                                       "content": "sunny"}]}, "messages[2].tool_call_id"),
    ({"messages": ASK + [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f"}}]}]},
     "messages[1].tool_calls[0]"),
    ({"messages": ASK + [{"role": "assistant", "tool_calls": "get_weather"}]}, "messages[1].tool_calls"),
    ({"messages": [{"role": "user", "content": "hi", "tool_calls": [CALL]}]}, "messages[0].tool_calls"),
])
def test_bad_requests_name_the_parameter(server, extra, param):
    status, _, body = raw(server.url, "POST", "/v1/chat/completions",
                          {"model": NAME, "messages": ASK, "max_tokens": 4, **extra})
    assert status == 400, body
    assert body["error"]["param"] == param, body


def test_tools_on_completions_are_refused(server):
    status, _, body = raw(server.url, "POST", "/v1/completions",
                          {"model": NAME, "prompt": "hi", "tools": TOOLS, "max_tokens": 4})
    assert status == 400 and body["error"]["param"] == "tools"
    assert wait_idle(server.url)["slots_busy"] == 0


def test_n_choices_each_make_a_well_formed_call(client):
    """n choices share one prefill; each parses its own answer and holds its own grammar state,
    streamed or not."""
    args = dict(model=NAME, messages=ASK, tools=TOOLS, tool_choice="required", temperature=1.0, seed=4, n=2,
                max_tokens=120, parallel_tool_calls=False)
    whole = client.chat.completions.create(**args).choices
    assert sorted(c.index for c in whole) == [0, 1]
    for c in whole:
        assert c.finish_reason == "tool_calls"
        for name, arguments in _calls(c.message):
            jsonschema.validate(arguments, SCHEMAS[name])
    chunks = list(client.chat.completions.create(stream=True, **args))
    for c in whole:
        mine = [ch for ch in chunks if ch.choices and ch.choices[0].index == c.index]
        _, calls, finish, _ = _joined(mine)
        assert (calls, finish) == ([(t.function.name, t.function.arguments) for t in c.message.tool_calls],
                                   c.finish_reason)
