/* quants_avx512.c -- AVX-512 VNNI dot products (AVX512F/BW/VL/VNNI + AVX2/FMA/F16C).
 *
 * _mm512_dpbusd_epi32 multiplies unsigned by signed bytes and adds groups of four
 * straight into int32 lanes: no s16 saturation, no widening step. Every weight
 * type is read as unsigned u with an offset (see generic/unpack_generic.c), so a block's
 * integer dot is dpbusd(u, q) - o * sum(q), exact. The 32-element types go two
 * blocks per 512-bit register, the k-quants 64 elements of a super-block at a time.
 * The activation quantizers are the AVX2 ones (quants_avx2.c), which run here too.
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

static inline float fp16(ggml_half h) { return _cvtsh_ss(h); }

/* per-lane scales for two blocks: lanes 0..7 get s0, lanes 8..15 get s1 */
static inline __m512 two_scales(float s0, float s1) {
    return _mm512_castsi512_ps(_mm512_inserti64x4(_mm512_castps_si512(_mm512_set1_ps(s0)),
                                                   _mm256_castps_si256(_mm256_set1_ps(s1)), 1));
}

/* the 32 quants of two consecutive activation blocks (stride bytes apart) */
static inline __m512i load_two(const int8_t *q0, const int8_t *q1) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)q0)),
                              _mm256_loadu_si256((const __m256i *)q1), 1);
}

/* two blocks of 16 nibble bytes -> 64 bytes in element order: [lo0 hi0 | lo1 hi1] */
static inline __m512i nibbles_two(const uint8_t *qs0, const uint8_t *qs1) {
    const __m256i b = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)qs1), _mm_loadu_si128((const __m128i *)qs0));
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(b), _mm256_srli_epi16(b, 4), 1);  /* lo0 lo1 hi0 hi1 */
    return _mm512_and_si512(_mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(3, 1, 2, 0)), _mm512_set1_epi8(0x0F));
}

/* the 5th bits of two Q5 blocks as 0x10 bytes, in the order of nibbles_two */
static inline __m512i fifth_bits_two(const uint8_t *qh0, const uint8_t *qh1) {
    uint32_t h0, h1;
    memcpy(&h0, qh0, 4);
    memcpy(&h1, qh1, 4);
    const __mmask64 m = (__mmask64)h0 | (__mmask64)h1 << 32;
    return _mm512_maskz_mov_epi8(m, _mm512_set1_epi8(0x10));
}

/* As in quants_avx2.c: the scales of two blocks in one fp16 conversion, times the activation's
 * {d, d * sum(q)} -> [dw0 * da0, x0 * sa0, dw1 * da1, x1 * sa1] (x = d or m). */
static inline __m128 pair_scales(uint32_t w0, uint32_t w1, const float *as) {
    const __m128i h = _mm_cvtsi64_si128((long long)(((uint64_t)w1 << 32) | w0));
    return _mm_mul_ps(_mm_cvtph_ps(h), _mm_loadu_ps(as));
}
static inline uint32_t dup16(ggml_half d) { return (uint32_t)d * 0x10001u; }   /* {d, d} */
static inline uint32_t word32(const void *p) { uint32_t v; memcpy(&v, p, 4); return v; }   /* {d, m} */

static inline float side_total(__m128 side, int offset) {   /* lanes 1 + 3, times -offset if any */
    const float t = _mm_cvtss_f32(_mm_shuffle_ps(side, side, 1)) + _mm_cvtss_f32(_mm_shuffle_ps(side, side, 3));
    return offset ? -(float)offset * t : t;
}

/* 16 bytes of nibbles -> 32 bytes in element order (one block, for the odd last one) */
static inline __m256i nibbles_one(const uint8_t *qs) {
    const __m128i q = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
}

static inline __m256i fifth_bits_one(const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, 4);
    return _mm256_maskz_mov_epi8((__mmask32)h, _mm256_set1_epi8(0x10));
}

/* sum over blocks of dw * da * dot(u, q) + (min types) m * da * sum(q) - (offset types)
 * o * dw * da * sum(q): two blocks per dpbusd, the last odd block with a 256-bit one. */
#define PAIR(i, acc, UNPACK_TWO, SCALE_WORD)                                                            \
    do {                                                                                                \
        const __m128 p = pair_scales(SCALE_WORD(w[i]), SCALE_WORD(w[(i) + 1]), as + 2 * (i));           \
        side = _mm_add_ps(side, p);                                                                     \
        const __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), UNPACK_TWO(w[i], w[(i) + 1]),     \
                                              load_two(a[i].qs, a[(i) + 1].qs));                        \
        acc = _mm512_fmadd_ps(_mm512_permutexvar_ps(lanes02, _mm512_castps128_ps512(p)),                \
                              _mm512_cvtepi32_ps(d), acc);                                              \
    } while (0)

#define VEC_DOT_PAIRS(NAME, WBLOCK, ABLOCK, UNPACK_TWO, UNPACK_ONE, SCALE_WORD, OFFSET)                 \
    void NAME(int64_t n, float *s, const void *vw, const void *va, const float *as) {                   \
        const WBLOCK *w = vw;                                                                           \
        const ABLOCK *a = va;                                                                           \
        const __m512i lanes02 = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);       \
        __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();   /* two chains: short rows */   \
        __m128 side = _mm_setzero_ps();                                                                 \
        const int64_t nb = n / 32;                                                                      \
        int64_t i = 0;                                                                                  \
        for (; i + 3 < nb; i += 4) {                                                                    \
            PAIR(i, acc0, UNPACK_TWO, SCALE_WORD);                                                      \
            PAIR(i + 2, acc1, UNPACK_TWO, SCALE_WORD);                                                  \
        }                                                                                               \
        if (i + 1 < nb) {                                                                               \
            PAIR(i, acc0, UNPACK_TWO, SCALE_WORD);                                                      \
            i += 2;                                                                                     \
        }                                                                                               \
        float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));                                    \
        if (i < nb) {                                                                                   \
            const float last[4] = {as[2 * i], as[2 * i + 1], 0.0f, 0.0f};                               \
            const __m128 p = pair_scales(SCALE_WORD(w[i]), 0, last);                                    \
            side = _mm_add_ps(side, p);                                                                 \
            const __m256i d = _mm256_dpbusd_epi32(_mm256_setzero_si256(), UNPACK_ONE(w[i]),             \
                                                  _mm256_loadu_si256((const __m256i *)a[i].qs));        \
            const __m256 f = _mm256_mul_ps(_mm256_broadcastss_ps(p), _mm256_cvtepi32_ps(d));            \
            __m128 r = _mm_add_ps(_mm256_extractf128_ps(f, 1), _mm256_castps256_ps128(f));              \
            r = _mm_add_ps(r, _mm_movehl_ps(r, r));                                                     \
            sum += _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)));                                    \
        }                                                                                               \
        *s = sum + side_total(side, OFFSET);                                                            \
    }

/* The same for nr <= 4 rows: per row exactly the arithmetic above (two chains, the odd block
 * last), the activation pair loaded once for all rows. */
#define VEC_DOT_ROWS(NAME, WBLOCK, ABLOCK, UNPACK_TWO, UNPACK_ONE, SCALE_WORD, OFFSET)                  \
    static inline __attribute__((always_inline)) void NAME##_nr(int64_t n, float *s, const uint8_t *vw,  \
                                                                size_t rb, const ABLOCK *a,             \
                                                                const float *as, const int NR) {        \
        const __m512i lanes02 = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);       \
        const WBLOCK *w[4];                                                                             \
        __m512 acc0[4], acc1[4];                                                                        \
        __m128 side[4];                                                                                 \
        for (int r = 0; r < NR; r++) {                                                                  \
            w[r] = (const WBLOCK *)(vw + r * rb);                                                       \
            acc0[r] = acc1[r] = _mm512_setzero_ps();                                                    \
            side[r] = _mm_setzero_ps();                                                                 \
        }                                                                                               \
        const int64_t nb = n / 32;                                                                      \
        int64_t i = 0;                                                                                  \
        for (; i + 3 < nb; i += 4) {                                                                    \
            const __m512i a0 = load_two(a[i].qs, a[i + 1].qs), a1 = load_two(a[i + 2].qs, a[i + 3].qs); \
            for (int r = 0; r < NR; r++) {                                                              \
                ROW_PAIR(w[r], i, a0, acc0[r], side[r], UNPACK_TWO, SCALE_WORD);                        \
                ROW_PAIR(w[r], i + 2, a1, acc1[r], side[r], UNPACK_TWO, SCALE_WORD);                    \
            }                                                                                           \
        }                                                                                               \
        if (i + 1 < nb) {                                                                               \
            const __m512i a0 = load_two(a[i].qs, a[i + 1].qs);                                          \
            for (int r = 0; r < NR; r++) ROW_PAIR(w[r], i, a0, acc0[r], side[r], UNPACK_TWO, SCALE_WORD); \
            i += 2;                                                                                     \
        }                                                                                               \
        for (int r = 0; r < NR; r++) {                                                                  \
            float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r]));                          \
            if (i < nb) {                                                                               \
                const float last[4] = {as[2 * i], as[2 * i + 1], 0.0f, 0.0f};                           \
                const __m128 p = pair_scales(SCALE_WORD(w[r][i]), 0, last);                             \
                side[r] = _mm_add_ps(side[r], p);                                                       \
                const __m256i d = _mm256_dpbusd_epi32(_mm256_setzero_si256(), UNPACK_ONE(w[r][i]),      \
                                                      _mm256_loadu_si256((const __m256i *)a[i].qs));    \
                const __m256 f = _mm256_mul_ps(_mm256_broadcastss_ps(p), _mm256_cvtepi32_ps(d));        \
                __m128 q = _mm_add_ps(_mm256_extractf128_ps(f, 1), _mm256_castps256_ps128(f));          \
                q = _mm_add_ps(q, _mm_movehl_ps(q, q));                                                 \
                sum += _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));                                \
            }                                                                                           \
            s[r] = sum + side_total(side[r], OFFSET);                                                   \
        }                                                                                               \
    }                                                                                                   \
    void NAME(int64_t n, float *s, const void *vw, size_t rb, int nr, const void *va, const float *as) { \
        switch (nr) {                                                                                   \
        case 1: NAME##_nr(n, s, vw, rb, va, as, 1); break;                                              \
        case 2: NAME##_nr(n, s, vw, rb, va, as, 2); break;                                              \
        case 3: NAME##_nr(n, s, vw, rb, va, as, 3); break;                                              \
        default: NAME##_nr(n, s, vw, rb, va, as, 4); break;                                             \
        }                                                                                               \
    }

#define ROW_PAIR(wr, i, av, acc, side, UNPACK_TWO, SCALE_WORD)                                          \
    do {                                                                                                \
        const __m128 p = pair_scales(SCALE_WORD((wr)[i]), SCALE_WORD((wr)[(i) + 1]), as + 2 * (i));     \
        side = _mm_add_ps(side, p);                                                                     \
        const __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), UNPACK_TWO((wr)[i], (wr)[(i) + 1]), av); \
        acc = _mm512_fmadd_ps(_mm512_permutexvar_ps(lanes02, _mm512_castps128_ps512(p)),                \
                              _mm512_cvtepi32_ps(d), acc);                                              \
    } while (0)

#define NIBBLES_TWO(b0, b1) nibbles_two((b0).qs, (b1).qs)
#define FIVE_BITS_TWO(b0, b1) _mm512_or_si512(nibbles_two((b0).qs, (b1).qs), fifth_bits_two((b0).qh, (b1).qh))
#define FLIP_TWO(b0, b1) _mm512_xor_si512(load_two((b0).qs, (b1).qs), _mm512_set1_epi8((char)0x80))
#define NIBBLES_ONE(b) nibbles_one((b).qs)
#define FIVE_BITS_ONE(b) _mm256_or_si256(nibbles_one((b).qs), fifth_bits_one((b).qh))
#define FLIP_ONE(b) _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(b).qs), _mm256_set1_epi8((char)0x80))
#define D_TWICE(b) dup16((b).d)
#define D_AND_M(b) word32(&(b).d)

VEC_DOT_PAIRS(vec_dot_q4_0_q8_0_avx512, block_q4_0, block_q8_0, NIBBLES_TWO, NIBBLES_ONE, D_TWICE, 8)
VEC_DOT_PAIRS(vec_dot_q5_0_q8_0_avx512, block_q5_0, block_q8_0, FIVE_BITS_TWO, FIVE_BITS_ONE, D_TWICE, 16)
VEC_DOT_PAIRS(vec_dot_q8_0_q8_0_avx512, block_q8_0, block_q8_0, FLIP_TWO, FLIP_ONE, D_TWICE, 128)
VEC_DOT_PAIRS(vec_dot_q4_1_q8_1_avx512, block_q4_1, block_q8_1, NIBBLES_TWO, NIBBLES_ONE, D_AND_M, 0)
VEC_DOT_PAIRS(vec_dot_q5_1_q8_1_avx512, block_q5_1, block_q8_1, FIVE_BITS_TWO, FIVE_BITS_ONE, D_AND_M, 0)
VEC_DOT_ROWS(vec_dot_rows_q4_0_q8_0_avx512, block_q4_0, block_q8_0, NIBBLES_TWO, NIBBLES_ONE, D_TWICE, 8)
VEC_DOT_ROWS(vec_dot_rows_q5_0_q8_0_avx512, block_q5_0, block_q8_0, FIVE_BITS_TWO, FIVE_BITS_ONE, D_TWICE, 16)
VEC_DOT_ROWS(vec_dot_rows_q8_0_q8_0_avx512, block_q8_0, block_q8_0, FLIP_TWO, FLIP_ONE, D_TWICE, 128)
VEC_DOT_ROWS(vec_dot_rows_q4_1_q8_1_avx512, block_q4_1, block_q8_1, NIBBLES_TWO, NIBBLES_ONE, D_AND_M, 0)
VEC_DOT_ROWS(vec_dot_rows_q5_1_q8_1_avx512, block_q5_1, block_q8_1, FIVE_BITS_TWO, FIVE_BITS_ONE, D_AND_M, 0)

void vec_dot_q6_K_q8_K_avx512(int64_t n, float *s, const void *vw, const void *va, const float *as) {
    (void)as;
    const block_q6_K *w = vw;
    const block_q8_K *a = va;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m512i scales = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)w[i].scales));
        /* the offset 32: sum over sub-blocks of scale * 32 * sum(q), from the bsums */
        const __m256i sb = _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w[i].scales)),
                                             _mm256_loadu_si256((const __m256i *)a[i].bsums));
        __m512i sumi = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            __m512i u01, u23;
            q6_K_unpack_half(w[i].ql + 64 * h, w[i].qh + 32 * h, &u01, &u23);
            const __m512i d01 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u01,
                                                    _mm512_loadu_si512((const void *)(a[i].qs + 128 * h)));
            const __m512i d23 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u23,
                                                    _mm512_loadu_si512((const void *)(a[i].qs + 128 * h + 64)));
            /* 4 lanes per sub-block of 16: sub-blocks 8h + 0..3, then 8h + 4..7 */
            const __m512i idx = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
            const __m512i s01 = _mm512_permutexvar_epi32(_mm512_add_epi32(idx, _mm512_set1_epi32(8 * h)), scales);
            const __m512i s23 = _mm512_permutexvar_epi32(_mm512_add_epi32(idx, _mm512_set1_epi32(8 * h + 4)), scales);
            sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(d01, s01));
            sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(d23, s23));
        }
        sumi = _mm512_sub_epi32(sumi, _mm512_zextsi256_si512(_mm256_slli_epi32(sb, 5)));
        acc = _mm512_fmadd_ps(_mm512_set1_ps(fp16(w[i].d) * a[i].d), _mm512_cvtepi32_ps(sumi), acc);
    }
    *s = _mm512_reduce_add_ps(acc);
}

void vec_dot_f16_f16_avx512(int64_t n, float *s, const void *vw, const void *va, const float *as) {
    (void)as;
    const ggml_half *x = vw, *y = va;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i))),
                               _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(y + i))), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i + 16))),
                               _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(y + i + 16))), acc1);
    }
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    for (; i < n; i++) sum += fp16(x[i]) * fp16(y[i]);
    *s = sum;
}

/* vec_dot_f16_f16_avx512's steps for 4 activation rows at a time, their F16 values already
 * widened: the same products (f16 -> f32 is exact) summed in the same order, so the same bits. */
void vec_dot_f16_mact_avx512(int64_t n, float *s, int64_t s_stride, const void *vw, const float *a, int64_t m) {
    const ggml_half *x = vw;
    for (int64_t r0 = 0; r0 < m; r0 += 4) {
        const float *y[4];
        for (int r = 0; r < 4; r++) y[r] = a + (r0 + r < m ? r0 + r : r0) * n;   /* a short group repeats row r0 */
        __m512 acc0[4], acc1[4];
        for (int r = 0; r < 4; r++) acc0[r] = acc1[r] = _mm512_setzero_ps();
        int64_t i = 0;
        for (; i + 32 <= n; i += 32) {
            const __m512 w0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i)));
            const __m512 w1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i + 16)));
            for (int r = 0; r < 4; r++) {
                acc0[r] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(y[r] + i), acc0[r]);
                acc1[r] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(y[r] + i + 16), acc1[r]);
            }
        }
        for (int r = 0; r < 4 && r0 + r < m; r++) {
            float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r]));
            for (int64_t t = i; t < n; t++) sum += fp16(x[t]) * y[r][t];
            s[(r0 + r) * s_stride] = sum;
        }
    }
}

void vec_dot_f32_f32_avx512(int64_t n, float *s, const void *vw, const void *va, const float *as) {
    (void)as;
    const float *x = vw, *y = va;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(y + i + 16), acc1);
    }
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    for (; i < n; i++) sum += x[i] * y[i];
    *s = sum;
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* x86_64 */
