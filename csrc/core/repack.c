/* repack.c -- weight layouts built at load for the decode GEMV (llama.cpp's CPU "repack" buffers).
 *
 * LI_LAYOUT_X4: rows in groups of LI_X4_ROWS; a group is the blocks i = 0 .. nb-1 of its rows, each
 * as one x4 block (quant_blocks.h: block_q4_0x4, block_q8_0x4, block_q4_Kx4, block_q6_Kx4): the four
 * rows' headers (scales), then their quants: row after row, or for Q4_K in 16-byte chunks side by
 * side (quant_blocks.h). A group of four rows takes exactly the bytes of those rows and starts where
 * its first row started, so offsets, sizes and the GEMV's row split are the row-major ones; only the
 * order inside a group changes. The decode GEMV (matmul.c)
 * reads a group as one stream with the ISA's vec_dot_x4; the prefill GEMM and any ISA without that
 * dot gather a row back (li_layout_row).
 *
 * A block is split into its quants (one contiguous range) and its header (every other byte: the
 * scales, before the quants as in Q4_0, after them as in Q6_K); an x4 block is the four rows'
 * headers, then their quants (quant_blocks.h). Types: those with an X4_MOVE below, and only on an ISA
 * with a vec_dot_x4 for them (li_layout_for): elsewhere a repacked matrix would only be slower.
 */
#include "core/li.h"

/* Block b of a row <-> its parts in x4 block g as row r: the header (the bytes before and after the
 * quants) among the four headers, the quants among the four rows' quants, in chunks of CH bytes: chunk
 * c of row r at (c * LI_X4_ROWS + r) * CH, so CH = Q_LEN is row after row. One function per type, its
 * sizes constants, so that the copies are inlined: the GEMM gathers every row of a repacked matrix. */
#define X4_MOVE(NAME, BLOCK, Q_OFF, Q_LEN, CH)                                                                \
    static void NAME(int r, uint8_t *g, uint8_t *b, int to_x4) {                                             \
        enum { TS = sizeof(BLOCK), HB = TS - (Q_LEN), TAIL = TS - (Q_OFF) - (Q_LEN) };                       \
        _Static_assert((Q_LEN) % (CH) == 0, "chunks split the quants evenly");                               \
        uint8_t *h = g + r * HB, *q = g + LI_X4_ROWS * HB + r * (CH);                                        \
        if (to_x4) {                                                                                         \
            if (Q_OFF) memcpy(h, b, (Q_OFF));                                                                \
            if (TAIL) memcpy(h + (Q_OFF), b + (Q_OFF) + (Q_LEN), TAIL);                                      \
            for (int c = 0; c < (Q_LEN) / (CH); c++) memcpy(q + c * LI_X4_ROWS * (CH), b + (Q_OFF) + c * (CH), (CH)); \
        } else {                                                                                             \
            if (Q_OFF) memcpy(b, h, (Q_OFF));                                                                \
            if (TAIL) memcpy(b + (Q_OFF) + (Q_LEN), h + (Q_OFF), TAIL);                                      \
            for (int c = 0; c < (Q_LEN) / (CH); c++) memcpy(b + (Q_OFF) + c * (CH), q + c * LI_X4_ROWS * (CH), (CH)); \
        }                                                                                                    \
    }                                                                                                        \
    /* row r of the group at g, all nb blocks, to out: the loop around NAME, so that its copies inline */   \
    static void NAME##_row(int r, const uint8_t *g, uint8_t *out, size_t nb) {                               \
        for (size_t i = 0; i < nb; i++, g += LI_X4_ROWS * sizeof(BLOCK), out += sizeof(BLOCK))                \
            NAME(r, (uint8_t *)g, out, 0);                                                                   \
    }

X4_MOVE(move_q4_0, block_q4_0, 2, QK4_0 / 2, QK4_0 / 2)                       /* d | qs */
X4_MOVE(move_q8_0, block_q8_0, 2, QK8_0, QK8_0)                               /* d | qs */
X4_MOVE(move_q4_K, block_q4_K, 4 + K_SCALE_SIZE, QK_K / 2, Q4_K_X4_CHUNK)     /* d, dmin, scales | qs */
X4_MOVE(move_q6_K, block_q6_K, 0, QK_K / 2 + QK_K / 4, QK_K / 2 + QK_K / 4)   /* ql, qh | scales, d: the header after */

typedef void (*x4_move_fn)(int r, uint8_t *g, uint8_t *b, int to_x4);
typedef void (*x4_row_fn)(int r, const uint8_t *g, uint8_t *out, size_t nb);
typedef struct { x4_move_fn move; x4_row_fn row; } x4_ops;   /* one block, one whole row */

static x4_ops x4_ops_of(int wtype) {
    switch (wtype) {
    case LI_TYPE_Q4_0: return (x4_ops){move_q4_0, move_q4_0_row};
    case LI_TYPE_Q8_0: return (x4_ops){move_q8_0, move_q8_0_row};
    case LI_TYPE_Q4_K: return (x4_ops){move_q4_K, move_q4_K_row};
    case LI_TYPE_Q6_K: return (x4_ops){move_q6_K, move_q6_K_row};
    default: return (x4_ops){NULL, NULL};
    }
}

int li_x4_type(int wtype) { return x4_ops_of(wtype).move != NULL; }

int li_layout_for(int wtype) {
    const li_type_traits *t = li_traits(wtype);
    return t && li_x4_type(wtype) && t->vec_dot_x4 ? LI_LAYOUT_X4 : LI_LAYOUT_ROWS;
}

typedef struct {
    x4_move_fn move;
    const uint8_t *src;
    uint8_t *dst;
    size_t row_bytes, type_size;
    int64_t n_groups;
} repack_job;

/* group g: rows 4g..4g+3 -> x4 blocks */
static void task_repack(void *ctx, int ith, int nth) {
    const repack_job *j = ctx;
    const size_t ts = j->type_size, nb = j->row_bytes / ts;
    for (int64_t g = ith; g < j->n_groups; g += nth) {
        const uint8_t *rows = j->src + (size_t)g * LI_X4_ROWS * j->row_bytes;
        uint8_t *out = j->dst + (size_t)g * LI_X4_ROWS * j->row_bytes;
        for (size_t i = 0; i < nb; i++, out += LI_X4_ROWS * ts)
            for (int r = 0; r < LI_X4_ROWS; r++)
                j->move(r, out, (uint8_t *)(rows + (size_t)r * j->row_bytes + i * ts), 1);
    }
}

int li_repack(int wtype, int layout, const void *src, size_t row_bytes, int64_t n_out, void *dst) {
    const li_type_traits *t = li_traits(wtype);
    if (!t) return LI_ETYPE;
    if (layout != LI_LAYOUT_X4 || !li_x4_type(wtype)) return LI_ETYPE;
    if (!src || !dst || n_out <= 0 || n_out % LI_X4_ROWS || row_bytes == 0 || row_bytes % (size_t)t->type_size)
        return LI_EINVAL;
    const size_t bytes = row_bytes * (size_t)n_out;
    const uint8_t *s = src;
    uint8_t *d = dst;
    if (d < s + bytes && s < d + bytes) return LI_EINVAL;   /* in place would read what it overwrote */
    repack_job j = {x4_ops_of(wtype).move, s, d, row_bytes, (size_t)t->type_size, n_out / LI_X4_ROWS};
    li_pool_run(task_repack, &j, j.n_groups >= 64 ? li_get_threads() : 1);
    return LI_OK;
}

int li_layout_same_bits(int wtype) {
    const li_type_traits *t = li_traits(wtype);
    return li_layout_for(wtype) == LI_LAYOUT_X4 && t->x4_same_bits;
}

const uint8_t *li_layout_row(int wtype, int layout, const uint8_t *w, size_t row_bytes, int64_t row, uint8_t *tmp) {
    if (layout != LI_LAYOUT_X4) return w + (size_t)row * row_bytes;
    const int r = (int)(row % LI_X4_ROWS);
    x4_ops_of(wtype).row(r, w + (size_t)(row - r) * row_bytes, tmp, row_bytes / (size_t)li_traits(wtype)->type_size);
    return tmp;
}
