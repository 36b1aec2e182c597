"""What the model fetchers share (files/fetch.py for the catalog, files/hf.py for Hugging Face): the
cache folder, their errors, and the `.verified` stamps that spare hashing a file checked before.

A stamp records the size, mtime_ns and inode a file had and the SHA-256 it matched; while the file
still has them it is trusted without hashing again.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from .regular_file import atomic_write, open_regular

CHUNK = 1 << 20
STAMP_SUFFIX = ".verified"
MAX_STAMP_BYTES = 4096  # a stamp is one small JSON object: more is damage, read no further

log = logging.getLogger(__name__)


class ModelNotFoundError(LookupError):
    pass


class FetchError(RuntimeError):
    pass


def cache_dir() -> Path:
    """$LOCALINFER_CACHE, else $XDG_CACHE_HOME/localinfer, else ~/.cache/localinfer."""
    if os.environ.get("LOCALINFER_CACHE"):
        return Path(os.environ["LOCALINFER_CACHE"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "localinfer"


def stamp_path(path: Path) -> Path:
    return path.with_name(path.name + STAMP_SUFFIX)


def stamp_key(st: os.stat_result, sha256: str) -> dict:
    # Any write moves mtime; a file put in place by rename (cp -p, rsync) has a new inode.
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino, "sha256": sha256}


def read_stamp(stamp: Path) -> dict | None:
    """The stamp file's contents, or None for a missing or damaged one (or a FIFO or device in its
    place, which a plain open would block on or read forever)."""
    try:
        with open_regular(stamp) as f:
            data = json.loads(f.read(MAX_STAMP_BYTES))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def write_stamp(stamp: Path, key: dict) -> None:
    """Atomically (a reader sees the old stamp or the new one); a cache we cannot write to only
    means the next check hashes again."""
    try:
        # 0644: mkstemp's 0600 would hide it from other users of a shared cache
        with atomic_write(stamp, durable=False, mode=0o644) as f:
            f.write(json.dumps(key).encode())
    except OSError as e:
        log.debug("could not write %s: %s", stamp, e)


def remove_stamp(path: Path) -> None:
    try:
        stamp_path(path).unlink(missing_ok=True)
    except OSError as e:  # harmless: a stamp only matches the file it was written for
        log.debug("could not remove %s: %s", stamp_path(path), e)


def sha256_file(path: Path) -> str:
    import hashlib   # only when a file is hashed: a start that trusts its stamp loads no OpenSSL
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()
