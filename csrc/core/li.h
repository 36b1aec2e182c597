/* li.h -- internal header of the localinfer kernels: fp16/bf16 conversions, the
 * per-type traits table (ggml's type_traits_cpu), the per-ISA kernel tables and
 * the GEMM panel layout. The public C API is localinfer.h.
 */
#ifndef LI_INTERNAL_H
#define LI_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/quant_blocks.h"
#include "localinfer.h"

/* --- fp16 / bf16 <-> f32, portable and exact ------------------------------------------ */

static inline float li_bits_to_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t li_f32_to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* Widening is exact; NaN payloads are kept as numpy does (no quieting). */
static inline float li_fp16_to_fp32(ggml_half h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return li_bits_to_f32(sign | 0x7f800000u | (man << 13));     /* inf, NaN */
    if (exp == 0) {                                                                 /* 0, subnormal */
        const float v = (float)man * 0x1p-24f;                                      /* exact */
        return li_bits_to_f32(sign | li_f32_to_bits(v));
    }
    return li_bits_to_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

/* Round to nearest even, as F16C and numpy (ggml_compute_fp32_to_fp16; Maratyszcza's FP16). */
static inline ggml_half li_fp32_to_fp16(float f) {
    const float scale_to_inf = 0x1.0p+112f, scale_to_zero = 0x1.0p-110f;
    float af = li_bits_to_f32(li_f32_to_bits(f) & 0x7fffffffu);
    float base = (af * scale_to_inf) * scale_to_zero;
    const uint32_t w = li_f32_to_bits(f), shl1_w = w + w, sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xff000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    base = li_bits_to_f32((bias >> 1) + 0x07800000u) + base;
    const uint32_t bits = li_f32_to_bits(base);
    const uint32_t nonsign = ((bits >> 13) & 0x7c00u) + (bits & 0x0fffu);
    return (ggml_half)((sign >> 16) | (shl1_w > 0xff000000u ? 0x7e00u : nonsign));
}

static inline float li_bf16_to_fp32(ggml_bf16 h) { return li_bits_to_f32((uint32_t)h << 16); }

/* ggml_compute_fp32_to_bf16: round to nearest even, NaN forced quiet. */
static inline ggml_bf16 li_fp32_to_bf16(float f) {
    const uint32_t u = li_f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (ggml_bf16)((u >> 16) | 64);
    return (ggml_bf16)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

/* Q4_K / Q5_K: the 8 six-bit scales and 8 mins from 12 packed bytes (ggml's get_scale_min_k4 for
 * j = 0..7 at once, with its kmask trick): out[0..7] = scales, out[8..15] = mins. */
static inline void li_scales_mins_k4(const uint8_t *packed, uint8_t out[16]) {
    const uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    uint32_t u[4];
    memcpy(u, packed, 12);
    u[3] = ((u[2] >> 4) & kmask2) | (((u[1] >> 6) & kmask3) << 4);   /* mins 4..7 */
    const uint32_t mins_lo = u[1] & kmask1;                          /* mins 0..3 */
    u[1] = (u[2] & kmask2) | (((u[0] >> 6) & kmask3) << 4);          /* scales 4..7 */
    u[2] = mins_lo;
    u[0] &= kmask1;                                                  /* scales 0..3 */
    memcpy(out, u, 16);
}

/* --- function types ------------------------------------------------------------------ */

/* n elements of one row */
typedef void (*li_dequantize_fn)(const void *src, float *dst, int64_t n);
typedef void (*li_quantize_fn)(const float *src, void *dst, int64_t n);
/* *s = dot(w row, a row), n elements; w in the weight type, a in its vec_dot_type.
 * a_sums: for Q8_0 / Q8_1 activations, per block {d, d * sum(qs)} as f32 (both exact; see
 * li_act_sums), computed once per activation row so that the SIMD dots need neither a
 * per-row fp16 conversion of d nor a per-row sum of the quants; NULL for other types.
 * (ggml keeps a rounded d * sum in Q8_1's s field for the same purpose.) */
typedef void (*li_vec_dot_fn)(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
/* The same for nr <= LI_DOT_ROWS consecutive weight rows (row_bytes apart): s[r] = dot(w row r, a).
 * Bit for bit nr calls of the type's vec_dot; the rows share the activation loads and keep more
 * loads in flight (the GEMV of decode). */
#define LI_DOT_ROWS 4
typedef void (*li_vec_dot_rows_fn)(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                   const float *a_sums);
/* The same for one group of LI_X4_ROWS rows in a repacked layout (core/repack.c: block_q4_0x4, ...):
 * s[r] = dot(row r, a) for r < 4, nb = n / block size blocks of the group read as one stream. The sums
 * run in another order than vec_dot's, so the results agree with it up to float rounding, and every
 * GEMV row of a repacked matrix is this function's (one activation row or several: the same bits). */
typedef void (*li_vec_dot_x4_fn)(int64_t n, float *s, const void *group, const void *a, const float *a_sums);
#define LI_X4_M 4   /* activation rows a vec_dot_x16_m kernel takes at a time */
/* activation rows one pass of a 16-row kernel takes where their sums live on the stack (AVX-512's
 * Q4_K and Q6_K, AVX2's Q4_0 and Q4_K): the ISA tables' x16_gemm_min_m, from which the matmul takes
 * the GEMM, so every decode step's rows take one pass */
#define LI_X16_PASS_M 24
/* Four consecutive x4 groups (16 rows, group_stride bytes apart) against m activation rows (row i at
 * a + i * a_stride bytes, its a_sums at a_sums + i * sums_stride): s[i * s_stride + q] = dot(row q,
 * activation row i), q < 16. The groups' quants are loaded and unpacked once for all m rows: the GEMV
 * of several sequences decoding together, where the dots, not the memory, bound the step. Rows agree
 * with vec_dot_x4 up to float rounding (Q6_K's: its bits), and have the same bits for any m. The matmul
 * calls it from 3 rows to 15, or to 23 (the ISA table's x16_gemm_min_m; core/matmul.c). */
typedef void (*li_vec_dot_x16_m_fn)(int64_t n, int64_t m, float *s, int64_t s_stride, const void *groups,
                                    size_t group_stride, const void *a, size_t a_stride, const float *a_sums,
                                    int64_t sums_stride);
/* One weight row of the row-major layout against m activation rows (row i at a + i * a_stride bytes,
 * its a_sums at a_sums + i * sums_stride): s[i * s_stride] = vec_dot(w, activation row i), bit for bit
 * the type's vec_dot, with each block of the row unpacked once for all the activation rows (the GEMV
 * of several sequences decoding together, for a type the ISA does not repack). The matmul calls it
 * from 2 rows to 17 (core/matmul.c LI_GEMM_MIN_M_DOT_M). */
typedef void (*li_vec_dot_m_fn)(int64_t n, int64_t m, float *s, int64_t s_stride, const void *w, const void *a,
                                size_t a_stride, const float *a_sums, int64_t sums_stride);

/* A decode GEMV reads each weight byte once, and with the hardware prefetcher alone its dots wait on
 * memory. The dots that stream a matrix (the x4 ones; AVX2's Q6_K row dots and its row dots of
 * Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: the ISA table's vec_dot_prefetches) ask, while they work on a block,
 * for the bytes li_stream_ahead() on: one prefetch per cache line of a block, spread through the loop.
 * (Prefetches issued in bursts, a group or a row at a time from the GEMV, fill the line-fill buffers
 * and stall: BENCHMARKS.md, "Kernel choices".) llama-1b Q4_0 decode on an AMD EPYC Zen 3, AVX2, 2
 * threads, alternating in one process:
 * 2048 bytes ahead 1.21x the tokens/s of none, 1024 1.14x, 512 1.07x, 4096 to 16384 within 3% of 2048;
 * on an Intel Xeon (family 6 model 207) 1.42x AVX-512, 1.49x AVX2 at 2048, 4096 5% better still. The
 * distance comes from the L2 size (core/matmul.c default_stream_ahead), at least this; 0 turns it off
 * (li_set_stream_ahead). */
#define LI_STREAM_AHEAD_BYTES 2048
#define LI_STREAM_AHEAD_MAX (1 << 20)   /* li_set_stream_ahead's bound */
int li_stream_ahead(void);
/* The prefetch loop is written out in each helper: a helper of its own that only prefetched was taken
 * by GCC -O3 for a function without effects, and its calls dropped (no prefetch left in the dots). */
static inline void li_prefetch_ahead(const void *block, int64_t block_bytes, int ahead) {
    if (ahead <= 0) return;
    const char *p = (const char *)block + ahead;
    for (int64_t o = 0; o < block_bytes; o += 64) __builtin_prefetch(p + o, 0, 3);
}

/* The same for a dot over nr rows at once (vec_dot_rows: rows row_stride bytes apart, row_len bytes
 * read from each, the GEMV's next call on the nr rows after): each row's stream li_stream_ahead()
 * bytes on, which past a row's end is the same row of a later call's group. Not for rows of fewer
 * than LI_ROWS_AHEAD_MIN_BLOCKS blocks: the attention's keys of one head (64 to 256 elements), where
 * the start's division alone cost q8_0 and q4_0 caches 5-10% (csrc/bench_attention_kv.py, Zen 3). */
#define LI_ROWS_AHEAD_MIN_BLOCKS 16
typedef struct {
    const char *base;      /* row 0 of the group the prefetches are in */
    int64_t off;           /* their offset in its rows */
    int64_t row_len, group_bytes;
    size_t row_stride;
    int on;
} li_rows_ahead;
static inline li_rows_ahead li_rows_ahead_start(const void *w, size_t row_stride, int nr, int64_t n_blocks,
                                                int64_t block_bytes) {
    const int ahead = n_blocks >= LI_ROWS_AHEAD_MIN_BLOCKS ? li_stream_ahead() : 0;
    const int64_t row_len = n_blocks * block_bytes;
    li_rows_ahead p = {(const char *)w, 0, row_len, (int64_t)row_stride * nr, row_stride, ahead > 0};
    if (p.on) p.base += ahead / row_len * p.group_bytes, p.off = ahead % row_len;
    return p;
}
/* before reading the next `bytes` of each row: ask for theirs */
static inline void li_rows_ahead_step(li_rows_ahead *p, int64_t bytes, int nr) {
    if (!p->on) return;
    for (int r = 0; r < nr; r++)
        for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(p->base + (size_t)r * p->row_stride + p->off + o, 0, 3);
    p->off += bytes;
    if (p->off >= p->row_len) p->off -= p->row_len, p->base += p->group_bytes;
}
/* One F16 weight row against m activation rows: s[i * s_stride] = dot(w, row i of a), where a
 * (m, n) holds F16 activations widened to f32 (exactly). Bit for bit m calls of the ISA's F16
 * vec_dot; the weight row is widened once, not m times (a GEMV of a few rows: speculative
 * decoding's verification). */
typedef void (*li_vec_dot_f16_mact_fn)(int64_t n, float *s, int64_t s_stride, const void *w, const float *a,
                                       int64_t m);
/* One weight row -> integer form for the GEMM panel: element e = dw[e/G] * (u[e] - offset)
 * + mw[e/G] (mw only for has_min types). u: n bytes, dw/mw: n/G floats. */
typedef void (*li_unpack_fn)(const void *w, int64_t n, uint8_t *u, float *dw, float *mw);

/* --- the GEMM panel (see panel.c) ------------------------------------------------------
 * A row of k elements in groups of G (one scale each) is stored as super-groups of 16
 * int32 lanes: full super-groups hold 16 groups (lane l = group l, G/4 steps of 64 bytes),
 * tail super-groups hold c < 16 groups with 16/c lanes each, so every lane only ever
 * accumulates one group and the scales are applied once per super-group, not per block. */
#define LI_LANES 16
#define LI_MAX_TAIL 4
typedef struct {
    int group;                     /* G: 16 or 32 elements per scale */
    int64_t n_groups;              /* k / G */
    int64_t n_full;                /* full super-groups (G/4 steps each) */
    int n_tail;                    /* tail super-groups */
    uint8_t tail_steps[LI_MAX_TAIL];
    int64_t n_sg;                  /* n_full + n_tail */
    size_t w_row_bytes;            /* per weight row: per super-group bytes + dw[16] + mw[16] */
    size_t a_row_bytes;            /* per activation row: bytes + da[16] + corr[16] + sumf[16] */
    int corr_slots;                /* corr per 16-bit slot, not per lane (panel.c); 0 from make_plan */
} li_panel_plan;

/* row r of the x4 group at g (core/repack.c) -> its weight panel (full super-groups only) */
typedef void (*li_pack_w_x4_fn)(const li_panel_plan *p, const uint8_t *g, int r, uint8_t *dst);

/* Whether the activation panel of a type (G, offset o, largest u) can carry corr per 16-bit slot:
 * a slot sums 2 elements a step, at most G/4 steps a super-group, each (u - o) * q within
 * max(o, umax - o) * 127, so corr plus a whole super-group's products fits 16 bits (Q4_0, Q5_0,
 * Q6_K, Q3_K, the ternary types, IQ3_S, IQ1), and maddubs's pair sums do not saturate. */
static inline int li_panel_corr_slots(int group, int offset, int umax) {
    const int m = offset > umax - offset ? offset : umax - offset;
    return offset > 0 && umax <= 127 && 254 * (group / 4) * m <= 32767;
}

/* Steps of 64 bytes in super-group sg. Inline: the tiles ask once a super-group, and as a call it
 * was ~0.6% of a 1B prefill (every ymm register is caller-saved around it). */
static inline int li_panel_steps(const li_panel_plan *p, int64_t sg) {
    return sg < p->n_full ? p->group / 4 : p->tail_steps[sg - p->n_full];
}

/* Whether super-group sg of a panel carries its corr per slot: full super-groups only (panel.c says
 * why). The packer and the kernel both ask here, so they cannot disagree. */
static inline int li_panel_sg_slots(const li_panel_plan *p, int64_t sg) {
    return p->corr_slots && sg < p->n_full;
}

#define LI_W_SIDE (2 * LI_LANES * 4)
#define LI_A_SIDE (3 * LI_LANES * 4)

/* nw x na tile over whole rows: y[i*ldy + j] = dot(w row j, a row i), j < nw_valid, i < na_valid.
 * w: NW rows of w_row_bytes, a: NA rows of a_row_bytes. `offset` and `umax` are the weight type's. */
typedef void (*li_gemm_q_fn)(const li_panel_plan *p, const uint8_t *w, const uint8_t *a,
                             int has_min, int offset, int umax,
                             float *y, int64_t ldy, int nw_valid, int na_valid);
/* c[i*ldc + j] = dot(a row i, b row j) for i < na, j < nb, rows of n floats (n a multiple of 16).
 * The attention's two products (scores = Q.K, out = P.V^T) in llamafile's tinyBLAS order: 16
 * lanes, lane l accumulating the elements l, l+16, ..., then the tree l+8, l+4, l+2, l+1. */
typedef void (*li_dot_rows_fn)(int64_t n, const float *a, int na, int64_t lda, const float *b, int64_t nb,
                               int64_t ldb, float *c, int64_t ldc);
/* The same with b in f16 (rows of the KV cache read in place, widened in registers: exact). */
typedef void (*li_dot_rows_f16_fn)(int64_t n, const float *a, int na, int64_t lda, const ggml_half *b, int64_t nb,
                                   int64_t ldb, float *c, int64_t ldc);
/* out[i*ldo + e] = sum over j < nv of p[i*ldp + j] * v[j*ldv + e], for i < na, e < n (n a multiple
 * of 16): P.V for a few queries straight from the f16 cache, keys one after another. */
typedef void (*li_axpy_rows_f16_fn)(int64_t n, const float *p, int na, int64_t ldp, const ggml_half *v, int64_t nv,
                                    int64_t ldv, float *out, int64_t ldo);
/* The attention's row steps (attention.c; the readable versions in generic/attention_generic.c), in
 * place on n floats:
 * softmax: p = f16(softmax(cap(p * scale))) with cap(x) = tanh(x / softcap) * softcap when softcap > 0,
 *   the exponentials summed in double (ggml_vec_soft_max_f32); a finite `sink` (gpt-oss's attention sink)
 *   is one more logit that joins the max and the denominator and is dropped (ggml_soft_max_ext's sinks);
 *   -INFINITY: none, the same bits as without;
 * round_f16: y = f16(x) widened back; widen_f16: y = x (f16 -> f32, exact). */
typedef void (*li_softmax_f16_fn)(float *p, int64_t n, float scale, float softcap, float sink);
/* The encoder's row softmax (attention_encoder.c, all float32): p = softmax(p), the exponentials summed in
 * double and divided by that sum rounded to float (ops_reference.softmax); the same steps as softmax_f16
 * without the scale, cap, sink and f16 rounding. */
typedef void (*li_softmax_f32_fn)(float *p, int64_t n);
/* LayerNorm of one row (ops.c's li_layer_norm; ggml_norm, then weight and bias):
 *   mean = f32(sum(x) / n),  d = x - mean,  scale = f32(1 / sqrt(sum(d * d) / n + eps)),
 *   y = (d * scale) * w (+ b)
 * with both sums in double over 16 lanes (element i of the first n/16*16 into lane i % 16, the lanes
 * added by the tree l+8, l+4, l+2, l+1, then the tail elements in order) and everything else in float.
 * b may be NULL; y may alias x. */
typedef void (*li_norm_row_fn)(const float *x, const float *w, const float *b, float *y, int64_t n, double eps);
/* P.V over a quantized cache (attention_kv.c), one value row of d values (d / 32 blocks) at a time:
 * out[h*d + e] += p[h*ldp] * x[e] for h < na, x = the row dequantized as ggml does (q * d, f32 mul,
 * then a separate mul and add: the same bits in every variant). */
typedef void (*li_axpy_kv_fn)(int64_t d, const void *v, const float *p, int64_t ldp, int64_t na, float *out);
typedef void (*li_round_f16_fn)(const float *x, float *y, int64_t n);
typedef void (*li_widen_f16_fn)(const ggml_half *x, float *y, int64_t n);
/* float tile: rows of kp floats (kp a multiple of 16, zero padded) */
typedef void (*li_gemm_f_fn)(int64_t kp, const float *w, const float *a,
                             float *y, int64_t ldy, int nw_valid, int na_valid);

/* --- type traits ---------------------------------------------------------------------- */
typedef struct {
    const char *name;
    int block_size, type_size;
    int vec_dot_type;              /* activation format the dot product takes */
    int group;                     /* G for the panel; 0 = float type (float GEMM) */
    int offset;                    /* o in dw * (u - o) + mw */
    int umax;                      /* largest u (picks the AVX2 int16 flush interval) */
    int has_min;
    li_dequantize_fn dequantize;   /* bit-exact with the numpy oracle (SIMD ones too) */
    li_vec_dot_fn vec_dot;
    li_unpack_fn unpack;
    li_quantize_fn from_float;     /* for activation types */
    li_vec_dot_rows_fn vec_dot_rows;   /* set by dispatch.c from the ISA table; NULL: vec_dot row by row */
    li_vec_dot_x4_fn vec_dot_x4;   /* set by dispatch.c: the ISA's dot over a repacked group, or NULL */
    li_vec_dot_x16_m_fn vec_dot_x16_m;   /* set by dispatch.c: four groups, several activation rows, or NULL */
    li_vec_dot_m_fn vec_dot_m;     /* set by dispatch.c: one row-major row, several activation rows, or NULL */
    int vec_dot_prefetches;        /* set by dispatch.c: the GEMV's row dots prefetch their rows (li_prefetch_ahead) */
    int x4_same_bits;              /* set by dispatch.c: the x4 layout gives the row-major bits (li_layout_same_bits) */
} li_type_traits;

/* A SIMD variant overrides what it accelerates; NULL entries fall back to generic. */
typedef struct {
    const char *name;
    li_vec_dot_fn vec_dot[LI_TYPE_COUNT];
    li_vec_dot_rows_fn vec_dot_rows[LI_TYPE_COUNT];
    li_vec_dot_x4_fn vec_dot_x4[LI_TYPE_COUNT];   /* repacked groups (core/repack.c); NULL: no repacking */
    li_vec_dot_x16_m_fn vec_dot_x16_m[LI_TYPE_COUNT];   /* four groups, several activation rows; NULL: vec_dot_x4 */
    li_vec_dot_m_fn vec_dot_m[LI_TYPE_COUNT];   /* a row-major row, several activation rows; NULL: vec_dot each */
    int x16_gemm_min_m;   /* activation rows from which the GEMM beats those (core/matmul.c); 0: 16 */
    /* 1: the dots the GEMV calls on this type's row-major rows (vec_dot_rows where the table has one, else
     * vec_dot and vec_dot_m) prefetch what they stream (li_prefetch_ahead, li_rows_ahead_step), so the
     * GEMV asks for none; the vec_dot_x4 dots always do */
    unsigned char vec_dot_prefetches[LI_TYPE_COUNT];
    /* 1: vec_dot_x4 repeats, per row, the arithmetic of this table's row dot (vec_dot, vec_dot_rows), so
     * that for any number of activation rows a matrix in the x4 layout gives the bits it gives row-major
     * (the GEMM gathers rows either way); only where the type has no vec_dot_x16_m, whose rows differ */
    unsigned char x4_same_bits[LI_TYPE_COUNT];
    li_quantize_fn from_float[LI_TYPE_COUNT];
    li_dequantize_fn dequantize[LI_TYPE_COUNT];   /* only where bit-exact (f16 widening is) */
    li_unpack_fn unpack[LI_TYPE_COUNT];
    void (*pack_w)(const li_panel_plan *p, const uint8_t *u, const float *dw, const float *mw,
                   uint8_t *dst);   /* NULL: li_panel_pack_w */
    void (*pack_a)(const li_panel_plan *p, int act_type, const void *row, int offset,
                   uint8_t *dst);   /* NULL: li_panel_pack_a */
    /* for a plan with no tail; else the row is gathered, unpacked and packed (pack_w) */
    li_pack_w_x4_fn pack_w_x4[LI_TYPE_COUNT];
    li_gemm_q_fn gemm_q; int q_nw, q_na;
    int gemm_corr_slots;   /* 1: gemm_q reads corr per 16-bit slot where li_panel_corr_slots allows (panel.c) */
    li_gemm_f_fn gemm_f; int f_nw, f_na;
    li_dot_rows_fn dot_rows;        /* attention; NULL: generic/attention_generic.c */
    li_dot_rows_f16_fn dot_rows_f16;
    li_axpy_rows_f16_fn axpy_rows_f16;
    li_softmax_f16_fn softmax_f16;
    li_softmax_f32_fn softmax_f32;  /* the encoder's attention; NULL: generic */
    li_round_f16_fn round_f16;
    li_widen_f16_fn widen_f16;
    li_vec_dot_f16_mact_fn vec_dot_f16_mact;   /* NULL: the F16 GEMV calls vec_dot per activation row */
    li_axpy_kv_fn axpy_kv_q8_0, axpy_kv_q4_0;   /* NULL: generic/kv_generic.c */
    /* the gating of ops.c's li_glu; NULL: generic/act_generic.c */
    void (*silu_mul)(const float *g, const float *u, float *y, int64_t n);   /* y = g / (1 + e^-g) * u */
    void (*geglu_f16)(const float *g, const float *u, float *y, int64_t n, const float *table);
    li_norm_row_fn norm_row;        /* ops.c's li_layer_norm; NULL: generic/norm_generic.c */
} li_isa_kernels;

#define LI_MAX_NW 8
#define LI_MAX_NA 8

/* traits.c: one row per type with the generic functions. Each variant's li_isa_kernels table is
 * declared in its folder's header (generic/generic.h, x86/avx2.h, x86/avx512.h, arm/neon.h). */
extern const li_type_traits li_traits_generic[LI_TYPE_COUNT];

/* dispatch.c: the traits of the chosen variant (function pointers resolved) */
const li_type_traits *li_traits(int type);   /* NULL if unsupported */
const li_isa_kernels *li_active_kernels(void);

/* panel.c */
void li_panel_make_plan(li_panel_plan *p, int64_t k, int group);
void li_panel_pack_w(const li_panel_plan *p, const uint8_t *u, const float *dw, const float *mw, uint8_t *dst);
void li_panel_pack_a(const li_panel_plan *p, int act_type, const void *a_row, int offset, uint8_t *dst);

/* generic/quantize_generic.c: a_sums for li_vec_dot_fn (2 floats per block of 32; nothing for other types) */
void li_act_sums(int act_type, const void *row, int64_t n, float *sums);
int li_act_sums_count(int act_type, int64_t n);

/* scratch.c: a 64-byte aligned buffer of at least `bytes` kept per thread and slot (NULL: out of
 * memory); valid until this thread asks for the same slot again. CALL: a whole matmul or attention
 * call's buffers (caller thread); TASK: a pool task's own (every thread, caller included). */
/* core/repack.c: row `row` of a matrix in `layout` as plain rows: w's own bytes, or gathered into tmp
 * (row_bytes) from an x4 group */
const uint8_t *li_layout_row(int wtype, int layout, const uint8_t *w, size_t row_bytes, int64_t row, uint8_t *tmp);
/* 1 for a type with an x4 layout (any ISA: the GEMM and the generic GEMV gather its rows) */
int li_x4_type(int wtype);

enum { LI_SCRATCH_CALL, LI_SCRATCH_TASK, LI_SCRATCH_SLOTS };
void *li_scratch(int slot, size_t bytes);

/* matmul.c: whether this thread asked for the batched path at any row count (li_set_batched_rows) */
int li_batched_rows(void);

/* threadpool.c */
typedef void (*li_task_fn)(void *ctx, int ith, int nth);
/* fn(ctx, ith, nth) on every pool thread (want > 1) or inline (want <= 1); returns the nth used */
int li_pool_run(li_task_fn fn, void *ctx, int want);

#endif /* LI_INTERNAL_H */
