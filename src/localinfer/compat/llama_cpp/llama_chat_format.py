"""llama-cpp-python's named chat formats (`Llama(chat_format="chatml")`), as the prompt strings its
users get from them, and the rule that picks a model's default.

Each format turns OpenAI-style messages into a ChatFormatterResponse: the prompt text (tokenized
with the model's BOS rule and with control-token text parsed, as llama-cpp-python does), the stop
string it adds, and whether the prompt already holds its special tokens. The strings follow
llama-cpp-python 0.3's formatters (llama_chat_format.py), quirks included -- its "llama-2" puts
`<s>` before each turn and drops the first user role after a system prompt -- because a script
that switches runtime must see the same prompt, and so the same greedy answer.

Only roles a format names are kept (a "tool" message is dropped by "chatml", as there); content
that is not a string (a list of parts) counts as none. The formats that need a handler of their
own there (functionary, llava, chatml-function-calling ...) are not offered: a name outside
FORMATS is a ValueError naming it and the ones that are.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

# Templates that llama-cpp-python recognises in a GGUF and replaces by its own format of that name
# (guess_chat_format_from_gguf_metadata): the published Hugging Face templates, compared verbatim.
CHATML_CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>'"
    " + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
_MISTRAL_HEAD = ("{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0)"
                 " %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
                 "{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
                 "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token")
_MISTRAL_TAIL = ("}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}"
                 "{% endfor %}")
MISTRAL_INSTRUCT_CHAT_TEMPLATE = _MISTRAL_HEAD + " + ' ' " + _MISTRAL_TAIL
MIXTRAL_INSTRUCT_CHAT_TEMPLATE = _MISTRAL_HEAD + _MISTRAL_TAIL
LLAMA3_INSTRUCT_CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")

GGUF_TEMPLATE = "chat_template.default"  # llama-cpp-python's name for the file's own template


@dataclass
class ChatFormatterResponse:
    prompt: str
    stop: str | list[str] | None = None
    added_special: bool = False  # the prompt holds BOS itself: tokenize without adding one


Turn = tuple[str, "str | None"]  # (role prefix, content or None for the open turn)


def _system(messages: Sequence[Mapping[str, Any]]) -> str:
    """The first system message's content, or ""."""
    return next((m.get("content") or "" for m in messages if m.get("role") == "system"), "")


def _turns(messages: Sequence[Mapping[str, Any]], roles: Mapping[str, str]) -> list[Turn]:
    """(prefix, content) of each message whose role the format names; other roles are left out."""
    return [(roles[m["role"]], m.get("content") if isinstance(m.get("content"), str) else None)
            for m in messages if m.get("role") in roles]


def _joined(turns: Sequence[Turn], between: str, seps: Sequence[str], head: str = "") -> str:
    """head, then each turn as prefix + between + content + its separator (alternating through
    `seps`), the open turn (no content) as prefix + between alone: the shape of most formats."""
    out = head
    for i, (prefix, content) in enumerate(turns):
        out += prefix + between + content + seps[i % len(seps)] if content else prefix + between
    return out


def chatml(messages, **_) -> ChatFormatterResponse:
    # an empty system turn is written when there is no system message, as there
    head = "<|im_start|>system\n" + _system(messages) + "<|im_end|>\n"
    turns = _turns(messages, {"user": "<|im_start|>user", "assistant": "<|im_start|>assistant"})
    return ChatFormatterResponse(_joined([*turns, ("<|im_start|>assistant", None)], "\n", ["<|im_end|>\n"], head),
                                 stop="<|im_end|>")


def llama_2(messages, **_) -> ChatFormatterResponse:
    system = _system(messages)
    out = (f"[INST] <<SYS>>\n{system}\n<</SYS>>" if system else "") + " "
    seps = [" ", "</s>"]
    for i, (prefix, content) in enumerate(_turns(messages, {"user": "<s>[INST]", "assistant": "[/INST]"})):
        if system and i == 0:  # the first turn's role is left out after a system prompt
            out += (content or "") + seps[0]
        elif content:
            out += prefix + content + " " + seps[i % 2]
        else:
            out += prefix + " "
    return ChatFormatterResponse(out + "[/INST]")


def llama_3(messages, **_) -> ChatFormatterResponse:
    roles = {r: f"<|start_header_id|>{r}<|end_header_id|>\n\n" for r in ("system", "user", "assistant")}
    turns = [*_turns(messages, roles), (roles["assistant"], None)]
    return ChatFormatterResponse(_joined(turns, "", ["<|eot_id|>"]), stop="<|eot_id|>")


def gemma(messages, **_) -> ChatFormatterResponse:
    # system messages are dropped (Gemma has no system role), as there
    turns = _turns(messages, {"user": "<start_of_turn>user\n", "assistant": "<start_of_turn>model\n"})
    return ChatFormatterResponse(_joined([*turns, ("<start_of_turn>model\n", None)], "", ["<end_of_turn>\n"]),
                                 stop="<end_of_turn>\n")


def mistral_instruct(messages, **_) -> ChatFormatterResponse:
    out = ""
    for m in messages:
        content = m.get("content")
        if m.get("role") == "user" and isinstance(content, str):
            out += "[INST] " + content
        elif m.get("role") == "assistant" and content is not None:
            out += " [/INST]" + content + "</s>"
    return ChatFormatterResponse(out + " [/INST]", stop="</s>")


def zephyr(messages, **_) -> ChatFormatterResponse:
    head = "<|system|>\n" + _system(messages) + "</s>\n"
    turns = [*_turns(messages, {"user": "<|user|>\n", "assistant": "<|assistant|>\n"}), ("<|assistant|>\n", None)]
    return ChatFormatterResponse(_joined(turns, "\n", ["</s>\n"], head), stop="</s>")


def qwen(messages, **_) -> ChatFormatterResponse:
    head = "<|im_start|>system\n" + (_system(messages) or "You are a helpful assistant.") + "<|im_end|>\n"
    turns = [*_turns(messages, {"user": "<|im_start|>user", "assistant": "<|im_start|>assistant"}),
             ("<|im_start|>assistant", None)]
    return ChatFormatterResponse(_joined(turns, "\n", ["<|im_end|>\n"], head), stop="<|endoftext|>")


def alpaca(messages, **_) -> ChatFormatterResponse:
    # no open turn for the answer, as there
    turns = _turns(messages, {"user": "### Instruction", "assistant": "### Response"})
    return ChatFormatterResponse(_colon_two(_system(messages), turns, "\n\n", "</s>"))


def vicuna(messages, **_) -> ChatFormatterResponse:
    system = ("A chat between a curious user and an artificial intelligence assistant. The assistant gives "
              "helpful, detailed, and polite answers to the user's questions.")
    turns = [*_turns(messages, {"user": "USER", "assistant": "ASSISTANT"}), ("ASSISTANT", None)]
    return ChatFormatterResponse(_colon_two(system, turns, " ", "</s>"))


def _colon_two(system: str, turns: Sequence[Turn], sep: str, sep2: str) -> str:
    """`role: content` turns after the system text, separators alternating; the open turn `role:`."""
    out = system + sep
    for i, (role, content) in enumerate(turns):
        out += f"{role}: {content}" + (sep, sep2)[i % 2] if content else role + ":"
    return out


FORMATS: dict[str, Callable[..., ChatFormatterResponse]] = {
    "chatml": chatml, "llama-2": llama_2, "llama-3": llama_3, "gemma": gemma, "mistral-instruct": mistral_instruct,
    "zephyr": zephyr, "qwen": qwen, "alpaca": alpaca, "vicuna": vicuna}


def guess_chat_format_from_gguf_metadata(metadata: Mapping[str, Any]) -> str | None:
    """The named format whose published template the file carries verbatim, else None."""
    template = metadata.get("tokenizer.chat_template")
    if template == CHATML_CHAT_TEMPLATE:
        return "chatml"
    if template in (MISTRAL_INSTRUCT_CHAT_TEMPLATE, MIXTRAL_INSTRUCT_CHAT_TEMPLATE):
        return "mistral-instruct"
    if template == LLAMA3_INSTRUCT_CHAT_TEMPLATE:
        return "llama-3"
    return None


def default_chat_format(metadata: Mapping[str, Any]) -> str:
    """llama-cpp-python's choice without chat_format=: a recognised template's named format, else
    the file's template, else "llama-2" (a file without a template gets llama-2's prompt there)."""
    if not isinstance(metadata.get("tokenizer.chat_template"), str):
        return "llama-2"
    return guess_chat_format_from_gguf_metadata(metadata) or GGUF_TEMPLATE


def check_chat_format(name: Any, metadata: Mapping[str, Any]) -> str:
    """`name` if this shim renders it for this file: a FORMATS name, or "chat_template.<x>" where the
    file has tokenizer.chat_template[.<x>]; a ValueError naming it otherwise."""
    if name in FORMATS:
        return name
    if isinstance(name, str) and name.startswith("chat_template."):
        key = "tokenizer.chat_template" + ("" if name == GGUF_TEMPLATE else name[len("chat_template"):])
        if isinstance(metadata.get(key), str):
            return name
        raise ValueError(f"chat_format {name!r}: the model file has no {key}")
    raise ValueError(f"chat_format {name!r} is not one localinfer's llama-cpp-python shim renders; it renders "
                     f"{', '.join(sorted(FORMATS))} and the file's own template ({GGUF_TEMPLATE!r})")


def template_source(name: str, metadata: Mapping[str, Any]) -> str:
    """The Jinja source of a "chat_template.<x>" format (checked by check_chat_format)."""
    return metadata["tokenizer.chat_template" + ("" if name == GGUF_TEMPLATE else name[len("chat_template"):])]
