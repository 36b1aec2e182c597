"""The byte-level BPE tokenizer (SmolLM2): llama.cpp's reference output for what test_tokenizer.py
does not check for both kinds (chat prompt, vocab facts), plus oracles for the
pieces that refdata cannot reach (BPE merge loop, llama.cpp's hand-written
pre-tokenizer matchers) and the error paths."""

from __future__ import annotations

import random

import pytest
import regex

from localinfer.tokenizer import StreamingDetokenizer, Tokenizer
from localinfer.tokenizer.bpe import BYTE_TO_UNICODE, MergeRanks, bpe_merge, bpe_merge_ref, parse_merges
from localinfer.tokenizer.detokenizer import clean_up_spaces
from localinfer.tokenizer.pretokenize import PRE_TOKENIZERS, PreTokenizer
from refdata import ref_case_ids

SMOLLM2 = "smollm2-135m-instruct-q4_1"
CASE_IDS = ref_case_ids("tokenize", SMOLLM2)


@pytest.fixture(scope="module")
def tok(smollm2_metadata) -> Tokenizer:
    return Tokenizer.from_metadata(smollm2_metadata)


@pytest.fixture(scope="module")
def cases(load_ref) -> dict[str, dict]:
    return {c["id"]: c for c in load_ref("tokenize", SMOLLM2)["cases"]}


# ---- llama.cpp reference data ----------------------------------------------


def test_chat_prompt_matches_llama_cpp(tok, load_ref):
    chat = load_ref("chat", SMOLLM2)
    assert tok.tokenize(chat["formatted_prompt"], add_special=False, parse_special=True) == chat["token_ids"]
    assert tok.detokenize(chat["token_ids"]) == chat["formatted_prompt"]


def test_vocab_facts(tok, cases):
    assert tok.n_vocab == 49152
    assert (tok.bos_id, tok.eos_id, tok.eot_id) == (1, 2, 0)   # as llama.cpp reports for this file
    assert tok.add_bos is False and tok.add_eos is False
    # eos "<|im_end|>", "<|endoftext|>", and "<reponame>", which llama.cpp takes for
    # the FIM repo-name token by its text and so also counts as end-of-generation.
    assert tok.eog_ids == frozenset({0, 2, 4})
    assert tok.is_eog(2) and not tok.is_eog(1)
    assert tok.token_text(1) == "<|im_start|>"
    assert tok.token_text(905) == "Ġworld"   # raw vocab text, byte-level spelling


def test_render_special_false_hides_control_tokens(tok, cases):
    ids = cases["chatml_special"]["ids"]
    assert tok.detokenize(ids, render_special=False) == "user\nHi there"
    assert tok.token_to_bytes(1, render_special=False) == b""
    assert tok.token_to_bytes(1) == b"<|im_start|>"


# ---- streaming -------------------------------------------------------------

@pytest.mark.parametrize("case_id", [c for c in ("emoji", "chinese", "japanese") if c in CASE_IDS])
def test_streaming_holds_back_split_characters(tok, cases, case_id):
    """The byte-level tokens of emoji and CJK text really do split characters: some chunk is held
    back (empty) until its character is complete (test_tokenizer.py checks the joined text)."""
    stream = StreamingDetokenizer(tok)
    chunks = [stream.feed(t) for t in cases[case_id]["ids"]]
    assert "" in chunks


def test_streaming_flush_replaces_incomplete_tail(tok, cases):
    ids = cases["emoji"]["ids"]
    # "I love pizza " then the first byte-level token of 🍕 (an incomplete 4-byte sequence)
    prefix = ids[:4]
    stream = StreamingDetokenizer(tok)
    text = "".join(stream.feed(t) for t in prefix)
    assert "\ufffd" not in text
    tail = stream.flush()
    assert tail and set(tail) == {"\ufffd"}
    assert text + tail == tok.detokenize(prefix)   # detokenize uses errors="replace" too


# ---- bad input -------------------------------------------------------------


@pytest.mark.parametrize("bad", [49152, 10**9, -1])
def test_unknown_token_id_is_a_clear_error(tok, bad):
    for call in (lambda: tok.detokenize([19556, bad]), lambda: tok.token_to_bytes(bad),
                 lambda: tok.token_text(bad), lambda: StreamingDetokenizer(tok).feed(bad)):
        with pytest.raises(ValueError, match=rf"token id {bad}\b.*n_vocab=49152"):
            call()


def test_non_integer_token_id(tok):
    with pytest.raises(ValueError, match="not an integer"):
        tok.detokenize(["5"])


def _tiny_bpe_metadata(**overrides) -> dict:
    """A self-made byte-level BPE vocab: 256 byte tokens, two merges, three specials."""
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + BYTE_TO_UNICODE + ["he", "hel"]
    md = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "gpt-2",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": [3, 3, 3] + [1] * 258,
        "tokenizer.ggml.merges": ["h e", "he l"],
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
    }
    md.update(overrides)
    return md


@pytest.mark.parametrize("name, message", [
    ("t5", r"'t5' \(Unigram \(UGM\)\) is not supported yet; supported: bert, gpt2, llama"),
    ("bogus", r"unknown tokenizer model tokenizer\.ggml\.model='bogus'; supported: bert, gpt2, llama"),
])
def test_unsupported_tokenizer_model(name, message):
    with pytest.raises(ValueError, match=message):
        Tokenizer.from_metadata(_tiny_bpe_metadata(**{"tokenizer.ggml.model": name}))


def test_unknown_pre_tokenizer_names_it_and_lists_known():
    with pytest.raises(ValueError, match=r"tokenizer\.ggml\.pre='no-such-pre'.*known pre-tokenizers:.*smollm") as e:
        Tokenizer.from_metadata(_tiny_bpe_metadata(**{"tokenizer.ggml.pre": "no-such-pre"}))
    for name in ("default", "gpt-2", "llama-bpe", "llama3", "qwen2", "smollm"):
        assert name in str(e.value)


def test_missing_pre_tokenizer_falls_back_to_default():
    # llama.cpp warns and uses the "default" regexes when tokenizer.ggml.pre is absent
    md = _tiny_bpe_metadata()
    del md["tokenizer.ggml.pre"]
    tok = Tokenizer.from_metadata(md)
    assert tok.detokenize(tok.tokenize("hello, world")) == "hello, world"


def test_tiny_vocab_specials_bos_and_byte_fallback():
    tok = Tokenizer.from_metadata(_tiny_bpe_metadata(**{"tokenizer.ggml.add_bos_token": True}))
    ids = tok.tokenize("help<|im_end|>")
    he_l = tok.vocab.token_to_id["hel"]
    assert ids == [1, he_l, tok.vocab.token_to_id["p"], 2]
    assert tok.detokenize(ids, remove_special=True) == "help<|im_end|>"   # only the BOS goes
    assert tok.detokenize(ids, render_special=False) == "help"
    assert tok.tokenize("", add_special=True) == [1]
    assert tok.eog_ids == frozenset({0, 2})   # "<|endoftext|>" found by text, plus eos
    assert tok.eot_id == 0


def test_add_bos_without_bos_id_is_an_error():
    # five tokens: llama.cpp's BPE default bos (11) is out of range, so there is no bos
    md = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2",
          "tokenizer.ggml.tokens": list("abcde"), "tokenizer.ggml.merges": [],
          "tokenizer.ggml.add_bos_token": True}
    with pytest.raises(ValueError, match="add_bos_token is true, but tokenizer.ggml.bos_token_id is not set"):
        Tokenizer.from_metadata(md)


def test_out_of_range_special_id_keeps_default():
    tok = Tokenizer.from_metadata(_tiny_bpe_metadata(**{"tokenizer.ggml.bos_token_id": 10**6}))
    assert tok.bos_id == 11   # llama.cpp: "bad special token ... using default id"


def test_duplicate_token_text_is_an_error():
    md = _tiny_bpe_metadata()
    md["tokenizer.ggml.tokens"] = md["tokenizer.ggml.tokens"] + ["he"]
    md["tokenizer.ggml.token_type"] = md["tokenizer.ggml.token_type"] + [1]
    with pytest.raises(ValueError, match="duplicate token in vocabulary: 'he'"):
        Tokenizer.from_metadata(md)


def test_user_defined_tokens_parse_even_without_parse_special(smollm2_metadata):
    md = dict(smollm2_metadata)
    types = list(md["tokenizer.ggml.token_type"])
    types[1] = 4   # make "<|im_start|>" USER_DEFINED
    md["tokenizer.ggml.token_type"] = types
    tok = Tokenizer.from_metadata(md)
    assert tok.tokenize("<|im_start|>user<|im_end|>", parse_special=False)[0] == 1
    assert 2 not in tok.tokenize("<|im_start|>user<|im_end|>", parse_special=False)   # CONTROL: not parsed
    assert tok.token_to_bytes(1, render_special=False) == b"<|im_start|>"     # always rendered


# ---- oracles below the reference data ----------------------------------------


def test_clean_up_spaces_like_llama_cpp():
    assert clean_up_spaces(b"Hello , world . Ok ? Yes !") == b"Hello, world. Ok? Yes!"
    assert clean_up_spaces(b"it 's I 'm we 're you 've") == b"it's I'm we're you've"
    assert clean_up_spaces(b"don 't he 'd we 'll") == b"don 't he 'd we 'll"   # kept, as in llama.cpp
    assert clean_up_spaces(b"a ' b") == b"a'b"
    assert clean_up_spaces(b"") == b"" and clean_up_spaces(b" .") == b"."


def test_gpt2_pre_detokenize_cleans_spaces(smollm2_metadata):
    md = dict(smollm2_metadata, **{"tokenizer.ggml.pre": "gpt-2"})
    tok = Tokenizer.from_metadata(md)
    assert tok.detokenize(tok.tokenize("a , b")) == "a, b"   # clean_spaces is on for gpt-2


def test_merge_ranks_are_parse_merges(smollm2_metadata):
    """MergeRanks answers what parse_merges' dict holds, for SmolLM2's merges and for merges with
    spaces in odd places, repeated ones and one without a space."""
    odd = ["a b", "a b", " x y", "x y z", "  q", "p ", "nospace", "x y z", "ab c", "a bc"]
    for merges in (list(smollm2_metadata["tokenizer.ggml.merges"]), odd):
        ref, ranks = parse_merges(merges), MergeRanks(merges)
        assert dict(ranks.items()) == {pair: r for pair, r in ref.items() if pair != ("", "")}
        assert list(ranks) == [pair for pair in ref if pair != ("", "")] and len(ranks) == len(ref) - (("", "") in ref)
        for (a, b), r in ref.items():
            if a:
                assert ranks.get((a, b)) == ranks[(a, b)] == r and (a, b) in ranks
    ranks = MergeRanks(odd)
    assert ranks.get(("x y", "z")) is None and ("x y", "z") not in ranks   # "x y z" splits as ("x", "y z")
    assert ranks[("x", "y z")] == 3 and ranks[(" x", "y")] == 2 and ranks[(" ", "q")] == 4 and ranks[("p", "")] == 5
    assert ranks.get(("", "")) is None and ranks.get(("a", "c")) is None
    with pytest.raises(KeyError):
        ranks[("a", "c")]


def test_bpe_merge_matches_reference_loop(smollm2_metadata):
    ranks = parse_merges(smollm2_metadata["tokenizer.ggml.merges"])
    rng = random.Random(1234)
    alphabet = list("aaeeiinorsttlhĠĊ") + BYTE_TO_UNICODE[:40]
    for _ in range(2000):
        word = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert bpe_merge(word, ranks) == bpe_merge_ref(word, ranks)
    for word in ["ĠHello", "antidisestablishmentarianism" * 3, "aaaaaaaaaaa", "ĠĠĠĠĠĠĠ"]:
        assert bpe_merge(word, ranks) == bpe_merge_ref(word, ranks)


# Python ports of llama.cpp's hand-written matchers (src/unicode.cpp,
# unicode_regex_split_custom_gpt2 / _llama3), over the same category flags.
_L, _N, _S = regex.compile(r"\p{L}"), regex.compile(r"\p{N}"), regex.compile(r"\s")


def _custom_split(text: str, llama3: bool) -> list[str]:
    n = len(text)
    is_l = lambda p: 0 <= p < n and bool(_L.match(text[p]))    # noqa: E731
    is_n = lambda p: 0 <= p < n and bool(_N.match(text[p]))    # noqa: E731
    is_s = lambda p: 0 <= p < n and bool(_S.match(text[p]))    # noqa: E731
    out, pos = [], 0

    def take(end):
        nonlocal pos
        out.append(text[pos:end])
        pos = end

    while pos < n:
        c = text[pos]
        if c == "'" and pos + 1 < n:
            nx = text[pos + 1]
            nn = text[pos + 2] if pos + 2 < n else ""
            if llama3:   # llama3's contractions are case-insensitive
                nx, nn = nx.lower(), nn.lower()
            if nx in "stmd":
                take(pos + 2)
                continue
            if nx + nn in ("re", "ve", "ll"):
                take(pos + 3)
                continue
        if llama3:
            if c not in "\r\n" and not is_n(pos) and (is_l(pos) or is_l(pos + 1)):
                end = pos + 1
                while is_l(end):
                    end += 1
                take(end)
                continue
            if is_n(pos):
                while is_n(pos):
                    end = pos
                    while is_n(end) and end - pos < 3:
                        end += 1
                    take(end)
                continue
        q = pos + 1 if c == " " else pos
        if not llama3 and (is_l(q) or is_n(q)):
            kind = is_l if is_l(q) else is_n
            end = q
            while kind(end):
                end += 1
            take(end)
            continue
        if q < n and not (is_s(q) or is_l(q) or is_n(q)):
            end = q
            while end < n and not (is_s(end) or is_l(end) or is_n(end)):
                end += 1
            while llama3 and end < n and text[end] in "\r\n":
                end += 1
            take(end)
            continue
        nws, last_nl = 0, 0
        while is_s(pos + nws):
            if text[pos + nws] in "\r\n":
                last_nl = pos + nws + 1
            nws += 1
        if llama3 and last_nl:
            take(last_nl)
        elif nws > 1 and pos + nws < n:
            take(pos + nws - 1)
        elif nws:
            take(pos + nws)
        else:
            take(pos + 1)
    return out


_ALPHABET = (list("abcXYZ stdmrelvSTDRE'''  \n\r\t09,.!?-_$+<>") +
             ["é", "ñ", "你", "好", "Ж", "٣", "²", "½", "\u0301", "\u200d", "\u3000", "\xa0",
              "\u2028", "\x85", "\x00", "\x1f", "🍕", "🏽", "—", "…", "\U000e0080", "\ue000"])


@pytest.mark.parametrize("family, llama3", [("gpt-2", False), ("llama-bpe", True)])
def test_pre_tokenizer_regex_matches_llama_cpp_custom_matcher(family, llama3):
    pre = PreTokenizer(PRE_TOKENIZERS[family].regexes)
    rng = random.Random(99)
    for _ in range(3000):
        text = "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(1, 24)))
        assert pre.split(text) == _custom_split(text, llama3), repr(text)


def test_smollm_pre_tokenizer_splits_digits_first():
    pre = PreTokenizer(PRE_TOKENIZERS["smollm"].regexes)
    assert pre.split("Numbers: 42 x2024") == ["Numbers", ":", " ", "4", "2", " x", "2", "0", "2", "4"]
