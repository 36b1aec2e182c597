"""The WordPiece ("bert") tokenizer, on a vocabulary trained here and converted by our converter:
token for token against `tokenizers`' BertWordPieceTokenizer on a multilingual sample, pairs as
llama.cpp's rerank builds them, against llama-tokenize where one is found (also where llama.cpp and
Hugging Face differ), the fast paths against their references, cost on hostile input, bad vocabularies.
"""
from __future__ import annotations

import os
import random
import shutil
import subprocess
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("transformers")

from gguf import GGUFWriter  # noqa: E402

from localinfer.files.gguf_file import GGUFFile  # noqa: E402
from localinfer.quant.hf_tokenizer import write_wordpiece_vocab  # noqa: E402
from localinfer.tokenizer import Tokenizer  # noqa: E402
from localinfer.tokenizer import wpm, wpm_normalize  # noqa: E402
from localinfer.tokenizer.vocab import K  # noqa: E402
from wordpiece_vocab import SAMPLE, write_bert_tokenizer  # noqa: E402

# Beyond the sample: edges of the normalizer and of the matching, where llama.cpp and HF agree.
EDGES = [
    "", " ", "   \t\n  ", "a", "A.", "...", "!!!", "hello", "Hello, World!", "  leading and trailing  ",
    "UNKNOWN LETTERS: ꙮ ᚠᛇᚻ ⴰⵣ", "x" * 100, "ab" * 50 + " tail", "3.14159265358979 1,000,000",
    "[CLS] in the text [SEP] and [MASK] too", "[cls] lower-case is not special", "[UNK]",
    "emoji 🙂🙂 🚀x 👩‍👩‍👧 flags 🇫🇷", "mixed中文and English字", "ＦＵＬＬＷＩＤＴＨ １２３",
    "a\u0301\u0302\u0303 stacked marks", "\u2028line\u2029para\u202fnarrow", "ΣΊΣΥΦΟΣ σίσυφος",
    "don't won't y'all", "e.g. i.e. U.S.A. a/b/c x-y_z", "\t\t\t", "ǅ ǈ ǋ titlecase",
]

# Texts where llama.cpp's WordPiece differs from HF's (see tokenizer/wpm.py): checked against
# llama-tokenize only, and by what llama.cpp does, below.
DIFFERENT = [
    "한국어 텍스트입니다", "हिन्दी भाषा नमस्ते", "a\vb c\fd e\x85f", "un\U000e0080assigned", "x" * 150,
    "a▁b ▁c", "İSTANBUL", "z\u0000z\ufffdz",
]

PAIRS = [
    ("what is a fox?", "The quick brown fox jumps over the lazy dog."),
    ("Café ou thé ?", SAMPLE[3]),
    ("", "an empty query"),
    ("中文", "东京、北京和上海都是大城市。"),
]

# llama.cpp's llama-tokenize, built by the user outside this repository: $LLAMA_TOKENIZE or on PATH
LLAMA_TOKENIZE = Path(os.environ.get("LLAMA_TOKENIZE") or shutil.which("llama-tokenize") or "llama-tokenize")


def write_vocab_gguf(folder: Path, path: Path) -> Path:
    """A vocabulary-only "bert" GGUF: the hyper-parameters llama.cpp reads before its vocabulary."""
    w = GGUFWriter(str(path), "bert")
    w.add_context_length(512)
    w.add_embedding_length(64)
    w.add_block_count(1)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_layer_norm_eps(1e-12)
    w.add_causal_attention(False)
    write_wordpiece_vocab(w, folder)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def metadata(path: Path) -> dict:
    with GGUFFile(path) as f:
        return dict(f.metadata)


@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory) -> Path:
    # config.json asks for more rows than the tokenizer has: the converter pads them
    return write_bert_tokenizer(tmp_path_factory.mktemp("bert"), vocab_size=600, n_vocab=640)


@pytest.fixture(scope="module")
def bert_gguf(bert_folder, tmp_path_factory) -> Path:
    return write_vocab_gguf(bert_folder, tmp_path_factory.mktemp("gguf") / "bert-vocab.gguf")


@pytest.fixture(scope="module")
def tok(bert_gguf) -> Tokenizer:
    return Tokenizer.from_metadata(metadata(bert_gguf))


@pytest.fixture(scope="module")
def hf(bert_folder):
    from tokenizers import BertWordPieceTokenizer
    return BertWordPieceTokenizer(str(bert_folder / "vocab.txt"), lowercase=True)


# ---- against Hugging Face ---------------------------------------------------------------------------

@pytest.mark.parametrize("text", SAMPLE + EDGES)
def test_same_ids_as_hf_wordpiece(tok, hf, text):
    assert tok.tokenize(text) == hf.encode(text).ids
    assert tok.tokenize(text, add_special=False) == hf.encode(text, add_special_tokens=False).ids


def test_the_sample_is_not_mostly_unknown(tok):
    """The comparison means something only if the vocabulary covers the sample."""
    ids = [t for text in SAMPLE for t in tok.tokenize(text, add_special=False)]
    assert ids.count(tok.vocab.special["unk"]) < len(ids) / 50


@pytest.mark.parametrize("query,document", PAIRS)
def test_pairs_as_hf_and_llama_cpp_rerank(tok, hf, query, document):
    """[CLS] query [SEP] document [SEP], the document's part segment 1: HF's pair template, and what
    llama.cpp's format_prompt_rerank builds from add_bos/add_eos/add_sep."""
    pair = tok.tokenize_pair(query, document)
    expected = hf.encode(query, document)
    assert pair.ids == expected.ids
    assert pair.types == expected.type_ids


def test_special_token_text_in_a_pair_is_text(tok):
    """llama.cpp tokenizes a pair's texts with parse_special=False (HF would take "[SEP]" as the token)."""
    cls, sep = tok.vocab.special["bos"], tok.vocab.special["sep"]
    query, document = "[SEP] in a query", "is text, not a separator"
    plain = [tok.tokenize(t, add_special=False, parse_special=False) for t in (query, document)]
    assert sep not in plain[0]
    assert tok.tokenize_pair(query, document).ids == [cls, *plain[0], sep, *plain[1], sep]


def test_transformers_tokenizer_agrees(tok, bert_folder):
    """The folder as transformers loads it (what a user's checkpoint gives) and our GGUF agree."""
    from transformers import AutoTokenizer
    auto = AutoTokenizer.from_pretrained(str(bert_folder))
    for text in SAMPLE[:6]:
        assert tok.tokenize(text) == auto(text)["input_ids"]
    q, d = PAIRS[0]
    enc = auto(q, d)
    assert tok.tokenize_pair(q, d) == (enc["input_ids"], enc["token_type_ids"])


# ---- where llama.cpp is the reference ------------------------------------------------------------

def _llama_tokenize(gguf: Path, text: str, parse_special: bool = True) -> list[int]:
    args = [str(LLAMA_TOKENIZE), "-m", str(gguf), "--stdin", "--no-escape", "--ids", "--log-disable"]
    out = subprocess.run(args + ([] if parse_special else ["--no-parse-special"]), input=text.encode("utf-8"),
                         capture_output=True, check=True, timeout=60).stdout.decode()
    return [int(t) for t in out.strip().splitlines()[-1].strip("[]").split(",") if t.strip()]


@pytest.mark.skipif(not LLAMA_TOKENIZE.is_file(), reason="no llama-tokenize binary ($LLAMA_TOKENIZE)")
def test_same_ids_as_llama_tokenize(tok, bert_gguf):
    """llama.cpp itself, on our converted GGUF: the sample, the edges and the texts where it differs
    from Hugging Face, with and without special-token parsing."""
    for text in SAMPLE + EDGES + DIFFERENT:
        assert tok.tokenize(text) == _llama_tokenize(bert_gguf, text), text
    for text in EDGES[14:17] + DIFFERENT[:3]:
        assert tok.tokenize(text, parse_special=False) == _llama_tokenize(bert_gguf, text, False), text


def test_where_llama_cpp_differs_from_hf(tok, hf):
    """What llama.cpp does on the DIFFERENT texts, each stated as the tokenization of an equivalent text."""
    t = tok.tokenize
    # its NFD keeps the first code point: a Hangul syllable is its leading consonant (U+1112, U+1100)
    assert t("한국") == t("\u1112\u1100")
    # all marks go with the accents, Mc (U+093E) too; HF keeps Mc
    assert t("a\u093e") == t("a")
    # \v, \f and U+0085 are whitespace there; HF deletes them, joining the words
    assert t("ab\x0bcd\x0cef\x85gh") == t("ab cd ef gh") != hf.encode("ab\x0bcd\x0cef\x85gh").ids
    # an unassigned code point stays in its word (which then has no pieces); HF deletes it
    unk, cls, sep = tok.vocab.special["unk"], tok.vocab.special["bos"], tok.vocab.special["sep"]
    assert t("x\U000e0080") == [cls, unk, sep] != t("x")
    # no limit on a word's length (HF: more than 100 characters make it [UNK])
    long = "x" * 150
    assert hf.encode(long).ids == [cls, unk, sep]
    assert t(long) == [cls, *wpm.wpm_word_ref(long, tok.vocab.token_to_id, tok._encoder.max_len), sep]
    # one code point to one when lower-casing (İ -> i, Σ -> σ wherever it is)
    assert t("İSTANBUL ΟΔΟΣ") == t("istanbul οδοσ")


# ---- special tokens, detokenize -------------------------------------------------------------------

def test_special_ids_and_flags(tok):
    v = tok.vocab
    assert [v.tokens[v.special[s]] for s in ("bos", "eos", "unk", "sep", "pad", "mask")] == \
        ["[CLS]", "[SEP]", "[UNK]", "[SEP]", "[PAD]", "[MASK]"]
    assert (v.add_bos, v.add_eos, v.add_sep) == (True, True, False)
    assert tok.tokenize("hello", add_special=False)[0] not in (v.special["bos"], v.special["sep"])


def test_cls_and_sep_whatever_add_bos_and_add_eos_say(bert_gguf):
    """llama.cpp's WPM branch adds [CLS] ... [SEP] with add_special alone; the flags only shape
    rerank pairs (and detokenize's remove_special)."""
    md = metadata(bert_gguf)
    md[K.ADD_BOS], md[K.ADD_EOS] = False, False
    del md[K.ADD_SEP]      # llama.cpp's default for "bert": add_sep
    tok = Tokenizer.from_metadata(md)
    ids = tok.tokenize("hello world")
    assert ids[0] == tok.vocab.special["bos"] and ids[-1] == tok.vocab.special["sep"]
    # the pair then is query [SEP] document
    pair = tok.tokenize_pair("a", "b")
    assert pair.ids == [*tok.tokenize("a", add_special=False), tok.vocab.special["sep"],
                        *tok.tokenize("b", add_special=False)]


def test_rerank_template_replaces_the_pair_layout(bert_gguf):
    md = metadata(bert_gguf)
    md[K.RERANK_TEMPLATE] = "[CLS] query: {query} [SEP] document: {document}"
    tok = Tokenizer.from_metadata(md)
    pair = tok.tokenize_pair("a fox", "the dog")
    assert pair.ids == tok.tokenize("[CLS] query: a fox [SEP] document: the dog", add_special=False)


@pytest.mark.parametrize("text", ["hello world", "it is a truth, universally acknowledged! or is it?",
                                  "the quick brown fox jumps over the lazy dog."])
def test_detokenize_gives_the_text_back(tok, text):
    """Pieces are "▁" + a word start and bare continuations: the words come back with a space in
    front of each (llama.cpp keeps the first one: no add_space_prefix), and clean_spaces takes the
    space off before , . ? !"""
    ids = tok.tokenize(text)
    assert tok.detokenize(ids, remove_special=True) == " " + text
    assert tok.detokenize(ids) == "[CLS] " + text + "[SEP]"
    assert tok.detokenize(ids, render_special=False) == " " + text


# ---- fast paths against their references --------------------------------------------------------

_ALPHABET = ("abcXYZ019 .,!?'\"-_$+<=>^`|~\t\n\x0b\x0c\r\x85\xa0\u2003\u3000\x00\x07\x7f\u200b\u00ad\ufffd"
             "éÉñÑçöÖßÅåΣσςİıΐΩΑάЁёЖж한국한中文東京ひらがなカタカナ\u0301\u0308\u093e\u20dd"
             "\U000e0080\ue000\U0001f642\u2260\u1fef½²ǅﬁＡ１")


@pytest.mark.parametrize("lowercase,strip_accents", [(True, True), (True, False), (False, False), (False, True)])
def test_normalize_and_split_match_the_per_code_point_loop(lowercase, strip_accents):
    rng = random.Random(7)
    for n in [0, 1, 2, 5, 30, 200] * 20:
        text = "".join(rng.choice(_ALPHABET) for _ in range(n))
        fast = wpm_normalize.split_words(wpm_normalize.normalize(text, lowercase, strip_accents))
        assert fast == wpm_normalize.preprocess_ref(text, lowercase, strip_accents), repr(text)
    ascii_text = "".join(map(chr, range(128))) * 3
    assert (wpm_normalize.split_words(wpm_normalize.normalize(ascii_text, lowercase, strip_accents))
            == wpm_normalize.preprocess_ref(ascii_text, lowercase, strip_accents))


def test_lower_case_is_one_to_one_but_for_the_two_mapped_by_hand():
    """normalize lower-cases with str.lower(), after mapping the two code points where Python's full
    mapping (or its Final_Sigma rule) is not llama.cpp's simple one."""
    multi = [cp for cp in range(0x110000) if not 0xD800 <= cp < 0xE000 and len(chr(cp).lower()) != 1]
    assert multi == [0x130]
    assert "ΟΔΟΣ".lower() == "οδος" and wpm_normalize.normalize("ΟΔΟΣ", True, False) == "οδοσ"


def test_word_matchers_match_the_reference(tok, monkeypatch):
    """wpm_word (prefix bounds) and the trie (in windows) against llama.cpp's loop, on words of the
    vocabulary's characters with now and then one it lacks."""
    monkeypatch.setattr(wpm.TrieMatcher, "WINDOW", 7)
    t2i, enc = tok.vocab.token_to_id, tok._encoder
    trie = wpm.TrieMatcher(tok.vocab.tokens, t2i)
    bounds = wpm.prefix_bounds(tok.vocab.tokens)
    # mostly characters that are tokens both at a word's start and inside it, now and then any other
    common = sorted(t for t in tok.vocab.tokens if len(t) == 1 and wpm.SPACE + t in t2i)
    rare = sorted({c for t in tok.vocab.tokens for c in t if c != wpm.SPACE})
    rng = random.Random(3)
    unknown = 0
    for _ in range(3000):
        word = "".join(rng.choice(rare if rng.random() < 0.01 else common) for _ in range(rng.randint(1, 40)))
        if rng.random() < 0.05:
            word += "ꙮ" + word
        ref = wpm.wpm_word_ref(word, t2i, enc.max_len)
        assert wpm.wpm_word(word, t2i, bounds) == ref, word
        out = [-1]
        assert trie.word_ids(word, out) == (ref is not None) and out == [-1, *(ref or [])], word
        unknown += ref is None
    assert 0 < unknown < 1500


def test_long_texts_and_words_match_the_reference(tok):
    """A text past the partition and chunk sizes, with words past LONG (matched in place, in ASCII,
    or from the word list otherwise), gives the reference's ids."""
    enc = tok._encoder
    rng = random.Random(5)
    words = [w for text in SAMPLE for w in text.split()]
    parts = []
    while sum(map(len, parts)) < 150_000:
        r = rng.random()
        parts.append(rng.choice(words) if r < 0.98 else
                     "".join(rng.choices("abcdefgh", k=rng.randint(enc.LONG, 3 * enc.LONG))) if r < 0.99 else
                     "é" + "".join(rng.choices("abcdéf", k=rng.randint(enc.LONG, 2 * enc.LONG))))
    for text in (" ".join(parts), " ".join(p for p in parts if p.isascii())):
        expected = []
        for word in wpm_normalize.preprocess_ref(text):
            ids = wpm.wpm_word_ref(word, tok.vocab.token_to_id, enc.max_len)
            expected += [tok.vocab.special["unk"]] if ids is None else ids
        assert tok.tokenize(text, add_special=False) == expected


# ---- cost on hostile input (as tests/tokenizer/test_tokenize_cost.py) --------------------------

SIZE = 1_000_000          # the ratios are those of 4 MB; tracemalloc makes larger texts slow to test
MAX_CPU_RATIO = 4          # measured: 1.5 (one letter), 1.6 (random letters)
MAX_BYTES_PER_BYTE = 2     # measured: 1.4 -- the lower-cased copy of the text, and a window of pieces


def _cpu(fn):
    start = time.process_time()
    out = fn()
    return time.process_time() - start, out


def _extra_memory(fn) -> int:
    tracemalloc.start()
    try:
        out = fn()
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del out
    return peak - held


@pytest.mark.slow
def test_an_enormous_word_costs_like_english(tok, refdata_dir):
    book = refdata_dir / "pride_and_prejudice.txt"
    if not book.is_file():
        pytest.skip("no English text in the reference data")
    tok.tokenize("warm up: the trie is built for the first long word " + "a" * 2000)
    text = book.read_text(encoding="utf-8")
    english = (text * (SIZE // len(text) + 1))[:SIZE]
    baseline, _ = _cpu(lambda: tok.tokenize(english, add_special=False))
    rng = random.Random(0)
    for name, word in (("one letter", "a" * SIZE),
                       ("random letters", "".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=SIZE)))):
        spent, ids = _cpu(lambda: tok.tokenize(word, add_special=False))
        assert spent <= MAX_CPU_RATIO * baseline, (name, spent, baseline)
        assert len(ids) > SIZE // 16
        del ids
        extra = _extra_memory(lambda: tok.tokenize(word, add_special=False))
        assert extra <= MAX_BYTES_PER_BYTE * SIZE, (name, extra / SIZE)


def test_no_lower_bound_on_the_token_count(tok):
    """An [UNK] stands for a whole word however long: WPM gives fewest_tokens no bound."""
    assert tok.fewest_tokens("ꙮ" * 10_000) == 0
    assert tok.tokenize("ꙮ" * 10_000, add_special=False) == [tok.vocab.special["unk"]]


# ---- bad vocabularies ------------------------------------------------------------------------------

def _small_bert(tokens: list[str], **keys) -> dict:
    md = {K.MODEL: "bert", K.LIST: tokens, K.TOKEN_TYPE: np.ones(len(tokens), np.int32)}
    md.update(keys)
    return md


def test_a_vocabulary_without_unk_or_cls_is_a_clear_error():
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "\u2581a", "b"]
    # 6 tokens: llama.cpp's defaults (100, 101, 102) do not fit
    with pytest.raises(ValueError, match=r"\[CLS\].*bos_token_id.*\[SEP\].*seperator_token_id.*\[UNK\].*unknown_token_id"):
        Tokenizer.from_metadata(_small_bert(tokens))
    with pytest.raises(ValueError, match=r"needs the ids of \[UNK\] \(tokenizer.ggml.unknown_token_id"):
        Tokenizer.from_metadata(_small_bert(tokens, **{K.BOS_ID: 2, K.SEP_ID: 3}))
    with pytest.raises(ValueError, match=r"needs the ids of \[CLS\] \(tokenizer.ggml.bos_token_id"):
        Tokenizer.from_metadata(_small_bert(tokens, **{K.UNK_ID: 1, K.SEP_ID: 3, K.BOS_ID: 99}))
    tok = Tokenizer.from_metadata(_small_bert(tokens, **{K.UNK_ID: 1, K.SEP_ID: 3, K.BOS_ID: 2}))
    assert tok.tokenize("ab a c") == [2, 4, 5, 4, 1, 3]
