"""Hugging Face tokenizers as the `tokenizer.ggml.*` keys llama.cpp reads.

A byte-level BPE tokenizer (tokenizer.json + tokenizer_config.json), model "gpt2":

- tokens: every id below n_vocab (config.json's vocab_size, which may exceed the tokenizer's:
  the rows past it are padding, "[PAD<id>]" of type UNUSED, as llama.cpp's converter writes them);
- token types: NORMAL, CONTROL for special added tokens, USER_DEFINED for the other added tokens;
- merges as "left right" strings; bos/eos/pad ids, add_bos/add_eos, and the chat template.
- `tokenizer.ggml.pre`, the pre-tokenizer, is recognised from tokenizer.json's pre_tokenizer
  (the GPT-2 byte-level regex, or a Split with the llama3 or qwen2 regex); another one needs
  an explicit name (`pre=`), since llama.cpp can only be told it by name.

A BERT WordPiece tokenizer (vocab.txt and/or tokenizer.json), model "bert": `write_wordpiece_vocab`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from gguf import TokenType

from localinfer.formats.ggml import TokenizerKeysBeyondGGUFPy as K

# The Split regexes of the HF tokenizers that llama.cpp's pre-tokenizer types implement.
_HF_CONTRACTIONS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
SPLIT_PATTERNS = {
    _HF_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+":
        "llama-bpe",
    _HF_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+":
        "qwen2",
}


class TokenizerConversionError(ValueError):
    pass


@dataclass
class GGUFVocab:
    tokens: list[str]  # (n_vocab,)
    token_types: list[int]  # (n_vocab,) gguf.TokenType
    merges: list[str]  # "left right", by rank
    pre: str
    special_ids: dict[str, int] = field(default_factory=dict)  # "bos"/"eos"/"pad"/"unk" -> id
    add_bos: bool | None = None
    add_eos: bool | None = None
    chat_template: str | None = None


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise TokenizerConversionError(f"{path}: not valid JSON ({e})") from None


def detect_pre(pre_tokenizer: dict | None) -> str | None:
    """The llama.cpp pre-tokenizer name for a tokenizer.json pre_tokenizer, or None if unknown."""
    if not pre_tokenizer:
        return None
    kind = pre_tokenizer.get("type")
    if kind == "ByteLevel" and pre_tokenizer.get("use_regex", True):
        return "gpt-2"
    if kind == "Sequence":
        steps = pre_tokenizer.get("pretokenizers") or []
        if (len(steps) == 2 and steps[0].get("type") == "Split" and steps[1].get("type") == "ByteLevel"
                and not steps[1].get("use_regex", True)):
            return SPLIT_PATTERNS.get((steps[0].get("pattern") or {}).get("Regex"))
    return None


def _token_content(value) -> str | None:
    """tokenizer_config.json writes a special token as a string or as {"content": ...}."""
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def convert_tokenizer(folder: str | Path, n_vocab: int | None = None, pre: str | None = None) -> GGUFVocab:
    """folder: a HF model folder with tokenizer.json; n_vocab: the embedding rows (config vocab_size)."""
    folder = Path(folder)
    tok_path = folder / "tokenizer.json"
    if not tok_path.is_file():
        raise TokenizerConversionError(
            f"{folder}: no tokenizer.json (a byte-level BPE tokenizer.json is needed for the GGUF vocabulary)")
    tok = _read_json(tok_path)
    model = tok.get("model") or {}
    if model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise TokenizerConversionError(f"{tok_path}: model type {model.get('type')!r} is not supported (only BPE)")
    decoder = tok.get("decoder") or {}
    if decoder.get("type") != "ByteLevel":
        raise TokenizerConversionError(
            f"{tok_path}: decoder {decoder.get('type')!r} is not byte-level; only byte-level BPE converts")

    by_id: dict[int, str] = {i: t for t, i in model["vocab"].items()}
    added = {int(a["id"]): a for a in tok.get("added_tokens") or []}
    for i, a in added.items():
        by_id[i] = a["content"]
    size = max(by_id) + 1
    if n_vocab is None:
        n_vocab = size
    if size > n_vocab:
        raise TokenizerConversionError(f"{tok_path}: token id {size - 1} does not fit vocab_size {n_vocab}")
    tokens, types = [], []
    for i in range(n_vocab):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(TokenType.UNUSED)
        elif i in added:
            tokens.append(by_id[i])
            types.append(TokenType.CONTROL if added[i].get("special") else TokenType.USER_DEFINED)
        else:
            tokens.append(by_id[i])
            types.append(TokenType.NORMAL)

    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []]

    if pre is None:
        pre = detect_pre(tok.get("pre_tokenizer"))
        if pre is None:
            raise TokenizerConversionError(
                f"{tok_path}: pre-tokenizer {json.dumps(tok.get('pre_tokenizer'))[:200]} is not one this converter "
                "recognises; name the llama.cpp pre-tokenizer explicitly (--pre qwen2, llama-bpe, gpt-2, ...)")

    config_path, tc_path = folder / "config.json", folder / "tokenizer_config.json"
    tc = _read_json(tc_path) if tc_path.is_file() else {}
    config = _read_json(config_path) if config_path.is_file() else {}
    ids = {t: i for i, t in by_id.items()}
    special: dict[str, int] = {}
    for kind in ("bos", "eos", "pad", "unk"):
        content = _token_content(tc.get(f"{kind}_token"))
        if content is not None and content in ids:
            special[kind] = ids[content]
        elif isinstance(config.get(f"{kind}_token_id"), int):
            special[kind] = config[f"{kind}_token_id"]
    template = tc.get("chat_template")
    if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
        template = next((t.get("template") for t in template if t.get("name") == "default"), None)
    return GGUFVocab(tokens=tokens, token_types=[int(t) for t in types], merges=merges, pre=pre,
                     special_ids=special, add_bos=tc.get("add_bos_token"), add_eos=tc.get("add_eos_token"),
                     chat_template=template if isinstance(template, str) else None)


def add_vocab(writer, v: GGUFVocab) -> None:
    """Write `v` as tokenizer.ggml.* keys with a gguf.GGUFWriter."""
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(v.pre)
    writer.add_token_list(v.tokens)
    writer.add_token_types(v.token_types)
    writer.add_token_merges(v.merges)
    for kind, tid in v.special_ids.items():
        getattr(writer, f"add_{kind}_token_id")(tid)
    if v.add_bos is not None:
        writer.add_add_bos_token(bool(v.add_bos))
    if v.add_eos is not None:
        writer.add_add_eos_token(bool(v.add_eos))
    if v.chat_template:
        writer.add_chat_template(v.chat_template)


# ---- BERT WordPiece ---------------------------------------------------------------------------

@dataclass
class WordPieceVocab:
    tokens: list[str]  # (n_vocab,) in llama.cpp's convention: "▁" + a word start, "##" dropped from a continuation
    token_types: list[int]  # (n_vocab,) gguf.TokenType
    special_ids: dict[str, int]  # "bos"/"eos"/"unk"/"sep"/"pad"/"cls"/"mask" -> id ([CLS] is also BOS, [SEP] EOS)
    add_bos: bool
    add_eos: bool
    add_sep: bool
    lowercase: bool
    strip_accents: bool
    token_type_count: int  # config.json type_vocab_size: rows of the token-type embedding


# BertTokenizer's own names for its special tokens (tokenizer_config.json may rename them)
_BERT_SPECIALS = {"unk": "[UNK]", "sep": "[SEP]", "pad": "[PAD]", "cls": "[CLS]", "mask": "[MASK]"}


def _looks_special(text: str) -> bool:
    """llama.cpp's converter (ModelBase.does_token_look_special): added tokens that are CONTROL
    although the tokenizer does not mark them special."""
    return (text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or (text.startswith("<|") and text.endswith("|>"))
            or (text.startswith("<\uff5c") and text.endswith("\uff5c>"))
            or (text.startswith("<unused") and text.endswith(">")))


def _phantom(token: str, token_type: int) -> str:
    """llama.cpp's BertModel.set_vocab: its WPM tokenizer matches "▁" + word, so a word-start piece gets
    the "▁" and a "##" continuation loses its prefix; CONTROL tokens stay as they are."""
    if token_type == TokenType.CONTROL:
        return token
    return token[2:] if token.startswith("##") else "\u2581" + token


def _bert_flags(tok: dict | None, path: Path) -> tuple[bool, bool, bool]:
    """(add_bos, add_eos, add_sep) from the post-processor, as llama.cpp's rerank and tokenize read them:
    [CLS] A [SEP] and [CLS] A [SEP] B [SEP] give (True, True, False) -- a pair is then
    [BOS] A [EOS] B [EOS]; RoBERTa's <s> A </s></s> B </s> is (True, True, True)."""
    post = (tok or {}).get("post_processor")
    kind = (post or {}).get("type")
    if post is None or kind == "BertProcessing":
        return True, True, False
    if kind == "RobertaProcessing":
        return True, True, True
    if kind != "TemplateProcessing":
        raise TokenizerConversionError(f"{path}: post_processor {kind!r} is not one this converter knows "
                                       "(TemplateProcessing, BertProcessing, RobertaProcessing)")

    def special(item: dict) -> bool:
        return "SpecialToken" in item

    single, pair = post.get("single") or [], post.get("pair") or []
    add_bos = bool(single) and special(single[0])
    add_eos = len(single) > 1 and special(single[-1])
    seqs = [i for i, item in enumerate(pair) if "Sequence" in item]
    middle = [item for item in pair[seqs[0] + 1:seqs[-1]] if special(item)] if len(seqs) == 2 else []
    # what comes between A and B beyond the EOS after A
    add_sep = len(middle) - int(add_eos) > 0
    return add_bos, add_eos, add_sep


def convert_wordpiece(folder: str | Path, n_vocab: int | None = None) -> WordPieceVocab:
    """folder: a HF BERT-family folder (tokenizer.json with a WordPiece model, or vocab.txt);
    n_vocab: the embedding rows (config.json vocab_size by default)."""
    folder = Path(folder)
    tok_path, vocab_path = folder / "tokenizer.json", folder / "vocab.txt"
    tc_path, config_path = folder / "tokenizer_config.json", folder / "config.json"
    tc = _read_json(tc_path) if tc_path.is_file() else {}
    config = _read_json(config_path) if config_path.is_file() else {}
    tok = _read_json(tok_path) if tok_path.is_file() else None
    added: dict[int, tuple[str, bool]] = {}   # id -> (text, special)
    if tok is not None:
        model = tok.get("model") or {}
        if model.get("type") != "WordPiece" or not isinstance(model.get("vocab"), dict):
            raise TokenizerConversionError(f"{tok_path}: model type {model.get('type')!r} is not WordPiece")
        if model.get("continuing_subword_prefix", "##") != "##":
            raise TokenizerConversionError(f"{tok_path}: continuing_subword_prefix "
                                           f"{model['continuing_subword_prefix']!r}; llama.cpp's WordPiece needs '##'")
        vocab = model["vocab"]
        for a in tok.get("added_tokens") or []:
            added[int(a["id"])] = (a["content"], bool(a.get("special")))
        norm = tok.get("normalizer") or {}
        if norm.get("type") != "BertNormalizer":
            raise TokenizerConversionError(f"{tok_path}: normalizer {norm.get('type')!r}; llama.cpp's WordPiece "
                                           "implements BertNormalizer only")
        pre = (tok.get("pre_tokenizer") or {}).get("type")
        if pre != "BertPreTokenizer":
            raise TokenizerConversionError(f"{tok_path}: pre_tokenizer {pre!r}; llama.cpp's WordPiece "
                                           "implements BertPreTokenizer only")
        lowercase = norm.get("lowercase", True)
        strip_accents = norm.get("strip_accents")
        chinese, clean = norm.get("handle_chinese_chars", True), norm.get("clean_text", True)
    elif vocab_path.is_file():
        with open(vocab_path, encoding="utf-8") as f:   # as BertTokenizer's load_vocab reads it
            vocab = {line.rstrip("\n"): i for i, line in enumerate(f.readlines())}   # a later duplicate wins
        for i, a in (tc.get("added_tokens_decoder") or {}).items():
            added[int(i)] = (a["content"], bool(a.get("special")))
        lowercase = tc.get("do_lower_case", True)
        strip_accents = tc.get("strip_accents")
        chinese, clean = tc.get("tokenize_chinese_chars", True), True
    else:
        raise TokenizerConversionError(f"{folder}: no tokenizer.json and no vocab.txt (a BERT WordPiece "
                                       "vocabulary is needed)")
    if not chinese or not clean:
        raise TokenizerConversionError(
            f"{folder}: BertNormalizer with handle_chinese_chars={chinese}, clean_text={clean}; llama.cpp's "
            "WordPiece always splits CJK characters and drops control characters")
    if strip_accents is None:       # BertNormalizer: accents follow lowercase
        strip_accents = lowercase

    by_id: dict[int, str] = {i: t for t, i in vocab.items()}
    for i, (text, _) in added.items():
        by_id[i] = text
    size = max(by_id) + 1 if by_id else 0
    if n_vocab is None:
        n_vocab = config.get("vocab_size") if isinstance(config.get("vocab_size"), int) else size
    if size > n_vocab:
        raise TokenizerConversionError(f"{folder}: token id {size - 1} does not fit vocab_size {n_vocab}")
    names = {kind: _token_content(tc.get(f"{kind}_token")) or default for kind, default in _BERT_SPECIALS.items()}
    ids = {t: i for i, t in sorted(by_id.items(), reverse=True)}   # the lowest id of a text
    control = {ids[t] for t in names.values() if t in ids} | {
        i for i, (text, special) in added.items() if special or _looks_special(text)}
    tokens, types = [], []
    for i in range(n_vocab):
        if i not in by_id:
            text, kind = f"[PAD{i}]", TokenType.UNUSED
        elif i in control:
            text, kind = by_id[i], TokenType.CONTROL
        elif i in added:
            text, kind = by_id[i], TokenType.USER_DEFINED
        else:
            text, kind = by_id[i], TokenType.NORMAL
        tokens.append(_phantom(text, kind))
        types.append(int(kind))

    special: dict[str, int] = {}
    for kind, text in names.items():
        if text in ids:
            special[kind] = ids[text]
        elif isinstance(config.get(f"{kind}_token_id"), int):
            special[kind] = config[f"{kind}_token_id"]
    missing = [f"{kind} {names[kind]!r}" for kind in ("unk", "cls", "sep") if kind not in special]
    if missing:
        raise TokenizerConversionError(f"{folder}: the vocabulary has no {', '.join(missing)} token; "
                                       "BERT inputs are [CLS] text [SEP], unknown words [UNK]")
    special["bos"], special["eos"] = special["cls"], special["sep"]   # llama.cpp's WPM adds BOS and SEP
    add_bos, add_eos, add_sep = _bert_flags(tok, tok_path)
    type_count = config.get("type_vocab_size", 1)
    return WordPieceVocab(tokens=tokens, token_types=types, special_ids=special, add_bos=add_bos,
                          add_eos=add_eos, add_sep=add_sep, lowercase=bool(lowercase),
                          strip_accents=bool(strip_accents), token_type_count=int(type_count))


def add_wordpiece_vocab(writer, v: WordPieceVocab) -> None:
    """Write `v` as tokenizer.ggml.* keys with a gguf.GGUFWriter (no scores: llama.cpp writes none for
    BERT and its WPM tokenizer reads none; the pre-tokenizer name is not read for WPM either)."""
    writer.add_tokenizer_model("bert")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(v.tokens)
    writer.add_token_types(v.token_types)
    writer.add_token_type_count(v.token_type_count)
    for kind, tid in v.special_ids.items():
        if kind == "cls":
            writer.add_uint32(K.CLS_ID, tid)
        else:
            getattr(writer, f"add_{kind}_token_id")(tid)
    writer.add_add_bos_token(v.add_bos)
    writer.add_add_eos_token(v.add_eos)
    writer.add_add_sep_token(v.add_sep)
    writer.add_bool(K.NORMALIZER_LOWERCASE, v.lowercase)
    writer.add_bool(K.NORMALIZER_STRIP_ACCENTS, v.strip_accents)


def write_wordpiece_vocab(writer, folder: str | Path, n_vocab: int | None = None) -> WordPieceVocab:
    """The BERT-family vocabulary of the HF folder as GGUF keys on `writer`; returns it (len(tokens)
    is the embedding's row count). Also writes tokenizer.ggml.token_type_count, as llama.cpp's
    converter does."""
    v = convert_wordpiece(folder, n_vocab)
    add_wordpiece_vocab(writer, v)
    return v


# ---- an encoder's byte-level BPE (modern-bert) --------------------------------------------------

_ENCODER_SPECIALS = {"cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]", "unk": "[UNK]", "pad": "[PAD]"}


def add_bpe_encoder_vocab(writer, folder: str | Path, n_vocab: int, pre: str) -> GGUFVocab:
    """A BERT-style encoder's byte-level BPE (ModernBERT: "[CLS] text [SEP]") as tokenizer.ggml.* keys:
    convert_tokenizer's vocabulary under the architecture's pre-tokenizer name `pre` (llama.cpp
    names ModernBERT's GPT-2 regex "modern-bert"); [CLS] is BOS and [SEP] EOS, and add_bos / add_eos
    / add_sep come from the post-processor as for WordPiece (_bert_flags), so that a re-ranking pair
    is [CLS] query [SEP] document [SEP], as transformers' tokenizer makes it."""
    folder = Path(folder)
    v = convert_tokenizer(folder, n_vocab)
    if v.pre != "gpt-2":
        raise TokenizerConversionError(f"{folder / 'tokenizer.json'}: pre-tokenizer {v.pre!r}; {pre!r} is "
                                       "GPT-2's byte-level regex")
    tok = _read_json(folder / "tokenizer.json")
    tc_path, config_path = folder / "tokenizer_config.json", folder / "config.json"
    tc = _read_json(tc_path) if tc_path.is_file() else {}
    config = _read_json(config_path) if config_path.is_file() else {}
    ids = {t: i for i, t in sorted(enumerate(v.tokens), reverse=True)}   # the lowest id of a text
    special: dict[str, int] = {}
    for kind, default in _ENCODER_SPECIALS.items():
        text = _token_content(tc.get(f"{kind}_token")) or default
        if text in ids:
            special[kind] = ids[text]
        elif isinstance(config.get(f"{kind}_token_id"), int):
            special[kind] = config[f"{kind}_token_id"]
    missing = [kind for kind in ("cls", "sep") if kind not in special]
    if missing:
        raise TokenizerConversionError(f"{folder}: the vocabulary has no {' or '.join(missing)} token; "
                                       "encoder inputs are [CLS] text [SEP]")
    add_bos, add_eos, add_sep = _bert_flags(tok, folder / "tokenizer.json")
    v.pre, v.add_bos, v.add_eos = pre, add_bos, add_eos
    v.special_ids = {kind: i for kind, i in special.items() if kind in ("unk", "pad")}
    v.special_ids |= {"bos": special["cls"], "eos": special["sep"]}
    add_vocab(writer, v)
    writer.add_sep_token_id(special["sep"])
    writer.add_uint32(K.CLS_ID, special["cls"])
    if "mask" in special:
        writer.add_mask_token_id(special["mask"])
    writer.add_add_sep_token(add_sep)
    return v
