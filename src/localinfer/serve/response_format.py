"""A request's constraint on its answer -> a compiled grammar (constrained decoding), or None for text.

OpenAI's `response_format`:

    {"type": "text"}                                    free text (the default)
    {"type": "json_object"}                             any JSON object
    {"type": "json_object", "schema": {...}}            llama-server's: that schema
    {"type": "json_schema", "json_schema": {"name": "...", "schema": {...}, "strict": true}}

and llama-server's top-level fields, which its clients send on every route:

    "grammar": "root ::= ..."                           a GBNF grammar
    "json_schema": {...}                                a JSON Schema

At most one of the three. The schema is always enforced (as with "strict": true): every token is
masked by it. A grammar or schema the engine refuses is a ResponseFormatError, which the API turns
into a 400 naming the field, before the request reaches a slot -- never a 200 with text the
client did not ask for.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

from ..constrain import Grammar, GrammarError, compile_grammar

ANY_JSON_OBJECT = {"type": "object"}
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # OpenAI's rule for json_schema.name


class ResponseFormatError(ValueError):
    def __init__(self, message: str, param: str = "response_format"):
        super().__init__(message)
        self.param = param


def response_grammar(fmt: Any, tokenizer) -> Grammar | None:
    if fmt is None:
        return None
    if not isinstance(fmt, Mapping):
        raise ResponseFormatError(f"'response_format' must be an object, got {type(fmt).__name__}")
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        schema = fmt.get("schema", ANY_JSON_OBJECT)
        if not isinstance(schema, (Mapping, bool)):
            raise ResponseFormatError("response_format.schema must be a JSON Schema object", "response_format.schema")
    elif kind == "json_schema":
        spec = fmt.get("json_schema")
        if not isinstance(spec, Mapping):
            raise ResponseFormatError("response_format.json_schema must be an object with a 'schema'",
                                      "response_format.json_schema")
        name = spec.get("name")
        if name is not None and (not isinstance(name, str) or not _NAME.fullmatch(name)):
            raise ResponseFormatError("response_format.json_schema.name must be 1-64 letters, digits, '_' or '-'",
                                      "response_format.json_schema.name")
        strict = spec.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise ResponseFormatError("response_format.json_schema.strict must be a boolean",
                                      "response_format.json_schema.strict")
        schema = spec.get("schema", {})  # OpenAI: no schema is any JSON value
        if not isinstance(schema, (Mapping, bool)):
            raise ResponseFormatError("response_format.json_schema.schema must be a JSON Schema object",
                                      "response_format.json_schema.schema")
    else:
        raise ResponseFormatError("response_format.type must be 'text', 'json_object' or 'json_schema'",
                                  "response_format.type")
    try:
        return compile_grammar(tokenizer, json_schema=schema)
    except GrammarError as e:
        raise ResponseFormatError(f"response_format: the schema cannot be used: {e}") from None


# llama-server's lazy grammars (a grammar that starts at a trigger word): not implemented, so refused
# rather than applied from the first token, which would constrain text the client meant to be free
_UNSUPPORTED = ("grammar_lazy", "grammar_triggers")


def request_grammar(body: Mapping, tokenizer) -> Grammar | None:
    """The grammar a request's body asks for with `grammar`, `json_schema` or `response_format`."""
    for name in _UNSUPPORTED:
        if body.get(name) not in (None, False, []):
            raise ResponseFormatError(f"'{name}' is not supported by this server", name)
    asked = [name for name in ("grammar", "json_schema", "response_format") if body.get(name) is not None
             and not (name == "response_format" and body[name] == {"type": "text"})]
    if len(asked) > 1:
        raise ResponseFormatError(f"only one of 'grammar', 'json_schema' and 'response_format' can be given, "
                                  f"got {', '.join(repr(a) for a in asked)}", asked[1])
    if body.get("grammar") is not None:
        text = body["grammar"]
        if not isinstance(text, str):
            raise ResponseFormatError(f"'grammar' must be a GBNF grammar as a string, got {type(text).__name__}",
                                      "grammar")
        if not text.strip():
            return None  # llama-server: an empty grammar is no grammar
        try:
            return compile_grammar(tokenizer, gbnf=text)
        except GrammarError as e:
            raise ResponseFormatError(f"'grammar' cannot be used: {e}", "grammar") from None
    if body.get("json_schema") is not None:
        schema = body["json_schema"]
        if not isinstance(schema, (Mapping, bool)):
            raise ResponseFormatError(f"'json_schema' must be a JSON Schema object, got {type(schema).__name__}",
                                      "json_schema")
        try:
            return compile_grammar(tokenizer, json_schema=schema)
        except GrammarError as e:
            raise ResponseFormatError(f"'json_schema' cannot be used: {e}", "json_schema") from None
    return response_grammar(body.get("response_format"), tokenizer)
