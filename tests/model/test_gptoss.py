"""gpt-oss's pieces against their definitions (the whole model against transformers is in
test_hf_oracle.py): the clamped SwiGLU, YaRN frequencies against transformers' own function,
attention sinks on both backends, and experts stored as MXFP4, as released files hold them."""
from __future__ import annotations

import numpy as np
import pytest

from localinfer.backend import ops_reference
from localinfer.arch.gptoss import yarn_inv_freq
from localinfer.arch.layer import swiglu_oai


def test_swiglu_oai_clamps_gate_above_and_up_both_ways():
    gate = np.array([-9.0, -1.0, 0.0, 2.0, 7.0, 30.0], np.float32)
    up = np.array([-30.0, -8.0, 0.5, 3.0, 7.5, 1.0], np.float32)
    g = np.minimum(gate.astype(np.float64), 7.0)
    u = np.clip(up.astype(np.float64), -7.0, 7.0)
    want = g / (1 + np.exp(-1.702 * g)) * (u + 1)
    np.testing.assert_allclose(swiglu_oai(gate, up), want, rtol=1e-6, atol=1e-6)
    assert swiglu_oai(gate, up).dtype == np.float32


@pytest.mark.parametrize("truncate", [True, False])
@pytest.mark.parametrize("head_dim, factor, orig", [(32, 4.0, 64), (64, 32.0, 4096)])
def test_yarn_frequencies_are_transformers(truncate, head_dim, factor, orig):
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    rope = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": factor, "original_max_position_embeddings": orig,
            "beta_fast": 32.0, "beta_slow": 1.0, "truncate": truncate}
    config = transformers.GptOssConfig(hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim,
                                       max_position_embeddings=int(orig * factor), rope_parameters=rope)
    want, attention_factor = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    got = yarn_inv_freq(head_dim, 150000.0, factor, orig, 32.0, 1.0, truncate)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-6)  # transformers computes in float32
    assert attention_factor == pytest.approx(0.1 * np.log(factor) + 1)


def _sink_attention_by_definition(q, k, v, scale, sinks, window=None):
    """One query at a time, one head at a time: softmax over the visible keys plus a sink logit."""
    n, n_head, d = q.shape
    group = n_head // k.shape[1]
    out = np.zeros(q.shape)
    for t in range(n):
        lo = 0 if window is None else max(0, t - window + 1)
        for h in range(n_head):
            s = k[lo:t + 1, h // group].astype(np.float64) @ q[t, h] * scale
            e = np.exp(np.append(s, sinks[h]) - max(s.max(), sinks[h]))
            out[t, h] = (e[:-1] / e.sum()) @ v[lo:t + 1, h // group]
    return out


@pytest.mark.parametrize("window", [None, 3])
def test_attention_sinks_join_the_softmax_denominator(window):
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((9, h, 8)).astype(np.float32) for h in (4, 2, 2))
    sinks = rng.standard_normal(4).astype(np.float32) * 2
    pos = np.arange(9)
    got = ops_reference.attention(q, k, v, pos, 0.35, kv_dtype=None, sliding_window=window, sinks=sinks)
    np.testing.assert_allclose(got, _sink_attention_by_definition(q, k, v, 0.35, sinks, window), rtol=1e-5, atol=1e-6)
    # a sink of -inf takes no share: the plain attention
    plain = ops_reference.attention(q, k, v, pos, 0.35, kv_dtype=None, sliding_window=window)
    no_sink = ops_reference.attention(q, k, v, pos, 0.35, kv_dtype=None, sliding_window=window,
                                      sinks=np.full(4, -np.inf, np.float32))
    np.testing.assert_allclose(no_sink, plain, rtol=1e-6, atol=1e-7)
    assert np.abs(got - plain).max() > 1e-2  # and a real sink moves the result


@pytest.mark.parametrize("n_q, n_kv, window, head_dim", [(1, 37, None, 64), (5, 5, None, 16), (70, 90, 8, 64),
                                                       (3, 200, 16, 24)])
def test_the_c_attention_with_sinks_is_the_reference(n_q, n_kv, window, head_dim):
    """The C backend puts the sink in its softmax, as the reference does (tests/kernels/test_attention_sinks.py
    on every ISA and cache type): the C attention's own tolerance against the reference (tests/kernels/test_ops.py)."""
    from localinfer.backend import kernels
    from localinfer.backend import ops
    if not kernels.available():
        pytest.skip("C kernels not built")
    rng = np.random.default_rng(n_q + n_kv)
    q = rng.standard_normal((n_q, 8, head_dim)).astype(np.float32)
    k, v = (rng.standard_normal((n_kv, 2, head_dim)).astype(np.float16) for _ in range(2))
    sinks = (rng.standard_normal(8) * 2).astype(np.float32)
    pos = np.arange(n_kv - n_q, n_kv)  # queries at the end of the cache, keys from position 0
    kw = dict(sliding_window=window, sinks=sinks)
    got = ops.attention(q, k, v, pos, 1 / np.sqrt(head_dim), **kw)
    want = ops_reference.attention(q, k, v, pos, 1 / np.sqrt(head_dim), **kw)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=2e-3)
    plain = ops_reference.attention(q, k, v, pos, 1 / np.sqrt(head_dim), sliding_window=window)
    assert np.abs(got - plain).max() > 1e-2  # the sinks did something


# -- experts stored as MXFP4 -------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_gptoss(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from gguf import GGMLQuantizationType
    from gguf.quants import quantize
    from hf_oracle import SENTENCES, make_hf_model
    from localinfer.quant import convert_hf as convert_module
    folder = tmp_path_factory.mktemp("gptoss")
    _, tok = make_hf_model("gptoss", folder, seed=3)
    f32 = convert_module.convert_hf(folder, folder / "f32.gguf", "f32")
    encode = convert_module._encode

    def mxfp4_experts(t, qtype, name=""):  # what released gpt-oss files hold; the converter writes outtype
        if name.endswith("_exps.weight"):
            return quantize(t, GGMLQuantizationType.MXFP4), GGMLQuantizationType.MXFP4
        return encode(t, qtype, name)
    mp = pytest.MonkeyPatch()
    mp.setattr(convert_module, "_encode", mxfp4_experts)
    try:
        mxfp4 = convert_module.convert_hf(folder, folder / "mxfp4.gguf", "f32")
    finally:
        mp.undo()
    return f32, mxfp4, tok.encode(SENTENCES[1], add_special_tokens=False).ids


def _load(path, backend="reference"):
    from localinfer.arch import build_model
    from localinfer.files.gguf_file import GGUFFile
    with GGUFFile(path) as f:
        return build_model(f, backend)


def test_mxfp4_experts_are_read_as_their_dequantized_values(tiny_gptoss):
    """The MXFP4 file on the reference backend is the f32 model with its experts replaced by the
    MXFP4 file's dequantized values (gguf-py's dequantizer, independent of ours)."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize
    from localinfer.arch.weights import DenseLinear
    from localinfer.files.gguf_file import GGUFFile
    f32, mxfp4, ids = tiny_gptoss
    m = _load(f32)
    with GGUFFile(mxfp4) as f:
        for i, layer in enumerate(m.weights.layers):
            for kind in ("gate", "up", "down"):
                info = f.tensors[f"blk.{i}.ffn_{kind}_exps.weight"]
                assert info.ggml_type == GGMLQuantizationType.MXFP4
                w = dequantize(np.asarray(f.tensor_data(info.name)), GGMLQuantizationType.MXFP4)
                mats = getattr(layer.mlp, kind)
                mats[:] = [DenseLinear(w[e], mats[e].bias) for e in range(len(mats))]
    want = m.forward(np.array(ids), m.new_cache(64, dtype=np.float32))
    q = _load(mxfp4)
    got = q.forward(np.array(ids), q.new_cache(64, dtype=np.float32))
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)  # f32 on both sides, as the oracle test


def test_mxfp4_experts_run_on_the_c_kernels(tiny_gptoss):
    """On the C backend each MXFP4 expert is a kernel matmul over its slice of the mmap (with its
    bias), within q8_0 activation rounding of the reference expert."""
    from localinfer.backend import kernels
    from localinfer.arch.weights import KernelLinear
    if not kernels.available():
        pytest.skip("C kernels not built")
    _, mxfp4, _ = tiny_gptoss
    ref, c = _load(mxfp4), _load(mxfp4, "c")
    x = np.random.default_rng(9).standard_normal((3, c.config.n_embd)).astype(np.float32)
    for layer_ref, layer_c in zip(ref.weights.layers, c.weights.layers):
        for e in range(c.config.n_expert):
            lin = layer_c.mlp.gate[e]
            assert isinstance(lin, KernelLinear) and lin.bias is not None
            want = layer_ref.mlp.gate[e](x)
            # activations rounded to q8_0: |error| <~ |x|_inf/254 * sum|w| per row, far below this bound
            np.testing.assert_allclose(lin(x), want, atol=0.05 * np.abs(want).max(), rtol=0)


def test_mxfp4_experts_on_the_fused_c_layers_are_the_loop(tiny_gptoss):
    """gpt-oss in one C call per token (arch/fused.py): sinks in the C softmax, the ring of the
    sliding-window layers, biases on the router and the MXFP4 experts, softmax after the top-k and the
    clamped SwiGLU in core/moe.c; every forward takes that path, and its logits and caches are the
    Python loop's over the same kernels to test_hf_oracle.assert_moe_close's q8_0 tolerance (MXFP4
    weights take q8_0 activations)."""
    from localinfer.backend import kernels
    from hf_oracle import SENTENCES  # noqa: F401  (the fixture needs the oracle extra)
    from test_hf_oracle import assert_moe_close
    if not kernels.available():
        pytest.skip("C kernels not built")
    _, mxfp4, ids = tiny_gptoss
    m = _load(mxfp4, "c")
    fused = m.fused_layers()
    assert fused is not None
    taken = []
    run = fused.run
    fused.run = lambda *a: taken.append(1) or run(*a)
    runs = {}
    for fuse in (True, False):
        m.fuse = fuse
        cache = m.new_cache(64)
        logits = [m.forward(np.array(ids[:7]), cache)] + [m.forward(np.array([t]), cache) for t in ids[7:12]]
        runs[fuse] = logits + [cache.full.k[:, :cache.offset].copy(), cache.swa.v.copy()]
    assert len(taken) == 6
    for got, want in zip(runs[True], runs[False]):
        assert_moe_close(got, want, "q8_0")


def test_a_gpt_oss_file_without_experts_is_an_error(tiny_gptoss, tmp_path):
    from localinfer.files.gguf_file import GGUFError
    from localinfer.arch.gptoss import GptOssConfig, GptOssModel
    from localinfer.files.gguf_file import GGUFFile
    f32, _, _ = tiny_gptoss
    with GGUFFile(f32) as f:
        config = GptOssConfig.from_gguf(f)
        assert config.is_swa == (True, False) and config.sliding_window == 4 and config.yarn[-1] is False
        import dataclasses
        with pytest.raises(GGUFError, match="expert_count"):
            GptOssModel.check_config(f, dataclasses.replace(config, n_expert=0))


# -- a released-style checkpoint: experts as OpenAI's MXFP4 blocks and scales -----------------------

def _openai_mxfp4(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """w (n_expert, n_out, n_in) float32 -> OpenAI's (blocks (n_expert, n_out, n_in/32, 16), scales
    (n_expert, n_out, n_in/32)): gguf-py's MXFP4 codes re-laid as the checkpoints hold them, value
    2i in the low nibble of byte i and 2i+1 in the high one."""
    from gguf import GGMLQuantizationType
    from gguf.quants import quantize
    q = quantize(w, GGMLQuantizationType.MXFP4).reshape(*w.shape[:2], -1, 17)
    scales, qs = q[..., 0], q[..., 1:]
    codes = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)  # ggml: qs[j] holds values j and j + 16
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8), scales.copy()


def test_an_mxfp4_checkpoint_converts_to_mxfp4_experts_that_match_transformers(tmp_path):
    """The experts stay MXFP4 (repacked, not re-rounded); transformers dequantizes the same blocks
    with its own MXFP4 code (convert_moe_packed_tensors) and its forward pass is the oracle."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import shutil
    from gguf import GGMLQuantizationType
    from safetensors.numpy import save_file
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    from hf_oracle import SENTENCES, hf_logits, make_hf_model
    from localinfer.files.gguf_file import GGUFFile
    from localinfer.quant.convert_hf import convert_hf
    model, tok = make_hf_model("gptoss", tmp_path / "bf", seed=11)
    tensors = {}
    for name, p in model.state_dict().items():
        if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            blocks, scales = _openai_mxfp4(p.numpy().swapaxes(1, 2))  # rows = outputs, as released files
            tensors[name + "_blocks"], tensors[name + "_scales"] = blocks, scales
            with torch.no_grad():  # the oracle runs on what the blocks hold
                p.copy_(convert_moe_packed_tensors(torch.from_numpy(blocks), torch.from_numpy(scales),
                                                   dtype=torch.float32))
        else:
            tensors[name] = p.numpy()
    folder = tmp_path / "mxfp4"
    folder.mkdir()
    save_file(tensors, str(folder / "model.safetensors"))
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tmp_path / "bf" / f, folder / f)
    path = convert_hf(folder, folder / "m.gguf", "f32")
    with GGUFFile(path) as f:
        assert f.tensors["blk.0.ffn_up_exps.weight"].ggml_type == GGMLQuantizationType.MXFP4
        assert f.tensors["blk.1.ffn_down_exps.weight"].ggml_type == GGMLQuantizationType.MXFP4
        assert f.tensors["blk.0.ffn_up_exps.bias"].ggml_type == GGMLQuantizationType.F32
    ids = tok.encode(SENTENCES[2], add_special_tokens=False).ids
    m = _load(path)
    got = m.forward(np.array(ids), m.new_cache(64, dtype=np.float32))
    np.testing.assert_allclose(got, hf_logits(model, ids), atol=1e-4, rtol=0)


@pytest.mark.parametrize("change, message", [
    ({"swiglu_limit": 10.0}, "swiglu_limit / swiglu_alpha"),
    ({"layer_types": ["full_attention", "full_attention"]}, "layer_types"),
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}}, "original_max_position_embeddings"),
])
def test_gpt_oss_checkpoints_this_converter_cannot_write_are_refused(tiny_gptoss, tmp_path, change, message):
    import json
    import shutil
    from localinfer.quant.convert_hf import ConversionError, convert_hf
    folder = tiny_gptoss[0].parent
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(folder / name, tmp_path / name)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(ConversionError, match=message):
        convert_hf(tmp_path, tmp_path / "m.gguf", "f32")


def test_a_yarn_truncate_that_is_not_a_boolean_is_an_error_naming_it(tiny_gptoss):
    from localinfer.arch.gptoss import GptOssConfig
    from localinfer.files.gguf_file import GGUFError, GGUFFile
    with GGUFFile(tiny_gptoss[0]) as f:
        f.metadata["gpt-oss.rope.scaling.yarn_truncate"] = 1
        with pytest.raises(GGUFError, match="gpt-oss.rope.scaling.yarn_truncate = 1: must be a boolean"):
            GptOssConfig.from_gguf(f)
