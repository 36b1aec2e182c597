"""The prefix cache's blocks in a folder, so that a restarted server reuses what the last one
computed (`serve --prefix-cache-dir`): a long shared system prompt is read back, not recomputed.

One file per block, in the state format (kv/state_file.py): its header names the model
(session_state.model_identity), the block's layout (each array's dtype and shape: the cache
type) and the block's chain key; the payload is the block's arrays, under a checksum. The file
name is <model+layout hash>-<chain key>.kvblock, so models and cache types sharing a folder never
read each other's blocks; the header is checked all the same. A file that fails any check
(truncated, corrupt, hostile, written for something else: any error while reading it) is counted,
deleted and recomputed, never used; that costs the one request its reuse, never its answer or
anyone else's. The names are the store's own, so a block is opened as a regular file and never
through a symlink (files/regular_file.py): a FIFO, device or link planted under a block's name is
refused without blocking and left alone (only regular files of the folder are ever deleted).

Blocks are written when computed (with the in-memory cache's store), atomically. The folder
holds at most `max_bytes` of this model's blocks: the least recently used files (by mtime, which
a read refreshes) are deleted first. Blocks are never fsynced: a block lost in a power cut is
only recomputed, and a damaged one fails its checksum.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections import OrderedDict

import numpy as np

from ..kv import contents as cache_state
from ..files.regular_file import unlink_regular
from ..kv.state_file import StateFileError, check_same, read_state, write_state

log = logging.getLogger(__name__)
SUFFIX = ".kvblock"
STALE_TMP_S = 3600


def block_layout(cache, block_size: int) -> dict:
    """What a block of this cache holds: each array's dtype and block shape, and the cache class."""
    _, ring = cache_state.block_names(cache)
    return {"type": type(cache).__name__, "block_size": block_size,
            "arrays": {name: [dtype, list(shape)] for name, (dtype, shape) in
                       sorted(cache_state.block_shapes(cache, block_size).items())},
            "ring": sorted(ring)}


class PrefixStore:
    def __init__(self, folder: str | os.PathLike, max_bytes: int, model_identity: str, block_size: int):
        if max_bytes < 0:
            raise ValueError(f"the prefix cache folder's size must be >= 0, got {max_bytes}")
        if not model_identity:
            raise ValueError("a prefix cache folder needs the model's identity (Model.identity)")
        self.folder, self.max_bytes, self.identity = os.fspath(folder), max_bytes, model_identity
        self.block_size = block_size
        os.makedirs(self.folder, exist_ok=True)
        self._layouts: dict[tuple, tuple[dict, str]] = {}  # cache shape -> (layout, file name prefix)
        self._files: OrderedDict[str, int] = OrderedDict()  # file name -> bytes, least recent first
        self.nbytes = 0
        self.loaded = self.written = self.rejected = 0
        self._lock = threading.Lock()
        self._scanned_prefixes: set[str] = set()

    def _layout(self, cache) -> tuple[dict, str]:
        sig = (type(cache).__name__, tuple(sorted(cache_state.block_shapes(cache, self.block_size).items())))
        if sig not in self._layouts:
            layout = block_layout(cache, self.block_size)
            text = json.dumps([self.identity, layout], sort_keys=True).encode()
            prefix = hashlib.blake2b(text, digest_size=8).hexdigest()
            self._layouts[sig] = (layout, prefix)
            self._scan(prefix)
        return self._layouts[sig]

    def _scan(self, prefix: str) -> None:
        """Counts the files an earlier run left for this model and layout, oldest first."""
        if prefix in self._scanned_prefixes:
            return
        self._scanned_prefixes.add(prefix)
        found, now = [], time.time()
        try:
            entries = list(os.scandir(self.folder))
        except OSError as e:  # the folder went away or became unreadable: nothing to count
            log.warning("cannot list the prefix cache folder %s: %s", self.folder, e)
            return
        for entry in entries:
            try:
                if (entry.name.startswith(".tmp-") and entry.is_file(follow_symlinks=False)
                        and now - entry.stat(follow_symlinks=False).st_mtime > STALE_TMP_S):
                    _unlink(entry.path)  # a write cut short by a crash (a live one is seconds old)
                    continue
                if (entry.name.startswith(prefix + "-") and entry.name.endswith(SUFFIX)
                        and entry.is_file(follow_symlinks=False)):
                    st = entry.stat(follow_symlinks=False)
                    found.append((st.st_mtime, entry.name, st.st_size))
            except OSError:  # deleted meanwhile (another server evicting from the same folder)
                continue
        for _, name, size in sorted(found):
            self._files[name] = size
            self.nbytes += size
        self._evict()

    def _name(self, prefix: str, key: bytes) -> str:
        return f"{prefix}-{key.hex()}{SUFFIX}"

    def save(self, key: bytes, arrays: dict[str, np.ndarray], cache) -> None:
        if self.max_bytes == 0:
            return
        layout, prefix = self._layout(cache)
        name = self._name(prefix, key)
        path = os.path.join(self.folder, name)
        header = {"kind": "prefix-block", "model": self.identity, "layout": layout, "key": key.hex()}
        try:
            write_state(path, header, arrays, durable=False)
            size = os.path.getsize(path)
        except OSError as e:  # a full or read-only disk costs the reuse, never the request
            log.warning("cannot write prefix block %s: %s", path, e)
            return
        with self._lock:
            self.nbytes += size - self._files.pop(name, 0)
            self._files[name] = size
            self.written += 1
            self._evict()

    def load(self, key: bytes, cache) -> dict[str, np.ndarray] | None:
        """The block's arrays, or None when there is no usable file for it."""
        if self.max_bytes == 0:
            return None
        layout, prefix = self._layout(cache)
        name = self._name(prefix, key)
        path = os.path.join(self.folder, name)
        if name not in self._files and not os.path.exists(path):
            return None

        def check(header: dict) -> None:
            check_same(path, "block kind", header.get("kind"), "prefix-block")
            check_same(path, "the model", header.get("model"), self.identity)
            check_same(path, "the cache layout", header.get("layout"), layout)
            check_same(path, "the block key", header.get("key"), key.hex())

        try:
            _, arrays = read_state(path, check, follow_symlinks=False)
            if set(arrays) - set(layout["arrays"]) or not set(layout["arrays"]) - set(layout["ring"]) <= set(arrays):
                raise StateFileError(f"{path}: the block's arrays are not those of the layout")
            for n, a in arrays.items():
                dtype, shape = layout["arrays"][n]
                if a.dtype.name != dtype or list(a.shape) != shape:
                    raise StateFileError(f"{path}: array {n} is {a.dtype} {a.shape}, expected {dtype} {shape}")
        except Exception as e:  # whatever reading a damaged or hostile file raised: recompute
            log.warning("prefix block not used (recomputed): %s: %s", type(e).__name__, str(e)[:300])
            with self._lock:
                self.rejected += 1
                self.nbytes -= self._files.pop(name, 0)
            _unlink(path)
            return None
        with self._lock:
            self.loaded += 1
            if name in self._files:
                self._files.move_to_end(name)
        try:
            os.utime(path)  # most recently used, for the next run's scan
        except OSError:
            pass
        return arrays

    def _evict(self) -> None:
        while self.nbytes > self.max_bytes and self._files:
            name, size = self._files.popitem(last=False)
            self.nbytes -= size
            _unlink(os.path.join(self.folder, name))


def _unlink(path: str) -> None:
    unlink_regular(path)
