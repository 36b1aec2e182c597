"""llama-server's /tokenize, /detokenize and /apply-template, in its shapes, on the real SmolLM2."""
import pytest

import localinfer
from localinfer.serve.app import BackgroundServer
from serve_helpers import raw

TEXT = "Hello world \U0001F31C"


@pytest.fixture(scope="module")
def model(smollm2_path):
    return localinfer.load(str(smollm2_path), n_ctx=256)


@pytest.fixture(scope="module")
def server(model):
    with BackgroundServer(model, "smollm2", port=0, n_slots=1, n_ctx=256) as s:
        yield s


def test_tokenize_and_detokenize_round_trip(server, model):
    status, _, body = raw(server.url, "POST", "/tokenize", {"content": TEXT})
    assert status == 200 and body["tokens"] == model.tokenize(TEXT, add_special=False)
    status, _, back = raw(server.url, "POST", "/detokenize", {"tokens": body["tokens"]})
    assert status == 200 and back == {"content": TEXT}
    # add_special as llama-server's (SmolLM2 adds no BOS), and a mix of texts and ids
    mixed = raw(server.url, "POST", "/tokenize", {"content": ["Hello", 28, " world"], "add_special": True})[2]
    assert mixed["tokens"] == model.tokenize("Hello") + [28] + model.tokenize(" world", add_special=False)


def test_pieces_are_text_or_their_bytes(server, model):
    body = raw(server.url, "POST", "/tokenize", {"content": TEXT, "with_pieces": True})[2]
    ids = model.tokenize(TEXT, add_special=False)
    assert [p["id"] for p in body["tokens"]] == ids
    for entry in body["tokens"]:
        piece = model.tokenizer.token_to_bytes(entry["id"])
        if isinstance(entry["piece"], list):  # a byte of the moon: not UTF-8 on its own
            assert bytes(entry["piece"]) == piece
        else:
            assert entry["piece"].encode() == piece
    assert any(isinstance(e["piece"], list) for e in body["tokens"])


def test_apply_template_gives_the_chat_prompt(server, model):
    messages = [{"role": "user", "content": "Hi"}]
    status, _, body = raw(server.url, "POST", "/apply-template", {"messages": messages})
    assert status == 200 and body["prompt"] == model.apply_chat_template(messages)


@pytest.mark.parametrize("path, body, param", [
    ("/tokenize", {"content": 5.5}, "content"),
    ("/tokenize", {"content": "x", "with_pieces": "yes"}, "with_pieces"),
    ("/detokenize", {"tokens": [1, 10 ** 9]}, "tokens"),
    ("/detokenize", {"tokens": "1 2"}, "tokens"),
    ("/apply-template", {"messages": []}, "messages"),
])
def test_bad_fields_are_a_400_naming_them(server, path, body, param):
    status, _, answer = raw(server.url, "POST", path, body)
    assert status == 400 and answer["error"]["param"] == param, answer
