"""Loading named tensors from a GGUF file as float32 arrays, with shape checks."""
from __future__ import annotations

import numpy as np

from ..gguf_file import GGUFError, GGUFFile
from ..quant import dequantize


def load_matrix(f: GGUFFile, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """The tensor `name` dequantized to float32; its shape (numpy order) must be `shape`."""
    info = f.tensors.get(name)
    if info is None:
        raise GGUFError(f"{f.path}: missing tensor {name!r}")
    if tuple(info.shape) != tuple(shape):
        raise GGUFError(f"{f.path}: tensor {name!r} has shape {info.shape}, expected {tuple(shape)}")
    return dequantize(f.tensor_data(name), info.ggml_type, info.shape)


def load_optional(f: GGUFFile, name: str, shape: tuple[int, ...]) -> np.ndarray | None:
    return load_matrix(f, name, shape) if name in f.tensors else None
