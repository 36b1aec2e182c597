"""The gemma3 numpy reference forward pass against llama.cpp's own logits and greedy
continuations for gemma-3-270m Q4_K_M (../shared/refdata/public/*-gemma-3-270m-*.json), and
the sliding-window KV cache of its local-attention layers.

llama.cpp quantizes activations to 8 bits before every quantized matmul; this reference keeps
them in float32. Gemma's residual stream has large outliers, so that alone moves logits by a few
tenths (llama.cpp with flash attention on differs from these same references by up to 0.53).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from refcheck import agreement, disagreement_margins

from localinfer.arch import build_model
from localinfer.arch.gemma3 import Gemma3Model
from localinfer.context import Context
from localinfer.files.gguf_file import GGUFFile
from localinfer.kv.cache import InterleavedKVCache, KVCache, RotatingKVCache

pytestmark = pytest.mark.slow  # whole-model runs of gemma3 against llama.cpp

GEMMA3_REF = "gemma-3-270m-q4_k_m"
N_VOCAB = 262144
NEAR_TIE = 0.5  # logit margin within llama.cpp's own spread between its attention kernels
FLAT = 0.05  # top-token probability below which greedy's pick is noise (a near-uniform step)
STEPS_THROUGH_CACHE = 4  # greedy: the last tokens of each continuation, decoded one at a time


@pytest.fixture(scope="module")
def model(gemma3_path) -> Gemma3Model:
    with GGUFFile(gemma3_path) as f:
        return build_model(f)


@pytest.fixture(scope="module")
def logit_cases(load_ref, model):
    """(case, our logits (n, vocab)) for every reference prompt, one batch each."""
    ref = load_ref("logits", GEMMA3_REF)
    return [(case, model.forward(np.asarray(case["tokens"]), model.new_cache(len(case["tokens"]))))
            for case in ref["cases"]]


def test_config_from_metadata(model):
    c = model.config
    assert (c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.head_dim) == (18, 640, 4, 1, 256)
    # every 6th layer is global (llama.cpp's swa pattern 6 for gemma3), the rest see 512 tokens
    assert [i for i, swa in enumerate(c.is_swa) if not swa] == [5, 11, 17]
    assert c.sliding_window == 512
    assert (c.rope_base, c.rope_base_swa, c.rope_scale) == (1e6, 1e4, 1.0)
    assert c.attn_scale == 1 / 16 and c.final_logit_softcap is None
    assert model.weights.output.shape == model.weights.token_embd.shape == (N_VOCAB, 640)  # tied: no output.weight


def test_logits_match_llama_cpp(logit_cases):
    a = agreement(logit_cases, N_VOCAB)
    assert max(a.mean_diff) < 0.6
    assert max(a.std_diff) < 0.1
    print(a.summary())
    assert a.total >= 180
    assert a.top1 >= 0.95
    assert float(np.median(a.deltas)) < 0.25
    assert float(np.max(a.deltas)) < 1.5


def test_disagreements_are_near_ties(logit_cases):
    """Where our argmax differs, llama.cpp's own top-2 margin was small."""
    for case_id, pos, margin in disagreement_margins(logit_cases):
        assert margin < NEAR_TIE, (case_id, pos, margin)


def test_last_only_equals_last_row(model, logit_cases):
    case, logits = logit_cases[0]
    last = model.forward(np.asarray(case["tokens"]), model.new_cache(16), last_only=True)
    assert last.shape == (1, N_VOCAB)
    np.testing.assert_allclose(last[0], logits[-1], atol=1e-3, rtol=0)


def test_greedy_matches_llama_cpp(model, load_ref):
    """llama.cpp's greedy continuations fed back (teacher forcing, so one departure does not end the
    comparison): at every step our argmax is its token, or the step was a near tie, or a near-uniform
    step where no choice means anything. The prompt and most of the continuation go through in one
    batch -- the numpy model at full gemma3 size costs ~0.4 s a step one token at a time, and
    test_long_prompt_incremental_equals_batch shows the two give the same logits -- and the last
    STEPS_THROUGH_CACHE tokens one at a time through the cache, as decoding does."""
    ref = load_ref("greedy", GEMMA3_REF)
    agree, total = 0, 0
    for case in ref["cases"]:
        prompt, want = case["prompt_tokens"], case["generated_ids"]
        cache = model.new_cache(len(prompt) + len(want))
        batched = len(want) - STEPS_THROUGH_CACHE
        rows = list(model.forward(np.asarray(prompt + want[:batched - 1]), cache)[len(prompt) - 1:])
        for token in want[batched - 1:-1]:
            rows.append(model.forward(np.asarray([token]), cache, last_only=True)[-1])
        assert len(rows) == len(want)
        departures = []
        for i, (token, logits) in enumerate(zip(want, rows)):
            ours = int(np.argmax(logits))
            total += 1
            if ours == token:
                agree += 1
            else:
                margin = float(logits[ours] - logits[token])
                p_top = 1.0 / float(np.sum(np.exp(logits.astype(np.float64) - logits[ours])))
                departures.append(f"{i} (margin {margin:.3f}, p_top {p_top:.3f})")
                assert margin < NEAR_TIE or p_top < FLAT, (case["id"], i, margin, p_top)
        print(f"{case['id']}: {len(want)} steps, departs at {', '.join(departures) or 'none'}")
    print(f"greedy steps agreeing with llama.cpp: {agree}/{total}")
    assert agree / total >= 0.95


# -- the sliding window ------------------------------------------------------------------------

def _synthetic_tokens(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate([[2], rng.integers(1000, 200000, n - 1)])  # <bos> + random ids


def test_long_prompt_incremental_equals_batch(model):
    """608 tokens, past the 512-token window: one batch (every key held, the window applied by
    the mask) equals prefill 600 + 8 single decodes through the rotating cache, whose ring of
    576 slots has wrapped by then."""
    tokens = _synthetic_tokens(608)
    batch = model.forward(tokens, model.new_cache(1024), last_only=True)[-1]
    cache = model.new_cache(1024)
    model.forward(tokens[:600], cache, last_only=True)
    for t in tokens[600:]:
        incremental = model.forward(np.asarray([t]), cache, last_only=True)[-1]
    assert cache.offset == 608 and cache.swa.held_start == 608 - cache.swa.n_slots
    np.testing.assert_allclose(incremental, batch, atol=0.15, rtol=0)
    assert np.argmax(incremental) == np.argmax(batch)
    # the 15 local layers hold window + trim margin positions, whatever n_ctx is
    assert cache.swa.k.shape == (15, cache.swa.n_slots, 1, 256)
    assert cache.swa.n_slots < 600
    assert model.new_cache(32768).swa.nbytes == cache.swa.nbytes


@pytest.fixture(scope="module")
def small_window_model(model) -> Gemma3Model:
    """The same weights with an 8-token window, so that the ring wraps in a few dozen tokens."""
    layers = [dataclasses.replace(layer, window=8 if layer.window else None) for layer in model.weights.layers]
    return Gemma3Model(dataclasses.replace(model.config, sliding_window=8),
                       dataclasses.replace(model.weights, layers=layers))


def _small_cache(m: Gemma3Model, trim_margin: int = 2, n_ctx: int = 64) -> InterleavedKVCache:
    """trim_margin 2: a ring of 10 slots. A margin past n_ctx: a ring that never wraps."""
    c = m.config
    return InterleavedKVCache(list(c.is_swa), n_ctx, c.n_head_kv, c.head_dim, 8, trim_margin=trim_margin)


def _run_chunks(m, tokens, cache, sizes):
    out, start = [], 0
    for size in sizes:
        out.append(m.forward(tokens[start:start + size], cache))
        start += size
    return np.concatenate(out)


def test_rotating_cache_chunks_equal_batch(small_window_model):
    """The wrapping ring gives bit for bit what a cache holding everything gives, chunks longer
    than the ring and single tokens alike; both equal one batch up to float summation order."""
    m = small_window_model
    tokens = _synthetic_tokens(40, seed=1)
    sizes = (13, 1, 5, 9, 1, 11)
    ring = _small_cache(m)
    chunked = _run_chunks(m, tokens, ring, sizes)
    assert ring.swa.n_slots == 10 and ring.swa.held_start == 30
    np.testing.assert_array_equal(chunked, _run_chunks(m, tokens, _small_cache(m, trim_margin=1000), sizes))
    batch = m.forward(tokens, _small_cache(m))
    np.testing.assert_allclose(chunked, batch, atol=0.15, rtol=0)
    assert (chunked.argmax(axis=1) == batch.argmax(axis=1)).all()


def test_rotating_cache_trims_only_what_it_still_holds(small_window_model):
    m = small_window_model
    tokens = _synthetic_tokens(40, seed=2)
    cache = _small_cache(m)
    m.forward(tokens, cache)
    # the ring of 10 slots holds positions 30..39; the token at position p needs p-7..p-1
    assert cache.can_trim_to(40) and cache.can_trim_to(37) and cache.can_trim_to(0)
    assert not cache.can_trim_to(36) and not cache.can_trim_to(41)
    with pytest.raises(ValueError, match="sliding window"):
        cache.trim(36)
    assert cache.offset == 40  # a refused trim changes nothing
    cache.trim(37)
    again = m.forward(tokens[37:], cache)
    unwrapped = _small_cache(m, trim_margin=1000)
    m.forward(tokens, unwrapped)
    unwrapped.trim(37)
    np.testing.assert_array_equal(again, m.forward(tokens[37:], unwrapped))


def test_context_recomputes_when_the_prefix_left_the_window(small_window_model):
    m = small_window_model
    tokens = [int(t) for t in _synthetic_tokens(40, seed=3)]
    ctx = Context(m, 64)
    ctx.cache = _small_cache(m)  # a 10-slot ring (the model's own keeps a 64-token margin)
    ctx.evaluate(tokens)
    # same prompt, new last token: the prefix is still held, one token is computed
    other = tokens[:39] + [4321]
    logits = ctx.evaluate(other)
    assert ctx.last_n_computed == 1
    np.testing.assert_allclose(logits, m.forward(np.asarray(other), _small_cache(m), last_only=True)[-1],
                               atol=0.15, rtol=0)
    # departing at 30: the window before it was overwritten, so everything is recomputed
    other = tokens[:30] + [4321, 4322]
    logits = ctx.evaluate(other)
    assert ctx.last_n_computed == 32 and ctx.tokens == other
    np.testing.assert_allclose(logits, m.forward(np.asarray(other), _small_cache(m))[-1], atol=1e-4, rtol=0)


def test_rotating_cache_returns_the_window_in_position_order():
    """Against a plain KVCache holding everything: same keys for the positions a query sees."""
    rng = np.random.default_rng(4)
    window = 5
    ring = RotatingKVCache(1, 100, 2, 3, window, np.float32, trim_margin=1)
    full = KVCache(1, 100, 2, 3, np.float32)
    for size in (3, 1, 8, 1, 1, 6, 2):
        k = rng.standard_normal((size, 2, 3)).astype(np.float32)
        v = rng.standard_normal((size, 2, 3)).astype(np.float32)
        keys, values = ring.update_and_fetch(0, k, v)
        all_keys, all_values = full.update_and_fetch(0, k, v)
        start = max(0, ring.offset - window + 1)
        np.testing.assert_array_equal(keys, all_keys[start:])
        np.testing.assert_array_equal(values, all_values[start:])
        ring.advance(size)
        full.advance(size)
    assert ring.k.shape == (1, window + 1, 2, 3)
