"""The AVX2 panel packers against the portable path, byte for byte, in C (csrc/tests/panels_avx2_vs_generic.c):
the activation packer for every activation type, offset and corr layout, and the x4 weight packers,
which the GEMM's own tests reach only for the types this CPU repacks (never Q6_K on AVX2).

Built from the library's sources with this machine's C compiler; skipped where there is none, or where
the CPU has no AVX2."""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from localinfer.backend import kernels

CSRC = Path(__file__).resolve().parents[2] / "csrc"
CC = shutil.which("gcc") or shutil.which("cc")
ENV = {k: v for k, v in os.environ.items() if k != "LOCALINFER_ISA"}  # the binary picks the CPU's best

pytestmark = pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64") or not CC or not kernels.available()
    or "avx2" not in kernels.supported_isas(), reason="needs an x86-64 CPU with AVX2 and a C compiler")


@pytest.mark.slow  # compiling the library takes ~20-40 s
def test_avx2_panels_match_the_portable_ones(tmp_path):
    binary = tmp_path / "panels_avx2_vs_generic"
    library = [str(p) for p in sorted(CSRC.glob("*/*.c")) if p.parent.name != "tests"]
    cmd = [CC, "-O1", "-std=gnu11", "-pthread", f"-I{CSRC}", *library,
           str(CSRC / "tests" / "panels_avx2_vs_generic.c"), "-o", str(binary), "-lm"]
    built = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-2000:]
    run = subprocess.run([str(binary)], capture_output=True, text=True, timeout=300, env=ENV)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert run.stdout.strip().endswith(" 0 differ"), run.stdout
