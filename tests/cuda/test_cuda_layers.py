"""The first layers of a model on the CUDA path (load(n_gpu_layers=N), backend/cuda/layers.py) against the
CPU path's logits: a tiny random-weight F16 model under numba's simulator where there is no GPU (the Q8_0
and Q4_0 GEMVs are compared on their own in test_cuda_kernels.py). The tolerance: the device keeps K/V
in f16 as the CPU path does, and sums in another order; a few ulps of the logits' scale (~1)."""
import numpy as np
import pytest

import localinfer
import synthetic_gguf

pytestmark = pytest.mark.slow
pytest.importorskip("localinfer.backend.cuda.kernels", reason="numba.cuda is not importable")

# the simulator runs each GPU thread as a Python thread (seconds per token and layer here): a very small
# model, one of its two layers on the device
TINY = synthetic_gguf.Shape("tiny", "llama", n_embd=32, n_ff=64, n_head=4, n_head_kv=2, n_layer=2, n_vocab=32)
TOL = dict(rtol=2e-3, atol=2e-3)


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    p = tmp_path_factory.mktemp("cuda") / "tiny.gguf"
    rng = np.random.default_rng(6)   # Q/K/V biases (qwen2's, llama's attention_bias): the device adds them too
    kv = TINY.n_head_kv * TINY.head_dim
    biases = {f"blk.{i}.attn_{m}.bias": (0.1 * rng.standard_normal(n)).astype(np.float32)
              for i in range(TINY.n_layer) for m, n in [("q", TINY.n_embd), ("k", kv), ("v", kv)]}
    synthetic_gguf.write(p, shape=TINY, seed=3, extra=biases)
    return str(p)


@pytest.fixture(scope="module")
def cpu(path):
    with localinfer.load(path, n_ctx=32) as m:
        yield m


@pytest.fixture(scope="module")
def gpu(path):
    with localinfer.load(path, n_ctx=32, n_gpu_layers=1) as m:
        yield m


def test_a_prefill_with_the_first_layer_on_the_device_gives_the_cpu_logits(cpu, gpu):
    assert gpu.n_gpu_layers == 1 and cpu.n_gpu_layers == 0
    ids = [5, 17, 3]
    np.testing.assert_allclose(gpu.logits(ids), cpu.logits(ids), **TOL)


def test_the_layers_on_the_device_leave_the_cpus_memory(cpu, gpu):
    def host(m):
        mem = m.memory()
        return mem["weights_mapped"] + mem["weight_copies"]
    layer0 = sum(t.nbytes for name, t in cpu.gguf.tensors.items() if name.startswith("blk.0.") and len(t.shape) == 2)
    assert host(cpu) - host(gpu) == layer0   # layer 0's matrices, held once: on the device
    assert gpu.runtime.weights.layers[0].attn is None and gpu.runtime.weights.layers[1].attn is not None


def test_above_the_layer_count_the_output_matrix_goes_too(path, cpu):
    ids = [4, 9]
    with localinfer.load(path, n_ctx=16, n_gpu_layers=3) as m:   # 2 layers + the output (tied: token_embd)
        assert m.n_gpu_layers == 2 and type(m.runtime.weights.output).__name__ == "DeviceOutput"
        np.testing.assert_allclose(m.logits(ids), cpu.logits(ids), **TOL)


def test_the_device_cache_follows_a_trimmed_and_a_restored_host_cache(cpu, gpu, tmp_path):
    ctx = gpu.new_context(16)
    ctx.append([5, 17])
    ctx.save(tmp_path / "two.state")
    ctx.truncate(1)                     # position 1 is written again: [5, 9]
    got = ctx.append([9])
    np.testing.assert_allclose(got[-1], cpu.logits([5, 9])[-1], **TOL)
    ctx.load(tmp_path / "two.state")    # [5, 17] again, written into the host cache from outside
    got = ctx.append([3])
    np.testing.assert_allclose(got[-1], cpu.logits([5, 17, 3])[-1], **TOL)


# gemma3's blocks: per-head Q/K norms, post-norms, GeGLU, layer 0 sliding (window 3, its own rope base), layer 1
# global; the window is shorter than the prompt, so the device's window start is tested
GEMMA = synthetic_gguf.Shape("tiny-gemma3", "gemma3", n_embd=32, n_ff=64, n_head=4, n_head_kv=2, n_layer=2,
                             n_vocab=32)


def _gemma3_keys(w):
    w.add_uint32("gemma3.attention.sliding_window", 3)
    w.add_uint32("gemma3.attention.sliding_window_pattern", 2)
    w.add_uint32("gemma3.attention.key_length", GEMMA.head_dim)
    w.add_uint32("gemma3.attention.value_length", GEMMA.head_dim)


def test_gemma3_blocks_with_a_sliding_window_give_the_cpu_logits(tmp_path):
    rng = np.random.default_rng(5)
    norms = {f"blk.{i}.{name}.weight": (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)
             for i in range(GEMMA.n_layer) for name, n in [("attn_q_norm", GEMMA.head_dim), ("attn_k_norm", GEMMA.head_dim),
                                                             ("post_attention_norm", GEMMA.n_embd),
                                                             ("post_ffw_norm", GEMMA.n_embd)]}
    path = str(tmp_path / "gemma3.gguf")
    synthetic_gguf.write(path, shape=GEMMA, seed=4, extra=norms, more=_gemma3_keys)
    ids = [7, 2, 30, 11, 5]
    with localinfer.load(path, n_ctx=16) as m:
        want = m.logits(ids)
    with localinfer.load(path, n_ctx=16, n_gpu_layers=1) as m:
        assert m.runtime.weights.layers[0].window == 3 and m.runtime.weights.layers[1].window is None
        # the CPU path rounds gemma3's scaled queries to f16 (2^-11 relative) before the attention and the
        # device keeps them f32: up to ~3e-3 on these logits (~1) after two layers. A window of the wrong
        # width moves rows 3 and 4 by ~1, so 1e-2 still tells it
        np.testing.assert_allclose(m.logits(ids), want, rtol=0, atol=1e-2)


def test_bad_requests_are_refused_before_anything_runs(path, gpu):
    with pytest.raises(ValueError, match="device must be"):
        localinfer.load(path, device="tpu")
    with pytest.raises(ValueError, match="give one"):
        localinfer.load(path, device="cpu", n_gpu_layers=2)
    with pytest.raises(ValueError, match="32"):
        gpu.logits([32])
