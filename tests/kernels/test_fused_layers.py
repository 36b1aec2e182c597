"""The llama family's layers in one C call (arch/fused.py, csrc/core/decoder_layers.c) against the Python loop
over the same C ops: the same logits and the same KV cache, bit for bit, on the real SmolLM2.
(test_hf_oracle.py does the same for qwen2, qwen3, phi3, mistral and llama3 layouts.)"""
from __future__ import annotations

import numpy as np
import pytest

from localinfer.backend import kernels
from localinfer.arch import build_model
from localinfer.files.gguf_file import GGUFFile
from localinfer.kv.cache import RotatingKVCache

pytestmark = pytest.mark.skipif(not kernels.available(), reason="C kernels not built")


@pytest.fixture(scope="module")
def smollm2_c(smollm2_path):
    with GGUFFile(smollm2_path) as f:
        yield build_model(f, "c")


def _run(m, fuse: bool, chunks):
    m.fuse = fuse
    cache = m.new_cache(128)
    logits = [m.forward(np.array(c), cache) for c in chunks]
    return logits, cache


def test_fused_is_the_loop_bit_for_bit(smollm2_c):
    m = smollm2_c
    assert m.fused_layers() is not None
    chunks = [list(range(400, 437)), [5], [77], list(range(1000, 1020)), [9]]  # prefill, decode, chunk
    (fused, cf), (loop, cl) = _run(m, True, chunks), _run(m, False, chunks)
    for a, b in zip(fused, loop):
        np.testing.assert_array_equal(a, b)
    assert cf.offset == cl.offset == 60
    np.testing.assert_array_equal(cf.k[:, :60], cl.k[:, :60])
    np.testing.assert_array_equal(cf.v[:, :60], cl.v[:, :60])


def test_a_batch_of_sequences_is_the_loop_bit_for_bit(smollm2_c):
    """Continuous batching: rows of several sequences, each with its own cache and offset."""
    m = smollm2_c
    runs = {}
    for fuse in (True, False):
        m.fuse = fuse
        a, b, c = m.new_cache(64), m.new_cache(64), m.new_cache(64)
        m.forward(np.arange(300, 320), a)
        m.forward(np.arange(500, 507), b)
        step = m.forward_batch([([7], a), (list(range(40, 58)), c), ([9], b)])  # decode, prefill, decode
        step += m.forward_batch([([11], a), ([12], b), ([13], c)])  # decodes only: a sequence per thread
        runs[fuse] = step + [x.k[:, :x.offset].copy() for x in (a, b, c)]
    for got, want in zip(runs[True], runs[False]):
        np.testing.assert_array_equal(got, want)


def test_other_caches_take_the_loop(smollm2_c):
    from localinfer.arch.batch import Batch
    m = smollm2_c
    m.fuse = True
    f32 = m.new_cache(64, dtype=np.float32)  # not an f16 cache: the loop (and the numpy attention)
    assert not m.fused_layers().applies(Batch([([1, 2, 3], f32)]))
    assert np.isfinite(m.forward(np.array([1, 2, 3]), f32)).all()
    ring = RotatingKVCache(m.config.n_layer, 64, 8, m.config.n_head_kv, m.config.head_dim)
    assert not m.fused_layers().applies(Batch([([1], m.new_cache(8)), ([1], ring)]))


def test_a_full_context_is_refused_before_any_layer_runs(smollm2_c):
    m = smollm2_c
    m.fuse = True
    cache = m.new_cache(8)
    m.forward(np.arange(6), cache)
    before = cache.k.copy()
    with pytest.raises(ValueError):
        m.forward(np.arange(5), cache)
    assert cache.offset == 6
    np.testing.assert_array_equal(cache.k, before)


@pytest.mark.slow
def test_gemma3_fused_is_the_loop_bit_for_bit(gemma3_path):
    """gemma3: post-norms, GeGLU, per-layer rope bases, and sliding-window layers whose ring cache
    wraps (a prompt longer than the 512-token window), alone and batched."""
    with GGUFFile(gemma3_path) as f:
        m = build_model(f, "c")
    assert m.fused_layers() is not None
    runs = {}
    for fuse in (True, False):
        m.fuse = fuse
        a, b = m.new_cache(700), m.new_cache(700)
        out = [m.forward(np.arange(1000, 1600), a), m.forward(np.array([5]), a), m.forward(np.array([77]), a)]
        out.append(m.forward(np.arange(2000, 2030), b))
        out += m.forward_batch([([9], a), (list(range(50, 70)), b)])
        out += m.forward_batch([([4], a), ([6], b)])  # decodes only: a sequence per thread, ring and full
        out += [a.full.k[:, :a.offset].copy(), a.swa.k.copy(), b.swa.v.copy()]
        runs[fuse] = out
    for got, want in zip(runs[True], runs[False]):
        np.testing.assert_array_equal(got, want)
