"""A multi-turn chat that keeps its KV cache between turns.

Each turn renders the whole conversation with the chat template and evaluates it in the
session's own Context; the part already cached (every earlier turn, the answers included) is
reused, so a turn costs only its new tokens.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from ..generate import GenerationChunk, GenerationResult, collect

if TYPE_CHECKING:  # this module is imported by model.py (Model.chat_session), never the other way
    from ..model import Model


class ChatSession:
    def __init__(self, model: Model, system: str | None = None, allow_special_in_content: bool = False,
                 **defaults):
        """allow_special_in_content: as for Model.chat_tokens (messages are plain text unless set)."""
        self.model = model
        self.system = system
        self.allow_special_in_content = allow_special_in_content
        self.defaults = defaults  # generation options for every turn (temperature, max_tokens, ...)
        self.context = model.new_context()
        self.messages: list[dict] = []
        self.last_prompt_tokens: list[int] = []  # the rendered conversation of the latest turn
        self.clear()

    def clear(self) -> None:
        """Forget the conversation (the system prompt stays); the cache is emptied too."""
        self.messages = [{"role": "system", "content": self.system}] if self.system else []
        self.context.reset()

    def set_system(self, system: str | None) -> None:
        """A new system prompt (None: none) from the next turn on; the conversation stays. The cached
        turns after it are computed again once, as the prompt before them changed."""
        self.system = system
        if self.messages and self.messages[0]["role"] == "system":
            self.messages.pop(0)
        if system:
            self.messages.insert(0, {"role": "system", "content": system})

    def stream(self, user_text: str, **options) -> Iterator[GenerationChunk]:
        """Send a user message; yields the answer's chunks. Closing the iterator early keeps the
        partial answer in the conversation."""
        self.messages.append({"role": "user", "content": user_text})
        try:
            tokens = self.model.chat_tokens(self.messages, self.allow_special_in_content)
            chunks = self.model.stream(tokens, context=self.context, **{**self.defaults, **options})
        except BaseException:
            self.messages.pop()
            raise
        self.last_prompt_tokens = tokens
        return self._record(chunks)

    def _record(self, chunks: Iterator[GenerationChunk]) -> Iterator[GenerationChunk]:
        answer = []
        try:
            for chunk in chunks:
                answer.append(chunk.text)
                yield chunk
        finally:
            chunks.close()
            self.messages.append({"role": "assistant", "content": "".join(answer)})

    def send(self, user_text: str, **options) -> GenerationResult:
        chunks = self.stream(user_text, **options)
        return collect(chunks, self.last_prompt_tokens)

    def astream(self, user_text: str, **options):
        """`async for chunk in chat.astream(...)` (aio.py): the turn runs off the event loop's thread."""
        from ..aio import chat_astream
        return chat_astream(self, user_text, **options)

    async def asend(self, user_text: str, **options) -> GenerationResult:
        from ..aio import chat_asend
        return await chat_asend(self, user_text, **options)

    def save(self, path) -> None:
        """Writes the conversation and its KV cache to `path` (atomically), for `load` after a
        restart: the next turn then computes only its new tokens, and gives what it would have."""
        from ..kv.session_state import save_context
        save_context(self.context, path, kind="chat", extra={
            "system": self.system, "messages": self.messages, "last_prompt_tokens": self.last_prompt_tokens,
            "defaults": _savable(self.defaults)})

    def load(self, path) -> None:
        """Continues the conversation `save` wrote (its system prompt and messages replace this
        session's, its generation options are the defaults under the ones this session was made
        with: a resumed chat answers as the saved one would have without passing them again). A file for another model, cache type or context size raises
        StateMismatchError, a corrupt one StateFileError (ValueErrors); the session is then unchanged."""
        from ..kv.session_state import load_context
        from ..kv.state_file import StateFileError

        def check_messages(header: dict) -> None:
            messages, system, prompt = header.get("messages"), header.get("system"), header.get("last_prompt_tokens")
            if not (isinstance(messages, list) and all(isinstance(m, dict) for m in messages)
                    and (system is None or isinstance(system, str))
                    and isinstance(prompt, list) and all(isinstance(t, int) for t in prompt)):
                raise StateFileError(f"{path}: the chat's messages are malformed")
            defaults = header.get("defaults", {})  # absent in files written before they were saved
            if not (isinstance(defaults, dict) and set(defaults) <= set(SAVED_OPTIONS)):
                raise StateFileError(f"{path}: the chat's generation options are malformed")

        header = load_context(self.context, path, kind="chat", check_extra=check_messages)
        self.messages, self.system = header["messages"], header["system"]
        self.last_prompt_tokens = list(header["last_prompt_tokens"])
        self.defaults = {**_restored(header.get("defaults", {})), **self.defaults}


# A session's generation options that its state file keeps, as plain data: a grammar as its text
# (json_schema, grammar, lark, regex; a compiled Grammar as the source it was compiled from).
SAVED_OPTIONS = ("max_tokens", "temperature", "top_k", "top_p", "min_p", "repeat_penalty", "presence_penalty",
                 "frequency_penalty", "repeat_last_n", "seed", "stop", "logprobs", "logit_bias", "json_schema",
                 "grammar", "lark", "regex")


def _savable(defaults: dict) -> dict:
    import json
    out = {}
    for key, value in defaults.items():
        if key not in SAVED_OPTIONS:
            raise ValueError(f"the session option {key!r} cannot be saved")
        if key == "logit_bias" and value is not None:
            value = [[int(t), float(b)] for t, b in dict(value).items()]  # JSON keys would be strings
        if key == "grammar" and hasattr(value, "kind") and hasattr(value, "text"):  # a compiled constrain.Grammar
            key = {"gbnf": "grammar"}.get(value.kind, value.kind)  # saved as its source, compiled again on load
            value = value.text
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            raise ValueError(f"the session option {key}={type(value).__name__} cannot be saved: give it as text "
                             f"(a grammar's GBNF, a JSON schema) to save the session") from None
        out[key] = value
    return out


def _restored(saved: dict) -> dict:
    out = dict(saved)
    if out.get("logit_bias") is not None:
        out["logit_bias"] = {int(t): float(b) for t, b in out["logit_bias"]}
    return out
