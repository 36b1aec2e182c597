"""`Tokenizer`: text <-> token ids for a GGUF vocab, matching llama.cpp.

The vocab type comes from `tokenizer.ggml.model` through a small registry
(`TOKENIZER_MODELS`); each entry knows its defaults, how to encode a raw-text
fragment and how to turn a NORMAL token's text into bytes.  Everything else --
special-token partitioning, BOS/EOS, attributes, detokenize -- is shared.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from itertools import chain
from functools import cached_property
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Protocol, Sequence

import numpy as np

from .bpe import BpeEncoder, MergeRanks, decode_token_text
from .detokenizer import clean_up_spaces
from .pretokenize import resolve_pre_tokenizer, text_chunks
from .special import SpecialTokens, partition, special_tokens
from .spm import SpmEncoder, unescape_piece
from .vocab import K, TokenAttr, Vocab, _special_ids, load_vocab
from .wpm import WpmEncoder


class TooManyTokensError(ValueError):
    """A text that certainly tokenizes to more tokens than a limit, found before tokenizing it."""

    def __init__(self, at_least: int, limit: int):
        super().__init__(f"the text is at least {at_least} tokens long, more than the {limit} allowed")
        self.at_least, self.limit = at_least, limit


class FragmentEncoder(Protocol):
    def encode(self, text: str) -> list[int]: ...

    def encode_fragments(self, fragments: Sequence[str | int], out: list[int], space_prefix: bool = False) -> None: ...


@dataclass(frozen=True)
class VocabModel:
    """What one `tokenizer.ggml.model` contributes (llama.cpp LLAMA_VOCAB_TYPE_*)."""

    kind: str                                   # "BPE", "SPM", "WPM"
    default_ids: Mapping[str, int | None]       # special ids before the GGUF keys apply
    add_bos: bool
    add_eos: bool
    add_space_prefix: bool
    clean_spaces: bool
    make_encoder: Callable[[Vocab], FragmentEncoder]
    normal_piece: Callable[[str], bytes]        # NORMAL token text -> bytes
    # SPM: with add_space_prefix, a text fragment at the start or right after a
    # special token gets a " " in front (llama.cpp `is_prev_special`); BPE never does.
    space_prefix_after_special: bool = False
    add_sep: bool = False                       # rerank pairs: a [SEP] after the query's EOS
    # WPM: add_special puts BOS ([CLS]) first and SEP last whatever add_bos/add_eos say (llama.cpp's
    # LLAMA_VOCAB_TYPE_WPM branch of tokenize)
    always_cls_sep: bool = False


def _bpe_model(metadata: Mapping[str, Any]) -> VocabModel:
    pre = resolve_pre_tokenizer(metadata.get(K.PRE))
    merges = metadata.get(K.MERGES)
    if merges is None:
        raise ValueError(f"BPE vocabulary without merges ({K.MERGES})")
    ranks = MergeRanks(merges)
    return VocabModel(
        kind="BPE",
        # llama.cpp's BPE defaults (GPT-2's "<|endoftext|>" is 11 in its test vocab)
        default_ids={"bos": 11, "eos": 11},
        add_bos=pre.add_bos,
        add_eos=False,
        add_space_prefix=False,
        clean_spaces=pre.clean_spaces,
        make_encoder=lambda vocab: BpeEncoder(vocab.token_to_id, ranks, pre),
        normal_piece=decode_token_text,
    )


def _spm_model(metadata: Mapping[str, Any]) -> VocabModel:
    tokens = metadata.get(K.LIST) or ()
    n_tokens = len(tokens)
    # SentencePiece writes a word's start as "▁" and spells what its pieces cannot with byte tokens;
    # a vocabulary with neither (GPT-2's byte-level BPE writes a space as "Ġ") fails on the first
    # space of any text, so the mismatch is named here, at load
    if not any("\u2581" in t or t.startswith("<0x") for t in tokens if isinstance(t, str)):
        raise ValueError(
            f"{K.MODEL} = 'llama' (SentencePiece) does not fit this vocabulary: no token holds '\u2581' "
            f"(a word start) and there are no byte tokens <0xNN>"
            f"{'' if K.SCORES in metadata else f' (nor {K.SCORES})'}; a GPT-2 style BPE vocabulary needs "
            f"{K.MODEL} = 'gpt2'")
    raw_scores = metadata.get(K.SCORES)
    if raw_scores is None:
        scores = [0.0] * n_tokens            # llama.cpp: score 0 for every token
    else:
        # float32 as llama.cpp holds them (int32 scores are cast to float too)
        try:
            scores = np.asarray(raw_scores, dtype=np.float32).reshape(-1).tolist()
        except (TypeError, ValueError):
            raise ValueError(f"{K.SCORES} must be a list of numbers") from None
    return VocabModel(
        kind="SPM",
        default_ids={"bos": 1, "eos": 2, "unk": 0},
        add_bos=True,
        add_eos=False,
        add_space_prefix=True,
        clean_spaces=False,
        make_encoder=lambda vocab: SpmEncoder(vocab.tokens, vocab.token_to_id, scores),
        normal_piece=unescape_piece,
        space_prefix_after_special=True,
    )


# llama.cpp's defaults for "bert": bert-base-uncased's ids
_WPM_DEFAULT_IDS = {"bos": 101, "eos": None, "unk": 100, "sep": 102, "pad": 0, "mask": 103}


def _wpm_model(metadata: Mapping[str, Any]) -> VocabModel:
    tokens = metadata.get(K.LIST) or ()
    ids = _special_ids(metadata, _WPM_DEFAULT_IDS, len(tokens))
    needed = (("bos", "[CLS]", K.BOS_ID), ("sep", "[SEP]", K.SEP_ID), ("unk", "[UNK]", K.UNK_ID))
    missing = [f"{text} ({key}; default {_WPM_DEFAULT_IDS[slot]})" for slot, text, key in needed if ids[slot] is None]
    if missing:
        raise ValueError(
            f"{K.MODEL} = 'bert' (WordPiece) needs the ids of {', '.join(missing)}: the keys are absent or "
            f"out of range and the defaults do not fit its {len(tokens)} tokens")
    # llama.cpp: lowercase defaults to true, strip_accents to lowercase's value
    lowercase = bool(metadata.get(K.NORMALIZER_LOWERCASE, True))
    strip_accents = bool(metadata.get(K.NORMALIZER_STRIP_ACCENTS, lowercase))
    return VocabModel(
        kind="WPM",
        default_ids=_WPM_DEFAULT_IDS,
        add_bos=True,
        add_eos=False,
        add_space_prefix=False,
        clean_spaces=True,
        make_encoder=lambda vocab: WpmEncoder(vocab.tokens, vocab.token_to_id, vocab.special["unk"],
                                              lowercase, strip_accents),
        normal_piece=unescape_piece,        # "▁" is the word start's space
        add_sep=True,
        always_cls_sep=True,
    )


# tokenizer.ggml.model -> VocabModel builder
TOKENIZER_MODELS: dict[str, Callable[[Mapping[str, Any]], VocabModel]] = {
    "gpt2": _bpe_model,
    "llama": _spm_model,
    "bert": _wpm_model,
}

# Models llama.cpp knows that we do not implement yet, for a precise error.
_NOT_YET = {
    "t5": "Unigram (UGM)",
    "rwkv": "RWKV",
    "plamo2": "PLaMo-2",
    "gemma4": "Gemma-4 BPE",
    "hybriddna": "hybrid-DNA BPE",
    "whitespace": "whitespace BPE",
    "no_vocab": "no vocabulary",
    "none": "no vocabulary",
}

# texts longer than this many characters are looked through for special tokens a piece at a time
_PARTITION_CHUNK = 1 << 16

# plain ints: these are tested against 262k attributes
_HIDDEN_UNLESS_RENDERED = int(TokenAttr.CONTROL | TokenAttr.UNKNOWN)
_RENDERED_AS_TEXT = int(TokenAttr.CONTROL | TokenAttr.UNKNOWN | TokenAttr.USER_DEFINED)
_NORMAL, _BYTE = int(TokenAttr.NORMAL), int(TokenAttr.BYTE)


class TokenizedPair(NamedTuple):
    """A (query, document) pair as one sequence, and each token's segment (0 or 1)."""

    ids: list[int]
    types: list[int]


class Tokenizer:
    def __init__(self, vocab: Vocab, model: VocabModel, specials: SpecialTokens,
                 rerank_template: str | None = None):
        self.vocab = vocab
        self.model = model
        self._encoder = model.make_encoder(vocab)
        self._specials = specials
        self.rerank_template = rerank_template      # tokenizer.chat_template.rerank: "{query}", "{document}"
        # token_to_piece cache, filled on first use: building all 262k pieces of a
        # large vocab up front would dominate the tokenizer's load time
        self._pieces: list[bytes | None] = [None] * vocab.n_tokens

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any]) -> "Tokenizer":
        """Build from GGUF metadata: {key: field.contents()}."""
        name = metadata.get(K.MODEL)
        if name is None:
            raise ValueError(f"GGUF metadata has no tokenizer model ({K.MODEL})")
        build = TOKENIZER_MODELS.get(name)
        if build is None:
            supported = ", ".join(sorted(TOKENIZER_MODELS))
            if name in _NOT_YET:
                raise ValueError(
                    f"tokenizer model {name!r} ({_NOT_YET[name]}) is not supported yet; "
                    f"supported: {supported}")
            raise ValueError(f"unknown tokenizer model {K.MODEL}={name!r}; supported: {supported}")
        for key in (K.LIST, K.TOKEN_TYPE, K.SCORES, K.MERGES):  # arrays; a string would pass for one
            value = metadata.get(key)
            if value is not None and (isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray))):
                raise ValueError(f"{key} must be an array, got {type(value).__name__} {str(value)[:40]!r}")
        model = build(metadata)
        vocab = load_vocab(
            metadata,
            default_ids=model.default_ids,
            add_bos=model.add_bos,
            add_eos=model.add_eos,
            add_space_prefix=model.add_space_prefix,
            add_sep=model.add_sep,
        )
        template = metadata.get(K.RERANK_TEMPLATE)
        return cls(vocab, model, special_tokens(vocab, metadata),
                   rerank_template=template if isinstance(template, str) else None)

    # ---- properties -------------------------------------------------------

    @property
    def n_vocab(self) -> int:
        return self.vocab.n_tokens

    @property
    def bos_id(self) -> int | None:
        return self.vocab.special["bos"]

    @property
    def eos_id(self) -> int | None:
        return self.vocab.special["eos"]

    @property
    def eot_id(self) -> int | None:
        return self.vocab.special["eot"]

    @property
    def add_bos(self) -> bool:
        return self.vocab.add_bos

    @property
    def add_eos(self) -> bool:
        return self.vocab.add_eos

    @property
    def eog_ids(self) -> frozenset[int]:
        return self.vocab.eog_ids

    def is_eog(self, token_id: int) -> bool:
        return token_id in self.vocab.eog_ids

    def token_text(self, token_id: int) -> str:
        return self.vocab.tokens[self._check_id(token_id)]

    # ---- text -> ids ------------------------------------------------------

    def fewest_tokens(self, text: str) -> int:
        """A lower bound on len(tokenize(text)), at no cost: one token stands for at most as many
        characters as its text has (BPE's byte spelling has one character per byte, SPM's "▁" is
        one space; byte and special tokens stand for no more than their text). Tokenizers that drop
        text (whitespace eaten by LSTRIP/RSTRIP special tokens) give no bound: 0."""
        longest = self._longest_token
        return len(text) // longest if longest else 0

    @cached_property
    def _longest_token(self) -> int:
        if self.model.kind not in ("BPE", "SPM") or any(t.lstrip or t.rstrip for t in self._specials):
            return 0
        return max(map(len, self.vocab.tokens), default=0)

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True,
                 text_spans: Sequence[tuple[int, int]] = (), max_tokens: int | None = None) -> list[int]:
        """llama_tokenize: add_special adds BOS/EOS as the vocab asks; parse_special
        lets CONTROL tokens written in the text become their ids, except where a match
        overlaps one of `text_spans` ([start, end) character ranges that are plain text,
        such as a chat message's content inside a rendered template).

        max_tokens: a text that `fewest_tokens` already puts above it raises TooManyTokensError
        before any work -- what a prompt longer than the context may cost a server. A text under
        the bound is tokenized whatever its length: the caller checks the count."""
        if max_tokens is not None and (at_least := self.fewest_tokens(text)) > max_tokens:
            raise TooManyTokensError(at_least, max_tokens)
        out: list[int] = []
        cls_sep = add_special and self.model.always_cls_sep
        if add_special and (self.vocab.add_bos or cls_sep):
            out.append(self.vocab.special["bos"])
        space_prefix = self.model.space_prefix_after_special and self.vocab.add_space_prefix
        if text_spans or len(text) <= _PARTITION_CHUNK or self._strippers:
            fragments: Iterable[str | int] = partition(text, self._specials, parse_special, text_spans)
        else:   # a piece at a time: the fragments of the whole text would be a copy of it and more
            fragments = chain.from_iterable(partition(piece, self._specials, parse_special)
                                            for piece in self._partition_pieces(text))
        self._encoder.encode_fragments(fragments, out, space_prefix)
        if cls_sep:
            out.append(self.vocab.special["sep"])
        elif add_special and self.vocab.add_eos:
            out.append(self.vocab.special["eos"])
        return out

    def tokenize_pair(self, query: str, document: str) -> TokenizedPair:
        """A re-ranker's input, as llama.cpp's server builds it (`format_prompt_rerank`): with a rerank
        template, the template with {query} and {document} replaced, tokenized without BOS/EOS and
        parsing special tokens; else [BOS] query [EOS] [SEP] document [EOS], each part as the vocab's
        add_bos/add_eos/add_sep say, with SEP standing in for a missing EOS, and the two texts tokenized
        with neither BOS/EOS nor special tokens. For BERT ([CLS]=BOS, add_eos, no add_sep):
        [CLS] query [SEP] document [SEP]. The document's tokens and what follows are segment 1."""
        if self.rerank_template is not None:
            prompt = self.rerank_template.replace("{query}", query).replace("{document}", document)
            ids = self.tokenize(prompt, add_special=False, parse_special=True)
            return TokenizedPair(ids, [0] * len(ids))
        vocab, special = self.vocab, self.vocab.special
        eos = special["eos"] if special["eos"] is not None else special["sep"]
        if vocab.add_eos and eos is None:
            raise ValueError(f"a rerank pair needs an end token: {K.ADD_EOS} is true, but neither "
                             f"{K.EOS_ID} nor {K.SEP_ID} is set")
        if vocab.add_sep and special["sep"] is None:
            raise ValueError(f"a rerank pair needs a separator: {K.ADD_SEP} is true, but {K.SEP_ID} is not set")
        first = [special["bos"]] if vocab.add_bos else []
        first += self.tokenize(query, add_special=False, parse_special=False)
        first += [eos] * vocab.add_eos + [special["sep"]] * vocab.add_sep
        second = self.tokenize(document, add_special=False, parse_special=False) + [eos] * vocab.add_eos
        return TokenizedPair(first + second, [0] * len(first) + [1] * len(second))

    @cached_property
    def _strippers(self) -> bool:
        """Special tokens that eat the whitespace beside them: a cut there would change what they eat."""
        return any(t.lstrip or t.rstrip for t in self._specials)

    @cached_property
    def _special_texts(self) -> tuple[str, ...]:
        """The special tokens' texts that could run across a cut."""
        return tuple(t.text for t in self._specials if len(t.text) > 1)

    def _partition_pieces(self, text: str) -> Iterable[str]:
        """`text` cut where the encoder cuts its chunks (words do not change) and no special token's
        text runs across the cut (the special tokens found do not change either)."""
        texts = self._special_texts
        reach = max(map(len, texts), default=1) - 1
        start = end = 0
        for chunk in text_chunks(text, self._encoder.chunk_cut, _PARTITION_CHUNK):
            end += len(chunk)
            near = text[max(0, end - reach):end + reach]
            if end < len(text) and any(map(near.__contains__, texts)):
                continue   # a special token may run across: the next cut instead
            yield text[start:end]
            start = end

    def control_text(self, text: str) -> str | None:
        """The first CONTROL/UNKNOWN token text that tokenize(parse_special=True) would
        turn into its id in `text`, or None: text that is the same token by token either way."""
        for frag in partition(text, self._specials, parse_special=True):
            if isinstance(frag, int) and self.vocab.attrs[frag] & _HIDDEN_UNLESS_RENDERED:
                return self.vocab.tokens[frag]
        return None

    # ---- ids -> text ------------------------------------------------------

    def token_to_bytes(self, token_id: int, render_special: bool = True) -> bytes:
        """llama_token_to_piece(lstrip=0): CONTROL/UNKNOWN tokens are empty unless rendered."""
        tid = self._check_id(token_id)
        if not render_special and self.vocab.attrs[tid] & _HIDDEN_UNLESS_RENDERED:
            return b""
        piece = self._pieces[tid]
        if piece is None:
            piece = self._pieces[tid] = self._piece(tid)
        return piece

    def detokenize_bytes(
        self, ids: Iterable[int], render_special: bool = True, remove_special: bool = False
    ) -> bytes:
        """llama_detokenize(remove_special, unparse_special=render_special), as bytes."""
        ids = [self._check_id(t) for t in ids]
        vocab = self.vocab
        strip_space = vocab.add_space_prefix
        if remove_special and vocab.add_bos and ids and ids[0] == vocab.special["bos"]:
            ids = ids[1:]
            strip_space = False
        if remove_special and vocab.add_eos and ids and ids[-1] == vocab.special["eos"]:
            ids = ids[:-1]
        parts = [self.token_to_bytes(t, render_special) for t in ids]
        if strip_space:
            # only the first token loses one leading space (lstrip=1 in llama.cpp);
            # an empty (hidden) first piece still uses up the strip
            if parts and parts[0].startswith(b" "):
                parts[0] = parts[0][1:]
        data = b"".join(parts)
        if self.model.clean_spaces:
            data = clean_up_spaces(data)
        return data

    def detokenize(
        self, ids: Iterable[int], render_special: bool = True, remove_special: bool = False
    ) -> str:
        """Token ids -> text; bytes that are not valid UTF-8 become U+FFFD."""
        return self.detokenize_bytes(ids, render_special, remove_special).decode("utf-8", errors="replace")

    # ---- helpers ----------------------------------------------------------

    def _check_id(self, token_id: int) -> int:
        try:
            tid = operator.index(token_id)
        except TypeError:
            raise ValueError(f"token id {token_id!r} is not an integer") from None
        if not 0 <= tid < self.vocab.n_tokens:
            raise ValueError(
                f"token id {tid} is out of range for this vocabulary (n_vocab={self.vocab.n_tokens})")
        return tid

    def _piece(self, tid: int) -> bytes:
        """llama.cpp token_to_piece(special=True) for one token, by attribute."""
        attr = self.vocab.attrs[tid]
        text = self.vocab.tokens[tid]
        if attr & _RENDERED_AS_TEXT:
            return text.encode("utf-8")
        if attr & _NORMAL:
            return self.model.normal_piece(text)
        if attr & _BYTE:
            # "<0xAB>" -> 0xAB; llama.cpp strtol()s characters 3..4 whatever they are
            try:
                return bytes([int(text[3:5], 16)])
            except ValueError:
                return b"\x00"
        return b""  # UNUSED / UNDEFINED render as nothing
