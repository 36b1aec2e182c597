"""Model.generate/stream/chat and ChatSession with json_schema=, grammar= (GBNF), lark=, regex=,
through the batched engine and through an explicit context, on SmolLM2."""
from __future__ import annotations

import json

import jsonschema
import pytest
import regex

from localinfer.constrain import GrammarError, compile_grammar, lark_json

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "pattern": "^[A-Z][a-z]{1,10}$"},
                   "age": {"type": "integer", "minimum": 0, "maximum": 120},
                   "pets": {"type": "array", "items": {"enum": ["cat", "dog", "fish"]}, "maxItems": 3}},
    "required": ["name", "age", "pets"], "additionalProperties": False,
}
ASK = [{"role": "user", "content": "Describe a person as JSON."}]


@pytest.fixture(params=["engine", "context"])
def where(request, smollm2_model):
    """generate's keyword for running through the engine (none) or in a fresh context."""
    return {} if request.param == "engine" else {"context": smollm2_model.new_context()}


def test_json_schema(smollm2_model, where):
    for seed in range(3):
        r = smollm2_model.chat(ASK, json_schema=PERSON, max_tokens=80, temperature=1.0, seed=seed, **where)
        assert r.finish_reason == "stop", r.text
        jsonschema.validate(json.loads(r.text), PERSON)
        # the grammar ended the text: no end-of-generation token had to be sampled and computed
        assert not smollm2_model.tokenizer.is_eog(r.tokens[-1])
        if "context" in where:
            where["context"].reset()


def test_json_schema_as_text_and_streamed(smollm2_model):
    chunks = list(smollm2_model.chat(ASK, json_schema=json.dumps(PERSON), max_tokens=80, temperature=0,
                                     stream=True))
    jsonschema.validate(json.loads("".join(chunks)), PERSON)


def test_regex(smollm2_model, where):
    pattern = r" [0-9]{3}-[0-9]{4}"
    r = smollm2_model.generate("My phone number is", regex=pattern, max_tokens=20, temperature=1.0, seed=1,
                               **where)
    assert r.finish_reason == "stop" and regex.fullmatch(pattern, r.text), r.text


def test_gbnf_grammar(smollm2_model, where):
    gbnf = 'root ::= " " answer "."\nanswer ::= "yes" | "no" | "maybe"\n'
    r = smollm2_model.generate("Is the sky blue? Answer:", grammar=gbnf, max_tokens=10, temperature=1.0, seed=2,
                               **where)
    assert r.finish_reason == "stop" and r.text in (" yes.", " no.", " maybe."), r.text


def test_lark_with_an_embedded_schema(smollm2_model):
    lark = 'start: "<call>" %json {"type": "object", "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 99}}, ' \
           '"required": ["x"], "additionalProperties": false} "</call>"'
    r = smollm2_model.generate("Call the tool:", lark=lark, max_tokens=30, temperature=0)
    assert r.finish_reason == "stop" and r.text.startswith("<call>") and r.text.endswith("</call>")
    assert isinstance(json.loads(r.text[len("<call>"):-len("</call>")])["x"], int)


def test_a_grammar_that_may_end_stops_at_end_of_generation(smollm2_model):
    """`[a-z ]*` never completes by itself: the text ends when the model picks end-of-generation
    (allowed all along) or at max_tokens, and is inside the language either way."""
    r = smollm2_model.generate("Say hi:", regex="[a-z ]*", max_tokens=12, temperature=0)
    assert regex.fullmatch("[a-z ]*", r.text)
    assert r.finish_reason in ("stop", "length")


def test_compiled_grammar_and_chat_session(smollm2_model):
    g = compile_grammar(smollm2_model.tokenizer, json_schema=PERSON)
    session = smollm2_model.chat_session(grammar=g, max_tokens=80, temperature=0)
    first = session.send("A person, as JSON.")
    second = session.send("Another one.")
    for r in (first, second):
        jsonschema.validate(json.loads(r.text), PERSON)


def test_greedy_repeats_are_not_served_across_grammars(smollm2_model):
    """The engine's completion cache keys on the grammar too: the same greedy prompt under two
    grammars gives two answers, each in its own language."""
    a = smollm2_model.generate("Pick:", regex=" (red|green)", max_tokens=5, temperature=0)
    b = smollm2_model.generate("Pick:", regex=" (blue|black)", max_tokens=5, temperature=0)
    assert a.text in (" red", " green") and b.text in (" blue", " black")


def test_bad_constraints_fail_before_generating(smollm2_model):
    with pytest.raises(GrammarError):
        smollm2_model.generate("x", json_schema={"type": "nope"})
    with pytest.raises(GrammarError):
        smollm2_model.generate("x", regex="[0-9]", json_schema={"type": "object"})
    g = compile_grammar(smollm2_model.tokenizer, regex="a")
    with pytest.raises(GrammarError):
        smollm2_model.generate("x", grammar=g, regex="b")


def test_lark_json_lays_out_embedded_json_like_json_schema(smollm2_model):
    """lark_json() gives `%json` the json_schema= layout: no free whitespace to pad with."""
    lark = f'start: "<call>" {lark_json({"type": "object"})} "</call>"'
    r = smollm2_model.generate("Call:", lark=lark, max_tokens=40, temperature=0)
    body = r.text[len("<call>"):-len("</call>")]
    assert r.finish_reason == "stop" and isinstance(json.loads(body), dict)
    assert "\n" not in body and "  " not in body
