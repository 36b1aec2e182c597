"""A Hugging Face byte-level BPE tokenizer (tokenizer.json + tokenizer_config.json) as the
`tokenizer.ggml.*` keys llama.cpp reads (model "gpt2").

- tokens: every id below n_vocab (config.json's vocab_size, which may exceed the tokenizer's:
  the rows past it are padding, "[PAD<id>]" of type UNUSED, as llama.cpp's converter writes them);
- token types: NORMAL, CONTROL for special added tokens, USER_DEFINED for the other added tokens;
- merges as "left right" strings; bos/eos/pad ids, add_bos/add_eos, and the chat template.
- `tokenizer.ggml.pre`, the pre-tokenizer, is recognised from tokenizer.json's pre_tokenizer
  (the GPT-2 byte-level regex, or a Split with the llama3 or qwen2 regex); another one needs
  an explicit name (`pre=`), since llama.cpp can only be told it by name.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from gguf import TokenType

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
