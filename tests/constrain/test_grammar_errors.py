"""What the grammar engine refuses is a GrammarError (a ValueError) when it is compiled, at once."""
from __future__ import annotations

import pytest

from localinfer.constrain import GrammarError, compile_grammar
from localinfer.constrain.grammar import MAX_GRAMMAR_CHARS

REFUSED = [
    dict(json_schema={"type": "strng"}),  # unknown type
    dict(json_schema={"type": "integer", "minimum": 5, "maximum": 2}),  # unsatisfiable
    dict(json_schema={"properties": {"a": {"$ref": "#/$defs/missing"}}}),  # dangling reference
    dict(json_schema={"$ref": "https://example.com/schema.json"}),  # nothing is fetched
    dict(json_schema='{"type": "object",'),  # not JSON
    dict(json_schema=["not", "an", "object"]),
    dict(json_schema={"type": "number", "x": float("nan")}),  # not writable as JSON
    dict(regex="a("),
    dict(regex=""),
    dict(gbnf='root ::= item\n'),  # undefined rule
    dict(gbnf='root ::= "a\n'),  # unterminated string
    dict(lark="start: (((\n"),
    dict(lark="start: missing_rule\n"),
    dict(),  # nothing given
    dict(regex="a", gbnf='root ::= "a"'),  # two given
    dict(regex=r"[a-z]" * (MAX_GRAMMAR_CHARS // 5 + 1)),  # over the size budget
    # patterns whose lexer llguidance builds only as a string is generated: too many expressions
    dict(json_schema={"type": "string", "pattern": "(.{0,100}){0,100}z"}),
    dict(json_schema={"type": "object", "properties": {"a": {"type": "string", "pattern": "(.{0,30}){0,30}z"}}}),
    dict(lark='start: "call " args\nargs: %json {"type": "string", "pattern": "(.{0,100}){0,100}z"}\n'),
    dict(json_schema={"anyOf": [{"type": "string", "pattern": f"p{i}"} for i in range(65)]}),  # too many patterns
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("source", REFUSED, ids=lambda s: ",".join(s) or "none")
def test_refused_at_compile_time(smollm2_tokenizer, source):
    with pytest.raises(GrammarError) as e:
        compile_grammar(smollm2_tokenizer, **source)
    assert isinstance(e.value, ValueError)
    assert 0 < len(str(e.value)) < 1000  # a message a user can read, never the parser's whole state


@pytest.mark.timeout(60)
def test_the_parser_limits_apply_when_compiling(smollm2_tokenizer, monkeypatch):
    """llguidance's limits are ours (grammar.LIMITS): a grammar over one of them is refused when it
    is compiled. Here the grammar-size bound is lowered so that an ordinary grammar passes it."""
    from localinfer.constrain import grammar
    words = " | ".join(f'"w{i}"' for i in range(200))
    monkeypatch.setitem(grammar.LIMITS, "max_grammar_size", 100)
    with pytest.raises(GrammarError, match="too big"):
        compile_grammar(smollm2_tokenizer, lark=f"start: {words}")
    monkeypatch.undo()
    assert compile_grammar(smollm2_tokenizer, lark=f"start: {words}").matcher().allowed().any()


def test_accepted_sources(smollm2_tokenizer):
    for source in (dict(json_schema={"type": "object"}), dict(json_schema='{"type": "array"}'),
                   dict(json_schema=True), dict(regex="[0-9]+"), dict(gbnf='root ::= "yes" | "no"'),
                   dict(lark='start: "a" | %json {"type": "integer"}'),
                   # patterns are checked, a property named "pattern" and a const's value are not patterns
                   dict(json_schema={"type": "object",
                                     "properties": {"pattern": {"type": "string", "pattern": "^[a-z]+$"},
                                                    "k": {"const": {"pattern": "(("}}}})):
        g = compile_grammar(smollm2_tokenizer, **source)
        assert g.matcher().allowed().any()


def test_the_package_exports_the_contract():
    import localinfer
    from localinfer import constrain
    assert localinfer.compile_grammar is constrain.compile_grammar
    assert localinfer.GrammarError is constrain.GrammarError and issubclass(constrain.GrammarError, ValueError)
