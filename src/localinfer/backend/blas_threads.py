"""The thread count of numpy's BLAS, which it reads from the environment when numpy is first
imported: a process sets it here before anything imports numpy (the command line, a bench worker).
Nothing is imported here, so calling this imports nothing either."""
from __future__ import annotations

import os

BLAS_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def set_blas_threads(n: int | None) -> None:
    """n threads for OpenMP, OpenBLAS and MKL; None or 0 leaves the environment as it is."""
    if n:
        for var in BLAS_THREAD_VARS:
            os.environ[var] = str(n)
