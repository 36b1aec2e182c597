"""The mask is exact over the whole vocabulary: a token is allowed if and only if its bytes keep the
text a prefix of something the grammar accepts, and end-of-generation only where the text is complete.

The oracle is independent of llguidance: Python's `regex` module with partial=True says whether a
string can still be completed to a full match."""
from __future__ import annotations

import numpy as np
import pytest
import regex

from localinfer.constrain import GrammarError, compile_grammar
from localinfer.constrain.vocab_bridge import is_special

# ASCII only, so a token with any other byte can never be part of a match
PATTERN = r"[a-z]{1,6}( [a-z]{1,6}){0,2}: [0-9]{1,3}(\.[0-9]{1,2})?!"
PREFIXES = ["", "hello", "hello wor", "a b c", "a b c: 4", "a b c: 42.", "a b c: 42.5"]


def oracle(tokenizer, prefix: str, specials: np.ndarray) -> np.ndarray:
    """(n_vocab,) bool: tokens whose bytes extend `prefix` to a possible match (EOG excluded)."""
    out = np.zeros(tokenizer.n_vocab, dtype=bool)
    compiled = regex.compile(PATTERN)
    for i in range(tokenizer.n_vocab):
        if specials[i]:
            continue
        piece = tokenizer.token_to_bytes(i)
        if not piece or not piece.isascii():
            continue
        out[i] = compiled.fullmatch(prefix + piece.decode("ascii"), partial=True) is not None
    return out


def test_regex_mask_is_exact_at_every_prefix(tokenizer):
    g = compile_grammar(tokenizer, regex=PATTERN)
    specials = np.array([is_special(tokenizer, i) for i in range(tokenizer.n_vocab)])
    eog = sorted(tokenizer.eog_ids)
    for prefix in PREFIXES:
        m = g.matcher()
        for t in tokenizer.tokenize(prefix, add_special=False, parse_special=False):
            m.accept(t)
        allowed = m.allowed()
        expected = oracle(tokenizer, prefix, specials)
        complete = regex.fullmatch(PATTERN, prefix) is not None
        wrong = np.flatnonzero(allowed[~specials] != expected[~specials])
        assert wrong.size == 0, (prefix, [tokenizer.token_to_bytes(int(np.flatnonzero(~specials)[w]))
                                          for w in wrong[:10]])
        # special tokens: only end-of-generation, and only once the text is a whole match
        allowed_special = set(np.flatnonzero(allowed & specials).tolist())
        assert allowed_special == (set(eog) if complete else set()), prefix
        assert expected.any()  # every prefix here can go on


def test_mask_puts_forbidden_tokens_at_minus_infinity(tokenizer):
    g = compile_grammar(tokenizer, regex=PATTERN)
    m = g.matcher()
    for t in tokenizer.tokenize("ab", add_special=False, parse_special=False):
        m.accept(t)
    rng = np.random.default_rng(0)
    logits = rng.standard_normal(tokenizer.n_vocab + 3).astype(np.float32) * 10  # 3 padded rows too
    out = m.mask(logits)
    allowed = np.concatenate([m.allowed(), np.zeros(3, bool)])
    assert out.dtype == np.float32 and out.shape == logits.shape
    assert np.array_equal(out[allowed], logits[allowed])  # bit for bit
    assert np.all(out[~allowed] == -np.inf)
    assert np.isfinite(logits).all()  # the input is not touched
    with pytest.raises(ValueError):
        m.mask(logits[:10])


def test_accept_refuses_a_forbidden_token(tokenizer):
    m = compile_grammar(tokenizer, regex="[0-9]+").matcher()
    letter = tokenizer.tokenize("x", add_special=False, parse_special=False)[0]
    with pytest.raises(GrammarError):
        m.accept(letter)


def test_done_once_nothing_but_the_end_may_follow(tokenizer):
    m = compile_grammar(tokenizer, regex="(yes|no)").matcher()
    ids = tokenizer.tokenize("ye", add_special=False, parse_special=False)
    for t in ids:
        m.accept(t)
    assert not m.done and not m.accepting
    m.accept(tokenizer.tokenize("s", add_special=False, parse_special=False)[-1])
    assert m.done and m.accepting
    assert set(np.flatnonzero(m.allowed()).tolist()) == set(tokenizer.eog_ids)
