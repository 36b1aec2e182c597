"""A prompt longer than context.N_UBATCH tokens is computed in several forward passes: the cache
holds the same tokens and the logits are those of one pass -- but for float32 and the f16 cache's roundings on the numpy
reference; the C backend quantizes a pass's activations together, so its logits of a token move
a little with the tokens computed beside it (a token computed alone or within 61 differs by up to
~1.4 in smollm2's logits), and there the argmax is held to."""
from __future__ import annotations

import numpy as np
import pytest

import localinfer
from localinfer import context


@pytest.fixture(scope="module")
def reference_model(smollm2_path):
    with localinfer.load(str(smollm2_path), backend="reference") as model:
        yield model


@pytest.mark.parametrize("backend", ["reference", "c"])
@pytest.mark.parametrize("last_only", [True, False])
def test_a_prompt_in_passes_is_the_prompt_in_one_pass(request, smollm2_model, monkeypatch, backend, last_only):
    model = request.getfixturevalue("reference_model") if backend == "reference" else smollm2_model
    ids = model.tokenize("The quick brown fox jumps over the lazy dog. " * 6)
    assert len(ids) > 40
    one = model.new_context(128)
    whole = one.append(ids, last_only=last_only)
    monkeypatch.setattr(context, "N_UBATCH", 16)   # four passes of 15-16 tokens
    passes = model.new_context(128)
    split = passes.append(ids, last_only=last_only)
    assert split.shape == whole.shape == ((1 if last_only else len(ids)), model.n_vocab)
    assert passes.tokens == one.tokens == list(ids)
    nxt = int(whole[-1].argmax())
    assert split[-1].argmax() == nxt
    then_split, then_whole = passes.append([nxt]), one.append([nxt])   # the caches continue alike
    if backend == "reference":
        np.testing.assert_allclose(split, whole, atol=0.1, rtol=0)
        np.testing.assert_allclose(then_split, then_whole, atol=0.1, rtol=0)
    else:
        assert then_split.argmax() == then_whole.argmax()
