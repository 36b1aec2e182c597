"""Vocabulary from GGUF metadata: token texts, attributes, special ids, EOG set.

Mirrors the vocab-type-independent half of llama.cpp `llama_vocab::impl::load`
(src/llama-vocab.cpp): token list and types, special token ids with their
defaults, add_bos/add_eos, and the text-based detection of EOT/EOM/FIM and
end-of-generation tokens -- including the attribute overrides it applies.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, Mapping

import numpy as np

from ..formats.ggml import TokenizerKeysBeyondGGUFPy as K
from ..formats.ggml import TokenType


class TokenAttr(enum.IntFlag):
    """llama.cpp `llama_token_attr` bits."""

    UNDEFINED = 0
    UNKNOWN = 1 << 0
    UNUSED = 1 << 1
    NORMAL = 1 << 2
    CONTROL = 1 << 3
    USER_DEFINED = 1 << 4
    BYTE = 1 << 5
    NORMALIZED = 1 << 6
    LSTRIP = 1 << 7
    RSTRIP = 1 << 8
    SINGLE_WORD = 1 << 9


# GGUF tokenizer.ggml.token_type -> attribute (anything else: UNDEFINED)
_TYPE_TO_ATTR = {
    TokenType.NORMAL: TokenAttr.NORMAL,
    TokenType.UNKNOWN: TokenAttr.UNKNOWN,
    TokenType.CONTROL: TokenAttr.CONTROL,
    TokenType.USER_DEFINED: TokenAttr.USER_DEFINED,
    TokenType.UNUSED: TokenAttr.UNUSED,
    TokenType.BYTE: TokenAttr.BYTE,
}

_TYPE_TO_ATTR_INT = {int(t): int(a) for t, a in _TYPE_TO_ATTR.items()}

# Special-id slots in the order llama.cpp reads their keys (the deprecated
# prefix/suffix/middle keys come last and override the fim_* ones).
_SPECIAL_KEYS: tuple[tuple[str, str], ...] = (
    ("bos", K.BOS_ID), ("eos", K.EOS_ID), ("eot", K.EOT_ID), ("eom", K.EOM_ID),
    ("unk", K.UNK_ID), ("sep", K.SEP_ID), ("pad", K.PAD_ID), ("mask", K.MASK_ID),
    ("fim_pre", K.FIM_PRE_ID), ("fim_suf", K.FIM_SUF_ID), ("fim_mid", K.FIM_MID_ID),
    ("fim_pad", K.FIM_PAD_ID), ("fim_rep", K.FIM_REP_ID), ("fim_sep", K.FIM_SEP_ID),
    ("fim_pre", K.PREFIX_ID), ("fim_suf", K.SUFFIX_ID), ("fim_mid", K.MIDDLE_ID),
)

# Token texts llama.cpp uses to find special ids that the GGUF does not name.
_DETECT_BY_TEXT: dict[str, frozenset[str]] = {
    "eot": frozenset({
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
        "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>",
        "<end_of_utterance>"}),
    "eom": frozenset({"<|eom_id|>"}),
    "fim_pre": frozenset({
        "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>",
        "▁<PRE>", "<|code_prefix|>", "<|prefix|>"}),
    "fim_suf": frozenset({
        "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>",
        "▁<SUF>", "<|code_suffix|>", "<|suffix|>"}),
    "fim_mid": frozenset({
        "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>",
        "▁<MID>", "<|code_middle|>", "<|middle|>"}),
    "fim_pad": frozenset({"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}),
    "fim_rep": frozenset({"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}),
    "fim_sep": frozenset({"<|file_sep|>"}),
}

# Token texts that end generation (llama.cpp `special_eog_ids` text list).
_EOG_TEXTS = frozenset({
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
    "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>",
    "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>",
    "<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~["})

# gpt-oss: llama.cpp always renders these, whatever their GGUF type.
_FORCE_USER_DEFINED = frozenset({"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})


@dataclass
class Vocab:
    tokens: list[str]                    # id -> text as stored in the GGUF
    token_to_id: dict[str, int]
    attrs: list[int]                     # id -> TokenAttr bits (after llama.cpp's overrides)
    special: dict[str, int | None]       # "bos", "eos", "eot", ... -> id or None
    add_bos: bool
    add_eos: bool
    add_space_prefix: bool
    eog_ids: frozenset[int] = field(default_factory=frozenset)
    add_sep: bool = False                # a [SEP] between a rerank pair's query and document

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)


def _get(metadata: Mapping[str, Any], key: str, default: Any = None) -> Any:
    value = metadata.get(key, default)
    return default if value is None else value


def load_vocab(
    metadata: Mapping[str, Any],
    *,
    default_ids: Mapping[str, int | None],
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
    add_sep: bool = False,
) -> Vocab:
    """Build the vocab; the keyword arguments are the vocab type's defaults, which
    the GGUF keys override (as in llama.cpp)."""
    raw_tokens = metadata.get(K.LIST)
    if not raw_tokens:
        raise ValueError(f"GGUF metadata has no token list ({K.LIST})")
    tokens, token_to_id = _read_tokens(raw_tokens)
    n = len(tokens)

    types = metadata.get(K.TOKEN_TYPE)
    if types is None:
        attrs = [int(TokenAttr.NORMAL)] * n
    else:
        if len(types) < n:
            raise ValueError(f"{K.TOKEN_TYPE} has {len(types)} entries for {n} tokens")
        # a GGUF's numeric arrays are numpy views: as python ints the dict lookups run at C speed
        head = types[:n].tolist() if isinstance(types, np.ndarray) else types[:n]
        attrs = list(map(_TYPE_TO_ATTR_INT.get, head, repeat(int(TokenAttr.UNDEFINED))))

    special = _special_ids(metadata, default_ids, n)

    add_bos = bool(_get(metadata, K.ADD_BOS, add_bos))
    add_eos = bool(_get(metadata, K.ADD_EOS, add_eos))
    add_space_prefix = bool(_get(metadata, K.ADD_PREFIX, add_space_prefix))
    add_sep = bool(_get(metadata, K.ADD_SEP, add_sep))
    if add_bos and special["bos"] is None:
        raise ValueError(f"{K.ADD_BOS} is true, but {K.BOS_ID} is not set")
    if add_eos and special["eos"] is None:
        raise ValueError(f"{K.ADD_EOS} is true, but {K.EOS_ID} is not set")

    vocab = Vocab(tokens, token_to_id, attrs, special, add_bos, add_eos, add_space_prefix, add_sep=add_sep)
    _detect_special_by_text(vocab)
    vocab.eog_ids = frozenset(_eog_ids(vocab))
    return vocab


def _read_tokens(raw_tokens: Any) -> tuple[list[str], dict[str, int]]:
    """Token texts and the text -> id map.  Vocabularies reach 262k tokens, so the
    common case runs at C speed; the slow loop only runs to name what is wrong."""
    tokens = list(raw_tokens)
    token_to_id = dict(zip(tokens, range(len(tokens))))
    if set(map(type, tokens)) == {str} and "" not in token_to_id and len(token_to_id) == len(tokens):
        return tokens, token_to_id
    token_to_id = {}
    for i, text in enumerate(tokens):
        if not isinstance(text, str):
            raise ValueError(f"{K.LIST}[{i}] is {type(text).__name__}, expected str")
        if not text:
            text = tokens[i] = f"[EMPTY_{i}]"  # llama.cpp renames empty tokens the same way
        if text in token_to_id:
            raise ValueError(
                f"duplicate token in vocabulary: {text!r} has ids {token_to_id[text]} and {i}")
        token_to_id[text] = i
    return tokens, token_to_id


def _special_ids(metadata: Mapping[str, Any], defaults: Mapping[str, int | None], n: int) -> dict[str, int | None]:
    special: dict[str, int | None] = {name: defaults.get(name) for name, _ in _SPECIAL_KEYS}
    for name, key in _SPECIAL_KEYS:
        current = special[name]
        if current is not None and not 0 <= current < n:
            special[name] = current = None  # default out of range: disabled
        value = metadata.get(key)
        if value is None:
            continue
        if isinstance(value, int) and 0 <= value < n:
            special[name] = value
        # else: llama.cpp warns "bad special token" and keeps the default
    return special


def _add_control(vocab: Vocab, tid: int) -> None:
    # llama.cpp: "control-looking token ... was not control-type; its type will be overridden"
    vocab.attrs[tid] = int(vocab.attrs[tid] | TokenAttr.CONTROL)


def _detect_special_by_text(vocab: Vocab) -> None:
    """Find EOT/EOM/FIM ids the GGUF did not name, from their text.

    llama.cpp walks an unordered_map, so with several candidates the winner is
    unspecified; we take the lowest id (for SmolLM2 that gives eot=0
    "<|endoftext|>", matching llama.cpp's reported eot_id)."""
    t2i = vocab.token_to_id
    for slot, texts in _DETECT_BY_TEXT.items():
        if vocab.special[slot] is not None:
            continue
        found = [t2i[t] for t in texts if t in t2i]
        if found:
            vocab.special[slot] = min(found)
            _add_control(vocab, min(found))


def _eog_ids(vocab: Vocab) -> set[int]:
    t2i = vocab.token_to_id
    eog = {vocab.special[s] for s in ("fim_pad", "fim_rep", "fim_sep")} - {None}
    for text in _EOG_TEXTS & t2i.keys():
        eog.add(t2i[text])
        _add_control(vocab, t2i[text])
    for text in _FORCE_USER_DEFINED & t2i.keys():
        vocab.attrs[t2i[text]] = int(TokenAttr.USER_DEFINED)
    for slot in ("eos", "eot", "eom"):
        if vocab.special[slot] is not None:
            eog.add(vocab.special[slot])

    texts = {tid: vocab.tokens[tid] for tid in eog}
    # o200k_harmony / solar-open: "<|end|>" is a turn separator there, not an EOG.
    has = set(texts.values())
    has_call = "<|call|>" in has or "<|calls|>" in has
    if "<|end|>" in has and has_call and ("<|return|>" in has or "<|flush|>" in has):
        end_id = next(t for t, s in texts.items() if s == "<|end|>")
        eog.discard(end_id)
        vocab.attrs[end_id] = int(TokenAttr.USER_DEFINED)
    # gemma4 / paddleocr: "</s>" is not an EOG when "<|tool_response>" is one.
    if "<|tool_response>" in has and "</s>" in has:
        s_id = next(t for t, s in texts.items() if s == "</s>")
        eog.discard(s_id)
        vocab.attrs[s_id] = int(TokenAttr.NORMAL)
    return eog
