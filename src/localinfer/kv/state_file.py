"""The on-disk format of saved KV state (a chat session's cache, a prefix-cache block).

    magic b"LISTATE\\0" | version u32 | header_len u32 | header (JSON, utf-8)
    payload: the arrays named in header["arrays"], raw little-endian, in that order
    checksum: blake2b-256 of everything before it

The header says what the payload is (model identity, cache layout, token count ...) and lists
each array's name, dtype and shape. A reader checks, before it allocates anything, that the
header is small, the dtypes are known, the shapes add up to exactly the bytes in the file, and
the checksum matches; only then does it hand out the arrays. So a truncated, bit-flipped or
hostile file raises StateFileError (a ValueError) naming what is wrong, and never loads as
garbage; so does a header nested deeper than MAX_HEADER_DEPTH, which no writer makes. Files are
opened and replaced through files/regular_file.py: a FIFO, device or directory at the path is refused
(StateFileError when reading, NotRegularFileError when writing), never read from or replaced.
Writes go to a temporary file in the same folder that is renamed over the target when complete:
a crash leaves the old file or no file, never half of one that later loads.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
from typing import Mapping

import numpy as np

from ..files.regular_file import NotRegularFileError, atomic_write, open_regular

MAGIC = b"LISTATE\0"
VERSION = 1
MAX_HEADER_BYTES = 4 << 20  # a header holds names, shapes and a chat's messages: far below this
MAX_HEADER_DEPTH = 64  # nesting of the header's JSON: a layout or a chat message (tool arguments too) is a few levels
MAX_ARRAYS = 4096
MAX_DIMS = 8
_PREFIX = struct.Struct("<8sII")  # magic, version, header_len
_CHECKSUM_BYTES = 32
# dtypes a cache may hold: float K/V and the raw uint8 blocks of quantized caches; tokens int32
_DTYPES = {"float16": np.float16, "float32": np.float32, "uint8": np.uint8, "int8": np.int8,
           "int32": np.int32, "int64": np.int64, "uint16": np.uint16}


class StateFileError(ValueError):
    """A state file that cannot be used: truncated, corrupt, hostile or of another version."""


class StateMismatchError(StateFileError):
    """A valid state file made for another model, cache type or shape; the message names what differs."""


def write_state(path: str | os.PathLike, header: Mapping, arrays: Mapping[str, np.ndarray],
                durable: bool = True) -> None:
    """Writes header + arrays to `path` atomically (a temporary file renamed over it); `durable`
    also flushes it to the disk first (fsync), so a power cut leaves the old file or the new one.
    Raises NotRegularFileError (an OSError), writing nothing, when `path` is a FIFO, a device or a
    directory."""
    header = dict(header)
    header["arrays"] = [[name, a.dtype.name, list(a.shape)] for name, a in arrays.items()]
    for name, dtype, _ in header["arrays"]:
        if dtype not in _DTYPES:
            raise TypeError(f"array {name!r} has dtype {dtype}, which a state file cannot hold")
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    if len(head) > MAX_HEADER_BYTES:
        raise ValueError(f"the state header would be {len(head)} bytes (at most {MAX_HEADER_BYTES})")
    if _depth_exceeds(header, MAX_HEADER_DEPTH):  # a reader would refuse it: do not write it
        raise ValueError(f"the state header would nest deeper than {MAX_HEADER_DEPTH} levels")
    digest = hashlib.blake2b(digest_size=_CHECKSUM_BYTES)
    with atomic_write(path, durable) as f:
        for part in (_PREFIX.pack(MAGIC, VERSION, len(head)), head):
            f.write(part)
            digest.update(part)
        for a in arrays.values():
            data = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False)
            view = memoryview(data).cast("B")
            f.write(view)
            digest.update(view)
        f.write(digest.digest())


def _array_specs(header: dict, path: str) -> list[tuple[str, np.dtype, tuple[int, ...], int]]:
    specs = header.get("arrays")
    if not isinstance(specs, list) or len(specs) > MAX_ARRAYS:
        raise StateFileError(f"{path}: the header's array list is missing or too long")
    out = []
    for spec in specs:
        if not (isinstance(spec, list) and len(spec) == 3 and isinstance(spec[0], str)
                and spec[1] in _DTYPES and isinstance(spec[2], list) and len(spec[2]) <= MAX_DIMS
                and all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 1 << 40 for d in spec[2])):
            raise StateFileError(f"{path}: bad array entry in the header: {str(spec)[:200]}")
        dtype = np.dtype(_DTYPES[spec[1]])
        nbytes = dtype.itemsize
        for d in spec[2]:
            nbytes *= d  # python ints: no overflow; compared with the file size before any allocation
        out.append((spec[0], dtype, tuple(spec[2]), nbytes))
    return out


def _open(path: str, follow_symlinks: bool):
    try:
        return open_regular(path, follow_symlinks)
    except NotRegularFileError as e:
        raise StateFileError(str(e)) from None


def read_header(path: str | os.PathLike) -> dict:
    """The header alone (checked for size and syntax, not against the payload)."""
    path = os.fspath(path)
    with _open(path, True) as f:
        return _read_header(f, path)[0]


def _read_header(f, path: str) -> tuple[dict, int]:
    prefix = f.read(_PREFIX.size)
    if len(prefix) < _PREFIX.size:
        raise StateFileError(f"{path}: truncated ({len(prefix)} bytes): not a state file")
    magic, version, head_len = _PREFIX.unpack(prefix)
    if magic != MAGIC:
        raise StateFileError(f"{path}: not a localinfer state file (magic {magic!r})")
    if version != VERSION:
        raise StateFileError(f"{path}: state format version {version}, this localinfer reads {VERSION}")
    if head_len > MAX_HEADER_BYTES:
        raise StateFileError(f"{path}: header of {head_len} bytes (at most {MAX_HEADER_BYTES})")
    head = f.read(head_len)
    if len(head) < head_len:
        raise StateFileError(f"{path}: truncated inside the header")
    try:
        header = json.loads(head.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise StateFileError(f"{path}: the header is not valid JSON ({e})") from None
    except RecursionError:  # nested past the interpreter's stack before MAX_HEADER_DEPTH was checked
        raise StateFileError(f"{path}: the header is nested deeper than {MAX_HEADER_DEPTH} levels") from None
    if not isinstance(header, dict):
        raise StateFileError(f"{path}: the header is not a JSON object")
    if _depth_exceeds(header, MAX_HEADER_DEPTH):
        raise StateFileError(f"{path}: the header is nested deeper than {MAX_HEADER_DEPTH} levels")
    return header, _PREFIX.size + head_len


def _depth_exceeds(value, limit: int) -> bool:
    """Whether parsed JSON nests lists/objects deeper than `limit` (walked without recursion, so
    the check itself cannot overflow the stack; the code that reads the header recurses freely)."""
    stack = [(value, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


def read_state(path: str | os.PathLike, check=None, follow_symlinks: bool = True) -> tuple[dict, dict[str, np.ndarray]]:
    """(header, {name: array}) of a whole, uncorrupted file. `check(header)`, when given, runs
    after the header is read and before the payload is: it raises StateMismatchError for a file
    made for something else, so no payload is read for it. follow_symlinks=False refuses a
    symlink (where the caller chose the file's name itself)."""
    path = os.fspath(path)
    with _open(path, follow_symlinks) as f:
        size = os.fstat(f.fileno()).st_size
        header, start = _read_header(f, path)
        specs = _array_specs(header, path)
        payload = sum(s[3] for s in specs)
        if start + payload + _CHECKSUM_BYTES != size:
            raise StateFileError(f"{path}: {size} bytes, but its header describes "
                                 f"{start + payload + _CHECKSUM_BYTES} (truncated or corrupt)")
        if check is not None:
            check(header)
        f.seek(0)
        data = f.read(size)  # bounded by the real file size, checked above
    if len(data) != size:
        raise StateFileError(f"{path}: changed while being read")
    body, checksum = memoryview(data)[:-_CHECKSUM_BYTES], data[-_CHECKSUM_BYTES:]
    if hashlib.blake2b(body, digest_size=_CHECKSUM_BYTES).digest() != checksum:
        raise StateFileError(f"{path}: checksum mismatch: the file is corrupt")
    arrays, pos = {}, start
    for name, dtype, shape, nbytes in specs:
        a = np.frombuffer(data, dtype.newbyteorder("<"), nbytes // dtype.itemsize, pos).reshape(shape)
        arrays[name] = a.astype(dtype, copy=False)
        pos += nbytes
    return header, arrays


def check_same(path: str, what: str, saved, expected) -> None:
    """Raises StateMismatchError naming `what` when the saved value is not the expected one."""
    if saved != expected:
        raise StateMismatchError(f"{path}: saved for {what} {_short(saved)}, but this one has {_short(expected)}")


def _short(value) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 160 else text[:157] + "..."
