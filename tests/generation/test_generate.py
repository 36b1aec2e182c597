"""The Python API on the real SmolLM2 model: generation, streaming, stops, chat sessions."""
from __future__ import annotations

import numpy as np
import pytest

import localinfer
from localinfer import ContextFullError
from localinfer.generate import _split_stop

PROMPT = "The capital of France is"


def test_load_by_name_path_and_default(smollm2_path, smollm2_model):
    m = localinfer.load()  # the default model is smollm2
    assert m.path == str(smollm2_path)
    assert m.architecture == "llama" and m.n_vocab == 49152
    with pytest.raises(localinfer.ModelNotFoundError, match="known"):
        localinfer.load("no-such-model")


def test_generate_greedy_result_fields(smollm2_model, load_ref):
    case = load_ref("greedy")["cases"][1]  # fruit_list: ends with an end-of-generation token
    res = smollm2_model.generate(case["prompt"], max_tokens=64, temperature=0)
    assert res.tokens == case["generated_ids"]
    assert res.finish_reason == "stop"
    assert res.text == case["generated_text"]
    assert res.prompt_tokens == case["prompt_tokens"]
    t = res.timings
    assert t.prompt_tokens == len(case["prompt_tokens"]) and t.generated_tokens == len(res.tokens)
    assert t.ttft_s > 0 and t.prefill_tps > 0 and t.decode_tps > 0


def test_text_and_token_prompts_agree(smollm2_model):
    a = smollm2_model.generate(PROMPT, max_tokens=8, temperature=0)
    b = smollm2_model.generate(smollm2_model.tokenize(PROMPT), max_tokens=8, temperature=0)
    assert a.tokens == b.tokens and a.finish_reason == "length" and len(a.tokens) == 8


def test_same_seed_same_output(smollm2_model):
    kw = dict(max_tokens=12, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    a = smollm2_model.generate("Once upon a time", seed=3, **kw)
    b = smollm2_model.generate("Once upon a time", seed=3, **kw)
    c = smollm2_model.generate("Once upon a time", seed=4, **kw)
    assert a.tokens == b.tokens
    assert a.tokens != c.tokens


def test_stream_joins_to_the_same_text(smollm2_model):
    whole = smollm2_model.generate(PROMPT, max_tokens=20, temperature=0)
    chunks = list(smollm2_model.generate(PROMPT, max_tokens=20, temperature=0, stream=True))
    assert all(isinstance(c, str) and c for c in chunks)
    assert "".join(chunks) == whole.text


def test_stream_can_be_cancelled(smollm2_model):
    ctx = smollm2_model.new_context(256)
    stream = smollm2_model.stream(PROMPT, max_tokens=50, temperature=0, context=ctx)
    first = [next(stream) for _ in range(3)]
    stream.close()  # stops the work: no further token is computed
    prompt_len = len(smollm2_model.tokenize(PROMPT))
    assert len(ctx.tokens) == prompt_len + 2  # the third token was sampled but never evaluated
    assert ctx.cache.offset == len(ctx.tokens)
    assert sum(len(c.tokens) for c in first) == 3


def test_stop_strings(smollm2_model):
    whole = smollm2_model.generate(PROMPT, max_tokens=30, temperature=0)
    assert "\n" in whole.text
    res = smollm2_model.generate(PROMPT, max_tokens=30, temperature=0, stop=["\n"])
    assert res.finish_reason == "stop"
    assert res.text == whole.text[:whole.text.index("\n")]
    streamed = "".join(smollm2_model.generate(PROMPT, max_tokens=30, temperature=0, stop="\n", stream=True))
    assert streamed == res.text


def test_split_stop_holds_back_partial_matches():
    assert _split_stop("hello wor", ["world"]) == ("hello ", "wor", False)
    assert _split_stop("hello world!", ["world"]) == ("hello ", "", True)
    assert _split_stop("abc", []) == ("abc", "", False)
    assert _split_stop("a<|", ["<|end|>", "|x"]) == ("a", "<|", False)


def test_context_full_is_reported_not_silent(smollm2_path):
    m = localinfer.load(str(smollm2_path), n_ctx=16)
    res = m.generate(PROMPT, max_tokens=100, temperature=0)
    assert res.finish_reason == "context_full"
    assert len(res.prompt_tokens) + len(res.tokens) == 16
    with pytest.raises(ContextFullError, match="16"):
        m.generate("word " * 40, max_tokens=5)
    with pytest.raises(ContextFullError):
        m.new_context().evaluate(list(range(17)))


def test_bad_inputs_are_clear_errors(smollm2_model):
    with pytest.raises(ValueError, match="unknown token id 49152"):
        smollm2_model.generate([1, 49152], max_tokens=2)
    with pytest.raises(ValueError, match="unknown token id -1"):
        smollm2_model.logits([-1])
    with pytest.raises(TypeError):
        smollm2_model.logits([1.5])
    with pytest.raises(ValueError, match="empty"):
        smollm2_model.generate([], max_tokens=2)
    with pytest.raises(ValueError, match="max_tokens"):
        smollm2_model.generate(PROMPT, max_tokens=-2)
    assert smollm2_model.generate(PROMPT, max_tokens=0).finish_reason == "length"


def test_logits_shape(smollm2_model):
    ids = smollm2_model.tokenize(PROMPT)
    out = smollm2_model.logits(ids)
    assert out.shape == (len(ids), smollm2_model.n_vocab) and out.dtype == np.float32
    assert smollm2_model.logits([]).shape == (0, smollm2_model.n_vocab)


def test_chat_renders_template_and_generates(smollm2_model, load_ref):
    ref = load_ref("greedy")
    case = next(c for c in ref["cases"] if c["messages"])
    res = smollm2_model.chat(case["messages"], max_tokens=64, temperature=0)
    assert res.prompt_tokens == case["prompt_tokens"]
    assert res.finish_reason in ("stop", "length") and res.text


def test_chat_session_reuses_the_kv_cache(smollm2_model):
    chat = smollm2_model.chat_session(system="You answer in one short sentence.", temperature=0, max_tokens=24)
    first = chat.send("What is the capital of France?")
    assert first.text and chat.messages[-1] == {"role": "assistant", "content": first.text}
    second = chat.send("And of Italy?")
    t = second.timings
    # everything up to the first answer was cached: only the new turn's tokens were computed
    assert t.prompt_cached >= len(first.prompt_tokens) + len(first.tokens) - 2
    assert second.prompt_tokens[:t.prompt_cached] == first.prompt_tokens + first.tokens[:t.prompt_cached - len(first.prompt_tokens)]
    assert len(chat.messages) == 5
    chat.clear()
    assert chat.messages == [{"role": "system", "content": "You answer in one short sentence."}]
    assert chat.context.tokens == []


def test_chat_session_keeps_partial_answer_when_cancelled(smollm2_model):
    chat = smollm2_model.chat_session(temperature=0, max_tokens=40)
    stream = chat.stream("Tell me a story about a cat.")
    parts = [next(stream).text for _ in range(4)]
    stream.close()
    assert chat.messages[-1]["role"] == "assistant"
    assert chat.messages[-1]["content"] == "".join(parts)


@pytest.mark.parametrize("text", ["\U0001F31C\U0001F31B", "\u65e5\u672c\u8a9e\u3067\u3059"], ids=["emoji", "cjk"])
@pytest.mark.parametrize("through", ["engine", "context"])
def test_a_stop_inside_a_character_leaves_the_character_out(smollm2_model, through, text):
    """SmolLM2 writes these emoji as three byte tokens each, and most of these CJK characters in
    two or more: an answer cut by max_tokens at any token ends before the character it is inside,
    as llama.cpp's server sends it, never in U+FFFD."""
    assert len(smollm2_model.tokenize(text)) > len(text)  # some characters span several tokens
    seen = []
    for n in range(1, len(text.encode()) + 1):  # the grammar's tokens: at most one per byte
        context = smollm2_model.new_context(64) if through == "context" else None
        r = smollm2_model.generate("Say it:", max_tokens=n, temperature=0, grammar=f'root ::= "{text}"',
                                   context=context)
        assert "\ufffd" not in r.text and text.startswith(r.text), (n, r.text)
        seen.append(r.text)
        if r.finish_reason == "stop":  # the grammar is complete
            break
        assert r.finish_reason == "length" and len(r.tokens) == n
    assert seen[-1] == text and len(set(seen)) < len(seen)  # some cuts fell inside a character


@pytest.mark.parametrize("text", ["\U0001F31C\U0001F31B\U0001F31D", "\u65e5\u672c\u8a9e\u3067\u3059"], ids=["emoji", "cjk"])
@pytest.mark.parametrize("through", ["engine", "context"])
def test_a_stop_string_after_a_character_in_pieces_leaves_it_whole(smollm2_model, through, text):
    """Each character of the text as the stop string, the answer forced to the text by a grammar: the
    answer is what comes before it, whole characters only, streamed or not."""
    grammar = f'root ::= "{text}"'
    for i in range(1, len(text)):
        context = (lambda: smollm2_model.new_context(64)) if through == "context" else (lambda: None)
        r = smollm2_model.generate("Say it:", max_tokens=32, temperature=0, grammar=grammar, stop=[text[i]],
                                   context=context())
        assert r.text == text[:i] and r.finish_reason == "stop", (i, r.text)
        streamed = "".join(c.text for c in smollm2_model.stream("Say it:", max_tokens=32, temperature=0,
                                                                grammar=grammar, stop=[text[i]], context=context()))
        assert streamed == text[:i], (i, streamed)


@pytest.mark.parametrize("text", ["\U0001F31C\U0001F31B\U0001F31D", "\u65e5\u672c\u8a9e\u3067\u3059"], ids=["emoji", "cjk"])
def test_a_stream_closed_at_any_chunk_never_held_half_a_character(smollm2_model, text):
    """Cancelling is closing the stream: whatever chunks came before are whole characters."""
    grammar = f'root ::= "{text}"'
    n = len(list(smollm2_model.stream("Say it:", max_tokens=32, temperature=0, grammar=grammar)))
    for k in range(1, n + 1):
        stream = smollm2_model.stream("Say it:", max_tokens=32, temperature=0, grammar=grammar)
        got = "".join(next(stream).text for _ in range(k))
        stream.close()
        assert "\ufffd" not in got and text.startswith(got), (k, got)
