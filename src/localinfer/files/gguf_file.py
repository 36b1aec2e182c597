"""A defensive GGUF reader: mmapped, zero-copy tensor views, every metadata key.

GGUF layout (little-endian, https://github.com/ggml-org/ggml/blob/master/docs/gguf.md):

    magic "GGUF" | version u32 | n_tensors u64 | n_kv u64
    n_kv    x (key: string, value_type: u32, value)
    n_tensors x (name: string, n_dims: u32, dims: u64[n_dims], ggml_type: u32, offset: u64)
    padding to `general.alignment` (default 32), then the tensor data section.

    string = u64 length + utf-8 bytes; array = elem_type u32 + count u64 + elements.

Files come from the internet, so every length, count and offset is checked against the
bytes that are really there before it is used: a truncated, bit-flipped or hostile file
raises `GGUFError` naming what is wrong, never crashes, hangs or allocates unbounded memory.
The tensors' data must tile the data section in the order of their infos, as llama.cpp requires,
so no two tensors share bytes and a tensor given another type or shape does not go unnoticed.
The constants (value and tensor types, block sizes) are those of `formats/ggml.py`.

A model split by llama.cpp's gguf-split is opened by its first file (NAME-00001-of-0000N.gguf): the
others are found beside it, checked the same way, and their tensors read from them (`parts`).
"""
from __future__ import annotations

import mmap
import os
import re
import struct
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..backend import kernels
from ..formats.ggml import QUANT_SIZES, GGMLType, GGUFValueType

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_STRING_BYTES = 1 << 30  # no real key, token or template comes near this
SPLIT_NO, SPLIT_COUNT, SPLIT_TENSORS = "split.no", "split.count", "split.tensors.count"  # llama.cpp's gguf-split
_SPLIT_NAME = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")

_SCALARS = {  # value type -> (struct format, python converter)
    GGUFValueType.UINT8: ("<B", int), GGUFValueType.INT8: ("<b", int),
    GGUFValueType.UINT16: ("<H", int), GGUFValueType.INT16: ("<h", int),
    GGUFValueType.UINT32: ("<I", int), GGUFValueType.INT32: ("<i", int),
    GGUFValueType.UINT64: ("<Q", int), GGUFValueType.INT64: ("<q", int),
    GGUFValueType.FLOAT32: ("<f", float), GGUFValueType.FLOAT64: ("<d", float),
    GGUFValueType.BOOL: ("<?", bool),
}
_NUMPY_SCALARS = {
    GGUFValueType.UINT8: "<u1", GGUFValueType.INT8: "<i1", GGUFValueType.UINT16: "<u2",
    GGUFValueType.INT16: "<i2", GGUFValueType.UINT32: "<u4", GGUFValueType.INT32: "<i4",
    GGUFValueType.UINT64: "<u8", GGUFValueType.INT64: "<i8", GGUFValueType.FLOAT32: "<f4",
    GGUFValueType.FLOAT64: "<f8", GGUFValueType.BOOL: "<u1",
}


class GGUFError(ValueError):
    """The file is not a valid GGUF file; the message says what and where."""


class RowReader:
    """Rows of a tensor read with pread: an embedding table is read a token's row at a time, and a
    page fault in the mapping brings in the pages around the row too (readahead, fault-around, large
    folios) -- after one 512-token prompt, ~120 MiB of a 205 MiB table stayed resident. pread only
    copies the rows; the page cache holds the file either way, but not this process's memory."""

    def __init__(self, path: str, offset: int, n_rows: int, row_bytes: int):
        self.offset, self.n_rows, self.row_bytes = offset, n_rows, row_bytes
        self._fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        self._close = weakref.finalize(self, os.close, self._fd)
        if hasattr(os, "posix_fadvise"):   # rows in no order: no readahead around them either
            os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_RANDOM)

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows).reshape(-1)
        out = np.empty((len(rows), self.row_bytes), np.uint8)
        for i, r in enumerate(rows.tolist()):
            if not 0 <= r < self.n_rows:
                raise IndexError(f"row {r} is out of range for a table of {self.n_rows} rows")
            data = os.pread(self._fd, self.row_bytes, self.offset + r * self.row_bytes)
            if len(data) != self.row_bytes:
                raise GGUFError(f"the file ends inside row {r} of a tensor (it was truncated after loading)")
            out[i] = np.frombuffer(data, np.uint8)
        return out


@dataclass(frozen=True)
class TensorInfo:
    name: str
    ggml_type: GGMLType
    shape: tuple[int, ...]  # numpy order: shape[-1] is the row length (GGUF dims reversed)
    offset: int  # absolute byte offset in the file
    nbytes: int

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


def _describe(t: TensorInfo) -> str:
    return f"{t.ggml_type.name}, shape {t.shape}, {t.nbytes} bytes"


class _Cursor:
    """Bounds-checked little-endian reads from a buffer."""

    def __init__(self, buf, path: str):
        self.buf, self.pos, self.path = buf, 0, path
        self.size = len(buf)

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise GGUFError(
                f"{self.path}: truncated or corrupt GGUF: {what} needs {n} bytes at offset "
                f"{self.pos}, but the file has {self.size} bytes")

    def scalar(self, fmt: str, what: str):
        n = struct.calcsize(fmt)
        self.need(n, what)
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return value

    def string(self, what: str) -> str:
        n = self.scalar("<Q", f"length of {what}")
        if n > MAX_STRING_BYTES:
            raise GGUFError(f"{self.path}: corrupt GGUF: {what} claims {n} bytes at offset {self.pos - 8}")
        self.need(n, what)
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise GGUFError(f"{self.path}: corrupt GGUF: {what} is not valid UTF-8 ({e})") from None


    def strings(self, count: int, what: str) -> list[str]:
        """`count` strings in a row: string() for each, in one tight loop (a vocabulary is 50k-260k
        strings, and this is most of a model's load). Anything wrong with an element is reported
        by string() itself, at that element. The C walk (kernels.string_array) reads the usual case
        about five times faster; this loop is the fallback and the one that names a bad element."""
        fast = _c_strings(self.buf, self.pos, count)
        if fast is not None:
            out, self.pos = fast
            return out
        buf, pos, size, out = self.buf, self.pos, self.size, []
        length, append = _U64.unpack_from, out.append
        for i in range(count):
            end = pos + 8
            n = length(buf, pos)[0] if end <= size else -1
            if n < 0 or n > MAX_STRING_BYTES or end + n > size:
                self.pos = pos
                self.string(f"element {i} of {what}")  # raises, naming the element
            try:
                append(buf[end:end + n].decode("utf-8"))
            except UnicodeDecodeError:
                self.pos = pos
                self.string(f"element {i} of {what}")
            pos = end + n
        self.pos = pos
        return out


_U64 = struct.Struct("<Q")


def _c_strings(buf, pos: int, count: int) -> tuple[list[str], int] | None:
    return kernels.string_array(buf, pos, count, MAX_STRING_BYTES) if kernels.available() else None


class GGUFFile:
    """An open GGUF file. `metadata` maps every key to a python value: str, int, float, bool, a
    list of str, or a read-only 1-D numpy array of numbers (a view into the mmap; bool arrays are
    a small copy); `tensors` maps names to `TensorInfo`; `tensor_data(name)` is a read-only
    zero-copy view into the mmap."""

    def __init__(self, path: str | os.PathLike, *, split_part: bool = False):
        """split_part: this file is one of the later parts of a split model (read by its first part)."""
        self.path = str(path)
        self.released: set[str] = set()  # tensors whose bytes were copied out and their pages dropped
        self.on_tensor_read = None  # called with a tensor's name as tensor_data hands it out (files/load_progress.py)
        self._later_parts: list[GGUFFile] = []  # a split model's files after this one (_open_parts)
        self._part_of: dict[str, GGUFFile] = {}  # a tensor of a later part -> that part
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"GGUF file not found: {self.path}")
        with open(p, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 24:
                raise GGUFError(f"{self.path}: not a GGUF file (only {size} bytes)")
            self._mmap = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            self._parse()
            if not split_part:
                self._open_parts()
        except BaseException:
            self.close()
            raise

    # -- parsing -----------------------------------------------------------------------------
    def _parse(self) -> None:
        cur = _Cursor(self._mmap, self.path)
        magic = bytes(self._mmap[:4])
        if magic != GGUF_MAGIC:
            # the bytes are not echoed: the path may name any file, and its content is none of our business
            raise GGUFError(f"{self.path}: not a GGUF file (it does not begin with the magic bytes 'GGUF')")
        cur.pos = 4
        version = cur.scalar("<I", "version")
        if version not in SUPPORTED_VERSIONS:
            swapped = struct.unpack("<I", struct.pack(">I", version))[0]
            hint = " (a big-endian file?)" if swapped in SUPPORTED_VERSIONS else ""
            raise GGUFError(f"{self.path}: unsupported GGUF version {version}{hint}; "
                            f"supported: {', '.join(map(str, SUPPORTED_VERSIONS))}")
        self.version = version
        n_tensors = cur.scalar("<Q", "tensor count")
        n_kv = cur.scalar("<Q", "metadata count")
        # each key/value takes at least 8 (key length) + 4 (type) + 1 bytes; each tensor info 8+4+8+4+8
        if n_kv * 13 > cur.size or n_tensors * 32 > cur.size:
            raise GGUFError(f"{self.path}: corrupt GGUF header: {n_kv} metadata entries and "
                            f"{n_tensors} tensors cannot fit in {cur.size} bytes")
        self.metadata: dict[str, Any] = {}
        self.metadata_types: dict[str, GGUFValueType] = {}
        # key -> (start, end) byte range of the whole encoded entry, so a writer can copy it verbatim
        self.metadata_spans: dict[str, tuple[int, int]] = {}
        for i in range(n_kv):
            entry_start = cur.pos
            key = cur.string(f"metadata key #{i}")
            vtype = self._value_type(cur.scalar("<I", f"type of {key!r}"), key)
            if key in self.metadata:
                raise GGUFError(f"{self.path}: duplicate metadata key {key!r}")
            self.metadata[key] = self._read_value(cur, vtype, key)
            self.metadata_types[key] = vtype
            self.metadata_spans[key] = (entry_start, cur.pos)

        infos = []
        for i in range(n_tensors):
            name = cur.string(f"name of tensor #{i}")
            n_dims = cur.scalar("<I", f"n_dims of tensor {name!r}")
            if not 1 <= n_dims <= MAX_DIMS:
                raise GGUFError(f"{self.path}: tensor {name!r} has {n_dims} dimensions (1..{MAX_DIMS} allowed)")
            dims = [cur.scalar("<Q", f"dims of tensor {name!r}") for _ in range(n_dims)]
            raw_type = cur.scalar("<I", f"type of tensor {name!r}")
            offset = cur.scalar("<Q", f"offset of tensor {name!r}")
            infos.append((name, dims, raw_type, offset))

        alignment = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
            raise GGUFError(f"{self.path}: general.alignment must be a power of two, got {alignment!r}")
        self.alignment = alignment
        self.data_offset = (cur.pos + alignment - 1) // alignment * alignment
        self.tensors: dict[str, TensorInfo] = {}
        for name, dims, raw_type, offset in infos:
            self.tensors[name] = self._tensor_info(name, dims, raw_type, offset)
        self._check_data_layout()

    def _open_parts(self) -> None:
        """A model split by llama.cpp's gguf-split (NAME-00001-of-00003.gguf ...): this first file holds
        the metadata and some tensors, the others the rest; their tensors join this file's, each read
        from its own part."""
        count = self.metadata.get(SPLIT_COUNT, 0)
        if count in (0, 1):
            return
        no = self.metadata.get(SPLIT_NO)
        match = _SPLIT_NAME.search(os.path.basename(self.path))
        if not isinstance(count, int) or not 1 < count <= 9999 or no != 0 or match is None or int(match[2]) != count:
            raise GGUFError(f"{self.path}: part {no!r} of a model split in {count!r} files; give its first part, "
                            f"named ...-00001-of-{count:05d}.gguf" if isinstance(count, int) else
                            f"{self.path}: split.count {count!r} is not a number of files")
        for i in range(2, count + 1):
            name = f"{self.path[:len(self.path) - len(match[0])]}-{i:05d}-of-{count:05d}.gguf"
            if not os.path.isfile(name):
                raise GGUFError(f"{self.path}: part {i} of {count} is missing: {name}")
            part = GGUFFile(name, split_part=True)
            self._later_parts.append(part)
            if part.metadata.get(SPLIT_NO) != i - 1 or part.metadata.get(SPLIT_COUNT) != count:
                raise GGUFError(f"{name}: its split.no/split.count say it is not part {i} of {count}")
            for tensor, info in part.tensors.items():
                if tensor in self.tensors:
                    raise GGUFError(f"{name}: tensor {tensor!r} is in two parts of the model")
                self.tensors[tensor] = info
                self._part_of[tensor] = part
        expected = self.metadata.get(SPLIT_TENSORS)
        if expected is not None and expected != len(self.tensors):
            raise GGUFError(f"{self.path}: the parts hold {len(self.tensors)} tensors, split.tensors.count says "
                            f"{expected}")

    @property
    def parts(self) -> list["GGUFFile"]:
        """A split model's files, this first; [self] for a whole one. (Not kept as a list holding self:
        that cycle left every closed file's metadata, a vocabulary of ~10 MB, to the cycle collector.)"""
        return [self, *self._later_parts]

    def part_of(self, name: str) -> "GGUFFile":
        """The file that holds tensor `name`: this one, or a later part of a split model."""
        return self._part_of.get(name, self)

    def _value_type(self, raw: int, key: str) -> GGUFValueType:
        try:
            return GGUFValueType(raw)
        except ValueError:
            raise GGUFError(f"{self.path}: metadata {key!r} has unknown value type {raw}") from None

    def _read_value(self, cur: _Cursor, vtype: GGUFValueType, key: str):
        if vtype == GGUFValueType.STRING:
            return cur.string(f"value of {key!r}")
        if vtype in _SCALARS:
            fmt, conv = _SCALARS[vtype]
            return conv(cur.scalar(fmt, f"value of {key!r}"))
        # ARRAY
        etype = self._value_type(cur.scalar("<I", f"element type of {key!r}"), key)
        count = cur.scalar("<Q", f"length of {key!r}")
        if etype == GGUFValueType.ARRAY:
            raise GGUFError(f"{self.path}: metadata {key!r} is a nested array, which is not supported")
        if etype in _NUMPY_SCALARS:
            itemsize = np.dtype(_NUMPY_SCALARS[etype]).itemsize
            cur.need(count * itemsize, f"array {key!r} of {count} elements")
            # A read-only view onto the mmap: as a list of python numbers a 100 MB array took 860 MB.
            arr = np.frombuffer(self._mmap, dtype=_NUMPY_SCALARS[etype], count=count, offset=cur.pos)
            cur.pos += count * itemsize
            return arr != 0 if etype == GGUFValueType.BOOL else arr
        # array of strings: each needs at least its 8-byte length
        cur.need(count * 8, f"array {key!r} of {count} strings")
        return cur.strings(count, repr(key))

    def _tensor_info(self, name: str, dims: list[int], raw_type: int, offset: int) -> TensorInfo:
        try:
            ggml_type = GGMLType(raw_type)
        except ValueError:
            raise GGUFError(f"{self.path}: tensor {name!r} has unknown ggml type {raw_type}") from None
        if name in self.tensors:
            raise GGUFError(f"{self.path}: duplicate tensor name {name!r}")
        block_size, type_size = QUANT_SIZES[ggml_type]
        if any(d == 0 or d > (1 << 40) for d in dims):
            raise GGUFError(f"{self.path}: tensor {name!r} has invalid dimensions {dims}")
        if dims[0] % block_size:
            raise GGUFError(f"{self.path}: tensor {name!r} row length {dims[0]} is not a multiple "
                            f"of the {ggml_type.name} block size {block_size}")
        n_elements = int(np.prod(dims, dtype=object))
        nbytes = n_elements // block_size * type_size
        if offset % self.alignment:
            raise GGUFError(f"{self.path}: tensor {name!r} offset {offset} is not aligned to {self.alignment}")
        start = self.data_offset + offset
        if start + nbytes > len(self._mmap):
            raise GGUFError(f"{self.path}: truncated GGUF: tensor {name!r} needs bytes "
                            f"{start}..{start + nbytes}, but the file has {len(self._mmap)} bytes")
        return TensorInfo(name, ggml_type, tuple(reversed(dims)), start, nbytes)

    def _check_data_layout(self) -> None:
        """Tensor data lies in the order of the tensor infos, each padded to the alignment, up to
        the end of the file: what llama.cpp's reader requires (gguf_init_from_file_impl: "tensor
        has offset X, expected Y") and every GGUF writer does. So no two tensors share bytes, and a
        tensor whose type or shape was changed to a smaller one leaves a gap and is caught here,
        instead of reading its neighbour's bytes as weights."""
        expected, prev = 0, None  # the next tensor's offset inside the data section; the tensor before it
        for t in self.tensors.values():
            at = t.offset - self.data_offset
            if at < expected:
                raise GGUFError(f"{self.path}: tensor {t.name!r} data at offset {at} overlaps the data before it "
                                f"(up to offset {expected}, the end of tensor {prev.name!r}, {_describe(prev)}): "
                                f"tensors must not share bytes")
            if at > expected:
                after = f"tensor {prev.name!r} ({_describe(prev)}) ends" if prev else "the data section begins"
                raise GGUFError(f"{self.path}: tensor {t.name!r} data at offset {at}, but {after} at offset "
                                f"{expected}: a tensor's type or shape does not match its data")
            expected += -(-t.nbytes // self.alignment) * self.alignment
            prev = t
        extra = len(self._mmap) - (self.data_offset + expected)
        if prev is not None and extra > 0:
            raise GGUFError(f"{self.path}: {extra} bytes after the data of the last tensor {prev.name!r} "
                            f"({_describe(prev)}): a tensor's type or shape does not match its data")

    # -- access -------------------------------------------------------------------------------
    def raw_bytes(self, start: int, end: int) -> bytes:
        """A copy of bytes [start, end) of the file (e.g. a `metadata_spans` entry)."""
        return bytes(self._mmap[start:end])

    def tensor_data(self, name: str) -> np.ndarray:
        """Zero-copy read-only view: float32/float16 arrays of `shape` for F32/F16, otherwise
        uint8 of shape (rows..., bytes_per_row) holding the raw blocks (BF16 included)."""
        info = self.tensors.get(name)
        if info is None:
            raise KeyError(f"{self.path}: no tensor named {name!r}")
        if self.on_tensor_read is not None:
            self.on_tensor_read(name)
        if name in self._part_of:
            return self._part_of[name].tensor_data(name)
        if info.ggml_type == GGMLType.F32:
            return np.frombuffer(self._mmap, np.float32, info.n_elements, info.offset).reshape(info.shape)
        if info.ggml_type == GGMLType.F16:
            return np.frombuffer(self._mmap, np.float16, info.n_elements, info.offset).reshape(info.shape)
        raw = np.frombuffer(self._mmap, np.uint8, info.nbytes, info.offset)
        rows = info.shape[:-1]
        return raw.reshape(*rows, info.nbytes // max(1, int(np.prod(rows, dtype=np.int64))))

    def release(self, name: str) -> None:
        """Drops the pages of a tensor whose bytes were copied elsewhere (a stacked matrix) from this
        process's memory, so the weights are not held twice. The mapping stays valid: a later read
        faults the pages back in from the file. A no-op where the OS has no MADV_DONTNEED."""
        self.released.add(name)
        self.release_bytes(name, 0, self.tensors[name].nbytes)

    def release_bytes(self, name: str, lo: int, hi: int) -> None:
        """release() for bytes [lo, hi) of the tensor only: a copy made piece by piece (a repacked
        matrix) gives each piece's pages back as it goes, so the weights are never held twice."""
        if name in self._part_of:
            return self._part_of[name].release_bytes(name, lo, hi)
        info = self.tensors[name]
        advice = getattr(mmap, "MADV_DONTNEED", None)
        if advice is None or self._mmap is None:
            return
        lo, hi = max(0, lo), min(info.nbytes, hi)
        start = -(-(info.offset + lo) // mmap.PAGESIZE) * mmap.PAGESIZE  # whole pages inside the range only:
        end = (info.offset + hi) // mmap.PAGESIZE * mmap.PAGESIZE  # its neighbours stay
        if end > start:
            self._mmap.madvise(advice, start, end - start)

    def row_reader(self, name: str) -> "RowReader":
        """Reads rows of a tensor (n, row_bytes) from the file itself, not through the mapping."""
        if name in self._part_of:
            return self._part_of[name].row_reader(name)
        info = self.tensors[name]
        n_rows = int(np.prod(info.shape[:-1], dtype=np.int64)) if len(info.shape) > 1 else 1
        return RowReader(self.path, info.offset, n_rows, info.nbytes // max(1, n_rows))

    @property
    def architecture(self) -> str:
        arch = self.metadata.get("general.architecture")
        if not isinstance(arch, str):
            raise GGUFError(f"{self.path}: missing general.architecture")
        return arch

    def arch_value(self, suffix: str, default: Any = ...) -> Any:
        """`{architecture}.{suffix}`, e.g. arch_value('block_count')."""
        key = f"{self.architecture}.{suffix}"
        if key in self.metadata:
            return self.metadata[key]
        if default is ...:
            raise GGUFError(f"{self.path}: missing metadata key {key!r}")
        return default

    def close(self) -> None:
        for part in getattr(self, "_later_parts", []):
            part.close()
        mm = getattr(self, "_mmap", None)
        if mm is not None:
            try:
                mm.close()
            except BufferError:
                # views still alive (the metadata's numeric arrays, which a closed model keeps for its
                # tokenizer): the mapping goes away with them, but its resident pages go back now; a
                # later read of a view faults its page in again from the file
                advice = getattr(mmap, "MADV_DONTNEED", None)
                if advice is not None:
                    try:
                        mm.madvise(advice)
                    except (OSError, ValueError):
                        pass
            self._mmap = None

    def __enter__(self) -> "GGUFFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
