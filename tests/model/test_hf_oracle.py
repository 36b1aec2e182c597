"""qwen2, qwen3, qwen2moe, qwen3moe, olmoe, phi3, mistral, mixtral and llama (llama3 rope scaling) against Hugging Face transformers:
a tiny random model of each is saved as a HF folder, converted by `localinfer convert`, and our
logits must be transformers' own (f32, tight tolerance). Random weights of order 1 make every
layout detail matter: a wrong rope type, a skipped Q/K permutation, a missing bias or norm, or
a wrong head split moves the logits by far more than the tolerance (checked below too).

Needs the `oracle` extra (torch, transformers); skipped without it.
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from click.testing import CliRunner  # noqa: E402

from hf_oracle import ARCHS, SENTENCES, hf_logits, make_hf_model  # noqa: E402
from localinfer.arch import build_model  # noqa: E402
from localinfer.cli.main import main  # noqa: E402
from localinfer.files.gguf_file import GGUFFile  # noqa: E402
from localinfer.backend.ops_reference import rope_freqs  # noqa: E402
from localinfer.quant import convert_hf as convert_module  # noqa: E402
from localinfer.quant.convert_hf import convert_hf  # noqa: E402
from localinfer.tokenizer import Tokenizer  # noqa: E402

ATOL = 1e-4  # f32 on both sides; the differences seen are ~2e-6
GGUF_ARCH = {"llama3": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "phi3": "phi3",
             "phi3_longrope": "phi3", "qwen3moe": "qwen3moe", "mixtral": "llama", "qwen2moe": "qwen2moe",
             "olmoe": "olmoe", "gptoss": "gpt-oss"}
MOE = {"qwen3moe", "mixtral", "qwen2moe", "olmoe", "gptoss"}
# what core/moe.c computes (softmax then top-k, no biases; qwen2moe's shared expert; olmoe's Q/K norms over the
# whole projection in decoder_layers.c); gpt-oss keeps the Python loop (arch/fused.py): gating, biases, sinks
FUSED_MOE = {"qwen3moe", "mixtral", "qwen2moe", "olmoe", "gptoss"}


@pytest.fixture(scope="module", params=list(ARCHS))
def tiny(request, tmp_path_factory):
    """(name, HF model, HF tokenizer, HF folder, converted f32 GGUF path)."""
    folder = tmp_path_factory.mktemp(request.param)
    model, tok = make_hf_model(request.param, folder, seed=len(request.param))
    return request.param, model, tok, folder, convert_hf(folder, folder / "model-f32.gguf", "f32")


def _load(path, backend="reference"):
    with GGUFFile(path) as f:
        return build_model(f, backend), Tokenizer.from_metadata(f.metadata)


def _prompts(tok):
    return [tok.encode(s, add_special_tokens=False).ids for s in SENTENCES[:3]]


def test_logits_match_transformers(tiny):
    name, model, tok, _, path = tiny
    m, _ = _load(path)
    assert type(m).__name__.lower().startswith(GGUF_ARCH[name].replace("-", ""))
    a, b = _prompts(tok)[:2]
    want_a, want_b = hf_logits(model, a), hf_logits(model, b)
    # a prefill in two chunks (the second at cache offset 9) ...
    cache = m.new_cache(64, dtype=np.float32)
    got_a = np.concatenate([m.forward(np.array(a[:9]), cache), m.forward(np.array(a[9:]), cache)])
    np.testing.assert_allclose(got_a, want_a, atol=ATOL, rtol=0)
    # ... and two sequences in one batch, one of them a decode step on its own cache
    cache_a, cache_b = m.new_cache(64, dtype=np.float32), m.new_cache(64, dtype=np.float32)
    m.forward(np.array(a[:-1]), cache_a)
    got_last_a, got_b = m.forward_batch([(a[-1:], cache_a), (b, cache_b)])
    np.testing.assert_allclose(got_last_a, want_a[-1:], atol=ATOL, rtol=0)
    np.testing.assert_allclose(got_b, want_b, atol=ATOL, rtol=0)


def test_a_wrong_rope_type_would_fail(tiny):
    """The comparison above can fail: the other rope pairing moves the logits far past ATOL."""
    _, model, tok, _, path = tiny
    m, _ = _load(path)
    m.rope_neox = not m.rope_neox
    ids = _prompts(tok)[0]
    got = m.forward(np.array(ids), m.new_cache(64, dtype=np.float32))
    assert np.abs(got - hf_logits(model, ids)).max() > 100 * ATOL


def test_tokenizer_matches_hf(tiny):
    _, _, tok, _, path = tiny
    _, ours = _load(path)
    for text in SENTENCES + ["<|im_start|>hi there<|im_end|>", "  spaces\n\n\tand tabs  ", "x" * 40]:
        assert ours.tokenize(text, add_special=False) == tok.encode(text, add_special_tokens=False).ids, text
    assert ours.eos_id == tok.token_to_id("<|im_end|>")
    assert ours.bos_id == tok.token_to_id("<|endoftext|>")


def test_quantized_outtypes_on_both_backends(tiny):
    name, model, tok, folder, _ = tiny
    ids = _prompts(tok)[1]
    want = hf_logits(model, ids)
    scale = np.abs(want).max()
    cases = [("f16", "reference", 2e-3), ("bf16", "reference", 1.5e-2), ("q8_0", "reference", 5e-2), ("q8_0", "c", 5e-2)]
    if name in MOE:
        # routing is discontinuous: rounded weights or activations flip a near-tied top-k choice (gaps of
        # ~0.1% of the top probability occur in these prompts) and the logits jump by 10-40%, in
        # transformers as here (an f16 KV cache is enough); f32 weights and cache on the C kernels are held to ATOL
        cases = [("f32", "c", ATOL / scale)]
    for outtype, backend, rel in cases:
        path = convert_hf(folder, folder / f"model-{outtype}.gguf", outtype)
        m, _ = _load(path, backend)
        got = m.forward(np.array(ids), m.new_cache(64, dtype=np.float32 if name in MOE else np.float16))
        err = np.abs(got - want).max() / scale
        assert err < rel, (outtype, backend, err)


def test_info_shows_the_architecture(tiny):
    name, _, _, _, path = tiny
    r = CliRunner().invoke(main, ["info", str(path)])
    assert r.exit_code == 0, r.output
    assert f"architecture  {GGUF_ARCH[name]}" in r.output
    assert "embedding_length" in r.output and "64" in r.output
    assert "F32" in r.output


def test_llama_without_the_qk_permutation_would_fail(tmp_path, monkeypatch):
    model, tok = make_hf_model("llama3", tmp_path)
    monkeypatch.setitem(convert_module.RECIPES, "LlamaForCausalLM", convert_module.Recipe("llama", permute_qk=False))
    m, _ = _load(convert_hf(tmp_path, tmp_path / "unpermuted.gguf", "f32"))
    ids = tok.encode(SENTENCES[0], add_special_tokens=False).ids
    got = m.forward(np.array(ids), m.new_cache(64, dtype=np.float32))
    assert np.abs(got - hf_logits(model, ids)).max() > 100 * ATOL


def test_llama3_rope_factors_are_written(tiny):
    name, _, _, _, path = tiny
    with GGUFFile(path) as f:
        has = "rope_freqs.weight" in f.tensors
    assert has == (name == "llama3")


def test_longrope_uses_the_short_factors_within_the_original_context(tmp_path):
    model, tok = make_hf_model("phi3_longrope", tmp_path)
    m, _ = _load(convert_hf(tmp_path, tmp_path / "m.gguf", "f32"))
    ids = tok.encode("Hello world! Hello again.", add_special_tokens=False).ids
    assert len(ids) <= 16  # transformers picks the short factors for these positions
    want = hf_logits(model, ids)
    short = m.forward(np.array(ids), m.new_cache(16, dtype=np.float32))
    np.testing.assert_allclose(short, want, atol=ATOL, rtol=0)
    long = m.forward(np.array(ids), m.new_cache(64, dtype=np.float32))  # a context past 16: long factors
    assert np.abs(long - want).max() > 100 * ATOL


def _drop_q_biases(m):
    for layer in m.weights.layers:
        layer.attn.wq.bias = None


def _drop_q_norms(m):
    for layer in m.weights.layers:
        layer.attn.q_norm = None


def _drop_rope_factors(m):
    c = m.config
    m.inv_freq = m.inv_freq_long = rope_freqs(c.head_dim, c.rope_base, c.n_rot)


def _swap_gate_and_up(m):
    for layer in m.weights.layers:
        layer.mlp.w_up.w = np.roll(layer.mlp.w_up.w, layer.mlp.n_ff, axis=0)


def _unnormalised_expert_weights(m):
    for layer in m.weights.layers:
        layer.mlp.normalize = False


def _no_shared_expert(m):
    for layer in m.weights.layers:
        layer.mlp = layer.mlp.routed


def _renormalised_expert_weights(m):
    for layer in m.weights.layers:
        layer.mlp.normalize = True


def _per_head_qk_norms(m):
    """qwen3's per-head norms with olmoe's weights: the first head's slice of each whole-projection norm."""
    for layer in m.weights.layers:
        layer.attn.q_norm = layer.attn.q_norm[:m.config.head_dim].copy()
        layer.attn.k_norm = layer.attn.k_norm[:m.config.head_dim].copy()


def _no_attention_sinks(m):
    for layer in m.weights.layers:
        layer.sinks = np.full_like(layer.sinks, -np.inf)  # exp(-inf) = 0: the plain softmax


def _no_sliding_window(m):
    for layer in m.weights.layers:
        layer.window = None


def _yarn_truncated(m):
    """llama.cpp's YaRN (ramp ends rounded) where transformers' config says truncate: false."""
    from localinfer.arch.gptoss import yarn_inv_freq
    c = m.config
    m.inv_freq = yarn_inv_freq(c.n_rot, c.rope_base, *c.yarn[:4], truncate=True)


def _softmax_before_top_k(m):
    from localinfer.arch.moe import SOFTMAX
    for layer in m.weights.layers:
        layer.mlp.gating = SOFTMAX


def _first_expert_only(m):
    for layer in m.weights.layers:
        layer.mlp.n_used = 1


@pytest.mark.parametrize("name, damage", [("qwen2", _drop_q_biases), ("qwen3", _drop_q_norms),
                                          ("qwen3moe", _unnormalised_expert_weights), ("mixtral", _first_expert_only),
                                          ("qwen2moe", _no_shared_expert),
                                          ("olmoe", _renormalised_expert_weights), ("olmoe", _per_head_qk_norms),
                                          ("gptoss", _no_attention_sinks), ("gptoss", _no_sliding_window),
                                          ("gptoss", _yarn_truncated), ("gptoss", _softmax_before_top_k),
                                          ("llama3", _drop_rope_factors), ("phi3", _swap_gate_and_up),
                                          ("phi3_longrope", _drop_rope_factors)])
def test_each_architecture_detail_matters(tmp_path, name, damage):
    """What each architecture adds to llama moves the logits far past ATOL when left out."""
    model, tok = make_hf_model(name, tmp_path)
    m, _ = _load(convert_hf(tmp_path, tmp_path / "m.gguf", "f32"))
    ids = tok.encode(SENTENCES[2], add_special_tokens=False).ids
    want = hf_logits(model, ids)
    np.testing.assert_allclose(m.forward(np.array(ids), m.new_cache(64, dtype=np.float32)), want, atol=ATOL, rtol=0)
    damage(m)
    got = m.forward(np.array(ids), m.new_cache(64, dtype=np.float32))
    assert np.abs(got - want).max() > 100 * ATOL


@pytest.mark.parametrize("outtype", ["f32", "q8_0"])
def test_fused_layers_are_the_loop_bit_for_bit(tiny, outtype):
    """On the C backend one sequence runs every layer in one C call (arch/fused.py): biases
    (qwen2), per-head norms (qwen3), fused qkv / gate|up, scaled queries and longrope's factors
    (phi3) give the same logits and cache as the Python loop over the same kernels."""
    from localinfer.backend import kernels
    if not kernels.available():
        pytest.skip("C kernels not built")
    name, _, tok, folder, _ = tiny
    m, _ = _load(convert_hf(folder, folder / f"fused-{outtype}.gguf", outtype), "c")
    if name in MOE - FUSED_MOE:
        assert m.fused_layers() is None  # run as the C layers would not compute them: wrong logits
        return
    fused = m.fused_layers()
    assert fused is not None
    taken = []  # every forward below with fuse on must run the C layers, not fall back to the loop
    run = fused.run
    fused.run = lambda *a: taken.append(1) or run(*a)
    ids = _prompts(tok)[0]
    runs = {}
    for fuse in (True, False):
        m.fuse = fuse
        cache = m.new_cache(64)
        logits = [m.forward(np.array(ids[:9]), cache), m.forward(np.array(ids[9:]), cache)]
        logits += [m.forward(np.array([t]), cache) for t in ids[:3]]
        other = m.new_cache(64)
        logits += m.forward_batch([(ids[:5], other), (ids[3:4], cache)])  # two sequences in one pass
        parts = [cache.full, cache.swa] if hasattr(cache, "swa") else [cache]  # gpt-oss: full layers and a ring
        runs[fuse] = logits + [a[:, :cache.offset].copy() for p in parts for a in (p.k, p.v)]
    assert len(taken) == 6  # two prefill chunks, three decode steps, one batch of two sequences
    for got, want in zip(runs[True], runs[False]):
        if name in MOE:
            assert_moe_close(got, want, outtype)
        else:
            np.testing.assert_array_equal(got, want)


def assert_moe_close(got, want, outtype):
    """core/moe.c's softmax (expf) and numpy's (its own exp) may differ by an ulp, so a routed
    expert's weight may too (and qwen2moe's shared-expert gate, a dot product summed in another
    order): on f32 weights the block's results then differ by rounding (~1e-7 of their scale), but
    the next layer stores K and V in the f16 cache, where a value that moved by an ulp may round to
    the next f16 step (2^-11, ~5e-4 of it): 5e-4 of the scale bounds that. On q8_0 weights an
    activation that moved by an ulp may round to the next of Q8_0's 255 steps (1/127 of its block's
    largest value), which moves a dot product by one step of one term: well under 1% of the
    values' scale. A wrong expert or weight would move either by tens of percent."""
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    scale = float(np.abs(want).max())
    tol = 5e-4 if outtype == "f32" else 1e-2
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * scale)


def test_experts_are_written_as_llama_cpp_names_them(tiny):
    name, model, _, _, path = tiny
    if name not in MOE:
        pytest.skip("dense")
    c = model.config
    n_expert = getattr(c, "num_experts", None) or c.num_local_experts
    n_ff = getattr(c, "moe_intermediate_size", c.intermediate_size)
    arch = GGUF_ARCH[name]
    with GGUFFile(path) as f:
        assert f.metadata[f"{arch}.expert_count"] == n_expert
        assert f.metadata[f"{arch}.expert_used_count"] == c.num_experts_per_tok
        assert tuple(f.tensors["blk.1.ffn_gate_inp.weight"].shape) == (n_expert, c.hidden_size)
        assert tuple(f.tensors["blk.1.ffn_up_exps.weight"].shape) == (n_expert, n_ff, c.hidden_size)
        assert tuple(f.tensors["blk.1.ffn_down_exps.weight"].shape) == (n_expert, c.hidden_size, n_ff)
        assert "blk.0.ffn_up.weight" not in f.tensors


def test_info_shows_experts_and_active_parameters(tiny):
    name, model, _, _, path = tiny
    r = CliRunner().invoke(main, ["info", str(path)])
    assert r.exit_code == 0, r.output
    n_params = sum(p.numel() for p in model.parameters())
    if name not in MOE:
        assert "active per token" not in r.output
        return
    c = model.config
    n_expert = getattr(c, "num_experts", None) or c.num_local_experts
    experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    active = n_params - experts + experts * c.num_experts_per_tok // n_expert
    assert f"({n_params / 1e6:.1f}M parameters, {active / 1e6:.1f}M active per token" in r.output
    assert "expert_count" in r.output and "expert_used_count" in r.output
