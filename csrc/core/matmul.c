/* matmul.c -- y[m][n_out] = x[m][k] . W[n_out][k]^T for W in any registry type.
 *
 * The activations are quantized once per call into the weight type's
 * vec_dot_type (traits), then:
 *   m < LI_GEMM_MIN_M (decode): GEMV -- each thread takes a range of output rows
 *     and calls the type's vec_dot on the raw weight row, once per activation row
 *     (the row stays in L1 across them); a repacked matrix whose type has a 16-row
 *     kernel takes the GEMV from 3 rows to 15 (23 on AVX-512) too, 16 weight rows
 *     against all activation rows at once (several sequences decoding together);
 *   otherwise (prefill): tiled GEMM -- the activations are laid out once as a
 *     panel (panel.c); each thread unpacks NW weight rows at a time into a small
 *     panel and runs the ISA's microkernel over all activation tiles, so every
 *     weight block is read and unpacked once per call, not once per token.
 * Work is split statically by output rows, in chunks aligned to what the kernel
 * needs (NW-row tiles; 16 rows = one cache line of y for GEMV).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/li.h"
#include "generic/generic.h"

#define LI_GEMM_MIN_M 6          /* below this, unpacking weight tiles costs more than it saves */
/* the same for an x4 matrix with a 16-row kernel (vec_dot_x16_m), unless the ISA's table says
 * (x16_gemm_min_m). llama-1b Q4_0, one decode step of n sequences, Zen 4, GEMV against GEMM: AVX-512
 * n = 8 69-76 against 112-115 ms, 16 129-153 against 157-205, 20 159-187 against 188-235, 24 alike
 * (so 24 there); AVX2, since its Q4_0 and Q4_K 16-row kernels take every activation row in one pass,
 * 16 160-163 against 196, 20 199-200 against 219-221, 23 222-224 against 242-244 (Q4_K_M: 16 189-192
 * against 216-217, 23 252-253 against 264-265), so 24 there too. A prompt's rows take the GEMM
 * whatever their count (li_set_batched_rows), so this only moves decode steps. */
#define LI_GEMM_MIN_M_X16 16
/* and from this many rows on: its 16 rows are four streams, which one row or two read slower than one
 * x4 group at a time (llama-1b Q4_0, 2 sequences: AVX2 36-39 against 33-34 ms, AVX-512 alike) */
#define LI_X16_MIN_M 3
/* and for a row-major matrix whose type has a dot for several activation rows (vec_dot_m), below this:
 * AVX2 Q6_K, 16384 x 2048, one thread, AMD EPYC Zen 3, GMAC/s, the GEMM against it, alternating: 2 rows
 * 20-26 -> 28, 4 21-27 -> 37, 8 32 -> 43-44, 16 41 -> 44-45; 18 46-47 -> 45, 23 46-47 -> 44 (the GEMM's
 * activation tiles are whole from 18) */
#define LI_GEMM_MIN_M_DOT_M 18

/* The GEMV/GEMM switch of this thread (li_set_gemm_min_rows), 0: the default. A verification pass
 * of speculative decoding keeps the GEMV for a few more rows, each with a decode step's bits. */
static _Thread_local int gemm_min_m = 0;

int li_set_gemm_min_rows(int m) {
    if (m < 0) return LI_EINVAL;
    const int old = gemm_min_m;
    gemm_min_m = m;
    return old;
}

/* li_set_batched_rows: the GEMM (and attention's batched path) for any row count on this thread */
static _Thread_local int batched_rows = 0;

int li_set_batched_rows(int on) {
    const int old = batched_rows;
    batched_rows = on != 0;
    return old;
}

int li_batched_rows(void) { return batched_rows; }

/* how far ahead the streaming dots prefetch their weights (core/li.h li_prefetch_ahead); one value for
 * the process, read once per dot call; -1 until first asked for */
static atomic_int stream_ahead = -1;
static size_t l2_bytes_of_this_cpu(void);

/* The distance has to cover the memory's latency at the rate the dot consumes bytes. Measured (llama-1b
 * decode, 2 threads, alternating in one process): an AMD EPYC Zen 3 (512 KiB L2 per core) best at 2 KiB,
 * 4 KiB 0-3% slower; an Intel Xeon family 6 model 207 (2 MiB L2 per core, a mesh to a 300 MiB L3),
 * 4 KiB 5% faster than 2 KiB there, 8 KiB between. The L2 size stands in for the kind of memory path:
 * L2 / 512, within [LI_STREAM_AHEAD_BYTES, 8 KiB], a whole number of cache lines. */
static int default_stream_ahead(void) {
    size_t d = l2_bytes_of_this_cpu() / 512 / 64 * 64;
    d = d < LI_STREAM_AHEAD_BYTES ? LI_STREAM_AHEAD_BYTES : d > 8192 ? 8192 : d;
    return (int)d;
}

int li_stream_ahead(void) {
    int d = atomic_load_explicit(&stream_ahead, memory_order_relaxed);
    if (d < 0) {   /* two threads asking at once compute the same value */
        d = default_stream_ahead();
        int unset = -1;
        if (!atomic_compare_exchange_strong(&stream_ahead, &unset, d)) d = unset;
    }
    return d;
}

int li_set_stream_ahead(int bytes) {
    if (bytes < 0 || bytes > LI_STREAM_AHEAD_MAX) return LI_EINVAL;
    const int old = atomic_exchange(&stream_ahead, bytes);
    return old < 0 ? default_stream_ahead() : old;
}

#define LI_GEMV_ROW_ALIGN 16   /* also a whole vec_dot_x16_m call: a thread's range starts at one */
#define LI_X16_ROWS 16
#define LI_GEMV_PREFETCH_BYTES 4096   /* how far ahead the GEMV prefetches the rows of a dot that does not */
#define LI_PARALLEL_MIN_WORK (1 << 16)   /* multiply-adds below which one thread is faster */
#define LI_GEMM_TILE_BUDGET (1u << 21)   /* bytes of unpacked weight tiles a thread keeps for its passes */

typedef struct {
    const li_type_traits *t;       /* weight type */
    const li_type_traits *at;      /* its activation (vec_dot) type */
    const li_isa_kernels *kern;
    int wtype;
    const uint8_t *part[LI_MAX_PARTS];   /* the matrix's rows, n_out in all: (rows, row_bytes) raw rows, or x4 */
    int64_t part_end[LI_MAX_PARTS];      /* groups of 4 rows (layout), part p's rows up to part_end[p] */
    size_t row_bytes;
    int layout;
    int64_t n_out, k, m;
    const float *x;                /* (m, k) */
    float *y;                      /* (m, n_out) */
    uint8_t *xq;                   /* GEMV: (m, xq_row_bytes) activations in the vec_dot type */
    size_t xq_row_bytes;
    float *xs;                     /* GEMV: (m, n_sums) their a_sums (see li_vec_dot_fn), or NULL */
    float *xw;                     /* GEMV of F16 weights, m > 1: (m, k) the F16 activations widened, or NULL */
    int n_sums;
    li_panel_plan plan;            /* GEMM, quant types */
    uint8_t *apanel;               /* GEMM: (m_pad, a_row_bytes) or (m_pad, kp) floats */
    int64_t m_pad, kp;
    int nw, na;
    int x16;                       /* GEMV: whole 16-row blocks of an x4 matrix through vec_dot_x16_m */
    atomic_int error;
} li_job;

/* the part holding row r, and the index of its first row in *r0 */
static inline const uint8_t *part_of(const li_job *j, int64_t r, int64_t *r0) {
    int p = 0;
    while (r >= j->part_end[p]) p++;
    *r0 = p ? j->part_end[p - 1] : 0;
    return j->part[p];
}

/* row r and those after it in its part (row-major; for x4 its group when r is a multiple of 4) */
static inline const uint8_t *rows_at(const li_job *j, int64_t r) {
    int64_t r0;
    const uint8_t *base = part_of(j, r, &r0);
    return base + (r - r0) * j->row_bytes;
}

/* row r as row-major bytes: in place, or gathered out of its x4 group into tmp */
static inline const uint8_t *row_of(const li_job *j, int64_t r, uint8_t *tmp) {
    int64_t r0;
    const uint8_t *base = part_of(j, r, &r0);
    return li_layout_row(j->wtype, j->layout, base, j->row_bytes, r - r0, tmp);
}

/* rows [lo, hi) of n for thread ith of nth, in chunks of `align` */
static void split(int64_t n, int64_t align, int ith, int nth, int64_t *lo, int64_t *hi) {
    const int64_t units = (n + align - 1) / align, per = units / nth, rem = units % nth;
    const int64_t u0 = ith * per + (ith < rem ? ith : rem), u1 = u0 + per + (ith < rem);
    *lo = u0 * align < n ? u0 * align : n;
    *hi = u1 * align < n ? u1 * align : n;
}

/* --- GEMV -------------------------------------------------------------------------------- */

static void task_quantize(void *ctx, int ith, int nth) {
    li_job *j = ctx;
    int64_t lo, hi;
    split(j->m, 1, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        j->at->from_float(j->x + i * j->k, j->xq + i * j->xq_row_bytes, j->k);
        if (j->xs) li_act_sums(j->t->vec_dot_type, j->xq + i * j->xq_row_bytes, j->k, j->xs + i * j->n_sums);
    }
}

/* rows [r, r + nr) of an x4 matrix (one group: the split's chunks are whole groups) for every activation
 * row: the ISA's dot over the group, or, without one, each row gathered back once for vec_dot */
static void gemv_x4(const li_job *j, const uint8_t *group, int64_t r, int nr) {
    const li_vec_dot_x4_fn dot_x4 = j->t->vec_dot_x4;
    if (!dot_x4) {
        uint8_t *tmp = li_scratch(LI_SCRATCH_TASK, j->row_bytes);
        for (int q = 0; q < nr; q++) {
            const uint8_t *row = row_of(j, r + q, tmp);
            for (int64_t i = 0; i < j->m; i++)
                j->t->vec_dot(j->k, &j->y[i * j->n_out + r + q], row, j->xq + i * j->xq_row_bytes,
                              j->xs ? j->xs + i * j->n_sums : NULL);
        }
        return;
    }
    for (int64_t i = 0; i < j->m; i++) {
        float s[LI_X4_ROWS];
        dot_x4(j->k, s, group, j->xq + i * j->xq_row_bytes, j->xs ? j->xs + i * j->n_sums : NULL);
        for (int q = 0; q < nr; q++) j->y[i * j->n_out + r + q] = s[q];
    }
}

static void task_gemv(void *ctx, int ith, int nth) {
    li_job *j = ctx;
    int64_t lo, hi;
    split(j->n_out, LI_GEMV_ROW_ALIGN, ith, nth, &lo, &hi);
    const li_vec_dot_fn dot = j->t->vec_dot;
    const li_vec_dot_rows_fn dot_rows = j->t->vec_dot_rows;
    const int step = j->layout == LI_LAYOUT_X4 ? LI_X4_ROWS : dot_rows ? LI_DOT_ROWS : 1;
    const size_t ahead = LI_GEMV_PREFETCH_BYTES / j->row_bytes + 1;   /* rows */
    const int prefetch = j->layout == LI_LAYOUT_ROWS && !(j->t->vec_dot_prefetches && li_stream_ahead() > 0);
    for (int64_t r = lo; r < hi; r += step) {
        const int nr = (int)(hi - r < step ? hi - r : step);
        /* the rows are one sequential stream, but the hardware prefetcher alone leaves the dots
         * waiting on memory: ask for the rows `ahead` rows on, one cache line at a time, unless the
         * dots ask for their bytes themselves, spread through their loops (the x4 ones, and the row
         * dots of the ISA table's vec_dot_prefetches: core/li.h li_prefetch_ahead), which measures
         * better than these bursts */
        if (prefetch && r + (int64_t)ahead < hi) {
            const uint8_t *pf = rows_at(j, r + (int64_t)ahead);
            for (size_t b = 0; b < (size_t)nr * j->row_bytes; b += 64) __builtin_prefetch(pf + b, 0, 3);
        }
        const uint8_t *w = rows_at(j, r);
        if (j->layout == LI_LAYOUT_X4) {   /* r is a multiple of 4 (the split's chunks are) */
            if (j->x16 && r % LI_X16_ROWS == 0 && hi - r >= LI_X16_ROWS) {
                /* 16 rows at once: whether a row is here depends on r and n_out, not on the thread split */
                j->t->vec_dot_x16_m(j->k, j->m, j->y + r, j->n_out, w, LI_X4_ROWS * j->row_bytes, j->xq,
                                    j->xq_row_bytes, j->xs, j->n_sums);
                r += LI_X16_ROWS - step;
                continue;
            }
            gemv_x4(j, w, r, nr);
            continue;
        }
        if (j->xw) {   /* each weight row widened once for all activation rows */
            for (int q = 0; q < nr; q++) j->kern->vec_dot_f16_mact(j->k, j->y + r + q, j->n_out, w + q * j->row_bytes, j->xw, j->m);
            continue;
        }
        if (j->t->vec_dot_m && j->m > 1) {   /* each weight row unpacked once for all activation rows */
            for (int q = 0; q < nr; q++)
                j->t->vec_dot_m(j->k, j->m, j->y + r + q, j->n_out, w + q * j->row_bytes, j->xq, j->xq_row_bytes,
                                j->xs, j->n_sums);
            continue;
        }
        for (int64_t i = 0; i < j->m; i++) {
            const uint8_t *a = j->xq + i * j->xq_row_bytes;
            const float *as = j->xs ? j->xs + i * j->n_sums : NULL;
            float *y = &j->y[i * j->n_out + r];
            if (dot_rows) {
                dot_rows(j->k, y, w, j->row_bytes, nr, a, as);
            } else {
                for (int q = 0; q < nr; q++) dot(j->k, y + q, w + q * j->row_bytes, a, as);
            }
        }
    }
}

/* --- GEMM -------------------------------------------------------------------------------- */

/* activation rows -> panel rows (zero rows up to m_pad) */
static void task_pack_a(void *ctx, int ith, int nth) {
    li_job *j = ctx;
    int64_t lo, hi;
    split(j->m_pad, 1, ith, nth, &lo, &hi);
    const size_t act_bytes = (size_t)(j->k / j->at->block_size) * (size_t)j->at->type_size;
    uint8_t *tmp = li_scratch(LI_SCRATCH_TASK, act_bytes);
    if (!tmp) { atomic_store(&j->error, LI_ENOMEM); return; }
    for (int64_t i = lo; i < hi; i++) {
        if (j->t->group) {
            uint8_t *dst = j->apanel + i * j->plan.a_row_bytes;
            if (i >= j->m) { memset(dst, 0, j->plan.a_row_bytes); continue; }
            j->at->from_float(j->x + i * j->k, tmp, j->k);
            (j->kern->pack_a ? j->kern->pack_a : li_panel_pack_a)(&j->plan, j->t->vec_dot_type, tmp, j->t->offset, dst);
        } else {   /* float types: the activation rounded to the vec_dot type, widened back (exact) */
            float *dst = (float *)j->apanel + i * j->kp;
            memset(dst, 0, (size_t)j->kp * sizeof(float));
            if (i >= j->m) continue;
            j->at->from_float(j->x + i * j->k, tmp, j->k);
            j->at->dequantize(tmp, dst, j->k);
        }
    }
}

/* this CPU's L2 per core in bytes, from sysconf, else sysfs; 0 where neither tells */
static size_t l2_bytes_of_this_cpu(void) {
    long n = 0;
#ifdef _SC_LEVEL2_CACHE_SIZE
    n = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    for (int i = 0; i < 8 && n <= 0; i++) {   /* sysfs: the cache at level 2 that holds data */
        char path[96], type[32] = "";
        int level = 0;
        long kib = 0;
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (!f) break;
        const int ok = fscanf(f, "%d", &level) == 1;
        fclose(f);
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        if (!ok || level != 2 || !(f = fopen(path, "r"))) continue;
        const int typed = fscanf(f, "%31s", type) == 1;
        fclose(f);
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (!typed || strcmp(type, "Instruction") == 0 || !(f = fopen(path, "r"))) continue;
        if (fscanf(f, "%ldK", &kib) == 1) n = kib * 1024;
        fclose(f);
    }
    return n > 0 ? (size_t)n : 0;
}

/* bytes of activation panel a GEMM pass keeps in L2: half of this CPU's L2, within [128 KiB, 1 MiB];
 * 512 KiB where the size is unknown. A panel of the whole L2 (what the old fixed 512 KiB was on a Zen 3)
 * measured 5-20% slower at k = 8192 on Zen 4 than half or a quarter of it, alike at k = 2048
 * (BENCHMARKS.md, "Kernel choices") */
static size_t gemm_panel_budget(void) {
    static atomic_size_t budget;   /* 0: not asked yet (two threads asking at once get the same answer) */
    size_t b = atomic_load_explicit(&budget, memory_order_relaxed);
    if (b == 0) {
        const size_t l2 = l2_bytes_of_this_cpu();
        b = l2 ? l2 / 2 : (size_t)1 << 19;
        b = b < ((size_t)1 << 17) ? (size_t)1 << 17 : b > ((size_t)1 << 20) ? (size_t)1 << 20 : b;
        atomic_store_explicit(&budget, b, memory_order_relaxed);
    }
    return b;
}

static void task_gemm(void *ctx, int ith, int nth) {
    li_job *j = ctx;
    const li_type_traits *t = j->t;
    const int nw = j->nw, na = j->na;
    const int64_t n_wt = (j->n_out + nw - 1) / nw, n_at = j->m_pad / na;
    int64_t w_lo = 0, w_hi = n_wt, a_lo = 0, a_hi = n_at;
    if (n_wt >= nth) split(n_wt, 1, ith, nth, &w_lo, &w_hi);   /* by output rows */
    else split(n_at, 1, ith, nth, &a_lo, &a_hi);               /* too few rows: by tokens */
    if (w_lo >= w_hi || a_lo >= a_hi) return;

    const int64_t k = j->k;
    const size_t w_row = t->group ? j->plan.w_row_bytes : (size_t)j->kp * sizeof(float);
    const size_t a_row = t->group ? j->plan.a_row_bytes : (size_t)j->kp * sizeof(float);
    const int64_t n_groups = t->group ? k / t->group : 0;

    /* the activation panel is read once per weight tile: in blocks of tokens that stay in L2. Each
     * block needs every weight tile unpacked; unpacking them again per block cost ~10% of a 1B
     * model's prefill, so the tiles of w_block at a time are unpacked once, by the first block, and
     * kept (LI_GEMM_TILE_BUDGET bytes: from L2 or L3 they are fast beside a tile's multiply-adds) */
    int64_t a_block = (int64_t)(gemm_panel_budget() / ((size_t)na * a_row)) * na;
    if (a_block < 4 * na) a_block = 4 * na;
    const size_t tile_bytes = (size_t)nw * w_row;
    int64_t w_block = (a_hi - a_lo) * na > a_block ? (int64_t)(LI_GEMM_TILE_BUDGET / tile_bytes) : 1;
    if (w_block < 1) w_block = 1;
    if (w_block > w_hi - w_lo) w_block = w_hi - w_lo;

    /* one scratch block: tiles (w_block of them) | u (k bytes) | dw, mw (n_groups floats each) | a gathered row */
    const size_t wp_bytes = (size_t)w_block * tile_bytes, u_bytes = t->group ? ((size_t)k + 63) / 64 * 64 : 0;
    const size_t rb_bytes = j->layout == LI_LAYOUT_ROWS ? 0 : (j->row_bytes + 63) / 64 * 64;
    uint8_t *tiles = li_scratch(LI_SCRATCH_TASK, wp_bytes + u_bytes + (size_t)n_groups * 2 * sizeof(float) + rb_bytes);
    if (!tiles) {
        atomic_store(&j->error, LI_ENOMEM);
        return;
    }
    uint8_t *u = t->group ? tiles + wp_bytes : NULL;
    float *dw = t->group ? (float *)(tiles + wp_bytes + u_bytes) : NULL;
    float *mw = dw ? dw + n_groups : NULL;
    uint8_t *rowbuf = rb_bytes ? tiles + wp_bytes + u_bytes + (size_t)n_groups * 2 * sizeof(float) : NULL;
    void (*pack_w)(const li_panel_plan *, const uint8_t *, const float *, const float *, uint8_t *) =
        j->kern->pack_w ? j->kern->pack_w : li_panel_pack_w;
    /* an x4 matrix's rows straight into panels, without gathering them, where the ISA can */
    const li_pack_w_x4_fn pack_x4 = j->layout == LI_LAYOUT_X4 && t->group && !j->plan.n_tail && nw % LI_X4_ROWS == 0
                                        ? j->kern->pack_w_x4[j->wtype] : NULL;

    for (int64_t wb = w_lo; wb < w_hi; wb += w_block) {
    const int64_t wb_hi = wb + w_block < w_hi ? wb + w_block : w_hi;
    for (int64_t ab = a_lo; ab < a_hi; ab += a_block / na) {
    const int64_t ab_hi = ab + a_block / na < a_hi ? ab + a_block / na : a_hi;
    for (int64_t wt = wb; wt < wb_hi; wt++) {
        const int64_t j0 = wt * nw;
        const int nwv = (int)(j->n_out - j0 < nw ? j->n_out - j0 : nw);
        uint8_t *wpanel = tiles + (size_t)(wt - wb) * tile_bytes;
        for (int r = 0; r < nw && ab == a_lo; r++) {   /* unpack this tile's weight rows, once */
            uint8_t *dst = wpanel + (size_t)r * w_row;
            if (pack_x4 && r < nwv) {   /* j0 is a multiple of 4: row j0 + r is row r % 4 of its group */
                pack_x4(&j->plan, rows_at(j, j0 + r / LI_X4_ROWS * LI_X4_ROWS), r % LI_X4_ROWS, dst);
                continue;
            }
            const uint8_t *src = r < nwv ? row_of(j, j0 + r, rowbuf) : NULL;
            if (r >= nwv) {
                memset(dst, 0, w_row);
            } else if (t->group) {
                t->unpack(src, k, u, dw, mw);
                pack_w(&j->plan, u, dw, t->has_min ? mw : NULL, dst);
            } else {
                memset(dst, 0, w_row);
                t->dequantize(src, (float *)dst, k);
            }
        }
        if (ab == a_lo && wt + 1 < w_hi) {   /* the next tile's rows, from memory while this one multiplies */
            const int64_t jn = (wt + 1) * nw, nr = j->n_out - jn < nw ? j->n_out - jn : nw;
            const uint8_t *pf = rows_at(j, jn);
            for (size_t b = 0; b < (size_t)nr * j->row_bytes; b += 64) __builtin_prefetch(pf + b, 0, 2);
        }
        for (int64_t at = ab; at < ab_hi; at++) {
            const int64_t i0 = at * na;
            const int nav = (int)(j->m - i0 < na ? j->m - i0 : na);
            if (nav <= 0) break;
            float *y = j->y + i0 * j->n_out + j0;
            if (t->group)
                j->kern->gemm_q(&j->plan, wpanel, j->apanel + i0 * a_row, t->has_min, t->offset, t->umax,
                                y, j->n_out, nwv, nav);
            else
                j->kern->gemm_f(j->kp, (const float *)wpanel, (const float *)(j->apanel + i0 * a_row), y,
                                j->n_out, nwv, nav);
        }
    }
    }
    }
}

int li_matmul(int wtype, const void *w, size_t row_bytes, int64_t n_out, int64_t k, const float *x,
              int64_t m, float *y) {
    return li_matmul_layout(wtype, LI_LAYOUT_ROWS, w, row_bytes, n_out, k, x, m, y);
}

int li_matmul_layout(int wtype, int layout, const void *w, size_t row_bytes, int64_t n_out, int64_t k,
                     const float *x, int64_t m, float *y) {
    return li_matmul_parts(wtype, layout, &w, &n_out, 1, row_bytes, k, x, m, y);
}

int li_matmul_parts(int wtype, int layout, const void *const *parts, const int64_t *part_rows, int n_parts,
                    size_t row_bytes, int64_t k, const float *x, int64_t m, float *y) {
    li_job j = {0};
    j.t = li_traits(wtype);
    if (!j.t || !j.t->vec_dot) return LI_ETYPE;
    if (!parts || !part_rows || n_parts < 1 || n_parts > LI_MAX_PARTS) return LI_EINVAL;
    int64_t n_out = 0;
    for (int p = 0; p < n_parts; p++) {
        /* every part but the last whole GEMV chunks, so that no chunk, x4 group or 16-row block straddles two */
        if (!parts[p] || part_rows[p] <= 0 || (p < n_parts - 1 && part_rows[p] % LI_GEMV_ROW_ALIGN)) return LI_EINVAL;
        j.part[p] = parts[p];
        j.part_end[p] = n_out += part_rows[p];
    }
    if (layout != LI_LAYOUT_ROWS && (layout != LI_LAYOUT_X4 || n_out % LI_X4_ROWS || !li_x4_type(wtype)))
        return LI_EINVAL;
    j.layout = layout, j.wtype = wtype;
    j.at = li_traits(j.t->vec_dot_type);
    j.kern = li_active_kernels();
    if (!x || !y || k <= 0 || m <= 0 || k % j.t->block_size != 0 || k % j.at->block_size != 0)
        return LI_EINVAL;
    if (row_bytes != (size_t)(k / j.t->block_size) * (size_t)j.t->type_size) return LI_EINVAL;
    j.row_bytes = row_bytes, j.n_out = n_out, j.k = k, j.x = x, j.m = m, j.y = y;
    const double work = (double)n_out * (double)k * (double)m;
    const int want = work >= LI_PARALLEL_MIN_WORK ? li_get_threads() : 1;

    /* from 3 activation rows against an x4 matrix with a 16-row kernel: the GEMV (it needs no pass
     * that unpacks the weights), through that kernel, unless this thread asked for 1-row bits
     * (li_set_gemm_min_rows: speculative verification) or the many-row bits (li_set_batched_rows) */
    const int x16 = layout == LI_LAYOUT_X4 && j.t->vec_dot_x16_m && m >= LI_X16_MIN_M && gemm_min_m == 0;
    /* the same for a row-major matrix whose type has a dot for several activation rows (vec_dot_m) */
    const int m_rows = layout == LI_LAYOUT_ROWS && j.t->vec_dot_m && gemm_min_m == 0;
    const int x16_until = j.kern->x16_gemm_min_m ? j.kern->x16_gemm_min_m : LI_GEMM_MIN_M_X16;
    if (!batched_rows && (m < (gemm_min_m ? gemm_min_m : LI_GEMM_MIN_M) || (x16 && m < x16_until) ||
                          (m_rows && m < LI_GEMM_MIN_M_DOT_M))) {
        j.x16 = x16;
        j.xq_row_bytes = (size_t)(k / j.at->block_size) * (size_t)j.at->type_size;
        j.n_sums = li_act_sums_count(j.t->vec_dot_type, k);
        const size_t xq_bytes = ((size_t)m * j.xq_row_bytes + 63) / 64 * 64;
        const int widen = m > 1 && wtype == LI_TYPE_F16 && j.t->vec_dot_type == LI_TYPE_F16 && j.kern->vec_dot_f16_mact;
        const size_t xs_bytes = ((size_t)m * (size_t)j.n_sums * sizeof(float) + 63) / 64 * 64;
        j.xq = li_scratch(LI_SCRATCH_CALL, xq_bytes + xs_bytes + (widen ? (size_t)m * (size_t)k * sizeof(float) : 0));
        if (!j.xq) return LI_ENOMEM;
        j.xs = j.n_sums ? (float *)(j.xq + xq_bytes) : NULL;
        li_pool_run(task_quantize, &j, m > 1 ? want : 1);
        if (widen) {
            j.xw = (float *)(j.xq + xq_bytes + xs_bytes);
            const li_widen_f16_fn wf = j.kern->widen_f16 ? j.kern->widen_f16 : li_widen_f16_generic;
            for (int64_t i = 0; i < m; i++) wf((const ggml_half *)(j.xq + i * j.xq_row_bytes), j.xw + i * k, k);
        }
        li_pool_run(task_gemv, &j, want);
        return LI_OK;
    }

    if (j.t->group) {
        li_panel_make_plan(&j.plan, k, j.t->group);
        j.plan.corr_slots = j.kern->gemm_corr_slots && li_panel_corr_slots(j.t->group, j.t->offset, j.t->umax);
        j.nw = j.kern->q_nw, j.na = j.kern->q_na;
    } else {
        j.kp = (k + LI_LANES - 1) / LI_LANES * LI_LANES;
        j.nw = j.kern->f_nw, j.na = j.kern->f_na;
    }
    j.m_pad = (m + j.na - 1) / j.na * j.na;
    const size_t a_row = j.t->group ? j.plan.a_row_bytes : (size_t)j.kp * sizeof(float);
    j.apanel = li_scratch(LI_SCRATCH_CALL, (size_t)j.m_pad * a_row);
    if (!j.apanel) return LI_ENOMEM;
    li_pool_run(task_pack_a, &j, want);
    if (atomic_load(&j.error) == LI_OK) li_pool_run(task_gemm, &j, want);
    return atomic_load(&j.error);
}
