/* quants_avx2.c -- AVX2 (+FMA, F16C) activation quantizers and dot products.
 *
 * Compiled with baseline flags like every file; the target pragma enables AVX2
 * for the functions here only, and core/dispatch.c calls them only on CPUs that have
 * it. Same signatures and results as the _generic versions: the quantizers are
 * bit-identical (same f32 operations, roundf done as trunc + carry), the dot
 * products equal up to float summation order (integer parts are exact).
 * Plain AVX2 has no u8 x s8 -> s32 instruction: maddubs gives s16 pair sums,
 * safe from saturation while u <= 127 (Q8_0 uses abs/sign instead).
 */
#if defined(__x86_64__) || defined(_M_X64)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c")
#endif

#include <immintrin.h>

#include "core/li.h"
#include "x86/avx2.h"
#include "x86/q6_K_avx2.h"
#include "x86/reduce_avx2.h"
#include "x86/x4_x86.h"

static inline int hsum_epi32(__m256i x) {
    __m128i r = _mm_add_epi32(_mm256_extracti128_si256(x, 1), _mm256_castsi256_si128(x));
    r = _mm_add_epi32(r, _mm_unpackhi_epi64(r, r));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 1));
    return _mm_cvtsi128_si32(r);
}

static inline float hmax_ps(__m256 x) {
    __m128 r = _mm_max_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    r = _mm_max_ps(r, _mm_movehl_ps(r, r));
    r = _mm_max_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

static inline float hsum_ps128(__m128 x) {
    const __m128 r = _mm_add_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)));
}

static inline float fp16(ggml_half h) { return _cvtsh_ss(h); }

/* roundf: half away from zero. v - trunc(v) is exact, so the carry decision is too. */
static inline __m256i round_away(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 half = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(v, t)), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    const __m256 one = _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.0f));
    return _mm256_cvttps_epi32(_mm256_add_ps(t, _mm256_and_ps(half, one)));
}

/* 4 x 8 int32 in -127..127 -> 32 int8 in order */
static inline __m256i pack_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
    return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* one block of 32: quants stored at qs, the int sum returned; d from amax / 127 */
static inline int quantize_32(const float *x, int8_t *qs, float *d_out) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
    const __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
    const __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                                   _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
    const float d = hmax_ps(m) / 127;
    const __m256 id = _mm256_set1_ps(d ? 1.0f / d : 0.0f);
    const __m256i q0 = round_away(_mm256_mul_ps(v0, id)), q1 = round_away(_mm256_mul_ps(v1, id));
    const __m256i q2 = round_away(_mm256_mul_ps(v2, id)), q3 = round_away(_mm256_mul_ps(v3, id));
    _mm256_storeu_si256((__m256i *)qs, pack_i8(q0, q1, q2, q3));
    *d_out = d;
    return hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(q0, q1), _mm256_add_epi32(q2, q3)));
}

void quantize_row_q8_0_avx2(const float *x, void *dst, int64_t n) {
    block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        float d;
        quantize_32(x + i * QK8_0, y[i].qs, &d);
        y[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    }
}

void quantize_row_q8_1_avx2(const float *x, void *dst, int64_t n) {
    block_q8_1 *y = dst;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        float d;
        const int sum = quantize_32(x + i * QK8_1, y[i].qs, &d);
        y[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        const float s = sum * d;
        y[i].s = _cvtss_sh(s > 65504.0f ? 65504.0f : s < -65504.0f ? -65504.0f : s, _MM_FROUND_TO_NEAREST_INT);
    }
}

void quantize_row_q8_K_avx2(const float *x, void *dst, int64_t n) {
    block_q8_K *y = dst;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        __m256 m = _mm256_setzero_ps();
        for (int j = 0; j < QK_K; j += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
        const float amax = hmax_ps(m);
        if (!amax) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        int first = 0;   /* the first value of largest magnitude, with its sign (as the reference) */
        for (int j = 0; j < QK_K; j += 8) {
            const __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j));
            const int mask = _mm256_movemask_ps(_mm256_cmp_ps(a, _mm256_set1_ps(amax), _CMP_EQ_OQ));
            if (mask) { first = j + __builtin_ctz((unsigned)mask); break; }
        }
        const float iscale = -127.f / x[first];
        const __m256 vs = _mm256_set1_ps(iscale), top = _mm256_set1_ps(127.0f);
        for (int j = 0; j < QK_K; j += 32) {
            __m256i q[4];
            for (int h = 0; h < 4; h++) {
                const __m256 v = _mm256_mul_ps(vs, _mm256_loadu_ps(x + j + 8 * h));
                q[h] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), top));
            }
            _mm256_storeu_si256((__m256i *)(y[i].qs + j), pack_i8(q[0], q[1], q[2], q[3]));
            y[i].bsums[j / 16] = (int16_t)hsum_epi32(_mm256_add_epi32(q[0], q[1]));
            y[i].bsums[j / 16 + 1] = (int16_t)hsum_epi32(_mm256_add_epi32(q[2], q[3]));
        }
        y[i].d = 1 / iscale;
    }
}

/* --- dot products ---------------------------------------------------------------------- */

/* 16 bytes of nibbles -> 32 bytes: low nibbles (elements 0..15), then high (16..31) */
static inline __m256i nibbles_32(const uint8_t *qs) {
    /* the 16 bytes in both halves by the load itself, the upper half shifted: no shuffle-port work */
    const __m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
    return _mm256_and_si256(_mm256_srlv_epi32(q, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)), _mm256_set1_epi8(0x0F));
}

/* bit j of a little-endian u32 -> 0x10 in byte j (the 5th bit of Q5_0 / Q5_1) */
static inline __m256i fifth_bits_32(const uint8_t *qh) {
    uint32_t bits;
    memcpy(&bits, qh, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
    bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_and_si256(_mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1)), _mm256_set1_epi8(0x10));
}

static inline __m256i dot_u8(__m256i u, __m256i q) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, q), _mm256_set1_epi16(1));
}

/* Scales of two 32-element blocks in one conversion: the weight's fp16 scale word of each
 * block (d twice for the offset types, d and m for the "_1" types) times the activation's
 * {d, d * sum(q)} (a_sums) -> [dw0 * da0, x0 * sa0, dw1 * da1, x1 * sa1]. Lanes 0, 2 scale
 * the integer dots; lanes 1, 3 are the offset / min terms, summed once at the end. */
static inline __m128 pair_scales_v(uint32_t w0, uint32_t w1, __m128 as4) {
    const __m128i h = _mm_cvtsi64_si128((long long)(((uint64_t)w1 << 32) | w0));
    return _mm_mul_ps(_mm_cvtph_ps(h), as4);
}
static inline __m128 pair_scales(uint32_t w0, uint32_t w1, const float *as) {
    return pair_scales_v(w0, w1, _mm_loadu_ps(as));
}
static inline uint32_t dup16(ggml_half d) { return (uint32_t)d * 0x10001u; }   /* {d, d} */
static inline uint32_t word32(const void *p) { uint32_t v; memcpy(&v, p, 4); return v; }   /* {d, m} */

static inline float side_total(__m128 side, int offset) {   /* lanes 1 + 3, times -offset if any */
    const float t = _mm_cvtss_f32(_mm_shuffle_ps(side, side, 1)) + _mm_cvtss_f32(_mm_shuffle_ps(side, side, 3));
    return offset ? -(float)offset * t : t;
}

/* Q8_0 x Q8_0: signed x signed via |x| and y with x's sign (pair sums <= 2 * 128 * 127 < 2^15) */
static inline __m256i dot_s8(const int8_t *wq, __m256i q) {
    const __m256i x = _mm256_loadu_si256((const __m256i *)wq);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(q, x)),
                             _mm256_set1_epi16(1));
}

/* sum over blocks of dw * da * dot(w, q) + (min types) m * da * sum(q) - (offset types) o * dw * da * sum(q):
 * DOT(block, q) is a block's integer dot as 8 int32 lanes. Pairs of blocks: the first block of a pair
 * in acc0, the second in acc1, the odd last block in acc0; the side terms (SIDE: has any) summed
 * apart and added once at the end. The u of the unsigned types is <= 31, so maddubs cannot saturate. */
#define VEC_DOT_PAIRS(NAME, WBLOCK, ABLOCK, DOT, SCALE_WORD, OFFSET, SIDE)                           \
    void NAME(int64_t n, float *s, const void *vw, const void *va, const float *as) {             \
        const WBLOCK *w = vw;                                                                      \
        const ABLOCK *a = va;                                                                      \
        const __m256i two = _mm256_set1_epi32(2);                                                  \
        __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();                             \
        __m128 side = _mm_setzero_ps();                                                            \
        const int64_t nb = n / 32;                                                                 \
        int64_t i = 0;                                                                             \
        for (; i + 1 < nb; i += 2) {                                                               \
            const __m128 p = pair_scales(SCALE_WORD(w[i]), SCALE_WORD(w[i + 1]), as + 2 * i);      \
            if (SIDE) side = _mm_add_ps(side, p);                                                  \
            const __m256i d0 = DOT(w[i], _mm256_loadu_si256((const __m256i *)a[i].qs));           \
            const __m256i d1 = DOT(w[i + 1], _mm256_loadu_si256((const __m256i *)a[i + 1].qs));   \
            acc0 = _mm256_fmadd_ps(_mm256_broadcastss_ps(p), _mm256_cvtepi32_ps(d0), acc0);        \
            acc1 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(_mm256_castps128_ps256(p), two),       \
                                   _mm256_cvtepi32_ps(d1), acc1);                                  \
        }                                                                                          \
        if (i < nb) {                                                                              \
            const float last[4] = {as[2 * i], as[2 * i + 1], 0.0f, 0.0f};                          \
            const __m128 p = pair_scales(SCALE_WORD(w[i]), 0, last);                               \
            if (SIDE) side = _mm_add_ps(side, p);                                                  \
            const __m256i d0 = DOT(w[i], _mm256_loadu_si256((const __m256i *)a[i].qs));           \
            acc0 = _mm256_fmadd_ps(_mm256_broadcastss_ps(p), _mm256_cvtepi32_ps(d0), acc0);        \
        }                                                                                          \
        const float sum = hsum_ps(_mm256_add_ps(acc0, acc1));                                      \
        *s = SIDE ? sum + side_total(side, OFFSET) : sum;                                          \
    }

/* The same for nr <= LI_DOT_ROWS rows (rb bytes apart): per row exactly the arithmetic above, each
 * activation block and its a_sums loaded once for all rows. NR is a constant in each call below,
 * so the row loops unroll and the accumulators stay in registers. */
#define VEC_DOT_ROWS(NAME, WBLOCK, ABLOCK, DOT, SCALE_WORD, OFFSET, SIDE)                            \
    static inline __attribute__((always_inline)) void NAME##_nr(int64_t n, float *s, const uint8_t *vw, \
                                                                size_t rb, const ABLOCK *a,        \
                                                                const float *as, const int NR) {   \
        const __m256i two = _mm256_set1_epi32(2);                                                  \
        const WBLOCK *w[LI_DOT_ROWS];                                                              \
        __m256 acc0[LI_DOT_ROWS], acc1[LI_DOT_ROWS];                                               \
        __m128 side[LI_DOT_ROWS];                                                                  \
        for (int r = 0; r < NR; r++) {                                                             \
            w[r] = (const WBLOCK *)(vw + r * rb);                                                  \
            acc0[r] = acc1[r] = _mm256_setzero_ps();                                               \
            side[r] = _mm_setzero_ps();                                                            \
        }                                                                                          \
        const int64_t nb = n / 32;                                                                 \
        li_rows_ahead pf = li_rows_ahead_start(vw, rb, NR, nb, (int64_t)sizeof(WBLOCK));           \
        int64_t i = 0;                                                                             \
        for (; i + 1 < nb; i += 2) {                                                               \
            const __m256i q0 = _mm256_loadu_si256((const __m256i *)a[i].qs);                      \
            const __m256i q1 = _mm256_loadu_si256((const __m256i *)a[i + 1].qs);                  \
            const __m128 as4 = _mm_loadu_ps(as + 2 * i);                                           \
            li_rows_ahead_step(&pf, 2 * (int64_t)sizeof(WBLOCK), NR);                              \
            for (int r = 0; r < NR; r++) {                                                         \
                const __m128 p = pair_scales_v(SCALE_WORD(w[r][i]), SCALE_WORD(w[r][i + 1]), as4); \
                if (SIDE) side[r] = _mm_add_ps(side[r], p);                                        \
                const __m256i d0 = DOT(w[r][i], q0), d1 = DOT(w[r][i + 1], q1);                    \
                acc0[r] = _mm256_fmadd_ps(_mm256_broadcastss_ps(p), _mm256_cvtepi32_ps(d0), acc0[r]); \
                acc1[r] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(_mm256_castps128_ps256(p), two), \
                                          _mm256_cvtepi32_ps(d1), acc1[r]);                        \
            }                                                                                      \
        }                                                                                          \
        if (i < nb) {                                                                              \
            const float last[4] = {as[2 * i], as[2 * i + 1], 0.0f, 0.0f};                          \
            const __m256i q0 = _mm256_loadu_si256((const __m256i *)a[i].qs);                      \
            for (int r = 0; r < NR; r++) {                                                         \
                const __m128 p = pair_scales(SCALE_WORD(w[r][i]), 0, last);                        \
                if (SIDE) side[r] = _mm_add_ps(side[r], p);                                        \
                const __m256i d0 = DOT(w[r][i], q0);                                               \
                acc0[r] = _mm256_fmadd_ps(_mm256_broadcastss_ps(p), _mm256_cvtepi32_ps(d0), acc0[r]); \
            }                                                                                      \
        }                                                                                          \
        for (int r = 0; r < NR; r++) {                                                             \
            const float sum = hsum_ps(_mm256_add_ps(acc0[r], acc1[r]));                            \
            s[r] = SIDE ? sum + side_total(side[r], OFFSET) : sum;                                 \
        }                                                                                          \
    }                                                                                              \
    void NAME(int64_t n, float *s, const void *vw, size_t rb, int nr, const void *va, const float *as) { \
        switch (nr) {                                                                              \
        case 1: NAME##_nr(n, s, vw, rb, va, as, 1); break;                                         \
        case 2: NAME##_nr(n, s, vw, rb, va, as, 2); break;                                         \
        case 3: NAME##_nr(n, s, vw, rb, va, as, 3); break;                                         \
        default: NAME##_nr(n, s, vw, rb, va, as, 4); break;                                        \
        }                                                                                          \
    }

#define NIBBLES(b, q) dot_u8(nibbles_32((b).qs), q)
#define FIVE_BITS(b, q) dot_u8(_mm256_or_si256(nibbles_32((b).qs), fifth_bits_32((b).qh)), q)
#define SIGNED(b, q) dot_s8((b).qs, q)
#define D_TWICE(b) dup16((b).d)
#define D_AND_M(b) word32(&(b).d)

#define VEC_DOT_BOTH(W, A, DOT, SCALE_WORD, OFFSET, SIDE)                                          \
    VEC_DOT_PAIRS(vec_dot_##W##_##A##_avx2, block_##W, block_##A, DOT, SCALE_WORD, OFFSET, SIDE)   \
    VEC_DOT_ROWS(vec_dot_rows_##W##_##A##_avx2, block_##W, block_##A, DOT, SCALE_WORD, OFFSET, SIDE)

VEC_DOT_BOTH(q4_0, q8_0, NIBBLES, D_TWICE, 8, 1)
VEC_DOT_BOTH(q5_0, q8_0, FIVE_BITS, D_TWICE, 16, 1)
VEC_DOT_BOTH(q4_1, q8_1, NIBBLES, D_AND_M, 0, 1)
VEC_DOT_BOTH(q5_1, q8_1, FIVE_BITS, D_AND_M, 0, 1)
VEC_DOT_BOTH(q8_0, q8_0, SIGNED, D_TWICE, 0, 0)   /* no side term: lanes 1, 3 go unused */

/* Q4_K: li_scales_mins_k4 on block headers ({d, dmin | scales[12]} as u32 {dd, u0, u1, u2}), one per
 * 128-bit lane, all four u32 at once -> lane r: that block's bytes [8 scales | 8 mins]. The row dot
 * passes one header, the x4 dot two rows' headers. */
static inline __m256i scales_mins_k4(__m256i h) {
    const __m256i x = _mm256_shuffle_epi32(h, _MM_SHUFFLE(3, 2, 3, 1));   /* u0 u2 u1 u2 */
    const __m256i y = _mm256_shuffle_epi32(h, _MM_SHUFFLE(2, 2, 1, 1));   /* u0 u0 u1 u1 */
    /* u32 0, 2: the low 6 bits of u0, u1 (scales 0..3, mins 0..3); u32 1, 3: the nibbles of u2
     * (low for scales 4..7, high for mins 4..7) with bits 6..7 of u0 / u1 as their bits 4..5 */
    const __m256i low6 = _mm256_and_si256(x, _mm256_set1_epi32(0x3f3f3f3f));
    const __m256i nib = _mm256_and_si256(_mm256_srlv_epi32(x, _mm256_setr_epi32(0, 0, 0, 4, 0, 0, 0, 4)),
                                         _mm256_set1_epi32(0x0f0f0f0f));
    const __m256i top = _mm256_and_si256(_mm256_srli_epi32(y, 2), _mm256_set1_epi32(0x30303030));
    return _mm256_blend_epi32(low6, _mm256_or_si256(nib, top), 0xAA);
}

/* Q4_K. Per super-block the vector ports, not the loads, are the limit, so the work beside the
 * 8 maddubs + 8 madd is kept small:
 *   - each sub-block's scale reaches its madd as a broadcast load (a load-port uop, no shuffle):
 *     a shuffle writes the scales as int16 pairs {s, s} to the stack, the madds read them back;
 *   - the mins meet the activation's pair-summed bsums in a madd and stay in a vector
 *     accumulator: no horizontal sum per super-block;
 *   - d and dmin are converted together from their fp16 pair.
 * One row per call, no vec_dot_rows: see x86/avx2_table.c. */

/* the integer dot of one super-block's quants with the activation's: scales 0..3 at lo[0..3],
 * 4..7 at hi[0..3], each an int16 pair {s, s} */
static inline __attribute__((always_inline)) __m256i q4_K_sumi(const uint8_t *qs, const int8_t *aq, const int32_t *lo,
                                                               const int32_t *hi) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 4; j++) {   /* 32 bytes = sub-blocks 2j (low nibbles), 2j+1 (high) */
        const int32_t *sc = j < 2 ? lo + 2 * j : hi + 2 * j - 4;
        const __m256i bits = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
        const __m256i ql = _mm256_and_si256(bits, m4), qh = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
        const __m256i p0 = _mm256_maddubs_epi16(ql, _mm256_loadu_si256((const __m256i *)(aq + 64 * j)));
        const __m256i p1 = _mm256_maddubs_epi16(qh, _mm256_loadu_si256((const __m256i *)(aq + 64 * j + 32)));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p0, _mm256_set1_epi32(sc[0])));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p1, _mm256_set1_epi32(sc[1])));
    }
    return sumi;
}

/* bytes [8 scales | 8 mins] (in each 128-bit half) -> scales b..b+3 as int16 pairs {s, s} */
#define Q4_K_PAIRS(b) (char)(b), -1, (char)(b), -1
#define Q4_K_PAIRS4(b) Q4_K_PAIRS(b), Q4_K_PAIRS(b + 1), Q4_K_PAIRS(b + 2), Q4_K_PAIRS(b + 3)

/* one row's super-block i: acc += d * da * sumi, acc_mins (4 lanes) += dmin * da * mins */
static inline __attribute__((always_inline)) void q4_K_block_one(const block_q4_K *w, const block_q8_K *a, __m128 da,
                                                                 __m128i bsum_pairs, __m256 *acc, __m128 *acc_mins) {
    const __m128i head = _mm_loadu_si128((const __m128i *)w);   /* d, dmin, scales: the block's first 16 bytes */
    const __m128i sm = _mm256_castsi256_si128(scales_mins_k4(_mm256_castsi128_si256(head)));
    int32_t sc[8] __attribute__((aligned(32)));
    _mm256_store_si256((__m256i *)sc, _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(sm),
                                                          _mm256_setr_epi8(Q4_K_PAIRS4(0), Q4_K_PAIRS4(4))));
    /* the compiler would forward the stored scales through shuffles, two per madd: make it read them */
    __asm__("" : "+m"(sc));
    const __m128 dd = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int)word32(&w->d))), da);   /* d, dmin (* da) */
    /* lane j%4 of mins: min_j * (bsums[2j] + bsums[2j+1]) + ..., exact in int32 */
    const __m128i mins = _mm_madd_epi16(_mm_unpackhi_epi8(sm, _mm_setzero_si128()), bsum_pairs);
    *acc_mins = _mm_fmadd_ps(_mm_shuffle_ps(dd, dd, 0x55), _mm_cvtepi32_ps(mins), *acc_mins);
    const __m256i sumi = q4_K_sumi(w->qs, a->qs, sc, sc + 4);
    *acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(dd), _mm256_cvtepi32_ps(sumi), *acc);
}

void vec_dot_q4_K_q8_K_avx2(int64_t n, float *s, const void *vw, const void *va, const float *as) {
    (void)as;
    const block_q4_K *w = vw;
    const block_q8_K *a = va;
    __m256 acc = _mm256_setzero_ps();
    __m128 acc_mins = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        /* bsums[2j] + bsums[2j+1] (|.| <= 2 * 16 * 127, an int16) for sub-block j of 32 */
        const __m256i bs = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a[i].bsums), _mm256_set1_epi16(1));
        const __m128i bsum_pairs = _mm_packs_epi32(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
        q4_K_block_one(&w[i], &a[i], _mm_set1_ps(a[i].d), bsum_pairs, &acc, &acc_mins);
    }
    *s = hsum_ps(acc) - hsum_ps128(acc_mins);
}

/* int16 lanes of 128-bit lane r <- byte s of lane r: row r's scale of sub-block s (0x80: a zero byte) */
static inline __m256i scale_of_sub(__m256i sm, int s) { return _mm256_shuffle_epi8(sm, _mm256_set1_epi16((short)(0x8000 | s))); }

/* The same over a repacked group of four rows (core/repack.c, quant_blocks.h: the quants in 16-byte
 * chunks, chunk c of the four rows side by side). One register is a chunk of two rows (row pairs
 * 0,1 and 2,3 in 128-bit lanes), one 128-bit broadcast its 16 activation bytes: maddubs, then the
 * sub-block's two chunks added in int16 (|.| <= 2 * 2 * 15 * 128), then one madd per sub-block and
 * row pair applies the rows' scales (the row code's two madds per 32 bytes and row are one per
 * 128 bytes here). Exact in int32; the float steps run per super-block on all four rows at once. */
void vec_dot_x4_q4_K_q8_K_avx2(int64_t n, float *s, const void *vg, const void *va, const float *as) {
    (void)as;
    const block_q4_Kx4 *g = vg;
    const block_q8_K *a = va;
    const __m256i m4 = _mm256_set1_epi8(0x0F), zero = _mm256_setzero_si256();
    const __m256i dd_of_pair = _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4);   /* the headers' {d, dmin} */
    __m256 acc01 = _mm256_setzero_ps(), acc23 = _mm256_setzero_ps();   /* lanes 4r'..: rows 0, 1 | 2, 3 */
    const int ahead = li_stream_ahead();
    for (int64_t i = 0; i < n / QK_K; i++) {
        li_prefetch_ahead(g + i, sizeof *g, ahead);
        const __m256i bs = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a[i].bsums), _mm256_set1_epi16(1));
        const __m256i bsum_pairs =
            _mm256_broadcastsi128_si256(_mm_packs_epi32(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1)));
        const __m256i h01 = _mm256_loadu_si256((const __m256i *)&g[i].h[0]);
        const __m256i h23 = _mm256_loadu_si256((const __m256i *)&g[i].h[2]);
        const __m256i sm01 = scales_mins_k4(h01), sm23 = scales_mins_k4(h23);
        /* each row's mins against the bsum pairs: four int32 parts in the row's lanes */
        const __m256i mins01 = _mm256_madd_epi16(_mm256_unpackhi_epi8(sm01, zero), bsum_pairs);
        const __m256i mins23 = _mm256_madd_epi16(_mm256_unpackhi_epi8(sm23, zero), bsum_pairs);
        const __m128i dd4 = _mm256_castsi256_si128(_mm256_unpacklo_epi64(_mm256_permutevar8x32_epi32(h01, dd_of_pair),
                                                                         _mm256_permutevar8x32_epi32(h23, dd_of_pair)));
        const __m256 dd = _mm256_mul_ps(_mm256_cvtph_ps(dd4), _mm256_set1_ps(a[i].d));   /* d0 m0 d1 m1 .. d3 m3 */
        const uint8_t *q = &g[i].qs[0][0][0];
        const int8_t *aq = a[i].qs;
        __m256i i01 = zero, i23 = zero;
        for (int j = 0; j < 4; j++) {   /* chunks 2j, 2j + 1: sub-blocks 2j (low nibbles), 2j + 1 (high) */
            __m256i lo01 = zero, hi01 = zero, lo23 = zero, hi23 = zero;
            for (int c = 0; c < 2; c++) {
                const __m256i al = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(aq + 64 * j + 16 * c)));
                const __m256i ah = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(aq + 64 * j + 32 + 16 * c)));
                const __m256i w01 = _mm256_loadu_si256((const __m256i *)(q + 128 * j + 64 * c));
                const __m256i w23 = _mm256_loadu_si256((const __m256i *)(q + 128 * j + 64 * c + 32));
                lo01 = _mm256_add_epi16(lo01, _mm256_maddubs_epi16(_mm256_and_si256(w01, m4), al));
                hi01 = _mm256_add_epi16(hi01, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(w01, 4), m4), ah));
                lo23 = _mm256_add_epi16(lo23, _mm256_maddubs_epi16(_mm256_and_si256(w23, m4), al));
                hi23 = _mm256_add_epi16(hi23, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(w23, 4), m4), ah));
            }
            i01 = _mm256_add_epi32(i01, _mm256_madd_epi16(lo01, scale_of_sub(sm01, 2 * j)));
            i01 = _mm256_add_epi32(i01, _mm256_madd_epi16(hi01, scale_of_sub(sm01, 2 * j + 1)));
            i23 = _mm256_add_epi32(i23, _mm256_madd_epi16(lo23, scale_of_sub(sm23, 2 * j)));
            i23 = _mm256_add_epi32(i23, _mm256_madd_epi16(hi23, scale_of_sub(sm23, 2 * j + 1)));
        }
        acc01 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(dd, _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2)),
                                _mm256_cvtepi32_ps(i01), acc01);
        acc01 = _mm256_fnmadd_ps(_mm256_permutevar8x32_ps(dd, _mm256_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3)),
                                 _mm256_cvtepi32_ps(mins01), acc01);
        acc23 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(dd, _mm256_setr_epi32(4, 4, 4, 4, 6, 6, 6, 6)),
                                _mm256_cvtepi32_ps(i23), acc23);
        acc23 = _mm256_fnmadd_ps(_mm256_permutevar8x32_ps(dd, _mm256_setr_epi32(5, 5, 5, 5, 7, 7, 7, 7)),
                                 _mm256_cvtepi32_ps(mins23), acc23);
    }
    float l[2 * 8];
    _mm256_storeu_ps(l, acc01);
    _mm256_storeu_ps(l + 8, acc23);
    for (int r = 0; r < LI_X4_ROWS; r++) s[r] = (l[4 * r] + l[4 * r + 1]) + (l[4 * r + 2] + l[4 * r + 3]);
}

/* Q4_K, one x4 group against up to LI_X16_PASS_M activation rows: each super-block's scales and mins
 * decoded, its quants split into nibbles and the rows' d and dmin widened once for all of them; then
 * every activation row takes vec_dot_x4_q4_K_q8_K_avx2's integer and float steps (its d times the
 * rows' d and dmin rounded once, as there), so each row has that dot's bits. The rows' sums live on
 * the stack (the unpacked block alone outgrows AVX2's sixteen registers): four rows a pass with the
 * count a constant unpacked each block again for every four (16384 x 2048, one thread, Zen 4: 8 rows
 * 58 -> 66 GMAC/s, 16 58 -> 68-71, 23 58 -> 72; 3 and 4 rows alike). */
static void q4_Kx4_rows_avx2(int64_t nb, int m, float *s, int64_t s_stride, const block_q4_Kx4 *g, const uint8_t *a,
                             size_t a_stride) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), zero = _mm256_setzero_si256();
    const __m256i dd_of_pair = _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4);
    const __m256i d01 = _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2), m01 = _mm256_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3);
    const __m256i d23 = _mm256_setr_epi32(4, 4, 4, 4, 6, 6, 6, 6), m23 = _mm256_setr_epi32(5, 5, 5, 5, 7, 7, 7, 7);
    __m256 acc[LI_X16_PASS_M][2];
    for (int i = 0; i < m; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const __m256i h01 = _mm256_loadu_si256((const __m256i *)&g[b].h[0]);
        const __m256i h23 = _mm256_loadu_si256((const __m256i *)&g[b].h[2]);
        const __m256i sm01 = scales_mins_k4(h01), sm23 = scales_mins_k4(h23);
        const __m256i mn01 = _mm256_unpackhi_epi8(sm01, zero), mn23 = _mm256_unpackhi_epi8(sm23, zero);
        const __m128i dd4 = _mm256_castsi256_si128(_mm256_unpacklo_epi64(_mm256_permutevar8x32_epi32(h01, dd_of_pair),
                                                                         _mm256_permutevar8x32_epi32(h23, dd_of_pair)));
        const __m256 ddw = _mm256_cvtph_ps(dd4);   /* d0 m0 d1 m1 .. d3 m3 */
        const __m256 dw01 = _mm256_permutevar8x32_ps(ddw, d01), mw01 = _mm256_permutevar8x32_ps(ddw, m01);
        const __m256 dw23 = _mm256_permutevar8x32_ps(ddw, d23), mw23 = _mm256_permutevar8x32_ps(ddw, m23);
        const uint8_t *q = &g[b].qs[0][0][0];
        __m256i w[4][2][4];   /* chunk pair j, c: low nibbles of rows 0,1 | 2,3, high nibbles of rows 0,1 | 2,3 */
        __m256i sc[4][4];     /* pair j: sub-block 2j's scales of rows 0,1 | 2,3, then 2j + 1's */
        for (int j = 0; j < 4; j++) {
            for (int c = 0; c < 2; c++) {
                const __m256i w01 = _mm256_loadu_si256((const __m256i *)(q + 128 * j + 64 * c));
                const __m256i w23 = _mm256_loadu_si256((const __m256i *)(q + 128 * j + 64 * c + 32));
                w[j][c][0] = _mm256_and_si256(w01, m4), w[j][c][1] = _mm256_and_si256(w23, m4);
                w[j][c][2] = _mm256_and_si256(_mm256_srli_epi16(w01, 4), m4);
                w[j][c][3] = _mm256_and_si256(_mm256_srli_epi16(w23, 4), m4);
            }
            sc[j][0] = scale_of_sub(sm01, 2 * j), sc[j][1] = scale_of_sub(sm23, 2 * j);
            sc[j][2] = scale_of_sub(sm01, 2 * j + 1), sc[j][3] = scale_of_sub(sm23, 2 * j + 1);
        }
        for (int i = 0; i < m; i++) {
            const block_q8_K *ab = (const block_q8_K *)(a + (size_t)i * a_stride) + b;
            const __m256i bs = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)ab->bsums), _mm256_set1_epi16(1));
            const __m256i bsum_pairs =
                _mm256_broadcastsi128_si256(_mm_packs_epi32(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1)));
            const __m256i mins01 = _mm256_madd_epi16(mn01, bsum_pairs), mins23 = _mm256_madd_epi16(mn23, bsum_pairs);
            const int8_t *aq = ab->qs;
            __m256i i01 = zero, i23 = zero;
            for (int j = 0; j < 4; j++) {
                __m256i lo01 = zero, hi01 = zero, lo23 = zero, hi23 = zero;
                for (int c = 0; c < 2; c++) {
                    const __m256i al = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(aq + 64 * j + 16 * c)));
                    const __m256i ah = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(aq + 64 * j + 32 + 16 * c)));
                    lo01 = _mm256_add_epi16(lo01, _mm256_maddubs_epi16(w[j][c][0], al));
                    hi01 = _mm256_add_epi16(hi01, _mm256_maddubs_epi16(w[j][c][2], ah));
                    lo23 = _mm256_add_epi16(lo23, _mm256_maddubs_epi16(w[j][c][1], al));
                    hi23 = _mm256_add_epi16(hi23, _mm256_maddubs_epi16(w[j][c][3], ah));
                }
                i01 = _mm256_add_epi32(i01, _mm256_madd_epi16(lo01, sc[j][0]));
                i01 = _mm256_add_epi32(i01, _mm256_madd_epi16(hi01, sc[j][2]));
                i23 = _mm256_add_epi32(i23, _mm256_madd_epi16(lo23, sc[j][1]));
                i23 = _mm256_add_epi32(i23, _mm256_madd_epi16(hi23, sc[j][3]));
            }
            const __m256 da = _mm256_set1_ps(ab->d);
            acc[i][0] = _mm256_fmadd_ps(_mm256_mul_ps(dw01, da), _mm256_cvtepi32_ps(i01), acc[i][0]);
            acc[i][0] = _mm256_fnmadd_ps(_mm256_mul_ps(mw01, da), _mm256_cvtepi32_ps(mins01), acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(_mm256_mul_ps(dw23, da), _mm256_cvtepi32_ps(i23), acc[i][1]);
            acc[i][1] = _mm256_fnmadd_ps(_mm256_mul_ps(mw23, da), _mm256_cvtepi32_ps(mins23), acc[i][1]);
        }
    }
    for (int i = 0; i < m; i++) {
        float l[2 * 8];
        _mm256_storeu_ps(l, acc[i][0]);
        _mm256_storeu_ps(l + 8, acc[i][1]);
        for (int r = 0; r < LI_X4_ROWS; r++) s[i * s_stride + r] = (l[4 * r] + l[4 * r + 1]) + (l[4 * r + 2] + l[4 * r + 3]);
    }
}

void vec_dot_x16_m_q4_K_q8_K_avx2(int64_t n, int64_t m, float *s, int64_t s_stride, const void *vg, size_t g_stride,
                                  const void *va, size_t a_stride, const float *as, int64_t as_stride) {
    (void)as, (void)as_stride;
    for (int q = 0; q < LI_X4_ROWS; q++) {
        const block_q4_Kx4 *g = (const block_q4_Kx4 *)((const uint8_t *)vg + (size_t)q * g_stride);
        for (int64_t r = 0; r < m; r += LI_X16_PASS_M)
            q4_Kx4_rows_avx2(n / QK_K, (int)(m - r < LI_X16_PASS_M ? m - r : LI_X16_PASS_M), s + r * s_stride + LI_X4_ROWS * q,
                             s_stride, g, (const uint8_t *)va + (size_t)r * a_stride, a_stride);
    }
}

/* Q6_K: the super-block's integers from x86/q6_K_avx2.h. One row per call, as Q4_K. */
void vec_dot_q6_K_q8_K_avx2(int64_t n, float *s, const void *vw, const void *va, const float *as) {
    (void)as;
    const block_q6_K *w = vw;
    const block_q8_K *a = va;
    __m256 acc = _mm256_setzero_ps();
    const int ahead = li_stream_ahead();
    for (int64_t i = 0; i < n / QK_K; i++) {
        li_prefetch_ahead(w + i, sizeof *w, ahead);
        const __m256i sumi = q6_K_sumi_avx2(w[i].ql, w[i].qh, w[i].scales, &a[i]);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(fp16(w[i].d) * a[i].d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_ps(acc);
}

/* Q6_K, one row against several activation rows: each super-block unpacked once, then every activation
 * row takes vec_dot_q6_K_q8_K_avx2's integers and float steps (its accumulator on the stack), so each
 * has that dot's bits. */
void vec_dot_m_q6_K_q8_K_avx2(int64_t n, int64_t m, float *s, int64_t s_stride, const void *vw, const void *va,
                              size_t a_stride, const float *as, int64_t as_stride) {
    (void)as, (void)as_stride;
    const block_q6_K *w = vw;
    const int ahead = li_stream_ahead();
    __m256 acc[LI_X16_PASS_M];
    for (int64_t r0 = 0; r0 < m; r0 += LI_X16_PASS_M) {
        const int mr = (int)(m - r0 < LI_X16_PASS_M ? m - r0 : LI_X16_PASS_M);
        const uint8_t *a0 = (const uint8_t *)va + (size_t)r0 * a_stride;
        for (int i = 0; i < mr; i++) acc[i] = _mm256_setzero_ps();
        for (int64_t b = 0; b < n / QK_K; b++) {
            li_prefetch_ahead(w + b, sizeof *w, r0 == 0 ? ahead : 0);   /* the first pass reads the row */
            q6_K_unpacked_avx2 p;
            q6_K_unpack_avx2(w[b].ql, w[b].qh, w[b].scales, &p);
            const float dw = fp16(w[b].d);
            for (int i = 0; i < mr; i++) {
                const block_q8_K *a = (const block_q8_K *)(a0 + (size_t)i * a_stride) + b;
                const __m256i sumi = q6_K_sumi_unpacked_avx2(&p, a);
                acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(dw * a->d), _mm256_cvtepi32_ps(sumi), acc[i]);
            }
        }
        for (int i = 0; i < mr; i++) s[(r0 + i) * s_stride] = hsum_ps(acc[i]);
    }
}

void vec_dot_f16_f16_avx2(int64_t n, float *s, const void *vw, const void *va, const float *as) {
    (void)as;
    const ggml_half *x = vw, *y = va;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int j = 0; j < 4; j++)
            acc[j] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i + 8 * j))),
                                     _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(y + i + 8 * j))), acc[j]);
    float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; i++) sum += fp16(x[i]) * fp16(y[i]);
    *s = sum;
}

void vec_dot_f32_f32_avx2(int64_t n, float *s, const void *vw, const void *va, const float *as) {
    (void)as;
    const float *x = vw, *y = va;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int j = 0; j < 4; j++)
            acc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * j), _mm256_loadu_ps(y + i + 8 * j), acc[j]);
    float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; i++) sum += x[i] * y[i];
    *s = sum;
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* x86_64 */
