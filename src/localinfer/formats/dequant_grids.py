"""Reference dequantizers for the grid i-quants: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M.

Each group of 8 (or 4) elements is one point of a fixed lattice ("grid", ggml-common.h's iq*_grid)
named by an 8..11-bit index, with per-element signs and a small per-sub-block scale times one fp16 d
per 256 elements. The grids are the format's data; they are taken from gguf-py's own copies (the
same ones csrc/gen_iq_grids.py prints for C), decoded on first use: reading a model of another type
never imports gguf-py. Same signature as the other dequantizers, checked bit
for bit against ``gguf.quants.dequantize``: the sub-block scale is an f32 computed as ggml computes
it, then ``scale * grid`` rounded once, then the sign (exact); IQ1's ``scale * (grid + delta)``.

Layouts (little-endian; d an fp16):
- IQ2_XXS { d; u16 qs[32] } = 66: per 32 elements two u32, a = 4 grid indices (bytes),
  b = four 7-bit sign codes (bits 7k..) and a 4-bit scale ls (bits 28..31); y = d*(0.5+ls)*0.25 * g * s.
- IQ2_XS { d; u16 qs[32]; u8 scales[8] } = 74: qs[i] = 9-bit grid index | 7-bit sign code << 9, one
  4-bit scale per 16 elements (low nibble first); y as IQ2_XXS.
- IQ2_S { d; u8 qs[32]; u8 signs[32]; u8 qh[8]; u8 scales[8] } = 82: 10-bit grid indices
  (qs | 2 bits of qh << 8), explicit sign bits, scales as IQ2_XS.
- IQ3_XXS { d; u8 qs[64]; u32 scales_signs[8] } = 98: 8-bit indices into a 4-element grid; per 32
  elements a u32 as IQ2_XXS's b; y = d*(0.5+ls)*0.5 * g * s.
- IQ3_S { d; u8 qs[64]; u8 qh[8]; u8 signs[32]; u8 scales[4] } = 110: 9-bit indices (qs | qh bit),
  explicit sign bits, a 4-bit scale per 32; y = d*(1+2*ls) * g * s.
- IQ1_S { d; u8 qs[32]; u16 qh[8] } = 50: 11-bit indices (qs | 3 bits of qh << 8), per 32 elements
  qh bits 12..14 a scale, bit 15 the sign of delta = 1/8; y = d*(2*ls+1) * (g + delta), g in -1, 0, 1.
- IQ1_M { u8 qs[32]; u8 qh[16]; u16 sc[4] } = 56: no separate d -- its 16 bits are the top nibbles
  of sc[0..3]; 11-bit indices with a delta sign per 8 elements (bit 3 of each qh nibble), a 3-bit
  scale per 16 elements (sc[i/4] bits 3*(i%4)..); y as IQ1_S.
"""

from __future__ import annotations

from functools import cache

import numpy as np

QK_K = 256
IQ1_DELTA = np.float32(0.125)   # ggml-common.h's IQ1S_DELTA and IQ1M_DELTA

IQ2_XXS_TYPE_SIZE = 2 + QK_K // 4
IQ2_XS_TYPE_SIZE = 2 + QK_K // 4 + QK_K // 32
IQ2_S_TYPE_SIZE = 2 + QK_K // 4 + QK_K // 16
IQ3_XXS_TYPE_SIZE = 2 + 3 * QK_K // 8
IQ3_S_TYPE_SIZE = 2 + 13 * QK_K // 32 + QK_K // 64
IQ1_S_TYPE_SIZE = 2 + QK_K // 8 + QK_K // 16
IQ1_M_TYPE_SIZE = QK_K // 8 + QK_K // 16 + QK_K // 32


@cache
def _tables() -> dict[str, np.ndarray]:
    """gguf-py's decoded grids as float32 (n_points, 8 or 4), and ksigns_iq2xs: code c (7 bits) ->
    8 sign bits, the 8th making the count of minus signs even."""
    import gguf.quants as gq

    out = {}
    for name in ("IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S"):
        cls = getattr(gq, name)
        cls.init_grid()
        out["GRID_" + name] = np.ascontiguousarray(cls.grid.reshape(cls.grid_shape), dtype=np.float32)
    out["KSIGNS"] = np.frombuffer(gq.IQ2_XXS.ksigns, dtype=np.uint8)
    return out


def __getattr__(name: str) -> np.ndarray:   # GRID_IQ2_XXS ... KSIGNS, for the quantizers and tests
    tables = _tables()
    if name in tables:
        return tables[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _d(blocks: np.ndarray) -> np.ndarray:
    return blocks[:, 0:2].view(np.float16).astype(np.float32)   # (n, 1)


def _signs(bits: np.ndarray) -> np.ndarray:
    """(...) sign bytes -> (..., 8) float32 +1 / -1, bit k for element k."""
    b = np.unpackbits(bits[..., None], axis=-1, bitorder="little")
    return np.where(b == 0, np.float32(1), np.float32(-1))


def _nibbles(x: np.ndarray) -> np.ndarray:
    """(n, k) bytes -> (n, 2k) values, low nibble of byte j at 2j, high at 2j + 1."""
    return np.stack([x & np.uint8(0x0F), x >> np.uint8(4)], axis=-1).reshape(x.shape[0], -1)


def _apply(db: np.ndarray, grid: np.ndarray, signs: np.ndarray, n: int) -> np.ndarray:
    """db (n, sub, 1, 1) * grid (n, sub, groups, k) * signs, rounded as gguf-py: (db * g) * s."""
    return (db * grid * signs).reshape(n, QK_K)


def dequantize_row_iq2_xxs(blocks: np.ndarray) -> np.ndarray:
    n, t = blocks.shape[0], _tables()
    q = np.ascontiguousarray(blocks[:, 2:]).view(np.uint32).reshape(n, 8, 2)
    db = _d(blocks) * (np.float32(0.5) + (q[..., 1] >> 28).astype(np.float32)) * np.float32(0.25)
    codes = (q[..., 1:2] >> np.array([0, 7, 14, 21], dtype=np.uint32)) & np.uint32(0x7F)   # (n, 8, 4)
    idx = np.ascontiguousarray(q[..., 0]).view(np.uint8).reshape(n, 8, 4)
    return _apply(db[..., None, None], t["GRID_IQ2_XXS"][idx], _signs(t["KSIGNS"][codes]), n)


def _scales_16(scales: np.ndarray, d: np.ndarray) -> np.ndarray:
    """IQ2_XS / IQ2_S: 16 four-bit scales -> db = d * (0.5 + ls) * 0.25, shape (n, 16, 1, 1)."""
    ls = _nibbles(scales).astype(np.float32)
    return (d * (np.float32(0.5) + ls) * np.float32(0.25))[..., None, None]


def dequantize_row_iq2_xs(blocks: np.ndarray) -> np.ndarray:
    n, t = blocks.shape[0], _tables()
    qs = np.ascontiguousarray(blocks[:, 2:66]).view(np.uint16).reshape(n, 16, 2)
    db = _scales_16(blocks[:, 66:74], _d(blocks))
    grid = t["GRID_IQ2_XS"][qs & np.uint16(511)]
    return _apply(db, grid, _signs(t["KSIGNS"][qs >> 9]), n)


def dequantize_row_iq2_s(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    qh = (blocks[:, 66:74, None] >> np.array([0, 2, 4, 6], dtype=np.uint8)) & np.uint8(3)   # (n, 8, 4)
    idx = blocks[:, 2:34].astype(np.uint16) | qh.reshape(n, 32).astype(np.uint16) << 8
    db = _scales_16(blocks[:, 74:82], _d(blocks))
    return _apply(db, _tables()["GRID_IQ2_S"][idx.reshape(n, 16, 2)], _signs(blocks[:, 34:66]).reshape(n, 16, 2, 8), n)


def dequantize_row_iq3_xxs(blocks: np.ndarray) -> np.ndarray:
    n, t = blocks.shape[0], _tables()
    aux = np.ascontiguousarray(blocks[:, 66:98]).view(np.uint32)   # (n, 8)
    db = _d(blocks) * (np.float32(0.5) + (aux >> 28).astype(np.float32)) * np.float32(0.5)
    codes = (aux[..., None] >> np.array([0, 7, 14, 21], dtype=np.uint32)) & np.uint32(0x7F)   # (n, 8, 4)
    grid = t["GRID_IQ3_XXS"][blocks[:, 2:66]].reshape(n, 8, 4, 8)   # two 4-element points per sign code
    return _apply(db[..., None, None], grid, _signs(t["KSIGNS"][codes]), n)


def dequantize_row_iq3_s(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    qh = np.unpackbits(blocks[:, 66:74], axis=-1, bitorder="little").astype(np.uint16)   # (n, 64)
    idx = blocks[:, 2:66].astype(np.uint16) | qh << 8
    ls = _nibbles(blocks[:, 106:110])   # (n, 8) uint8
    db = _d(blocks) * (1 + 2 * ls)      # uint8 1 + 2*ls, then f32: as gguf-py
    grid = _tables()["GRID_IQ3_S"][idx].reshape(n, 8, 4, 8)
    return _apply(db[..., None, None], grid, _signs(blocks[:, 74:106]).reshape(n, 8, 4, 8), n)


def dequantize_row_iq1_s(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    qh = np.ascontiguousarray(blocks[:, 34:50]).view(np.uint16)   # (n, 8)
    dl = _d(blocks) * (2 * ((qh >> 12) & 7) + 1)                  # uint16, then f32
    delta = np.where(qh & np.uint16(0x8000) == 0, IQ1_DELTA, -IQ1_DELTA)
    high = (qh[..., None] >> np.array([0, 3, 6, 9], dtype=np.uint16)) & np.uint16(7)
    idx = blocks[:, 2:34].astype(np.uint16) | high.reshape(n, 32) << 8
    grid = _tables()["GRID_IQ1_S"][idx].reshape(n, 8, 4, 8)
    return (dl[..., None, None] * (grid + delta[..., None, None])).reshape(n, QK_K)


def iq1_m_d(blocks: np.ndarray) -> np.ndarray:
    """IQ1_M's fp16 d, whose nibbles are the top 4 bits of sc[0..3] (low nibble first): (n, 1) f32."""
    sc = np.ascontiguousarray(blocks[:, 48:56]).view(np.uint16)
    bits = (sc[:, 0] >> 12) | (sc[:, 1] >> 8) & 0xF0 | (sc[:, 2] >> 4) & 0xF00 | sc[:, 3] & 0xF000
    return bits.astype(np.uint16).view(np.float16).astype(np.float32)[:, None]


def dequantize_row_iq1_m(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    sc = np.ascontiguousarray(blocks[:, 48:56]).view(np.uint16)
    ls = ((sc[..., None] >> np.array([0, 3, 6, 9], dtype=np.uint16)) & np.uint16(7)).reshape(n, 16)
    dl = iq1_m_d(blocks) * (2 * ls + 1)                       # (n, 16): one per 16 elements
    nib = _nibbles(blocks[:, 32:48])                          # (n, 32): one per 8 elements
    idx = blocks[:, :32].astype(np.uint16) | (nib & 7).astype(np.uint16) << 8
    delta = np.where(nib & 8 == 0, IQ1_DELTA, -IQ1_DELTA)
    grid = _tables()["GRID_IQ1_S"][idx].reshape(n, 16, 2, 8)
    return (dl[..., None, None] * (grid + delta.reshape(n, 16, 2, 1))).reshape(n, QK_K)
