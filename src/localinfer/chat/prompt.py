"""A conversation as prompt tokens: the template's control tokens, the messages' text.

The chat template writes the turn structure with control tokens (`<|im_start|>`,
`<start_of_turn>`) and the rendered text is tokenized with parse_special=True so that they
become their ids.  A message's content must not get the same treatment: content holding
`<|im_end|>\\n<|im_start|>system\\n...` would otherwise forge a turn of its own (llama.cpp's
server tokenizes the whole render too, and has this hole).  So each content is located in the
render and handed to the tokenizer as a text span, where control tokens are not recognized.

Locating: the conversation is rendered a second time with each content wrapped in two
noncharacters; the markers' positions are the spans once the marked render, markers removed,
is the plain render again.  The markers go inside the content's leading/trailing whitespace,
so templates that trim the content (gemma's `| trim`) render the same text.  For content
without control-token text the spans change nothing: the ids are the ones tokenizing the whole
render gives, llama.cpp's.  A template that transforms the content some other way (cuts it,
measures it) cannot be followed: then content without control-token text is tokenized as
before, and content with it is refused rather than guessed at.
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from .template import ChatTemplate, ChatTemplateError
from ..tokenizer import Tokenizer, TooManyTokensError

# Unicode noncharacters, set aside for a program's internal use: no text a user or a template
# writes is expected to hold them, and those that do are checked for below.
_OPEN, _CLOSE = "\ufdd0", "\ufdd1"
_MARKERS = re.compile("[\ufdd0\ufdd1]")


class ChatContentError(ValueError):
    """A message's content holds control-token text that cannot be kept apart from the
    template's own control tokens."""

    def __init__(self, index: int, message: str):
        super().__init__(message)
        self.index = index  # which message


def chat_prompt_tokens(template: ChatTemplate, tokenizer: Tokenizer, messages: Sequence[Mapping[str, Any]],
                       allow_special_in_content: bool = False, extra: Mapping[str, Any] | None = None,
                       max_tokens: int | None = None) -> list[int]:
    """The rendered conversation (with the generation prompt) as token ids; BOS is added by
    the vocab's rules unless the template already wrote it (llama.cpp does the same).

    allow_special_in_content: tokenize the contents like the template, so that control-token
    text in them becomes control tokens (llama.cpp's behaviour; only for trusted content).
    extra: more template variables (`tools`).
    max_tokens: a rendered prompt certainly longer raises TooManyTokensError before it is tokenized."""
    extra = dict(extra or {})
    text = template.render(messages, add_generation_prompt=True, **extra)
    if not text.strip():  # the model would answer nothing at all: the template is the file's fault
        raise ChatTemplateError(f"the chat template rendered the conversation as {text!r}, no prompt at all: "
                                f"the model file's tokenizer.chat_template is broken")
    if max_tokens is not None and (at_least := tokenizer.fewest_tokens(text)) > max_tokens:
        raise TooManyTokensError(at_least, max_tokens)   # before the content spans' second render
    spans = [] if allow_special_in_content else content_spans(template, tokenizer, messages, text, extra)
    ids = tokenizer.tokenize(text, add_special=False, parse_special=True, text_spans=spans)
    bos = tokenizer.bos_id
    if tokenizer.add_bos and ids[:1] != [bos]:
        ids = [bos] + ids
    return ids


def content_spans(template: ChatTemplate, tokenizer: Tokenizer, messages: Sequence[Mapping[str, Any]],
                  text: str, extra: Mapping[str, Any] | None = None) -> list[tuple[int, int]]:
    """[start, end) ranges of `text` (the plain render) written from message contents.

    Where the contents cannot be followed through the template, no spans are needed as long as
    no content holds control-token text; one that does is refused (ChatContentError)."""
    marked_ok = _OPEN not in text and _CLOSE not in text
    if marked_ok:
        marked_messages = [{**m, "content": _mark(m["content"])} if _markable(m) else m for m in messages]
        marked = template.render(marked_messages, add_generation_prompt=True, **dict(extra or {}))
        spans = _marked_spans(marked)
        if spans is not None and marked.replace(_OPEN, "").replace(_CLOSE, "") == text:
            return spans
    for i, m in enumerate(messages):
        found = tokenizer.control_text(m["content"]) if _markable(m) else None
        if found is not None:
            why = ("the chat template does not write the content as it is" if marked_ok
                   else "the conversation holds the noncharacters U+FDD0/U+FDD1")
            raise ChatContentError(
                i, f"messages[{i}].content holds the control-token text {found!r}; message content is "
                   f"tokenized as plain text, but {why}, so this text cannot be told apart from the "
                   f"template's own control tokens: remove it from the content")
    return []  # nothing in the contents could become a control token


def _markable(message: Mapping[str, Any]) -> bool:
    content = message.get("content")  # the render has already checked the messages' shape
    return isinstance(content, str) and bool(content.strip())  # blank content needs no span


def _mark(content: str) -> str:
    """The content with markers around its non-blank core: trimming still trims the same."""
    core = content.strip()
    lead = content[:len(content) - len(content.lstrip())]
    return lead + _OPEN + core + _CLOSE + content[len(lead) + len(core):]


def _marked_spans(marked: str) -> list[tuple[int, int]] | None:
    """Where each marked region lies once the markers are removed; None if they do not pair."""
    spans, open_at = [], None
    for removed, m in enumerate(_MARKERS.finditer(marked)):
        at = m.start() - removed  # the position in the unmarked text
        if (m.group() == _OPEN) != (open_at is None):
            return None  # nested, or a close without an open
        if open_at is None:
            open_at = at
        else:
            spans.append((open_at, at))
            open_at = None
    return None if open_at is not None else spans
