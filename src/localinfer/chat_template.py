"""Chat templates: render `tokenizer.chat_template` (Jinja2) in a sandbox.

Templates come from model files downloaded from the internet, so they run in Jinja2's
ImmutableSandboxedEnvironment: no attribute access to Python internals, no mutation of the
messages. The globals mirror what Hugging Face transformers and llama.cpp provide
(`raise_exception`, `strftime_now`, `tojson`, bos/eos tokens).
"""
from __future__ import annotations

import datetime
import json
from typing import Any, Mapping, Sequence

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

# llama.cpp's built-in gemma turn format, for gemma files that carry no template of their own.
GEMMA_TEMPLATE = (  # BOS comes from tokenization (add_bos is true for gemma), as in llama.cpp
    "{% if messages[0]['role'] == 'system' %}"
    "{% set first_user_prefix = messages[0]['content'] + '\n\n' %}{% set loop_messages = messages[1:] %}"
    "{% else %}{% set first_user_prefix = '' %}{% set loop_messages = messages %}{% endif %}"
    "{% for message in loop_messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') + message['content'] | trim + '<end_of_turn>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)
# ChatML, the most common format, for other files without a template.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


class ChatTemplateError(ValueError):
    pass


def _raise_exception(message: str):
    raise ChatTemplateError(f"chat template error: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False, sort_keys: bool = False) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys)


def validate_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict]:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise ChatTemplateError("messages must be a list of {'role': ..., 'content': ...} dicts")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise ChatTemplateError(f"message {i} must be a dict with a string 'role'")
        content = m.get("content", "")
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise ChatTemplateError(f"message {i}: 'content' must be a string, got {type(content).__name__}")
        out.append({**m, "content": content})
    return out


class ChatTemplate:
    def __init__(self, source: str, bos_token: str = "", eos_token: str = ""):
        self.source = source
        self.bos_token, self.eos_token = bos_token, eos_token
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=["jinja2.ext.loopcontrols"])
        env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now)
        env.filters["tojson"] = _tojson
        try:
            self._template = env.from_string(source)
        except jinja2.TemplateError as e:
            raise ChatTemplateError(f"invalid chat template: {e}") from None

    def render(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True,
               **extra: Any) -> str:
        try:
            return self._template.render(messages=validate_messages(messages),
                                         add_generation_prompt=add_generation_prompt,
                                         bos_token=self.bos_token, eos_token=self.eos_token, **extra)
        except ChatTemplateError:
            raise
        except jinja2.TemplateError as e:  # includes SecurityError from the sandbox
            raise ChatTemplateError(f"chat template failed: {e}") from None


def template_for(metadata: Mapping[str, Any]) -> str:
    """The file's own template, else the built-in format its architecture uses in llama.cpp."""
    source = metadata.get("tokenizer.chat_template")
    if isinstance(source, str) and source.strip():
        return source
    if str(metadata.get("general.architecture", "")).startswith("gemma"):
        return GEMMA_TEMPLATE
    return CHATML_TEMPLATE
