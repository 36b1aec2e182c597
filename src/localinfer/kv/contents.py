"""A KV cache's contents as named arrays, generically over the cache classes (kv/cache.py).

A cache is walked, not special-cased: its numpy array attributes are its data, its sub-caches
(an InterleavedKVCache's `full` and `swa`) are walked under their attribute name, `offset` and
`held_start` are its position state, and its other int attributes (n_layers, n_ctx, window,
n_slots ...) are its shape. So a new variant -- a quantized cache holding uint8 blocks and
scales -- is saved and checked without changes here, as long as it keeps the rule the classes
follow: axis 1 of every array is the position (a KVCache's `n_ctx` positions) or the ring slot
(a RotatingKVCache's `n_slots`, position p in slot p % n_slots).

- layout(cache): everything that must match for saved contents to fit (class, dtype, shapes).
- snapshot(cache) / load_snapshot(cache, ...): the whole state (positions up to `offset`).
- read_block(cache, start, stop) / write_blocks(...): positions [start, stop) of every layer,
  for the prefix cache (batching/prefix_cache.py).
"""
from __future__ import annotations

import numpy as np

_STATE_INTS = ("offset", "held_start")
_BOOKKEEPING = ("generation",)  # neither shape nor state: KVCache.rewritten's count


def _parts(cache, prefix: str = ""):
    """(name prefix, cache object) for the cache and each of its sub-caches, depth first."""
    yield prefix, cache
    for name, value in sorted(vars(cache).items()):
        if hasattr(value, "update_and_fetch") and hasattr(value, "offset"):
            yield from _parts(value, f"{prefix}{name}.")


def _arrays(obj) -> list[tuple[str, np.ndarray]]:
    return [(name, a) for name, a in sorted(vars(obj).items()) if isinstance(a, np.ndarray) and a.ndim >= 2]


def _is_ring(obj) -> bool:
    return hasattr(obj, "held_start") and getattr(obj, "n_slots", None) not in (None, obj.n_ctx)


def layout(cache) -> dict:
    """{"type", "dtype", part: {shape ints, arrays: {name: [dtype, shape]}}}: JSON-able, compared
    whole when a state is loaded."""
    out = {"type": type(cache).__name__, "dtype": np.dtype(cache.dtype).name}
    for prefix, part in _parts(cache):
        shape = {k: v for k, v in sorted(vars(part).items())
                 if isinstance(v, int) and not isinstance(v, bool) and k not in _STATE_INTS + _BOOKKEEPING}
        shape["class"] = type(part).__name__
        shape["arrays"] = {name: [a.dtype.name, list(a.shape)] for name, a in _arrays(part)}
        out[prefix or "."] = shape
    return out


def snapshot(cache) -> tuple[dict, dict[str, np.ndarray]]:
    """(position state, arrays): positional arrays cut to their first `offset` positions, rings
    whole (they are small: window + margin slots)."""
    state, arrays = {}, {}
    for prefix, part in _parts(cache):
        for k in _STATE_INTS:
            if k in vars(part):
                state[f"{prefix}{k}"] = int(vars(part)[k])
        for name, a in _arrays(part):
            arrays[f"{prefix}{name}"] = a if _is_ring(part) else a[:, :part.offset]
    return state, arrays


def load_snapshot(cache, state: dict, arrays: dict[str, np.ndarray]) -> None:
    """Makes `cache` (same layout, checked by the caller) hold a snapshot; checks every array's
    shape against the cache's before writing, so nothing changes when one does not fit."""
    plan = []
    for prefix, part in _parts(cache):
        if "offset" not in vars(part):  # a container (InterleavedKVCache): its parts hold the state
            continue
        offset = state.get(f"{prefix}offset")
        if not isinstance(offset, int) or not 0 <= offset <= part.n_ctx:
            raise ValueError(f"saved offset {offset!r} of {prefix or 'the cache'} is outside 0..{part.n_ctx}")
        held = state.get(f"{prefix}held_start", 0)
        lowest = max(0, offset - part.n_slots) if _is_ring(part) else 0  # older slots were overwritten
        if "held_start" in vars(part) and not (isinstance(held, int) and lowest <= held <= offset):
            raise ValueError(f"saved held_start {held!r} of {prefix} is outside {lowest}..{offset}")
        for name, a in _arrays(part):
            saved = arrays.get(f"{prefix}{name}")
            want = a.shape if _is_ring(part) else (a.shape[0], offset, *a.shape[2:])
            if saved is None or saved.dtype != a.dtype or saved.shape != want:
                got = "nothing" if saved is None else f"{saved.dtype} {saved.shape}"
                raise ValueError(f"saved array {prefix}{name} is {got}, expected {a.dtype} {want}")
            plan.append((part, a, saved))
        plan.append((part, None, (offset, held)))
    for part, a, saved in plan:
        if a is None:
            offset, held = saved
            part.offset = offset
            if "held_start" in vars(part):
                part.held_start = held
        elif _is_ring(part):
            a[...] = saved
        else:
            a[:, :saved.shape[1]] = saved
    _rewritten(cache)


def _rewritten(cache) -> None:
    """Tells every part whose arrays were just written from outside (KVCache.rewritten)."""
    for _, part in _parts(cache):
        if hasattr(part, "rewritten"):
            part.rewritten()


# -- blocks of positions, for the prefix cache -------------------------------------------------
def supports_blocks(cache, block_size: int) -> bool:
    """Whether blocks of this cache can be read and written: every part is positional, or a ring
    wide enough to hold a window plus a block (so a restored window fits in it)."""
    for _, part in _parts(cache):
        if _is_ring(part) and part.n_slots < part.window + block_size - 1:
            return False
    return True


def read_block(cache, start: int, stop: int) -> dict[str, np.ndarray]:
    """Copies of positions [start, stop) of every array; a ring's arrays only when the ring still
    holds those positions (they are then left out: the block has no sliding-window part)."""
    out = {}
    for prefix, part in _parts(cache):
        ring = _is_ring(part)
        if ring and not (start >= part.held_start and stop <= part.offset):
            continue
        index = np.arange(start, stop) % part.n_slots if ring else slice(start, stop)
        for name, a in _arrays(part):
            out[f"{prefix}{name}"] = a[:, index].copy()
    return out


def block_shapes(cache, block_size: int) -> dict[str, tuple[str, tuple[int, ...]]]:
    """{array name: (dtype name, shape)} of a block of this cache, the sliding-window part included."""
    return {f"{prefix}{name}": (a.dtype.name, (a.shape[0], block_size, *a.shape[2:]))
            for prefix, part in _parts(cache) for name, a in _arrays(part)}


def ring_parts(cache) -> list[tuple[str, object]]:
    return [(prefix, part) for prefix, part in _parts(cache) if _is_ring(part)]


def block_names(cache) -> tuple[set[str], set[str]]:
    """(names a block always has, names of its sliding-window part)."""
    always, ring = set(), set()
    for prefix, part in _parts(cache):
        for name, _ in _arrays(part):
            (ring if _is_ring(part) else always).add(f"{prefix}{name}")
    return always, ring


def block_fits(cache, block: dict[str, np.ndarray], block_size: int) -> bool:
    """Whether each array of `block` has the dtype and shape this cache's block would have."""
    for prefix, part in _parts(cache):
        for name, a in _arrays(part):
            b = block.get(f"{prefix}{name}")
            if b is not None and (b.dtype != a.dtype or b.shape != (a.shape[0], block_size, *a.shape[2:])):
                return False
    return True


def write_blocks(cache, blocks: list[dict[str, np.ndarray]], block_size: int, ring_from: int) -> int:
    """Writes consecutive blocks from position 0 into the empty `cache` (the rings only blocks
    ring_from.., whose sliding-window parts they need) and advances it; returns the positions."""
    n = len(blocks) * block_size
    for prefix, part in _parts(cache):
        ring = _is_ring(part)
        for i, block in enumerate(blocks):
            if ring and i < ring_from:
                continue
            start = i * block_size
            index = np.arange(start, start + block_size) % part.n_slots if ring else slice(start, start + block_size)
            for name, a in _arrays(part):
                a[:, index] = block[f"{prefix}{name}"]
    cache.advance(n)
    _rewritten(cache)
    for _, part in ring_parts(cache):
        part.held_start = max(part.held_start, ring_from * block_size)
    return n
