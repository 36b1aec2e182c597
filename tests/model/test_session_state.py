"""Saved KV state (kv/session_state.py, kv/state_file.py): a loaded context continues bit-exactly, and
a file for another model or cache, or a damaged one, is refused before anything is changed."""
import json
import os
import struct

import numpy as np
import pytest

import localinfer
from localinfer.kv.cache import KVCache as KVCache_
from localinfer.kv.state_file import MAGIC, StateFileError, StateMismatchError, read_state, write_state

N_CTX = 256


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def model(request, smollm2_path, gemma3_path):
    path = smollm2_path if request.param == "smollm2" else gemma3_path
    m = localinfer.load(str(path), n_ctx=N_CTX)
    yield m
    m.close()


def _prompt(model, n: int) -> list[int]:
    rng = np.random.default_rng(n)
    return [int(t) for t in rng.integers(100, model.n_vocab - 100, n)]


def test_context_round_trip_continues_bit_exactly(model, tmp_path):
    # gemma3's prompt is longer than its sliding window (512 in the file, clamped to n_ctx here:
    # the ring is then positional); the session test below exercises a real ring
    prompt, more = _prompt(model, 40), _prompt(model, 7)
    ctx = model.new_context()
    ctx.evaluate(prompt)
    path = tmp_path / "ctx.state"
    ctx.save(path)
    expected = ctx.append(more)

    loaded = model.load_state(path)
    assert loaded.tokens == prompt
    got = loaded.append(more)
    assert np.array_equal(got, expected)  # bitwise: the same cache bytes, the same kernels


def test_chat_session_round_trip(model, tmp_path):
    session = model.chat_session(system="You are terse.", temperature=0, max_tokens=6)
    session.send("Name a colour.")
    path = tmp_path / "chat.state"
    model.save_state(path, session)
    reference = session.send("Another one?")

    restored = model.load_state(path, temperature=0, max_tokens=6)
    assert restored.messages == session.messages[:-2]
    again = restored.send("Another one?")
    assert again.tokens == reference.tokens
    assert again.timings.prompt_tokens - again.timings.prompt_cached < len(restored.last_prompt_tokens)


@pytest.mark.parametrize("options", [dict(temperature=0, max_tokens=6),
                                     dict(temperature=0.9, seed=7, max_tokens=6, logit_bias={11: -100.0}),
                                     dict(temperature=0.9, seed=3, max_tokens=8, grammar='root ::= [a-z]+ "."')],
                         ids=["greedy", "seeded", "grammar"])
def test_a_resumed_chat_keeps_its_options(model, tmp_path, options):
    """The session's generation options are in its state file: load_state without them answers
    as the saved session would have (a compiled grammar is saved as its source)."""
    if "grammar" in options:
        from localinfer.constrain import compile_grammar
        options = {**options, "grammar": compile_grammar(model.tokenizer, gbnf=options["grammar"])}
    session = model.chat_session(system="You are terse.", **options)
    session.send("Name a colour.")
    path = tmp_path / "chat.state"
    model.save_state(path, session)
    reference = session.send("Another one?")
    restored = model.load_state(path)
    assert restored.send("Another one?").tokens == reference.tokens
    overridden = model.load_state(path, max_tokens=1)  # options given at load win
    assert len(overridden.send("Another one?").tokens) == 1


def test_ring_cache_round_trip(gemma3_path, tmp_path):
    """A context larger than gemma3's window + margin: the sliding-window layers are a real ring,
    saved whole with its held_start."""
    with localinfer.load(str(gemma3_path), n_ctx=1024) as m:
        ctx = m.new_context()
        assert ctx.cache.swa.n_slots < ctx.cache.n_ctx
        prompt, more = _prompt(m, 700), _prompt(m, 5)
        ctx.evaluate(prompt)
        ctx.save(tmp_path / "ring.state")
        held = ctx.cache.swa.held_start
        assert held > 0  # the ring has wrapped
        expected = ctx.append(more)
        loaded = m.load_state(tmp_path / "ring.state")
        assert loaded.cache.swa.held_start == held
        assert np.array_equal(loaded.append(more), expected)


def test_mismatched_model_and_n_ctx_are_refused(smollm2_path, gemma3_path, tmp_path):
    with localinfer.load(str(smollm2_path), n_ctx=64) as small:
        ctx = small.new_context()
        ctx.evaluate([1, 2, 3, 4])
        ctx.save(tmp_path / "s.state")
        other = small.new_context(32)
        with pytest.raises(StateMismatchError, match="n_ctx"):
            other.load(tmp_path / "s.state")
        assert other.tokens == [] and other.cache.offset == 0
    with localinfer.load(str(gemma3_path), n_ctx=64) as g:
        with pytest.raises(StateMismatchError, match="model"):
            g.load_state(tmp_path / "s.state")
    with localinfer.load(str(smollm2_path), n_ctx=64, kv_dtype="f32") as f32:
        with pytest.raises(StateMismatchError, match="cache dtype"):
            f32.load_state(tmp_path / "s.state")


@pytest.fixture
def saved(smollm2_path, tmp_path):
    m = localinfer.load(str(smollm2_path), n_ctx=64)
    ctx = m.new_context()
    ctx.evaluate([1, 2, 3, 4, 5])
    path = tmp_path / "s.state"
    ctx.save(path)
    yield m, path
    m.close()


def test_truncated_and_corrupt_files_are_refused(saved):
    m, path = saved
    data = path.read_bytes()
    for cut in (0, 5, 20, len(data) // 2, len(data) - 1):
        path.write_bytes(data[:cut])
        with pytest.raises(StateFileError):
            m.load_state(path)
    flipped = bytearray(data)
    flipped[len(data) - 100] ^= 0x10  # inside the payload: only the checksum sees it
    path.write_bytes(bytes(flipped))
    ctx = m.new_context()
    with pytest.raises(StateFileError, match="checksum"):
        ctx.load(path)
    assert ctx.tokens == [] and ctx.cache.offset == 0
    path.write_bytes(b"GGUF" + data[4:])
    with pytest.raises(StateFileError, match="magic"):
        m.load_state(path)


def _rewrite_header(data: bytes, edit) -> bytes:
    _, version, n = struct.unpack_from("<8sII", data)
    header = json.loads(data[16:16 + n])
    edit(header)
    head = json.dumps(header).encode()
    return struct.pack("<8sII", MAGIC, version, len(head)) + head + data[16 + n:]


def test_hostile_sizes_are_refused_before_allocating(saved, tmp_path):
    m, path = saved
    data = path.read_bytes()

    def huge(header):
        header["arrays"][-1][2] = [1 << 39, 1 << 39]
    path.write_bytes(_rewrite_header(data, huge))
    with pytest.raises(StateFileError, match="header describes"):
        read_state(path)  # a (2^39)^2 array would be refused by numpy; this never gets there

    def many_tokens(header):
        header["n_tokens"] = 1 << 40
    path.write_bytes(_rewrite_header(data, many_tokens))
    with pytest.raises(StateFileError):
        m.load_state(path)
    path.write_bytes(struct.pack("<8sII", MAGIC, 1, 0xFFFFFFFF) + b"{}")
    with pytest.raises(StateFileError, match="header of"):
        m.load_state(path)
    path.write_bytes(struct.pack("<8sII", MAGIC, 99, 2) + b"{}")
    with pytest.raises(StateFileError, match="version 99"):
        m.load_state(path)


def test_writes_are_atomic(tmp_path, monkeypatch):
    path = tmp_path / "a.state"
    write_state(path, {"kind": "x"}, {"a": np.arange(6, dtype=np.float32).reshape(2, 3)})
    before = path.read_bytes()

    class Boom(Exception):
        pass

    def fail(*args):
        raise Boom
    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(Boom):
        write_state(path, {"kind": "y"}, {"a": np.zeros((2, 3), np.float32)})
    assert path.read_bytes() == before  # the old file stays whole
    assert [p.name for p in tmp_path.iterdir()] == ["a.state"]  # and no temporary is left
    header, arrays = read_state(path)
    assert header["kind"] == "x" and np.array_equal(arrays["a"], np.arange(6).reshape(2, 3))


def test_a_well_formed_file_with_impossible_positions_is_refused(gemma3_path, tmp_path):
    """Checksums prove nothing about a file made to be hostile: the position state is checked
    against the cache too (a ring cannot hold positions it has overwritten)."""
    with localinfer.load(str(gemma3_path), n_ctx=1024) as m:
        ctx = m.new_context()
        ctx.evaluate(_prompt(m, 700))
        path = tmp_path / "ring.state"
        ctx.save(path)
        header, arrays = read_state(path)
        for key, value in (("swa.held_start", 0), ("swa.offset", 699)):
            bad = {**header, "positions": {**header["positions"], key: value}}
            write_state(tmp_path / "bad.state", {k: v for k, v in bad.items() if k != "arrays"}, arrays)
            fresh = m.new_context()
            with pytest.raises(StateFileError):
                fresh.load(tmp_path / "bad.state")
            assert fresh.tokens == [] and fresh.cache.offset == 0


def test_a_context_without_a_model_identity_cannot_save(smollm2_path, tmp_path):
    from localinfer.context import Context
    with localinfer.load(str(smollm2_path), n_ctx=64) as m:
        bare = Context(m.serialized, 64)  # not from Model.new_context: which file it runs is unknown
        bare.evaluate([1, 2, 3])
        with pytest.raises(ValueError, match="new_context"):
            bare.save(tmp_path / "x.state")
        assert not (tmp_path / "x.state").exists()


class _BlockQuantizedCache(KVCache_):
    """What a quantized cache looks like to the walk (kv/cache.py's rule: axis 1 is the position):
    uint8 blocks and float16 scales instead of float K/V. Nothing here knows its names."""

    def __init__(self, n_layers, n_ctx, n_head_kv, head_dim):
        super().__init__(n_layers, n_ctx, n_head_kv, head_dim)
        self.k_blocks = np.zeros((n_layers, n_ctx, n_head_kv, head_dim // 32 * 34), np.uint8)
        self.k_scales = np.zeros((n_layers, n_ctx, n_head_kv, head_dim // 32), np.float16)


def test_other_cache_arrays_are_saved_and_blocked_generically():
    from localinfer.kv import contents as cache_state
    from localinfer.batching.prefix_cache import PrefixCache
    rng = np.random.default_rng(5)
    cache = _BlockQuantizedCache(2, 64, 1, 64)
    cache.k_blocks[:, :40] = rng.integers(0, 256, (2, 40, 1, 68), dtype=np.uint8)
    cache.k_scales[:, :40] = rng.standard_normal((2, 40, 1, 2))
    cache.advance(40)
    state, arrays = cache_state.snapshot(cache)
    assert arrays["k_blocks"].dtype == np.uint8 and arrays["k_blocks"].shape == (2, 40, 1, 68)
    fresh = _BlockQuantizedCache(2, 64, 1, 64)
    cache_state.load_snapshot(fresh, state, arrays)
    assert fresh.offset == 40 and np.array_equal(fresh.k_blocks, cache.k_blocks)
    assert np.array_equal(fresh.k_scales, cache.k_scales)
    assert cache_state.layout(fresh) == cache_state.layout(cache)
    assert cache_state.layout(fresh) != cache_state.layout(KVCache_(2, 64, 1, 64))  # a plain cache differs

    store = PrefixCache(1 << 20, block_size=8)
    store.store(list(range(40)), cache)
    restored = _BlockQuantizedCache(2, 64, 1, 64)
    assert store.restore(list(range(41)), restored, limit=40) == 40
    assert np.array_equal(restored.k_blocks[:, :40], cache.k_blocks[:, :40])
    assert not store.restore(list(range(41)), KVCache_(2, 64, 1, 64), limit=40)  # blocks of another type


def _in_thread(call, fifo):
    """call() in a thread; if it is still blocked after a generous wait (an open() on a FIFO waits
    for the other end), the FIFO's other end is opened to release it and the test fails."""
    import threading
    got = {}

    def run():
        try:
            got["result"] = call()
        except BaseException as e:
            got["error"] = e
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(60)
    if worker.is_alive():
        os.close(os.open(fifo, os.O_RDWR))  # both ends at once: the blocked open returns
        worker.join()
        pytest.fail("blocked on a FIFO")
    return got


def test_a_fifo_is_neither_read_nor_replaced(tmp_path):
    from localinfer.files.regular_file import NotRegularFileError
    fifo = tmp_path / "pipe.state"
    os.mkfifo(fifo)
    got = _in_thread(lambda: read_state(fifo), fifo)
    assert isinstance(got.get("error"), StateFileError) and "is a FIFO" in str(got["error"])
    got = _in_thread(lambda: write_state(fifo, {"kind": "x"}, {"a": np.zeros(2, np.float32)}), fifo)
    assert isinstance(got.get("error"), NotRegularFileError) and str(fifo) in str(got["error"])
    assert fifo.exists() and not fifo.is_file()  # still the FIFO
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe.state"]  # and no temporary left


def test_a_device_behind_a_symlink_is_not_replaced(tmp_path):
    """What `--prompt-cache /dev/null` does (as root the rename would replace /dev/null): here a
    link to it in a temporary folder, so a regression replaces only the link."""
    from localinfer.files.regular_file import NotRegularFileError
    link = tmp_path / "null.state"
    link.symlink_to(os.devnull)
    with pytest.raises(NotRegularFileError, match="character device"):
        write_state(link, {"kind": "x"}, {"a": np.zeros(2, np.float32)})
    assert link.is_symlink() and sorted(p.name for p in tmp_path.iterdir()) == ["null.state"]
    with pytest.raises(StateFileError, match="character device"):
        read_state(link)
    with pytest.raises(NotRegularFileError, match="directory"):
        write_state(tmp_path, {"kind": "x"}, {"a": np.zeros(2, np.float32)})


@pytest.mark.parametrize("depth", [100, 200_000])  # past the header's limit; past the interpreter's stack
def test_a_deeply_nested_header_is_a_state_file_error(tmp_path, depth):
    path = tmp_path / "deep.state"
    head = b'{"kind": ' + b"[" * depth + b"]" * depth + b"}"
    path.write_bytes(struct.pack("<8sII", MAGIC, 1, len(head)) + head + bytes(32))
    with pytest.raises(StateFileError, match="nested deeper"):
        read_state(path)
    with pytest.raises(ValueError, match="nest deeper"):  # and nothing writes a file it would refuse
        write_state(path, {"kind": "x", "deep": json.loads(b"[" * 100 + b"]" * 100)}, {})
