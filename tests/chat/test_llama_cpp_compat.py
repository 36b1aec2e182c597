"""localinfer.compat.llama_cpp.Llama as llama-cpp-python's scripts use it, on the real SmolLM2: the call
shapes of its README and of LangChain's LlamaCpp / LlamaIndex's LlamaCPP (written from their documented
behaviour), with greedy texts compared to localinfer's own answers."""
import json

import pytest

from localinfer.compat.llama_cpp import Llama, LlamaGrammar


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
    assert len(out["data"][0]["embedding"]) == len(llm.embed("a text"))


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
