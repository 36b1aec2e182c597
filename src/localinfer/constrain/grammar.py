"""Grammars compiled against a tokenizer, and the per-sequence matcher that masks logits.

    g = compile_grammar(tokenizer, json_schema={...})   # or lark= / gbnf= / regex=
    m = g.matcher()              # fresh state for one sequence
    logits = m.mask(logits)      # disallowed tokens -> -inf (end-of-generation only where it may end)
    m.accept(token)              # advance
    m.done                       # the grammar is complete: only end-of-generation is left

The work is llguidance's (an Earley parser over a lazily built lexer, masks computed over the
token trie). A grammar comes from elsewhere (a request body), so it has a budget: its text is
bounded, and llguidance's parser limits bound the lexer states, the grammar's size and the work
per token. Anything llguidance refuses -- a syntax error, an unsupported JSON-schema keyword, a
grammar over its limits -- is a GrammarError when it is compiled, before any generation starts.
"""
from __future__ import annotations

import json
import threading
import weakref
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
import llguidance
from llguidance.gbnf_to_lark import gbnf_to_lark

from .vocab_bridge import ll_tokenizer

if TYPE_CHECKING:  # pragma: no cover
    from ..tokenizer import Tokenizer

MAX_GRAMMAR_CHARS = 256 << 10  # a schema or grammar text; tool-call grammars stay far below this

# llguidance's defaults, tightened where they cost memory or time per request. Each step of the
# mask may use at most step_lexer_fuel (~14k/ms) and step_max_items (~20k/ms): a few ms per token
# at worst, whatever the grammar; building the lexer at most initial_lexer_fuel (~50k/ms).
LIMITS = dict(
    max_items_in_row=2000,
    initial_lexer_fuel=1_000_000,
    step_lexer_fuel=200_000,
    step_max_items=50_000,
    max_lexer_states=50_000,  # ~1-2 kB each: 100 MB at most per grammar (llguidance: 250k)
    max_grammar_size=200_000,  # symbols in the productions (llguidance: 500k)
    verbose_errors=False,  # the message names the problem, not the parser's whole state
)

# JSON output: one space after ',' and ':' and no other whitespace (a schema's "x-guidance"
# may change it). Free whitespace lets a sampled model pad forever and never close the object.
JSON_OPTIONS = dict(item_separator=", ", key_separator=": ", whitespace_flexible=False)

_MAX_MESSAGE = 600


def lark_json(schema: Mapping[str, Any]) -> str:
    """`%json {...}` for a Lark grammar, with the same JSON layout as json_schema= (a `%json`
    written by hand gets llguidance's free whitespace, which a sampled model may pad forever)."""
    if not isinstance(schema, Mapping):
        raise GrammarError(f"a JSON schema must be an object, got {type(schema).__name__}")
    options = {**JSON_OPTIONS, **(schema.get("x-guidance") or {})}
    return "%json " + json.dumps({**schema, "x-guidance": options}, ensure_ascii=False)


class GrammarError(ValueError):
    """A grammar or JSON schema that cannot be used (refused when compiled), or a token it forbids."""


def _limits() -> llguidance.LLParserLimits:
    return llguidance.LLParserLimits(**LIMITS)


def _short(message: str) -> str:
    message = " ".join(str(message).split())
    return message if len(message) <= _MAX_MESSAGE else message[:_MAX_MESSAGE] + " ..."


def _source(json_schema, lark, gbnf, regex) -> tuple[str, str]:
    """-> (kind, text): exactly one of the four, as text."""
    given = {k: v for k, v in (("json_schema", json_schema), ("lark", lark), ("gbnf", gbnf), ("regex", regex))
             if v is not None}
    if len(given) != 1:
        names = ", ".join(given) or "none"
        raise GrammarError(f"give exactly one of json_schema, lark, gbnf, regex (got {names})")
    kind, value = next(iter(given.items()))
    if kind == "json_schema":
        if isinstance(value, (bytes, bytearray)):
            value = bytes(value).decode("utf-8", errors="replace")
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as e:
                raise GrammarError(f"json_schema is not valid JSON: {e}") from None
        if isinstance(value, bool):  # JSON Schema: true is anything, false is nothing
            value = {} if value else {"not": {}}
        if not isinstance(value, Mapping):
            raise GrammarError(f"json_schema must be a JSON object, got {type(value).__name__}")
        try:
            text = json.dumps(value, ensure_ascii=False, allow_nan=False)  # key order kept: properties come out in it
        except (TypeError, ValueError) as e:
            raise GrammarError(f"json_schema cannot be written as JSON: {e}") from None
    elif not isinstance(value, str):
        raise GrammarError(f"{kind} must be a string, got {type(value).__name__}")
    else:
        text = value
    if len(text) > MAX_GRAMMAR_CHARS:
        raise GrammarError(f"{kind} is {len(text)} characters long; at most {MAX_GRAMMAR_CHARS} are accepted")
    if kind != "json_schema" and not text.strip():
        raise GrammarError(f"{kind} is empty")
    return kind, text


def _llg_grammar(kind: str, text: str) -> str:
    """Our source -> llguidance's grammar description (not yet checked)."""
    try:
        if kind == "json_schema":
            return llguidance.LLMatcher.grammar_from_json_schema(text, defaults=JSON_OPTIONS)
        if kind == "regex":
            return llguidance.LLMatcher.grammar_from_regex(text)
        if kind == "gbnf":
            text = gbnf_to_lark(text)
        return llguidance.LLMatcher.grammar_from_lark(text)
    except Exception as e:  # gbnf_to_lark's parse errors, a schema that is not an object
        raise GrammarError(f"{kind}: {_short(e)}") from None


MAX_PATTERNS = 64  # distinct regexes in one schema, each built when the grammar is compiled (a few ms each)


def _schema_patterns(kind: str, text: str) -> set[str]:
    """The regexes of a JSON schema (`pattern` values, `patternProperties` keys), or of the
    `%json {...}` schemas inside a Lark grammar (tool calls' arguments)."""
    if kind == "json_schema":
        schemas = [json.loads(text)]
    elif kind == "lark":
        decoder, schemas, at = json.JSONDecoder(), [], text.find("%json")
        while at >= 0:
            start = text.find("{", at)
            try:
                schemas.append(decoder.raw_decode(text, start)[0] if start >= 0 else None)
            except json.JSONDecodeError:
                pass  # not a schema llguidance would take either: it reports that itself
            at = text.find("%json", at + 5)
    else:
        return set()
    found, stack = set(), schemas
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            for k, v in node.items():
                if k in ("const", "enum", "default", "examples"):
                    continue  # values, not schemas
                if k == "pattern" and isinstance(v, str):
                    found.add(v)
                elif k == "patternProperties" and isinstance(v, dict):
                    found.update(v)
                    stack.extend(v.values())
                else:
                    stack.append(v)
    if len(found) > MAX_PATTERNS:
        raise GrammarError(f"{kind} holds {len(found)} distinct patterns; at most {MAX_PATTERNS} are accepted")
    return found


class Grammar:
    """A checked grammar for one tokenizer; `matcher()` gives each sequence its own state."""

    def __init__(self, tokenizer: "Tokenizer", kind: str, text: str):
        # no reference to the tokenizer itself: a cached grammar must not keep a closed model's alive
        self.kind, self.text = kind, text
        self.ll_tokenizer = ll_tokenizer(tokenizer)
        self.n_vocab = tokenizer.n_vocab
        self.key = _llg_grammar(kind, text)  # what decides the tokens (the completion cache's key)
        # the constructor never raises on a bad grammar: it leaves the matcher in an error state
        pristine = llguidance.LLMatcher(self.ll_tokenizer, self.key, log_level=0, limits=_limits())
        if pristine.is_error():
            raise GrammarError(f"{kind} refused: {_short(pristine.get_error())}")
        Matcher(pristine.deep_copy(), self).allowed()  # the first mask: a grammar no token can start fails now, not mid-request
        self._pristine = pristine
        for pattern in sorted(_schema_patterns(kind, text)):
            self._check_pattern(pattern)

    def _check_pattern(self, pattern: str) -> None:
        """llguidance builds the lexer of a JSON string's `pattern` as the string is generated, not
        when the schema is compiled: one it cannot build (`(.{0,100}){0,100}z`: too many expressions)
        would fail mid-answer. Compiled as a grammar of its own, its first mask walks every token
        through it from the start, which builds what the answer's first tokens would need."""
        try:
            key = _llg_grammar("regex", pattern)
            ll = llguidance.LLMatcher(self.ll_tokenizer, key, log_level=0, limits=_limits())
            if ll.is_error():
                raise GrammarError(_short(ll.get_error()))
            Matcher(ll, self).allowed()
        except GrammarError as e:
            raise GrammarError(f"{self.kind}: the pattern {pattern[:80]!r} cannot be used: {e}") from None

    def matcher(self) -> "Matcher":
        return Matcher(self._pristine.deep_copy(), self)

    def __repr__(self) -> str:
        text = self.text if len(self.text) <= 60 else self.text[:57] + "..."
        return f"Grammar({self.kind}={text!r})"


_NEG_INF_BITS = np.float32(-np.inf).view(np.int32)


class Matcher:
    """One sequence's position in a grammar. Not thread-safe: one sequence, one thread at a time."""

    def __init__(self, ll: llguidance.LLMatcher, grammar: Grammar):
        self._ll, self.grammar = ll, grammar
        n = self._n = grammar.n_vocab
        self._bits = np.zeros((n + 31) // 32, dtype=np.int32)  # llguidance's bitmask, bit i = token i
        self._keep = np.empty(n, dtype=np.int32)  # scratch: all ones where allowed, else 0

    def _check(self) -> None:
        if self._ll.is_error():
            raise GrammarError(f"grammar {self.grammar.kind}: {_short(self._ll.get_error())}")

    def _compute(self) -> np.ndarray:
        """The next token's bitmask (llguidance computes it without holding the GIL), as 0/1 bytes."""
        self._ll.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
        self._check()
        allowed = np.unpackbits(self._bits.view(np.uint8), count=self._n, bitorder="little")
        if not allowed.any():
            raise GrammarError(f"grammar {self.grammar.kind}: no token can continue the text here")
        return allowed

    def allowed(self) -> np.ndarray:
        """(n_vocab,) bool: the tokens that may come next."""
        return self._compute().view(bool)

    def mask(self, logits: np.ndarray) -> np.ndarray:
        """logits (n_vocab,) -> a copy with every token the grammar forbids next at -inf.
        A model whose output rows are padded past the vocabulary gets those at -inf too."""
        logits = np.ascontiguousarray(logits, dtype=np.float32)
        n = self._n
        if logits.ndim != 1 or logits.shape[0] < n:
            raise ValueError(f"mask needs logits of shape ({n},) or longer, got {logits.shape}")
        allowed = self._compute()
        # select by bit operations, not np.where/copyto: a mask inside a JSON string is an irregular
        # mix of allowed and forbidden tokens, and the branchy select then costs ~3 ms for 262k
        # tokens (a tenth of a decode step), this ~0.5 ms whatever the pattern
        keep = self._keep
        np.negative(allowed.view(np.int8), out=keep, casting="unsafe")  # 1 -> -1 (all bits set), 0 -> 0
        out = np.full(logits.shape, -np.inf, dtype=np.float32)
        body = out[:n].view(np.int32)
        np.bitwise_and(logits[:n].view(np.int32), keep, out=body)
        np.invert(keep, out=keep)
        np.bitwise_and(keep, _NEG_INF_BITS, out=keep)
        np.bitwise_or(body, keep, out=body)
        return out

    def accept(self, token: int) -> None:
        """Advances past `token`; GrammarError if the grammar does not allow it here."""
        token = int(token)
        if not 0 <= token < self._n:
            raise GrammarError(f"token id {token} is out of range for this vocabulary (n_vocab={self._n})")
        if not self._ll.consume_token(token):
            raise GrammarError(f"grammar {self.grammar.kind}: token {token} is not allowed here: "
                               f"{_short(self._ll.get_error())}")

    @property
    def done(self) -> bool:
        """True when the grammar is complete and only end-of-generation may follow."""
        return self._ll.is_stopped() and not self._ll.is_error()

    @property
    def accepting(self) -> bool:
        """True when the text so far is complete (it may still go on)."""
        return self._ll.is_accepting()


# Compiled grammars by source, per tokenizer: a server sees the same schema again and again.
_CACHE_SIZE = 32
_compiled: "weakref.WeakKeyDictionary[Tokenizer, OrderedDict[tuple, Grammar]]" = weakref.WeakKeyDictionary()
_compiled_lock = threading.Lock()


def compile_grammar(tokenizer: "Tokenizer", json_schema: Any = None, lark: str | None = None,
                    gbnf: str | None = None, regex: str | None = None) -> Grammar:
    """Exactly one of: json_schema (a dict or its JSON text), lark (llguidance's Lark dialect,
    which may embed schemas as `%json {...}`), gbnf (llama.cpp's grammar format), regex.
    Compiled and checked now; anything llguidance refuses raises GrammarError."""
    kind, text = _source(json_schema, lark, gbnf, regex)
    key = (kind, text)
    with _compiled_lock:
        known = _compiled.setdefault(tokenizer, OrderedDict())
        g = known.get(key)
        if g is not None:
            known.move_to_end(key)
            return g
    g = Grammar(tokenizer, kind, text)  # outside the lock: compiling may take a while
    with _compiled_lock:
        known[key] = g
        while len(known) > _CACHE_SIZE:
            known.popitem(last=False)
    return g
