"""cffi build script for ``localinfer._kernels`` (referenced from setup.py's cffi_modules).

Every C file in a folder of ``csrc/`` (``core/``, ``generic/``, ``x86/``, ``arm/``; not ``tests/``)
is compiled with baseline flags -- never ``-march=native`` -- because each SIMD file enables its
own ISA per function (``#pragma GCC target``), so one binary holds every variant and
``core/dispatch.c`` picks one at load time from cpuid. A file for another architecture compiles
to nothing (``#if defined(__aarch64__)`` ...), so a new ISA folder needs no change here.
``-ffp-contract=off`` keeps the compiler from fusing ``d * q + m`` into an fma:
the generic dequantizers must be bit-identical to the numpy oracle.

Run directly (``python csrc/build_kernels.py``) to compile the module in place: into
``src/localinfer/`` under the name an editable install gives it, so the checkout's tests load it.

``LOCALINFER_SANITIZE=address`` (or ``address,undefined``) builds with the sanitizers, for running
the kernel tests under AddressSanitizer; see csrc/README.md. Such a module only loads into a
process that has the sanitizer runtime preloaded, so it is never meant to be installed.
"""

from __future__ import annotations

import glob
import os
import shutil
import sys

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

HEADER = os.path.join(HERE, "localinfer.h")
CDEF_BEGIN, CDEF_END = "/* LI_CDEF_BEGIN */", "/* LI_CDEF_END */"


def cdef_from_header(path: str = HEADER) -> str:
    """The cffi declarations: the region of localinfer.h between its LI_CDEF_BEGIN and LI_CDEF_END
    lines, so the C API is declared once. cffi has no preprocessor (it drops comments itself), so a
    '#' line in the region is refused here rather than misread there."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    begin, end = text.find(CDEF_BEGIN), text.find(CDEF_END)
    if begin < 0 or end < begin:
        raise SystemExit(f"{path}: no {CDEF_BEGIN} ... {CDEF_END} region to take the cffi declarations from")
    region = text[begin + len(CDEF_BEGIN):end]
    for line in region.splitlines():
        if line.lstrip().startswith("#"):
            raise SystemExit(f"{path}: a preprocessor line in the cffi region, which cffi cannot parse: {line.strip()}")
    return region


def _rel(path: str) -> str:
    """Sources relative to the project root when building from it (what setuptools expects)."""
    rel = os.path.relpath(path, ROOT)
    return rel if os.path.abspath(os.getcwd()) == ROOT else path


def _in_library(path: str) -> bool:
    """csrc/tests/ holds stand-alone C programs (each with its own main), not library code."""
    return os.path.basename(os.path.dirname(path)) != "tests"


SOURCES = [_rel(p) for p in sorted(glob.glob(os.path.join(HERE, "*", "*.c"))) if _in_library(p)]
HEADERS = [_rel(p) for p in sorted(glob.glob(os.path.join(HERE, "*.h")) + glob.glob(os.path.join(HERE, "*", "*.h")))
           if _in_library(p)]

if sys.platform == "win32":
    EXTRA_COMPILE_ARGS = ["/O2", "/fp:precise"]
    EXTRA_LINK_ARGS: list[str] = []
else:
    EXTRA_COMPILE_ARGS = [
        "-O3",
        "-ffp-contract=off",
        "-std=gnu11",
        "-fvisibility=hidden",
        "-pthread",
        "-Wall",
        "-Wextra",
        "-Wno-unused-parameter",
        # a function called without a declaration gets its float arguments promoted to double
        "-Werror=implicit-function-declaration",
    ]
    EXTRA_LINK_ARGS = ["-pthread"]

SANITIZERS = ("address", "undefined", "address,undefined")
SANITIZE = os.environ.get("LOCALINFER_SANITIZE", "").strip()
if SANITIZE:
    if SANITIZE not in SANITIZERS or sys.platform == "win32":
        raise SystemExit(f"LOCALINFER_SANITIZE={SANITIZE!r}: expected one of {', '.join(SANITIZERS)} "
                         "(gcc or clang)")
    print(f"*** localinfer: building the C kernels with -fsanitize={SANITIZE} (a test build, not for "
          "installing)", file=sys.stderr)
    # -O1 and frame pointers: the sanitizers' advice for readable stack traces at a bearable speed
    # (it comes after -O3, so it wins). A UB report stops the process, so the test run fails.
    EXTRA_COMPILE_ARGS += [f"-fsanitize={SANITIZE}", "-fno-omit-frame-pointer", "-g", "-O1"]
    if "undefined" in SANITIZE:
        EXTRA_COMPILE_ARGS.append("-fno-sanitize-recover=undefined")
    EXTRA_LINK_ARGS += [f"-fsanitize={SANITIZE}"]


def _make_ffibuilder(sources: list[str], headers: list[str], include_dir: str) -> FFI:
    builder = FFI()
    builder.cdef(cdef_from_header())
    builder.set_source(
        "localinfer._kernels",
        '#include "localinfer.h"',
        sources=sources,
        depends=headers,
        include_dirs=[include_dir],
        extra_compile_args=EXTRA_COMPILE_ARGS,
        extra_link_args=EXTRA_LINK_ARGS,
        libraries=[] if sys.platform == "win32" else ["m"],
    )
    return builder


ffibuilder = _make_ffibuilder(SOURCES, HEADERS, _rel(HERE))


def build_in_place() -> str:
    """Compile into src/localinfer/_kernels.abi3.so (.pyd on Windows), the file an editable
    install makes. cffi compiles from inside its build folder, so every path here is absolute.
    The new file replaces the old one by rename: a process that has the old one loaded keeps it."""
    builder = _make_ffibuilder([os.path.join(ROOT, p) for p in SOURCES],
                               [os.path.join(ROOT, p) for p in HEADERS], HERE)
    name = "_kernels.pyd" if sys.platform == "win32" else "_kernels.abi3.so"
    tmpdir = os.path.join(ROOT, "build", ("cffi-" + SANITIZE.replace(",", "-")) if SANITIZE else "cffi")
    built = builder.compile(tmpdir=tmpdir, target=name, verbose=True)
    package = os.path.join(ROOT, "src", "localinfer")
    dest = os.path.join(package, name)
    shutil.copyfile(built, dest + ".tmp")
    shutil.copymode(built, dest + ".tmp")
    os.replace(dest + ".tmp", dest)
    # Python prefers _kernels.cpython-3XX-*.so to _kernels.abi3.so: such a leftover would hide this build.
    for other in glob.glob(os.path.join(package, "_kernels.*")):
        if other != dest and other.endswith((".so", ".pyd")):
            print(f"removing {other}, which would be imported instead of {dest}")
            os.remove(other)
    return dest


if __name__ == "__main__":
    print(build_in_place())
