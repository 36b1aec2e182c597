"""llama-server's API on the real SmolLM2, in the request and response shapes its clients use: the
native POST /completion (and un-prefixed /completions), and the fields it adds to the OpenAI routes
(`grammar`, `json_schema`, a schema in `response_format` json_object, `timings`)."""
import json

import pytest

import localinfer
from localinfer.serve.app import BackgroundServer
from serve_helpers import raw

N_CTX = 256
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def model(smollm2_path):
    return localinfer.load(str(smollm2_path), n_ctx=N_CTX)


@pytest.fixture(scope="module")
def server(model):
    with BackgroundServer(model, "smollm2", port=0, n_slots=2, n_ctx=N_CTX) as s:
        yield s


def _post(server, body, path="/completion"):
    status, _, answer = raw(server.url, "POST", path, body)
    assert status == 200, answer
    return answer


def _events(server, body, path="/completion") -> list:
    status, headers, text = raw(server.url, "POST", path, {**body, "stream": True})
    assert status == 200 and headers["content-type"].startswith("text/event-stream"), text
    assert "[DONE]" not in text  # llama-server ends this route's stream without it
    return [json.loads(line[len("data: "):]) for line in text.split("\n\n") if line]


def _check_timings(answer):
    t = answer["timings"]
    assert t["prompt_n"] + t["cache_n"] == answer["tokens_evaluated"]
    assert t["predicted_n"] == answer["tokens_predicted"]
    for rate, n, ms in (("prompt_per_second", "prompt_n", "prompt_ms"),
                        ("predicted_per_second", "predicted_n", "predicted_ms")):
        if t[ms] > 0:
            assert t[rate] == pytest.approx(1e3 * t[n] / t[ms])


def test_a_whole_answer_is_llama_servers_object_with_the_greedy_text(server, model):
    answer = _post(server, {"prompt": PROMPT, "n_predict": 8, "temperature": 0})
    expected = model.generate(PROMPT, max_tokens=8, temperature=0)
    assert answer["content"] == expected.text
    assert answer["stop"] is True and answer["stop_type"] == "limit" and answer["stopping_word"] == ""
    assert answer["tokens_predicted"] == 8 and answer["tokens_evaluated"] == len(model.tokenize(PROMPT))
    assert answer["model"] == "smollm2" and answer["prompt"] == PROMPT and answer["truncated"] is False
    assert answer["generation_settings"]["n_predict"] == 8 and answer["generation_settings"]["temperature"] == 0
    assert answer["tokens"] == []  # without return_tokens
    _check_timings(answer)
    # the un-prefixed /completions is the same route, as on llama-server; /v1/completions is OpenAI's
    assert _post(server, {"prompt": PROMPT, "n_predict": 8, "temperature": 0}, "/completions")["content"] == expected.text
    assert _post(server, {"prompt": PROMPT, "max_tokens": 8, "temperature": 0}, "/v1/completions")["object"] == "text_completion"


def test_a_stream_is_the_same_text_then_the_final_object(server):
    body = {"prompt": PROMPT, "n_predict": 12, "temperature": 0, "return_tokens": True}
    whole = _post(server, body)
    events = _events(server, body)
    *parts, last = events
    assert all(e["stop"] is False and e["content"] for e in parts)
    assert "".join(e["content"] for e in parts) == whole["content"]
    assert [t for e in parts for t in e["tokens"]] == whole["tokens"]
    assert [e["tokens_predicted"] for e in parts] == sorted(e["tokens_predicted"] for e in parts)
    assert last["stop"] is True and last["content"] == "" and last["tokens_predicted"] == whole["tokens_predicted"]
    _check_timings(last)
    assert all("timings" not in e for e in parts)
    timed = _events(server, {**body, "timings_per_token": True})
    assert [e["timings"]["predicted_n"] for e in timed[:-1]] == [e["tokens_predicted"] for e in timed[:-1]]
    assert all(e["timings"]["prompt_n"] + e["timings"]["cache_n"] == e["tokens_evaluated"] for e in timed)
    progress = _events(server, {**body, "prompt": LONG, "return_progress": True})
    first = progress[0]["prompt_progress"]
    assert first["total"] == progress[0]["tokens_evaluated"] == first["processed"] and first["time_ms"] >= 0
    assert all("prompt_progress" not in e for e in progress[1:]) and progress[0]["content"] == ""


def test_stop_types_word_eos_and_ignore_eos(server, model):
    answer = _post(server, {"prompt": "Count: 1, 2, 3,", "n_predict": 20, "temperature": 0, "stop": ["\n", " 6"]})
    assert answer["stop_type"] == "word" and answer["stopping_word"] == " 6" and answer["content"] == " 4, 5,"
    chat = model.apply_chat_template([{"role": "user", "content": "Say hello."}])
    ended = _post(server, {"prompt": chat, "n_predict": 64, "temperature": 0})
    assert ended["stop_type"] == "eos" and ended["tokens_predicted"] < 64
    forced = _post(server, {"prompt": chat, "n_predict": ended["tokens_predicted"] + 3, "temperature": 0,
                            "ignore_eos": True})
    assert forced["stop_type"] == "limit" and forced["tokens_predicted"] == ended["tokens_predicted"] + 3
    assert forced["content"].startswith(ended["content"])


def test_n_probs_gives_completion_probabilities(server, model):
    answer = _post(server, {"prompt": PROMPT, "n_predict": 4, "temperature": 0, "n_probs": 3, "return_tokens": True})
    probs = answer["completion_probabilities"]
    assert [p["id"] for p in probs] == answer["tokens"]
    for p in probs:
        assert len(p["top_logprobs"]) == 3 and p["top_logprobs"][0]["id"] == p["id"]  # greedy: the likeliest
        assert p["logprob"] == pytest.approx(p["top_logprobs"][0]["logprob"]) and p["logprob"] <= 0
        assert bytes(p["bytes"]) == model.tokenizer.token_to_bytes(p["id"])
    streamed = _events(server, {"prompt": PROMPT, "n_predict": 4, "temperature": 0, "n_probs": 3})
    assert [p["id"] for e in streamed[:-1] for p in e["completion_probabilities"]] == answer["tokens"]


def test_prompts_as_ids_and_mixed(server, model):
    ids = model.tokenize(PROMPT)
    by_ids = _post(server, {"prompt": ids, "n_predict": 5, "temperature": 0})
    assert by_ids["content"] == _post(server, {"prompt": PROMPT, "n_predict": 5, "temperature": 0})["content"]
    mixed = _post(server, {"prompt": ["The capital", *model.tokenize(" of France is", add_special=False)],
                           "n_predict": 5, "temperature": 0})
    assert mixed["content"] == by_ids["content"]


def test_logit_bias_pairs_ban_a_token(server, model):
    first = _post(server, {"prompt": PROMPT, "n_predict": 1, "temperature": 0, "return_tokens": True})["tokens"][0]
    for bias in ([[first, False]], [[model.tokenizer.token_to_bytes(first).decode(), False]], {str(first): -100}):
        other = _post(server, {"prompt": PROMPT, "n_predict": 1, "temperature": 0, "return_tokens": True,
                               "logit_bias": bias})
        assert other["tokens"][0] != first, bias


def test_response_fields_pick_paths(server):
    answer = _post(server, {"prompt": PROMPT, "n_predict": 2, "response_fields": ["content", "timings/predicted_n",
                                                                                   "no/such"]})
    assert set(answer) == {"content", "timings/predicted_n"} and answer["timings/predicted_n"] == 2


def test_grammar_and_json_schema_constrain_the_answer(server):
    yes_no = _post(server, {"prompt": "Is Paris in France? Answer:", "n_predict": 8,
                            "grammar": 'root ::= " yes" | " no"'})
    assert yes_no["content"] in (" yes", " no") and yes_no["stop_type"] == "eos"
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
              "required": ["n"], "additionalProperties": False}
    answer = _post(server, {"prompt": "A JSON object:", "n_predict": 32, "json_schema": schema})
    assert set(json.loads(answer["content"])) == {"n"}


def test_a_long_prompt_is_llama_servers_exceed_context_size_error(server):
    status, _, answer = raw(server.url, "POST", "/completion", {"prompt": "x " * 400, "n_predict": 4})
    error = answer["error"]
    assert status == 400 and error["type"] == "exceed_context_size_error"
    assert error["n_ctx"] == N_CTX and error["n_prompt_tokens"] > N_CTX


@pytest.mark.parametrize("body, param", [
    ({"prompt": PROMPT, "n_predict": "8"}, "n_predict"),
    ({"prompt": PROMPT, "n_probs": 1000}, "n_probs"),
    ({"prompt": ["one", "two"]}, "prompt"),
    ({"prompt": [[1, 2], [3]]}, "prompt"),
    ({"prompt": PROMPT, "logit_bias": [[1, 2, 3]]}, "logit_bias"),
    ({"prompt": PROMPT, "ignore_eos": "yes"}, "ignore_eos"),
    ({"prompt": PROMPT, "mirostat": 2}, "mirostat"),
    ({"prompt": PROMPT, "grammar": "root ::= nothing-defined"}, "grammar"),
    ({"prompt": PROMPT, "grammar": 'root ::= "a"', "json_schema": {"type": "object"}}, "json_schema"),
    ({"prompt": PROMPT, "grammar_lazy": True, "grammar": 'root ::= "a"'}, "grammar_lazy"),
    ({"prompt": PROMPT, "response_fields": "content"}, "response_fields"),
])
def test_bad_fields_are_a_400_naming_them(server, body, param):
    status, _, answer = raw(server.url, "POST", "/completion", body)
    assert status == 400 and answer["error"]["param"] == param, answer


def test_continues_llama_cpp_provider_sequence(server, model):
    """What Continue's llama.cpp provider sends for a chat turn: the chat rendered as a prompt, streamed
    from /completion with its sampling fields, reading `content` from each event until `stop`."""
    messages = [{"role": "user", "content": "Write a haiku about the sea."}]
    prompt = raw(server.url, "POST", "/apply-template", {"messages": messages})[2]["prompt"]
    body = {"prompt": prompt, "stream": True, "n_predict": 24, "temperature": 0, "top_p": 1, "top_k": 40,
            "min_p": 0.05, "presence_penalty": 0, "frequency_penalty": 0, "stop": ["<|im_end|>"], "cache_prompt": True}
    events = _events(server, body)
    text = "".join(e["content"] for e in events if not e["stop"])
    assert events[-1]["stop"] is True and text
    assert text == model.generate(prompt, max_tokens=24, temperature=0, stop=["<|im_end|>"]).text
    # the next turn reuses the first one's cached prefix
    again = _events(server, body)
    assert again[-1]["timings"]["cache_n"] > 0


# -- llama-server's fields on the OpenAI routes ----------------------------------------------------

CHAT = [{"role": "user", "content": "Is the sky blue?"}]
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
          "additionalProperties": False}


@pytest.mark.parametrize("field", [
    {"json_schema": SCHEMA},
    {"response_format": {"type": "json_object", "schema": SCHEMA}},
    {"grammar": 'root ::= "{\\"ok\\": " ("true" | "false") "}"'},
])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_constraint_fields_hold_on_the_openai_routes(server, path, field):
    body = {"messages": CHAT} if "chat" in path else {"prompt": "Is the sky blue? JSON:"}
    answer = _post(server, {**body, "max_tokens": 24, "temperature": 1.0, "seed": 7, **field}, path)
    choice = answer["choices"][0]
    text = choice["message"]["content"] if "chat" in path else choice["text"]
    assert set(json.loads(text)) == {"ok"}, text


@pytest.mark.parametrize("body, param", [
    ({"grammar": "root ::= undefined-rule"}, "grammar"),
    ({"grammar": 12}, "grammar"),
    ({"json_schema": "object"}, "json_schema"),
    ({"json_schema": SCHEMA, "response_format": {"type": "json_object"}}, "response_format"),
    ({"response_format": {"type": "json_object", "schema": []}}, "response_format.schema"),
    ({"grammar_triggers": [{"type": "word", "value": "{"}]}, "grammar_triggers"),
    ({"grammar": 'root ::= "x"', "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
     "grammar"),
])
def test_a_constraint_that_cannot_be_kept_is_a_400(server, body, param):
    status, _, answer = raw(server.url, "POST", "/v1/chat/completions", {"messages": CHAT, "max_tokens": 4, **body})
    assert status == 400 and answer["error"]["param"] == param, answer


def test_openai_answers_carry_llama_servers_timings(server):
    whole = _post(server, {"messages": CHAT, "max_tokens": 6, "temperature": 0}, "/v1/chat/completions")
    assert whole["timings"]["predicted_n"] == whole["usage"]["completion_tokens"]
    assert whole["timings"]["prompt_n"] + whole["timings"]["cache_n"] == whole["usage"]["prompt_tokens"]
    status, _, text = raw(server.url, "POST", "/v1/completions",
                          {"prompt": PROMPT, "max_tokens": 6, "temperature": 0, "stream": True})
    chunks = [json.loads(line[6:]) for line in text.split("\n\n") if line and line != "data: [DONE]"]
    timed = [c for c in chunks if "timings" in c]
    assert len(timed) == 1 and timed[0]["choices"][0]["finish_reason"] == "length"
    assert timed[0]["timings"]["predicted_n"] == 6
    status, _, long = raw(server.url, "POST", "/v1/completions", {"prompt": "x " * 400})
    assert status == 400 and long["error"]["code"] == "context_length_exceeded"
    assert long["error"]["n_ctx"] == N_CTX and long["error"]["n_prompt_tokens"] > N_CTX


# -- llama-server's /props, /slots and metrics -------------------------------------------------------


def test_props_are_llama_servers_without_the_model_path(server, model, smollm2_path):
    status, _, props = raw(server.url, "GET", "/props")
    assert status == 200 and props["total_slots"] == 2 and props["model_alias"] == "smollm2"
    assert props["default_generation_settings"]["n_ctx"] == N_CTX
    assert props["default_generation_settings"]["params"]["temperature"] == 0.8
    assert props["chat_template"] == model.chat_template.source and props["eos_token"] == "<|im_end|>"
    assert props["modalities"] == {"vision": False, "audio": False}
    assert str(smollm2_path) not in json.dumps(props) and "model_path" not in props


def test_slots_show_what_each_slot_holds(server):
    status, _, slots = raw(server.url, "GET", "/slots")
    assert status == 200 and [s["id"] for s in slots] == [0, 1]
    assert all(s["n_ctx"] == N_CTX and s["is_processing"] is False and s["id_task"] == -1 for s in slots)


def test_llamacpp_metrics_beside_localinfers(server):
    from serve_helpers import metric
    before = raw(server.url, "GET", "/metrics")[2]
    answer = _post(server, {"prompt": "One two three four five", "n_predict": 5, "temperature": 0,
                            "cache_prompt": False})
    after = raw(server.url, "GET", "/metrics")[2]

    def grew(name):
        return metric(after, name, model="smollm2") - metric(before, name, model="smollm2")

    assert grew("llamacpp:tokens_predicted_total") == 5 == grew("localinfer_generated_tokens_total")
    assert grew("llamacpp:prompt_tokens_total") == answer["timings"]["prompt_n"]
    assert grew("llamacpp:prompt_seconds_total") == pytest.approx(answer["timings"]["prompt_ms"] / 1e3)
    assert grew("llamacpp:tokens_predicted_seconds_total") == pytest.approx(answer["timings"]["predicted_ms"] / 1e3)
    assert grew("llamacpp:n_decode_total") >= 5
    assert metric(after, "llamacpp:requests_processing", model="smollm2") == 0
    assert metric(after, "llamacpp:predicted_tokens_seconds", model="smollm2") > 0
    assert "# TYPE llamacpp:prompt_tokens_seconds gauge" in after


# -- /infill -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fim_server(tmp_path_factory):
    """A random-weight llama whose byte-level vocabulary has StarCoder's FIM tokens."""
    import synthetic_gguf
    from localinfer.tokenizer.bpe import BYTE_TO_UNICODE
    fim = ["<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<|endoftext|>"]
    tokens = list(BYTE_TO_UNICODE) + fim + [f"t{i}" for i in range(synthetic_gguf.N_VOCAB - 256 - len(fim))]
    path = tmp_path_factory.mktemp("fim") / "fim.gguf"
    synthetic_gguf.write(path, tokens=tokens, merges=("t 1",))   # "t1" is a token: one merge, never used here
    # a context beyond llama-server's 2048-token batch, the room its infill gives other files (and past the
    # synthetic file's trained length, which load warns about)
    with pytest.warns(UserWarning, match="trained on"):
        m = localinfer.load(str(path), n_ctx=4096)
    with m, BackgroundServer(m, "fim", port=0, n_slots=1, n_ctx=4096) as s:
        yield s


def test_infill_is_llama_servers_fim_prompt(fim_server):
    body = {"input_prefix": "def add(a, b):\n    ", "input_suffix": "\n\nprint(add(1, 2))\n", "prompt": "ret",
            "n_predict": 4, "temperature": 0}
    answer = _post(fim_server, body, "/infill")
    assert answer["prompt"] == ("<fim_prefix>def add(a, b):\n    ret<fim_suffix>\n\nprint(add(1, 2))\n"
                                "<fim_middle>")
    assert answer["tokens_predicted"] == 4 and answer["stop"] is True
    # other files as context: before the prefix, behind llama-server's snippet separator (no file tokens here)
    extra = _post(fim_server, {**body, "input_extra": [{"filename": "util.py", "text": "X = 1"}]}, "/infill")
    assert extra["prompt"].startswith("\n\n--- snippet ---\n\nX = 1<fim_prefix>def add")
    streamed = _events(fim_server, body, "/infill")
    assert "".join(e["content"] for e in streamed[:-1]) == answer["content"]


def test_infill_needs_fim_tokens_and_its_fields(server, fim_server):
    status, _, answer = raw(server.url, "POST", "/infill", {"input_prefix": "a", "input_suffix": "b"})
    assert status == 501 and "infill is not supported by this model" in answer["error"]["message"]
    for body, param in (({"input_suffix": "b"}, "input_prefix"), ({"input_prefix": "a", "input_suffix": 3}, "input_suffix"),
                        ({"input_prefix": "a", "input_suffix": "b", "input_extra": [{"text": 1}]}, "input_extra")):
        status, _, answer = raw(fim_server.url, "POST", "/infill", body)
        assert status == 400 and answer["error"]["param"] == param, answer


# -- slot files ---------------------------------------------------------------------------------------

LONG = "The history of the city begins with a small settlement on the river, " * 4


def test_a_saved_slot_restored_in_a_new_server_is_reused(model, tmp_path):
    body = {"prompt": LONG, "n_predict": 4, "temperature": 0}
    with BackgroundServer(model, "smollm2", port=0, n_slots=1, n_ctx=N_CTX, slot_save_path=str(tmp_path)) as s:
        first = _post(s, body)
        saved = raw(s.url, "POST", "/slots/0?action=save", {"filename": "chat.slot"})[2]
        assert saved["id_slot"] == 0 and saved["filename"] == "chat.slot" and saved["n_written"] > 0
        assert first["tokens_evaluated"] <= saved["n_saved"] <= first["tokens_evaluated"] + 4
        assert "save_ms" in saved["timings"]
        erased = raw(s.url, "POST", "/slots/0?action=erase")[2]
        assert erased == {"id_slot": 0, "n_erased": saved["n_saved"]}
    with BackgroundServer(model, "smollm2", port=0, n_slots=1, n_ctx=N_CTX, slot_save_path=str(tmp_path)) as s:
        restored = raw(s.url, "POST", "/slots/0?action=restore", {"filename": "chat.slot"})[2]
        assert restored["n_restored"] == saved["n_saved"] and restored["n_read"] == saved["n_written"]
        again = _post(s, body)
        assert again["timings"]["cache_n"] >= 32 and again["content"] == first["content"]


def test_slot_actions_refuse_what_they_cannot_do(model, server, tmp_path):
    status, _, answer = raw(server.url, "POST", "/slots/0?action=save", {"filename": "x.slot"})
    assert status == 501 and "--slot-save-path" in answer["error"]["message"]   # a server without the folder
    (tmp_path / "junk.slot").write_bytes(b"not a state file")
    with BackgroundServer(model, "smollm2", port=0, n_slots=1, n_ctx=N_CTX, slot_save_path=str(tmp_path)) as s:
        for path, body, status_, param in (
                ("/slots/0?action=save", {"filename": "../escape"}, 400, "filename"),
                ("/slots/0?action=save", {"filename": ".hidden"}, 400, "filename"),
                ("/slots/0?action=explode", {"filename": "a"}, 400, "action"),
                ("/slots/7?action=save", {"filename": "a"}, 400, "id_slot"),
                ("/slots/0?action=restore", {"filename": "missing.slot"}, 404, "filename"),
                ("/slots/0?action=restore", {"filename": "junk.slot"}, 400, "filename")):
            got, _, answer = raw(s.url, "POST", path, body)
            assert got == status_ and answer["error"]["param"] == param, (path, body, answer)
        assert not (tmp_path.parent / "escape").exists()


def test_input_tokens_counts_a_chat_as_the_model_reads_it(server, model):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello " * 300}]
    for path in ("/chat/completions/input_tokens", "/v1/chat/completions/input_tokens"):
        status, _, answer = raw(server.url, "POST", path, {"messages": messages})
        assert status == 200 and answer == {"input_tokens": len(model.chat_tokens(messages)),
                                            "object": "response.input_tokens"}   # longer than the context: counted
    status, _, answer = raw(server.url, "POST", "/chat/completions/input_tokens", {"messages": []})
    assert status == 400 and answer["error"]["param"] == "messages"
