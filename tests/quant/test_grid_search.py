"""quant/grid_search.py's nearest-grid-point tables against a brute-force numpy search.

The oracle measures every grid point's squared distance to a lattice point in the coordinates
2*l + 1, orders the pairs (distance, grid index) with lexsort and keeps the points at the
n_distances smallest distances: ggml's iq2xs_init_impl / iq3xs_init_impl rule, restated."""
from __future__ import annotations

import gguf.quants
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from localinfer.formats import dequant_grids as dg
from localinfer.quant.grid_search import NOT_A_LATTICE_POINT, find_best_neighbour, grid_search

# type, its dequantized grid, ggml's nwant, levels per element, elements per point
CASES = [
    (T.IQ2_XXS, dg.GRID_IQ2_XXS, 2, 3, 8),
    (T.IQ2_XS, dg.GRID_IQ2_XS, 2, 3, 8),
    (T.IQ2_S, dg.GRID_IQ2_S, 1, 3, 8),
    (T.IQ1_S, dg.GRID_IQ1_S, 3, 3, 8),
    (T.IQ3_XXS, dg.GRID_IQ3_XXS, 2, 8, 4),
    (T.IQ3_S, dg.GRID_IQ3_S, 3, 8, 4),
]
IDS = [c[0].name for c in CASES]


def _levels(u: np.ndarray, bits: int, n: int) -> np.ndarray:
    return (u[:, None] >> (bits * np.arange(n))) & ((1 << bits) - 1)


def _oracle_neighbours(grid_pos: np.ndarray, point_levels: np.ndarray, nwant: int) -> list[int]:
    d2 = ((grid_pos.astype(np.int64) - (2 * point_levels + 1)) ** 2).sum(axis=1)
    order = np.lexsort((np.arange(len(d2)), d2))
    cut = np.unique(d2)[:nwant].max()
    return [int(j) for j in order if d2[j] <= cut]


@pytest.mark.parametrize("qtype,values,nwant,levels,n", CASES, ids=IDS)
def test_grid_points_map_to_themselves(qtype, values, nwant, levels, n):
    gs = grid_search(qtype)
    assert (gs.levels, gs.n, gs.n_distances) == (levels, n, nwant)
    # the lattice coordinates name the same values the dequantizer uses
    grid_map = np.array(getattr(gguf.quants, qtype.name).grid_map, np.float32)
    np.testing.assert_array_equal(grid_map[(gs.grid.astype(np.int64) - 1) // 2], values)
    u = ((gs.grid.astype(np.int64) - 1) // 2 << (gs.bits * np.arange(n))).sum(axis=1)
    np.testing.assert_array_equal(gs.index_map[u], np.arange(len(values)))
    # every combination of levels is a lattice point, nothing else is
    all_u = np.arange(gs.index_map.shape[0])
    valid = (_levels(all_u, gs.bits, n) < levels).all(axis=1)
    assert valid.sum() == levels**n
    assert (gs.index_map[~valid] == NOT_A_LATTICE_POINT).all()
    assert (gs.index_map[valid] != NOT_A_LATTICE_POINT).all()


@pytest.mark.parametrize("qtype,values,nwant,levels,n", CASES, ids=IDS)
def test_neighbour_lists_match_brute_force(qtype, values, nwant, levels, n):
    gs = grid_search(qtype)
    off = np.flatnonzero((gs.index_map < 0) & (gs.index_map != NOT_A_LATTICE_POINT))
    assert len(off) == levels**n - len(values)
    sample = np.random.default_rng(int(qtype)).choice(off, min(len(off), 600), replace=False)
    for u, lv in zip(sample, _levels(sample, gs.bits, n)):
        start = -int(gs.index_map[u]) - 1
        count = int(gs.neighbours[start])
        got = gs.neighbours[start + 1 : start + 1 + count].tolist()
        assert got == _oracle_neighbours(gs.grid, lv, nwant), (u, lv)
    # the lists tile the neighbour array exactly: nothing unlisted, nothing overlapping
    starts = np.sort(-gs.index_map[off].astype(np.int64) - 1)
    ends = starts + 1 + gs.neighbours[starts].astype(np.int64)
    assert starts[0] == 0 and (starts[1:] == ends[:-1]).all() and ends[-1] == len(gs.neighbours)


def _oracle_best(gs, cands, xval, weight, scale):
    """Sequential float32 sums in ggml's order; the first candidate wins a tie."""
    best, best_d2 = -1, np.float32(np.finfo(np.float32).max)
    for g in cands:
        d2 = np.float32(0)
        for i in range(gs.n):
            diff = np.float32(scale * np.float32(gs.grid[g, i])) - xval[i]
            d2 = np.float32(d2 + np.float32(np.float32(weight[i] * diff) * diff))
        if d2 < best_d2:
            best, best_d2 = g, d2
    return best


@pytest.mark.parametrize("qtype", [T.IQ2_XXS, T.IQ2_S, T.IQ3_XXS], ids=lambda t: t.name)
def test_find_best_neighbour(qtype):
    gs = grid_search(qtype)
    rng = np.random.default_rng(5)
    off = np.flatnonzero((gs.index_map < 0) & (gs.index_map != NOT_A_LATTICE_POINT))
    L = np.zeros(gs.n, np.int8)
    for u in rng.choice(off, 300):
        lv = _levels(np.array([u]), gs.bits, gs.n)[0]
        scale = np.float32(rng.uniform(0.5, 2.0))
        xval = (scale * (2 * lv + 1) + rng.normal(0, 0.7, gs.n)).astype(np.float32)
        weight = rng.uniform(0.1, 3, gs.n).astype(np.float32)
        start = -int(gs.index_map[u]) - 1
        cands = gs.neighbours[start + 1 : start + 1 + int(gs.neighbours[start])].tolist()
        got = find_best_neighbour(gs.neighbours, gs.index_map[u], gs.grid, xval, weight, scale, L)
        assert got == _oracle_best(gs, cands, xval, weight, scale)
        np.testing.assert_array_equal(L, (gs.grid[got].astype(np.int64) - 1) // 2)
    # exact ties: on the lattice point itself with unit weights and scale, all candidates at the
    # nearest distance have the same (integer) error, and the first listed must win
    u = off[7]
    lv = _levels(np.array([u]), gs.bits, gs.n)[0]
    start = -int(gs.index_map[u]) - 1
    got = find_best_neighbour(gs.neighbours, gs.index_map[u], gs.grid, (2 * lv + 1).astype(np.float32),
                              np.ones(gs.n, np.float32), np.float32(1), L)
    assert got == gs.neighbours[start + 1]
    # NaN input: no candidate, as ggml's assert would fire
    nan = np.full(gs.n, np.nan, np.float32)
    assert find_best_neighbour(gs.neighbours, gs.index_map[off[0]], gs.grid, nan, weight, np.float32(1), L) == -1
    assert find_best_neighbour(gs.neighbours, NOT_A_LATTICE_POINT, gs.grid, xval, weight, np.float32(1), L) == -1


def test_tables_are_cached_and_shared_by_iq1_types():
    assert grid_search(T.IQ2_XS) is grid_search(T.IQ2_XS)
    assert grid_search(T.IQ1_M) is grid_search(T.IQ1_S)


def test_not_a_grid_type():
    with pytest.raises(ValueError, match="Q4_K.*not a grid type"):
        grid_search(T.Q4_K)
