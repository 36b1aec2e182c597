"""The aarch64 NEON kernels, cross-compiled and run under qemu-user, against the generic ones.

Skipped unless both aarch64-linux-gnu-gcc and qemu-aarch64(-static) are installed
(Debian: gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static). On an aarch64
machine the ordinary tests (tests/kernels/test_kernels.py) run the neon variant natively.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

CSRC = Path(__file__).resolve().parents[2] / "csrc"
CC = shutil.which("aarch64-linux-gnu-gcc")
QEMU = shutil.which("qemu-aarch64-static") or shutil.which("qemu-aarch64")
# the binary's own dispatch is under test: a LOCALINFER_ISA set for the host's kernels must not reach it
ENV = {k: v for k, v in os.environ.items() if k != "LOCALINFER_ISA"}

pytestmark = pytest.mark.skipif(not (CC and QEMU), reason="no aarch64 cross compiler or qemu-user")


@pytest.fixture(scope="module")
def neon_binary(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("neon") / "neon_vs_generic"
    # the library's files, as build_kernels.py picks them (every folder of csrc/ but tests/), and the test's main
    library = [str(p) for p in sorted(CSRC.glob("*/*.c")) if p.parent.name != "tests"]
    sources = library + [str(CSRC / "tests" / "neon_vs_generic.c")]
    cmd = [CC, "-O3", "-ffp-contract=off", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter",
           "-Werror", "-pthread", "-static", f"-I{CSRC}", *sources, "-o", str(out), "-lm"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="module")
def neon_run(neon_binary) -> subprocess.CompletedProcess:
    return subprocess.run([QEMU, str(neon_binary)], capture_output=True, text=True, timeout=300, env=ENV)


def test_neon_matches_generic(neon_run):
    assert neon_run.returncode == 0, neon_run.stdout + neon_run.stderr
    assert "isa at start: neon" in neon_run.stdout  # qemu's default CPU has dotprod: dispatch picks neon
    assert "all ok" in neon_run.stdout


# the types the neon table gives a dot product of its own (arm/neon_table.c): a slot lost from the
# table would leave the comparison above running generic against generic
NEON_DOTS = ["Q4_0", "Q4_1", "Q8_0", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
             "IQ4_NL", "IQ4_XS", "MXFP4", "TQ1_0", "TQ2_0",
             "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"]


@pytest.mark.parametrize("name", NEON_DOTS)
def test_neon_table_has_its_own_dot(neon_run, name):
    assert f"{name}: neon vec_dot yes" in neon_run.stdout.splitlines()


def test_without_dotprod_dispatch_falls_back_to_generic(neon_binary):
    r = subprocess.run([QEMU, "-cpu", "cortex-a53", str(neon_binary)], capture_output=True, text=True, timeout=300,
                       env=ENV)
    assert "isa at start: generic" in r.stdout
    assert "neon supported: 0" in r.stdout


CLANG = shutil.which("clang")


def test_neon_sources_build_with_clang(tmp_path):
    """The arm files under clang, which enables dotprod per function with `#pragma clang attribute`
    (arm/dot_neon.h says what older clangs need beside it). Compile only: the run is gcc's above."""
    if not CLANG:
        pytest.skip("no clang")
    probe = tmp_path / "probe.c"
    probe.write_text("#include <stdint.h>\n#include <arm_neon.h>\nint8x16_t f(void) { return vdupq_n_s8(1); }\n")
    target = [CLANG, "--target=aarch64-linux-gnu", "-O2", "-std=gnu11", f"-I{CSRC}"]
    if subprocess.run([*target, "-c", str(probe), "-o", str(tmp_path / "probe.o")], capture_output=True).returncode:
        pytest.skip("clang cannot build for aarch64-linux-gnu here (no target headers)")
    for src in sorted((CSRC / "arm").glob("*.c")):
        r = subprocess.run([*target, "-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror", "-c", str(src),
                            "-o", str(tmp_path / (src.stem + ".o"))], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"{src.name}:\n{r.stderr}"
