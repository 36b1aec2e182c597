"""A corpus of llama-cpp-python usage, run against two implementations of `Llama`: localinfer's shim
(localinfer.compat.llama_cpp) and the real llama-cpp-python where it is installed.

The calls are those of llama-cpp-python's README (completion, streaming, chat, JSON mode and schema,
function calling, embeddings, tokenizing, prompt-lookup decoding, saved states) and those LangChain's
LlamaCpp / ChatLlamaCpp and LlamaIndex's LlamaCPP make on the Llama object (their constructor
arguments, `client(prompt=..., **params)`, `create_chat_completion(messages=..., tools=...,
tool_choice=...)`, `tokenize(text.encode("utf-8"))`), written from their documented behaviour. Each
case asserts the shapes a program reads and what holds of greedy texts in either implementation
(a stream joins to the whole answer, echo puts the prompt first, a stop string is cut, a named
tool's arguments follow its schema ...).

test_greedy_answers_agree compares the two implementations: the same prompt ids (tokenizer, BOS,
chat formats), and the same greedy text, or else a departure at a near tie of the model's logits.
"""
import json

import pytest

from localinfer.compat import llama_cpp as shim

PLANETS = "Q: Name the planets in the solar system? A: "
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def _real():
    return pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed in this environment "
                                                   "(pip install llama-cpp-python to run the corpus against it)")


@pytest.fixture(scope="module", params=["shim", "llama_cpp"])
def lib(request):
    """The module a program imports `Llama` and its helpers from."""
    return shim if request.param == "shim" else _real()


@pytest.fixture(scope="module")
def llm(lib, smollm2_path):
    m = lib.Llama(model_path=str(smollm2_path), n_ctx=512, n_threads=2, logits_all=True, verbose=False)
    yield m
    m.close()


def _fresh(llm):
    """Before a call whose greedy text is compared with another's: llama-cpp-python reuses the prefix
    its context holds and computes the last prompt token again alone, which can tip a near tie, so
    a repeated call may part from the first; reset() makes the next call a whole prefill. (The shim
    keeps only prefixes that do not change an answer, so it needs none.)"""
    llm.reset()
    return llm


def _completion_shape(out: dict, path) -> dict:
    assert out["object"] == "text_completion" and out["id"].startswith("cmpl-")
    assert isinstance(out["created"], int) and out["model"] == str(path)
    (choice,) = out["choices"]
    assert set(choice) == {"text", "index", "logprobs", "finish_reason"} and choice["index"] == 0
    assert choice["finish_reason"] in ("stop", "length")
    u = out["usage"]
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    return choice


def _chat_shape(out: dict) -> dict:
    assert out["object"] == "chat.completion" and out["id"].startswith("chatcmpl-")
    (choice,) = out["choices"]
    assert choice["index"] == 0 and choice["message"]["role"] == "assistant"
    return choice


# -- llama-cpp-python's README ------------------------------------------------------------------------
def test_readme_completion_with_echo_and_stop(llm, smollm2_path):
    out = llm(PLANETS, max_tokens=32, stop=["Q:", "\n"], echo=True, temperature=0)
    choice = _completion_shape(out, smollm2_path)
    assert choice["text"].startswith(PLANETS)
    plain = _fresh(llm)(PLANETS, max_tokens=32, temperature=0)["choices"][0]["text"]
    answer = choice["text"][len(PLANETS):]
    assert "\n" not in answer and "Q:" not in answer and plain.startswith(answer)  # cut at the stop string
    assert out["usage"]["prompt_tokens"] == len(llm.tokenize(PLANETS.encode()))


def test_readme_streaming_joins_to_the_whole_answer(llm, smollm2_path):
    whole = llm.create_completion("The capital of France is", max_tokens=12, temperature=0)
    chunks = list(_fresh(llm).create_completion("The capital of France is", max_tokens=12, temperature=0,
                                                stream=True))
    for c in chunks:
        assert c["object"] == "text_completion" and c["id"] == chunks[0]["id"]
        assert set(c["choices"][0]) == {"text", "index", "logprobs", "finish_reason"}
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole["choices"][0]["text"]
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])


def test_readme_logprobs(llm):
    out = llm("The capital of France is", max_tokens=6, temperature=0, logprobs=2)
    choice = out["choices"][0]
    lp = choice["logprobs"]
    assert set(lp) == {"tokens", "text_offset", "token_logprobs", "top_logprobs"}
    assert "".join(lp["tokens"]) == choice["text"] and len(lp["tokens"]) == out["usage"]["completion_tokens"]
    prompt_len = len("The capital of France is")
    assert lp["text_offset"] == [prompt_len + len("".join(lp["tokens"][:i])) for i in range(len(lp["tokens"]))]
    for token, value, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        assert float(value) <= 0 and token in top and 2 <= len(top) <= 3  # the two best, and the sampled one
        assert max(float(v) for v in top.values()) == pytest.approx(float(value))  # greedy: the best is taken


def test_readme_chat_completion_whole_and_streamed(llm):
    messages = [{"role": "system", "content": "You are an assistant who perfectly describes images."},
                {"role": "user", "content": "Describe this image in detail please."}]
    out = llm.create_chat_completion(messages=messages, temperature=0, max_tokens=16)
    choice = _chat_shape(out)
    assert isinstance(choice["message"]["content"], str) and choice["finish_reason"] in ("stop", "length")
    parts = list(_fresh(llm).create_chat_completion(messages=messages, temperature=0, max_tokens=16, stream=True))
    assert parts[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert all(p["object"] == "chat.completion.chunk" for p in parts)
    assert "".join(p["choices"][0]["delta"].get("content", "") for p in parts) == choice["message"]["content"]
    assert parts[-1]["choices"][0]["delta"] == {} and parts[-1]["choices"][0]["finish_reason"] == choice["finish_reason"]


def test_readme_json_mode_and_schema(llm):
    messages = [{"role": "system", "content": "You are a helpful assistant that outputs in JSON."},
                {"role": "user", "content": "Who won the world series in 2020"}]
    out = llm.create_chat_completion(messages=messages, response_format={"type": "json_object"},
                                     temperature=0, max_tokens=40)
    text = _chat_shape(out)["message"]["content"]
    if out["choices"][0]["finish_reason"] == "stop":
        assert isinstance(json.loads(text), dict)
    schema = {"type": "object", "properties": {"team_name": {"type": "string", "maxLength": 20}},
              "required": ["team_name"]}
    out = llm.create_chat_completion(messages=messages, temperature=0, max_tokens=40,
                                     response_format={"type": "json_object", "schema": schema})
    assert set(json.loads(out["choices"][0]["message"]["content"])) == {"team_name"}


def test_readme_function_calling_with_a_named_tool(llm):
    messages = [{"role": "user", "content": "What is the weather like in Paris?"}]
    out = llm.create_chat_completion(messages=messages, tools=[WEATHER_TOOL], temperature=0, max_tokens=40,
                                     tool_choice={"type": "function", "function": {"name": "get_weather"}})
    choice = _chat_shape(out)
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["function"]["name"] == "get_weather" and call["id"]
    assert set(json.loads(call["function"]["arguments"])) == {"city"}
    assert choice["message"]["function_call"] == call["function"]
    parts = list(_fresh(llm).create_chat_completion(messages=messages, tools=[WEATHER_TOOL], temperature=0,
                                                    max_tokens=40, stream=True,
                                            tool_choice={"type": "function", "function": {"name": "get_weather"}}))
    pieces = [p["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"] for p in parts[1:-1]]
    assert "".join(pieces) == call["function"]["arguments"]
    assert parts[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_readme_embeddings(lib, smollm2_path):
    m = lib.Llama(model_path=str(smollm2_path), embedding=True, n_ctx=512, verbose=False)
    try:
        out = m.create_embedding(["Hello, world!", "Goodbye"])
        assert out["object"] == "list" and [d["index"] for d in out["data"]] == [0, 1]
        assert all(d["object"] == "embedding" and d["embedding"] for d in out["data"])
        n = len(m.tokenize(b"Hello, world!")) + len(m.tokenize(b"Goodbye"))
        assert out["usage"] == {"prompt_tokens": n, "total_tokens": n}
        # SmolLM2's file names no pooling: llama.cpp's default then is none, a vector per token
        first = out["data"][0]["embedding"]
        assert len(first) == len(m.tokenize(b"Hello, world!")) and all(len(v) == 576 for v in first)
    finally:
        m.close()


def test_readme_tokenize_detokenize_and_vocabulary(llm):
    ids = llm.tokenize(b"Hello world")
    assert llm.detokenize(ids) == b"Hello world"
    assert llm.tokenize(b"<|im_start|>user", special=True)[0] == llm.token_bos()  # SmolLM2's BOS is <|im_start|>
    assert llm.n_ctx() == 512 and llm.n_vocab() == 49152 and llm.token_eos() == 2


def test_readme_prompt_lookup_decoding_keeps_greedy_answers(lib, llm, smollm2_path):
    from importlib import import_module
    spec = import_module(lib.__name__ + ".llama_speculative")
    fast = lib.Llama(model_path=str(smollm2_path), n_ctx=512, verbose=False,
                     draft_model=spec.LlamaPromptLookupDecoding(num_pred_tokens=2))
    try:
        prompt = "1, 2, 3, 4, 1, 2, 3, 4, 1, 2,"
        assert (fast(prompt, max_tokens=10, temperature=0)["choices"][0]["text"]
                == _fresh(llm)(prompt, max_tokens=10, temperature=0)["choices"][0]["text"])
    finally:
        fast.close()


def test_saved_state_continues_as_before(llm):
    first = llm("The quick brown fox", max_tokens=6, temperature=0)["choices"][0]["text"]
    state = llm.save_state()
    assert state.n_tokens == llm.n_tokens > 0
    llm("Once upon a time", max_tokens=6, temperature=0)
    llm.load_state(state)  # the context as the first call left it: its prefix is reused as it was then
    assert llm.n_tokens == state.n_tokens
    assert llm("The quick brown fox", max_tokens=6, temperature=0)["choices"][0]["text"] == first


# -- LangChain's LlamaCpp and ChatLlamaCpp, LlamaIndex's LlamaCPP ----------------------------------------
def test_langchain_llamacpp(lib, smollm2_path):
    # LlamaCpp(model_path=...) builds the client with its model parameters (defaults, n_threads set)
    client = lib.Llama(model_path=str(smollm2_path), n_ctx=512, n_parts=-1, seed=-1, f16_kv=True, logits_all=False,
                       vocab_only=False, use_mlock=False, n_threads=2, n_batch=8, use_mmap=True,
                       last_n_tokens_size=64, verbose=False)
    try:
        params = dict(suffix=None, max_tokens=12, temperature=0.0, top_p=0.95, logprobs=None, echo=False,
                      stop=["\n\n"], repeat_penalty=1.1, top_k=40)
        text = client(prompt="Write a haiku about the sea:", **params)["choices"][0]["text"]
        parts = [(p["choices"][0]["text"], p["choices"][0].get("logprobs"))
                 for p in _fresh(client)(prompt="Write a haiku about the sea:", stream=True, **params)]
        assert "".join(t for t, _ in parts) == text and all(lp is None for _, lp in parts)
        assert "\n\n" not in text
        assert len(client.tokenize("Write a haiku".encode("utf-8"))) > 0  # get_num_tokens
    finally:
        client.close()


def test_langchain_chatllamacpp_and_its_tools(llm):
    params = dict(temperature=0.0, top_p=0.95, top_k=40, max_tokens=24, repeat_penalty=1.1, stop=None, logprobs=None)
    messages = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "Say hello."}]
    out = llm.create_chat_completion(messages=messages, **params)
    assert isinstance(_chat_shape(out)["message"]["content"], str)
    deltas = [c["choices"][0]["delta"] for c in _fresh(llm).create_chat_completion(messages=messages, stream=True,
                                                                                    **params)]
    assert "".join(d.get("content") or "" for d in deltas) == out["choices"][0]["message"]["content"]
    # bind_tools(..., tool_choice=...) / with_structured_output: one tool, named
    out = llm.create_chat_completion(messages=[{"role": "user", "content": "Weather in Rome?"}], tools=[WEATHER_TOOL],
                                     tool_choice={"type": "function", "function": {"name": "get_weather"}}, **params)
    (call,) = out["choices"][0]["message"]["tool_calls"]
    assert isinstance(json.loads(call["function"]["arguments"]), dict)  # what LangChain parses


def test_llamaindex_llamacpp(lib, smollm2_path):
    model = lib.Llama(model_path=str(smollm2_path), n_ctx=512, verbose=False, n_gpu_layers=0)
    try:
        generate_kwargs = {"temperature": 0.0, "max_tokens": 12}
        prompt = "Q: What is the capital of France?\nA:"  # complete(prompt); stream_complete(prompt)
        text = model(prompt=prompt, **generate_kwargs)["choices"][0]["text"]
        streamed = "".join(r["choices"][0]["text"]
                           for r in _fresh(model)(prompt=prompt, stream=True, **generate_kwargs))
        assert streamed == text and text
    finally:
        model.close()


# -- the two implementations against each other ----------------------------------------------------------
GREEDY_COMPLETIONS = [("The capital of France is", 16), (PLANETS, 24), ("def fibonacci(n):", 24),
                      ("Hello, my name is", 12)]
GREEDY_CHATS = [[{"role": "user", "content": "Name a color."}],
                [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is 2+2?"}],
                [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                 {"role": "user", "content": "Tell me a joke."}]]
# Where the two runtimes' greedy texts part, the two tokens must have been this close in localinfer's
# logits: its logits agree with llama.cpp's to about 0.1-0.2 (tests/model/test_llama_reference.py: median
# |delta| < 0.2), and that test holds llama.cpp's own disagreements to margins below 0.5.
NEAR_TIE = 0.5


def _departure_margin(model, prompt_ids: list[int], ours: list[int], theirs: list[int]) -> float:
    i = next(i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b)
    logits = model.logits(prompt_ids + ours[:i])[-1]
    return abs(float(logits[ours[i]] - logits[theirs[i]]))


def test_greedy_answers_agree(smollm2_path, smollm2_model):
    real = _real()
    ours = shim.Llama(model_path=str(smollm2_path), n_ctx=512, verbose=False, logits_all=True)
    theirs = real.Llama(model_path=str(smollm2_path), n_ctx=512, n_threads=2, verbose=False, logits_all=True)
    exact = departures = 0
    try:
        cases = [(p, ours.tokenize(p.encode()), n, None) for p, n in GREEDY_COMPLETIONS]
        from localinfer.compat.llama_cpp.chat import chat_prompt_tokens
        for messages in GREEDY_CHATS:
            ids, _ = chat_prompt_tokens(ours, messages)
            cases.append((None, ids, 16, messages))
        for prompt, ids, n, messages in cases:
            if messages is None:
                assert theirs.tokenize(prompt.encode(), special=True) == ids  # same prompt ids, BOS rule included
                a = ours(prompt, max_tokens=n, temperature=0, logprobs=0)["choices"][0]
                b = theirs(prompt, max_tokens=n, temperature=0, logprobs=0)["choices"][0]
            else:
                a = ours.create_chat_completion(messages, max_tokens=n, temperature=0, logprobs=True,
                                                top_logprobs=0)["choices"][0]
                b = theirs.create_chat_completion(messages, max_tokens=n, temperature=0, logprobs=True,
                                                  top_logprobs=0)["choices"][0]
                assert (ours.create_chat_completion(messages, max_tokens=1)["usage"]["prompt_tokens"]
                        == theirs.create_chat_completion(messages, max_tokens=1)["usage"]["prompt_tokens"] == len(ids))
            text_a = a["text"] if messages is None else a["message"]["content"]
            text_b = b["text"] if messages is None else b["message"]["content"]
            if text_a == text_b:
                exact += 1
                continue
            departures += 1
            ids_a = _ids(ours, a["logprobs"], messages)
            ids_b = _ids(ours, b["logprobs"], messages)
            margin = _departure_margin(smollm2_model, ids, ids_a, ids_b)
            print(f"{prompt or messages[-1]['content']!r}: {text_a!r} / llama-cpp-python {text_b!r}, "
                  f"margin {margin:.3f}")
            assert margin < NEAR_TIE, (prompt, messages, text_a, text_b, margin)
    finally:
        ours.close()
        theirs.close()
    print(f"{exact} of {exact + departures} greedy answers are llama-cpp-python's, character for character")


def _ids(llm, logprobs: dict, chat: bool) -> list[int]:
    """The generated ids, from the logprobs' token texts (each one token of SmolLM2's byte-level BPE)."""
    tokens = logprobs["tokens"] if not chat else [c["token"] for c in logprobs["content"]]
    return [llm.tokenize(t.encode(), add_bos=False, special=True)[0] for t in tokens]


def test_named_chat_formats_write_llama_cpp_pythons_prompts():
    fmt = _real().llama_chat_format
    from localinfer.compat.llama_cpp import llama_chat_format as ours
    conversations = [[{"role": "user", "content": "Hi"}],
                     [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                      {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "And you?"}],
                     [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": ""},
                      {"role": "user", "content": "again"}]]
    for name in ours.FORMATS:
        handler = fmt.LlamaChatCompletionHandlerRegistry().get_chat_completion_handler_by_name(name)
        assert handler is not None, name
        for messages in conversations:
            theirs = _format_of(fmt, name)(messages=messages)
            mine = ours.FORMATS[name](messages=messages)
            assert (mine.prompt, mine.stop) == (theirs.prompt, theirs.stop), (name, messages)


def _format_of(fmt, name: str):
    """llama-cpp-python's formatter function registered under `name`."""
    by_name = {"llama-2": "format_llama2", "llama-3": "format_llama3", "chatml": "format_chatml",
               "gemma": "format_gemma", "mistral-instruct": "format_mistral_instruct", "zephyr": "format_zephyr",
               "qwen": "format_qwen", "alpaca": "format_alpaca", "vicuna": "format"}
    return getattr(fmt, by_name[name])
