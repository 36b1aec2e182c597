"""BERT WordPiece vocabularies into GGUF (quant/hf_tokenizer.py, write_wordpiece_vocab): tokens in
llama.cpp's convention, their types, the special ids and flags its WPM tokenizer and rerank read,
from tokenizer.json or from vocab.txt alone; cased vocabularies; bad folders.
(Tokenizing with the result is tests/tokenizer/test_wpm.py.)"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("transformers")

from gguf import TokenType  # noqa: E402

from localinfer.quant.hf_tokenizer import TokenizerConversionError, convert_wordpiece  # noqa: E402
from localinfer.tokenizer import Tokenizer  # noqa: E402
from localinfer.tokenizer.vocab import K  # noqa: E402
from wordpiece_vocab import SAMPLE, write_bert_tokenizer  # noqa: E402

SPACE = "\u2581"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return write_bert_tokenizer(tmp_path_factory.mktemp("bert"), vocab_size=400, n_vocab=410)


def _vocab_txt(folder: Path) -> list[str]:
    with open(folder / "vocab.txt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f.readlines()]


def test_tokens_in_llama_cpp_convention(folder):
    v = convert_wordpiece(folder)
    hf_tokens = _vocab_txt(folder)
    assert len(v.tokens) == 410 > len(hf_tokens)        # config.json's vocab_size: padded
    specials = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
    for i, (ours, theirs) in enumerate(zip(v.tokens, hf_tokens)):
        if theirs in specials:
            assert (ours, v.token_types[i]) == (theirs, TokenType.CONTROL)
        elif theirs.startswith("##"):
            assert (ours, v.token_types[i]) == (theirs[2:], TokenType.NORMAL)
        else:
            assert (ours, v.token_types[i]) == (SPACE + theirs, TokenType.NORMAL)
    for i in range(len(hf_tokens), 410):   # llama.cpp's padding rows, "▁" and all (its phantom step)
        assert (v.tokens[i], v.token_types[i]) == (f"{SPACE}[PAD{i}]", TokenType.UNUSED)


def test_special_ids_flags_and_normalizer(folder):
    v = convert_wordpiece(folder)
    ids = {t: i for i, t in enumerate(_vocab_txt(folder))}
    assert v.special_ids == {"unk": ids["[UNK]"], "sep": ids["[SEP]"], "pad": ids["[PAD]"], "cls": ids["[CLS]"],
                             "mask": ids["[MASK]"], "bos": ids["[CLS]"], "eos": ids["[SEP]"]}
    # [CLS] A [SEP] / [CLS] A [SEP] B [SEP]: BOS, EOS, no extra separator (gguf-py's SpecialVocab reads the same)
    assert (v.add_bos, v.add_eos, v.add_sep) == (True, True, False)
    assert (v.lowercase, v.strip_accents, v.token_type_count) == (True, True, 2)


def test_vocab_txt_alone_gives_the_same_vocabulary(folder, tmp_path):
    """A folder with only vocab.txt (and config.json), as older BERT checkpoints have it."""
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("vocab.txt", "config.json"):
        shutil.copy(folder / name, bare / name)
    assert convert_wordpiece(bare) == convert_wordpiece(folder)


def test_cased_vocabulary(tmp_path):
    """lowercase=False (bert-base-cased): no lower-casing, and accents stay (they follow lowercase)."""
    from tokenizers import BertWordPieceTokenizer
    from gguf import GGUFWriter
    from localinfer.files.gguf_file import GGUFFile
    from localinfer.quant.hf_tokenizer import write_wordpiece_vocab

    cased = write_bert_tokenizer(tmp_path / "cased", vocab_size=500, lowercase=False)
    v = convert_wordpiece(cased)
    assert (v.lowercase, v.strip_accents) == (False, False)
    path = tmp_path / "cased.gguf"
    w = GGUFWriter(str(path), "bert")
    write_wordpiece_vocab(w, cased)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with GGUFFile(path) as f:
        md = dict(f.metadata)
    assert (md[K.NORMALIZER_LOWERCASE], md[K.NORMALIZER_STRIP_ACCENTS]) == (False, False)
    tok = Tokenizer.from_metadata(md)
    hf = BertWordPieceTokenizer(str(cased / "vocab.txt"), lowercase=False)
    for text in SAMPLE:
        assert tok.tokenize(text) == hf.encode(text).ids, text


def test_bad_folders_are_clear_errors(folder, tmp_path):
    with pytest.raises(TokenizerConversionError, match="no tokenizer.json and no vocab.txt"):
        convert_wordpiece(tmp_path)
    no_unk = tmp_path / "no_unk"
    no_unk.mkdir()
    (no_unk / "vocab.txt").write_text("\n".join(t for t in _vocab_txt(folder) if t != "[UNK]") + "\n",
                                      encoding="utf-8")
    with pytest.raises(TokenizerConversionError, match=r"no unk '\[UNK\]' token"):
        convert_wordpiece(no_unk)
    bpe = tmp_path / "bpe"
    bpe.mkdir()
    tok = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    tok["model"]["type"] = "BPE"
    (bpe / "tokenizer.json").write_text(json.dumps(tok), encoding="utf-8")
    with pytest.raises(TokenizerConversionError, match="is not WordPiece"):
        convert_wordpiece(bpe)
    tok["model"]["type"] = "WordPiece"
    tok["normalizer"]["handle_chinese_chars"] = False
    (bpe / "tokenizer.json").write_text(json.dumps(tok), encoding="utf-8")
    with pytest.raises(TokenizerConversionError, match="handle_chinese_chars=False"):
        convert_wordpiece(bpe)
    small = tmp_path / "small"
    shutil.copytree(folder, small)
    (small / "config.json").write_text(json.dumps({"vocab_size": 10}), encoding="utf-8")
    with pytest.raises(TokenizerConversionError, match="does not fit vocab_size 10"):
        convert_wordpiece(small)
