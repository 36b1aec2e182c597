"""create_completion's prompt and its answers in llama-cpp-python's shapes, whole or streamed.

    prompt_tokens   a string (BOS by the model's rule, control-token text parsed) or token ids as
                    they are; with a suffix, fill-in-the-middle with the model's FIM tokens
    Answer          one generation's chunks -> the completion dict, or its stream chunks

The shapes are llama-cpp-python 0.3's: `choices[0]` has text, index, logprobs, finish_reason;
usage counts the generated tokens without the end-of-generation token; a stream sends a chunk per
piece of text and ends with an empty one carrying the finish reason. logprobs=N gives
{tokens, text_offset, token_logprobs, top_logprobs}: each token's text, where it starts
(counted in characters from the prompt's start), its log-probability, and a dict of the N most
likely tokens' texts and the sampled one's. Log-probabilities are the model's raw distribution,
before bias, penalties and sampling, as there (sampling/logprobs.py).
"""
from __future__ import annotations

from typing import Iterator, Sequence

from ...sampling.logprobs import score_prompt


def prompt_tokens(model, prompt: str | Sequence[int], suffix: str | None, spm_infill: bool) -> list[int]:
    """The prompt's ids. With a suffix: [BOS] FIM_PRE prompt FIM_SUF suffix FIM_MID (suffix first
    when spm_infill), as llama-server's /infill builds it; a model without the three FIM tokens
    is a ValueError. (llama-cpp-python 0.3.36 itself puts token 0 where they go.)"""
    if suffix is None:
        if isinstance(prompt, str):
            return model.tokenize(prompt, add_special=True, parse_special=True)
        return model._check_ids(prompt)
    if not isinstance(suffix, str):
        raise TypeError(f"suffix must be a string, got {type(suffix).__name__}")
    special = model.tokenizer.vocab.special
    missing = [name for name in ("fim_pre", "fim_suf", "fim_mid") if special.get(name) is None]
    if missing:
        raise ValueError(f"suffix (fill-in-the-middle) needs the model's FIM tokens; {model.path} has no "
                         f"{', '.join(missing)} token")
    body = (model.tokenize(prompt, add_special=False, parse_special=False) if isinstance(prompt, str)
            else model._check_ids(prompt))
    before = [special["fim_pre"], *body]
    after = [special["fim_suf"], *model.tokenize(suffix, add_special=False, parse_special=False)]
    bos = [model.tokenizer.bos_id] if model.tokenizer.add_bos and model.tokenizer.bos_id is not None else []
    return bos + (after + before if spm_infill else before + after) + [special["fim_mid"]]


def piece(tokenizer, token: int) -> str:
    """One token's text as llama-cpp-python reports it: its bytes, broken UTF-8 dropped."""
    return tokenizer.token_to_bytes(token, render_special=False).decode("utf-8", errors="ignore")


class Answer:
    """One completion's chunks (Model.stream's, in the shim's context) in llama-cpp-python's shapes.

    head: id, object, created, model. prompt: the caller's prompt (echo, text offsets); tokens: its
    ids. n_logprobs: None, or how many alternatives each token's entry lists."""

    def __init__(self, llama, head: dict, prompt, tokens: list[int], chunks, n_logprobs: int | None):
        self.llama, self.head, self.prompt, self.tokens, self.chunks = llama, head, prompt, tokens, chunks
        self.n_logprobs = n_logprobs
        self.tokenizer = llama._model.tokenizer
        # text offsets count characters of the prompt as given (of a token list: its length, as there)
        self.base = len(prompt)

    def _generated(self, chunk) -> tuple[list[int], list]:
        """The chunk's tokens and logprob entries without an end-of-generation token."""
        toks, entries = list(chunk.tokens), list(chunk.logprobs or [])
        if toks and self.tokenizer.is_eog(toks[-1]):
            toks, entries = toks[:-1], entries[:len(toks) - 1]
        return toks, entries

    def _logprobs(self, tokens: list[int], entries: list, offset: int) -> dict:
        """The logprobs dict of consecutive tokens, the first starting at character `offset`."""
        out = {"tokens": [], "text_offset": [], "token_logprobs": [], "top_logprobs": []}
        text = b""
        bos = self.tokenizer.bos_id
        for token, entry in zip(tokens, entries):
            start = offset + len(text.decode("utf-8", errors="ignore"))
            text += self.tokenizer.token_to_bytes(token, render_special=False)
            if token == bos:  # BOS has no entry there
                continue
            s = piece(self.tokenizer, token)
            out["tokens"].append(s)
            out["text_offset"].append(start)
            out["token_logprobs"].append(entry.logprob)
            if entry.logprob is None:
                out["top_logprobs"].append(None)
                continue
            top = {piece(self.tokenizer, i): lp for i, lp in entry.top}
            top.update({s: entry.logprob})
            out["top_logprobs"].append(top)
        return out

    def whole(self, echo: bool) -> dict:
        text, toks, entries, finish = [], [], [], "length"
        for chunk in self.chunks:
            text.append(chunk.text)
            t, e = self._generated(chunk)
            toks += t
            entries += e
            finish = chunk.finish_reason or finish
        text = "".join(text)
        logprobs = None
        if self.n_logprobs is not None:
            if echo:
                logprobs = self._echo_logprobs(toks, entries)
            else:
                logprobs = self._logprobs(toks, entries, self.base)
        if echo:
            prompt = self.prompt if isinstance(self.prompt, str) else self.llama._model.detokenize(self.tokens)
            text = prompt + text
        n = len(toks)
        return {**self.head, "choices": [{"text": text, "index": 0, "logprobs": logprobs,
                                          "finish_reason": finish_reason(finish)}],
                "usage": {"prompt_tokens": len(self.tokens), "completion_tokens": n,
                          "total_tokens": len(self.tokens) + n}}

    def _echo_logprobs(self, toks: list[int], entries: list) -> dict:
        """The prompt's tokens (a leading BOS left out) and the answer's, counted from offset 0;
        the first has no log-probability (nothing predicts it), as OpenAI's echo reports."""
        prompt = list(self.tokens)
        scored = score_prompt(self.llama._model, prompt, self.n_logprobs)  # a fresh context: ours is untouched
        if prompt[:1] == [self.tokenizer.bos_id]:
            prompt, scored = prompt[1:], scored[1:]
        out = self._logprobs(prompt + toks, scored + entries, 0)
        if out["tokens"]:
            out["token_logprobs"][0], out["top_logprobs"][0] = None, None
        return out

    def stream(self) -> Iterator[dict]:
        """A chunk per piece of text (with its tokens' logprobs when asked for), then an empty one
        with the finish reason."""
        finish, sent = "length", ""
        try:
            for chunk in self.chunks:
                toks, entries = self._generated(chunk)
                logprobs = None
                if self.n_logprobs is not None and toks:
                    logprobs = self._logprobs(toks, entries, self.base + len(sent))
                if chunk.text or logprobs:
                    sent += chunk.text
                    yield {**self.head, "choices": [{"text": chunk.text, "index": 0, "logprobs": logprobs,
                                                     "finish_reason": None}]}
                finish = chunk.finish_reason or finish
        finally:
            self.chunks.close()
        yield {**self.head, "choices": [{"text": "", "index": 0, "logprobs": None,
                                         "finish_reason": finish_reason(finish)}]}


def finish_reason(reason: str | None) -> str:
    """localinfer's "context_full" is llama-cpp-python's "length" (max_tokens is cut to the context there)."""
    return "length" if reason in ("length", "context_full") else "stop"
