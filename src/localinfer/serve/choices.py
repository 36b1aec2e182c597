"""The request options that shape the choices of an answer (n, logprobs, logit_bias, echo) and
the OpenAI shapes of their log-probabilities.

- chat: `logprobs: true` and `top_logprobs: 0..20` -> choice.logprobs =
  {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}], "refusal": null}
- completions (the legacy shape): `logprobs: 0..5` -> choice.logprobs =
  {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}; with `echo` the
  prompt's tokens come first, the first one's logprob and alternatives null (nothing predicts it).

A token's string is its piece (control tokens by their name) decoded as UTF-8, an incomplete byte
sequence as U+FFFD; `bytes` is the raw piece. The end-of-generation token is not text and is left
out, as OpenAI does. text_offset counts characters of these strings from the start of the choice's
text (the echoed prompt included). Log-probabilities are the model's own: sampling/logprobs.py says which.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..batching.fork import MAX_CHOICES
from ..sampling.logit_bias import LogitBiasError, check_logit_bias
from ..sampling.logprobs import MAX_TOP_LOGPROBS

MAX_COMPLETION_LOGPROBS = 5  # OpenAI's bound for /v1/completions


@dataclass(frozen=True)
class ChoiceOptions:
    n: int = 1
    n_top: int | None = None  # None: no logprobs; else the alternatives per token
    logit_bias: tuple = ()
    echo: bool = False


def parse_choice_options(body: Mapping[str, Any], kind: str, n_vocab: int, bad,
                         max_logprobs: int | None = None) -> ChoiceOptions:
    """bad(message, param) -> the ApiError to raise (api.bad); max_logprobs: a completion's bound on
    `logprobs` (OpenAI's MAX_COMPLETION_LOGPROBS unless given)."""
    def integer(name, lo, hi):
        v = body.get(name)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            raise (bad(f"'{name}' must be an integer, got {type(v).__name__}", name))
        if not lo <= v <= hi:
            raise (bad(f"'{name}' must be between {lo} and {hi}, got {v}", name))
        return v

    n = integer("n", 1, MAX_CHOICES) or 1
    if kind == "chat":
        want = body.get("logprobs")
        if want is not None and not isinstance(want, bool):
            raise bad(f"'logprobs' must be a boolean, got {type(want).__name__}", "logprobs")
        top = integer("top_logprobs", 0, MAX_TOP_LOGPROBS)
        if top and not want:  # 0 is what some clients always send: harmless
            raise bad("'top_logprobs' needs 'logprobs': true", "top_logprobs")
        n_top = (top or 0) if want else None
        echo = False
    else:
        n_top = integer("logprobs", 0, MAX_COMPLETION_LOGPROBS if max_logprobs is None else max_logprobs)
        echo = body.get("echo")
        if echo is not None and not isinstance(echo, bool):
            raise bad(f"'echo' must be a boolean, got {type(echo).__name__}", "echo")
    try:
        bias = check_logit_bias(body.get("logit_bias"), n_vocab)
    except LogitBiasError as e:
        raise bad(str(e), "logit_bias") from None
    return ChoiceOptions(n, n_top, bias, bool(echo))


class LogprobFormat:
    """TokenLogprob entries -> the OpenAI logprobs object of one choice's answer or stream chunk."""

    def __init__(self, tokenizer, kind: str):
        self.tokenizer, self.kind = tokenizer, kind
        self.offsets: dict[int, int] = {}  # choice index -> characters of token strings so far

    def piece(self, token: int) -> tuple[str, list[int]]:
        data = self.tokenizer.token_to_bytes(token, render_special=True)
        return data.decode("utf-8", errors="replace"), list(data)

    def format(self, entries, index: int = 0) -> dict:
        """entries: TokenLogprob in order (an echoed first prompt token's logprob is None); the
        legacy shape's text_offset continues from this choice's previous call."""
        entries = [e for e in entries if not self.tokenizer.is_eog(e.token)]
        if self.kind == "chat":
            return {"content": [self._chat_entry(e) for e in entries], "refusal": None}
        tokens, logprobs, tops, offsets = [], [], [], []
        offset = self.offsets.get(index, 0)
        for e in entries:
            text = self.piece(e.token)[0]
            tokens.append(text)
            logprobs.append(e.logprob)
            top = None
            if e.logprob is not None:
                top = {}
                for t, lp in e.top:
                    top.setdefault(self.piece(t)[0], lp)  # two tokens with one string: the likelier
            tops.append(top)
            offsets.append(offset)
            offset += len(text)
        self.offsets[index] = offset
        return {"tokens": tokens, "token_logprobs": logprobs, "top_logprobs": tops, "text_offset": offsets}

    def _chat_entry(self, e) -> dict:
        text, data = self.piece(e.token)
        top = []
        for t, lp in e.top:
            t_text, t_data = self.piece(t)
            top.append({"token": t_text, "logprob": lp, "bytes": t_data})
        return {"token": text, "logprob": e.logprob, "bytes": data, "top_logprobs": top}

