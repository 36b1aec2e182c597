"""The streaming dots keep their prefetches in the built library.

Decode at 1B-8B reads each weight matrix once per token, and the dots that stream it ask for the
bytes `li_stream_ahead()` further on while they work (core/li.h `li_prefetch_ahead`; BENCHMARKS.md
"Streaming prefetch"): 1.2-1.5x decode on Zen 3 and an Intel Xeon. A prefetch changes no result, so
no test of the numbers can see it go; one refactor put the loop into a helper that GCC -O3 then
dropped, and decode fell back with every test passing. Here the disassembly of each dot that the ISA
tables count on to prefetch (their vec_dot_prefetches, and every x4 dot) must hold a prefetch
instruction. Both x86 variants are in every x86 build, so this runs on any x86 CPU."""
from __future__ import annotations

import platform
import re
import shutil
import subprocess

import pytest

from localinfer.backend import kernels

pytestmark = [
    pytest.mark.skipif(not kernels.available(), reason="C kernels not built"),
    pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="the x86 dots only"),
    pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils) not installed"),
]

PREFETCHING = {
    "avx2": ["vec_dot_x4_q4_0_q8_0_avx2", "vec_dot_x4_q8_0_q8_0_avx2", "vec_dot_x4_q4_K_q8_K_avx2",
             "vec_dot_q6_K_q8_K_avx2", "vec_dot_m_q6_K_q8_K_avx2",
             "vec_dot_rows_q4_0_q8_0_avx2", "vec_dot_rows_q4_1_q8_1_avx2", "vec_dot_rows_q5_0_q8_0_avx2",
             "vec_dot_rows_q5_1_q8_1_avx2", "vec_dot_rows_q8_0_q8_0_avx2"],
    "avx512": ["vec_dot_x4_q4_0_q8_0_avx512", "vec_dot_x4_q8_0_q8_0_avx512", "vec_dot_x4_q4_K_q8_K_avx512",
               "vec_dot_x4_q6_K_q8_K_avx512"],
}
_SYMBOL = re.compile(r"^[0-9a-f]+ <([^>]+)>:$")


@pytest.fixture(scope="module")
def functions() -> dict[str, list[str]]:
    """{symbol: its instructions} of the loaded kernel library."""
    from localinfer import _kernels
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", _kernels.__file__], capture_output=True,
                          text=True, check=True).stdout
    out: dict[str, list[str]] = {}
    lines = None
    for line in text.splitlines():
        if m := _SYMBOL.match(line):
            lines = out.setdefault(m.group(1), [])
        elif lines is not None and line.strip():
            lines.append(line)
    return out


def _body(functions: dict[str, list[str]], name: str) -> list[str]:
    """The function's instructions, with those of the parts GCC split off (name.part.0, name.cold...)."""
    parts = [f for f in functions if f == name or f.startswith(name + ".")]
    assert parts, f"{name} is not in the built library (renamed? then rename it here too)"
    return [line for f in parts for line in functions[f]]


@pytest.mark.parametrize("name", [n for isa in PREFETCHING for n in PREFETCHING[isa]])
def test_each_streaming_dot_prefetches(functions, name):
    assert any("prefetch" in line for line in _body(functions, name)), (
        f"{name} has no prefetch instruction: the compiler dropped li_prefetch_ahead's loop (core/li.h)")
