"""Importance matrix files: llama.cpp's GGUF imatrix format, and its legacy ``.dat`` format.

An importance matrix holds, per weight matrix that multiplies activations, the sum over the
evaluated tokens of each input column's squared activation (``in_sum2``) and the number of
tokens summed (``counts``); for a 3-D expert tensor one row of sums and one count per expert.
``llama-quantize --imatrix`` divides the two and weights each weight's quantization error by
the result (tools/imatrix/imatrix.cpp writes it, common/imatrix-loader.cpp reads it):

* GGUF: ``general.type = "imatrix"``, ``imatrix.datasets`` (string array),
  ``imatrix.chunk_count`` and ``imatrix.chunk_size`` (u32); per weight ``NAME.in_sum2``
  (F32, numpy shape (n_mat, ne0)) and ``NAME.counts`` (F32, (n_mat, 1)), names sorted.
* legacy ``.dat``: int32 n_entries; per entry int32 len, name, int32 ncall, int32 nval,
  float32 values[nval] holding ``(in_sum2 / count) * ncall``; then optionally int32
  chunk_count, int32 len, dataset name.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from localinfer.files.gguf_file import GGUFError, GGUFFile

SUM_SUFFIX, COUNT_SUFFIX = ".in_sum2", ".counts"
KEY_DATASETS, KEY_CHUNK_COUNT, KEY_CHUNK_SIZE = "imatrix.datasets", "imatrix.chunk_count", "imatrix.chunk_size"
_MAX_LEGACY_ENTRIES = 1 << 20  # a bound on a count read from the file, before allocating for it
_MAX_NAME = 1 << 16


class ImatrixError(ValueError):
    """An importance matrix file that cannot be read or does not fit the model."""


@dataclass
class ImatrixEntry:
    sums: np.ndarray  # (n_mat, ne0) float32: sum over tokens of x^2 per input column, per matrix/expert
    counts: np.ndarray  # (n_mat,) int64: tokens summed per matrix/expert

    def importance(self) -> np.ndarray:
        """(n_mat * ne0,) float32 weights as llama-quantize uses them: sums / count in float32,
        1 for an expert that never saw a token."""
        c = self.counts.astype(np.float32)[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            w = np.where(c > 0, self.sums / np.where(c > 0, c, np.float32(1)), np.float32(1))
        return w.astype(np.float32).reshape(-1)


@dataclass
class Imatrix:
    entries: dict[str, ImatrixEntry] = field(default_factory=dict)
    datasets: list[str] = field(default_factory=list)
    chunk_count: int = 0
    chunk_size: int = 0
    is_legacy: bool = False
    # legacy entries are stored already divided (values = in_sum2 / count * ncall): importance
    # is values / ncall, which `weights_for` applies instead of `ImatrixEntry.importance`.

    def weights_for(self, name: str) -> np.ndarray | None:
        """The per-column quantization weights for the tensor `name`, or None if absent."""
        e = self.entries.get(name)
        if e is None:
            return None
        if self.is_legacy:
            n = np.float32(e.counts[0]) if len(e.counts) else np.float32(0)
            flat = e.sums.reshape(-1)
            return (flat / n).astype(np.float32) if n > 0 else flat.astype(np.float32)
        return e.importance()


def read_imatrix(path: str | os.PathLike) -> Imatrix:
    """Read an imatrix in either format (a GGUF file is recognised by its magic)."""
    path = Path(path)
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic == b"GGUF":
        return _read_gguf(path)
    return _read_legacy(path)


def _read_gguf(path: Path) -> Imatrix:
    with GGUFFile(path) as f:
        meta = f.metadata
        out = Imatrix(datasets=[str(s) for s in meta.get(KEY_DATASETS, []) or []],
                      chunk_count=int(meta.get(KEY_CHUNK_COUNT, 0)), chunk_size=int(meta.get(KEY_CHUNK_SIZE, 0)))
        if not all(k in meta for k in (KEY_DATASETS, KEY_CHUNK_COUNT, KEY_CHUNK_SIZE)):
            raise ImatrixError(f"{path}: not an imatrix file (missing {KEY_DATASETS}, {KEY_CHUNK_COUNT} "
                               f"or {KEY_CHUNK_SIZE})")
        names = {}
        for name in f.tensors:
            for suffix, slot in ((SUM_SUFFIX, 0), (COUNT_SUFFIX, 1)):
                if name.endswith(suffix):
                    names.setdefault(name[: -len(suffix)], [None, None])[slot] = name
        if not names:
            raise ImatrixError(f"{path}: no imatrix entries")
        for base, (s, c) in sorted(names.items()):
            if s is None or c is None:
                raise ImatrixError(f"{path}: {base!r} has {'no in_sum2' if s is None else 'no counts'} tensor")
            ts, tc = f.tensors[s], f.tensors[c]
            if ts.ggml_type.name != "F32" or tc.ggml_type.name != "F32":
                raise ImatrixError(f"{path}: {base!r}: in_sum2 and counts must be F32")
            counts = np.rint(np.array(f.tensor_data(c), dtype=np.float64).reshape(-1)).astype(np.int64)
            sums = np.array(f.tensor_data(s), dtype=np.float32).reshape(-1)
            if len(counts) == 0 or sums.size % len(counts):
                raise ImatrixError(f"{path}: {base!r}: {sums.size} sums do not split into {len(counts)} matrices")
            out.entries[base] = ImatrixEntry(sums.reshape(len(counts), -1), counts)
    return out


def _read_legacy(path: Path) -> Imatrix:
    data = path.read_bytes()
    pos = 0

    def take(fmt: str, what: str):
        nonlocal pos
        n = struct.calcsize(fmt)
        if pos + n > len(data):
            raise ImatrixError(f"{path}: truncated legacy imatrix file (reading {what})")
        v = struct.unpack_from(fmt, data, pos)
        pos += n
        return v[0] if len(v) == 1 else v

    n_entries = take("<i", "the entry count")
    if not 1 <= n_entries <= _MAX_LEGACY_ENTRIES:
        raise ImatrixError(f"{path}: not an imatrix file (entry count {n_entries})")
    out = Imatrix(is_legacy=True)
    for i in range(n_entries):
        n = take("<i", f"entry {i}'s name length")
        if not 0 < n <= _MAX_NAME or pos + n > len(data):
            raise ImatrixError(f"{path}: bad name length {n} for entry {i}")
        name = data[pos : pos + n].decode("utf-8", "replace")
        pos += n
        ncall, nval = take("<ii", f"entry {name!r}'s sizes")
        if nval < 1 or pos + 4 * nval > len(data):
            raise ImatrixError(f"{path}: entry {name!r} has a bad value count {nval}")
        vals = np.frombuffer(data, "<f4", nval, pos).astype(np.float32)
        pos += 4 * nval
        out.entries[name] = ImatrixEntry(vals.reshape(1, -1), np.array([ncall], np.int64))
    if pos + 4 <= len(data):  # optional trailer: chunk count, dataset name
        out.chunk_count = take("<i", "the chunk count")
        if pos + 4 <= len(data):
            n = take("<i", "the dataset name length")
            if 0 < n <= len(data) - pos:
                out.datasets.append(data[pos : pos + n].decode("utf-8", "replace"))
    return out


def write_imatrix(path: str | os.PathLike, imatrix: Imatrix) -> None:
    """Write `imatrix` in llama.cpp's GGUF imatrix format (entries in sorted name order), atomically.

    Written with our own GGUF encoder: gguf-py refuses an empty array, and llama.cpp writes
    imatrix.datasets even when it is empty (no text file, only merged matrices)."""
    from gguf import GGMLQuantizationType as T
    from gguf.constants import GGUFValueType as V

    from .gguf_out import AtomicFile, TensorEntry, encode_header, encode_kv_str, encode_kv_u32, encode_string

    if imatrix.is_legacy:
        raise ImatrixError("a legacy imatrix holds normalised values, not sums: it cannot be written as GGUF")
    datasets = (encode_string(KEY_DATASETS) + struct.pack("<IIQ", V.ARRAY, V.STRING, len(imatrix.datasets))
                + b"".join(encode_string(d) for d in imatrix.datasets))
    kv = [encode_kv_str("general.type", "imatrix"), datasets,
          encode_kv_u32(KEY_CHUNK_COUNT, int(imatrix.chunk_count)), encode_kv_u32(KEY_CHUNK_SIZE, int(imatrix.chunk_size))]
    arrays = []
    for name in sorted(imatrix.entries):
        e = imatrix.entries[name]
        n_mat = len(e.counts)
        # ggml tensors (ne0, n_mat) and (1, n_mat); gguf writes them without their trailing 1s
        # (ggml_n_dims), so one matrix's sums are 1-D and its counts a single value
        sums = np.ascontiguousarray(e.sums, dtype="<f4").reshape(n_mat, -1)
        arrays.append((name + SUM_SUFFIX, sums if n_mat > 1 else sums.reshape(-1)))
        arrays.append((name + COUNT_SUFFIX, e.counts.astype("<f4").reshape(-1, 1) if n_mat > 1
                       else e.counts.astype("<f4").reshape(1)))
    alignment = 32  # GGUF's default (general.alignment absent)
    header, _ = encode_header(kv, [TensorEntry(n, T.F32, a.shape, a.nbytes) for n, a in arrays], alignment)
    with AtomicFile(path) as out:
        out.write(header)
        for _, a in arrays:
            out.write(a.tobytes())
            out.pad_to(alignment)


def write_imatrix_legacy(path: str | os.PathLike, imatrix: Imatrix) -> None:
    """The legacy ``.dat`` format, as imatrix.cpp's save_imatrix_legacy writes it."""
    if imatrix.chunk_size <= 0:
        raise ImatrixError("the legacy format needs the chunk size")
    parts = []
    names = [n for n in sorted(imatrix.entries) if (imatrix.entries[n].counts > 0).any()]
    parts.append(struct.pack("<i", len(names)))
    for name in names:
        e = imatrix.entries[name]
        raw = name.encode()
        ncall = int((int(e.counts.max()) + imatrix.chunk_size - 1) // imatrix.chunk_size)
        c = e.counts.astype(np.float32)[:, None]
        vals = np.where(c > 0, e.sums / np.where(c > 0, c, 1), np.float32(1)).astype(np.float32) * np.float32(ncall)
        parts += [struct.pack("<i", len(raw)), raw, struct.pack("<ii", ncall, vals.size),
                  vals.astype("<f4").tobytes()]
    ds = (imatrix.datasets[-1] if imatrix.datasets else "").encode()
    parts += [struct.pack("<i", imatrix.chunk_count), struct.pack("<i", len(ds)), ds]
    Path(path).write_bytes(b"".join(parts))


def check_imatrix_path(path: str | os.PathLike) -> Imatrix:
    """read_imatrix with GGUF errors turned into ImatrixError (one exception type for callers)."""
    try:
        return read_imatrix(path)
    except GGUFError as e:
        raise ImatrixError(str(e)) from e
