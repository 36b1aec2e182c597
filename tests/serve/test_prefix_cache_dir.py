"""--prefix-cache-dir: a restarted server reuses the prefix blocks the last one computed, answers
exactly as a cold one does, and recomputes whatever file fails its checks."""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest

import localinfer
from localinfer.batching.prefix_store import SUFFIX, PrefixStore
from localinfer.kv.cache import KVCache
from localinfer.serve.app import BackgroundServer
from localinfer.kv.state_file import MAGIC

from serve_helpers import metric, raw

SYSTEM = ("You are the assistant of a small bakery. Answer questions about bread, opening hours and "
          "prices politely and briefly. ") * 30  # past gemma3's ring (576 positions)


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def model(request, smollm2_path, gemma3_path):
    path = smollm2_path if request.param == "smollm2" else gemma3_path
    m = localinfer.load(str(path), n_ctx=1024)
    yield m
    m.close()


def _ask(model, user: str, folder=None, **options):
    """(completion tokens' text, cached prompt tokens, server state) from a fresh server."""
    body = {"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}],
            "max_tokens": 8, "temperature": 0}
    with BackgroundServer(model, "m", port=0, n_slots=1, prefix_cache_dir=folder, **options) as s:
        status, _, out = raw(s.url, "POST", "/v1/chat/completions", body)
        assert status == 200, out
        _, _, metrics = raw(s.url, "GET", "/metrics")
        state = s.engine.state()
    cached = out["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert metric(metrics, "localinfer_prompt_tokens_cached_total") == cached
    return out["choices"][0]["message"]["content"], cached, out["usage"]["prompt_tokens"], state


def test_a_restarted_server_reuses_the_prefix_and_answers_the_same(model, tmp_path):
    cold_text, cold_cached, _, _ = _ask(model, "When do you open on Sunday?")  # no folder
    assert cold_cached == 0
    _ask(model, "Do you sell rye bread?", tmp_path)  # fills the folder
    assert list(tmp_path.glob("*" + SUFFIX))
    text, cached, n_prompt, state = _ask(model, "When do you open on Sunday?", tmp_path)
    assert text == cold_text  # bit-exact: the same logits as computing the prefix
    system_tokens = len(model.tokenize(SYSTEM, add_special=False))
    assert system_tokens > 600
    assert cached >= system_tokens - 64 and cached <= n_prompt - 16
    assert state["prefix_cache_disk_loaded_blocks"] * 32 == cached


def _flip_payload_bytes(folder):
    for path in folder.glob("*" + SUFFIX):
        data = bytearray(path.read_bytes())
        data[-100] ^= 0x01
        path.write_bytes(bytes(data))


def test_corrupt_files_are_recomputed_and_replaced(smollm2_path, tmp_path):
    with localinfer.load(str(smollm2_path), n_ctx=1024) as m:
        cold_text = _ask(m, "Is there a gluten-free loaf?")[0]
        _ask(m, "Do you sell rye bread?", tmp_path)
        _flip_payload_bytes(tmp_path)
        text, cached, _, state = _ask(m, "Is there a gluten-free loaf?", tmp_path)
        assert text == cold_text and cached == 0
        assert state["prefix_cache_disk_rejected_blocks"] == 1  # the first bad block ends the walk
        # the bad files were deleted, the blocks written again: the next restart reuses them
        text, cached, _, _ = _ask(m, "Is there a gluten-free loaf?", tmp_path)
        assert text == cold_text and cached > 0


def test_another_cache_type_does_not_read_the_blocks(smollm2_path, tmp_path):
    with localinfer.load(str(smollm2_path), n_ctx=1024) as m:
        _ask(m, "Do you sell rye bread?", tmp_path)
    # q8_0 keys and values: another layout, on the fused C layers (an f32 cache takes the unfused path: minutes)
    with localinfer.load(str(smollm2_path), n_ctx=1024, cache_type_k="q8_0", cache_type_v="q8_0") as q8:
        cold = _ask(q8, "Is there a gluten-free loaf?")[0]
        text, cached, _, state = _ask(q8, "Is there a gluten-free loaf?", tmp_path)
        assert text == cold and cached == 0 and state["prefix_cache_disk_rejected_blocks"] == 0


@pytest.fixture
def block():
    cache = KVCache(2, 64, 1, 4)
    rng = np.random.default_rng(0)
    cache.k[:, :8] = rng.standard_normal((2, 8, 1, 4))
    cache.advance(8)
    return cache, {"k": cache.k[:, :8].copy(), "v": cache.v[:, :8].copy()}


def test_a_block_for_another_model_is_refused(tmp_path, block):
    cache, arrays = block
    a = PrefixStore(tmp_path, 1 << 20, "model-a", block_size=8)
    key = bytes(16)
    a.save(key, arrays, cache)
    got = a.load(key, cache)
    assert np.array_equal(got["k"], arrays["k"])
    b = PrefixStore(tmp_path, 1 << 20, "model-b", block_size=8)
    assert b.load(key, cache) is None and b.rejected == 0  # another name: never even opened
    # the same file under model-b's name (renamed by hand) is opened, checked and refused
    (file_a,) = tmp_path.glob("*" + SUFFIX)
    _, prefix_b = b._layout(cache)
    file_a.rename(tmp_path / b._name(prefix_b, key))
    assert b.load(key, cache) is None and b.rejected == 1
    assert not list(tmp_path.glob("*" + SUFFIX))  # and deleted: it will be recomputed


def test_a_hostile_block_header_allocates_nothing(tmp_path, block):
    cache, arrays = block
    store = PrefixStore(tmp_path, 1 << 20, "model-a", block_size=8)
    key = bytes(16)
    store.save(key, arrays, cache)
    (path,) = tmp_path.glob("*" + SUFFIX)
    data = path.read_bytes()
    _, version, n = struct.unpack_from("<8sII", data)
    header = json.loads(data[16:16 + n])
    header["arrays"][0][2] = [1 << 30, 1 << 30, 1 << 30]
    head = json.dumps(header).encode()
    path.write_bytes(struct.pack("<8sII", MAGIC, version, len(head)) + head + data[16 + n:])
    assert store.load(key, cache) is None and store.rejected == 1


def test_the_folder_stays_within_its_size(tmp_path, block):
    cache, arrays = block
    store = PrefixStore(tmp_path, 1 << 20, "model-a", block_size=8)
    store.save(bytes(16), arrays, cache)
    one = store.nbytes
    small = PrefixStore(tmp_path, 3 * one, "model-a", block_size=8)
    for i in range(10):
        small.save(bytes([i]) * 16, arrays, cache)
    files = list(tmp_path.glob("*" + SUFFIX))
    assert len(files) == 3 and small.nbytes == sum(f.stat().st_size for f in files) <= 3 * one
    assert small.load(bytes([9]) * 16, cache) is not None  # the newest stay
    assert small.load(bytes(16), cache) is None  # the oldest went first


def test_a_folder_without_a_prefix_cache_or_a_model_identity_is_an_error(tmp_path):
    from localinfer.batching.engine import Engine
    with pytest.raises(ValueError, match="prefix_cache_bytes"):
        Engine(None, None, prefix_cache_bytes=0, prefix_cache_dir=str(tmp_path), model_identity="m")
    with pytest.raises(ValueError, match="identity"):
        Engine(None, None, prefix_cache_dir=str(tmp_path))


def test_a_write_cut_short_leaves_nothing_that_loads(tmp_path, block):
    import os
    cache, arrays = block
    stale = tmp_path / ".tmp-abc.state"  # what a crash in the middle of a write leaves
    stale.write_bytes(b"LISTATE\0half")
    os.utime(stale, (1, 1))
    fresh = tmp_path / ".tmp-def.state"  # another process writing right now
    fresh.write_bytes(b"LISTATE\0")
    store = PrefixStore(tmp_path, 1 << 20, "model-a", block_size=8)
    assert store.load(bytes(16), cache) is None  # no block: the temporaries are never read as one
    assert not stale.exists() and fresh.exists()


def _rewrite_header(path, change):
    """Rewrites a block file's header with change(header) -> header (the checksum is left stale:
    the reader must refuse the file before it gets that far, or at the checksum)."""
    data = path.read_bytes()
    _, version, n = struct.unpack_from("<8sII", data)
    head = change(json.loads(data[16:16 + n]))
    head = head if isinstance(head, bytes) else json.dumps(head).encode()
    path.write_bytes(struct.pack("<8sII", MAGIC, version, len(head)) + head + data[16 + n:])


def _deep(depth: int) -> bytes:
    return b'{"kind": ' + b"[" * depth + b"]" * depth + b"}"


@pytest.mark.parametrize("depth", [100, 200_000])  # past the header's limit; past the interpreter's stack
def test_a_deeply_nested_block_header_is_refused_and_deleted(tmp_path, block, depth):
    cache, arrays = block
    store = PrefixStore(tmp_path, 1 << 20, "model-a", block_size=8)
    key = bytes(16)
    store.save(key, arrays, cache)
    (path,) = tmp_path.glob("*" + SUFFIX)
    _rewrite_header(path, lambda _: _deep(depth))
    assert store.load(key, cache) is None and store.rejected == 1
    assert not path.exists()  # deleted: the next request recomputes and writes it again
    store.save(key, arrays, cache)
    assert np.array_equal(store.load(key, cache)["k"], arrays["k"])


def _load_in_thread(store, key, cache, path):
    """store.load in a thread; if it is still blocked after a generous wait (an open() on a FIFO
    waits for a writer), a writer is opened to release it and the test fails instead of hanging."""
    import os
    import threading
    got = {}
    worker = threading.Thread(target=lambda: got.update(result=store.load(key, cache)), daemon=True)
    worker.start()
    worker.join(60)
    if worker.is_alive():
        os.close(os.open(path, os.O_WRONLY))  # the blocked reader's open returns, then reads EOF
        worker.join()
        pytest.fail("PrefixStore.load blocked on a FIFO named like a block")
    return got["result"]


def test_a_fifo_or_symlink_named_like_a_block_is_refused_without_blocking(tmp_path, block):
    import os
    cache, arrays = block
    store = PrefixStore(tmp_path, 1 << 20, "model-a", block_size=8)
    key = bytes(16)
    store.save(key, arrays, cache)
    (path,) = tmp_path.glob("*" + SUFFIX)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / "valid-block"
    path.rename(target)
    os.mkfifo(path)
    assert _load_in_thread(store, key, cache, path) is None and store.rejected == 1
    assert path.exists() and not path.is_file()  # not ours to delete: left where it is
    path.unlink()
    path.symlink_to(target)  # a valid block, but reached through a link someone else put there
    assert _load_in_thread(store, key, cache, path) is None and store.rejected == 2
    assert path.is_symlink() and target.exists()  # neither the link nor what it points to is deleted


def test_a_poisoned_block_costs_only_its_own_reuse(smollm2_path, tmp_path):
    """A block whose header overflows the JSON parser's stack, in a real server's folder, while
    another request is in flight: both are answered, the matching one as a cold server does."""
    import threading
    from serve_helpers import wait_idle
    with localinfer.load(str(smollm2_path), n_ctx=1024) as m:
        cold_text = _ask(m, "Is there a gluten-free loaf?")[0]
        _ask(m, "Do you sell rye bread?", tmp_path)
        for path in tmp_path.glob("*" + SUFFIX):
            _rewrite_header(path, lambda _: _deep(200_000))
        other = {"messages": [{"role": "user", "content": "Count from one to twenty."}],
                 "max_tokens": 24, "temperature": 0}
        poisoned = {"messages": [{"role": "system", "content": SYSTEM},
                                 {"role": "user", "content": "Is there a gluten-free loaf?"}],
                    "max_tokens": 8, "temperature": 0}
        answers = {}
        with BackgroundServer(m, "m", port=0, n_slots=2, prefix_cache_dir=tmp_path) as s:
            threads = [threading.Thread(target=lambda k=k, b=b: answers.update({k: raw(s.url, "POST", "/v1/chat/completions", b)}))
                       for k, b in (("other", other), ("poisoned", poisoned))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wait_idle(s.url)
            state = s.engine.state()
        assert answers["other"][0] == 200, answers["other"]
        status, _, out = answers["poisoned"]
        assert status == 200, out
        assert out["choices"][0]["message"]["content"] == cold_text
        assert out["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        assert state["prefix_cache_disk_rejected_blocks"] == 1


def test_a_folder_that_goes_away_costs_only_the_reuse(tmp_path, block):
    import shutil
    cache, arrays = block
    folder = tmp_path / "blocks"
    store = PrefixStore(folder, 1 << 20, "model-a", block_size=8)
    shutil.rmtree(folder)  # removed before the first block is looked for: the scan finds nothing
    assert store.load(bytes(16), cache) is None
    store.save(bytes(16), arrays, cache)  # cannot be written: logged, not raised
    assert store.written == 0 and store.load(bytes(16), cache) is None


def test_chain_keys_are_blake2b_of_the_parent_and_the_block():
    """The keys name the folder's files, so a later version must compute the same ones: BLAKE2b-128
    of the parent key and the block's int64 tokens, whichever module provides it."""
    import hashlib

    from localinfer.batching.prefix_cache import PrefixCache

    tokens = list(range(1000, 1020))
    first = hashlib.blake2b(np.arange(1000, 1008, dtype=np.int64).tobytes(), digest_size=16).digest()
    second = hashlib.blake2b(first + np.arange(1008, 1016, dtype=np.int64).tobytes(), digest_size=16).digest()
    assert PrefixCache(1 << 20, block_size=8).keys(tokens) == [first, second]
    assert first.hex() == "730b57af2e9ea188fd1283d12b2db513"   # as the files already on disk name it
