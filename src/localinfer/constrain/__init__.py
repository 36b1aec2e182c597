"""Constrained decoding: JSON schemas, Lark/GBNF grammars and regexes as token masks (llguidance)."""

from .grammar import Grammar, GrammarError, Matcher, compile_grammar, lark_json
from .vocab_bridge import ll_tokenizer

__all__ = ["compile_grammar", "Grammar", "GrammarError", "Matcher", "lark_json", "ll_tokenizer"]
