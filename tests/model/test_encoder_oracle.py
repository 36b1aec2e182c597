"""The encoders (bert, nomic-bert, jina-bert-v2, modern-bert, and BERT re-rankers / classifiers) against torch:
a tiny random model of each family (tests/encoder_oracle.py) is saved as a HF folder, converted
by our converter and nothing else, and run here on token ids.

Tolerances. Our GELU is ggml's (the tanh form read from an f16 table), transformers' and jina's the
exact erf form: they differ by < 1e-3 per activation, which moves the O(1) hidden states of these
order-1 random weights by ~1e-3 (seen: 1.1e-3 of a max 4.0). A cosine of 0.9999 allows a relative
error of ~1.4e-2 in a vector, so f32 and f16 (f16 weights: relative rounding 2^-11 per weight,
~1e-3 after two layers) pass with room; q8_0 (weights and activations rounded to 8 bits: ~1e-2
relative) is held to 0.999. A wrong position scheme or a missing bias moves the cosine far below
(test_a_wrong_layout_would_fail).

Needs the `oracle` extra (torch, transformers); skipped without it.
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from encoder_oracle import (CLASSIFY_LABELS, FAMILIES, GGUF_ARCH, N_CTX, N_VOCAB, make_encoder, pair,  # noqa: E402
                            texts, torch_hidden, torch_scores)
from localinfer.arch import build_model  # noqa: E402
from localinfer.arch.encoder import EncoderBatch, EncoderParams  # noqa: E402
from localinfer.encoder_tasks import classify_tokens, embed_tokens, score_tokens  # noqa: E402
from localinfer.files.gguf_file import GGUFFile  # noqa: E402
from localinfer.quant.convert_hf import convert_hf  # noqa: E402

EMBEDDERS = ("bert", "nomic", "jina", "modern")
COS = {"f32": 0.9999, "f16": 0.9999, "q8_0": 0.999}


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """family -> (family, torch model, HF folder, converted f32 GGUF path), each made once."""
    made = {}

    def get(family: str):
        if family not in made:
            folder = tmp_path_factory.mktemp(family)
            model = make_encoder(family, folder, seed=len(family))
            made[family] = family, model, folder, convert_hf(folder, folder / "model-f32.gguf", "f32")
        return made[family]
    return get


@pytest.fixture(params=FAMILIES)
def tiny(request, build):
    return build(request.param)


@pytest.fixture(params=EMBEDDERS)
def embedder(request, build):
    return build(request.param)


def _load(path, backend="reference"):
    with GGUFFile(path) as f:
        return build_model(f, backend)


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.atleast_2d(a).astype(np.float64), np.atleast_2d(b).astype(np.float64)
    return np.sum(a * b, -1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def _want(family, model, ids, pooling):
    h = torch_hidden(family, model, ids)
    return {"mean": h.mean(0), "cls": h[0], "last": h[-1]}[pooling]


def test_hidden_states_match_torch(tiny):
    """Per token (pooling none), both backends, several texts of different lengths in one padded pass."""
    family, model, _, path = tiny
    ids = texts(1, 5)
    for backend in ("reference", "c"):
        m = _load(path, backend)
        assert type(m).__name__.lower().startswith(GGUF_ARCH[family].replace("-", "").replace("v2", ""))
        got = embed_tokens(m, ids, "none", normalize=False)
        for t, g in zip(ids, got):
            want = torch_hidden(family, model, t)
            assert g.shape == want.shape
            assert _cos(g, want).min() >= 0.9999, (backend, _cos(g, want).min())
            assert np.abs(g - want).max() < 5e-3 * np.abs(want).max()


@pytest.mark.parametrize("outtype", ["f32", "f16", "q8_0"])
def test_pooled_embeddings_match_torch(embedder, outtype):
    family, model, folder, _ = embedder
    path = convert_hf(folder, folder / f"model-{outtype}.gguf", outtype)
    ids = texts(2, 6)
    for backend in ("reference", "c"):
        m = _load(path, backend)
        for pooling in ("mean", "cls", "last"):
            got = embed_tokens(m, ids, pooling)  # normalized
            want = np.stack([_want(family, model, t, pooling) for t in ids])
            np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-6)
            cos = _cos(got, want)
            assert cos.min() >= COS[outtype], (backend, pooling, cos.min())


def test_a_padded_batch_is_each_text_alone(tiny):
    """Padding changes nothing a text computes: rows past a text are masked out of its attention
    and pooling (the sums differ only in order: float32 rounding, far below 1e-5 of the values)."""
    family, _, _, path = tiny
    m = _load(path, "c")
    ids = texts(3, 7, lo=3, hi=30)
    together = embed_tokens(m, ids, "mean", normalize=False)
    alone = np.stack([embed_tokens(m, [t], "mean", normalize=False)[0] for t in ids])
    np.testing.assert_allclose(together, alone, rtol=0, atol=1e-5 * np.abs(alone).max())
    # and in passes of at most 32 padded tokens (several passes, sorted by length)
    np.testing.assert_allclose(embed_tokens(m, ids, "mean", normalize=False, n_batch=32), alone,
                               rtol=0, atol=1e-5 * np.abs(alone).max())


def test_a_wrong_layout_would_fail(tiny):
    """The comparisons above can fail: the architecture's position scheme taken away moves the
    token embeddings far past their tolerance."""
    family, model, _, path = tiny
    m = _load(path)
    ids = texts(4, 3, lo=12, hi=20)
    if family in ("nomic", "jina", "modern"):
        m.layer_params = lambda: EncoderParams(scale=1 / np.sqrt(m.config.head_dim))  # no rope / no ALiBi
    else:
        m.weights.position_embd = None
    got = embed_tokens(m, ids, "none")
    cos = min(_cos(g, torch_hidden(family, model, t)).min() for g, t in zip(got, ids))
    assert cos < 0.999, cos


def _rerank_inputs():
    """A query and six documents, each one word repeated 24..39 times: the [CLS] row then depends on
    the document enough that the scores spread (random weights otherwise leave them within ~2%)."""
    rng = np.random.default_rng(0)
    query = texts(5, 1, lo=8, hi=8)[0][1:-1]
    words, counts = rng.choice(np.arange(4, N_VOCAB), 6, replace=False), rng.integers(24, 40, 6)
    return [pair(query, [int(w)] * int(n)) for w, n in zip(words, counts)]


@pytest.mark.parametrize("outtype", ["f32", "f16", "q8_0"])
def test_rerank_scores_match_bert_for_sequence_classification(build, outtype):
    """Scores within tolerance of the logits, in the same order. Tolerances: f32 2e-3 (GELU's form,
    see above), f16 the same, q8_0 2e-2 of the scores' scale (8-bit weights and activations: ~1%).
    In q8_0 two documents whose logits are closer than twice that may swap; every other pair keeps
    its order (here the scores spread over ~0.2 of ~2, with 0.02 between the closest two)."""
    _, model, folder, _ = build("bert_rerank")
    path = convert_hf(folder, folder / f"model-{outtype}.gguf", outtype)
    pairs = _rerank_inputs()
    want = np.array([torch_scores(model, ids, types)[0] for ids, types in pairs])
    tol = (2e-2 if outtype == "q8_0" else 2e-3) * np.abs(want).max()
    for backend in ("reference", "c"):
        m = _load(path, backend)
        assert m.n_cls_out == 1 and m.config.pooling == "rank"
        got = score_tokens(m, [p[0] for p in pairs], [p[1] for p in pairs])[:, 0]
        assert np.abs(got - want).max() < tol, (backend, np.abs(got - want).max())
        if outtype != "q8_0":
            assert np.diff(np.sort(want)).min() > 2 * tol  # no near-tie: the whole order is the scores'
            assert np.argsort(-got).tolist() == np.argsort(-want).tolist()
        apart = np.abs(want[:, None] - want[None, :]) > 2 * tol
        assert apart.sum() >= 10  # most of the 15 pairs are far apart: the check below has teeth
        same_order = np.sign(got[:, None] - got[None, :]) == np.sign(want[:, None] - want[None, :])
        assert same_order[apart].all()


def test_token_types_reach_the_scores(build):
    """The second segment's token type (1) is part of what transformers computes; all zeros differs."""
    _, model, _, path = build("bert_rerank")
    ids, types = _rerank_inputs()[0]
    m = _load(path)
    typed, untyped = score_tokens(m, [ids], [types])[0, 0], score_tokens(m, [ids])[0, 0]
    assert abs(typed - torch_scores(model, ids, types)[0]) < 1e-3 * max(1.0, abs(typed))
    assert abs(typed - untyped) > 1e-2


def test_classify_matches_transformers_labels_and_probabilities(build):
    _, model, _, path = build("bert_classify")
    m = _load(path, "c")
    assert m.config.labels == tuple(CLASSIFY_LABELS.values())
    ids = texts(9, 6)
    for t, result in zip(ids, classify_tokens(m, ids)):
        logits = torch_scores(model, t, [0] * len(t))
        p = np.exp(logits - logits.max())
        p /= p.sum()
        np.testing.assert_allclose(result.probabilities, p, atol=2e-3)
        assert result.label == CLASSIFY_LABELS[int(np.argmax(logits))]
        assert result.labels == tuple(CLASSIFY_LABELS.values())


def test_classify_with_one_output_is_its_sigmoid(build):
    """A single-output head (a re-ranker, a binary label): the probability is the sigmoid of the logit."""
    _, model, _, path = build("bert_rerank")
    ids = texts(11, 3)
    for t, result in zip(ids, classify_tokens(_load(path), ids)):
        logit = torch_scores(model, t, [0] * len(t))[0]
        assert result.labels == ("LABEL_0",) and result.label == "LABEL_0"
        assert abs(result.score - 1 / (1 + np.exp(-logit))) < 1e-3


def test_a_long_text_runs_whole(embedder):
    """A text as long as the model's context (N_CTX positions) in one pass, alone."""
    family, model, _, path = embedder
    ids = texts(10, 1, lo=N_CTX, hi=N_CTX)
    got = embed_tokens(_load(path, "c"), ids, "mean", n_batch=16)
    assert _cos(got[0], _want(family, model, ids[0], "mean"))[0] >= 0.9999


def test_encoder_batch_masks_nothing_inside_a_text():
    b = EncoderBatch.pad([[5, 6, 7], [8]], [[0, 0, 1], [0]])
    assert b.tokens.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert b.types.tolist() == [[0, 0, 1], [0, 0, 0]]
    assert b.positions.tolist() == [0, 1, 2, 0, 1, 2]
