"""On a CUDA device: both catalog models with every layer and the output matrix there (-ngl 99) against
llama.cpp's logits, held to the CPU path's bars (tests/model/test_llama_reference.py and
test_gemma3_reference.py). The simulator would take hours for these widths, so this module needs a real
device and skips, saying so, everywhere else (the simulator's tests of the same code: test_cuda_layers.py)."""
import numpy as np
import pytest

import localinfer
from refcheck import agreement

device = pytest.importorskip("localinfer.backend.cuda.device", reason="numba.cuda is not importable")


def _on_a_device() -> bool:
    if device.simulated():
        return False
    try:
        device.check_available()
    except device.CudaUnavailable:
        return False
    return True


SMOLLM2_REF, GEMMA3_REF = "smollm2-135m-instruct-q4_1", "gemma-3-270m-q4_k_m"   # ../shared/refdata/public/*-NAME.json

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not _on_a_device(), reason="needs a CUDA device (the simulator "
                                                                      "would take hours for a whole catalog model)")]


@pytest.mark.parametrize("name, ref, n_vocab, mean_bar", [("smollm2", SMOLLM2_REF, 49152, 0.5),
                                                          ("gemma3", GEMMA3_REF, 262144, 0.6)])
def test_every_layer_on_the_device_meets_the_cpu_paths_bars(load_ref, name, ref, n_vocab, mean_bar):
    cases = load_ref("logits", ref)["cases"]
    with localinfer.load(name, n_ctx=512, n_gpu_layers=99) as m:
        assert m.n_gpu_layers == m.runtime.config.n_layer
        a = agreement([(case, m.logits(case["tokens"])) for case in cases], n_vocab)
    print(a.summary())
    assert max(a.mean_diff) < mean_bar and max(a.std_diff) < 0.1
    assert a.top1 >= 0.95 and float(np.median(a.deltas)) < 0.2
