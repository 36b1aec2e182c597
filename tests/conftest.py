"""Shared fixtures: the real models (fetched into the user cache on first use) and the
llama.cpp reference data in ../shared/refdata (or $LOCALINFER_REFDATA)."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from localinfer.files.fetch import cache_dir, resolve_model
from localinfer.files.gguf_file import GGUFFile
from refdata import refdata_root

SMOLLM2_REF = "smollm2-135m-instruct-q4_1"
GEMMA3_REF = "gemma-3-270m-q4_k_m"

# numba keeps the quantizers it compiles (quant/, cache=True) in quant/__pycache__, which a clean
# checkout lacks: about a minute of compiling on 2 cores. Kept beside the models instead, a clean
# checkout at the same path (CI's) finds them; numba keys them by the source's path and content.
# Set here, before anything imports numba (its config is read once, at import).
os.environ.setdefault("NUMBA_CACHE_DIR", str(cache_dir() / "numba"))
# The CUDA path's kernels (backend/cuda/, tests/cuda/) run in numba.cuda's simulator on a machine
# without an NVIDIA driver; with one, on the device. Also read once, at numba's import.
if shutil.which("nvidia-smi") is None:
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")


@pytest.fixture(scope="session")
def refdata_dir() -> Path:
    d = refdata_root()
    if d is None:
        pytest.skip("llama.cpp reference data not found (set LOCALINFER_REFDATA)")
    return d


@pytest.fixture(scope="session")
def load_ref(refdata_dir):
    def load(kind: str, model: str = SMOLLM2_REF) -> dict:
        return json.loads((refdata_dir / "public" / f"{kind}-{model}.json").read_text())
    return load


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    return resolve_model("smollm2")


@pytest.fixture(scope="session")
def gemma3_path() -> Path:
    return resolve_model("gemma3")


@pytest.fixture(scope="session")
def smollm2_metadata(smollm2_path) -> dict:
    with GGUFFile(smollm2_path) as f:
        return dict(f.metadata)


@pytest.fixture(scope="session")
def gemma3_metadata(gemma3_path) -> dict:
    with GGUFFile(gemma3_path) as f:
        return dict(f.metadata)


@pytest.fixture(scope="session")
def smollm2_model(smollm2_path):
    import localinfer
    return localinfer.load(str(smollm2_path))
