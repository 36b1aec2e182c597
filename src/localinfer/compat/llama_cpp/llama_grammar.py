"""`llama_cpp.llama_grammar.LlamaGrammar`: a grammar for `grammar=`, kept as the text it was made
from and compiled for the model when a call uses it (localinfer's constrain/, llguidance).

A JSON schema is held to what llama-cpp-python's grammar for it allows (llama.cpp's
json-schema-to-grammar, SPACE_RULE `" "?`): one optional space between JSON tokens, and an object
with listed properties takes no others unless its additionalProperties says so. The same output
then follows from the same logits (llguidance's own default would be free whitespace and extra
properties allowed, as JSON Schema reads).
"""
from __future__ import annotations

import json
import os

# llama-cpp-python's JSON_GBNF (any JSON object, `ws ::= | " " | "\n" [ \t]{0,20}`) as a schema
JSON_OBJECT_SCHEMA = {"type": "object", "x-guidance": {"whitespace_flexible": True,
                                                       "whitespace_pattern": "( |\n[ \t]{0,20})"}}
_SCHEMA_SPACING = {"whitespace_flexible": True, "whitespace_pattern": " "}
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions")


class LlamaGrammar:
    """GBNF text (llama.cpp's format) or a JSON schema; exactly one is set."""

    def __init__(self, gbnf: str | None = None, json_schema: str | None = None):
        if (gbnf is None) == (json_schema is None):
            raise ValueError("a LlamaGrammar holds GBNF text or a JSON schema: give one of them")
        self.gbnf, self.json_schema = gbnf, json_schema

    @classmethod
    def from_string(cls, grammar: str, verbose: bool = True) -> "LlamaGrammar":
        if not isinstance(grammar, str):
            raise TypeError(f"LlamaGrammar.from_string takes GBNF text, got {type(grammar).__name__}")
        return cls(gbnf=grammar)

    @classmethod
    def from_file(cls, file: str | os.PathLike, verbose: bool = True) -> "LlamaGrammar":
        with open(file, encoding="utf-8") as f:
            grammar = f.read()
        if not grammar:
            raise ValueError(f"LlamaGrammar.from_file: {os.fspath(file)} is empty")
        return cls.from_string(grammar)

    @classmethod
    def from_json_schema(cls, json_schema: str, verbose: bool = True) -> "LlamaGrammar":
        json.loads(json_schema)  # a ValueError (JSONDecodeError) now, as there, for text that is not JSON
        return cls(json_schema=json_schema)

    def constraint(self) -> dict:
        """Model.stream's keyword argument for this grammar."""
        if self.gbnf is not None:
            return {"grammar": self.gbnf}
        schema = json.loads(self.json_schema)
        if not isinstance(schema, dict):
            return {"json_schema": self.json_schema}  # localinfer names what is wrong with it
        return {"json_schema": {**_closed(schema), "x-guidance": {**_SCHEMA_SPACING, **schema.get("x-guidance", {})}}}


def _closed(schema):
    """The schema with additionalProperties: false on each object that lists properties and says
    nothing of others (llama.cpp's reading), through its subschemas."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    for key in _SUBSCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {k: _closed(v) for k, v in out[key].items()}
    for key in _SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [_closed(v) for v in out[key]]
    if isinstance(out.get("items"), dict):
        out["items"] = _closed(out["items"])
    return out
