"""response_format through a real server and the official openai client: every answer of a
sampled (temperature 1.0) generation validates against its schema, on SmolLM2 and on gemma3."""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai
import pytest

import localinfer
from localinfer.serve.app import BackgroundServer

from serve_helpers import raw

# nested objects, an array, enums, numbers, required fields and string patterns; every string
# and number is bounded, so a whole answer fits in max_tokens however the model samples
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Z][a-z]{1,11}$"},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        # a multiple exact in binary: jsonschema checks multipleOf by float division (2.47 / 0.01 fails)
        "height_m": {"type": "number", "minimum": 0.5, "maximum": 2.5, "multipleOf": 0.25},
        "role": {"enum": ["admin", "user", "guest"]},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string", "minLength": 1, "maxLength": 20},
                           "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["city", "zip"], "additionalProperties": False},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "minItems": 1, "maxItems": 3},
        "active": {"type": "boolean"},
    },
    "required": ["name", "age", "role", "address", "tags", "active"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}}
ASK = [{"role": "user", "content": "Make up a user record as JSON."}]
N_ANSWERS = 16  # two rounds of the server's eight slots
MAX_TOKENS = 200  # the longest answer the schema allows is ~150 tokens on either vocabulary


def _server(path):
    model = localinfer.load(str(path), n_ctx=512)
    return model, BackgroundServer(model, "m", port=0, n_slots=8, n_ctx=512)


@pytest.fixture(scope="module")
def smollm2_server(smollm2_path):
    model, server = _server(smollm2_path)
    with server as s:
        yield s
    model.close()


@pytest.fixture(scope="module")
def gemma3_server(gemma3_path):
    model, server = _server(gemma3_path)
    with server as s:
        yield s
    model.close()


def _client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def _answers(server, n: int) -> list:
    client = _client(server)

    def one(i):
        return client.chat.completions.create(model="m", messages=ASK, max_tokens=MAX_TOKENS, temperature=1.0,
                                              seed=i, response_format=FORMAT).choices[0]

    with ThreadPoolExecutor(8) as pool:  # eight slots decode together
        return list(pool.map(one, range(n)))


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_sampled_answers_all_validate(name, request):
    server = request.getfixturevalue(f"{name}_server")
    choices = _answers(server, N_ANSWERS)
    for c in choices:
        assert c.finish_reason == "stop", c.message.content
        jsonschema.validate(json.loads(c.message.content), SCHEMA)
    assert len({c.message.content for c in choices}) > N_ANSWERS // 2  # sampled, not one answer repeated


def test_json_object_and_completions(smollm2_server):
    client = _client(smollm2_server)
    r = client.chat.completions.create(model="m", messages=ASK, max_tokens=60, temperature=0,
                                       response_format={"type": "json_object"})
    c = r.choices[0]
    if c.finish_reason == "stop":
        assert isinstance(json.loads(c.message.content), dict)
    else:  # an object may be longer than max_tokens; what came is still its beginning
        assert c.message.content.startswith("{")
    r = client.completions.create(model="m", prompt="A user record:", max_tokens=MAX_TOKENS, temperature=1.0, seed=3,
                                  extra_body={"response_format": FORMAT})
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].text), SCHEMA)


def test_streamed_answer_validates(smollm2_server):
    stream = _client(smollm2_server).chat.completions.create(
        model="m", messages=ASK, max_tokens=MAX_TOKENS, temperature=1.0, seed=5, response_format=FORMAT, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    jsonschema.validate(json.loads(text), SCHEMA)


def test_text_format_is_free_text(smollm2_server):
    r = _client(smollm2_server).chat.completions.create(model="m", messages=ASK, max_tokens=8, temperature=0,
                                                        response_format={"type": "text"})
    assert r.choices[0].message.content


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fmt, param", [
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "strng"}}}, "response_format"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/nowhere"}}}, "response_format"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": [1]}}, "response_format.json_schema.schema"),
    ({"type": "json_schema"}, "response_format.json_schema"),
    ({"type": "json_schema", "json_schema": {"name": "bad name!", "schema": {}}}, "response_format.json_schema.name"),
    ({"type": "yaml"}, "response_format.type"),
    # compiles, but its lexer would fail on the answer's second token: refused before a slot is taken
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string",
                                                                     "pattern": "(.{0,100}){0,100}z"}}},
     "response_format"),
    ("json", "response_format"),
])
def test_refused_formats_are_400s_naming_response_format(smollm2_server, fmt, param):
    for path, body in (("/v1/chat/completions", {"messages": ASK}), ("/v1/completions", {"prompt": "x"})):
        status, _, payload = raw(smollm2_server.url, "POST", path, {**body, "response_format": fmt})
        assert status == 400, payload
        assert payload["error"]["param"] == param and payload["error"]["type"] == "invalid_request_error"


def test_each_of_n_choices_follows_the_schema(smollm2_server):
    """n choices share one prefill, but each decodes with its own grammar state."""
    r = _client(smollm2_server).chat.completions.create(model="m", messages=ASK, max_tokens=MAX_TOKENS,
                                                        temperature=1.0, seed=11, n=3, response_format=FORMAT)
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    for c in r.choices:
        assert c.finish_reason == "stop", c.message.content
        jsonschema.validate(json.loads(c.message.content), SCHEMA)
    assert len({c.message.content for c in r.choices}) > 1
