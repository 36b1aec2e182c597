"""llama-server's slot save, restore and erase (POST /slots/ID?action=...), on the engine's slots.

    save(engine, i, path, identity)     the K/V an idle slot still holds from its last request, and its
                                        tokens, to `path` (kv/session_state.py's file, kind "slot")
    restore(engine, i, path, identity)  a saved file into slot i's cache, and from there into the prefix
                                        cache: every slot reuses it for a prompt that starts with those
                                        tokens (llama-server keeps it in that slot; here requests are
                                        placed by the engine, and the prefix cache is how any slot reuses)
    erase(engine, i)                    forgets what slot i holds

Each runs on the engine's thread between steps (Engine.call), so no forward pass or admission
touches the slot meanwhile. A busy slot is refused (SlotBusyError). `identity` is the model file's
(session_state.model_identity): a file saved for another model is refused on restore.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from ..kv.session_state import load_context, save_context

KIND = "slot"


class SlotBusyError(RuntimeError):
    """The slot is generating for a request."""


class NoPrefixCacheError(ValueError):
    """A restore needs the prefix cache, through which the engine reuses K/V."""


@dataclass
class _SlotContext:
    """What save_context / load_context read and set on a Context, for one slot's cache."""
    identity: str
    n_ctx: int
    cache: object
    n_vocab: int
    tokens: list[int] = field(default_factory=list)
    last_n_computed: int = 0


def _idle(engine, index: int):
    if not 0 <= index < len(engine.slots):
        raise IndexError(f"there is no slot {index}: the server has slots 0..{len(engine.slots) - 1}")
    slot = engine.slots[index]
    if slot.busy:
        raise SlotBusyError(f"slot {index} is generating for a request")
    if slot.cache is None:
        slot.cache = engine.runtime.new_cache(engine.n_ctx, engine.kv_dtype)
        slot.cache.reset()
    return slot


def save(engine, index: int, path: str | os.PathLike, identity: str) -> dict:
    def run() -> dict:
        t0 = time.perf_counter()
        slot = _idle(engine, index)
        ctx = _SlotContext(identity, engine.n_ctx, slot.cache, engine.tokenizer.n_vocab, list(slot.held))
        save_context(ctx, path, kind=KIND)
        return {"n_saved": len(slot.held), "n_written": os.path.getsize(path),
                "ms": (time.perf_counter() - t0) * 1e3}
    return engine.call(run)


def restore(engine, index: int, path: str | os.PathLike, identity: str) -> dict:
    def run() -> dict:
        t0 = time.perf_counter()
        if engine.prefix_cache is None:
            raise NoPrefixCacheError("restoring a slot needs the prefix cache (--prefix-cache above 0): through "
                                     "it every slot reuses the restored tokens")
        slot = _idle(engine, index)
        ctx = _SlotContext(identity, engine.n_ctx, slot.cache, engine.tokenizer.n_vocab)
        slot.held = []  # while the cache is rewritten: nothing it held is known to be there
        load_context(ctx, path, kind=KIND)
        slot.held = ctx.tokens
        engine.prefix_cache.store(slot.held, slot.cache)
        return {"n_restored": len(slot.held), "n_read": os.path.getsize(path), "ms": (time.perf_counter() - t0) * 1e3}
    return engine.call(run)


def erase(engine, index: int) -> dict:
    def run() -> dict:
        slot = _idle(engine, index)
        n = len(slot.held)
        slot.held = []
        slot.cache.reset()
        return {"n_erased": n}
    return engine.call(run)
