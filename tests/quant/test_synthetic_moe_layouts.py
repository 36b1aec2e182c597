"""The expert layouts beside qwen3moe's on the fused C layers (arch/fused.py, csrc/core/moe.c,
csrc/core/decoder_layers.c) against the Python loop over the same kernels, on synthetic files with
K-quant experts (quant/synthetic.py's tiny-qwen2moe: a shared expert with its sigmoid gate; tiny-olmoe:
Q/K norms over the whole projection). Every forward with fusion on must take the C path.
The tolerance is test_synthetic_moe's (one step of a Q8_K activation)."""
from __future__ import annotations

import numpy as np
import pytest

from localinfer.backend import kernels
from localinfer.arch import build_model
from localinfer.files.gguf_file import GGUFFile
from localinfer.quant import synthetic

pytestmark = pytest.mark.skipif(not kernels.available(), reason="C kernels not built")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCALINFER_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield


def _model(shape: str, smollm2_path):
    path = synthetic.synthetic_model(shape, "Q4_K_M", tokenizer_path=smollm2_path)
    with GGUFFile(path) as f:
        return build_model(f, "c")


def _close(got, want):
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-2 * float(np.abs(want).max()))


@pytest.mark.parametrize("shape", ["tiny-qwen2moe", "tiny-olmoe"])
def test_fused_layers_match_the_loop(cache_dir, smollm2_path, shape):
    m = _model(shape, smollm2_path)
    fused = m.fused_layers()
    assert fused is not None
    taken = []
    run = fused.run
    fused.run = lambda *a: taken.append(1) or run(*a)
    runs = {}
    for fuse in (True, False):
        m.fuse = fuse
        a, b = m.new_cache(64), m.new_cache(64)
        logits = [m.forward(np.arange(100, 117), a)] + [m.forward(np.array([t]), a) for t in (5, 77, 900)]
        logits += m.forward_batch([(list(range(300, 306)), b), ([9], a)])
        runs[fuse] = logits + [a.k[:, :a.offset].copy()]
    assert len(taken) == 5  # the prefill, three decode steps, the batch: none fell back to the loop
    for got, want in zip(runs[True], runs[False]):
        _close(got, want)


def test_the_shared_expert_and_its_gate_count(cache_dir, smollm2_path):
    """The C layers read the shared expert and its gate from the model: with the gate shut (a gate
    vector that gives sigmoid ~0) or wide open (~1) instead of ~1/2 (random weights), the logits
    move by ~20% of their scale, far past the tolerance above (1%)."""
    ids = np.arange(100, 110)
    m = _model("tiny-qwen2moe", smollm2_path)
    want = m.forward(ids, m.new_cache(64))
    for gate in (-1e4, 1e4):
        m = _model("tiny-qwen2moe", smollm2_path)
        for layer in m.weights.layers:
            layer.mlp.shared_gate = np.full_like(layer.mlp.shared_gate, gate)
        assert m.fused_layers() is not None
        got = m.forward(ids, m.new_cache(64))
        assert np.abs(got - want).max() > 0.05 * np.abs(want).max()
