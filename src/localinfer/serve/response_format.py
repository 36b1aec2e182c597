"""OpenAI's `response_format` -> a compiled grammar (constrained decoding), or None for text.

    {"type": "text"}                                    free text (the default)
    {"type": "json_object"}                             any JSON object
    {"type": "json_schema", "json_schema": {"name": "...", "schema": {...}, "strict": true}}

The schema is always enforced (as with "strict": true): every token is masked by it. A schema
the grammar engine refuses is a ResponseFormatError, which the API turns into a 400 naming
response_format, before the request reaches a slot.
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
        schema = ANY_JSON_OBJECT
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
