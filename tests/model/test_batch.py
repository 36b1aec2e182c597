"""Several sequences in one forward pass give each the logits it gets alone."""
from __future__ import annotations

import numpy as np
import pytest

from localinfer.arch import build_model
from localinfer.files.gguf_file import GGUFFile

pytestmark = pytest.mark.slow  # whole-model batches on both backends


def _model(path, backend):
    with GGUFFile(path) as f:
        return build_model(f, backend)


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def model_path(request, smollm2_path, gemma3_path):
    return {"smollm2": smollm2_path, "gemma3": gemma3_path}[request.param]


def _alone(m, prefix, tokens, last_only):
    cache = m.new_cache(256)
    if len(prefix):
        m.forward(prefix, cache)
    return m.forward(tokens, cache, last_only=last_only)


def _f16_units(logits: np.ndarray) -> np.ndarray:
    """One f16 rounding step (2**-11 relative) at the scale of each row's logits."""
    return 2.0 ** -11 * np.abs(logits).max(axis=-1, keepdims=True)


@pytest.mark.parametrize("backend", ["reference", "c"])
@pytest.mark.parametrize("last_only", [False, True])
def test_batch_matches_each_sequence_alone(model_path, backend, last_only):
    m = _model(model_path, backend)
    # real text, so the C path's rounding noise does not flip near-tie argmaxes as random ids do
    import localinfer
    ids = localinfer.load(str(model_path)).tokenize(
        "The quick brown fox jumps over the lazy dog. Paris is the capital of France, and Berlin "
        "is the capital of Germany. One, two, three, four, five, six", add_special=False)
    # sequences at different offsets: a fresh prompt, a decode step, a continuation
    cases = [([], ids[:11]), (ids[:20], ids[20:21]), (ids[3:10], ids[10:15])]
    caches = []
    for prefix, _ in cases:
        cache = m.new_cache(256)
        if len(prefix):
            m.forward(prefix, cache)
        caches.append(cache)
    batched = m.forward_batch([(t, c) for (_, t), c in zip(cases, caches)], last_only=last_only)
    for (prefix, tokens), cache, got in zip(cases, caches, batched):
        want = _alone(m, prefix, tokens, last_only)
        assert got.shape == want.shape
        assert cache.offset == len(prefix) + len(tokens)
        if backend == "reference":
            # The reference computes in f32 but keeps K and V (and rounds Q) in f16, as llama.cpp
            # does. BLAS chooses its kernel, and with it the summation order, per CPU and per
            # matrix shape, so a batched and a lone f32 product differ in their last bits; where
            # that crosses an f16 rounding boundary a cached value moves by one f16 step (2**-11
            # relative), and the logits by a few such steps of their own scale (seen: up to 3.2 on
            # AVX2's kernels, 0.6 on AVX-512's, median 0.3). A batching mistake (a wrong position,
            # a row attending over another sequence's cache) moves them by whole logits.
            units = np.abs(got - want) / _f16_units(want)
            assert units.max() < 16 and np.median(units) < 1
        else:  # the C path quantizes activations per matmul and a GEMM rounds differently from a
            # GEMV: on random tokens gemma3's C logits are ~0.35 (median) from the reference alone
            assert np.median(np.abs(got - want)) < 1.0
            # a near tie may flip, but each row's top token stays among its top 5 alone
            top5 = np.argsort(want, axis=-1)[:, -5:]
            assert all(g in t for g, t in zip(got.argmax(-1), top5))


def test_a_full_cache_rejects_the_whole_batch(smollm2_path):
    m = _model(smollm2_path, "c")
    roomy, tight = m.new_cache(64), m.new_cache(8)
    with pytest.raises(ValueError, match="context is full"):
        m.forward_batch([([1, 2, 3], roomy), (list(range(1, 10)), tight)])
    assert roomy.offset == 0 and tight.offset == 0  # nothing was stored


def test_a_batch_cannot_share_a_cache(smollm2_path):
    m = _model(smollm2_path, "c")
    cache = m.new_cache(64)
    with pytest.raises(ValueError, match="share a KV cache"):
        m.forward_batch([([1, 2], cache), ([3], cache)])
