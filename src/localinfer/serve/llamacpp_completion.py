"""llama-server's native completion route, POST /completion (and /completions, its un-prefixed name
for the same route; /v1/completions is OpenAI's), for the clients written against it (Continue's
llama.cpp provider, SillyTavern, llama.cpp's own scripts), and its fill-in-the-middle POST /infill
(`input_prefix`, `input_suffix`, `input_extra`, `prompt`: the text already typed at the cursor), which
answers as /completion does; a model without FIM tokens is a 501 that says so.

The request is read as llama-server reads it and rewritten as the /v1/completions body api.py
already checks, so both routes share every check, the engine and the stop handling:

    prompt          a string, token ids, or a mix of both (llama-server's tokenize_mixed; BOS before
                    a first text only); a list of several prompts is refused (one per request)
    n_predict       max_tokens; -1 (the default) is until a stop or the context's end
    n_probs         the alternatives per token, as `completion_probabilities`
    logit_bias      {"id": bias}, or [[id | text, bias | false], ...]; false bans (-100)
    ignore_eos      the end-of-generation tokens banned
    return_tokens   the ids in `tokens`; response_fields: only those ("a/b" reaches into objects)
    timings_per_token  each stream event carries the timings so far
    return_progress    a stream first has events with `prompt_progress` {total, cache, processed, time_ms},
                       one per chunk of the prompt computed
    temperature, top_k, top_p, min_p, seed, stop, repeat_penalty, repeat_last_n, presence_penalty,
    frequency_penalty, grammar, json_schema, stream: as on /v1/completions
    cache_prompt, id_slot, n_keep, ...: accepted; the engine reuses cached prefixes by itself

The answer is llama-server's: {"content", "tokens", "id_slot", "stop": true, "model",
"tokens_predicted", "tokens_evaluated", "generation_settings", "prompt", "has_new_line", "truncated",
"stop_type": eos | word | limit | none, "stopping_word", "tokens_cached", "timings"}. A stream is
`data: {json}` events, one per chunk of text ("stop": false), then the final object, and no
`[DONE]` (llama-server sends none on this route). A prompt longer than the context is llama-server's
400 of type exceed_context_size_error, with n_prompt_tokens and n_ctx.
"""
from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from . import api, jobs
from ..batching.request import Cancelled
from ..sampling.logit_bias import MAX_BIAS
from ..sampling.logprobs import MAX_TOP_LOGPROBS
from .openai_routes import read_json, requested_model
from .timings import timings_json

# fields that mean the same on /v1/completions
_SAME = ("temperature", "top_k", "top_p", "min_p", "seed", "repeat_penalty", "repeat_last_n", "presence_penalty",
         "frequency_penalty", "stream", "stop", "grammar", "json_schema", "grammar_lazy", "grammar_triggers",
         "response_format")
LLAMA_DEFAULT_SEED = 0xFFFFFFFF  # what llama-server reports for "no seed given": a random one
# a /v1/completions name in an error -> the name this route's client sent
_NATIVE_NAME = {"max_tokens": "n_predict", "logprobs": "n_probs"}


def _mixed_prompt(model, prompt: list, n_ctx: int) -> list[int]:
    tokens: list[int] = []
    for i, part in enumerate(prompt):
        if isinstance(part, str):
            tokens += model.tokenize(part, add_special=i == 0, max_tokens=n_ctx)
        elif isinstance(part, int) and not isinstance(part, bool):
            tokens.append(part)  # checked with the others by parse_completion
        else:
            raise api.bad("'prompt' must be a string, or a list of strings and token ids", "prompt")
        if len(tokens) >= n_ctx:
            break  # too long already: parse_completion says so
    return tokens


def _prompt(model, body: dict, n_ctx: int):
    prompt = body.get("prompt", body.get("content"))
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, list) and any(isinstance(p, list) for p in prompt) or (
            isinstance(prompt, list) and len(prompt) > 1 and all(isinstance(p, str) for p in prompt)):
        raise api.bad("'prompt' holds several prompts: send one per request", "prompt")
    if isinstance(prompt, list) and any(isinstance(p, str) for p in prompt):
        return _mixed_prompt(model, prompt, n_ctx)
    return prompt


def _logit_bias(model, value) -> dict | None:
    """llama-server's forms -> OpenAI's {"id": bias}; a text's every token takes its bias."""
    if value is None or isinstance(value, dict):
        return value
    if not isinstance(value, list):
        raise api.bad("'logit_bias' must be an object or a list of [token, bias] pairs", "logit_bias")
    out: dict[int, Any] = {}
    for pair in value:
        if not isinstance(pair, list) or len(pair) != 2:
            raise api.bad("'logit_bias' entries must be [token id or text, bias or false] pairs", "logit_bias")
        key, bias = pair
        bias = -MAX_BIAS if bias is False else bias
        if isinstance(key, str):
            for t in model.tokenize(key, add_special=False, parse_special=False, max_tokens=1024):
                out[t] = bias
        else:
            out[key] = bias  # an id: checked by check_logit_bias
    return out


def _openai_body(model, body: dict, n_ctx: int) -> dict:
    out = {k: body[k] for k in _SAME if k in body}
    out["prompt"] = _prompt(model, body, n_ctx)
    out["max_tokens"] = body.get("n_predict", body.get("max_tokens", -1))
    n_probs = body.get("n_probs")
    if n_probs != 0 and n_probs is not None:
        out["logprobs"] = n_probs
    bias = _logit_bias(model, body.get("logit_bias"))
    ignore_eos = body.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise api.bad("'ignore_eos' must be true or false", "ignore_eos")
    if ignore_eos:
        bias = {**(bias or {}), **{t: -MAX_BIAS for t in model.tokenizer.eog_ids}}
    if bias:
        out["logit_bias"] = bias
    return out


# llama-server's samplers localinfer lacks, and the value that leaves each off: any other is refused,
# not ignored, so a client never gets text sampled otherwise than it asked
_SAMPLERS_OFF = {"mirostat": 0, "typical_p": 1.0, "xtc_probability": 0.0, "dry_multiplier": 0.0, "top_n_sigma": -1.0}


def parse_native(body: dict, model, model_name: str, n_ctx: int) -> api.Job:
    for name, off in _SAMPLERS_OFF.items():
        if body.get(name, off) not in (off, None):
            raise api.bad(f"'{name}' is not supported by this server (only {off!r}, which leaves it off)", name,
                          "unsupported_parameter")
    for name in ("return_tokens", "stream", "timings_per_token", "return_progress"):
        if not isinstance(body.get(name, False), bool):
            raise api.bad(f"'{name}' must be true or false", name)
    fields = body.get("response_fields")
    if fields is not None and (not isinstance(fields, list) or not all(isinstance(f, str) for f in fields)):
        raise api.bad("'response_fields' must be a list of field names", "response_fields")
    try:
        job = api.parse_completion(_openai_body(model, body, n_ctx), model, model_name, n_ctx,
                                   max_logprobs=MAX_TOP_LOGPROBS)
    except api.ApiError as e:
        if e.param in _NATIVE_NAME:
            e.message = e.message.replace(f"'{e.param}'", f"'{_NATIVE_NAME[e.param]}'")
            e.param = _NATIVE_NAME[e.param]
        if e.code == "context_length_exceeded":
            e.type = "exceed_context_size_error"
        raise
    job.request.progress = bool(body.get("return_progress")) and job.stream  # events only a stream carries
    return job


# -- answers ----------------------------------------------------------------------------------------


def _pieces(model, entries) -> list[dict]:
    """TokenLogprobs -> llama-server's completion_probabilities."""
    def piece(t: int) -> dict:
        data = model.tokenizer.token_to_bytes(t, render_special=True)
        return {"id": t, "token": data.decode("utf-8", errors="ignore"), "bytes": list(data)}

    return [{**piece(e.token), "logprob": e.logprob,
             "top_logprobs": [{**piece(t), "logprob": lp} for t, lp in e.top]} for e in entries]


class NativeShaper:
    """llama-server's answer objects for one job: a stream's events, and the final object."""

    def __init__(self, job: api.Job, model, body: dict):
        self.job, self.model, self.body = job, model, body
        self.return_tokens = self.body.get("return_tokens", False)
        self.n_probs = job.options.n_top

    def _counts(self, n_generated: int) -> dict:
        return {"id_slot": -1, "tokens_predicted": n_generated, "tokens_evaluated": len(self.job.request.prompt)}

    def partial(self, text: str, tokens: list[int], n_generated: int, logprobs) -> dict:
        out = {"index": 0, "content": text, "tokens": tokens if self.return_tokens else [], "stop": False,
               **self._counts(n_generated)}
        if self.body.get("timings_per_token"):  # the figures so far: the answer's time is since its first token
            t = self.job.request.timings
            so_far = dataclasses.replace(t, generated_tokens=n_generated, decode_s=max(
                0.0, time.perf_counter() - self.job.request.created - t.ttft_s))
            out["timings"] = timings_json(so_far)
        if self.n_probs and logprobs:
            out["completion_probabilities"] = _pieces(self.model, logprobs)
        return out

    def settings(self) -> dict:
        r = self.job.request
        p = r.params
        return {"n_predict": -1 if r.max_tokens is None else r.max_tokens,
                "seed": LLAMA_DEFAULT_SEED if p.seed is None else p.seed, "temperature": p.temperature,
                "top_k": p.top_k, "top_p": p.top_p, "min_p": p.min_p, "repeat_last_n": p.repeat_last_n,
                "repeat_penalty": p.repeat_penalty, "presence_penalty": p.presence_penalty,
                "frequency_penalty": p.frequency_penalty, "stop": list(r.stop),
                "max_tokens": -1 if r.max_tokens is None else r.max_tokens, "n_probs": self.n_probs or 0,
                "ignore_eos": bool(self.body.get("ignore_eos", False)),
                "logit_bias": [[t, b] for t, b in p.logit_bias], "grammar": self.body.get("grammar") or "",
                "stream": self.job.stream}

    def final(self, content: str, tokens: list[int], finish: str, logprobs) -> dict:
        """The final object; `content` is all the text on a whole answer, "" on a stream's last event
        (its text went in the events before); `tokens` all generated ids, an ending EOG included."""
        r = self.job.request
        stop_type, word = "none", ""
        if finish in ("length", "context_full"):
            stop_type = "limit"
        elif finish == "stop":  # a stop string, else the end of generation (an EOG token, a grammar's end)
            whole = self.model.detokenize(tokens)
            found = [(whole.find(s), s) for s in r.stop if s in whole]
            stop_type, word = ("word", min(found)[1]) if found else ("eos", "")  # the first in the text stopped it
        shown = [t for t in tokens if not self.model.tokenizer.is_eog(t)]
        out = {"index": 0, "content": content, "tokens": shown if self.return_tokens else [],
               **self._counts(len(tokens)), "stop": True, "model": self.job.model,
               "generation_settings": self.settings(), "prompt": self.model.detokenize(r.prompt),
               "has_new_line": "\n" in content, "truncated": False, "stop_type": stop_type, "stopping_word": word,
               "tokens_cached": r.timings.prompt_tokens + len(tokens), "timings": timings_json(r.timings)}
        if self.n_probs and logprobs and not self.job.stream:
            out["completion_probabilities"] = _pieces(self.model, logprobs)
        fields = self.body.get("response_fields")
        return _nested(out, fields) if fields else out


def _nested(obj: dict, paths: list[str]) -> dict:
    """llama-server's json_get_nested_values: each path's value by its path, "a/b" into objects."""
    out = {}
    for path in paths:
        value, found = obj, True
        for key in path.split("/"):
            if isinstance(value, dict) and key in value:
                value = value[key]
            else:
                found = False
                break
        if found:
            out[path] = value
    return out


async def _whole(job: api.Job, shaper: NativeShaper) -> dict:
    text, tokens, logprobs, finish = [], [], [], "stop"
    try:
        async for _, chunk in jobs.choice_events(job.choices):
            text.append(chunk.text)
            tokens += chunk.tokens
            logprobs += chunk.logprobs or []
            finish = chunk.finish_reason or finish
    except Cancelled:
        raise jobs.ClientGone() from None
    except Exception as e:
        raise api.ApiError(500, f"generation failed: {e}", "server_error") from None
    return shaper.final("".join(text), tokens, finish, logprobs)


def _event(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


async def _events(job: api.Job, shaper: NativeShaper):
    tokens: list[int] = []
    try:
        async for _, chunk in jobs.choice_events(job.choices):
            if chunk.progress is not None:
                yield _event({**shaper.partial("", [], 0, None), "prompt_progress": chunk.progress})
                continue
            tokens += chunk.tokens
            if chunk.text or (chunk.logprobs and shaper.n_probs):
                yield _event(shaper.partial(chunk.text, chunk.tokens, len(tokens), chunk.logprobs))
            if chunk.finish_reason:
                yield _event(shaper.final("", tokens, chunk.finish_reason, None))
    except Cancelled:
        return
    except Exception as e:  # the status line is sent: the error goes in the stream, as llama-server's does
        yield _event(api.ApiError(500, f"generation failed: {e}", "server_error").body())


# -- fill-in-the-middle ---------------------------------------------------------------------------

N_BATCH = 2048  # llama-server's default batch, which its infill prompt is cut to fit (or the context, if smaller)


def _fim_ids(model) -> dict:
    special = model.tokenizer.vocab.special
    missing = [name for name in ("fim_pre", "fim_suf", "fim_mid") if special.get(name) is None]
    if missing:
        raise api.ApiError(501, f"infill is not supported by this model: its vocabulary has no {', '.join(missing)} "
                                f"token (a fill-in-the-middle model has <|fim_prefix|>, <|fim_suffix|> and "
                                f"<|fim_middle|> or their kin)", "not_supported_error")
    return special


def infill_tokens(model, body: dict, n_ctx: int) -> list[int]:
    """llama-server's format_prompt_infill: [extra chunks][BOS][FIM_PRE]prefix prompt[FIM_SUF]suffix[FIM_MID],
    the prefix cut to its last 3/4 of a batch and the suffix to what is left of the batch's quarter,
    the extra chunks (other files, as repository context) to what the context has beyond a batch and
    twice n_predict."""
    special = _fim_ids(model)
    for name in ("input_prefix", "input_suffix"):
        if not isinstance(body.get(name), str):
            raise api.bad(f"'{name}' is required, as a string", name)
    prompt = body.get("prompt", "")
    if not isinstance(prompt, str):
        raise api.bad("'prompt' must be a string", "prompt")
    extra = body.get("input_extra", [])
    if not isinstance(extra, list) or not all(isinstance(c, dict) and isinstance(c.get("text"), str)
                                              and isinstance(c.get("filename", ""), str) for c in extra):
        raise api.bad("'input_extra' must be a list of {\"filename\": string, \"text\": string}", "input_extra")

    def tok(text: str) -> list[int]:
        return model.tokenize(text, add_special=False, parse_special=False, max_tokens=4 * n_ctx)

    extra_tokens: list[int] = []
    if special.get("fim_rep") is not None:
        extra_tokens += [special["fim_rep"], *tok("myproject\n")]
    for chunk in extra:
        if special.get("fim_sep") is not None:
            extra_tokens += [special["fim_sep"], *tok(chunk.get("filename", "tmp") + "\n")]
        else:
            extra_tokens += tok("\n\n--- snippet ---\n\n")
        extra_tokens += tok(chunk["text"])
    if special.get("fim_sep") is not None:
        extra_tokens += [special["fim_sep"], *tok("filename\n")]
    prefix, suffix, middle = tok(body["input_prefix"]), tok(body["input_suffix"]), tok(prompt)
    n_predict = body.get("n_predict", -1)
    n_predict = n_predict if isinstance(n_predict, int) and not isinstance(n_predict, bool) and n_predict > 0 else 0
    batch = min(N_BATCH, n_ctx)  # a context smaller than the batch: the prefix and suffix still fit
    prefix = prefix[len(prefix) - min(len(prefix), 3 * (batch // 4)):]
    suffix = suffix[:min(len(suffix), max(0, batch // 4 - (2 + len(middle))))]
    n_extra = min(max(0, n_ctx - batch - 2 * n_predict), len(extra_tokens))
    head = [model.tokenizer.bos_id] if model.tokenizer.vocab.add_bos and model.tokenizer.bos_id is not None else []
    return (extra_tokens[len(extra_tokens) - n_extra:] + head + [special["fim_pre"], *prefix, *middle]
            + [special["fim_suf"], *suffix] + [special["fim_mid"]])


def parse_infill(body: dict, model, model_name: str, n_ctx: int) -> api.Job:
    return parse_native({**body, "prompt": infill_tokens(model, body, n_ctx)}, model, model_name, n_ctx)


async def infill(request: Request) -> Response:
    return await _respond(request, parse_infill)


async def completion(request: Request) -> Response:
    return await _respond(request, parse_native)


async def _respond(request: Request, parse) -> Response:
    body = await read_json(request)

    async def prepare(served) -> jobs.Prepared:
        job = await run_in_threadpool(parse, body, served.model, served.name, served.engine.n_ctx)
        shaper = NativeShaper(job, served.model, body)
        return jobs.Prepared(job, job.stream, lambda j: _events(j, shaper), lambda j: _whole(j, shaper))

    return await jobs.respond(request, request.app.state.registry.lease(requested_model(body)), prepare,
                              "text/event-stream", headers={"Cache-Control": "no-cache"})
