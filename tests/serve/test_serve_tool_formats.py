"""The native tool-call syntaxes end to end: SmolLM2's weights behind small templates that
speak Hermes/Qwen, Llama 3 JSON and Mistral. The format is read from each template's text; under
`required` the grammar makes the model write the call in that syntax, the server reads it back,
and the call and its result go back through the template in the next turn."""
from __future__ import annotations

import json

import jsonschema
import openai
import pytest

import localinfer
from localinfer.chat.template import ChatTemplate
from localinfer.serve.api import parse_chat
from localinfer.serve.app import BackgroundServer

CHATML_TURNS = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}{CALLS}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
TOOLS_BLOCK = "{% if tools %}<|im_start|>system\n{INTRO}\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}<|im_end|>\n{% endif %}"
TEMPLATES = {  # each writes the history's calls the way its format does
    "hermes": TOOLS_BLOCK.replace("{INTRO}", "Call a tool as <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call>")
    + CHATML_TURNS.replace("{CALLS}", "{% for c in m.tool_calls or [] %}<tool_call>\n{\"name\": \"{{ c.function.name }}"
                                      "\", \"arguments\": {{ c.function.arguments | tojson }}}\n</tool_call>{% endfor %}"),
    "llama3": TOOLS_BLOCK.replace("{INTRO}", "To call a function answer <|python_tag|>{\"name\": ..., \"parameters\": ...}")
    + CHATML_TURNS.replace("{CALLS}", "{% for c in m.tool_calls or [] %}<|python_tag|>{\"name\": \"{{ c.function.name }}"
                                      "\", \"parameters\": {{ c.function.arguments | tojson }}}{% endfor %}"),
    "mistral": "{% for m in messages if m.role == 'tool' and m.tool_call_id | length != 9 %}"  # as Mistral's own
               "{{ raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}{% endfor %}"
    + TOOLS_BLOCK.replace("{INTRO}", "Call tools as [TOOL_CALLS][{\"name\": ..., \"arguments\": ...}]")
    + CHATML_TURNS.replace("{CALLS}", "{% if m.tool_calls %}[TOOL_CALLS]{{ m.tool_calls | map(attribute='function') "
                                      "| list | tojson }}{% endif %}"),
}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}}, "required": ["city"]}}}
ASK = [{"role": "user", "content": "What is the weather like in Paris?"}]


@pytest.fixture(scope="module")
def model(smollm2_path):
    return localinfer.load(str(smollm2_path), n_ctx=1024)


@pytest.fixture(params=sorted(TEMPLATES))
def server(request, model):
    model.chat_template = ChatTemplate(TEMPLATES[request.param])
    with BackgroundServer(model, "smollm2", port=0, n_slots=1, n_ctx=1024) as s:
        yield request.param, model, openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0,
                                                  timeout=120)


MARKS = {"hermes": '"<tool_call>"', "llama3": '"parameters"', "mistral": '"[TOOL_CALLS]"'}


def test_required_call_round_trip(server):
    fmt, model, client = server
    args = dict(model="smollm2", messages=ASK, tools=[WEATHER], tool_choice="required", temperature=0,
                max_tokens=60, parallel_tool_calls=False)
    grammar = parse_chat(args, model, "smollm2", 1024).request.grammar  # the format's own syntax is held to
    assert MARKS[fmt] in grammar.text and '"tool_call"' not in grammar.text
    r = client.chat.completions.create(**args)
    message = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls" and not message.content
    (call,) = message.tool_calls
    assert call.function.name == "get_weather"
    assert len(call.id) == 9 and call.id.isalnum() if fmt == "mistral" else call.id.startswith("call_")
    jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])
    streamed = [d for c in client.chat.completions.create(stream=True, **args) for d in c.choices[0].delta.tool_calls or []]
    assert [d.function.name for d in streamed if d.id] == ["get_weather"]
    assert "".join(d.function.arguments for d in streamed) == call.function.arguments
    # the call and its result go back through the template; the next answer is free text
    history = ASK + [message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"}]
    final = client.chat.completions.create(model="smollm2", messages=history, tools=[WEATHER], tool_choice="none",
                                           temperature=0, max_tokens=16)
    assert final.choices[0].message.content and final.choices[0].message.tool_calls is None
