/* quants_x4_avx512.c -- AVX-512 VNNI dots over repacked groups of four rows (core/repack.c).
 *
 * One x4 block holds four rows' block i: their scales, then their quants row after row, so one
 * 512-bit load (Q4_0: 64 nibble bytes) or two (Q8_0: 128 bytes) feed all four rows, the activation
 * block is broadcast to every row's lanes, and dpbusd leaves row r's partial sums in its own lanes.
 * Per block and row that is a fraction of the shuffles the row-major dots need (quants_avx512.c
 * unpacks and re-pairs every row's blocks), so the GEMV is limited by memory, not by these dots.
 * Unsigned u times the signed activation, as there: Q4_0's u - 8 and Q8_0's (q + 128) - 128 through
 * the activation's d * sum(q) (a_sums), so the integer parts stay exact.
 * With several activation rows (sequences decoding together) the dots bound the step: the 16-row
 * kernels (vec_dot_x16_m: Q4_0, Q8_0, Q4_K, Q6_K) unpack each block of four groups once for several rows
 * (Q6_K: for all of them).
 */
#if defined(__x86_64__) || defined(_M_X64)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
#endif

#include <immintrin.h>

#include "core/li.h"
#include "x86/avx512.h"
#include "x86/q6_K_avx512.h"
#include "x86/x4_x86.h"

/* s[r] = lanes of row r summed (every lane of acc belongs to the row `lanes_per_row` picks) - offset * side[r] */
static inline void x4_store(__m512 acc, int lanes_per_row, __m128 side, float offset, float *s) {
    float l[16], sd[4];
    _mm512_storeu_ps(l, acc);
    _mm_storeu_ps(sd, side);
    for (int r = 0; r < LI_X4_ROWS; r++) {
        float t = 0.0f;
        for (int e = 0; e < lanes_per_row; e++) t += l[r * lanes_per_row + e];
        s[r] = t - offset * sd[r];
    }
}

/* one Q4_0 x4 block: lanes 4r..4r+3 of the result are row r's dpbusd sums */
static inline __m512i q4_0x4_block(const block_q4_0x4 *g, const block_q8_0 *a) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i q = _mm512_loadu_si512((const void *)g->qs);
    const __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
    const __m512i alo = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)a->qs));        /* elements 0..15 */
    const __m512i ahi = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(a->qs + 16)));  /* 16..31 */
    return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, alo), hi, ahi);
}

void vec_dot_x4_q4_0_q8_0_avx512(int64_t n, float *s, const void *vg, const void *va, const float *as) {
    const block_q4_0x4 *g = vg;
    const block_q8_0 *a = va;
    const __m512i row4 = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();   /* two chains: even, odd blocks */
    __m128 side = _mm_setzero_ps();
    const int64_t nb = n / QK4_0;
    const int ahead = li_stream_ahead();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        li_prefetch_ahead(g + i, 2 * sizeof *g, ahead);
        const __m128 s0 = x4_scales(g[i].d, as + 2 * i, &side);
        acc0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(row4, _mm512_castps128_ps512(s0)),
                               _mm512_cvtepi32_ps(q4_0x4_block(g + i, a + i)), acc0);
        const __m128 s1 = x4_scales(g[i + 1].d, as + 2 * (i + 1), &side);
        acc1 = _mm512_fmadd_ps(_mm512_permutexvar_ps(row4, _mm512_castps128_ps512(s1)),
                               _mm512_cvtepi32_ps(q4_0x4_block(g + i + 1, a + i + 1)), acc1);
    }
    if (i < nb) {
        const __m128 s0 = x4_scales(g[i].d, as + 2 * i, &side);
        acc0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(row4, _mm512_castps128_ps512(s0)),
                               _mm512_cvtepi32_ps(q4_0x4_block(g + i, a + i)), acc0);
    }
    x4_store(_mm512_add_ps(acc0, acc1), 4, side, 8.0f, s);
}

/* Q4_0 and Q8_0, sixteen rows (four consecutive x4 groups) against m activation rows. Each block of
 * the four groups is loaded and transposed once for all m rows into w[8]: register p holds 4-byte
 * piece p (elements 4p..4p+3, as unsigned bytes) of the 16 rows, int32 lane L = row L. So one dpbusd
 * against a 4-byte broadcast of the activation does 64 products, a lane sums a row's whole block,
 * and the float steps (convert, scale, add) run once per 16 rows and block instead of once per 4:
 * with several rows these, not the memory, bound the step. Sums in another order than vec_dot_x4's, so
 * rows agree with it up to float rounding, and with themselves for any m. Not for one or two rows
 * (core/matmul.c LI_X16_MIN_M): its four streams read slower than vec_dot_x4's one (one row's decode
 * 32-38 against 38-58 t/s, llama-1b Q4_0, Zen 4). */
/* 4 bytes at p in every int32 lane (vpbroadcastd from memory: a load, no shuffle) */
static inline __m512i bcast4(const int8_t *p) { return _mm512_broadcastd_epi32(_mm_loadu_si32(p)); }

/* the 16 rows' fp16 scales of block b of the groups at g + q * g_stride, q < 4 (d: the first field) */
static inline __m512 x16_scales(const uint8_t *g, size_t g_stride, size_t block_bytes, int64_t b) {
    const uint8_t *p = g + (size_t)b * block_bytes;
    const __m128i d01 = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)p), _mm_loadl_epi64((const __m128i *)(p + g_stride)));
    const __m128i d23 = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)(p + 2 * g_stride)),
                                           _mm_loadl_epi64((const __m128i *)(p + 3 * g_stride)));
    return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(d01), d23, 1));
}

/* Four registers of four rows' 16 bytes each (row r at bytes 16r: a Q4_0 x4 block's quants, a Q4_K
 * x4 chunk, four rows' Q4_K scales and mins) -> pc[p]: lane L = dword p of row L of the 16. Rows
 * 0..7 of (v0, v1) as dwords: row j < 4 of v0 is dword 4j + p, row j >= 4 of v1 is 16 + 4(j-4) + p;
 * after the two permutes lanes 0..7 hold piece p, 8..15 piece p + 1. */
static inline __attribute__((always_inline)) void x16_dword_pieces(__m512i v0, __m512i v1, __m512i v2, __m512i v3,
                                                                   __m512i pc[4]) {
    const __m512i pick01 = _mm512_set_epi32(29, 25, 21, 17, 13, 9, 5, 1, 28, 24, 20, 16, 12, 8, 4, 0);
    const __m512i pick23 = _mm512_add_epi32(pick01, _mm512_set1_epi32(2));
    const __m512i x01 = _mm512_permutex2var_epi32(v0, pick01, v1), x23 = _mm512_permutex2var_epi32(v2, pick01, v3);
    const __m512i y01 = _mm512_permutex2var_epi32(v0, pick23, v1), y23 = _mm512_permutex2var_epi32(v2, pick23, v3);
    /* piece p of the 16 rows: rows 0..7 from x01/y01, 8..15 from x23/y23 */
    pc[0] = _mm512_shuffle_i64x2(x01, x23, _MM_SHUFFLE(1, 0, 1, 0));
    pc[1] = _mm512_shuffle_i64x2(x01, x23, _MM_SHUFFLE(3, 2, 3, 2));
    pc[2] = _mm512_shuffle_i64x2(y01, y23, _MM_SHUFFLE(1, 0, 1, 0));
    pc[3] = _mm512_shuffle_i64x2(y01, y23, _MM_SHUFFLE(3, 2, 3, 2));
}

/* Four rows' 16 nibble bytes at p0..p3 (64 bytes each) -> w[p] the low nibbles of piece p of the 16
 * rows, w[4 + p] the high ones */
static inline __attribute__((always_inline)) void x16_nibble_pieces(const void *p0, const void *p1, const void *p2,
                                                                    const void *p3, __m512i w[8]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i pc[4];
    x16_dword_pieces(_mm512_loadu_si512(p0), _mm512_loadu_si512(p1), _mm512_loadu_si512(p2), _mm512_loadu_si512(p3), pc);
    for (int p = 0; p < 4; p++)
        w[p] = _mm512_and_si512(pc[p], m4), w[4 + p] = _mm512_and_si512(_mm512_srli_epi16(pc[p], 4), m4);
}

/* Q4_0 block b of the four groups: the low nibbles are elements 4p.., the high ones 16 + 4p.. */
static inline __attribute__((always_inline)) void q4_0x16_block(const uint8_t *g, size_t g_stride, int64_t b,
                                                                __m512i w[8]) {
    const block_q4_0x4 *x[4];
    for (int q = 0; q < 4; q++) x[q] = (const block_q4_0x4 *)(g + q * g_stride) + b;
    x16_nibble_pieces(x[0]->qs, x[1]->qs, x[2]->qs, x[3]->qs, w);
}

/* Q8_0 block b: group q's 128 bytes are rows 0,1 (first 64) and 2,3 of its four, 8 dwords a row. Per
 * group two permutes gather pieces 0..3 and 4..7 as lanes 4c + r (piece c, row r); then 128-bit
 * shuffles put each piece's four-row chunks of the four groups side by side. The bytes as unsigned:
 * q + 128 (xor 0x80), its 128 * sum(a) taken off at the end. */
static inline __attribute__((always_inline)) void q8_0x16_block(const uint8_t *g, size_t g_stride, int64_t b,
                                                                __m512i w[8]) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    /* lane 4c + r <- row r's dword c: rows 0, 1 at 0 and 8 of the first 64 bytes, rows 2, 3 at 16, 24 */
    const __m512i pick_lo = _mm512_set_epi32(27, 19, 11, 3, 26, 18, 10, 2, 25, 17, 9, 1, 24, 16, 8, 0);
    const __m512i pick_hi = _mm512_add_epi32(pick_lo, _mm512_set1_epi32(4));
    __m512i t[2][4];   /* pieces 4h..4h+3 of group q: lanes 4c + r (piece 4h + c, row r) */
    for (int q = 0; q < 4; q++) {
        const block_q8_0x4 *x = (const block_q8_0x4 *)(g + q * g_stride) + b;
        const __m512i r01 = _mm512_xor_si512(_mm512_loadu_si512((const void *)x->qs), flip);
        const __m512i r23 = _mm512_xor_si512(_mm512_loadu_si512((const void *)(x->qs + 64)), flip);
        t[0][q] = _mm512_permutex2var_epi32(r01, pick_lo, r23);
        t[1][q] = _mm512_permutex2var_epi32(r01, pick_hi, r23);
    }
    for (int h = 0; h < 2; h++) {
        /* u = chunks c, c + 1 of groups 0 and 1, v of groups 2 and 3; then piece 4h + c is chunk c of each */
        const __m512i u0 = _mm512_shuffle_i64x2(t[h][0], t[h][1], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512i v0 = _mm512_shuffle_i64x2(t[h][2], t[h][3], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512i u2 = _mm512_shuffle_i64x2(t[h][0], t[h][1], _MM_SHUFFLE(3, 2, 3, 2));
        const __m512i v2 = _mm512_shuffle_i64x2(t[h][2], t[h][3], _MM_SHUFFLE(3, 2, 3, 2));
        w[4 * h + 0] = _mm512_shuffle_i64x2(u0, v0, _MM_SHUFFLE(2, 0, 2, 0));
        w[4 * h + 1] = _mm512_shuffle_i64x2(u0, v0, _MM_SHUFFLE(3, 1, 3, 1));
        w[4 * h + 2] = _mm512_shuffle_i64x2(u2, v2, _MM_SHUFFLE(2, 0, 2, 0));
        w[4 * h + 3] = _mm512_shuffle_i64x2(u2, v2, _MM_SHUFFLE(3, 1, 3, 1));
    }
}

/* activation rows a pass takes: their accumulators (2 x 6), the block's 16 rows (8) and the
 * constants stay in the 32 registers, and each block is transposed once per six rows instead of
 * four. llama-1b Q4_0, one step of 16 sequences, Zen 4: 112-140 against 119-161 ms with four rows
 * and two accumulation chains a row, 8 alike or worse (spills). */
#define X16_M 6

/* NAME(nb, m, ...): m <= X16_M activation rows against the 16 rows, BLOCK(g, g_stride, b, w) the
 * type's unpack, BLOCK_T its x4 block, OFFSET what the unsigned bytes add (Q4_0 8, Q8_0 128) */
#define X16_ROWS(NAME, BLOCK, BLOCK_T, OFFSET)                                                                   \
    static inline __attribute__((always_inline)) void NAME(int64_t nb, int m, float *s, int64_t s_stride,         \
                                                           const uint8_t *g, size_t g_stride, const uint8_t *a,    \
                                                           size_t a_stride, const float *as, int64_t as_stride) { \
        __m512 acc[X16_M], side[X16_M];   /* one chain a row: the rows' chains interleave */                      \
        for (int r = 0; r < m; r++) acc[r] = side[r] = _mm512_setzero_ps();                                       \
        for (int64_t b = 0; b < nb; b++) {                                                                        \
            __m512i w[8];                                                                                         \
            BLOCK(g, g_stride, b, w);                                                                             \
            const __m512 dw = x16_scales(g, g_stride, sizeof(BLOCK_T), b);                                        \
            for (int r = 0; r < m; r++) {                                                                         \
                const block_q8_0 *ab = (const block_q8_0 *)(a + (size_t)r * a_stride) + b;                        \
                const float *ar = as + r * as_stride + 2 * b;                                                     \
                const int8_t *aq = ab->qs;   /* its 4-byte pieces, each broadcast from memory */                  \
                __m512i dl = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[0], bcast4(aq));                       \
                __m512i dh = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[4], bcast4(aq + 16));                  \
                for (int p = 1; p < 4; p++) {                                                                     \
                    dl = _mm512_dpbusd_epi32(dl, w[p], bcast4(aq + 4 * p));                                       \
                    dh = _mm512_dpbusd_epi32(dh, w[4 + p], bcast4(aq + 16 + 4 * p));                              \
                }                                                                                                 \
                side[r] = _mm512_fmadd_ps(dw, _mm512_set1_ps(ar[1]), side[r]);                                    \
                acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(ar[0])),                                \
                                         _mm512_cvtepi32_ps(_mm512_add_epi32(dl, dh)), acc[r]);                   \
            }                                                                                                     \
        }                                                                                                         \
        for (int r = 0; r < m; r++)                                                                               \
            _mm512_storeu_ps(s + r * s_stride, _mm512_fnmadd_ps(_mm512_set1_ps(OFFSET), side[r], acc[r]));       \
    }

/* vec_dot_x16_m NAME over ROWS, X16_M activation rows at a time (a constant count: the loops unroll) */
_Static_assert(X16_M == 6, "X16_M_ENTRY calls its rows through LI_M6_CALL");
#define X16_M_ENTRY(NAME, ROWS, QK)                                                                               \
    void NAME(int64_t n, int64_t m, float *s, int64_t s_stride, const void *vg, size_t g_stride, const void *va,  \
              size_t a_stride, const float *as, int64_t as_stride) {                                              \
        for (int64_t r = 0; r < m; r += X16_M)                                                                    \
            LI_M6_CALL(m - r, ROWS, n / (QK), s + r * s_stride, s_stride, vg, g_stride,                           \
                       (const uint8_t *)va + (size_t)r * a_stride, a_stride, as + r * as_stride, as_stride);      \
    }

X16_ROWS(q4_0x16_rows, q4_0x16_block, block_q4_0x4, 8.0f)
X16_M_ENTRY(vec_dot_x16_m_q4_0_q8_0_avx512, q4_0x16_rows, QK4_0)
X16_ROWS(q8_0x16_rows, q8_0x16_block, block_q8_0x4, 128.0f)
X16_M_ENTRY(vec_dot_x16_m_q8_0_q8_0_avx512, q8_0x16_rows, QK8_0)

void vec_dot_x4_q8_0_q8_0_avx512(int64_t n, float *s, const void *vg, const void *va, const float *as) {
    const block_q8_0x4 *g = vg;
    const block_q8_0 *a = va;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    const __m512i rows01 = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i rows23 = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2);
    __m512 acc01 = _mm512_setzero_ps(), acc23 = _mm512_setzero_ps();   /* lanes 8r'..: rows 0,1 | 2,3 */
    __m128 side = _mm_setzero_ps();
    const int ahead = li_stream_ahead();
    for (int64_t i = 0; i < n / QK8_0; i++) {
        li_prefetch_ahead(g + i, sizeof *g, ahead);
        const __m128 sc = x4_scales(g[i].d, as + 2 * i, &side);
        const __m512i av = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)a[i].qs));
        const __m512i u01 = _mm512_xor_si512(_mm512_loadu_si512((const void *)g[i].qs), flip);
        const __m512i u23 = _mm512_xor_si512(_mm512_loadu_si512((const void *)(g[i].qs + 64)), flip);
        const __m512 s512 = _mm512_castps128_ps512(sc);
        acc01 = _mm512_fmadd_ps(_mm512_permutexvar_ps(rows01, s512),
                                _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u01, av)), acc01);
        acc23 = _mm512_fmadd_ps(_mm512_permutexvar_ps(rows23, s512),
                                _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u23, av)), acc23);
    }
    float l01[16], l23[16], sd[4];
    _mm512_storeu_ps(l01, acc01);
    _mm512_storeu_ps(l23, acc23);
    _mm_storeu_ps(sd, side);
    for (int r = 0; r < LI_X4_ROWS; r++) {
        const float *l = r < 2 ? l01 + 8 * r : l23 + 8 * (r - 2);
        float t = 0.0f;
        for (int e = 0; e < 8; e++) t += l[e];
        s[r] = t - 128.0f * sd[r];
    }
}

/* Q4_K over the chunked group (quant_blocks.h: 16-byte chunk c of the four rows side by side, one
 * 64-byte load): one 128-bit broadcast of the chunk's 16 activation bytes serves the four rows, each
 * in its 128-bit lane. maddubs, the sub-block's two chunks added in int16 (|.| <= 2 * 2 * 15 * 128),
 * then one dpwssd per sub-block with every lane's row scale, exact in int32; the float steps run per
 * super-block on the four rows at once, and the mins meet the bsums summed in pairs. */

/* The four rows' headers are one 64-byte load: 128-bit lane r = row r's {d, dmin | scales[12]}, as
 * u32 {dd, u0, u1, u2}. li_scales_mins_k4 on every lane at once -> lane r = row r's bytes
 * [scales 0..7 | mins 0..7]; a scalar unpack through a 16-byte stack copy stalled each row's vector
 * load on store forwarding. */
static inline __m512i scales_mins_k4_x4(__m512i h) {
    const __m512i x = _mm512_shuffle_epi32(h, _MM_SHUFFLE(3, 2, 3, 1));   /* u0 u2 u1 u2 */
    const __m512i y = _mm512_shuffle_epi32(h, _MM_SHUFFLE(2, 2, 1, 1));   /* u0 u0 u1 u1 */
    const __m512i low6 = _mm512_and_si512(x, _mm512_set1_epi32(0x3f3f3f3f));
    const __m512i nib = _mm512_and_si512(_mm512_srlv_epi32(x, _mm512_set4_epi32(4, 0, 0, 0)),
                                         _mm512_set1_epi32(0x0f0f0f0f));
    const __m512i top = _mm512_and_si512(_mm512_srli_epi32(y, 2), _mm512_set1_epi32(0x30303030));
    return _mm512_mask_blend_epi32(0xAAAA, low6, _mm512_or_si512(nib, top));
}

static inline __m512i broadcast16(const int8_t *p) { return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)p)); }

/* int16 lanes of 128-bit lane r <- byte s of lane r: row r's scale of sub-block s (0x80: a zero byte) */
static inline __m512i scale_of_sub(__m512i sm, int s) { return _mm512_shuffle_epi8(sm, _mm512_set1_epi16((short)(0x8000 | s))); }

void vec_dot_x4_q4_K_q8_K_avx512(int64_t n, float *s, const void *vg, const void *va, const float *as) {
    (void)as;
    const block_q4_Kx4 *g = vg;
    const block_q8_K *a = va;
    _Static_assert(sizeof(g->h) == 64 && sizeof(g->qs[0]) == 64, "four Q4_K headers, or a chunk of four rows, are one 64-byte load");
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    /* the rows' fp16 {d, dmin} (u32 lane 0 of each 128-bit lane) gathered into the low 128 bits */
    const __m512i dd_lanes = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
    /* lanes 4r..4r+3 <- d (float lane 2r of the converted pairs), dmin (2r + 1) of row r */
    const __m512i d_of_row = _mm512_set_epi32(6, 6, 6, 6, 4, 4, 4, 4, 2, 2, 2, 2, 0, 0, 0, 0);
    const __m512i dmin_of_row = _mm512_set_epi32(7, 7, 7, 7, 5, 5, 5, 5, 3, 3, 3, 3, 1, 1, 1, 1);
    __m512 acc = _mm512_setzero_ps();   /* lanes 4r..4r+3: row r, in four parts */
    const int ahead = li_stream_ahead();
    for (int64_t i = 0; i < n / QK_K; i++) {
        li_prefetch_ahead(g + i, sizeof *g, ahead);
        /* bsums[2j] + bsums[2j+1] (|.| <= 2 * 16 * 128): sub-block j's sum of quants, as int16 */
        const __m256i bs = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a[i].bsums), _mm256_set1_epi16(1));
        const __m128i bsum_pairs = _mm_packs_epi32(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
        const __m512i heads = _mm512_loadu_si512((const void *)g[i].h);
        const __m512i sm = scales_mins_k4_x4(heads);
        /* every row's mins (the high 8 bytes of its lane, as int16) against the bsum pairs: four int32
         * parts a row (|.| <= 2 * 63 * 4096), exact in float */
        const __m512i mins = _mm512_madd_epi16(_mm512_unpackhi_epi8(sm, _mm512_setzero_si512()),
                                               _mm512_broadcast_i32x4(bsum_pairs));
        const __m256 ddf = _mm256_mul_ps(_mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi32(dd_lanes, heads))),
                                         _mm256_set1_ps(a[i].d));   /* d0 m0 d1 m1 .. d3 m3, times da */
        const int8_t *aq = a[i].qs;
        __m512i isum = _mm512_setzero_si512();
        for (int j = 0; j < 4; j++) {   /* chunks 2j, 2j + 1: sub-blocks 2j (low nibbles), 2j + 1 (high) */
            const __m512i w0 = _mm512_loadu_si512((const void *)g[i].qs[2 * j]);
            const __m512i w1 = _mm512_loadu_si512((const void *)g[i].qs[2 * j + 1]);
            const __m512i lo = _mm512_add_epi16(_mm512_maddubs_epi16(_mm512_and_si512(w0, m4), broadcast16(aq + 64 * j)),
                                                _mm512_maddubs_epi16(_mm512_and_si512(w1, m4), broadcast16(aq + 64 * j + 16)));
            const __m512i hi = _mm512_add_epi16(
                _mm512_maddubs_epi16(_mm512_and_si512(_mm512_srli_epi16(w0, 4), m4), broadcast16(aq + 64 * j + 32)),
                _mm512_maddubs_epi16(_mm512_and_si512(_mm512_srli_epi16(w1, 4), m4), broadcast16(aq + 64 * j + 48)));
            isum = _mm512_dpwssd_epi32(isum, lo, scale_of_sub(sm, 2 * j));
            isum = _mm512_dpwssd_epi32(isum, hi, scale_of_sub(sm, 2 * j + 1));
        }
        const __m512 dd = _mm512_castps256_ps512(ddf);
        acc = _mm512_fmadd_ps(_mm512_permutexvar_ps(d_of_row, dd), _mm512_cvtepi32_ps(isum), acc);
        acc = _mm512_fnmadd_ps(_mm512_permutexvar_ps(dmin_of_row, dd), _mm512_cvtepi32_ps(mins), acc);
    }
    float l[16];
    _mm512_storeu_ps(l, acc);
    for (int r = 0; r < LI_X4_ROWS; r++) s[r] = (l[4 * r] + l[4 * r + 1]) + (l[4 * r + 2] + l[4 * r + 3]);
}

/* Q4_K, sixteen rows (four consecutive x4 groups) against all the activation rows in one pass over
 * the weights, as Q6_K's below: each chunk of the four groups (16 bytes of each row) is transposed
 * into 4-byte pieces of the 16 rows (x16_nibble_pieces), so one dpbusd against a 4-byte broadcast
 * of the activation does 64 products; a sub-block (32 elements: the low or the high nibbles of two
 * chunks, eight dpbusd) times the 16 rows' 6-bit scales (vpmulld) is added into one int32 sum a
 * block (|.| <= 8 * 63 * 32 * 15 * 128 < 2^31), the mins against the bsums into another (dpwssd),
 * and the float steps run once per block and 16 rows. The x4 dot (maddubs and dpwssd, the float
 * steps per row) ran once per four rows and activation row; rows agree with it up to float
 * rounding, and with themselves for any m. Even three activation rows share the transposing well
 * enough (16384 x 2048, one thread, Zen 4: 3 rows 84 against 76 GMAC/s through the x4 dot, 4 100-105
 * against 79, 16 130-131 against 73). */
static void q4_Kx16_rows(int64_t nb, int m, float *s, int64_t s_stride, const uint8_t *g, size_t g_stride,
                         const uint8_t *a, size_t a_stride) {
    const __m512i low8 = _mm512_set1_epi32(0xFF), low8_pairs = _mm512_set1_epi32(0x00FF00FF);
    /* bsum pairs of sub-blocks (k, k + 2) as int16 pairs: the order the mins' int16 pairs take */
    const __m128i pair_order = _mm_setr_epi8(0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15);
    __m512 acc[LI_X16_PASS_M];
    for (int i = 0; i < m; i++) acc[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const block_q4_Kx4 *x[4];
        for (int q = 0; q < 4; q++) x[q] = (const block_q4_Kx4 *)(g + q * g_stride) + b;
        const __m512i h0 = _mm512_loadu_si512((const void *)x[0]->h), h1 = _mm512_loadu_si512((const void *)x[1]->h);
        const __m512i h2 = _mm512_loadu_si512((const void *)x[2]->h), h3 = _mm512_loadu_si512((const void *)x[3]->h);
        __m512i dd[4], sm[4];   /* dd[0]: lane L = row L's {d, dmin}; sm: its scales 0..3, 4..7, mins 0..3, 4..7 */
        x16_dword_pieces(h0, h1, h2, h3, dd);
        x16_dword_pieces(scales_mins_k4_x4(h0), scales_mins_k4_x4(h1), scales_mins_k4_x4(h2), scales_mins_k4_x4(h3), sm);
        const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd[0]));
        const __m512 dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd[0], 16)));
        __m512i isum[LI_X16_PASS_M];
        for (int i = 0; i < m; i++) isum[i] = _mm512_setzero_si512();
        for (int j = 0; j < 4; j++) {   /* chunks 2j, 2j + 1: sub-blocks 2j (low nibbles), 2j + 1 (high) */
            __m512i w0[8], w1[8];
            x16_nibble_pieces(x[0]->qs[2 * j], x[1]->qs[2 * j], x[2]->qs[2 * j], x[3]->qs[2 * j], w0);
            x16_nibble_pieces(x[0]->qs[2 * j + 1], x[1]->qs[2 * j + 1], x[2]->qs[2 * j + 1], x[3]->qs[2 * j + 1], w1);
            const __m512i sc_lo = _mm512_and_si512(_mm512_srli_epi32(sm[j / 2], 16 * (j % 2)), low8);
            const __m512i sc_hi = _mm512_and_si512(_mm512_srli_epi32(sm[j / 2], 16 * (j % 2) + 8), low8);
            for (int i = 0; i < m; i++) {
                const int8_t *aq = ((const block_q8_K *)(a + (size_t)i * a_stride) + b)->qs + 64 * j;
                __m512i lo = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w0[0], bcast4(aq));
                __m512i hi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w0[4], bcast4(aq + 32));
                for (int p = 1; p < 4; p++) {
                    lo = _mm512_dpbusd_epi32(lo, w0[p], bcast4(aq + 4 * p));
                    hi = _mm512_dpbusd_epi32(hi, w0[4 + p], bcast4(aq + 32 + 4 * p));
                }
                for (int p = 0; p < 4; p++) {
                    lo = _mm512_dpbusd_epi32(lo, w1[p], bcast4(aq + 16 + 4 * p));
                    hi = _mm512_dpbusd_epi32(hi, w1[4 + p], bcast4(aq + 48 + 4 * p));
                }
                isum[i] = _mm512_add_epi32(isum[i], _mm512_add_epi32(_mm512_mullo_epi32(lo, sc_lo), _mm512_mullo_epi32(hi, sc_hi)));
            }
        }
        /* the mins as int16 pairs: (m0, m2), (m1, m3), (m4, m6), (m5, m7) of row L in lane L */
        const __m512i m02 = _mm512_and_si512(sm[2], low8_pairs), m13 = _mm512_and_si512(_mm512_srli_epi32(sm[2], 8), low8_pairs);
        const __m512i m46 = _mm512_and_si512(sm[3], low8_pairs), m57 = _mm512_and_si512(_mm512_srli_epi32(sm[3], 8), low8_pairs);
        for (int i = 0; i < m; i++) {
            const block_q8_K *ab = (const block_q8_K *)(a + (size_t)i * a_stride) + b;
            /* sub-block k's sum of quants (bsums 2k, 2k + 1: |.| <= 2 * 16 * 128), paired as the mins */
            const __m256i bs = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)ab->bsums), _mm256_set1_epi16(1));
            const __m128i pairs = _mm_shuffle_epi8(_mm_packs_epi32(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1)),
                                                   pair_order);
            __m512i msum = _mm512_dpwssd_epi32(_mm512_setzero_si512(), m02, _mm512_broadcastd_epi32(pairs));
            msum = _mm512_dpwssd_epi32(msum, m13, _mm512_broadcastd_epi32(_mm_srli_si128(pairs, 4)));
            msum = _mm512_dpwssd_epi32(msum, m46, _mm512_broadcastd_epi32(_mm_srli_si128(pairs, 8)));
            msum = _mm512_dpwssd_epi32(msum, m57, _mm512_broadcastd_epi32(_mm_srli_si128(pairs, 12)));
            const __m512 da = _mm512_set1_ps(ab->d);
            acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(d, da), _mm512_cvtepi32_ps(isum[i]), acc[i]);
            acc[i] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, da), _mm512_cvtepi32_ps(msum), acc[i]);
        }
    }
    for (int i = 0; i < m; i++) _mm512_storeu_ps(s + i * s_stride, acc[i]);
}

void vec_dot_x16_m_q4_K_q8_K_avx512(int64_t n, int64_t m, float *s, int64_t s_stride, const void *vg, size_t g_stride,
                                    const void *va, size_t a_stride, const float *as, int64_t as_stride) {
    (void)as, (void)as_stride;
    for (int64_t r = 0; r < m; r += LI_X16_PASS_M)
        q4_Kx16_rows(n / QK_K, (int)(m - r < LI_X16_PASS_M ? m - r : LI_X16_PASS_M), s + r * s_stride, s_stride, vg, g_stride,
                     (const uint8_t *)va + (size_t)r * a_stride, a_stride);
}

/* Q6_K: per row the integers of vec_dot_q6_K_q8_K_avx512 in the same int32 lanes (lane j: elements
 * 4j..4j+3 of each 64, times their sub-block's scale; the offset 32 from the bsums in lanes 0..7), and
 * the same float steps after them, so each row's result is that dot's, bit for bit. The activation is
 * loaded once for the four rows. Where the row dot multiplies dpbusd's sums by the scales (vpmulld),
 * maddubs (u <= 63: pair sums <= 2 * 63 * 128, no saturation) then dpwssd with the scales as int16
 * sum the same products into the same lanes, one instruction less per 64 elements. */
void vec_dot_x4_q6_K_q8_K_avx512(int64_t n, float *s, const void *vg, const void *va, const float *as) {
    (void)as;
    const block_q6_Kx4 *g = vg;
    const block_q8_K *a = va;
    /* int16 lane l of a 64-element register belongs to sub-block l / 8 of the four it holds */
    const __m512i sub = _mm512_set_epi32(0x30003, 0x30003, 0x30003, 0x30003, 0x20002, 0x20002, 0x20002, 0x20002,
                                         0x10001, 0x10001, 0x10001, 0x10001, 0, 0, 0, 0);
    const __m512i idx[4] = {sub, _mm512_add_epi16(sub, _mm512_set1_epi16(4)),
                            _mm512_add_epi16(sub, _mm512_set1_epi16(8)), _mm512_add_epi16(sub, _mm512_set1_epi16(12))};
    __m512 acc[LI_X4_ROWS];
    for (int r = 0; r < LI_X4_ROWS; r++) acc[r] = _mm512_setzero_ps();
    const int ahead = li_stream_ahead();
    for (int64_t i = 0; i < n / QK_K; i++) {
        li_prefetch_ahead(g + i, sizeof *g, ahead);
        const __m256i bsums = _mm256_loadu_si256((const __m256i *)a[i].bsums);
        __m512i sc16[LI_X4_ROWS], sumi[LI_X4_ROWS];
        for (int r = 0; r < LI_X4_ROWS; r++) {
            const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)g[i].h[r].scales));
            sc16[r] = _mm512_castsi256_si512(sc);
            /* the offset 32: sum over sub-blocks of scale * 32 * sum(q), from the bsums */
            sumi[r] = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(),
                                                              _mm256_slli_epi32(_mm256_madd_epi16(sc, bsums), 5)));
        }
        for (int h = 0; h < 2; h++) {
            const __m512i a01 = _mm512_loadu_si512((const void *)(a[i].qs + 128 * h));
            const __m512i a23 = _mm512_loadu_si512((const void *)(a[i].qs + 128 * h + 64));
            for (int r = 0; r < LI_X4_ROWS; r++) {
                const uint8_t *q = g[i].q[r];
                __m512i u01, u23;
                q6_K_unpack_half(q + 64 * h, q + QK_K / 2 + 32 * h, &u01, &u23);
                sumi[r] = _mm512_dpwssd_epi32(sumi[r], _mm512_maddubs_epi16(u01, a01),
                                              _mm512_permutexvar_epi16(idx[2 * h], sc16[r]));
                sumi[r] = _mm512_dpwssd_epi32(sumi[r], _mm512_maddubs_epi16(u23, a23),
                                              _mm512_permutexvar_epi16(idx[2 * h + 1], sc16[r]));
            }
        }
        for (int r = 0; r < LI_X4_ROWS; r++)
            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(_cvtsh_ss(g[i].h[r].d) * a[i].d), _mm512_cvtepi32_ps(sumi[r]), acc[r]);
    }
    for (int r = 0; r < LI_X4_ROWS; r++) s[r] = _mm512_reduce_add_ps(acc[r]);
}

/* Q6_K below Q6_K_X16_FROM activation rows, one group against up to LI_X4_M of them: each weight row's
 * quants of a block unpacked, and its scales spread over the int16 lanes, once for all of them; then every activation row takes
 * the integer and float steps of vec_dot_x4_q6_K_q8_K_avx512, so each row has that dot's bits. */
static inline __attribute__((always_inline)) void q6_Kx4_rows(int64_t nb, int m, float *s, int64_t s_stride,
                                                              const block_q6_Kx4 *g, const uint8_t *a, size_t a_stride) {
    const __m512i sub = _mm512_set_epi32(0x30003, 0x30003, 0x30003, 0x30003, 0x20002, 0x20002, 0x20002, 0x20002,
                                         0x10001, 0x10001, 0x10001, 0x10001, 0, 0, 0, 0);
    __m512 acc[LI_X4_M][LI_X4_ROWS];
    for (int i = 0; i < m; i++)
        for (int r = 0; r < LI_X4_ROWS; r++) acc[i][r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        for (int r = 0; r < LI_X4_ROWS; r++) {   /* weight row r: its elements in four 64s, their scales */
            __m512i u[4], sp[4];
            const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)g[b].h[r].scales));
            const __m512i sc16 = _mm512_castsi256_si512(sc);
            for (int h = 0; h < 2; h++) {
                q6_K_unpack_half(g[b].q[r] + 64 * h, g[b].q[r] + QK_K / 2 + 32 * h, &u[2 * h], &u[2 * h + 1]);
                for (int e = 0; e < 2; e++)
                    sp[2 * h + e] = _mm512_permutexvar_epi16(_mm512_add_epi16(sub, _mm512_set1_epi16((short)(4 * (2 * h + e)))), sc16);
            }
            const float dw = _cvtsh_ss(g[b].h[r].d);
            for (int i = 0; i < m; i++) {
                const block_q8_K *ab = (const block_q8_K *)(a + (size_t)i * a_stride) + b;
                const __m256i bsums = _mm256_loadu_si256((const __m256i *)ab->bsums);
                __m512i sumi = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(),
                                                                       _mm256_slli_epi32(_mm256_madd_epi16(sc, bsums), 5)));
                for (int q = 0; q < 4; q++)
                    sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(u[q], _mm512_loadu_si512((const void *)(ab->qs + 64 * q))),
                                               sp[q]);
                acc[i][r] = _mm512_fmadd_ps(_mm512_set1_ps(dw * ab->d), _mm512_cvtepi32_ps(sumi), acc[i][r]);
            }
        }
    }
    for (int i = 0; i < m; i++)
        for (int r = 0; r < LI_X4_ROWS; r++) s[i * s_stride + r] = _mm512_reduce_add_ps(acc[i][r]);
}

LI_X16_M_BY_GROUP(vec_dot_x16_m_q6_K_q8_K_by_group_avx512, q6_Kx4_rows, block_q6_Kx4, QK_K)

/* Q6_K, sixteen rows (four consecutive x4 groups) against all the activation rows in one pass over
 * the weights: each 64-element quarter of a block is unpacked per row (u = q + 32 <= 63) and the 16
 * rows' dwords transposed once for all the activation rows, so that int32 lane L is row L and one
 * dpbusd against a 4-byte broadcast of the activation does 64 products. A sub-block (16 elements,
 * four dpbusd) then has its sum, less 32 * its bsum (the offset), times the 16 rows' int8 scales
 * (vpmulld) added into one int32 sum per block (|.| <= 16 * 128 * 16 * 63 * 128 < 2^31: exact), and
 * the float steps run once per block and 16 rows. The x4 dot (maddubs and dpwssd, 32 products an
 * instruction, the float steps per row) ran once per four rows and activation row; rows agree with
 * it up to float rounding, and with themselves for any m. The activation rows' sums live on the
 * stack, so the weights (the output matrix: 215 MB for a 128k vocabulary) are read once a step, not
 * once per few activation rows. llama-1b Q4_0 (Q6_K output matrix), one step of 16 sequences, Zen 4:
 * 107-111 -> 98-102 ms; the kernel alone, 16384 x 2048, 16 rows, one thread: 53-58 -> 83-99 GMAC/s. */

/* quarter t (elements 64t..64t+63) of a Q6_K row's quants q (ql, then qh) as u = q + 32 <= 63: what
 * q6_K_unpack_half gives, its variable shifts (the same count in each 256-bit half) made immediate
 * shifts, one of them masked to the half that takes it */
static inline __attribute__((always_inline)) __m512i q6_K_unpack_quarter(const uint8_t *q, int t) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i l = _mm512_loadu_si512((const void *)(q + 64 * (t / 2)));
    const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(q + QK_K / 2 + 32 * (t / 2))));
    if (t % 2 == 0) {   /* low nibbles; high bits 0..1 (elements 0..31) and 2..3 (32..63) to bits 4..5 */
        const __m512i h2 = _mm512_slli_epi16(hb, 2);
        return _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(_mm512_mask_slli_epi16(h2, 0x0000FFFF, h2, 2), m30));
    }
    /* high nibbles; high bits 4..5 (elements 64..95) stay, 6..7 (96..127) down to 4..5 */
    return _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                           _mm512_and_si512(_mm512_mask_srli_epi16(hb, 0xFFFF0000, hb, 2), m30));
}

/* x[L] = row L's 16 dwords -> x[p] = dword p of the 16 rows (lane L = row L) */
static inline __attribute__((always_inline)) void transpose16_epi32(__m512i x[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {   /* 128-bit lane c: rows i, i+1's dwords 4c, 4c+1 | 4c+2, 4c+3 */
        t[i] = _mm512_unpacklo_epi32(x[i], x[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(x[i], x[i + 1]);
    }
    for (int g = 0; g < 16; g += 4) {   /* x[g + e], lane c: dword 4c + e of rows g..g+3 */
        x[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
        x[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
        x[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
        x[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
    }
    for (int e = 0; e < 4; e++) {       /* the 4 x 4 transpose of 128-bit lanes among x[e], x[4 + e], .. */
        const __m512i a = _mm512_shuffle_i32x4(x[e], x[4 + e], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512i b = _mm512_shuffle_i32x4(x[8 + e], x[12 + e], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512i c = _mm512_shuffle_i32x4(x[e], x[4 + e], _MM_SHUFFLE(3, 2, 3, 2));
        const __m512i d = _mm512_shuffle_i32x4(x[8 + e], x[12 + e], _MM_SHUFFLE(3, 2, 3, 2));
        t[e] = _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0));
        t[4 + e] = _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1));
        t[8 + e] = _mm512_shuffle_i32x4(c, d, _MM_SHUFFLE(2, 0, 2, 0));
        t[12 + e] = _mm512_shuffle_i32x4(c, d, _MM_SHUFFLE(3, 1, 3, 1));
    }
    for (int p = 0; p < 16; p++) x[p] = t[p];
}

static void q6_Kx16_rows(int64_t nb, int m, float *s, int64_t s_stride, const uint8_t *g, size_t g_stride,
                         const uint8_t *a, size_t a_stride) {
    /* byte offset of row L's header (scales, then d) within block 0 of the four groups */
    const __m512i head = _mm512_add_epi32(
        _mm512_mullo_epi32(_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0), _mm512_set1_epi32((int)g_stride)),
        _mm512_set_epi32(54, 36, 18, 0, 54, 36, 18, 0, 54, 36, 18, 0, 54, 36, 18, 0));
    _Static_assert(sizeof(((block_q6_Kx4 *)0)->h[0]) == 18, "a Q6_K header: 16 scales, then d");
    __m512 acc[LI_X16_PASS_M];
    for (int i = 0; i < m; i++) acc[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = g + (size_t)b * sizeof(block_q6_Kx4);
        const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(_mm512_add_epi32(head, _mm512_set1_epi32(16)), blk, 1)));
        __m512i isum[LI_X16_PASS_M];
        int32_t offset[LI_X16_PASS_M][QK_K / 16];   /* -32 * bsums: each sub-block's sum starts there */
        for (int i = 0; i < m; i++) {
            isum[i] = _mm512_setzero_si512();
            const block_q8_K *ab = (const block_q8_K *)(a + (size_t)i * a_stride) + b;
            const __m512i bs = _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)ab->bsums));
            _mm512_storeu_si512((void *)offset[i], _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(bs, 5)));
        }
        for (int t = 0; t < 4; t++) {   /* quarter t: elements 64t.., sub-blocks 4t..4t+3 */
            __m512i w[16];
            for (int L = 0; L < 16; L++) {
                const block_q6_Kx4 *x = (const block_q6_Kx4 *)(g + (L / 4) * g_stride) + b;
                w[L] = q6_K_unpack_quarter(x->q[L % 4], t);
            }
            transpose16_epi32(w);
            /* the 16 rows' scales of sub-blocks 4t..4t+3: byte j of each gathered dword, sign-extended */
            const __m512i sc4 = _mm512_i32gather_epi32(_mm512_add_epi32(head, _mm512_set1_epi32(4 * t)), blk, 1);
            __m512i sc[4];
            for (int j = 0; j < 4; j++) sc[j] = _mm512_srai_epi32(_mm512_slli_epi32(sc4, 24 - 8 * j), 24);
            for (int i = 0; i < m; i++) {
                const block_q8_K *ab = (const block_q8_K *)(a + (size_t)i * a_stride) + b;
                const int8_t *aq = ab->qs + 64 * t;
                __m512i part = _mm512_setzero_si512();   /* the quarter's four sub-blocks */
                for (int j = 0; j < 4; j++) {
                    __m512i d = _mm512_dpbusd_epi32(_mm512_set1_epi32(offset[i][4 * t + j]), w[4 * j], bcast4(aq + 16 * j));
                    for (int p = 1; p < 4; p++) d = _mm512_dpbusd_epi32(d, w[4 * j + p], bcast4(aq + 16 * j + 4 * p));
                    part = _mm512_add_epi32(part, _mm512_mullo_epi32(d, sc[j]));
                }
                isum[i] = _mm512_add_epi32(isum[i], part);
            }
        }
        for (int i = 0; i < m; i++) {
            const block_q8_K *ab = (const block_q8_K *)(a + (size_t)i * a_stride) + b;
            acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(ab->d)), _mm512_cvtepi32_ps(isum[i]), acc[i]);
        }
    }
    for (int i = 0; i < m; i++) _mm512_storeu_ps(s + i * s_stride, acc[i]);
}

/* From this many activation rows the transposed kernel: below, its unpacking and transposing, shared
 * by too few rows, cost more than the x4 dot's four passes (16384 x 2048, one thread, Zen 4: 3 rows
 * 32-35 against 46-61 GMAC/s, 4 41-42 against 47-64, 5 45-49 against 43-49, 6 49-53 against 48-49). */
#define Q6_K_X16_FROM 6

void vec_dot_x16_m_q6_K_q8_K_avx512(int64_t n, int64_t m, float *s, int64_t s_stride, const void *vg, size_t g_stride,
                                    const void *va, size_t a_stride, const float *as, int64_t as_stride) {
    if (m < Q6_K_X16_FROM) {
        vec_dot_x16_m_q6_K_q8_K_by_group_avx512(n, m, s, s_stride, vg, g_stride, va, a_stride, as, as_stride);
        return;
    }
    for (int64_t r = 0; r < m; r += LI_X16_PASS_M)
        q6_Kx16_rows(n / QK_K, (int)(m - r < LI_X16_PASS_M ? m - r : LI_X16_PASS_M), s + r * s_stride, s_stride, vg, g_stride,
                     (const uint8_t *)va + (size_t)r * a_stride, a_stride);
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* x86_64 */
