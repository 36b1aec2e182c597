"""A whole llama-family model on the CUDA path (backend/cuda/llama.py) against the CPU path's logits:
a tiny random-weight F16 model under numba's simulator where there is no GPU (the Q8_0 and Q4_0
GEMVs are compared on their own in test_cuda_kernels.py)."""
import numpy as np
import pytest

import localinfer
import synthetic_gguf

pytestmark = pytest.mark.slow
pytest.importorskip("localinfer.backend.cuda.kernels", reason="numba.cuda is not importable")
from localinfer.backend.cuda.llama import CudaLlama  # noqa: E402

# the simulator runs each GPU thread as a Python thread (~30 ms per output row here): a very small model
TINY = synthetic_gguf.Shape("tiny", "llama", n_embd=32, n_ff=64, n_head=4, n_head_kv=2, n_layer=1, n_vocab=32)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("cuda") / "tiny.gguf"
    synthetic_gguf.write(path, shape=TINY, seed=3)
    with localinfer.load(str(path), n_ctx=32) as m:
        yield m


def test_the_cuda_path_gives_the_cpu_paths_logits(tiny):
    ids = [5, 17, 3]
    want = tiny.logits(ids)   # (len(ids), n_vocab): every position, on the CPU path
    m = CudaLlama(tiny, n_ctx=16)
    got = np.stack([m.forward(t) for t in ids])
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)
    assert m.n_past == 3
    m.reset()
    np.testing.assert_allclose(m.forward(ids[0]), want[0], rtol=2e-3, atol=2e-3)


def test_bad_input_is_refused(tiny):
    m = CudaLlama(tiny, n_ctx=1)
    with pytest.raises(ValueError, match="unknown token id 32"):
        m.forward(32)
    m.forward(1)
    with pytest.raises(ValueError, match="context is full"):
        m.forward(2)
