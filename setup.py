"""Builds the optional C kernels (localinfer._kernels) with cffi; all metadata is in pyproject.toml.

If there is no C compiler, or the build fails for any other reason, the install
still succeeds: one message says the kernels were not built, and localinfer runs
on its numpy path (``localinfer.backend.kernels.available()`` is then False and
``localinfer.backend.kernels.unavailable_reason()`` says why).
"""

from setuptools import setup
from setuptools.command.build_ext import build_ext

NOT_BUILT = (
    "\n*** localinfer: the C kernels (localinfer._kernels) were not built ({}).\n"
    "*** localinfer is installed and works, but uses the slower numpy path.\n"
    "*** Install a C compiler (gcc or clang) and reinstall to get the fast kernels.\n"
)


class optional_build_ext(build_ext):
    """build_ext whose failure is a warning, not an error (the extension is optional)."""

    _warned = False

    def _not_built(self, err: BaseException) -> None:
        if not optional_build_ext._warned:
            optional_build_ext._warned = True
            reason = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
            print(NOT_BUILT.format(reason))

    def run(self):
        try:
            super().run()
        except Exception as err:  # no compiler at all (distutils raises before build_extension)
            self._not_built(err)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as err:  # the compiler failed on this extension
            self._not_built(err)


setup(
    cffi_modules=["csrc/build_kernels.py:ffibuilder"],
    cmdclass={"build_ext": optional_build_ext},
    # cffi compiles the module against the stable ABI (Py_LIMITED_API, hence _kernels.abi3.so), so
    # one wheel serves every CPython >= 3.10 (requires-python): tag it cp310-abi3, not cp311-cp311.
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
