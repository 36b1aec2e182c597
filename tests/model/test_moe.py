"""The mixture-of-experts block (arch/moe.py): the router against a direct reading of its
definition, and the dispatch on a tiny converted qwen3moe model: a batch calls each chosen expert
once over the tokens routed to it, and an expert no token chose is never read (NaN weights in
it change nothing). The logits against transformers are in test_hf_oracle.py."""
from __future__ import annotations

import numpy as np
import pytest

from localinfer.arch.hparams import HParams
from localinfer.arch.moe import SIGMOID, SOFTMAX, SOFTMAX_AFTER_TOP_K, Gating, expert_hparams, route
from localinfer.files.gguf_file import GGUFError
from localinfer.arch.weights import DenseLinear


def _softmax(x):
    z = np.exp(x - x.max())
    return z / z.sum()


@pytest.mark.parametrize("k", [1, 2, 5])
@pytest.mark.parametrize("normalize", [True, False])
def test_route_picks_the_k_most_probable_experts(k, normalize):
    logits = np.random.default_rng(k).standard_normal((37, 7)).astype(np.float32) * 3
    experts, weights = route(logits, k, normalize)
    assert experts.shape == weights.shape == (37, k) and weights.dtype == np.float32
    for row, chosen, w in zip(logits, experts, weights):
        p = _softmax(row.astype(np.float64))
        assert set(chosen) == set(np.argsort(-p)[:k])
        assert np.all(np.diff(p[chosen]) <= 0)  # most probable first
        want = p[chosen] / p[chosen].sum() if normalize else p[chosen]
        np.testing.assert_allclose(w, want, rtol=1e-5)  # float32 softmax: a few ulp of each probability
    if normalize:
        np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-6)


@pytest.mark.parametrize("normalize", [True, False])
def test_route_with_sigmoid_scores_each_expert_alone(normalize):
    logits = np.random.default_rng(3).standard_normal((19, 6)).astype(np.float32) * 3
    experts, weights = route(logits, 2, normalize, SIGMOID)
    for row, chosen, w in zip(logits.astype(np.float64), experts, weights):
        s = 1 / (1 + np.exp(-row))
        assert set(chosen) == set(np.argsort(-s)[:2])
        np.testing.assert_allclose(w, s[chosen] / s[chosen].sum() if normalize else s[chosen], rtol=1e-5)


def test_route_after_top_k_is_a_softmax_over_the_chosen_logits():
    """gpt-oss: top-k of the raw logits, then softmax over those k (they sum to 1 unnormalised)."""
    logits = np.random.default_rng(4).standard_normal((23, 8)).astype(np.float32) * 3
    experts, weights = route(logits, 3, False, SOFTMAX_AFTER_TOP_K)
    for row, chosen, w in zip(logits.astype(np.float64), experts, weights):
        assert set(chosen) == set(np.argsort(-row)[:3])
        np.testing.assert_allclose(w, _softmax(row[chosen]), rtol=1e-5)
    # and it differs from softmax-then-top-k without renormalising, which does not sum to 1
    assert not np.allclose(route(logits, 3, False, SOFTMAX)[1], weights)
    with pytest.raises(ValueError, match="gating function"):
        route(logits, 3, False, Gating("relu"))


@pytest.mark.parametrize("arch, gating, norm", [("qwen3moe", SOFTMAX, True), ("qwen2moe", SOFTMAX, False),
                                                ("olmoe", SOFTMAX, False), ("gpt-oss", SOFTMAX_AFTER_TOP_K, False)])
def test_the_gating_defaults_are_llama_cpps_per_architecture(arch, gating, norm):
    f = _File(expert_count=4, expert_used_count=2)
    f.architecture, f.metadata = arch, {k.replace("qwen3moe.", arch + "."): v for k, v in f.metadata.items()}
    got = expert_hparams(HParams(f), 96)
    assert got.get("expert_gating", SOFTMAX) == gating and got["expert_weights_norm"] is norm
    f.metadata[arch + ".expert_gating_func"] = 2  # the file's key wins
    assert expert_hparams(HParams(f), 96)["expert_gating"] == SIGMOID


def test_route_breaks_ties_toward_the_lower_index():
    experts, weights = route(np.array([[0.0, 2.0, 1.0, 2.0]]), 2, True)
    assert experts.tolist() == [[1, 3]]
    np.testing.assert_array_equal(weights, [[0.5, 0.5]])


@pytest.mark.parametrize("k", [0, 5])
def test_route_rejects_a_k_outside_the_experts(k):
    with pytest.raises(ValueError, match="k="):
        route(np.zeros((3, 4)), k, True)


class _File:
    """What HParams reads of a GGUF file."""

    def __init__(self, **keys):
        self.path, self.architecture = "m.gguf", "qwen3moe"
        self.metadata = {f"qwen3moe.{k}": v for k, v in keys.items()}


def test_expert_keys_are_read_with_llama_cpp_defaults():
    assert expert_hparams(HParams(_File()), 96) == {}  # dense
    got = expert_hparams(HParams(_File(expert_count=8, expert_used_count=2)), 96)
    assert got == dict(n_expert=8, n_expert_used=2, expert_weights_norm=True, n_ff_exp=96)


@pytest.mark.parametrize("keys, message", [
    (dict(expert_count=4, expert_used_count=5), "expert_used_count = 5: must be at most expert_count = 4"),
    (dict(expert_count=4), "missing metadata key 'qwen3moe.expert_used_count'"),
    (dict(expert_count=4, expert_used_count=2, expert_gating_func=4), "must be 1 \\(softmax\\), 2 \\(sigmoid\\) or 3"),
    (dict(expert_count=4, expert_used_count=2, expert_weights_norm=1), "must be a boolean"),
])
def test_bad_expert_keys_are_errors_naming_the_key(keys, message):
    with pytest.raises(GGUFError, match=message):
        expert_hparams(HParams(_File(**keys)), 96)


# -- dispatch on a converted model ----------------------------------------------------------------

class Recorder:
    """Wraps an expert's linear layer: counts calls and the rows each call multiplied."""

    def __init__(self, inner, calls: list):
        self.inner, self.calls, self.shape = inner, calls, inner.shape

    def __call__(self, x):
        self.calls.append(x.shape[0])
        return self.inner(x)


@pytest.fixture(scope="module")
def tiny_qwen3moe(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from hf_oracle import SENTENCES, make_hf_model
    from localinfer.quant.convert_hf import convert_hf
    folder = tmp_path_factory.mktemp("qwen3moe")
    _, tok = make_hf_model("qwen3moe", folder, seed=5)
    return convert_hf(folder, folder / "m.gguf", "q8_0"), tok.encode(SENTENCES[1], add_special_tokens=False).ids


@pytest.mark.parametrize("extra, message", [({"mlp_only_layers": [1]}, "dense layers between the expert layers"),
                                            ({"clip_qkv": 8.0}, "clip_qkv")])
def test_unsupported_moe_checkpoints_are_refused(tiny_qwen3moe, tmp_path, extra, message):
    import json
    import shutil
    from localinfer.quant.convert_hf import ConversionError, convert_hf
    folder = tiny_qwen3moe[0].parent
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(folder / name, tmp_path / name)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **extra}))
    with pytest.raises(ConversionError, match=message):
        convert_hf(tmp_path, tmp_path / "m.gguf", "f32")


def _load(path, backend):
    from localinfer.backend import kernels
    from localinfer.arch import build_model
    from localinfer.files.gguf_file import GGUFFile
    if backend == "c" and not kernels.available():
        pytest.skip("C kernels not built")
    with GGUFFile(path) as f:
        return build_model(f, backend)


def _record(m):
    """Per layer, per expert: the row counts of its gate matmul calls."""
    calls = [[[] for _ in layer.mlp.gate] for layer in m.weights.layers]
    for layer, per_expert in zip(m.weights.layers, calls):
        layer.mlp.gate = [Recorder(lin, c) for lin, c in zip(layer.mlp.gate, per_expert)]
    return calls


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_a_batch_calls_each_chosen_expert_once(tiny_qwen3moe, backend):
    path, ids = tiny_qwen3moe
    m = _load(path, backend)
    calls = _record(m)
    m.forward(np.array(ids), m.new_cache(64, dtype=np.float32))
    k = m.config.n_expert_used
    for per_expert in calls:
        assert all(len(c) <= 1 for c in per_expert)  # one matmul per expert over its tokens
        assert sum(sum(c) for c in per_expert) == len(ids) * k  # each token in exactly k of them


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_an_unchosen_expert_is_never_read(tiny_qwen3moe, backend):
    path, ids = tiny_qwen3moe
    m = _load(path, backend)
    calls = _record(m)
    ids = np.array(ids[:2])  # two tokens choose at most 4 of the 8 experts per layer
    want = m.forward(ids, m.new_cache(64, dtype=np.float32))
    poisoned = 0
    for layer, per_expert in zip(m.weights.layers, calls):
        moe = layer.mlp
        for e, c in enumerate(per_expert):
            if not c:
                for mats in (moe.gate, moe.up, moe.down):
                    mats[e] = DenseLinear(np.full(mats[e].shape, np.nan, dtype=np.float32))
                poisoned += 1
    assert poisoned >= len(m.weights.layers) * (m.config.n_expert - 2 * m.config.n_expert_used)
    np.testing.assert_array_equal(m.forward(ids, m.new_cache(64, dtype=np.float32)), want)
    # the poison shows where it is read: in a chosen expert it reaches the logits
    chosen = next(e for e, c in enumerate(calls[0]) if c)
    moe = m.weights.layers[0].mlp
    moe.down[chosen] = DenseLinear(np.full(moe.down[chosen].shape, np.nan, dtype=np.float32))
    assert np.isnan(m.forward(ids, m.new_cache(64, dtype=np.float32))).all()


def test_the_bench_counts_only_the_routed_share_of_the_experts(tiny_qwen3moe):
    from localinfer.files.gguf_file import GGUFFile
    from localinfer.measure.bench import weight_bytes_per_token
    with GGUFFile(tiny_qwen3moe[0]) as f:
        n, k = f.metadata["qwen3moe.expert_count"], f.metadata["qwen3moe.expert_used_count"]
        experts = sum(t.nbytes for name, t in f.tensors.items() if name.endswith("_exps.weight"))
        emb = f.tensors["token_embd.weight"]
        total = sum(t.nbytes for t in f.tensors.values())
        unread = experts * (n - k) // n + emb.nbytes - emb.nbytes // emb.shape[0]  # a token reads one row
        assert experts and weight_bytes_per_token(f) == total - unread
