"""Nearest grid points for the grid i-quants' quantizers (IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M,
IQ3_XXS, IQ3_S): ggml's ``iq2xs_init_impl`` / ``iq3xs_init_impl`` tables, built from our grids.

A grid type stores each group of ``n`` elements (8 or 4) as the index of one point of a fixed grid.
Its quantizer rounds each element to a level ``l`` of a small uniform lattice (3 levels for the
2-bit and 1-bit grids, 8 for the 3-bit ones), packs the levels into a *lattice index*
``u = sum(l_k << bits * k)`` and looks ``u`` up:

* ``index_map[u] >= 0``: the lattice point is a grid point, with that grid index;
* ``index_map[u] < 0`` (other than ``NOT_A_LATTICE_POINT``): it is not; at
  ``neighbours[-index_map[u] - 1]`` a count ``c``, then the ``c`` grid indices nearest to it,
  among which the quantizer picks the one of least weighted error (``find_best_neighbour``).

"Nearest" is measured in the lattice's own coordinates ``2 l + 1`` (squared Euclidean distance,
integers): the candidates are every grid point at one of the ``n_distances`` smallest distances
(ggml's ``nwant``: 2 for IQ2_XXS / IQ2_XS / IQ3_XXS, 1 for IQ2_S, 3 for IQ1_S / IQ1_M / IQ3_S),
listed by (distance, grid index) -- ggml sorts the same pairs with qsort and a total order, so the
lists (and the quantizers' choices among equal errors) are deterministic and the same as ggml's.

The map is indexed by every value the packed fields can spell, ``1 << bits * n``; an index with a
field beyond the last level is no lattice point and maps to ``NOT_A_LATTICE_POINT`` (ggml lists
neighbours for some of those too; its quantizers clamp their levels and never ask for one, nor do
ours). Tables are built on first use, once per grid, in about a second (numba, parallel over
lattice points).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numba
import numpy as np
from gguf import GGMLQuantizationType as T

from localinfer.formats import dequant_grids as dg

_jit = numba.njit(cache=True, nogil=True)
_par = numba.njit(cache=True, nogil=True, parallel=True)


@dataclass(frozen=True)
class GridSearch:
    """The lookup tables of one grid; the arrays are what the numba quantizers take."""

    grid: np.ndarray        # int8 (n_points, n): each grid point's lattice coordinates 2*l + 1
    index_map: np.ndarray   # int32 (1 << bits*n,): lattice index -> grid index, or -(offset + 1)
    neighbours: np.ndarray  # uint16: at each offset a count c, then c grid indices
    levels: int             # lattice levels per element
    bits: int               # bits per element in a lattice index
    n_distances: int        # how many of the smallest distances the neighbour lists cover

    @property
    def n(self) -> int:
        """Elements per grid point."""
        return self.grid.shape[1]


# The grid of each type and ggml's nwant for it. IQ1_M uses IQ1_S's grid and tables.
_TYPES = {
    T.IQ2_XXS: ("IQ2_XXS", 2),
    T.IQ2_XS: ("IQ2_XS", 2),
    T.IQ2_S: ("IQ2_S", 1),
    T.IQ1_S: ("IQ1_S", 3),
    T.IQ1_M: ("IQ1_S", 3),
    T.IQ3_XXS: ("IQ3_XXS", 2),
    T.IQ3_S: ("IQ3_S", 3),
}
GRID_TYPES = frozenset(_TYPES)
# index_map's value for an index with a field >= levels
NOT_A_LATTICE_POINT = np.iinfo(np.int32).min


def grid_search(qtype: T | int) -> GridSearch:
    """The tables for a grid type, built on first use and cached (IQ1_S and IQ1_M share theirs)."""
    try:
        name, n_distances = _TYPES[T(qtype)]
    except (KeyError, ValueError):
        label = T(qtype).name if int(qtype) in T._value2member_map_ else str(int(qtype))
        raise ValueError(f"{label} is not a grid type; grid types: {', '.join(t.name for t in _TYPES)}") from None
    return _build_cached(name, n_distances)


@functools.lru_cache(maxsize=None)
def _build_cached(name: str, n_distances: int) -> GridSearch:
    return build_grid_search(getattr(dg, f"GRID_{name}"), n_distances)


def build_grid_search(grid_values: np.ndarray, n_distances: int) -> GridSearch:
    """Tables for a grid given by its dequantized values (n_points, n): each element's level is the
    rank of its value among the values the grid uses (ggml's grid encodings are those ranks)."""
    values = np.unique(grid_values)
    levels = len(values)
    bits = max(1, (levels - 1).bit_length())
    n = grid_values.shape[1]
    if bits * n > 24:
        raise ValueError(f"a lattice of {levels} levels x {n} elements is too large for a lookup table")
    grid_levels = np.searchsorted(values, grid_values).astype(np.int64)
    grid = (2 * grid_levels + 1).astype(np.int8)
    shifts = bits * np.arange(n)
    index_map = np.full(1 << (bits * n), NOT_A_LATTICE_POINT, np.int32)
    # every lattice point: all combinations of levels per element, packed
    lattice = (np.indices((levels,) * n).reshape(n, -1).T << shifts).sum(axis=1)
    index_map[lattice] = -1
    index_map[(grid_levels << shifts).sum(axis=1)] = np.arange(len(grid), dtype=np.int32)
    if np.count_nonzero(index_map >= 0) != len(grid):
        raise ValueError("the grid has repeated points")
    off_grid = np.flatnonzero(index_map == -1)
    counts = np.zeros(off_grid.shape[0], np.int64)
    _count_neighbours(grid, bits, n_distances, off_grid, counts)
    # an off-grid point's list starts at its offset: the count, then the indices
    offsets = np.cumsum(counts + 1) - (counts + 1)
    neighbours = np.zeros(int((counts + 1).sum()), np.uint16)
    _fill_neighbours(grid, bits, n_distances, off_grid, offsets, neighbours)
    index_map[off_grid] = -(offsets + 1)
    return GridSearch(grid, index_map, neighbours, levels, bits, n_distances)


@_jit
def _distances(grid, bits, u, d2):
    """d2[j]: squared distance from lattice point u (positions 2*l + 1) to grid point j."""
    n = grid.shape[1]
    mask = (1 << bits) - 1
    for j in range(grid.shape[0]):
        s = 0
        for k in range(n):
            diff = int(grid[j, k]) - (2 * ((u >> (bits * k)) & mask) + 1)
            s += diff * diff
        d2[j] = s


@_jit
def _cutoff(d2, n_distances):
    """The n_distances-th smallest distinct value in d2 (the largest there is if fewer)."""
    cut = -1
    for _ in range(n_distances):
        nxt = -1
        for v in d2:
            if v > cut and (nxt < 0 or v < nxt):
                nxt = v
        if nxt < 0:
            break
        cut = nxt
    return cut


@_par
def _count_neighbours(grid, bits, n_distances, points, counts):
    for p in numba.prange(points.shape[0]):
        d2 = np.empty(grid.shape[0], np.int64)
        _distances(grid, bits, points[p], d2)
        cut = _cutoff(d2, n_distances)
        c = 0
        for v in d2:
            if v <= cut:
                c += 1
        counts[p] = c


@_par
def _fill_neighbours(grid, bits, n_distances, points, offsets, neighbours):
    """Each off-grid point's list in (distance, grid index) order: by distance, ties by index."""
    for p in numba.prange(points.shape[0]):
        d2 = np.empty(grid.shape[0], np.int64)
        _distances(grid, bits, points[p], d2)
        cut = _cutoff(d2, n_distances)
        pos = offsets[p]
        start = pos
        pos += 1
        level = -1
        while True:  # the next larger distance present, all its points in index order
            nxt = -1
            for v in d2:
                if v > level and (nxt < 0 or v < nxt):
                    nxt = v
            if nxt < 0 or nxt > cut:
                break
            for j in range(d2.shape[0]):
                if d2[j] == nxt:
                    neighbours[pos] = j
                    pos += 1
            level = nxt
        neighbours[start] = pos - start - 1


@_jit
def find_best_neighbour(neighbours, index_map_value, grid, xval, weight, scale, L):
    """ggml's iq2_find_best_neighbour / iq3_find_best_neighbour: among the candidates of an
    off-grid lattice point (``index_map_value`` < 0, its map entry), the grid point q minimising
    sum(weight * (scale * q - xval)^2) in float32, the first one on ties; writes its levels to
    L[:n] and returns its grid index; -1 (as ggml's assert) when no candidate's error is below
    FLT_MAX (NaN or inf in xval, weight or scale) or the index is no lattice point."""
    if index_map_value == NOT_A_LATTICE_POINT:
        return -1
    start = -index_map_value - 1
    best_d2 = np.float32(np.finfo(np.float32).max)
    best = -1
    n = grid.shape[1]
    for j in range(1, int(neighbours[start]) + 1):
        g = int(neighbours[start + j])
        d2 = np.float32(0)
        for i in range(n):
            diff = scale * np.float32(grid[g, i]) - xval[i]
            d2 += weight[i] * diff * diff
        if d2 < best_d2:
            best_d2 = d2
            best = g
    if best >= 0:
        for i in range(n):
            L[i] = (grid[best, i] - 1) // 2
    return best
