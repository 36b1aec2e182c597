"""The batched engine: slots, a scheduler thread, and one forward pass per step for all of them.

    submit(request) -> the bounded queue -> a free slot -> prefill (in chunks) -> decode -> done

Every step the scheduler thread
  1. frees the slots of cancelled requests and admits queued requests into free slots (a new
     request first copies the longest cached prefix of its prompt into its slot's cache),
  2. builds one batch: each decoding slot brings its last sampled token, prefilling slots bring
     the next chunk of their prompt (at most `prefill_chunk` prompt tokens per step in all, so a
     long prompt never stalls the others' decoding for long),
  3. runs it through `forward_batch` (every matmul one GEMM over all rows),
  4. chooses each finished row's token and turns it into a chunk (the slot's generate.Generation:
     sampling, grammar, detokenizing, stop strings, finish reasons, the same rules as a single
     sequence's) and hands it to the request; finished slots are freed.

So requests join the running batch at the next step and leave it when they are done.
The n choices of one prompt (fork.py, OpenAI's `n`) are admitted together: the first prefills
the prompt, the others take a copy of its KV cache and sample from the same last logits row.
A slot owns a KV cache of n_ctx positions for its whole life (allocated once, reused).
A request that scores its prompt (Request.prompt_logprobs: echo with logprobs) is prefilled in its
slot like any other, every row's logits kept in chunks of at most SCORE_LOGITS_BYTES, and takes no
prefix from the cache (a cached prefix has no logits); so it waits for a slot, or is refused, as
generation does.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..context import MIN_PREFILL_ROWS, common_prefix, prefills_batched
from ..generate import Generation, GenerationChunk, check_prompt_fits
from ..sampling.logprobs import TokenLogprob, token_logprob
from .completion_cache import CompletionCache
from .fork import copy_cache
from .metrics import Metrics
from .prefix_cache import PrefixCache
from .request import Cancelled, Request
from .speculation import forward_rows, speculative_for


# A slot scoring its prompt (Request.prompt_logprobs: /v1/completions echo with logprobs) gets every
# row's logits of its prefill chunks, so its chunks are bounded in bytes of logits (float32) rather
# than by prefill_chunk alone: 32 rows of a 262k vocabulary, 170 of a 49k one.
SCORE_LOGITS_BYTES = 32 << 20


class QueueFullError(RuntimeError):
    """Every slot is busy and the waiting queue is full: try again later."""


class EngineClosedError(RuntimeError):
    pass


@dataclass
class Slot:
    """One sequence's place in the batch. Its KV cache and draft proposer last as long as the engine;
    everything else is one request's, dropped with it (`release`)."""

    index: int
    cache: object  # the architecture's KV cache (n_ctx positions)
    proposer: object = None  # speculative decoding: the slot's drafter (a draft model's context, or lookup)
    request: Request | None = None
    gen: Generation | None = None  # the request's token choosing and chunking (generate.Generation)
    tokens: list[int] = field(default_factory=list)  # tokens whose K/V are in the cache
    todo: list[int] = field(default_factory=list)  # prompt tokens still to compute
    next_token: int | None = None  # chosen, to be evaluated in the next step
    prefill_start: float = 0.0
    chunks: list = field(default_factory=list)  # what was sent, for the completion cache
    leader: "Slot | None" = None  # a choice of n waiting for this slot's prefill (batching/fork.py)
    followers: list = field(default_factory=list)  # the leader's waiting choices
    scores: list | None = None  # the prompt's TokenLogprobs so far, when the request scores its prompt
    held: list[int] = field(default_factory=list)  # idle: the tokens whose K/V the cache still holds (slot_files.py)
    admitted: int = 0  # when the slot last took a request (the engine's count of admissions)

    @property
    def busy(self) -> bool:
        return self.request is not None

    def release(self) -> None:
        """Idle again: every per-request field as a new slot has it; the cache and proposer kept, and
        what the cache holds (`held`) until the next request resets it."""
        n = self.cache.offset if self.cache is not None else 0
        self.__dict__.update(Slot(self.index, self.cache, self.proposer, held=self.tokens[:n],
                                  admitted=self.admitted).__dict__)


class Engine:
    def __init__(self, runtime, tokenizer, n_slots: int = 4, n_ctx: int = 2048, max_queue: int | None = 64,
                 kv_dtype=np.float16, prefill_chunk: int = 512, prefix_cache_bytes: int = 256 << 20,
                 prefix_block: int = 32, completion_cache_tokens: int = 1 << 16, metrics: Metrics | None = None,
                 prefix_cache_dir: str | None = None, prefix_cache_dir_bytes: int = 4 << 30,
                 model_identity: str | None = None, speculative=None, draft_runtime=None):
        """runtime: an architecture model (forward_batch, new_cache); max_queue None: unbounded.
        prefix_cache_dir: also keep the prefix cache's blocks in this folder (at most
        prefix_cache_dir_bytes of them), for the next run; needs model_identity (Model.identity).
        speculative (speculative.SpeculativeConfig): each decoding slot drafts tokens (with
        draft_runtime, a draft model's, or by prompt lookup) and verifies them in the step's batch."""
        if n_slots < 1:
            raise ValueError(f"the engine needs at least one slot, got {n_slots}")
        if prefill_chunk < 1:
            raise ValueError(f"prefill_chunk must be >= 1, got {prefill_chunk}")
        self.runtime, self.tokenizer = runtime, tokenizer
        self.n_ctx, self.max_queue, self.prefill_chunk = n_ctx, max_queue, prefill_chunk
        self.kv_dtype = kv_dtype
        self.speculative, self.draft_runtime = speculative, draft_runtime
        self.slots = [Slot(i, None) for i in range(n_slots)]  # caches are made on first use
        self.prefix_cache = PrefixCache(prefix_cache_bytes, prefix_block) if prefix_cache_bytes else None
        if prefix_cache_dir is not None:
            if self.prefix_cache is None:
                raise ValueError("a prefix cache folder needs the prefix cache (prefix_cache_bytes > 0)")
            from .prefix_store import PrefixStore
            self.prefix_cache.disk = PrefixStore(prefix_cache_dir, prefix_cache_dir_bytes, model_identity, prefix_block)
        self.completion_cache = CompletionCache(completion_cache_tokens) if completion_cache_tokens else None
        self.metrics = metrics or Metrics()
        self._queue: deque[Request] = deque()
        self._admissions = 0
        self._followers: dict[int, list[Request]] = {}  # a queued group's leader id -> the other choices
        self._wake = threading.Condition()
        self._closed = False
        self.steps = 0
        self._chores: list[tuple[Callable[[], Any], Future]] = []  # call(): run on this thread between steps
        self.n_tokens_max = 0  # the longest sequence finished (prompt and answer), for llama-server's metric
        self._thread = threading.Thread(target=self._run, name="localinfer-engine", daemon=True)
        self._thread.start()

    # -- the clients' side ----------------------------------------------------------------------
    def submit(self, request: Request) -> Request:
        """Queues `request`; raises ContextFullError if its prompt cannot fit, QueueFullError if
        the queue is full. Its chunks come back through request.chunks()."""
        if not request.prompt:
            raise ValueError("the prompt is empty (no tokens to start from)")
        check_prompt_fits(len(request.prompt), self.n_ctx)
        request.on_cancel = self._notify
        if request.max_tokens == 0 and request.prompt_logprobs is None:
            request.timings.prompt_tokens = len(request.prompt)
            request.put(GenerationChunk("", [], "length", request.timings))
            return request
        if self._replay(request):
            return request
        with self._wake:
            self._check_room()
            self._queue.append(request)
            self._wake.notify()
        return request

    def _check_room(self) -> None:
        """Under self._wake: refuses a new request when the engine is closed or its queue is full."""
        if self._closed:
            raise EngineClosedError("the engine is shut down")
        # free slots take queued requests at the next step: only requests beyond them wait
        free = sum(not s.busy for s in self.slots)
        if self.max_queue is not None and len(self._queue) >= self.max_queue + free:
            self.metrics.count("rejected")
            raise QueueFullError(f"all {len(self.slots)} slots are busy and {len(self._queue)} "
                                 f"requests are waiting: try again later")

    def submit_group(self, requests: list[Request]) -> list[Request]:
        """Queues the choices of one prompt (batching/fork.py): admitted together, the prompt
        prefilled once in the first one's slot and its K/V copied into the others'. More choices
        than slots go as several such groups, one after the other as slots free up (OpenAI's `n`
        above --parallel); if a later group is refused, the earlier ones are cancelled."""
        first = requests[0]
        if len(requests) > len(self.slots):
            queued = []
            try:
                for i in range(0, len(requests), len(self.slots)):
                    queued += self.submit_group(requests[i:i + len(self.slots)])
            except BaseException:
                for r in queued:
                    r.cancel()
                raise
            return queued
        if any(r.prompt != first.prompt for r in requests):
            raise ValueError("the choices of a group share one prompt")
        if len(requests) == 1 or first.max_tokens == 0:
            return [self.submit(r) for r in requests]
        check_prompt_fits(len(first.prompt), self.n_ctx)
        for r in requests:
            r.on_cancel = self._notify
        with self._wake:
            self._check_room()
            self._followers[first.id] = list(requests[1:])
            self._queue.append(first)
            self._wake.notify()
        return requests

    def _replay(self, request: Request) -> bool:
        """Answers a deterministic request seen before from the completion cache."""
        chunks = self.completion_cache.get(request) if self.completion_cache else None
        if chunks is None:
            return False
        t = request.timings
        t.prompt_tokens = t.prompt_cached = len(request.prompt)
        t.generated_tokens = sum(len(c.tokens) for c in chunks)
        t.ttft_s = time.perf_counter() - request.created
        for c in chunks:
            request.put(GenerationChunk(c.text, list(c.tokens), c.finish_reason, t if c.finish_reason else None,
                                        c.logprobs))
        self.metrics.count("completion_cache_hits")
        self.metrics.count("completed")
        self.metrics.count("prompt_tokens", len(request.prompt))
        self.metrics.count("prompt_tokens_cached", len(request.prompt))
        self.metrics.count("generated_tokens", t.generated_tokens)
        return True

    def state(self) -> dict:
        """Slot and queue occupancy (what /health and /metrics report)."""
        with self._wake:
            busy = sum(s.busy for s in self.slots)
            kv_used = sum(len(s.tokens) for s in self.slots if s.busy)
            return {"slots_total": len(self.slots), "slots_busy": busy, "slots_idle": len(self.slots) - busy,
                    "queue_length": len(self._queue), "max_queue": self.max_queue,
                    "kv_used_tokens": kv_used, "kv_capacity_tokens": len(self.slots) * self.n_ctx,
                    "prefix_cache_bytes": self.prefix_cache.nbytes if self.prefix_cache else 0,
                    "prefix_cache_blocks": len(self.prefix_cache) if self.prefix_cache else 0,
                    **self._disk_state(),
                    "steps": self.steps, "n_tokens_max": self.n_tokens_max}

    def slot_states(self) -> list[dict]:
        """Each slot as llama-server's GET /slots shows it: its request (id_task), tokens in its cache,
        and how many the request has generated and may still."""
        with self._wake:
            out = []
            for s in self.slots:
                r = s.request
                n_decoded = len(s.gen.out.tokens) if s.gen is not None else 0
                remain = -1 if r is None or r.max_tokens is None else r.max_tokens - n_decoded
                out.append({"id": s.index, "id_task": r.id if r is not None else -1, "n_ctx": self.n_ctx,
                            "speculative": s.proposer is not None, "is_processing": r is not None,
                            "n_tokens": len(s.tokens), "n_prompt_tokens": len(r.prompt) if r is not None else 0,
                            "next_token": {"has_next_token": r is not None, "n_remain": remain,
                                           "n_decoded": n_decoded}})
            return out

    def _disk_state(self) -> dict:
        disk = self.prefix_cache.disk if self.prefix_cache is not None else None
        if disk is None:
            return {}
        return {"prefix_cache_disk_bytes": disk.nbytes, "prefix_cache_disk_loaded_blocks": disk.loaded,
                "prefix_cache_disk_rejected_blocks": disk.rejected}

    def close(self) -> None:
        """Stops the scheduler thread (failing what is in flight) and frees the slots' KV caches
        and the prefix cache."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
        if self._thread.is_alive():
            return  # a forward pass still running: its slots keep their caches
        for slot in self.slots:
            slot.cache = None
        if self.prefix_cache is not None:
            self.prefix_cache.clear()

    def call(self, fn: Callable[[], Any]) -> Any:
        """fn() run on the scheduler thread between steps, where no forward pass uses any slot's cache
        and no request is admitted; returns its result or raises its exception (slot_files.py)."""
        done: Future = Future()
        with self._wake:
            if self._closed:
                raise EngineClosedError("the engine is closed")
            self._chores.append((fn, done))
            self._wake.notify()
        return done.result()

    def _notify(self) -> None:
        with self._wake:
            self._wake.notify()

    # -- the scheduler thread -------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._closed and not self._queue and not self._chores and not any(s.busy for s in self.slots):
                    self._wake.wait()
                if self._closed:
                    break
                chores, self._chores = self._chores, []
                self._drop_cancelled()
                admitted = self._admit()
            for fn, done in chores:
                try:
                    done.set_result(fn())
                except BaseException as e:  # the caller's to raise
                    done.set_exception(e)
            try:
                for slot in admitted:
                    self._start(slot)
                if any(s.busy for s in self.slots):
                    self._step()
            except Exception as e:  # a bug fails the requests in flight, never the engine thread
                for slot in self.slots:
                    if slot.busy:
                        self._finish(slot, e)
        for slot in self.slots:
            if slot.busy:
                self._finish(slot, EngineClosedError("the server is shutting down"))
        for request in self._queue:
            for r in [request, *self._followers.pop(request.id, [])]:
                r.put(EngineClosedError("the server is shutting down"))
        self._queue.clear()
        with self._wake:
            chores, self._chores = self._chores, []
        for _, done in chores:
            done.set_exception(EngineClosedError("the server is shutting down"))

    def _drop_cancelled(self) -> None:
        for r in [r for r in self._queue if any(x.cancelled for x in [r, *self._followers.get(r.id, [])])]:
            self._queue.remove(r)
            for x in [r, *self._followers.pop(r.id, [])]:
                x.put(Cancelled("cancelled while waiting"))
                self.metrics.count("cancelled")
        for slot in self.slots:
            if slot.busy and slot.request.cancelled:
                self.metrics.count("cancelled")
                self._finish(slot, Cancelled("cancelled"))

    def _admit(self) -> list[Slot]:
        out = []
        while self._queue:
            free = [s for s in self.slots if not s.busy]
            group = self._followers.get(self._queue[0].id, [])
            if len(free) < 1 + len(group):
                break  # first come, first served: a group waits for its slots, and holds the queue
            leader = self._pick_slot(free, self._queue[0].prompt)
            free.remove(leader)
            free.insert(0, leader)
            self._admissions += 1
            leader.admitted = self._admissions
            leader.request = self._queue.popleft()
            self._followers.pop(leader.request.id, None)
            out.append(leader)
            for slot, r in zip(free[1:], group):
                slot.request, slot.leader = r, leader
                leader.followers.append(slot)
                out.append(slot)
        return out

    @staticmethod
    def _pick_slot(free: list[Slot], prompt: list[int]) -> Slot:
        """The free slot whose cache holds the longest start of the prompt, if more than half of it
        (the next turn of its conversation), else the one idle longest, so that what the others
        hold stays for their next turn (llama-server's choice, its --slot-prompt-similarity 0.5)."""
        def similar(s: Slot) -> int:
            n = common_prefix(s.held, prompt)
            return n if 2 * n > len(prompt) else 0
        return max(free, key=lambda s: (similar(s), -s.admitted))

    def _start(self, slot: Slot) -> None:
        r = slot.request
        if slot.cache is None:
            slot.cache = self.runtime.new_cache(self.n_ctx, self.kv_dtype)
        reused = 0
        if slot.leader is not None:  # a choice of n: its prompt's K/V come from the leader (_fork)
            slot.cache.reset()
            self.metrics.count("prompt_tokens_shared", len(r.prompt))
        elif self.prefix_cache is not None and r.prompt_logprobs is None:  # scoring needs every row's logits
            reused = self._reuse(slot, r.prompt)
        else:
            slot.cache.reset()
        slot.held = []
        slot.tokens = list(r.prompt[:reused])
        slot.todo = list(r.prompt[reused:]) if slot.leader is None else []
        slot.scores = [TokenLogprob(r.prompt[0], None, [])] if r.prompt_logprobs is not None else None
        r.timings.prompt_tokens, r.timings.prompt_cached = len(r.prompt), reused
        matcher = r.grammar.matcher() if r.grammar is not None else None
        slot.gen = Generation(self.tokenizer, r.prompt, self.n_ctx, r.params, r.max_tokens, r.stop, matcher,
                              r.logprobs, speculative_for(self, slot, r.params), r.timings, start=r.created)
        slot.prefill_start = time.perf_counter()
        if slot.leader is None:  # a group's prompt is received, and counted, once
            self.metrics.count("prompt_tokens", len(r.prompt))
            self.metrics.count("prompt_tokens_cached", reused)

    def _reuse(self, slot: Slot, prompt: list[int]) -> int:
        """Leaves in the slot's cache the K/V of as many of the prompt's first tokens as are known:
        those its last request left there (`held`: any length, llama-server's cache_prompt; the
        next turn of a chat holds the last answer too), or the prefix cache's whole blocks,
        whichever is longer. Returns how many. The last prompt token is always computed (it gives
        the logits), and a prompt too short for the batched paths (MIN_PREFILL_ROWS) all of it."""
        limit = len(prompt) - 1 if prefills_batched(len(prompt)) else 0
        held = min(common_prefix(slot.held, prompt), limit)
        if held and held >= self.prefix_cache.cached_length(prompt, limit) and slot.cache.can_trim_to(held):
            slot.cache.trim(held)
            return held
        slot.cache.reset()
        return self.prefix_cache.restore(prompt, slot.cache, limit=limit)

    def _step(self) -> None:
        rows, budget = [], self.prefill_chunk
        for slot in self.slots:
            if not slot.busy or slot.leader is not None:
                continue
            if slot.todo:
                if budget <= 0:
                    continue
                n = min(budget, len(slot.todo))
                if slot.scores is not None:
                    n = self._score_chunk(slot, budget)
                    if not n:
                        continue
                chunk = slot.todo[:n]
                budget -= n
                rows.append((slot, chunk))
            else:
                rows.append((slot, [slot.next_token, *slot.gen.draft(self.n_ctx)]))
        if not rows:
            return
        try:
            batched = any(s.todo and prefills_batched(len(s.request.prompt)) for s, _ in rows)
            scoring = [s.scores is not None and bool(s.todo) for s, _ in rows]
            logits = forward_rows(self.runtime, [(t, s.cache) for s, t in rows], [bool(s.gen.drafted) for s, _ in rows],
                                  scoring, batched, [len(s.todo) == len(t) for s, t in rows])
        except Exception as e:  # nothing is half-done: every sequence of the batch fails cleanly
            for slot, _ in rows:
                self._finish(slot, e)
            return
        self.steps += 1
        self.metrics.observe_batch(len(rows))
        for (slot, tokens), row in zip(rows, logits):
            slot.tokens.extend(tokens)
            if slot.gen.drafted:
                self._verify(slot, row)
                continue
            if slot.todo:
                if slot.scores is not None:
                    self._score(slot, tokens, row)
                del slot.todo[:len(tokens)]
                r = slot.request
                if r.progress:
                    r.put(GenerationChunk("", [], progress={
                        "total": len(r.prompt), "cache": r.timings.prompt_cached, "processed": len(slot.tokens),
                        "time_ms": (time.perf_counter() - slot.prefill_start) * 1e3}))
                if slot.todo:
                    if self.prefix_cache is not None and len(slot.tokens) > self.prefix_cache.block_size:
                        # now, while a sliding-window ring still holds this chunk (prefix_cache.py)
                        self.prefix_cache.store(slot.tokens, slot.cache)
                    continue  # more of the prompt next step
                slot.request.timings.prefill_s = time.perf_counter() - slot.prefill_start
                self.metrics.count("prefills")
                self.metrics.count("prompt_seconds", slot.request.timings.prefill_s)
                if slot.scores is not None:
                    slot.request.prompt_scores = slot.scores  # before the first chunk: a reader takes it then
                    if slot.request.max_tokens == 0:  # scoring only
                        slot.request.put(GenerationChunk("", [], "length", slot.request.timings))
                        self._finish(slot, None)
                        continue
                if slot.gen.speculator is not None:  # the draft model's prompt too, before the first token
                    slot.gen.speculator.proposer.prefill(slot.tokens)
                if self.prefix_cache is not None:
                    self.prefix_cache.store(slot.tokens, slot.cache)
                self._fork(slot, row[-1])
            self._sample(slot, row[-1])

    def _score_chunk(self, slot: Slot, budget: int) -> int:
        """How many prompt tokens a scoring slot prefills this step (0: not this step): at most
        SCORE_LOGITS_BYTES of logits, and never fewer than MIN_PREFILL_ROWS rows nor a shorter
        tail, so each row is Model.logits' row bit for bit (logprobs.score_prompt's chunking)."""
        n_vocab = self.tokenizer.n_vocab
        n = min(len(slot.todo), max(MIN_PREFILL_ROWS, SCORE_LOGITS_BYTES // (4 * n_vocab)))
        if len(slot.todo) - n < MIN_PREFILL_ROWS:
            n = len(slot.todo)
        # a chunk that does not fit what the step has left waits for a step of its own
        return n if n <= budget or budget == self.prefill_chunk else 0

    def _score(self, slot: Slot, tokens: list[int], rows: np.ndarray) -> None:
        """rows (len(tokens), n_vocab): the logits after each of `tokens`, the prompt's latest chunk
        (already in slot.tokens); row k predicts the prompt token after tokens[k]."""
        prompt, n_top = slot.request.prompt, slot.request.prompt_logprobs
        start = len(slot.tokens) - len(tokens)
        for k in range(min(len(tokens), len(prompt) - 1 - start)):
            slot.scores.append(token_logprob(rows[k], prompt[start + k + 1], n_top))

    def _fork(self, leader: Slot, logits: np.ndarray) -> None:
        """The leader's prompt is done: each waiting choice takes a copy of its K/V and samples
        its first token from the same logits row."""
        for slot in leader.followers:
            copy_cache(leader.cache, slot.cache)
            slot.tokens, slot.leader = list(leader.tokens), None
            slot.request.timings.prefill_s = leader.request.timings.prefill_s
            self._sample(slot, logits.copy())  # a processor may write into its row: each its own
        leader.followers = []

    def _sample(self, slot: Slot, logits: np.ndarray) -> None:
        try:
            token, _, logprob = slot.gen.choose(logits)
        except Exception as e:
            self._finish(slot, e)
            return
        self._deliver(slot, token, logprob)

    def _verify(self, slot: Slot, rows: np.ndarray) -> None:
        """rows: the logits after next_token and each drafted token. The kept tokens (and the one
        after them) are delivered; the cache is rolled back to what they leave evaluated."""
        n_drafted = len(slot.gen.drafted)
        try:
            chosen, n_kept = slot.gen.verify(rows)
        except Exception as e:
            self._finish(slot, e)
            return
        n_keep = len(slot.gen.history) - 1  # the last chosen token is evaluated with the next drafts
        slot.cache.trim(n_keep)
        del slot.tokens[n_keep:]
        self.metrics.count("draft_tokens", n_drafted)
        self.metrics.count("draft_tokens_accepted", n_kept)
        slot.request.timings.draft_tokens += n_drafted
        slot.request.timings.draft_accepted += n_kept
        for token, entry in chosen:
            if not slot.busy:
                break
            self._deliver(slot, token, entry)

    def _deliver(self, slot: Slot, token: int, logprob) -> None:
        """Hands a chosen token (already in the generation's history) to the request as a chunk."""
        try:
            chunk = slot.gen.emit(token, logprob)
        except Exception as e:
            self._finish(slot, e)
            return
        slot.next_token = token
        if len(slot.gen.out.tokens) == 1:
            self.metrics.observe("ttft_seconds", slot.gen.out.timings.ttft_s)
        self.metrics.count("generated_tokens")
        slot.chunks.append(chunk)
        request = slot.request
        if chunk.finish_reason:
            # its accounts (metrics, the prefix and completion caches) are closed before the last chunk
            # reaches the request: a client that reads /metrics or asks again once answered sees them
            self._finish(slot, None)
        request.put(chunk)

    def _finish(self, slot: Slot, error: BaseException | None) -> None:
        r = slot.request
        if error is not None:
            r.put(error)
            if not isinstance(error, Cancelled):
                self.metrics.count("failed")
        else:
            t = r.timings
            if t.generated_tokens > 1 and t.decode_s > 0:
                self.metrics.observe("decode_tokens_per_second", t.decode_tps)
            self.metrics.count("decode_seconds", t.decode_s)
            self.n_tokens_max = max(self.n_tokens_max, len(slot.tokens))
            self.metrics.count("completed")
            if self.completion_cache is not None:
                self.completion_cache.put(r, slot.chunks)
        if self.prefix_cache is not None and (error is None or isinstance(error, Cancelled)) and slot.tokens:
            self.prefix_cache.store(slot.tokens, slot.cache)  # the answer too: the next chat turn
        if slot.leader is not None:  # a waiting choice that ended (cancelled): no copy for it
            slot.leader.followers.remove(slot)
        for follower in list(slot.followers):  # still waiting for this prompt: they cannot go on without it
            self._finish(follower, error or Cancelled("the choice sharing its prompt ended first"))
        with self._wake:
            slot.release()
