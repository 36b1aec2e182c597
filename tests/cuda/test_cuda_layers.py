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
    synthetic_gguf.write(p, shape=TINY, seed=3)
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


def test_bad_requests_are_refused_before_anything_runs(path, gpu):
    with pytest.raises(ValueError, match="device must be"):
        localinfer.load(path, device="tpu")
    with pytest.raises(ValueError, match="give one"):
        localinfer.load(path, device="cpu", n_gpu_layers=2)
    with pytest.raises(ValueError, match="32"):
        gpu.logits([32])
