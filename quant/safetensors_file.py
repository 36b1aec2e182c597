"""Read Hugging Face safetensors checkpoints with numpy alone (no torch, no safetensors package).

A .safetensors file is: u64 little-endian header length N, N bytes of JSON
{name: {"dtype": "BF16", "shape": [...], "data_offsets": [begin, end]}, "__metadata__": {...}},
then the raw little-endian tensor bytes (offsets are relative to the end of the header).
A sharded checkpoint has model.safetensors.index.json whose "weight_map" names each tensor's shard.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16,
           "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
_MAX_HEADER = 100 * 2**20


class SafetensorsError(ValueError):
    pass


def bf16_to_f32(raw: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) -> float32: the high half of the float32 bits."""
    return (raw.astype(np.uint32) << 16).view(np.float32)


class SafetensorsFile:
    """One .safetensors file, memory-mapped; tensor(name) -> float32 (or integer) array."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._mm = np.memmap(self.path, dtype=np.uint8, mode="r")
        if self._mm.size < 8:
            raise SafetensorsError(f"{self.path}: too short to be a safetensors file")
        (n,) = struct.unpack("<Q", self._mm[:8].tobytes())
        if n > min(_MAX_HEADER, self._mm.size - 8):
            raise SafetensorsError(f"{self.path}: header length {n} does not fit the file")
        try:
            header = json.loads(self._mm[8:8 + n].tobytes())
        except ValueError as e:
            raise SafetensorsError(f"{self.path}: the header is not JSON ({e})") from None
        self.metadata = header.pop("__metadata__", {}) or {}
        self._start = 8 + n
        self.entries: dict[str, dict] = header
        for name, e in header.items():
            if e.get("dtype") not in _DTYPES:
                raise SafetensorsError(f"{self.path}: tensor {name!r} has unsupported dtype {e.get('dtype')!r}")
            begin, end = e["data_offsets"]
            count = int(np.prod(e["shape"], dtype=np.int64))
            if not 0 <= begin <= end <= self._mm.size - self._start or \
                    end - begin != count * np.dtype(_DTYPES[e["dtype"]]).itemsize:
                raise SafetensorsError(f"{self.path}: tensor {name!r} has a bad data range")

    def names(self) -> list[str]:
        return list(self.entries)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.entries[name]["shape"])

    def tensor(self, name: str) -> np.ndarray:
        """The tensor as stored, with float16/bfloat16 widened to float32."""
        e = self.entries[name]
        begin, end = e["data_offsets"]
        raw = self._mm[self._start + begin:self._start + end].view(_DTYPES[e["dtype"]]).reshape(e["shape"])
        if e["dtype"] == "BF16":
            return bf16_to_f32(raw)
        if e["dtype"] in ("F16", "F64"):
            return raw.astype(np.float32)
        return np.array(raw)


class Checkpoint:
    """All tensors of a model folder: model.safetensors, or the shards an index names."""

    def __init__(self, folder: str | Path):
        folder = Path(folder)
        index = folder / "model.safetensors.index.json"
        if index.is_file():
            weight_map = json.loads(index.read_text())["weight_map"]
            shards = sorted(set(weight_map.values()))
        else:
            shards = sorted(p.name for p in folder.glob("*.safetensors"))
        if not shards:
            raise SafetensorsError(f"{folder}: no *.safetensors weights (only safetensors checkpoints are read)")
        self._where: dict[str, SafetensorsFile] = {}
        for shard in shards:
            st = SafetensorsFile(folder / shard)
            for name in st.names():
                self._where[name] = st

    def names(self) -> list[str]:
        return list(self._where)

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def shape(self, name: str) -> tuple[int, ...]:
        return self._where[name].shape(name)

    def tensor(self, name: str) -> np.ndarray:
        if name not in self._where:
            raise SafetensorsError(f"missing tensor {name!r} in the checkpoint")
        return self._where[name].tensor(name)
