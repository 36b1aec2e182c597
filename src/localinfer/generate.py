"""Generation as layered generators:

    Generation         one sequence's rules: choosing each token (processors, grammar, sampler or
                       speculator), turning it into a chunk (ChunkAssembler); the engine steps it too
    context_steps      runs a Generation in a Context: prefill, then one token (or one verified
                       draft) at a time -> yields token ids
    stream_generate    + detokenizing, stop strings, finish reasons, timings -> yields chunks
    collect            joins the chunks into a GenerationResult (Model.generate)

Closing a generator (or breaking out of a for loop over it) stops the work at once; the
context then holds exactly the tokens processed so far, so nothing is lost or half-written.
"""
from __future__ import annotations

import numbers
import time
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np

from .context import Context
from .kv.cache import ContextFullError
from .sampling.logprobs import LogprobRecorder
from .sampling.params import SamplingParams
from .sampling.samplers import processors_for, sampler_for
from .tokenizer import StreamingDetokenizer


@dataclass
class Timings:
    prompt_tokens: int = 0  # tokens in the prompt
    prompt_cached: int = 0  # of which reused from the KV cache
    prefill_s: float = 0.0  # computing the uncached prompt tokens
    ttft_s: float = 0.0  # from the call to the first generated token
    generated_tokens: int = 0
    decode_s: float = 0.0  # after the first token, for the rest
    draft_tokens: int = 0  # speculative decoding: tokens drafted, and of those kept
    draft_accepted: int = 0

    @property
    def prefill_tps(self) -> float:
        computed = self.prompt_tokens - self.prompt_cached
        return computed / self.prefill_s if self.prefill_s > 0 else 0.0

    @property
    def decode_tps(self) -> float:
        n = self.generated_tokens - 1
        return n / self.decode_s if n > 0 and self.decode_s > 0 else 0.0

    def summary(self) -> str:
        return (f"prompt {self.prompt_tokens} tok ({self.prompt_cached} cached), prefill {self.prefill_tps:.1f} tok/s, "
                f"TTFT {self.ttft_s * 1000:.0f} ms | generated {self.generated_tokens} tok, "
                f"decode {self.decode_tps:.1f} tok/s" + (
                    f", drafts accepted {self.draft_accepted}/{self.draft_tokens}" if self.draft_tokens else ""))


@dataclass
class GenerationChunk:
    text: str
    tokens: list[int]
    finish_reason: str | None = None  # "stop" | "length" | "context_full" on the last chunk
    timings: Timings | None = None
    logprobs: list | None = None  # a logprobs.TokenLogprob per token, when asked for
    # a prompt's progress before the first token, when the request asks for it (the engine's
    # Request.progress): {"total", "cache", "processed", "time_ms"}, llama-server's prompt_progress
    progress: dict | None = None


@dataclass
class GenerationResult:
    text: str
    tokens: list[int]  # generated ids, an end-of-generation token included when it ended the text
    finish_reason: str
    timings: Timings
    prompt_tokens: list[int] = field(default_factory=list)
    logprobs: list | None = None  # a logprobs.TokenLogprob per generated token, when asked for


class ChunkAssembler:
    """Generated token ids -> GenerationChunks, one per token: detokenizing (never a broken UTF-8
    sequence: a character the generation stopped inside is left out, as llama.cpp does), stop strings (never a partial one emitted), and the finish reasons. The same rules
    for a single-sequence generator and for the server's batched engine.

    `push(token)` returns the chunk for it; `finished` tells when the last one was returned.
    The prompt and generated tokens together never pass n_ctx ("context_full")."""

    def __init__(self, tokenizer, n_prompt: int, n_ctx: int, max_tokens: int | None = None,
                 stop: str | Sequence[str] = (), timings: Timings | None = None, start: float | None = None):
        self.tokenizer, self.n_prompt, self.n_ctx = tokenizer, n_prompt, n_ctx
        self.max_tokens = check_max_tokens(max_tokens)
        self.stop = [s for s in ([stop] if isinstance(stop, str) else stop) if s]
        self.timings = timings or Timings()
        self.start = time.perf_counter() if start is None else start
        self.detok = StreamingDetokenizer(tokenizer, render_special=False)  # control tokens are not text
        self.pending = ""  # text held back because it may be the start of a stop string
        self.tokens: list[int] = []
        self.finish: str | None = None

    @property
    def finished(self) -> bool:
        return self.finish is not None

    def push(self, token: int, end: bool = False) -> GenerationChunk:
        """end: nothing may follow this token (a grammar is complete): finish with "stop"."""
        now = time.perf_counter()
        t = self.timings
        if not self.tokens:
            t.ttft_s = now - self.start
        self.tokens.append(token)
        t.generated_tokens = len(self.tokens)
        t.decode_s = now - self.start - t.ttft_s
        if self.tokenizer.is_eog(token):
            # end of generation: flush what was held back (it cannot start a stop string any more)
            self.finish = "stop"
            return GenerationChunk(self.pending + self.detok.flush(drop_incomplete=True), [token], self.finish, t)
        self.pending += self.detok.feed(token)
        emit, self.pending, hit = _split_stop(self.pending, self.stop)
        if hit or end:
            self.finish = "stop"
        elif self.max_tokens is not None and len(self.tokens) >= self.max_tokens:
            self.finish = "length"
        elif self.n_prompt + len(self.tokens) >= self.n_ctx:  # the sampled token would not fit
            self.finish = "context_full"
        if self.finish:
            if not hit:
                emit += self.pending + self.detok.flush(drop_incomplete=True)
            return GenerationChunk(emit, [token], self.finish, t)
        return GenerationChunk(emit, [token])


class Generation:
    """One sequence after its prompt: how each next token is chosen and how it becomes a chunk.

    Choosing: the logits processors (a logprobs recorder first, then bias and penalties), the
    grammar's mask, then the sampler, or with a speculator its verification of a drafted token;
    the grammar then accepts the token and the history (prompt + chosen) grows by it. Chunking:
    a ChunkAssembler (text, stop strings, finish reasons, timings). Built once per request, by
    Model.stream for a Context and by the engine for a slot; stepped by `context_steps` here and
    by the engine's batched steps, so both follow the same rules."""

    def __init__(self, tokenizer, prompt: Sequence[int], n_ctx: int, params: SamplingParams = SamplingParams(),
                 max_tokens: int | None = None, stop: str | Sequence[str] = (), matcher=None,
                 logprobs: int | None = None, speculator=None, timings: Timings | None = None,
                 start: float | None = None):
        """matcher: a grammar's state (constrain.Matcher); logprobs: each chunk carries its token's
        log-probability and that many alternatives; speculator (speculative.decode.Speculator):
        draft tokens and verify them; timings/start: the request's, when it has them already."""
        self.history = list(prompt)
        self.sampler, self.processors = sampler_for(params), processors_for(params)
        self.matcher, self.speculator = matcher, speculator
        self.recorder = LogprobRecorder(logprobs) if logprobs is not None else None
        if self.recorder:  # first: logprobs are the model's, before any transform (sampling/logprobs.py)
            self.processors.insert(0, self.recorder)
        self.out = ChunkAssembler(tokenizer, len(self.history), n_ctx, max_tokens, stop, timings, start)
        self.drafted: list[int] = []  # tokens drafted after the last chosen one, to verify
        self.draft_q: list | None = None  # the distributions they were drawn from (sampling with a draft model)

    @property
    def grammar_done(self) -> bool:
        """The grammar is complete: only the end of generation could follow."""
        return self.matcher is not None and self.matcher.done

    @property
    def finished(self) -> bool:
        return self.out.finished

    def choose(self, logits: np.ndarray, drafted: int | None = None, q=None) -> tuple[int, bool, object]:
        """The next token from its logits row -> (token, whether it is `drafted`, its logprob entry
        or None). drafted/q: the token a proposer put at this row and its distribution."""
        for process in self.processors:
            logits = process(self.history, logits)
        if self.matcher is not None:
            logits = self.matcher.mask(logits)
        if self.speculator is not None:
            token, kept = self.speculator.choose(logits, drafted, q)
        else:
            token, kept = int(self.sampler(logits)), False
        if self.matcher is not None:
            self.matcher.accept(token)
        self.history.append(token)
        return token, kept, self.recorder.take(token) if self.recorder else None

    def draft(self, n_ctx: int) -> list[int]:
        """Tokens to verify after the last chosen one (kept in self.drafted): none without a speculator,
        or when the context or max_tokens leave room for one token only."""
        self.drafted, self.draft_q = [], None
        if self.speculator is None or self.grammar_done:
            return []
        room = n_ctx - len(self.history)
        if self.out.max_tokens is not None:  # a step yields up to len(drafts) + 1 tokens
            room = min(room, self.out.max_tokens - len(self.out.tokens) - 1)
        self.drafted, self.draft_q = self.speculator.draft(self.history, room)
        return self.drafted

    def verify(self, rows: np.ndarray) -> tuple[list[tuple[int, object]], int]:
        """rows (1 + len(drafted), n_vocab): the logits after the last chosen token and after each
        drafted one -> ([(token, logprob entry)], drafted tokens kept). The last token chosen is the
        first not drafted (the corrected or the bonus token); the drafts are cleared."""
        chosen, n_kept = [], 0
        drafted, q = self.drafted, self.draft_q
        self.drafted, self.draft_q = [], None
        for i, row in enumerate(rows):
            d = drafted[i] if i < len(drafted) else None
            token, kept, entry = self.choose(row, d, q[i] if q is not None and d is not None else None)
            chosen.append((token, entry))
            n_kept += kept
            if not kept or self.grammar_done:
                break
        return chosen, n_kept

    def emit(self, token: int, logprob=None) -> GenerationChunk:
        """The chunk for a chosen token (in order): its text, and the finish reason on the last."""
        chunk = self.out.push(token, end=self.grammar_done)
        if logprob is not None:
            chunk.logprobs = [logprob]
        return chunk


def context_steps(ctx: Context, gen: Generation) -> Iterator[tuple[int, object]]:
    """Runs gen in ctx: prefills its prompt, then yields (token, logprob entry or None) forever; the
    caller stops. Each chosen token is evaluated only with the next step (with a speculator,
    together with the next drafts, verified in the same pass). Closing it leaves ctx holding the
    prompt and the yielded tokens but the last."""
    prompt, timings, n_out = list(gen.history), gen.out.timings, 0
    t0 = time.perf_counter()
    logits = ctx.evaluate(prompt)
    timings.prompt_tokens = len(prompt)
    timings.prompt_cached = len(prompt) - ctx.last_n_computed
    timings.prefill_s = time.perf_counter() - t0
    if gen.speculator is not None:
        gen.speculator.proposer.prefill(prompt)
    try:
        token, _, entry = gen.choose(logits)
        n_out += 1
        yield token, entry
        while True:  # ctx holds history[:-1]: the last token is evaluated with the drafts
            drafted = gen.draft(ctx.n_ctx)
            if drafted:
                from .speculative.decode import verify_rows
                rows = verify_rows(ctx.append, [gen.history[-1], *drafted])
            else:
                rows = ctx.append([gen.history[-1]])[-1:]
            chosen, n_kept = gen.verify(rows)
            timings.draft_tokens += len(drafted)
            timings.draft_accepted += n_kept
            if len(ctx.tokens) > len(gen.history) - 1:  # the drafts after the last kept one
                ctx.truncate(len(gen.history) - 1)
            for token, entry in chosen:
                n_out += 1
                yield token, entry
    finally:  # a chosen token not yet yielded is dropped with the rest
        keep = len(prompt) + max(0, n_out - 1)
        if ctx.cache is not None and len(ctx.tokens) > keep:
            ctx.truncate(keep)


def check_max_tokens(max_tokens: int | None) -> int | None:
    """max_tokens as the generators take it: a count >= 0, or None for no limit (until a stop, the
    end of generation or the context's end), which -1 also means (llama.cpp's -n -1)."""
    if max_tokens is None or max_tokens == -1:
        return None
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, numbers.Integral):  # numpy's integers pass
        raise TypeError(f"max_tokens must be an integer or None, got {type(max_tokens).__name__}")
    if max_tokens < 0:
        raise ValueError(f"max_tokens must be -1 (until the context is full) or >= 0, got {max_tokens}")
    return int(max_tokens)


def check_prompt_fits(n_prompt: int, n_ctx: int) -> None:
    if n_prompt >= n_ctx:
        raise ContextFullError(f"the prompt has {n_prompt} tokens, but the context holds {n_ctx} "
                               f"and at least one more is needed to generate (raise n_ctx / --ctx-size)")


def stream_generate(ctx: Context, tokenizer, prompt: Sequence[int], params: SamplingParams = SamplingParams(),
                    max_tokens: int | None = None, stop: Sequence[str] = (), matcher=None,
                    logprobs: int | None = None, speculator=None) -> Iterator[GenerationChunk]:
    """Text chunks as they are complete (never a broken UTF-8 sequence, never a partial stop
    string); the last chunk has the finish_reason and the timings. With a matcher (a grammar's
    state) the text follows the grammar and ends ("stop") as soon as the grammar is complete.
    logprobs: each chunk also carries its tokens' log-probabilities with that many alternatives
    (see sampling/logprobs.py). speculator (speculative.decode.Speculator): draft and verify several tokens
    per forward pass; the same tokens at temperature 0, the same distribution otherwise."""
    gen = Generation(tokenizer, prompt, ctx.n_ctx, params, max_tokens, stop, matcher, logprobs, speculator)
    if gen.out.max_tokens == 0:
        yield GenerationChunk("", [], "length", gen.out.timings)
        return
    check_prompt_fits(len(prompt), ctx.n_ctx)
    steps = context_steps(ctx, gen)
    try:
        for token, logprob in steps:
            yield gen.emit(token, logprob)
            if gen.finished:
                return
    finally:
        steps.close()


def _split_stop(text: str, stop: Sequence[str]) -> tuple[str, str, bool]:
    """-> (text safe to emit, text to hold back, whether a stop string was found)."""
    if not stop:
        return text, "", False
    first = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
    if first >= 0:
        return text[:first], "", True
    hold = 0  # longest suffix of text that is a prefix of some stop string
    for s in stop:
        for n in range(min(len(s) - 1, len(text)), 0, -1):
            if text.endswith(s[:n]):
                hold = max(hold, n)
                break
    return text[:len(text) - hold], text[len(text) - hold:], False


def collect(chunks: Iterator[GenerationChunk], prompt_tokens: list[int]) -> GenerationResult:
    """The chunks joined into one GenerationResult (Model.generate, ChatSession.send)."""
    text, tokens, finish, timings, logprobs = [], [], "stop", Timings(), None
    for chunk in chunks:
        text.append(chunk.text)
        tokens.extend(chunk.tokens)
        if chunk.logprobs is not None:
            logprobs = (logprobs or [])
            logprobs.extend(chunk.logprobs)
        if chunk.finish_reason:
            finish, timings = chunk.finish_reason, chunk.timings
    return GenerationResult("".join(text), tokens, finish, timings, prompt_tokens, logprobs)
