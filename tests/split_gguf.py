"""A GGUF split in parts as llama.cpp's gguf-split writes them (NAME-00001-of-0000N.gguf ...), for the
tests of split models: the first part has every metadata entry (copied byte for byte) and the split.*
keys, the others only the split.* keys; the tensors are dealt out in order."""
from __future__ import annotations

import struct
from pathlib import Path

from localinfer.files.gguf_file import GGUFFile

ALIGN = 32
U16, I32 = 2, 5  # GGUF value types


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def _kv(key: str, vtype: int, fmt: str, value) -> bytes:
    return _string(key) + struct.pack("<I", vtype) + struct.pack(fmt, value)


def split(src, out_dir, n_parts: int, stem: str = "model") -> list[Path]:
    """`src` in `n_parts` files in `out_dir`; returns their paths, the first first."""
    paths = [Path(out_dir) / f"{stem}-{i + 1:05d}-of-{n_parts:05d}.gguf" for i in range(n_parts)]
    with GGUFFile(src) as f:
        names = list(f.tensors)
        per = -(-len(names) // n_parts)
        for i, path in enumerate(paths):
            mine = names[i * per:(i + 1) * per]
            kvs = [_kv("split.no", U16, "<H", i), _kv("split.count", U16, "<H", n_parts),
                   _kv("split.tensors.count", I32, "<i", len(names))]
            if i == 0:
                kvs = [f.raw_bytes(*f.metadata_spans[k]) for k in f.metadata] + kvs
            infos, data = [], bytearray()
            for name in mine:
                t = f.tensors[name]
                dims = list(reversed(t.shape))
                infos.append(_string(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
                             + struct.pack("<IQ", int(t.ggml_type), len(data)))
                data += f.raw_bytes(t.offset, t.offset + t.nbytes)
                data += b"\0" * (-len(data) % ALIGN)
            head = b"GGUF" + struct.pack("<IQQ", 3, len(mine), len(kvs)) + b"".join(kvs) + b"".join(infos)
            path.write_bytes(head + b"\0" * (-len(head) % ALIGN) + bytes(data))
    return paths
