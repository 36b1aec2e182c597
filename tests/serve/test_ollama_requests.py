"""Ollama requests -> engine Jobs, and the Ollama shapes of answers and model files (no server)."""
from __future__ import annotations

from datetime import datetime
from types import SimpleNamespace

import pytest

from localinfer.batching.request import Request
from localinfer.serve import ollama_requests as oreq
from localinfer.serve import ollama_shapes as shapes
from localinfer.serve.registry import ModelEntry

HELLO = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.mark.parametrize("value, seconds", [
    (None, None), (0, 0.0), ("0", 0.0), (30, 30.0), (2.5, 2.5), ("5m", 300.0), ("1h30m", 5400.0),
    ("300ms", 0.3), ("1.5h", 5400.0), ("2m30s", 150.0), (-1, -1.0), (-7, -1.0), ("-1m", -1.0), ("-1", -1.0), ("45", 45.0)])
def test_keep_alive_reads_numbers_and_go_durations(value, seconds):
    got = oreq.parse_keep_alive(value)
    assert got == (pytest.approx(seconds) if seconds is not None else None)


@pytest.mark.parametrize("value", ["5x", "abc", "-", "1.2.3", "5 m", "m5", "", "1d", True, [], {"s": 1}, "9" * 100, float("nan")])
def test_keep_alive_refuses_what_is_not_a_duration(value):
    with pytest.raises(oreq.OllamaError) as e:
        oreq.parse_keep_alive(value)
    assert e.value.status == 400 and "keep_alive" in e.value.message


def test_model_name_is_required_and_latest_is_the_name_itself():
    assert oreq.model_name({"model": "smollm2:latest"}) == "smollm2"
    assert oreq.model_name({"model": "smollm2:q4"}) == "smollm2:q4"
    for body in ({}, {"model": ""}, {"model": 3}):
        with pytest.raises(oreq.OllamaError, match="'model' is required"):
            oreq.model_name(body)


@pytest.mark.parametrize("body, field", [
    ({"messages": [{"role": "user", "content": "hi", "images": ["aGk="]}]}, "messages[0].images"),
    ({"messages": HELLO, "think": True}, "'think'"),
    ({"messages": HELLO, "top_logprobs": 2}, "'top_logprobs' needs 'logprobs': true"),
    ({"messages": HELLO, "logprobs": True, "top_logprobs": 21}, "'top_logprobs'"),
    ({"messages": HELLO, "logprobs": "yes"}, "'logprobs'"),
    ({"messages": HELLO, "logprobs": True, "tools": [{"type": "function", "function": {"name": "f"}}]}, "'tools'"),
    ({"messages": HELLO, "options": {"mirostat": 2}}, "options.mirostat"),
    ({"messages": HELLO, "options": {"typical_p": 0.5}}, "options.typical_p"),
    ({"messages": HELLO, "options": {"warp_drive": 1}}, "options.warp_drive"),
    ({"messages": HELLO, "options": [1]}, "'options'"),
    ({"messages": HELLO, "options": {"num_predict": -3}}, "options.num_predict"),
    ({"messages": HELLO, "options": {"num_ctx": 0}}, "options.num_ctx"),
    ({"messages": HELLO, "format": "xml"}, "'format'"),
    ({"messages": HELLO, "stream": "yes"}, "'stream'"),
    ({"messages": "hi"}, "'messages'"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "tool", "content": "42", "tool_name": "add"}]}, "messages[0]"),
])
def test_chat_requests_with_what_this_server_cannot_do_are_400s_naming_the_field(body, field):
    with pytest.raises(oreq.OllamaError) as e:
        oreq.parse_chat({"model": "m", **body})
    assert e.value.status == 400 and field in e.value.message, e.value.message


@pytest.mark.parametrize("body, field", [
    ({"prompt": "hi", "template": "{{ .Prompt }}"}, "'template'"),
    ({"prompt": "hi", "suffix": "end"}, "'suffix'"),
    ({"prompt": "hi", "context": [1, 2, 3]}, "'context'"),
    ({"prompt": "hi", "images": ["aGk="]}, "'images'"),
    ({"prompt": "hi", "raw": True, "system": "be brief"}, "'system'"),
    ({"prompt": 5}, "'prompt'"),
    ({"prompt": "hi", "raw": "yes"}, "'raw'"),
])
def test_generate_requests_with_what_this_server_cannot_do_are_400s_naming_the_field(body, field):
    with pytest.raises(oreq.OllamaError) as e:
        oreq.parse_generate({"model": "m", **body})
    assert e.value.status == 400 and field in e.value.message, e.value.message


def test_empty_requests_only_load_and_streaming_is_the_default():
    for req in (oreq.parse_chat({"model": "m"}), oreq.parse_chat({"model": "m", "messages": []}),
                oreq.parse_generate({"model": "m", "keep_alive": 0}), oreq.parse_generate({"model": "m", "prompt": ""})):
        assert req.load_only and req.stream
    assert oreq.parse_generate({"model": "m", "keep_alive": 0}).keep_alive == 0
    assert not oreq.parse_chat({"model": "m", "messages": HELLO, "stream": False}).stream
    # placement options choose where the model runs, not what it answers: accepted
    assert not oreq.parse_chat({"model": "m", "messages": HELLO, "options": {"num_gpu": 99, "num_thread": 2}}).load_only


def test_options_reach_the_engine_request(smollm2_model):
    body = {"model": "m", "messages": HELLO, "options": {"temperature": 0.3, "top_k": 7, "top_p": 0.5, "min_p": 0.1,
            "seed": 42, "stop": ["\n", "."], "repeat_penalty": 1.2, "repeat_last_n": -1, "presence_penalty": 0.5,
            "frequency_penalty": 0.25, "num_predict": 9}}
    job = oreq.build_job(oreq.parse_chat(body), smollm2_model, "m", 512)
    r = job.request
    assert r.prompt == smollm2_model.chat_tokens(HELLO)
    assert r.max_tokens == 9 and list(r.stop) == ["\n", "."]
    p = r.params
    assert (p.temperature, p.top_k, p.top_p, p.min_p, p.seed) == (0.3, 7, 0.5, 0.1, 42)
    assert (p.repeat_penalty, p.repeat_last_n, p.presence_penalty, p.frequency_penalty) == (1.2, 512, 0.5, 0.25)
    assert oreq.build_job(oreq.parse_chat({"model": "m", "messages": HELLO, "options": {"seed": -1}}),
                          smollm2_model, "m", 512).request.params.seed is None  # Ollama's "random"


def test_logprobs_reach_the_engine_request(smollm2_model):
    for req, n_top in ((oreq.parse_chat({"model": "m", "messages": HELLO, "logprobs": True, "top_logprobs": 3}), 3),
                       (oreq.parse_generate({"model": "m", "prompt": "Hi", "raw": True, "logprobs": True}), 0),
                       (oreq.parse_chat({"model": "m", "messages": HELLO}), None)):
        assert req.n_top == n_top and oreq.build_job(req, smollm2_model, "m", 512).request.logprobs == n_top


def test_no_num_predict_is_no_limit_and_num_ctx_bounds_the_answer(smollm2_model):
    for req in (oreq.parse_chat({"model": "m", "messages": HELLO}), oreq.parse_generate({"model": "m", "prompt": "Hi",
                                                                                          "raw": True})):
        assert oreq.build_job(req, smollm2_model, "m", 512).request.max_tokens is None
    job = oreq.build_job(oreq.parse_chat({"model": "m", "messages": HELLO, "options": {"num_ctx": 64}}),
                         smollm2_model, "m", 512)
    assert job.request.max_tokens == 64 - len(job.request.prompt)
    with pytest.raises(oreq.OllamaError, match="options.num_ctx.*1024.*512"):
        oreq.build_job(oreq.parse_chat({"model": "m", "messages": HELLO, "options": {"num_ctx": 1024}}),
                       smollm2_model, "m", 512)
    with pytest.raises(oreq.OllamaError, match="prompt is .* tokens long"):  # the prompt must fit num_ctx
        oreq.build_job(oreq.parse_chat({"model": "m", "messages": HELLO, "options": {"num_ctx": 8}}),
                       smollm2_model, "m", 512)


def test_openai_route_errors_come_back_in_ollama_words(smollm2_model):
    for options, field in (({"temperature": 7}, "'options.temperature'"), ({"top_k": "many"}, "'options.top_k'"),
                           ({"num_predict": 10_000}, "'options.num_predict'"), ({"stop": [1]}, "'options.stop'")):
        with pytest.raises(oreq.OllamaError) as e:
            oreq.build_job(oreq.parse_chat({"model": "m", "messages": HELLO, "options": options}), smollm2_model,
                           "m", 512)
        assert e.value.status == 400 and field in e.value.message, e.value.message
    with pytest.raises(oreq.OllamaError, match="^format: the schema cannot be used") as e:
        oreq.build_job(oreq.parse_chat({"model": "m", "messages": HELLO, "format": {"type": "no-such-type"}}),
                       smollm2_model, "m", 512)
    assert "response_format" not in e.value.message


def test_format_json_and_schema_become_grammars(smollm2_model):
    for fmt in ("json", {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}):
        job = oreq.build_job(oreq.parse_chat({"model": "m", "messages": HELLO, "format": fmt}), smollm2_model, "m", 512)
        assert job.request.grammar is not None
    assert oreq.build_job(oreq.parse_chat({"model": "m", "messages": HELLO, "format": ""}), smollm2_model, "m",
                          512).request.grammar is None


def test_generate_uses_the_chat_template_unless_raw(smollm2_model):
    m = smollm2_model
    templated = oreq.build_job(oreq.parse_generate({"model": "m", "prompt": "Hi", "system": "Be brief."}), m, "m", 512)
    assert templated.request.prompt == m.chat_tokens([{"role": "system", "content": "Be brief."},
                                                      {"role": "user", "content": "Hi"}])
    raw = oreq.build_job(oreq.parse_generate({"model": "m", "prompt": "The capital of France is", "raw": True}),
                         m, "m", 512)
    assert raw.request.prompt == m.tokenize("The capital of France is")


def test_tool_history_links_results_to_the_calls_they_answer():
    calls = [{"function": {"name": "add", "arguments": {"a": 1, "b": 2}}},
             {"function": {"name": "mul", "arguments": {"a": 3, "b": 4}}}]
    req = oreq.parse_chat({"model": "m", "messages": [
        {"role": "user", "content": "1+2 and 3*4?"}, {"role": "assistant", "content": "", "tool_calls": calls},
        {"role": "tool", "content": "12", "tool_name": "mul"}, {"role": "tool", "content": "3"}]})
    m = req.openai["messages"]
    assert [c["function"]["arguments"] for c in m[1]["tool_calls"]] == ['{"a": 1, "b": 2}', '{"a": 3, "b": 4}']
    assert m[2]["tool_call_id"] == m[1]["tool_calls"][1]["id"] and m[2]["name"] == "mul"
    assert m[3]["tool_call_id"] == m[1]["tool_calls"][0]["id"] and "name" not in m[3]


# -- shapes -------------------------------------------------------------------------------------
def _finished_request(n_prompt: int) -> Request:
    r = Request(list(range(n_prompt)))
    r.timings.prefill_s, r.timings.decode_s = 0.25, 0.5
    return r


def test_answers_carry_ollama_fields_and_nanosecond_timings():
    import time
    s = shapes.AnswerShaper("chat", "m", time.perf_counter() - 2.0, 0.125)
    whole = s.whole("Paris.", "context_full", _finished_request(10), 3)
    assert whole["message"] == {"role": "assistant", "content": "Paris."} and whole["model"] == "m"
    assert whole["done"] is True and whole["done_reason"] == "length"
    assert whole["total_duration"] >= 2_000_000_000 and whole["load_duration"] == 125_000_000
    assert (whole["prompt_eval_count"], whole["prompt_eval_duration"]) == (10, 250_000_000)
    assert (whole["eval_count"], whole["eval_duration"]) == (3, 500_000_000)
    assert "context" not in whole
    assert datetime.fromisoformat(whole["created_at"].replace("Z", "+00:00")).tzinfo is not None
    g = shapes.AnswerShaper("generate", "m", time.perf_counter(), 0.0)
    [piece] = g.pieces("Par")
    assert piece["response"] == "Par" and piece["done"] is False and piece["model"] == "m"
    assert g.pieces("") == []
    assert g.last("stop", _finished_request(4), 1)["response"] == ""
    assert shapes.load_answer("generate", "m", unloaded=True)["done_reason"] == "unload"
    assert shapes.load_answer("chat", "m", unloaded=False)["done_reason"] == "load"


@pytest.mark.parametrize("n, text", [(134_515_008, "135M"), (268_098_176, "268M"), (1_235_814_400, "1.2B"),
                                     (8_030_261_248, "8.0B"), (70_553_706_496, "71B"), (999, "999")])
def test_parameter_sizes_read_as_ollama_writes_them(n, text):
    assert shapes.human_count(n) == text


def test_file_facts_come_from_the_gguf_metadata(smollm2_path, gemma3_path, smollm2_metadata):
    s = shapes.file_facts(str(smollm2_path))
    assert s["details"] == {"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
                            "parameter_size": s["details"]["parameter_size"], "quantization_level": "Q4_1"}
    assert s["details"]["parameter_size"].endswith("M")
    assert s["model_info"]["general.architecture"] == "llama" and s["model_info"]["tokenizer.ggml.tokens"] is None
    assert s["template"] == smollm2_metadata["tokenizer.chat_template"]
    assert shapes.file_facts(str(gemma3_path))["details"]["quantization_level"] == "Q4_K_M"
    entry = ModelEntry("smollm2", str(smollm2_path), 1234, True, expires_at=None)
    shown = shapes.show(entry, 512)
    assert "num_ctx         512" in shown["parameters"] and shown["template"] in shown["modelfile"]
    assert shapes.ps_entry(entry, 512)["context_length"] == 512 and "expires_at" not in shapes.ps_entry(entry, 512)
    assert shapes.tags_entry(SimpleNamespace(name="x", path=None, size_bytes=0)) == {"name": "x", "model": "x",
                                                                                      "size": 0}


def test_embed_requests():
    r = oreq.parse_embed({"model": "m:latest", "input": ["a", "b"], "truncate": False, "keep_alive": "1m",
                          "options": {"num_ctx": 128, "num_thread": 2}})
    assert (r.model, r.keep_alive, r.openai, r.num_ctx, r.legacy) == ("m", 60.0, {"input": ["a", "b"]}, 128, False)
    assert oreq.parse_embed({"model": "m", "input": []}).openai is None
    assert oreq.parse_embed({"model": "m", "prompt": "a"}, legacy=True).openai == {"input": "a"}
    assert oreq.parse_embed({"model": "m"}, legacy=True).openai is None  # Ollama answers an empty vector
    for body, words in (({"input": [1, 2]}, "'input'"), ({"input": "a", "truncate": "no"}, "'truncate'"),
                        ({"input": "a", "options": {"mirostat": 1}}, "options.mirostat")):
        with pytest.raises(oreq.OllamaError, match=words):
            oreq.parse_embed({"model": "m", **body})
    assert oreq.check_num_ctx(None, 512) == 512 and oreq.check_num_ctx(100, 512) == 100
    with pytest.raises(oreq.OllamaError, match="options.num_ctx"):
        oreq.check_num_ctx(1024, 512)
