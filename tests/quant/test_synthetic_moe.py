"""Synthetic mixture-of-experts files (quant/synthetic.py) and the fused C path of their
expert layers (csrc/core/moe.c) against the Python loop.

The real shape is checked from its tensor list against Qwen3-30B-A3B's public numbers; only the
tiny expert shape is written."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from localinfer.backend import kernels
from localinfer.arch import build_model
from localinfer.files.gguf_file import GGUFFile
from localinfer.quant import synthetic
from localinfer.formats.registry import dequantize
from localinfer.quant.synthetic import SHAPES, WEIGHT_SCALE, n_params, planned_types, tensor_specs
from localinfer.formats.registry import row_nbytes


def test_qwen3_30b_a3b_has_the_real_counts():
    """30,532,122,624 parameters (the GGUF general.parameter_count of the public Qwen3-30B-A3B files)
    and, in Q4_K_M, 18,550,716,416 bytes of tensors: Qwen3-30B-A3B-Q4_K_M.gguf is 18,556,686,912
    bytes, the rest being its header (a 151k-token tokenizer, ~6 MB)."""
    s = SHAPES["qwen3moe-30b-a3b"]
    assert n_params(s) == 30_532_122_624
    plan = planned_types(s, "Q4_K_M")
    nbytes = sum(row_nbytes(plan[t.name], t.shape[-1]) * (t.n_elements // t.shape[-1]) for t in tensor_specs(s))
    assert nbytes == 18_550_716_416
    specs = {t.name: t for t in tensor_specs(s)}
    assert specs["blk.47.ffn_gate_exps.weight"].shape == (128, 768, 2048)
    assert specs["blk.0.ffn_down_exps.weight"].shape == (128, 2048, 768)
    assert specs["blk.0.attn_q.weight"].shape == (4096, 2048)  # 32 heads x head_dim 128, not 2048 / 32
    assert specs["blk.0.ffn_gate_inp.weight"].ggml_type == T.F32  # the router stays F32, as llama.cpp keeps it
    assert plan["blk.0.ffn_down_exps.weight"] == T.Q6_K and plan["blk.6.ffn_down_exps.weight"] == T.Q4_K


@pytest.fixture(scope="module")
def tiny_moe(tmp_path_factory, smollm2_path):
    """tiny-qwen3moe in Q4_K_M, through the cache (written directly, no F16 file)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCALINFER_CACHE", str(tmp_path_factory.mktemp("cache")))
        path = synthetic.synthetic_model("tiny-qwen3moe", "Q4_K_M", tokenizer_path=smollm2_path)
        assert not synthetic.cache_path("tiny-qwen3moe", "F16").exists()
        yield path


def test_tensors_have_the_mix_types_and_gaussian_blocks(tiny_moe):
    s = SHAPES["tiny-qwen3moe"]
    plan = planned_types(s, "Q4_K_M")
    with GGUFFile(tiny_moe) as f:
        assert f.metadata["qwen3moe.expert_count"] == 8 and f.metadata["qwen3moe.attention.key_length"] == 64
        assert f.metadata["general.file_type"] == 15  # LLAMA_FTYPE_MOSTLY_Q4_K_M
        assert {n: t.ggml_type for n, t in f.tensors.items()} == plan
        assert {plan[n] for n in plan if "_exps" in n} >= {T.Q4_K, T.Q6_K}
        for name in ("blk.1.ffn_up_exps.weight", "blk.0.ffn_down_exps.weight", "output.weight"):
            t = f.tensors[name]
            x = dequantize(f.tensor_data(name), t.ggml_type, t.shape)
            assert np.isfinite(x).all() and 0.9 < x.std() / WEIGHT_SCALE < 1.1  # quantized normal * 0.02
        up = f.tensor_data("blk.1.ffn_up_exps.weight")
        assert not np.array_equal(up[0], up[1])  # experts differ


@pytest.mark.skipif(not kernels.available(), reason="C kernels not built")
def test_fused_expert_layers_match_the_loop(tiny_moe):
    """K-quant experts (Q4_K, Q6_K: Q8_K activations) through core/moe.c's one-token and many-token
    paths. The tolerance is test_hf_oracle.assert_moe_close's for quantized activations."""
    with GGUFFile(tiny_moe) as f:
        m = build_model(f, "c")
    assert m.fused_layers() is not None
    runs = {}
    for fuse in (True, False):
        m.fuse = fuse
        a, b = m.new_cache(64), m.new_cache(64)
        logits = [m.forward(np.arange(100, 117), a)] + [m.forward(np.array([t]), a) for t in (5, 77, 900)]
        logits += m.forward_batch([(list(range(300, 306)), b), ([9], a)])
        runs[fuse] = logits + [a.k[:, :a.offset].copy()]
    for got, want in zip(runs[True], runs[False]):
        got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-2 * float(np.abs(want).max()))


@pytest.mark.skipif(not kernels.available(), reason="C kernels not built")
def test_fused_routing_sees_every_damage(tiny_moe):
    """The fused path reads n_used and the renormalisation from the model: one expert instead of
    two, or unnormalised weights, moves the logits far past the tolerance above."""
    ids = np.arange(100, 110)
    with GGUFFile(tiny_moe) as f:
        want = (m0 := build_model(f, "c")).forward(ids, m0.new_cache(64))
    for damage in ("n_used", "normalize"):
        with GGUFFile(tiny_moe) as f:
            m = build_model(f, "c")
        for layer in m.weights.layers:
            setattr(layer.mlp, damage, 1 if damage == "n_used" else False)
        assert m.fused_layers() is not None
        got = m.forward(ids, m.new_cache(64))
        assert np.abs(got - want).max() > 0.1 * np.abs(want).max()


@pytest.mark.skipif(not kernels.available(), reason="C kernels not built")
def _sigmoid_gating(moe):
    from localinfer.arch.moe import SIGMOID
    moe.gating = SIGMOID


def _softmax_after_top_k(moe):
    """gpt-oss's gating, not renormalised (renormalised, it equals softmax-then-top-k)."""
    from localinfer.arch.moe import SOFTMAX_AFTER_TOP_K
    moe.gating, moe.normalize = SOFTMAX_AFTER_TOP_K, False


def _not_renormalised(moe):
    moe.normalize = False


def _unchanged(moe):
    pass


def _router_bias(moe):
    moe.gate_inp.bias = np.linspace(-3, 3, len(moe.gate), dtype=np.float32)  # not all equal: routing moves


def _expert_bias(moe):
    rng = np.random.default_rng(2)
    for mats in (moe.gate, moe.up, moe.down):
        for lin in mats:
            lin.bias = rng.standard_normal(lin.shape[0]).astype(np.float32) * 0.5


@pytest.mark.skipif(not kernels.available(), reason="C kernels not built")
@pytest.mark.parametrize("change, baseline", [(_softmax_after_top_k, _not_renormalised), (_router_bias, _unchanged),
                                              (_expert_bias, _unchanged)])
def test_gpt_oss_routing_and_biases_run_in_c_as_in_the_loop(tiny_moe, change, baseline):
    """What gpt-oss adds to a block (softmax over the top-k logits, a router bias, expert biases) is
    computed by core/moe.c, in its one-token and many-token paths: the fused model still takes the C
    layers, matches the loop with the change, and moves far from the model without it."""
    ids = np.arange(100, 110)
    with GGUFFile(tiny_moe) as f:
        m = build_model(f, "c")
    for layer in m.weights.layers:
        baseline(layer.mlp)
    before = m.forward(ids, m.new_cache(64))
    for layer in m.weights.layers:
        change(layer.mlp)
    m._fused = None  # built again, from the changed blocks
    assert m.fused_layers() is not None
    runs = {}
    for fuse in (True, False):
        m.fuse = fuse
        cache = m.new_cache(64)
        runs[fuse] = [m.forward(ids, cache), m.forward(np.array([7]), cache)]
    for got, want in zip(runs[True], runs[False]):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-2 * float(np.abs(want).max()))
    assert np.abs(runs[True][0] - before).max() > 0.05 * np.abs(before).max()


@pytest.mark.parametrize("change", [_sigmoid_gating])
def test_routing_the_c_path_does_not_know_keeps_the_loop(tiny_moe, change):
    """A SparseMoE that computes what core/moe.c does not (sigmoid gating) must not be run as if it
    were softmax top-k routing: the model keeps the Python loop."""
    with GGUFFile(tiny_moe) as f:
        m = build_model(f, "c")
    assert m.fused_layers() is not None
    m._fused = None  # built again below, from the changed block
    change(m.weights.layers[1].mlp)
    assert m.fused_layers() is None


def test_a_file_larger_than_the_free_disk_is_refused_before_writing(tmp_path, smollm2_path, monkeypatch):
    import shutil
    from collections import namedtuple
    from localinfer.quant.synthetic import SyntheticError
    from localinfer.quant.synthetic import write_quantized
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**9, 10**9 - 2**20, 2**20))
    with pytest.raises(SyntheticError, match="not enough disk space"):
        write_quantized(SHAPES["tiny-qwen3moe"], tmp_path / "m.gguf", "Q4_K_M", tokenizer_path=smollm2_path)
    assert list(tmp_path.iterdir()) == []
