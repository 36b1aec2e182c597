"""A GGUF matrix on the device, uploaded once, in a layout its GEMV kernel reads coalesced: the blocks'
scales apart from their quants (a warp then reads consecutive quant bytes of a row, not strided blocks).

    nibbles  Q4_0, Q4_1, Q4_K: qs uint8 (n_out, k/2), the file's nibble bytes as they are (`half`: 16 for
             the 32-element blocks, 32 for Q4_K's 64-element runs); scales, mins f32 (n_out, k/32),
             element = scale * nibble + min (Q4_0's "- 8" is a min of -8 d; Q4_K's d*sc and -dmin*m)
    int8     Q8_0, Q5_0, Q6_K: qs int8 (n_out, k) the signed quants; scales f32 (n_out, k/group),
             group 32 (16 for Q6_K)
    f16      F16, and every other type dequantized to F16 at upload (formats/): correct, at F16's
             memory and bandwidth

The unpacking below is numpy over whole matrices, each type's block layout as ggml-common.h defines
it (formats/dequant_*.py are the readable dequantizers these are checked against in the tests).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...formats import dequantize
from ...formats.ggml import GGMLType as T
from .device import cuda_module

QK_K = 256
# bytes per block and elements per block of the types uploaded quantized
_BLOCK = {T.Q4_0: (18, 32), T.Q4_1: (20, 32), T.Q4_K: (144, QK_K), T.Q8_0: (34, 32), T.Q5_0: (22, 32),
          T.Q6_K: (210, QK_K)}


@dataclass
class DeviceMatrix:
    kind: str          # "nibbles" | "int8" | "f16"
    n_out: int
    k: int
    scales: object = None
    mins: object = None
    qs: object = None
    w: object = None
    group: int = 32    # int8: elements per scale
    half: int = 16     # nibbles: byte j of a run of 2*half elements holds elements j and half + j


def _blocks(raw: np.ndarray, n_out: int, k: int, qtype: T) -> np.ndarray:
    """raw (n_out, row bytes) -> (n_out, blocks per row, block bytes)"""
    block_bytes, block = _BLOCK[qtype]
    if k % block:
        raise ValueError(f"a {qtype.name} row of {k} is not whole blocks of {block}")
    expected = k // block * block_bytes
    if raw.dtype != np.uint8 or raw.shape != (n_out, expected):
        raise ValueError(f"raw blocks must be uint8 ({n_out}, {expected}), got {raw.dtype} {raw.shape}")
    return np.ascontiguousarray(raw).reshape(n_out, k // block, block_bytes)


def _f16(b: np.ndarray, at: int) -> np.ndarray:
    """The f16 at byte `at` of every block -> (n_out, n_blocks) f32"""
    return b[:, :, at:at + 2].copy().view(np.float16)[..., 0].astype(np.float32)


def _q4_k_scales(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K's 12 bytes of 6-bit scales and mins (get_scale_min_k4) -> sc, m (n_out, n_blocks, 8)"""
    s = b[:, :, 4:16].astype(np.uint8)
    sc = np.empty(s.shape[:2] + (8,), np.uint8)
    m = np.empty_like(sc)
    sc[..., :4], m[..., :4] = s[..., 0:4] & 63, s[..., 4:8] & 63
    sc[..., 4:] = (s[..., 8:12] & 0x0F) | ((s[..., 0:4] >> 6) << 4)
    m[..., 4:] = (s[..., 8:12] >> 4) | ((s[..., 4:8] >> 6) << 4)
    return sc.astype(np.float32), m.astype(np.float32)


def _nibbles(b: np.ndarray, qtype: T, n_out: int, k: int) -> dict:
    if qtype == T.Q4_K:
        sc, m = _q4_k_scales(b)
        scales = _f16(b, 0)[..., None] * sc       # d * sc per 32-element sub-block
        mins = -_f16(b, 2)[..., None] * m         # - dmin * m
        qs, half = b[:, :, 16:], 32
    else:
        d = _f16(b, 0)
        scales, mins = d, (-8.0 * d if qtype == T.Q4_0 else _f16(b, 2))
        qs, half = b[:, :, 2 if qtype == T.Q4_0 else 4:], 16
    return dict(scales=scales.reshape(n_out, k // 32).astype(np.float32),
                mins=mins.reshape(n_out, k // 32).astype(np.float32),
                qs=np.ascontiguousarray(qs).reshape(n_out, k // 2), half=half)


def _int8(b: np.ndarray, qtype: T, n_out: int, k: int) -> dict:
    if qtype == T.Q8_0:
        return dict(scales=_f16(b, 0), qs=b[:, :, 2:].copy().view(np.int8).reshape(n_out, k), group=32)
    if qtype == T.Q5_0:   # d | qh (32 fifth bits, little-endian) | qs (16 bytes: elements j and j + 16)
        qh = b[:, :, 2:6].copy().view("<u4")[..., 0]
        bits = (qh[..., None] >> np.arange(32, dtype=np.uint32)) & 1                 # (n_out, nb, 32)
        nib = np.concatenate([b[:, :, 6:] & 0x0F, b[:, :, 6:] >> 4], axis=-1)        # (n_out, nb, 32)
        q = (nib | (bits << 4)).astype(np.int16) - 16
        return dict(scales=_f16(b, 0), qs=q.astype(np.int8).reshape(n_out, k), group=32)
    # Q6_K: ql[128] | qh[64] | scales int8[16] | d; per half of 128 elements, l = 0..31:
    # elements l, 32+l, 64+l, 96+l are ql[l] & 15, ql[32+l] & 15, ql[l] >> 4, ql[32+l] >> 4, each with
    # two high bits of qh[l] (bits 0-1, 2-3, 4-5, 6-7), minus 32; scale sc[e // 16] for element e
    ql, qh = b[:, :, :128].astype(np.int16), b[:, :, 128:192].astype(np.int16)
    halves = []
    for h in range(2):
        lq, hq = ql[..., 64 * h:64 * h + 64], qh[..., 32 * h:32 * h + 32]
        halves += [(lq[..., :32] & 15) | ((hq & 3) << 4), (lq[..., 32:] & 15) | (((hq >> 2) & 3) << 4),
                   (lq[..., :32] >> 4) | (((hq >> 4) & 3) << 4), (lq[..., 32:] >> 4) | (((hq >> 6) & 3) << 4)]
    q = np.concatenate(halves, axis=-1) - 32                                        # (n_out, nb, 256)
    sc = b[:, :, 192:208].copy().view(np.int8).astype(np.float32)                   # (n_out, nb, 16)
    scales = _f16(b, 208)[..., None] * sc
    return dict(scales=scales.reshape(n_out, k // 16), qs=q.astype(np.int8).reshape(n_out, k), group=16)


def upload(raw: np.ndarray, qtype, shape: tuple[int, int]) -> DeviceMatrix:
    """raw: the tensor's data as the GGUF holds it (gguf_file.tensor_data); shape (n_out, k)."""
    cuda = cuda_module()
    n_out, k = (int(s) for s in shape)
    qtype = T(qtype)
    if qtype in (T.Q4_0, T.Q4_1, T.Q4_K):
        parts = _nibbles(_blocks(raw, n_out, k, qtype), qtype, n_out, k)
        return DeviceMatrix("nibbles", n_out, k, scales=cuda.to_device(parts["scales"]),
                            mins=cuda.to_device(parts["mins"]), qs=cuda.to_device(parts["qs"]), half=parts["half"])
    if qtype in (T.Q8_0, T.Q5_0, T.Q6_K):
        parts = _int8(_blocks(raw, n_out, k, qtype), qtype, n_out, k)
        return DeviceMatrix("int8", n_out, k, scales=cuda.to_device(np.ascontiguousarray(parts["scales"], np.float32)),
                            qs=cuda.to_device(parts["qs"]), group=parts["group"])
    w = (raw if qtype == T.F16 else dequantize(raw, qtype, (n_out, k))).astype(np.float16).reshape(n_out, k)
    return DeviceMatrix("f16", n_out, k, w=cuda.to_device(np.ascontiguousarray(w)))
