"""Where numba.cuda comes from, and the clear errors when it cannot run: no numba-cuda installed, or
no CUDA device (and no simulator asked for with NUMBA_ENABLE_CUDASIM=1)."""
from __future__ import annotations

import os


class CudaUnavailable(RuntimeError):
    """The CUDA path cannot run here; the message says why and what to do."""


def cuda_module():
    try:
        from numba import cuda
    except ImportError as e:
        raise CudaUnavailable(f"the CUDA path needs numba-cuda: pip install 'localinfer[cuda]' ({e})") from None
    return cuda


def simulated() -> bool:
    return os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def check_available() -> None:
    """Raises CudaUnavailable unless a device (or the simulator) can run the kernels."""
    cuda = cuda_module()
    if simulated():
        return
    try:
        ok = cuda.is_available()
    except Exception as e:   # a driver that fails to initialise says so its own way
        raise CudaUnavailable(f"no usable CUDA device: {e}") from None
    if not ok:
        raise CudaUnavailable("no CUDA device found (NUMBA_ENABLE_CUDASIM=1 runs the kernels on the CPU, slowly)")
