"""Both tokenizer kinds token-for-token against llama.cpp's reference output, one test per check,
parametrised over the vocabularies: SmolLM2's byte-level BPE and gemma-3's SentencePiece (tokenize in
three modes, detokenize, the pieces' bytes, streaming detokenization of multi-byte text).
What only one kind has is in test_bpe.py (pre-tokenizers, the BPE merge loop) and test_spm.py
(space prefix, byte fallback, the SPM merge loop, scores); both also check their own chat prompt."""
from __future__ import annotations

import pytest

from localinfer.tokenizer import StreamingDetokenizer, Tokenizer
from refdata import ref_case_ids

VOCABS = {  # kind -> (the conftest fixture of the model's metadata, the reference data's model name)
    "bpe": ("smollm2_metadata", "smollm2-135m-instruct-q4_1"),
    "spm": ("gemma3_metadata", "gemma-3-270m-q4_k_m"),
}
CASES = [(kind, case_id) for kind, (_, ref) in VOCABS.items() for case_id in ref_case_ids("tokenize", ref)]
MODES = {
    "ids": {},                                          # add_special=True, parse_special=True
    "ids_parse_special_false": {"parse_special": False},
    "ids_add_special_false": {"add_special": False},
}
MULTIBYTE_CASES = {"emoji", "chinese", "japanese", "cyrillic", "spanish_accents", "combining_marks", "punctuation"}


@pytest.fixture(scope="module")
def vocab(request, load_ref) -> tuple[Tokenizer, dict[str, dict]]:
    """(the tokenizer of the kind a test is parametrised with, its reference cases by id)"""
    metadata_fixture, ref = VOCABS[request.param]
    tok = Tokenizer.from_metadata(request.getfixturevalue(metadata_fixture))
    return tok, {c["id"]: c for c in load_ref("tokenize", ref)["cases"]}


def each_case(cases):
    """parametrize over (kind, case id), the kind going to the vocab fixture"""
    return pytest.mark.parametrize("vocab, case_id", cases, indirect=["vocab"])


@pytest.mark.parametrize("mode", list(MODES))
@each_case(CASES)
def test_tokenize_matches_llama_cpp(vocab, case_id, mode):
    tok, case = vocab[0], vocab[1][case_id]
    assert tok.tokenize(case["text"], **MODES[mode]) == case[mode]


@each_case(CASES)
def test_detokenize_matches_llama_cpp(vocab, case_id):
    tok, case = vocab[0], vocab[1][case_id]
    assert tok.detokenize(case["ids"]) == case["detokenized"]
    assert tok.detokenize(case["ids"], remove_special=True) == case["detokenized_remove_special"]


@each_case(CASES)
def test_pieces_match_llama_cpp(vocab, case_id):
    tok, case = vocab[0], vocab[1][case_id]
    for key_ids, key_pieces in (("ids", "pieces"), ("ids_parse_special_false", "pieces_parse_special_false")):
        got = [tok.token_to_bytes(t).hex() for t in case[key_ids]]
        assert got == [p["hex"] for p in case[key_pieces]]


@each_case([(k, c) for k, c in CASES if c in MULTIBYTE_CASES])
def test_streaming_detokenizer_matches_detokenize(vocab, case_id):
    """One token at a time gives the same text, and never a replacement character that the
    whole text does not have (a character split over tokens is held back until complete)."""
    tok, case = vocab[0], vocab[1][case_id]
    ids = case["ids"]
    stream = StreamingDetokenizer(tok)
    chunks = [stream.feed(t) for t in ids] + [stream.flush()]
    full = tok.detokenize(ids)
    assert "".join(chunks) == full
    if "\ufffd" not in full:
        assert not any("\ufffd" in c for c in chunks)


@pytest.mark.parametrize("kind", list(VOCABS))
def test_short_texts_before_the_c_merger_give_its_ids(request, load_ref, monkeypatch, kind):
    """A fresh tokenizer merges a short text's words in Python (no C merger built: that is most of a
    start's first-token wait); every reference case gives the ids llama.cpp gives, and the first long
    text builds the merger."""
    from localinfer.tokenizer import merge_c
    from localinfer.tokenizer.words import WordEncoder

    if not merge_c.available():
        pytest.skip("the C kernels are not built")
    monkeypatch.setattr(WordEncoder, "PY_MERGE_MAX", 2048)
    metadata_fixture, ref = VOCABS[kind]
    tok = Tokenizer.from_metadata(request.getfixturevalue(metadata_fixture))
    for case in load_ref("tokenize", ref)["cases"]:
        if len(case["text"]) <= 2048:
            assert tok.tokenize(case["text"]) == case["ids"], case["id"]
    assert tok._encoder._merger is None
    letters = "bcdfghjklmnpqrstvwxz"
    words = " ".join(a + "o" + b + "u" + c for a in letters for b in letters[:8] for c in letters[:4])   # 640 new words
    assert tok.tokenize(words) and tok._encoder._merger is not None
