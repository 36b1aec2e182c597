"""localinfer.compat.llama_cpp.Llama on the real SmolLM2: greedy texts compared to localinfer's own
answers, and what only the shim does or refuses (test_llama_cpp_corpus.py runs the usage corpus
against it and against llama-cpp-python)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from localinfer.compat.llama_cpp import Llama, LlamaGrammar
from localinfer.context import common_prefix


@pytest.fixture(scope="module")
def llm(smollm2_path):
    m = Llama(model_path=str(smollm2_path), n_ctx=512, n_threads=2, n_gpu_layers=-1, verbose=False)
    yield m
    m.close()


def test_a_completion_as_the_readme_calls_it(llm, smollm2_model):
    out = llm("Q: Name the planets in the solar system? A: ", max_tokens=32, stop=["Q:", "\n"], echo=False,
              temperature=0)
    assert out["object"] == "text_completion" and out["id"].startswith("cmpl-") and isinstance(out["created"], int)
    choice = out["choices"][0]
    want = smollm2_model.generate("Q: Name the planets in the solar system? A: ", max_tokens=32, stop=["Q:", "\n"],
                                  temperature=0)
    assert choice["text"] == want.text and choice["index"] == 0 and choice["logprobs"] is None
    assert choice["finish_reason"] in ("stop", "length")
    assert out["usage"]["completion_tokens"] == len(want.tokens)
    assert out["usage"]["total_tokens"] == out["usage"]["prompt_tokens"] + out["usage"]["completion_tokens"]


def test_streamed_completion_chunks_join_to_the_whole(llm):
    whole = llm.create_completion("The capital of France is", max_tokens=12, temperature=0)["choices"][0]["text"]
    chunks = list(llm.create_completion("The capital of France is", max_tokens=12, temperature=0, stream=True))
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert all(c["object"] == "text_completion" for c in chunks)


def test_chat_completion_whole_streamed_and_as_json(llm, smollm2_model):
    messages = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Name a color."}]
    out = llm.create_chat_completion(messages=messages, temperature=0, max_tokens=16)
    assert out["object"] == "chat.completion"
    message = out["choices"][0]["message"]
    assert message["role"] == "assistant"
    assert message["content"] == smollm2_model.chat(messages, temperature=0, max_tokens=16).text
    parts = list(llm.create_chat_completion(messages=messages, temperature=0, max_tokens=16, stream=True))
    assert parts[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert "".join(p["choices"][0]["delta"].get("content", "") for p in parts) == message["content"]
    schema = {"type": "object", "properties": {"color": {"type": "string", "maxLength": 12}}, "required": ["color"]}
    js = llm.create_chat_completion(messages=messages, response_format={"type": "json_object", "schema": schema},
                                    temperature=0, max_tokens=40)
    assert set(json.loads(js["choices"][0]["message"]["content"])) == {"color"}


def test_grammar_tokens_and_vocabulary(llm, smollm2_model):
    g = LlamaGrammar.from_string('root ::= "yes" | "no"')
    out = llm("Is the sky blue? Answer:", grammar=g, max_tokens=8, temperature=0)
    assert out["choices"][0]["text"] in ("yes", "no")
    ids = llm.tokenize(b"Hello world")
    assert ids == smollm2_model.tokenize("Hello world") and llm.detokenize(ids) == b"Hello world"
    assert llm.n_ctx() == 512 and llm.n_vocab() == smollm2_model.n_vocab
    assert llm.token_eos() == smollm2_model.tokenizer.eos_id
    with pytest.raises(TypeError):
        llm.tokenize("not bytes")


def test_embeddings(llm):
    out = llm.create_embedding(["a text", "another"])
    assert out["object"] == "list" and [d["index"] for d in out["data"]] == [0, 1]
    assert out["data"][0]["embedding"] == llm.embed("a text")   # per token: the model names no pooling
    tokens = len(llm.tokenize(b"a text"))
    unit = np.asarray(llm.embed("a text", normalize=True))
    assert unit.shape == (tokens, 576) and np.allclose(np.linalg.norm(unit, axis=1), 1, atol=1e-6)


def test_pooled_embeddings_by_pooling_type(smollm2_path):
    m = Llama(model_path=str(smollm2_path), n_ctx=128, embedding=True, pooling_type=1, verbose=False)
    try:
        v = m.embed("a text")
        assert len(v) == 576 and isinstance(v[0], float)
    finally:
        m.close()


def test_what_llama_cpp_python_scripts_catch(llm, smollm2_path):
    with pytest.raises(ValueError, match="exceed context window"):
        llm("word " * 600, max_tokens=4)
    with pytest.raises(TypeError, match="unexpected keyword argument 'n_cxt'"):
        Llama(model_path=str(smollm2_path), n_cxt=512)
    with pytest.raises(ValueError, match="mirostat_mode"):
        llm("Hi", max_tokens=2, mirostat_mode=2)
    # what LangChain's LlamaCpp passes with its defaults: accepted
    llm("Hi", suffix=None, max_tokens=2, temperature=0.8, top_p=0.95, logprobs=None, echo=False, stop=[],
        repeat_penalty=1.1, top_k=40)


def test_refused_settings_name_themselves(smollm2_path):
    from localinfer.compat.llama_cpp import LlamaDraftModel
    path = str(smollm2_path)
    with pytest.raises(ValueError, match="'vicuna-v9'"):
        Llama(model_path=path, chat_format="vicuna-v9")
    with pytest.raises(ValueError, match="rope_freq_base"):
        Llama(model_path=path, rope_freq_base=1234.0)
    with pytest.raises(ValueError, match="type_k"):
        Llama(model_path=path, type_k=0)

    class Mine(LlamaDraftModel):
        def __call__(self, input_ids, **kwargs):
            return input_ids[:0]
    with pytest.raises(ValueError, match="Mine"):
        Llama(model_path=path, draft_model=Mine())
    with pytest.raises(ValueError, match="does not exist"):
        Llama(model_path=path + ".missing")
    Llama(model_path=path, n_ctx=64, rope_freq_base=100000.0, rope_freq_scale=1.0).close()  # the file's own values


def test_fill_in_the_middle_uses_the_fim_tokens(llm, smollm2_model, monkeypatch):
    with pytest.raises(ValueError, match="fim_pre, fim_suf, fim_mid"):  # SmolLM2's GGUF names no FIM tokens
        llm("x", suffix="y", max_tokens=2)
    vocab = llm._model.tokenizer.vocab  # a file that names three: control tokens of SmolLM2's as stand-ins
    for name, text in (("fim_pre", "<filename>"), ("fim_suf", "<gh_stars>"), ("fim_mid", "<issue_start>")):
        monkeypatch.setitem(vocab.special, name, vocab.token_to_id[text])
    out = llm("def add(a, b):\n    ", suffix="\n    return c\n", max_tokens=8, temperature=0)
    plain = dict(add_special=False, parse_special=False)
    want = ([vocab.special["fim_pre"], *smollm2_model.tokenize("def add(a, b):\n    ", **plain),
             vocab.special["fim_suf"], *smollm2_model.tokenize("\n    return c\n", **plain), vocab.special["fim_mid"]])
    assert out["usage"]["prompt_tokens"] == len(want)
    assert out["choices"][0]["text"] == smollm2_model.generate(want, max_tokens=8, temperature=0).text


def test_echo_logprobs_pair_each_prompt_token_with_what_predicted_it(llm, smollm2_model):
    from localinfer.sampling.logprobs import score_prompt
    out = llm("Hello, my name is", max_tokens=3, temperature=0, echo=True, logprobs=1)
    lp = out["choices"][0]["logprobs"]
    ids = smollm2_model.tokenize("Hello, my name is")
    scored = score_prompt(smollm2_model, ids)
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    # the same log-softmax of rows computed alike (score_prompt's, bit for bit): no tolerance needed
    assert lp["token_logprobs"][1:len(ids)] == [e.logprob for e in scored[1:]]
    assert "".join(lp["tokens"]) == out["choices"][0]["text"]


def test_auto_tool_calls_are_parsed(llm):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    messages = [{"role": "user", "content": "What is the weather in Paris? Use the tool."}]
    out = llm.create_chat_completion(messages=messages, tools=tools, tool_choice="required", temperature=0,
                                     max_tokens=40)
    choice = out["choices"][0]
    (call,) = choice["message"]["tool_calls"]
    assert choice["finish_reason"] == "tool_calls" and call["function"]["name"] == "get_weather"
    assert set(json.loads(call["function"]["arguments"])) == {"city"}
    parts = list(llm.create_chat_completion(messages=messages, tools=tools, tool_choice="required", temperature=0,
                                            max_tokens=40, stream=True))
    deltas = [p["choices"][0]["delta"] for p in parts]
    assert "".join(d["tool_calls"][0]["function"]["arguments"] for d in deltas if "tool_calls" in d) \
        == call["function"]["arguments"]
    assert parts[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_states_fit_only_their_context(llm, smollm2_path):
    from localinfer import StateMismatchError
    llm("The quick brown fox", max_tokens=4, temperature=0)
    state = llm.save_state()
    other = Llama(model_path=str(smollm2_path), n_ctx=256)
    try:
        with pytest.raises(StateMismatchError, match="n_ctx"):
            other.load_state(state)
        assert other.n_tokens == 0
    finally:
        other.close()


def test_a_call_reuses_the_shared_prompt_and_answers_as_a_fresh_context(llm, smollm2_path, monkeypatch):
    story = "Once upon a time, in a village by the sea, there lived an old fisherman and his daughter. "
    prompts = [llm.tokenize((story + end).encode()) for end in ("One morning", "Every evening")]
    cached, evaluate = [], llm._ctx.evaluate

    def spy(tokens, *args, **kwargs):  # how much of each prompt the context kept
        out = evaluate(tokens, *args, **kwargs)
        cached.append(len(tokens) - llm._ctx.last_n_computed)
        return out
    monkeypatch.setattr(llm._ctx, "evaluate", spy)
    assert llm(story + "One morning", max_tokens=4, temperature=0)["choices"][0]["text"]
    second = llm(story + "Every evening", max_tokens=6, temperature=0, logprobs=2)
    assert cached[-1] == common_prefix(*prompts) > len(prompts[1]) - 16  # not 16 tokens computed again
    fresh = Llama(model_path=str(smollm2_path), n_ctx=512, n_threads=2, verbose=False)
    try:
        want = fresh(story + "Every evening", max_tokens=6, temperature=0, logprobs=2)
    finally:
        fresh.close()
    assert second["choices"][0]["text"] == want["choices"][0]["text"]
    assert second["choices"][0]["logprobs"] == want["choices"][0]["logprobs"]  # the very same logits


def test_a_new_call_ends_a_stream_left_open(llm):
    whole = llm("Once upon a time", max_tokens=6, temperature=0)["choices"][0]["text"]
    stream = llm("The capital of France is", max_tokens=6, temperature=0, stream=True)
    next(stream)
    assert llm("Once upon a time", max_tokens=6, temperature=0)["choices"][0]["text"] == whole
    rest = list(stream)  # ended: at most its closing chunk
    assert len(rest) <= 1


def test_quantized_kv_cache_and_install(smollm2_path):
    import localinfer.compat.llama_cpp as shim
    m = Llama(model_path=str(smollm2_path), n_ctx=128, type_k=shim.GGML_TYPE_Q8_0, type_v=shim.GGML_TYPE_Q8_0)
    try:
        assert m("The capital of France is", max_tokens=4, temperature=0)["choices"][0]["text"]
    finally:
        m.close()
    saved = {k: v for k, v in sys.modules.items() if k == "llama_cpp" or k.startswith("llama_cpp.")}
    try:
        shim.install()
        import llama_cpp
        from llama_cpp.llama_types import ChatCompletionRequestMessage  # noqa: F401
        from llama_cpp.llama_grammar import LlamaGrammar as G
        assert llama_cpp.Llama is Llama and G is LlamaGrammar
    finally:
        for k in [k for k in sys.modules if k == "llama_cpp" or k.startswith("llama_cpp.")]:
            del sys.modules[k]
        sys.modules.update(saved)


def test_from_pretrained_through_huggingface_hub(smollm2_path, tmp_path):
    pytest.importorskip("huggingface_hub", reason="the hf extra (huggingface_hub) is not installed")
    from fake_hub import FakeHub
    code = ("import sys; from localinfer.compat.llama_cpp import Llama\n"
            "m = Llama.from_pretrained('someone/SmolLM2-GGUF', '*Q4_1.gguf', n_ctx=128)\n"
            "print(m.model_path); print(m('Hi', max_tokens=3, temperature=0)['choices'][0]['text'])\n"
            "try:\n    Llama.from_pretrained('someone/SmolLM2-GGUF', '*.gguf')\n"
            "except ValueError as e:\n    print('refused:', str(e).splitlines()[0])\n")
    with FakeHub({"someone/SmolLM2-GGUF": {"SmolLM2.Q4_1.gguf": smollm2_path, "SmolLM2.Q8_0.gguf": b"GGUF x"}}) as hub:
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1",
               "HF_HUB_DISABLE_PROGRESS_BARS": "1", "LOCALINFER_CACHE": str(tmp_path / "li")}
        env.pop("HF_HUB_OFFLINE", None)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=240)
    assert r.returncode == 0, r.stderr
    path, text, refused = r.stdout.splitlines()[:3]
    assert open(path, "rb").read() == smollm2_path.read_bytes()
    assert refused == "refused: Multiple files found in someone/SmolLM2-GGUF that match *.gguf"
