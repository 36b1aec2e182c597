"""SentencePiece (SPM) tokenizer tests: gemma-3-270m token-for-token against llama.cpp's
reference output beyond what test_tokenizer.py checks for both kinds (chat prompt, the prompts
and generated text of the greedy/logits files, a whole book's token count), the merge
loop against a readable reference, the word-cutting shortcut against merging whole
fragments, and small hand-made vocabularies for rules gemma-3 does not exercise
(add_space_prefix, score ties, missing byte tokens, defaults)."""

from __future__ import annotations

import random

import pytest

from localinfer.tokenizer import StreamingDetokenizer, Tokenizer
from localinfer.tokenizer.spm import SPACE, escape_whitespace, spm_merge, spm_merge_ref
from refdata import ref_case_ids

GEMMA3 = "gemma-3-270m-q4_k_m"
PROMPT_CASES = [("greedy", c) for c in ref_case_ids("greedy", GEMMA3)] + [("logits", c) for c in ref_case_ids("logits", GEMMA3)]


@pytest.fixture(scope="module")
def tok(gemma3_metadata) -> Tokenizer:
    return Tokenizer.from_metadata(gemma3_metadata)


@pytest.fixture(scope="module")
def tok_prefix(gemma3_metadata) -> Tokenizer:
    """gemma-3's vocab with add_space_prefix switched on, as llama-2-style SPM vocabs have."""
    return Tokenizer.from_metadata({**gemma3_metadata, "tokenizer.ggml.add_space_prefix": True})


# ---- llama.cpp reference data ----------------------------------------------


def test_chat_prompt_matches_llama_cpp(tok, load_ref):
    chat = load_ref("chat", GEMMA3)
    assert tok.tokenize(chat["formatted_prompt"], add_special=True, parse_special=True) == chat["token_ids"]
    assert tok.detokenize(chat["token_ids"], remove_special=True) == chat["formatted_prompt"]


@pytest.mark.parametrize("kind, case_id", PROMPT_CASES)
def test_reference_prompts_match_llama_cpp(tok, load_ref, kind, case_id):
    case = next(c for c in load_ref(kind, GEMMA3)["cases"] if c["id"] == case_id)
    expected = case["prompt_tokens"] if kind == "greedy" else case["tokens"]
    assert tok.tokenize(case["prompt"], add_special=True, parse_special=True) == expected


@pytest.mark.parametrize("case_id", ref_case_ids("greedy", GEMMA3))
def test_generated_text_matches_llama_cpp(tok, load_ref, case_id):
    """generated_text = llama_detokenize(non-EOG ids, unparse_special=False); streaming
    the same ids one at a time gives the same text."""
    case = next(c for c in load_ref("greedy", GEMMA3)["cases"] if c["id"] == case_id)
    ids = [t for t in case["generated_ids"] if not tok.is_eog(t)]
    assert tok.detokenize(ids, render_special=False) == case["generated_text"]
    stream = StreamingDetokenizer(tok, render_special=False)
    assert "".join(stream.feed(t) for t in ids) + stream.flush() == case["generated_text"]


def test_whole_book_token_count_matches_llama_cpp(tok, refdata_dir):
    # ../shared/ANCHOR.md section 5: llama-perplexity reports 161,112 gemma tokens
    # for the whole text (BOS included); detokenizing gives the text back.
    path = refdata_dir / "pride_and_prejudice.txt"
    if not path.is_file():
        pytest.skip("pride_and_prejudice.txt not in the reference data")
    text = path.read_text(encoding="utf-8")
    ids = tok.tokenize(text)
    assert len(ids) == 161_112
    assert tok.detokenize(ids, remove_special=True) == text


def test_vocab_facts(tok):
    assert tok.model.kind == "SPM"
    assert tok.n_vocab == 262_144
    assert (tok.bos_id, tok.eos_id, tok.eot_id) == (2, 1, 106)   # as llama.cpp reports them
    assert tok.vocab.special["unk"] == 3 and tok.vocab.special["pad"] == 0
    assert tok.add_bos is True and tok.add_eos is False
    assert tok.vocab.add_space_prefix is False
    # llama.cpp's end-of-generation set: eos "<eos>", "<end_of_turn>" (the eot it finds
    # by text) and "</s>" (a USER_DEFINED token whose text is on its EOG list)
    assert tok.eog_ids == frozenset({1, 106, 212})
    assert tok.token_text(236743) == SPACE and tok.token_to_bytes(236743) == b" "
    assert tok.token_text(248) == "<0x0A>" and tok.token_to_bytes(248) == b"\n"


def test_eog_text_token_becomes_control(tok):
    # llama.cpp gives "</s>" the CONTROL attribute with its EOG status, so it is no
    # longer cut out of text with parse_special=False (USER_DEFINED tokens would be)
    assert 212 in tok.tokenize("a</s>b")
    assert 212 not in tok.tokenize("a</s>b", parse_special=False)
    assert 203 in tok.tokenize("a<s>b", parse_special=False)       # "<s>": plain USER_DEFINED
    assert tok.token_to_bytes(212, render_special=False) == b""
    assert tok.token_to_bytes(203, render_special=False) == b"<s>"


# ---- hand-made cases on the real vocab ---------------------------------------


def _byte_ids(tok: Tokenizer, text: str) -> list[int]:
    return [tok.vocab.token_to_id[f"<0x{b:02X}>"] for b in text.encode("utf-8")]


@pytest.mark.parametrize("char", ["\ua66e", "\U00013000", "\U000e0080", "\x00"])
def test_byte_fallback_for_characters_outside_the_vocab(tok, char):
    assert char not in tok.vocab.token_to_id
    assert tok.tokenize(char, add_special=False) == _byte_ids(tok, char)
    t2i = tok.vocab.token_to_id
    assert tok.tokenize(f"a{char} b", add_special=False) == [t2i["a"], *_byte_ids(tok, char), t2i[SPACE + "b"]]
    assert tok.detokenize(tok.tokenize(f"a{char} b")) == f"<bos>a{char} b"


def test_text_right_after_a_special_token(tok):
    t2i = tok.vocab.token_to_id
    assert tok.tokenize("<start_of_turn>user") == [2, 105, t2i["user"]]   # no space prefix here
    ids = tok.tokenize("<start_of_turn>user", parse_special=False)
    assert 105 not in ids and tok.detokenize(ids, remove_special=True) == "<start_of_turn>user"
    assert tok.tokenize("<end_of_turn> x", add_special=False) == [106, t2i[SPACE + "x"]]


def test_leading_and_trailing_spaces(tok):
    t2i = tok.vocab.token_to_id
    assert tok.tokenize(" Hello ", add_special=False) == [t2i[SPACE + "Hello"], t2i[SPACE]]
    assert tok.tokenize("Hello", add_special=False) == [t2i["Hello"]]
    assert tok.tokenize(" ", add_special=False) == [t2i[SPACE]]
    assert tok.tokenize("  ", add_special=False) == [t2i["  "]]   # a USER_DEFINED token, cut out first
    for text in (" Hello ", "  a  ", "\tx \n", " "):
        assert tok.detokenize(tok.tokenize(text), remove_special=True) == text


def test_empty_string(tok):
    assert tok.tokenize("") == [2]
    assert tok.tokenize("", add_special=False) == []
    assert tok.detokenize([]) == ""
    assert tok.detokenize([2], remove_special=True) == ""


# ---- add_space_prefix (off in gemma-3, on in llama-2-style vocabs) ------------


def test_space_prefix_at_start_and_after_special_tokens(tok_prefix):
    t2i = tok_prefix.vocab.token_to_id
    assert tok_prefix.tokenize("Hello") == [2, t2i[SPACE + "Hello"]]
    assert tok_prefix.tokenize("Hello", add_special=False) == [t2i[SPACE + "Hello"]]
    # llama.cpp prefixes every text fragment that follows a special token -- also a
    # USER_DEFINED one such as "\n"
    assert tok_prefix.tokenize("<start_of_turn>user\nHi<end_of_turn>", add_special=False) == [
        105, t2i[SPACE + "user"], 107, t2i[SPACE + "Hi"], 106]
    assert tok_prefix.tokenize(" Hello", add_special=False) == [t2i[SPACE], t2i[SPACE + "Hello"]]


def test_space_prefix_is_removed_once_when_detokenizing(tok_prefix):
    t2i = tok_prefix.vocab.token_to_id
    hello, world = t2i[SPACE + "Hello"], t2i[SPACE + "world"]
    assert tok_prefix.detokenize([hello, world]) == "Hello world"
    # the strip is spent on the first token, even on a BOS without a space ...
    assert tok_prefix.detokenize([2, hello]) == "<bos> Hello"
    # ... and llama.cpp turns it off when remove_special drops that BOS
    assert tok_prefix.detokenize([2, hello], remove_special=True) == " Hello"
    assert tok_prefix.detokenize([t2i[SPACE], hello]) == " Hello"   # only one space goes


def test_streaming_space_prefix_rule(tok_prefix, tok):
    t2i = tok_prefix.vocab.token_to_id
    ids = [t2i[SPACE + "Hello"], t2i[SPACE + "world"]]

    def stream(t, **kw):
        s = StreamingDetokenizer(t, **kw)
        return "".join(s.feed(i) for i in ids) + s.flush()

    assert stream(tok_prefix) == " Hello world"   # generation: token_to_piece(lstrip=0)
    assert stream(tok_prefix, strip_leading_space=True) == tok_prefix.detokenize(ids) == "Hello world"
    assert stream(tok, strip_leading_space=True) == " Hello world"   # no add_space_prefix: nothing to strip


# ---- streaming -----------------------------------------------------------------

def test_streaming_holds_byte_fallback_tokens_until_the_character_is_complete(tok):
    text = "ok \ua66e\U00013000!"
    ids = tok.tokenize(text, add_special=False)
    assert len(ids) == 2 + 3 + 4 + 1
    stream = StreamingDetokenizer(tok)
    chunks = [stream.feed(t) for t in ids]
    assert chunks == ["ok", " ", "", "", "\ua66e", "", "", "", "\U00013000", "!"]
    assert stream.flush() == ""
    stream = StreamingDetokenizer(tok)
    head = "".join(stream.feed(t) for t in ids[:4])   # stops inside the 3-byte character
    assert head == "ok " and stream.flush() == "\ufffd"


def test_unknown_token_id_is_a_clear_error(tok):
    for bad in (262_144, -1):
        with pytest.raises(ValueError, match=rf"token id {bad}\b.*n_vocab=262144"):
            tok.detokenize([2, bad])


# ---- the merge loop and the word-cutting shortcut --------------------------------


def test_spm_merge_matches_reference_loop(tok):
    t2i, scores = tok.vocab.token_to_id, tok._encoder.scores
    rng = random.Random(4321)
    alphabet = list("aeiounrstlhdcm▁▁▁>/<.,'") + ["é", "你", "好", "🍕", "\ua66e", "Ж"]
    for _ in range(1500):
        word = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        assert spm_merge(word, t2i, scores) == spm_merge_ref(word, t2i, scores), repr(word)


def test_word_cuts_do_not_change_the_result(tok, refdata_dir):
    """SpmEncoder cuts fragments before "▁"; merging each whole fragment must agree.
    ">▁</" is the one gemma-3 token with a "▁" inside, so texts include "> </"."""
    enc = tok._encoder
    rng = random.Random(7)
    pieces = ["the", " ", "  ", ">", " </", "</", "a", "b>", " of", "ing", "\ua66e", "é", "你好", "x"]
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 25))) for _ in range(600)]
    texts += ["<b> </b>", "a > </ b", "x>  </y", "if a> </s"]
    book = refdata_dir / "pride_and_prejudice.txt"
    if book.is_file():
        texts += book.read_text(encoding="utf-8")[:20_000].split("\n")
    for text in texts:
        assert enc.encode(text) == list(enc.encode_word(escape_whitespace(text))), repr(text)


def test_long_text_special_token_filter_changes_nothing(tok, load_ref, monkeypatch):
    """`partition` rules special tokens out by their 2-character pieces for long texts;
    the fragments must be the ones the plain search gives."""
    from localinfer.tokenizer import special

    chat = load_ref("chat", GEMMA3)["formatted_prompt"]
    text = (chat + "<s> </s>\n\n\t\t  x<unused12><eos>[multimodal]") * 20
    assert len(text) >= special._FILTER_MIN_LEN
    for parse_special in (True, False):
        filtered = special.partition(text, tok._specials, parse_special)
        monkeypatch.setattr(special, "_FILTER_MIN_LEN", 10**9)
        assert special.partition(text, tok._specials, parse_special) == filtered
        monkeypatch.undo()


def test_plain_split_finds_what_the_search_finds(tok, load_ref):
    """Tokens that strip nothing are cut out with str.split when no spans are guarded; an empty span
    list-entry sends the same text through the search loop instead."""
    from localinfer.tokenizer import special

    chat = load_ref("chat", GEMMA3)["formatted_prompt"]
    text = (chat + "\n\n\n<eos>\n<start_of_turn>\n\n" + "a\n" * 5 + "<eos><eos>") * 10
    for parse_special in (True, False):
        plain = special.partition(text, tok._specials, parse_special)
        assert plain == special.partition(text, tok._specials, parse_special, [(0, 0)])
        assert any(isinstance(f, int) for f in plain) and any(isinstance(f, str) for f in plain)


# ---- small hand-made SPM vocabularies ---------------------------------------------


def _tiny_spm_metadata(pieces: dict[str, float], **overrides) -> dict:
    """"<unk>", "<s>", "</s>", the 256 byte tokens, then `pieces` (text -> score)."""
    bytes_ = [f"<0x{b:02X}>" for b in range(256)]
    md = {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": ["<unk>", "<s>", "</s>", *bytes_, *pieces],
        "tokenizer.ggml.scores": [0.0, 0.0, 0.0, *[0.0] * 256, *pieces.values()],
        "tokenizer.ggml.token_type": [2, 3, 3, *[6] * 256, *[1] * len(pieces)],
    }
    md.update(overrides)
    return md


def _texts(tok: Tokenizer, ids: list[int]) -> list[str]:
    return [tok.token_text(t) for t in ids]


def test_tiny_defaults_are_llama_cpp_spm_defaults():
    pieces = {SPACE: -1.0, "H": -2.0, "i": -3.0, SPACE + "H": -1.5, SPACE + "Hi": -1.0}
    tok = Tokenizer.from_metadata(_tiny_spm_metadata(pieces))
    assert (tok.bos_id, tok.eos_id, tok.vocab.special["unk"]) == (1, 2, 0)
    assert tok.add_bos and not tok.add_eos and tok.vocab.add_space_prefix
    assert tok.eog_ids == frozenset({2})                 # eos, and "</s>" by its text
    ids = tok.tokenize("Hi")
    assert _texts(tok, ids) == ["<s>", SPACE + "Hi"]      # BOS, then the space prefix
    assert tok.detokenize(ids) == "<s> Hi"
    assert tok.detokenize(ids[1:]) == "Hi"


def test_tiny_highest_score_wins_and_ties_go_left():
    md = {"tokenizer.ggml.add_space_prefix": False, "tokenizer.ggml.add_bos_token": False}
    equal = Tokenizer.from_metadata(_tiny_spm_metadata({"a": 0.0, "b": 0.0, "ab": -1.0, "ba": -1.0}, **md))
    assert _texts(equal, equal.tokenize("aba")) == ["ab", "a"]
    right = Tokenizer.from_metadata(_tiny_spm_metadata({"a": 0.0, "b": 0.0, "ab": -2.0, "ba": -1.0}, **md))
    assert _texts(right, right.tokenize("aba")) == ["a", "ba"]


def test_tiny_tokens_are_only_reached_through_pairs():
    md = {"tokenizer.ggml.add_space_prefix": False}
    tok = Tokenizer.from_metadata(_tiny_spm_metadata({"a": 0.0, "b": 0.0, "c": 0.0, "abc": 5.0}, **md))
    assert _texts(tok, tok.tokenize("abc", add_special=False)) == ["a", "b", "c"]
    pieces = {"a": 0.0, "b": 0.0, "c": 0.0, "bc": -1.0, "abc": -9.0}
    tok = Tokenizer.from_metadata(_tiny_spm_metadata(pieces, **md))
    assert _texts(tok, tok.tokenize("abc", add_special=False)) == ["abc"]


def test_tiny_without_scores_merges_left_to_right():
    md = _tiny_spm_metadata({"a": 0.0, "aa": 0.0}, **{"tokenizer.ggml.add_space_prefix": False})
    del md["tokenizer.ggml.scores"]
    tok = Tokenizer.from_metadata(md)
    assert _texts(tok, tok.tokenize("aaa", add_special=False)) == ["aa", "a"]


def test_tiny_byte_fallback_and_missing_byte_token():
    tok = Tokenizer.from_metadata(_tiny_spm_metadata({"a": 0.0}, **{"tokenizer.ggml.add_space_prefix": False}))
    ids = tok.tokenize("aé", add_special=False)
    assert _texts(tok, ids) == ["a", "<0xC3>", "<0xA9>"]
    assert tok.detokenize(ids) == "aé"
    md = _tiny_spm_metadata({"a": 0.0})
    md["tokenizer.ggml.tokens"] = [
        t if t != "<0xA9>" else "<byte A9 missing>" for t in md["tokenizer.ggml.tokens"]]
    tok = Tokenizer.from_metadata(md)
    with pytest.raises(ValueError, match=r"cannot tokenize 'é'.*no byte token <0xA9>"):
        tok.tokenize("é")


def test_tiny_bad_scores_are_clear_errors():
    md = _tiny_spm_metadata({"a": 0.0})
    with pytest.raises(ValueError, match="SPM vocabulary has 3 scores for 260 tokens"):
        Tokenizer.from_metadata({**md, "tokenizer.ggml.scores": [0.0, 0.0, 0.0]})
    with pytest.raises(ValueError, match="tokenizer.ggml.scores must be a list of numbers"):
        Tokenizer.from_metadata({**md, "tokenizer.ggml.scores": ["x"] * 260})
