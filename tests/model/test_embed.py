"""Model.embed against llama.cpp's llama-embedding, and its own invariants (batching, chunking, norms)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import localinfer
from localinfer.embedding import embed_tokens
from localinfer.kv.cache import ContextFullError

pytestmark = pytest.mark.slow  # whole-model forward passes of both models

REFERENCE = json.loads((Path(__file__).parents[1] / "data" / "llamacpp_embeddings.json").read_text())
POOLINGS = ("mean", "last", "cls")
# Texts of at least 16 tokens each: alone, each still runs the GEMM path (csrc/core/matmul.c
# LI_GEMM_MIN_M, LI_GEMM_MIN_M_X16 for a repacked matrix with a 16-row kernel), so its rows see the
# same arithmetic as in a batch with others.
TEXTS = ["The quick brown fox jumps over the lazy dog, and then it runs back into the dark green forest.",
         "Embeddings map a text to one vector per sentence, so that texts of like meaning lie close together.",
         "Paris is the capital of France, and Berlin is the capital of Germany; " * 4]


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def model(request):
    path = request.getfixturevalue(f"{request.param}_path")
    with localinfer.load(str(path), n_ctx=512) as m:
        m.ref = REFERENCE["models"][request.param]
        yield m


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def _floor(ref: dict) -> float:
    """The cosine two computations of one embedding keep. Both sides round every activation to
    8 bits before a matmul, so a last-bit change anywhere (another summation order, another batch
    shape) flips whole int8 steps: llama.cpp itself moves that much between a text run alone and
    in a batch (alone_vs_batched_cosine, 0.9994 at worst on SmolLM2, 0.9978 on gemma3, whose
    residual stream has large outliers). 0.999 where llama.cpp holds that with itself; otherwise
    twice its own angle, the most two computations that each stray as far can differ by."""
    spread = min(min(v) for v in ref["alone_vs_batched_cosine"].values())
    return 0.999 if spread >= 0.999 else float(np.cos(2 * np.arccos(spread)))


@pytest.mark.parametrize("pooling", POOLINGS)
def test_matches_llama_cpp(model, pooling):
    ref = model.ref
    assert [model.tokenize(t) for t in ref["texts"]] == ref["tokens"]  # the same input, or nothing to compare
    ours = model.embed(ref["texts"], pooling=pooling)
    theirs = np.asarray(ref["embeddings"][pooling], np.float32)
    assert ours.shape == theirs.shape
    cos = _cosines(ours, theirs)
    assert cos.min() >= _floor(ref), cos
    # the poolings differ from each other (texts of several tokens), so each one is checked for itself
    several = [i for i, t in enumerate(ref["tokens"]) if len(t) > 1]
    other = np.asarray(ref["embeddings"][POOLINGS[(POOLINGS.index(pooling) + 1) % 3]], np.float32)
    assert _cosines(ours[several], other[several]).max() < 0.99


def test_batched_equals_one_at_a_time(model):
    together = model.embed(TEXTS, pooling="mean")
    alone = np.stack([model.embed(t, pooling="mean")[0] for t in TEXTS])
    # each text's rows get the same per-row arithmetic whichever rows share its pass; attention is
    # per text. 1e-5 on unit vectors leaves room only for a summation order that changes with shape.
    np.testing.assert_allclose(together, alone, atol=1e-5, rtol=0)


def test_a_text_split_over_passes_equals_one_pass(model):
    """n_batch 16 splits the long text over four passes, its cache carrying the earlier chunks.
    The attention then sums in other blocks: as close as _floor says, not bit for bit."""
    tokens = [model.tokenize(t) for t in TEXTS]
    assert max(map(len, tokens)) > 3 * 16
    for pooling in POOLINGS:
        whole = embed_tokens(model.serialized, tokens, pooling)
        split = embed_tokens(model.serialized, tokens, pooling, n_batch=16)
        cos = _cosines(split, whole)
        assert cos.min() >= _floor(model.ref), (pooling, cos)
    # a chunk that did not see the earlier ones (a fresh cache) would be far off: the floor tells
    fresh = embed_tokens(model.serialized, [tokens[2][-16:]], "last")
    assert _cosines(fresh, embed_tokens(model.serialized, tokens[2:], "last"))[0] < _floor(model.ref)


def test_normalize(model):
    unit = model.embed(TEXTS, pooling="last")
    raw = model.embed(TEXTS, pooling="last", normalize=False)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, atol=1e-6)
    norms = np.linalg.norm(raw, axis=1)
    assert np.all(np.abs(norms - 1.0) > 0.1)  # the raw hidden states are not unit vectors already
    np.testing.assert_allclose(raw / norms[:, None], unit, atol=1e-6)


def test_token_ids_and_text_give_the_same_vector(model):
    ids = model.tokenize(TEXTS[0])
    np.testing.assert_array_equal(model.embed([ids]), model.embed(TEXTS[0]))
    assert model.embed([]).shape == (0, model.runtime.config.n_embd)


def test_bad_input_is_a_clear_error(model):
    with pytest.raises(ValueError, match="pooling must be one of"):
        model.embed("hi", pooling="max")
    with pytest.raises(ValueError, match="unknown token id"):
        model.embed([[model.n_vocab]])
    with pytest.raises(ValueError, match="is empty"):
        model.embed([[]])
    with pytest.raises(TypeError, match="string or a list of token ids"):
        model.embed([3])
    with pytest.raises(ContextFullError, match="input 1 is .* tokens long"):
        model.embed(["fine", "word " * 600])
