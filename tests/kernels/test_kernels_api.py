"""The kernels' Python API: argument checking, ISA selection, threads, and the unbuilt case.

Correctness of the numbers is tests/kernels/test_kernels.py; here every bad argument must be a
TypeError/ValueError naming the problem before any C code runs, and the pool and the
ISA switch must behave (LOCALINFER_ISA, a forked child, an idle process at ~0% CPU).
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from localinfer.backend import kernels
from localinfer.formats import UnsupportedQuantType

pytestmark = pytest.mark.skipif(not kernels.available(), reason=f"C kernels not built: {kernels.unavailable_reason()}")


def q4_1_rows(n_out: int = 5, n_blocks: int = 2) -> np.ndarray:
    w = np.zeros((n_out, 20 * n_blocks), dtype=np.uint8)
    w.reshape(-1, 20)[:, 0:2] = np.frombuffer(np.float16(0.01).tobytes(), np.uint8)
    return w


def run_python(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


# --- argument checking -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "make_args, error, match",
    [
        (lambda w, x: (w, T.Q4_1, x.astype(np.float64)), TypeError, "dtype float32"),
        (lambda w, x: (w, T.Q4_1, x.tolist()), TypeError, "numpy array"),
        (lambda w, x: (w, T.Q4_1, np.asfortranarray(np.tile(x, (3, 1)))), ValueError, "C-contiguous"),
        (lambda w, x: (w, T.Q4_1, x[:, :32].copy()), ValueError, r"shape \(m, 64\)"),
        (lambda w, x: (w, T.Q4_1, x.reshape(1, 1, 64)), ValueError, "shape"),
        (lambda w, x: (w[:, :30].copy(), T.Q4_1, x), ValueError, "whole blocks of 20 bytes"),
        (lambda w, x: (w.reshape(-1), T.Q4_1, x), ValueError, "2-D"),
        (lambda w, x: (w.view(np.int8), T.Q4_1, x), TypeError, "dtype uint8"),
        (lambda w, x: (w[:, ::2], T.Q4_1, x), ValueError, "C-contiguous"),
        (lambda w, x: (w, T.NVFP4, x), UnsupportedQuantType, "NVFP4"),
        (lambda w, x: (w, T.Q8_K, x), UnsupportedQuantType, "Q8_K"),
        (lambda w, x: (w, 99, x), UnsupportedQuantType, "99"),
        (lambda w, x: (w, "Q4_1", x), TypeError, "GGML type"),
        (lambda w, x: (w.astype(np.float32), T.Q4_1, x), TypeError, "dtype uint8"),
        (lambda w, x: (np.zeros((5, 64), np.float16), T.F32, x), TypeError, "float32"),
        (lambda w, x: (x.byteswap().view(x.dtype.newbyteorder()), T.F32, x), TypeError, "byte order"),
    ],
)
def test_matmul_rejects_bad_arguments(make_args, error, match):
    w, x = q4_1_rows(), np.ones((1, 64), dtype=np.float32)
    with pytest.raises(error, match=match):
        kernels.matmul(*make_args(w, x))


def test_matmul_rejects_misaligned_weights():
    buf = np.zeros(5 * 40 + 1, dtype=np.uint8)
    w = buf[1:].reshape(5, 40)  # odd address: the fp16 fields would be misaligned
    with pytest.raises(ValueError, match="multiple of 2"):
        kernels.matmul(w, T.Q4_1, np.ones(64, np.float32))


def test_matmul_rejects_bad_out():
    w, x = q4_1_rows(), np.ones((3, 64), dtype=np.float32)
    mat = kernels.prepare(w, T.Q4_1)
    with pytest.raises(ValueError, match=r"shape \(3, 5\)"):
        mat.matmul(x, out=np.empty((5, 3), np.float32))
    with pytest.raises(TypeError, match="float32"):
        mat.matmul(x, out=np.empty((3, 5), np.float64))
    ro = np.empty((3, 5), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writable"):
        mat.matmul(x, out=ro)
    big = np.zeros((3, 64), np.float32)
    with pytest.raises(ValueError, match="overlap"):
        mat.matmul(big, out=big.reshape(-1)[:15].reshape(3, 5))


def test_empty_shapes():
    assert kernels.matmul(q4_1_rows(), T.Q4_1, np.ones((0, 64), np.float32)).shape == (0, 5)
    assert kernels.matmul(np.zeros((0, 40), np.uint8), T.Q4_1, np.ones((2, 64), np.float32)).shape == (2, 0)


def test_dequantize_row_and_quantize_checks():
    raw = np.zeros(20, np.uint8)
    with pytest.raises(ValueError, match="multiple of the Q4_1 block size 32"):
        kernels.dequantize_row(raw, T.Q4_1, 33)
    with pytest.raises(ValueError, match="take 40 bytes"):
        kernels.dequantize_row(raw, T.Q4_1, 64)
    with pytest.raises(TypeError, match="n is an int"):
        kernels.dequantize_row(raw, T.Q4_1, 32.0)
    assert kernels.dequantize_row(raw, T.Q4_1, 32).shape == (32,)
    with pytest.raises(UnsupportedQuantType, match="not an activation type"):
        kernels.quantize_activations(np.ones(32, np.float32), T.Q4_0)
    with pytest.raises(ValueError, match="multiple of the Q8_K block size 256"):
        kernels.quantize_activations(np.ones(32, np.float32), T.Q8_K)
    assert kernels.quantize_activations(np.ones((2, 32), np.float32), T.Q8_0).shape == (2, 34)


@pytest.mark.parametrize("bad, error", [(0, ValueError), (-1, ValueError), (257, ValueError), (1.5, TypeError),
                                        (True, TypeError), ("2", TypeError)])
def test_set_threads_rejects(bad, error):
    with pytest.raises(error):
        kernels.set_threads(bad)


@pytest.mark.parametrize("bad, error", [(-1, ValueError), (kernels.STREAM_AHEAD_MAX + 1, ValueError),
                                        (64.0, TypeError), (True, TypeError)])
def test_set_stream_ahead_rejects(bad, error):
    with pytest.raises(error):
        kernels.set_stream_ahead(bad)


def test_stream_ahead_round_trip():
    before = kernels.set_stream_ahead(4096)
    try:
        assert kernels.set_stream_ahead(0) == 4096
    finally:
        assert kernels.set_stream_ahead(before) == 0


def test_pool_alone_is_per_thread_and_changes_no_result():
    import threading
    raw = np.random.default_rng(0).integers(0, 256, size=(256, 8 * 34), dtype=np.uint8)
    raw.reshape(-1, 34)[:, :2] = np.frombuffer(np.float16(0.01).tobytes(), np.uint8)   # finite scales
    mat = kernels.prepare(raw, T.Q8_0)
    x = np.random.default_rng(1).standard_normal((3, 256)).astype(np.float32)
    pooled = mat.matmul(x)
    assert kernels.set_pool_alone(True) is False
    try:
        seen = []
        other = threading.Thread(target=lambda: seen.append(kernels.set_pool_alone(False)))
        other.start()
        other.join()
        assert seen == [False]   # another thread's own setting
        np.testing.assert_array_equal(mat.matmul(x), pooled)
    finally:
        assert kernels.set_pool_alone(False) is True


def test_threads_round_trip():
    before = kernels.get_threads()
    try:
        kernels.set_threads(3)
        assert kernels.get_threads() == 3
    finally:
        kernels.set_threads(before)
    assert 1 <= kernels.get_threads() <= (os.cpu_count() or 1)


# --- ISA selection ---------------------------------------------------------------------------


def test_isa_lists():
    assert kernels.supported_isas()[0] == "generic"
    assert set(kernels.supported_isas()) <= set(kernels.built_isas())
    # the best one by default, or the one $LOCALINFER_ISA asks for (e.g. the AVX2 kernels on an
    # AVX-512 machine, as their figures are checked)
    assert kernels.isa() == (os.environ.get("LOCALINFER_ISA") or kernels.supported_isas()[-1])


def test_force_isa():
    for name in kernels.supported_isas():
        with kernels._isa(name):
            assert kernels.isa() == name
    with pytest.raises(ValueError, match="unknown ISA"):
        kernels._force_isa("sse9")
    unsupported = [n for n in kernels.built_isas() if n not in kernels.supported_isas()]
    for name in unsupported:
        with pytest.raises(ValueError, match="cannot run"):
            kernels._force_isa(name)


@pytest.mark.parametrize("name", ["generic", "avx2", "avx512", "neon"])
def test_isa_environment_variable(name):
    r = run_python("from localinfer.backend import kernels; print(kernels.isa())", {"LOCALINFER_ISA": name})
    assert r.returncode == 0, r.stderr
    if name in kernels.supported_isas():
        assert r.stdout.strip() == name
        assert r.stderr == ""
    else:  # clamped to the best supported one, with a warning
        assert r.stdout.strip() == kernels.supported_isas()[-1]
        assert "LOCALINFER_ISA" in r.stderr


# --- the pool ----------------------------------------------------------------------------------


def _matmul_in_child(queue):
    w = q4_1_rows(64, 4)
    kernels.set_threads(2)
    queue.put(float(kernels.matmul(w, T.Q4_1, np.ones((8, 128), np.float32)).sum()))


def test_pool_survives_fork():
    w = q4_1_rows(64, 4)
    before = kernels.get_threads()
    kernels.set_threads(2)
    try:
        want = float(kernels.matmul(w, T.Q4_1, np.ones((8, 128), np.float32)).sum())  # workers started
        ctx = multiprocessing.get_context("fork")
        queue = ctx.Queue()
        child = ctx.Process(target=_matmul_in_child, args=(queue,))
        child.start()
        child.join(60)
        assert child.exitcode == 0, "the forked child hung or crashed in matmul"
        assert queue.get(timeout=5) == want
    finally:
        kernels.set_threads(before)


def test_idle_pool_uses_no_cpu():
    before = kernels.get_threads()
    kernels.set_threads(2)
    try:
        w = q4_1_rows(256, 8)
        x = np.ones((16, 256), np.float32)
        kernels.matmul(w, T.Q4_1, x)  # workers exist and have just finished
        time.sleep(0.05)              # past their spin window
        c0, t0 = time.process_time(), time.perf_counter()
        time.sleep(0.5)
        used = (time.process_time() - c0) / (time.perf_counter() - t0)
        assert used < 0.05, f"the idle pool used {used:.0%} of a CPU"
    finally:
        kernels.set_threads(before)


def test_concurrent_callers_get_the_same_answer():
    import threading

    w = q4_1_rows(200, 8)
    x = np.random.default_rng(0).standard_normal((9, 256)).astype(np.float32)
    want = kernels.matmul(w, T.Q4_1, x)
    results, errors = [], []

    def worker():
        try:
            for _ in range(20):
                results.append(kernels.matmul(w, T.Q4_1, x))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert len(results) == 80
    for r in results:
        np.testing.assert_array_equal(r, want)


# --- not built ---------------------------------------------------------------------------------


def test_unavailable_kernels_report_cleanly():
    code = (
        "import sys; sys.modules['localinfer._kernels'] = None\n"
        "from localinfer.backend import kernels\n"
        "assert not kernels.available()\n"
        "print(kernels.unavailable_reason())\n"
        "import numpy as np\n"
        "try:\n"
        "    kernels.matmul(np.zeros((1, 20), np.uint8), 3, np.zeros(32, np.float32))\n"
        "except kernels.KernelsUnavailable as e:\n"
        "    print('raised', e)\n"
    )
    r = run_python(code)
    assert r.returncode == 0, r.stderr
    assert "not built" in r.stdout and "raised" in r.stdout


def test_memory_bandwidth_checks_its_arguments_and_measures():
    from localinfer.backend import kernels as k
    if not k.available():
        pytest.skip("C kernels not built")
    for bad, err in (((1 << 19,), ValueError), ((1.5e6,), TypeError), ((1 << 20, 0), ValueError),
                     ((True,), TypeError), ((1 << 20, "5"), TypeError)):
        with pytest.raises(err):
            k.memory_bandwidth(*bad)
    bw = k.memory_bandwidth(4 << 20, reps=1)  # small: only that it runs and returns positive rates
    assert bw["read_bps"] > 0 and bw["copy_bps"] > 0
    assert k.memory_bandwidth(1 << 20, reps=1, copy=False)["copy_bps"] is None
