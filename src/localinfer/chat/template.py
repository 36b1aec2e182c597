"""Chat templates: render `tokenizer.chat_template` (Jinja2) under limits a hostile file cannot pass.

Templates come from model files downloaded from the internet, so they run in a sandbox with a
budget (sandbox.LimitedEnvironment): no attribute access to Python internals, no
mutation of the messages, and per render a CPU-time limit, a step count and caps on every size; a
template that passes a limit is a ChatTemplateError naming it. A template compiles on its first
render, so a model whose template is broken or hostile still loads (and runs `--raw`). The
globals mirror what Hugging Face transformers and llama.cpp provide (`raise_exception`,
`strftime_now`, `tojson`, bos/eos tokens).
"""
from __future__ import annotations

import datetime
import json
import threading
from typing import Any, Mapping, Sequence

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import jinja2

    from .sandbox import LimitedEnvironment

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

MAX_STRFTIME_FORMAT = 64  # Python caps strftime's output at 256 x the format's length


class ChatTemplateError(ValueError):
    pass


def _sandbox():
    """The sandbox module (and jinja2 with it), imported by a template's first compile: a model that
    is only given raw prompts never pays for them."""
    from . import sandbox
    return sandbox


def _raise_exception(message: str):
    raise ChatTemplateError(f"chat template error: {_sandbox().one_line(message)}")


def _strftime_now(fmt: str) -> str:
    if isinstance(fmt, str) and len(fmt) > MAX_STRFTIME_FORMAT:
        _sandbox().current_budget().fail(f"a strftime_now format longer than {MAX_STRFTIME_FORMAT} characters")
    return datetime.datetime.now().strftime(fmt)


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False, sort_keys: bool = False) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys)


_ENVIRONMENT: LimitedEnvironment | None = None


def _environment() -> LimitedEnvironment:
    global _ENVIRONMENT
    if _ENVIRONMENT is None:  # one for all templates: wrapping the filters reads their signatures
        _ENVIRONMENT = _sandbox().LimitedEnvironment(
            extra_globals={"raise_exception": _raise_exception, "strftime_now": _strftime_now},
            extra_filters={"tojson": _tojson},
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    return _ENVIRONMENT


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


def _template_error(e: Exception) -> ChatTemplateError:
    """Whatever a template raised, as one line (a template's errors are the file's, not ours)."""
    import jinja2
    sandbox = _sandbox()
    one_line = sandbox.one_line
    if isinstance(e, ChatTemplateError):
        return e
    if isinstance(e, sandbox.LimitExceeded):
        return ChatTemplateError(f"chat template exceeded its limits: {one_line(e)}")
    if isinstance(e, (jinja2.TemplateSyntaxError, SyntaxError)):  # SyntaxError: `{% break %}` outside a loop
        return ChatTemplateError(f"invalid chat template: {one_line(e)}")
    if isinstance(e, jinja2.TemplateError):  # includes SecurityError from the sandbox
        return ChatTemplateError(f"chat template failed: {one_line(e)}")
    return ChatTemplateError(f"chat template failed: {type(e).__name__}: {one_line(e)}")


class ChatTemplate:
    """A template compiled on its first render, so a model whose template is broken or hostile
    still loads; the compile and every render run under a fresh budget."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = ""):
        self.source = source
        self.bos_token, self.eos_token = bos_token, eos_token
        self._template: jinja2.Template | None = None
        self._invalid: str | None = None  # why the source never compiles (not a limit: that may pass later)
        self._lock = threading.Lock()

    def _compiled(self) -> jinja2.Template:
        import jinja2
        sandbox = _sandbox()
        with self._lock:
            if self._template is None and self._invalid is None:
                if len(self.source) > sandbox.MAX_SOURCE_CHARS:
                    self._invalid = (f"invalid chat template: it is {len(self.source)} characters long, "
                                     f"the limit is {sandbox.MAX_SOURCE_CHARS}")
                else:
                    try:
                        with sandbox.running_under(sandbox.Budget()):
                            self._template = _environment().from_string(self.source)
                    except Exception as e:  # RecursionError from deep nesting included
                        error = _template_error(e)
                        if isinstance(e, (jinja2.TemplateSyntaxError, SyntaxError)):
                            self._invalid = str(error)
                        raise error from None
            if self._invalid is not None:
                raise ChatTemplateError(self._invalid)
            return self._template

    def render(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True,
               **extra: Any) -> str:
        variables = dict(messages=validate_messages(messages), add_generation_prompt=add_generation_prompt,
                         bos_token=self.bos_token, eos_token=self.eos_token, **extra)
        template = self._compiled()
        sandbox = _sandbox()
        with sandbox.running_under(sandbox.Budget.for_input(variables)) as budget:
            pieces = template.generate(variables)
            try:
                out, size = [], 0
                for piece in pieces:
                    size += len(piece)
                    budget.check_chars(size, "the output")
                    budget.step()
                    out.append(piece)
                if budget.error is not None:  # a limit error that something inside swallowed
                    raise sandbox.LimitExceeded(budget.error)
                return "".join(out)
            except Exception as e:  # RecursionError and MemoryError included
                raise _template_error(e) from None
            finally:
                pieces.close()


def template_for(metadata: Mapping[str, Any]) -> str:
    """The file's own template, else the built-in format its architecture uses in llama.cpp."""
    source = metadata.get("tokenizer.chat_template")
    if isinstance(source, str) and source.strip():
        return source
    if str(metadata.get("general.architecture", "")).startswith("gemma"):
        return GEMMA_TEMPLATE
    return CHATML_TEMPLATE
