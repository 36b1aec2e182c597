"""Writing a GGUF file as a stream, atomically.

The layout is the one ``files/gguf_file.py`` reads (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md):

    magic "GGUF" | version u32 (3) | n_tensors u64 | n_kv u64
    n_kv x (key string, value type u32, value)
    n_tensors x (name string, n_dims u32, ne u64[n_dims], type u32, offset u64)
    zero padding to `alignment`, then each tensor's data, zero-padded to `alignment`.

Every tensor's type and size are known before any data is written, so the
header goes first and the data follows tensor by tensor: memory stays bounded
by one slab of rows, whatever the file size.

``AtomicFile`` writes to a temporary file beside the destination and renames
it into place only when everything is written and synced; on any error,
``KeyboardInterrupt`` included, the temporary file is removed, so a failed or
interrupted run never leaves a half-written output behind.
"""

from __future__ import annotations

import errno
import os
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gguf import GGMLQuantizationType as T
from gguf.constants import GGUFValueType

GGUF_VERSION = 3


class DiskFullError(OSError):
    """The disk filled up while writing; the partial output was removed."""


def encode_string(s: str) -> bytes:
    raw = s.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def encode_kv_u32(key: str, value: int) -> bytes:
    """One metadata entry holding a uint32 (what llama.cpp writes for general.file_type)."""
    return encode_string(key) + struct.pack("<II", GGUFValueType.UINT32, value)


def encode_kv_str(key: str, value: str) -> bytes:
    """One metadata entry holding a string."""
    return encode_string(key) + struct.pack("<I", GGUFValueType.STRING) + encode_string(value)


@dataclass(frozen=True)
class TensorEntry:
    name: str
    ggml_type: T
    shape: tuple[int, ...]  # numpy order: shape[-1] is the row length
    nbytes: int


def pad(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


def encode_header(kv_entries: list[bytes], tensors: list[TensorEntry], alignment: int) -> tuple[bytes, list[int]]:
    """The header (padded to `alignment`) and each tensor's offset within the data section."""
    parts = [b"GGUF", struct.pack("<IQQ", GGUF_VERSION, len(tensors), len(kv_entries)), *kv_entries]
    offsets, offset = [], 0
    for t in tensors:
        ne = list(reversed(t.shape))  # GGUF stores ne[0] (the row length) first
        parts.append(encode_string(t.name) + struct.pack(f"<I{len(ne)}QIQ", len(ne), *ne, int(t.ggml_type), offset))
        offsets.append(offset)
        offset = pad(offset + t.nbytes, alignment)
    header = b"".join(parts)
    return header + bytes(pad(len(header), alignment) - len(header)), offsets


def data_size(tensors: list[TensorEntry], alignment: int) -> int:
    return sum(pad(t.nbytes, alignment) for t in tensors)


class AtomicFile:
    """``with AtomicFile(path) as f: f.write(...)``: `path` appears complete, or not at all."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._file = None
        self._tmp: str | None = None
        self.written = 0

    def __enter__(self) -> "AtomicFile":
        fd, self._tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".partial", dir=self.path.parent)
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes it 0600; the result should look like any new file
        self._file = os.fdopen(fd, "wb")
        return self

    def write(self, data) -> None:
        try:
            self._file.write(data)
        except OSError as e:
            if e.errno == errno.ENOSPC:
                raise DiskFullError(errno.ENOSPC, f"no space left on the device while writing {self.path} "
                                    f"({self.written / 2**20:.1f} MiB written); nothing was kept") from e
            raise
        self.written += len(data) if isinstance(data, (bytes, bytearray)) else memoryview(data).nbytes

    def pad_to(self, alignment: int) -> None:
        extra = pad(self.written, alignment) - self.written
        if extra:
            self.write(bytes(extra))

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                try:
                    self._file.flush()
                    os.fsync(self._file.fileno())
                except OSError as e:
                    if e.errno == errno.ENOSPC:
                        raise DiskFullError(errno.ENOSPC, f"no space left on the device while writing "
                                            f"{self.path}; nothing was kept") from e
                    raise
                self._file.close()
                os.replace(self._tmp, self.path)
                self._tmp = None
        finally:
            if self._tmp is not None:  # any failure, Ctrl-C included: leave nothing behind
                try:
                    self._file.close()
                except OSError:
                    pass
                try:
                    os.unlink(self._tmp)
                except FileNotFoundError:
                    pass
