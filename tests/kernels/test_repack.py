"""Repacked weights (csrc/core/repack.c): groups of four rows interleaved for the decode GEMV.

The GEMM (prefill, from 16 rows) gathers each row back, so it gives the row-major bits; the GEMV reads
a group with the ISA's x4 dot, whose sums run in another order than vec_dot's: the two agree within
a bound from the arithmetic. Where a type has a 16-row kernel (several sequences decoding together),
3 to 23 activation rows go through it: each row again within that bound, with the same bits for any
number of rows. Under kernels.gemv_rows every row is the 1-row call's, bit for bit (what speculative
decoding's verification relies on)."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from test_kernels import FORMATS, ISAS, random_activations, random_rows

from localinfer.backend import kernels
from localinfer.formats import dequantize

pytestmark = pytest.mark.skipif(not kernels.available(), reason="C kernels not built")

X4_TYPES = [T.Q4_0, T.Q8_0, T.Q4_K, T.Q6_K]
# what each ISA repacks: AVX2 reads Q6_K row by row, faster than its x4 dot (BENCHMARKS.md, "Kernel choices")
X4_TYPES_OF = {"avx2": [T.Q4_0, T.Q8_0, T.Q4_K], "avx512": X4_TYPES}
# x4 dots that repeat their ISA's row dot per row (the same integers in the same lanes, the same float
# steps): their GEMV gives the row-major bits, not only a result within rounding of them
X4_SAME_BITS = [T.Q6_K]
# types with a 16-row kernel (vec_dot_x16_m): from 3 activation rows to 23 through it
X16_TYPES_OF = {"avx2": [T.Q4_0, T.Q4_K], "avx512": [T.Q4_0, T.Q8_0, T.Q4_K, T.Q6_K]}
X16_MAX_M = {"avx2": 23, "avx512": 23}  # the ISA table's x16_gemm_min_m - 1
# 16-row kernels that repeat the x4 dot's steps per row: rows with its (1-row) bits; on AVX-512 only
# below the row count from which they transpose the 16 rows instead (Q4_K always; quants_x4_avx512.c
# Q6_K_X16_FROM)
X16_SAME_AS_X4 = [T.Q4_K, T.Q6_K]
X16_TRANSPOSED_FROM = {"avx2": {}, "avx512": {T.Q4_K: 3, T.Q6_K: 6}}
SIMD_ISAS = [isa for isa in ISAS if isa in ("avx2", "avx512")]
X4_CASES = [(isa, t) for isa in SIMD_ISAS for t in X4_TYPES_OF[isa]]


def _pair(qtype, n_out, n_blocks, seed):
    fmt = FORMATS[qtype]
    raw = random_rows(fmt, n_out, n_blocks, seed=seed)
    return fmt, raw, kernels.prepare(raw, qtype), kernels.prepare(raw, qtype, repack=True)


def _bound(raw, qtype, x) -> np.ndarray:
    """|error| allowed per output: float32 rounding of a reordered sum of k products, each bounded by
    |w| |x| (x after its own Q8 rounding, at most half a step off), over a few hundred additions."""
    n_out, k = raw.shape[0], x.shape[-1]
    w = np.abs(dequantize(raw, qtype, (n_out, k)).astype(np.float64))
    mag = np.atleast_2d(np.abs(x).astype(np.float64) * 1.01) @ w.T
    return 64 * np.finfo(np.float32).eps * mag * (1 + k / 32) ** 0.5 + 1e-30


@pytest.mark.parametrize("isa,qtype", X4_CASES, ids=lambda v: getattr(v, "name", v))
# (12, 16): whole super-groups of 32-element groups too, which the GEMM packs from the x4 rows
# without gathering them (pack_w_x4); the others have tails, which it gathers
@pytest.mark.parametrize("n_out,n_blocks", [(4, 1), (16, 3), (68, 9), (260, 2), (12, 16)])
def test_repacked_gemv_agrees_and_gemm_is_exact(isa, qtype, n_out, n_blocks):
    with kernels._isa(isa):
        fmt, raw, rows, x4 = _pair(qtype, n_out, n_blocks, seed=n_out + n_blocks)
        assert x4.layout == kernels.LAYOUT_X4 and rows.layout == kernels.LAYOUT_ROWS
        k = n_blocks * fmt.block_size
        x = random_activations(23, k, seed=15)
        several = x4.matmul(x[:X16_MAX_M[isa]])  # the most rows the 16-row kernel takes
        for m in (1, 2, 3, 5, 15, 23):
            got, want = x4.matmul(x[:m]), rows.matmul(x[:m])
            assert np.all(np.abs(got.astype(np.float64) - want) <= _bound(raw, qtype, x[:m])), (m, isa)
            from_m = X16_TRANSPOSED_FROM[isa].get(qtype)
            transposed = from_m is not None and m >= from_m
            if 3 <= m <= X16_MAX_M[isa] and qtype in X16_TYPES_OF[isa] and (transposed or from_m is None):
                # its 16-row kernel: the same bits, any m
                np.testing.assert_array_equal(got.view(np.uint32), several[:m].view(np.uint32))
            with kernels.gemv_rows(m):  # each activation row alone gives that row, bit for bit
                one_row_bits = x4.matmul(x[:m])
            for i in range(m):
                np.testing.assert_array_equal(x4.matmul(x[i]).view(np.uint32), one_row_bits[i].view(np.uint32))
            if m <= X16_MAX_M[isa] and qtype in X16_SAME_AS_X4 and qtype in X16_TYPES_OF[isa] and not transposed:
                np.testing.assert_array_equal(got.view(np.uint32), one_row_bits.view(np.uint32))
        x = random_activations(24, k, seed=17)  # the GEMM: rows gathered back, the row-major bits
        np.testing.assert_array_equal(x4.matmul(x).view(np.uint32), rows.matmul(x).view(np.uint32))


@pytest.mark.parametrize("isa,qtype", [(i, t) for i, t in X4_CASES if t in X4_SAME_BITS],
                         ids=lambda v: getattr(v, "name", v))
@pytest.mark.parametrize("n_out,n_blocks", [(4, 1), (68, 9), (260, 2)])
def test_the_x4_dots_that_repeat_the_row_dot_give_its_bits(isa, qtype, n_out, n_blocks):
    with kernels._isa(isa):
        fmt, raw, rows, x4 = _pair(qtype, n_out, n_blocks, seed=n_out + n_blocks)
        assert x4.layout == kernels.LAYOUT_X4
        for m in (1, 3, 9):
            x = random_activations(m, n_blocks * fmt.block_size, seed=m)
            with kernels.gemv_rows(m):  # each row alone: the row dot's bits, and the x4 dot's
                want, got = rows.matmul(x), x4.matmul(x)
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


# the x4 layouts that give the row-major bits for any number of activation rows (the ISA tables'
# x4_same_bits): a matrix of such a type may be repacked while it is in use (arch/deferred_repack.py)
LAYOUT_SAME_BITS = {"avx2": [T.Q8_0], "avx512": []}


@pytest.mark.parametrize("isa", SIMD_ISAS)
def test_which_layouts_give_the_row_major_bits(isa):
    ffi, lib = kernels.c_module()
    with kernels._isa(isa):
        assert [t for t in X4_TYPES if lib.li_layout_same_bits(int(t))] == LAYOUT_SAME_BITS[isa]
        assert lib.li_layout_same_bits(int(T.Q4_1)) == 0 and lib.li_layout_same_bits(-1) == 0


@pytest.mark.parametrize("isa,qtype", [(i, t) for i in SIMD_ISAS for t in LAYOUT_SAME_BITS[i]],
                         ids=lambda v: getattr(v, "name", v))
@pytest.mark.parametrize("n_out,n_blocks", [(4, 1), (68, 9), (260, 4)])
def test_a_layout_with_the_row_major_bits_gives_them_for_any_rows(isa, qtype, n_out, n_blocks):
    """Odd and even block counts (the row dot sums even and odd blocks apart), the GEMV of 1 to 5
    rows, the GEMM, and both forced paths (speculative verification's, a cached prompt's rest)."""
    with kernels._isa(isa):
        fmt, raw, rows, x4 = _pair(qtype, n_out, n_blocks, seed=n_out + n_blocks)
        assert x4.layout == kernels.LAYOUT_X4
        for m in (1, 2, 3, 5, 6, 15, 23, 40):
            x = random_activations(m, n_blocks * fmt.block_size, seed=m)
            np.testing.assert_array_equal(x4.matmul(x).view(np.uint32), rows.matmul(x).view(np.uint32))
            for forced in (kernels.gemv_rows(m), kernels.batched_rows()):
                with forced:
                    np.testing.assert_array_equal(x4.matmul(x).view(np.uint32), rows.matmul(x).view(np.uint32))


# types whose row-major GEMV dots prefetch their rows on AVX2 (x86/avx2_table.c vec_dot_prefetches)
ROW_PREFETCH_TYPES = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q6_K]


@pytest.mark.parametrize("isa,qtype", sorted({*X4_CASES, *((i, t) for i in SIMD_ISAS for t in ROW_PREFETCH_TYPES)}),
                         ids=lambda v: getattr(v, "name", v))
@pytest.mark.parametrize("n_out,n_blocks", [(36, 5), (9, 70)])
def test_the_prefetch_distance_changes_no_bits(isa, qtype, n_out, n_blocks):
    """The streaming dots prefetch kernels.set_stream_ahead bytes on (past a row's end into the next
    group's rows, past the matrix's end too, which a prefetch may): any distance, or none, gives the
    same bits, repacked or row by row (where the row dots prefetch, the GEMV's own prefetches stop)."""
    with kernels._isa(isa):
        fmt, raw, rows, x4 = _pair(qtype, n_out, n_blocks, seed=7)
        x = random_activations(1, n_blocks * fmt.block_size, seed=1)
        xs = random_activations(4, n_blocks * fmt.block_size, seed=2)  # several rows: the row-major vec_dot_m
        before = kernels.set_stream_ahead(0)
        try:
            want = [p.matmul(a) for p in (rows, x4) for a in (x, xs)]
            for ahead in (64, 2048, kernels.STREAM_AHEAD_MAX):
                kernels.set_stream_ahead(ahead)
                got = [p.matmul(a) for p in (rows, x4) for a in (x, xs)]
                for g, w in zip(got, want):
                    np.testing.assert_array_equal(g.view(np.uint32), w.view(np.uint32))
        finally:
            kernels.set_stream_ahead(before)


@pytest.mark.parametrize("qtype", X4_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("threads", [1, 2])
def test_a_repacked_matrix_under_an_isa_without_x4_dots_gathers_rows(qtype, threads):
    """Repacked on a SIMD ISA, then run where the dot over groups is missing (LOCALINFER_ISA=generic
    in a test, or a lower variant forced later): each row is gathered for vec_dot, the exact bits."""
    isas = [isa for isa in SIMD_ISAS if qtype in X4_TYPES_OF[isa]]
    if not isas:
        pytest.skip(f"no SIMD variant on this CPU repacks {qtype.name}")
    before = kernels.get_threads()
    try:
        kernels.set_threads(threads)
        with kernels._isa(isas[-1]):
            fmt, raw, _, x4 = _pair(qtype, 132, 5, seed=3)
            assert x4.layout == kernels.LAYOUT_X4
        with kernels._isa("generic"):
            x = random_activations(3, 5 * fmt.block_size, seed=4)
            np.testing.assert_array_equal(x4.matmul(x).view(np.uint32),
                                          kernels.matmul(raw, qtype, x).view(np.uint32))
    finally:
        kernels.set_threads(before)


@pytest.mark.parametrize("isa", SIMD_ISAS)
def test_each_isa_repacks_the_types_it_has_x4_dots_for(isa):
    with kernels._isa(isa):
        assert [t for t in X4_TYPES if kernels.repack_layout(t) == kernels.LAYOUT_X4] == X4_TYPES_OF[isa]


def test_what_is_not_repacked_stays_in_the_mapping():
    # a type without x4 dots, a row count that is not a multiple of 4, and the generic ISA
    raw = random_rows(FORMATS[T.Q4_1], 8, 2, seed=1)
    assert kernels.prepare(raw, T.Q4_1, repack=True).layout == kernels.LAYOUT_ROWS
    for qtype in X4_TYPES:
        raw = random_rows(FORMATS[qtype], 6, 2, seed=1)
        mat = kernels.prepare(raw, qtype, repack=True)
        assert mat.layout == kernels.LAYOUT_ROWS and mat.w is raw
    with kernels._isa("generic"):
        assert kernels.repack_layout(T.Q4_0) == kernels.LAYOUT_ROWS


def test_the_c_entry_points_check_their_arguments():
    lib, ffi = kernels._lib, kernels._ffi
    raw = random_rows(FORMATS[T.Q4_0], 8, 2, seed=1)
    out = np.empty_like(raw)
    src, dst = ffi.from_buffer(raw), ffi.from_buffer(out)
    rb = raw.shape[1]
    assert lib.li_repack(int(T.Q4_1), kernels.LAYOUT_X4, src, rb, 8, dst) == lib.LI_ETYPE
    assert lib.li_repack(int(T.Q4_0), kernels.LAYOUT_ROWS, src, rb, 8, dst) == lib.LI_ETYPE
    assert lib.li_repack(int(T.Q4_0), kernels.LAYOUT_X4, src, rb, 6, dst) == lib.LI_EINVAL   # not whole groups
    assert lib.li_repack(int(T.Q4_0), kernels.LAYOUT_X4, src, rb + 1, 8, dst) == lib.LI_EINVAL  # partial blocks
    assert lib.li_repack(int(T.Q4_0), kernels.LAYOUT_X4, src, rb, 8, src) == lib.LI_EINVAL   # in place
    x = np.ones((1, 64), np.float32)
    y = np.empty((1, 8), np.float32)
    xp, yp = ffi.cast("float *", ffi.from_buffer(x)), ffi.cast("float *", ffi.from_buffer(y))
    assert lib.li_matmul_layout(int(T.Q4_1), kernels.LAYOUT_X4, src, rb, 8, 64, xp, 1, yp) == lib.LI_EINVAL
    assert lib.li_matmul_layout(int(T.Q4_0), 7, src, rb, 8, 64, xp, 1, yp) == lib.LI_EINVAL
    assert lib.li_matmul_layout(int(T.Q4_0), kernels.LAYOUT_X4, src, rb, 6, 64, xp, 1, yp) == lib.LI_EINVAL


def test_a_matrix_is_repacked_piece_by_piece(monkeypatch):
    """Each piece's source range is handed back as soon as it is copied (the loader releases those
    mapped pages), the pieces tile the matrix, and the result is the same as in one piece."""
    if not SIMD_ISAS:
        pytest.skip("no SIMD variant on this CPU: nothing is repacked")
    fmt = FORMATS[T.Q4_0]
    raw = random_rows(fmt, 44, 3, seed=5)
    whole = kernels.prepare(raw, T.Q4_0, repack=True)
    monkeypatch.setattr(kernels.PreparedMatrix, "REPACK_PIECE_BYTES", 8 * raw.shape[1])
    pieces = []
    pieced = kernels.prepare(raw, T.Q4_0, repack=True, on_repacked=lambda lo, hi: pieces.append((lo, hi)))
    rb = raw.shape[1]
    assert pieces == [(lo, min(lo + 8 * rb, raw.nbytes)) for lo in range(0, raw.nbytes, 8 * rb)]
    np.testing.assert_array_equal(pieced.data, whole.data)


@pytest.mark.parametrize("isa,qtype", X4_CASES, ids=lambda v: getattr(v, "name", v))
def test_stacked_parts_are_repacked_in_place_of_their_concatenation(isa, qtype, monkeypatch):
    """PreparedMatrix.stacked repacks each part straight into its rows of the one copy: the same
    bytes as the concatenation repacked, each part's source handed back piece by piece."""
    fmt = FORMATS[qtype]
    parts = [random_rows(fmt, n, 3, seed=n) for n in (12, 4, 8)]
    rb = parts[0].shape[1]
    monkeypatch.setattr(kernels.PreparedMatrix, "REPACK_PIECE_BYTES", 8 * rb)
    with kernels._isa(isa):
        whole = kernels.prepare(np.concatenate(parts), qtype, repack=True)
        done = []
        mat = kernels.PreparedMatrix.stacked(parts, qtype, repack=True, on_repacked=lambda *r: done.append(r))
        assert mat.layout == whole.layout == kernels.LAYOUT_X4 and mat.w is None and mat.shape == whole.shape
        np.testing.assert_array_equal(mat.data, whole.data)
        assert done == [(0, 0, 8 * rb), (0, 8 * rb, 12 * rb), (1, 0, 4 * rb), (2, 0, 8 * rb)]
        x = random_activations(2, mat.k, seed=1)
        np.testing.assert_array_equal(mat.matmul(x), whole.matmul(x))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("qtype,repack", [(T.Q4_1, True), (T.Q4_0, False), (T.Q6_K, False), (T.F16, False),
                                          (T.F32, False)], ids=lambda v: getattr(v, "name", v))
@pytest.mark.parametrize("threads", [1, 2])
def test_stacked_parts_not_repacked_are_read_where_they_are(isa, qtype, repack, threads):
    """A type without a repacked layout, or no repack: the parts stay where they are, nothing copied,
    and one call reads them all with the bits of their concatenation, through the GEMV (one row, the
    several-row dots) and the GEMM alike, on one thread or split between two."""
    fmt = FORMATS[qtype]
    n_blocks = max(1, 512 // fmt.block_size)
    parts = [random_rows(fmt, n, n_blocks, seed=n) for n in (32, 16, 7)]
    before = kernels.get_threads()
    try:
        kernels.set_threads(threads)
        with kernels._isa(isa):
            mat = kernels.PreparedMatrix.stacked(parts, qtype, repack=repack,
                                                 on_repacked=lambda *r: pytest.fail("repacked"))
            whole = kernels.prepare(np.concatenate(parts), qtype)
            assert mat.layout == kernels.LAYOUT_ROWS and mat.data is None and mat.shape == whole.shape
            assert all(a is b for a, b in zip(mat.parts, parts)) and list(mat.part_rows) == [32, 16, 7]
            for m in (1, 2, 3, 5, 8, 17, 40):
                x = random_activations(m, mat.k, seed=m)
                np.testing.assert_array_equal(mat.matmul(x).view(np.uint32), whole.matmul(x).view(np.uint32))
    finally:
        kernels.set_threads(before)


def test_stacked_parts_read_in_place_refuse_an_out_over_any_of_them():
    buf = np.zeros((48, 64), dtype=np.float32)
    mat = kernels.PreparedMatrix.stacked([buf[:32], buf[32:]], T.F32)
    assert mat.parts is not None
    x = np.ones((1, 64), dtype=np.float32)
    inside_second = buf.reshape(-1)[40 * 64:40 * 64 + 48].reshape(1, 48)
    with pytest.raises(ValueError, match="overlap"):
        mat.matmul(x, out=inside_second)


@pytest.mark.parametrize("sizes", [(24, 16), (16,) * 5, (16, 0, 8)], ids=["not-whole-chunks", "too-many", "empty"])
def test_stacked_parts_that_cannot_stay_apart_are_concatenated(sizes):
    """Parts before the last that are not whole GEMV chunks (16 rows), more than LI_MAX_PARTS parts,
    or an empty one: the rows are concatenated (one copy) and kept row-major."""
    fmt = FORMATS[T.Q4_0]
    parts = [random_rows(fmt, n, 2, seed=i) for i, n in enumerate(sizes)]
    mat = kernels.PreparedMatrix.stacked(parts, T.Q4_0)
    assert mat.layout == kernels.LAYOUT_ROWS and mat.parts is None
    np.testing.assert_array_equal(mat.data, np.concatenate(parts))


@pytest.mark.parametrize("isa,qtype", X4_CASES, ids=lambda v: getattr(v, "name", v))
def test_parts_of_a_repacked_matrix_give_its_bits(isa, qtype):
    """li_matmul_parts in the x4 layout: parts repacked one by one read as the whole matrix repacked
    (an x4 group never straddles two parts), through the x4 GEMV, the 16-row kernels and the GEMM."""
    ffi, lib = kernels.c_module()
    fmt = FORMATS[qtype]
    raw = random_rows(fmt, 48, 2048 // fmt.block_size, seed=3)
    with kernels._isa(isa):
        whole = kernels.prepare(raw, qtype, repack=True)
        pieces = [kernels.prepare(np.ascontiguousarray(raw[a:b]), qtype, repack=True) for a, b in ((0, 32), (32, 48))]
        ptrs = ffi.new("const void *[]", [p.pointer for p in pieces])
        rows = ffi.new("int64_t[]", [32, 16])
        for m in (1, 3, 16, 30):
            x = random_activations(m, whole.k, seed=m)
            y = np.empty((m, 48), dtype=np.float32)
            assert lib.li_matmul_parts(int(qtype), whole.layout, ptrs, rows, 2, whole.row_bytes, whole.k,
                                       ffi.from_buffer("float[]", x), m, ffi.from_buffer("float[]", y)) == 0
            np.testing.assert_array_equal(y.view(np.uint32), whole.matmul(x).view(np.uint32))


def test_matmul_parts_rejects_bad_parts():
    ffi, lib = kernels.c_module()
    fmt = FORMATS[T.Q4_0]
    raw = random_rows(fmt, 32, 2, seed=1)
    k, rb = 64, raw.shape[1]
    x, y = np.ones(k, dtype=np.float32), np.empty(64, dtype=np.float32)
    xp, yp, w = ffi.from_buffer("float[]", x), ffi.from_buffer("float[]", y), ffi.from_buffer(raw)

    def call(ptrs, rows, n=None, layout=kernels.LAYOUT_ROWS):
        return lib.li_matmul_parts(int(T.Q4_0), layout, ffi.new("const void *[]", ptrs), ffi.new("int64_t[]", rows),
                                   len(ptrs) if n is None else n, rb, k, xp, 1, yp)
    assert call([w, w], [16, 16]) == lib.LI_OK
    assert call([w, w], [16, 16], n=0) == lib.LI_EINVAL
    assert call([w] * (lib.LI_MAX_PARTS + 1), [4] * (lib.LI_MAX_PARTS + 1)) == lib.LI_EINVAL
    assert call([w, ffi.NULL], [16, 16]) == lib.LI_EINVAL
    assert call([w, w], [16, 0]) == lib.LI_EINVAL
    assert call([w, w], [8, 16]) == lib.LI_EINVAL       # a part before the last that is not whole 16-row chunks
    assert call([w, w], [16, 6], layout=kernels.LAYOUT_X4) == lib.LI_EINVAL   # x4 groups of four rows


def test_stacked_parts_must_share_a_width():
    raw = random_rows(FORMATS[T.Q4_0], 4, 2, seed=1)
    with pytest.raises(ValueError, match="non-empty"):
        kernels.PreparedMatrix.stacked([], T.Q4_0, repack=True)
    with pytest.raises(ValueError, match="one dtype and width"):
        kernels.PreparedMatrix.stacked([raw, random_rows(FORMATS[T.Q4_0], 4, 3, seed=1)], T.Q4_0, repack=True)
    with pytest.raises(TypeError, match="parts\\[1\\]"):
        kernels.PreparedMatrix.stacked([raw, raw.tolist()], T.Q4_0, repack=True)


@pytest.mark.parametrize("isa,qtype", X4_CASES, ids=lambda v: getattr(v, "name", v))
@pytest.mark.parametrize("threads", [1, 2])
def test_a_long_prompt_gives_the_bits_of_short_ones(isa, qtype, threads):
    """A prompt too long for one pass of the GEMM (its activation rows in blocks that stay in L2, each
    block multiplied with weight tiles unpacked once by the first and kept, LI_GEMM_TILE_BUDGET bytes
    of them at a time) gives each row the bits that a short prompt (still a GEMM's 16 rows or more)
    of that row's block gives: here
    k = 8192 makes several blocks of the 130 rows (2 or more, by the L2 size) and more tiles than the
    budget keeps, for either layout."""
    before = kernels.get_threads()
    try:
        kernels.set_threads(threads)
        with kernels._isa(isa):
            fmt, raw, rows, x4 = _pair(qtype, 260, 8192 // FORMATS[qtype].block_size, seed=11)
            x = random_activations(130, 8192, seed=12)
            for w in (rows, x4):
                whole = w.matmul(x)
                parts = np.concatenate([w.matmul(x[i:i + 26]) for i in range(0, 130, 26)])
                np.testing.assert_array_equal(whole.view(np.uint32), parts.view(np.uint32))
    finally:
        kernels.set_threads(before)
