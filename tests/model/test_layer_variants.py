"""A variant of an existing layout is data (arch/layer.py): a llama whose layers RMS-normalise each
Q and K head before rope, as qwen3 does but with llama's adjacent rope pairs, is one class attribute.
Its oracle is a forward pass written out below in plain numpy from the file's tensors; the numpy
executor (`run_layers`) must give its logits, and the C executor (the whole stack in one call) the
numpy executor's."""
from __future__ import annotations

import numpy as np
import pytest

import synthetic_gguf as syn
from localinfer.arch.llama import LlamaModel
from localinfer.backend import kernels
from localinfer.files.gguf_file import GGUFError, GGUFFile


class LlamaQKNormModel(LlamaModel):
    qk_norm = True  # the variant: every layer has attn_q_norm / attn_k_norm, (head_dim,) each


HEAD_DIM = syn.N_EMBD // syn.N_HEAD
EPS = 1e-5
RTOL = 1e-4  # of the largest logit: f32 against f64, the differences seen are ~5e-6


@pytest.fixture(scope="module")
def variant_file(tmp_path_factory):
    """(path, tensors as written): the synthetic llama plus per-head Q/K norms far from 1."""
    rng = np.random.default_rng(7)
    norms = {f"blk.{i}.attn_{x}_norm.weight": rng.uniform(0.2, 3.0, HEAD_DIM).astype(np.float32)
             for i in range(syn.N_LAYER) for x in "qk"}
    path = tmp_path_factory.mktemp("qknorm") / "llama-qknorm.gguf"
    return path, syn.write(path, seed=3, extra=norms)


def _load(path, backend="reference"):
    with GGUFFile(path) as f:
        return LlamaQKNormModel.from_gguf(f, backend)


def _rms(x, w):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS) * w


def _rope_adjacent(x, positions):
    """x (n, heads, head_dim): pairs (x[2i], x[2i+1]) turned by position * 10000^(-2i/head_dim)."""
    freq = 10000.0 ** -(np.arange(0, HEAD_DIM, 2) / HEAD_DIM)
    angle = positions[:, None, None] * freq  # (n, 1, head_dim/2)
    cos, sin = np.cos(angle), np.sin(angle)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = even * cos - odd * sin, even * sin + odd * cos
    return out


def _oracle(t: dict, tokens: list[int]) -> np.ndarray:
    """The variant's logits (n, n_vocab) in float64, from nothing but the tensors."""
    t = {k: v.astype(np.float64) for k, v in t.items()}
    n, group = len(tokens), syn.N_HEAD // syn.N_HEAD_KV
    pos = np.arange(n, dtype=np.float64)
    x = t["token_embd.weight"][tokens]
    causal = np.triu(np.full((n, n), -np.inf), 1)
    for i in range(syn.N_LAYER):
        p = f"blk.{i}."
        h = _rms(x, t[p + "attn_norm.weight"])
        q = (h @ t[p + "attn_q.weight"].T).reshape(n, syn.N_HEAD, HEAD_DIM)
        k = (h @ t[p + "attn_k.weight"].T).reshape(n, syn.N_HEAD_KV, HEAD_DIM)
        v = (h @ t[p + "attn_v.weight"].T).reshape(n, syn.N_HEAD_KV, HEAD_DIM)
        q = _rope_adjacent(_rms(q, t[p + "attn_q_norm.weight"]), pos)
        k = _rope_adjacent(_rms(k, t[p + "attn_k_norm.weight"]), pos)
        out = np.empty((n, syn.N_HEAD, HEAD_DIM))
        for head in range(syn.N_HEAD):
            scores = q[:, head] @ k[:, head // group].T / np.sqrt(HEAD_DIM) + causal
            weights = np.exp(scores - scores.max(axis=1, keepdims=True))
            out[:, head] = (weights / weights.sum(axis=1, keepdims=True)) @ v[:, head // group]
        x = x + out.reshape(n, -1) @ t[p + "attn_output.weight"].T
        h = _rms(x, t[p + "ffn_norm.weight"])
        gate, up = h @ t[p + "ffn_gate.weight"].T, h @ t[p + "ffn_up.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ t[p + "ffn_down.weight"].T
    return _rms(x, t["output_norm.weight"]) @ t["token_embd.weight"].T  # tied output


TOKENS = [5, 77, 300, 12, 499, 1, 64, 200, 31, 450, 7, 128]


def test_the_numpy_executor_is_the_written_out_forward_pass(variant_file):
    path, tensors = variant_file
    m = _load(path)
    assert all(layer.attn.q_norm is not None and layer.attn.k_norm is not None for layer in m.weights.layers)
    want = _oracle(tensors, TOKENS)
    got = m.forward(np.array(TOKENS), m.new_cache(32, dtype=np.float32))
    np.testing.assert_allclose(got, want, atol=RTOL * np.abs(want).max(), rtol=0)
    # the norms matter: without them the same weights give other logits
    for layer in m.weights.layers:
        layer.attn.q_norm = layer.attn.k_norm = None
    far = m.forward(np.array(TOKENS), m.new_cache(32, dtype=np.float32))
    assert np.abs(far - want).max() > 100 * RTOL * np.abs(want).max()


@pytest.mark.skipif(not kernels.available(), reason="C kernels not built")
def test_the_c_executor_runs_the_variant_as_the_numpy_one_does(variant_file):
    path, _ = variant_file
    m = _load(path, "c")
    assert m.fused_layers() is not None  # nothing but the class attribute was written for it
    fused = m.forward(np.array(TOKENS), m.new_cache(32))
    m.fuse = False
    np.testing.assert_array_equal(fused, m.forward(np.array(TOKENS), m.new_cache(32)))


def test_the_variant_refuses_a_file_without_its_norms(tmp_path):
    path = tmp_path / "plain.gguf"
    syn.write(path)
    with pytest.raises(GGUFError, match="attn_q_norm"):
        _load(path)
