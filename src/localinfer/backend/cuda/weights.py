"""A GGUF matrix on the device, uploaded once, in the layout its GEMV kernel reads coalesced: the
blocks' scales apart from their quants (a warp then reads 32 consecutive quant bytes of a row, not
34-byte strided blocks).

    Q8_0   scales f32 (n_out, k/32), qs int8 (n_out, k)
    Q4_0   scales f32 (n_out, k/32), qs uint8 (n_out, k/2): the blocks' nibble bytes as in the file
    F16    w f16 (n_out, k)
    others dequantized to F16 at upload (formats/): correct, at F16's memory and bandwidth
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...formats import dequantize
from ...formats.ggml import GGMLType as T
from .device import cuda_module

_BLOCK = 32


@dataclass
class DeviceMatrix:
    kind: str          # "q8_0" | "q4_0" | "f16"
    n_out: int
    k: int
    scales: object = None
    qs: object = None
    w: object = None


def _blocks(raw: np.ndarray, n_out: int, k: int, block_bytes: int) -> np.ndarray:
    expected = k // _BLOCK * block_bytes
    if raw.dtype != np.uint8 or raw.shape != (n_out, expected):
        raise ValueError(f"raw blocks must be uint8 ({n_out}, {expected}), got {raw.dtype} {raw.shape}")
    return np.ascontiguousarray(raw).reshape(n_out, k // _BLOCK, block_bytes)


def upload(raw: np.ndarray, qtype, shape: tuple[int, int]) -> DeviceMatrix:
    """raw: the tensor's data as the GGUF holds it (gguf_file.tensor_data); shape (n_out, k)."""
    cuda = cuda_module()
    n_out, k = (int(s) for s in shape)
    qtype = T(qtype)
    if qtype in (T.Q8_0, T.Q4_0) and k % _BLOCK:
        raise ValueError(f"a {qtype.name} row of {k} is not whole blocks of {_BLOCK}")
    if qtype == T.Q8_0:
        b = _blocks(raw, n_out, k, 34)
        scales = b[:, :, :2].copy().view(np.float16).reshape(n_out, -1).astype(np.float32)
        qs = b[:, :, 2:].copy().view(np.int8).reshape(n_out, k)
        return DeviceMatrix("q8_0", n_out, k, scales=cuda.to_device(scales), qs=cuda.to_device(qs))
    if qtype == T.Q4_0:
        b = _blocks(raw, n_out, k, 18)
        scales = b[:, :, :2].copy().view(np.float16).reshape(n_out, -1).astype(np.float32)
        qs = np.ascontiguousarray(b[:, :, 2:]).reshape(n_out, k // 2)
        return DeviceMatrix("q4_0", n_out, k, scales=cuda.to_device(scales), qs=cuda.to_device(qs))
    w = (raw if qtype == T.F16 else dequantize(raw, qtype, (n_out, k))).astype(np.float16).reshape(n_out, k)
    return DeviceMatrix("f16", n_out, k, w=cuda.to_device(np.ascontiguousarray(w)))
