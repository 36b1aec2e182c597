/* quants_ternary_avx2.c -- the AVX2 dot products of the ternary types TQ1_0 and TQ2_0 against Q8_K.
 *
 * A block's integer dot is sum(t * q) - sum(q) with t the trit (TQ2_0: its 2-bit code, 0..3) and sum(q) from the
 * activation's bsums: maddubs takes t unsigned (pair sums <= 2 * 3 * 127, exact), so no sign trick
 * is needed. One fp16 scale per 256 elements.
 * TQ1_0: the k-th base-3 digit of a byte b is the top digit of b * 3^k (mod 256), and the top digit
 * of a byte x is ((x * 3) >> 8) = (x >= 86) + (x >= 171); b * 3^k is k rounds of x + x + x in
 * wrapping byte adds, so each 32 trits cost two adds and two compares.
 * Per row the same arithmetic for vec_dot and vec_dot_rows; results equal the generic ones up to
 * float summation order.
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
#include "x86/reduce_avx2.h"

static inline int32_t sum_bsums(const block_q8_K *a) {
    int32_t s = 0;
    for (int j = 0; j < QK_K / 16; j++) s += a->bsums[j];
    return s;
}

static inline __attribute__((always_inline)) void dot_tq2_0_nr(int64_t n, float *s, const uint8_t *vw, size_t rb,
                                                               const block_q8_K *a, const int NR) {
    const __m256i three = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
    const block_tq2_0 *w[LI_DOT_ROWS];
    __m256 acc[LI_DOT_ROWS];
    float side[LI_DOT_ROWS];
    for (int r = 0; r < NR; r++) {
        w[r] = (const block_tq2_0 *)(vw + r * rb);
        acc[r] = _mm256_setzero_ps();
        side[r] = 0.0f;
    }
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int32_t qsum = sum_bsums(&a[i]);
        for (int r = 0; r < NR; r++) {
            const block_tq2_0 *b = &w[r][i];
            __m256i sumi = _mm256_setzero_si256();
            for (int c = 0; c < 2; c++) {
                const __m256i bits = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * c));
                for (int l = 0; l < 4; l++) {   /* elements 128c + 32l + m: bits 2l of byte m */
                    const __m256i t = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * l), three);
                    const __m256i q = _mm256_loadu_si256((const __m256i *)(a[i].qs + 128 * c + 32 * l));
                    sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(t, q), ones));
                }
            }
            const float dd = _cvtsh_ss(b->d) * a[i].d;
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(sumi), acc[r]);
            side[r] += dd * (float)qsum;
        }
    }
    for (int r = 0; r < NR; r++) s[r] = hsum_ps(acc[r]) - side[r];
}

/* the top base-3 digit of each byte: (x >= 86) + (x >= 171), unsigned compares through the sign flip */
static inline __m256i top_trit(__m256i x) {
    const __m256i flip = _mm256_xor_si256(x, _mm256_set1_epi8((char)0x80));
    const __m256i ge86 = _mm256_cmpgt_epi8(flip, _mm256_set1_epi8((char)(85 ^ 0x80)));
    const __m256i ge171 = _mm256_cmpgt_epi8(flip, _mm256_set1_epi8((char)(170 ^ 0x80)));
    return _mm256_sub_epi8(_mm256_setzero_si256(), _mm256_add_epi8(ge86, ge171));
}

static inline __m256i times3(__m256i x) { return _mm256_add_epi8(_mm256_add_epi8(x, x), x); }

static inline __m256i dot_u8(__m256i t, const int8_t *q) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(t, _mm256_loadu_si256((const __m256i *)q)), _mm256_set1_epi16(1));
}

static inline __attribute__((always_inline)) void dot_tq1_0_nr(int64_t n, float *s, const uint8_t *vw, size_t rb,
                                                               const block_q8_K *a, const int NR) {
    const block_tq1_0 *w[LI_DOT_ROWS];
    __m256 acc[LI_DOT_ROWS];
    float side[LI_DOT_ROWS];
    for (int r = 0; r < NR; r++) {
        w[r] = (const block_tq1_0 *)(vw + r * rb);
        acc[r] = _mm256_setzero_ps();
        side[r] = 0.0f;
    }
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int32_t qsum = sum_bsums(&a[i]);
        for (int r = 0; r < NR; r++) {
            const block_tq1_0 *b = &w[r][i];
            __m256i sumi = _mm256_setzero_si256();
            /* qs[0..31]: digit k -> elements 32k + m */
            __m256i x = _mm256_loadu_si256((const __m256i *)b->qs);
            for (int k = 0; k < 5; k++, x = times3(x)) sumi = _mm256_add_epi32(sumi, dot_u8(top_trit(x), a[i].qs + 32 * k));
            /* qs[32..47]: digit k -> elements 160 + 16k + m; two digits per register */
            const __m256i y0 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(b->qs + 32)));
            const __m256i y1 = times3(y0), y2 = times3(y1), y3 = times3(y2), y4 = times3(y3);
            sumi = _mm256_add_epi32(sumi, dot_u8(top_trit(_mm256_blend_epi32(y0, y1, 0xF0)), a[i].qs + 160));
            sumi = _mm256_add_epi32(sumi, dot_u8(top_trit(_mm256_blend_epi32(y2, y3, 0xF0)), a[i].qs + 192));
            /* the last 16 + 16 elements: digit 4 of qs[32..47] (224..239), then qh: digit k of
             * qh[m] -> 240 + 4k + m, i.e. the u32 qh times 3^k in dword k of the upper half */
            uint32_t h;
            memcpy(&h, b->qh, 4);
            const __m128i h0 = _mm_set1_epi32((int)h);
            const __m128i h1 = _mm_add_epi8(_mm_add_epi8(h0, h0), h0), h2 = _mm_add_epi8(_mm_add_epi8(h1, h1), h1);
            const __m128i h3 = _mm_add_epi8(_mm_add_epi8(h2, h2), h2);
            const __m128i hk = _mm_blend_epi32(_mm_blend_epi32(h0, h1, 0x2), _mm_blend_epi32(h2, h3, 0x8), 0xC);
            const __m256i last = _mm256_inserti128_si256(y4, hk, 1);
            sumi = _mm256_add_epi32(sumi, dot_u8(top_trit(last), a[i].qs + 224));
            const float dd = _cvtsh_ss(b->d) * a[i].d;
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(sumi), acc[r]);
            side[r] += dd * (float)qsum;
        }
    }
    for (int r = 0; r < NR; r++) s[r] = hsum_ps(acc[r]) - side[r];
}

void vec_dot_tq1_0_q8_K_avx2(int64_t n, float *s, const void *vw, const void *va, const float *as) {
    (void)as;
    dot_tq1_0_nr(n, s, vw, 0, va, 1);
}

void vec_dot_rows_tq1_0_q8_K_avx2(int64_t n, float *s, const void *vw, size_t rb, int nr, const void *va,
                                  const float *as) {
    (void)as;
    switch (nr) {
    case 1: dot_tq1_0_nr(n, s, vw, rb, va, 1); break;
    case 2: dot_tq1_0_nr(n, s, vw, rb, va, 2); break;
    case 3: dot_tq1_0_nr(n, s, vw, rb, va, 3); break;
    default: dot_tq1_0_nr(n, s, vw, rb, va, 4); break;
    }
}

void vec_dot_tq2_0_q8_K_avx2(int64_t n, float *s, const void *vw, const void *va, const float *as) {
    (void)as;
    dot_tq2_0_nr(n, s, vw, 0, va, 1);
}

void vec_dot_rows_tq2_0_q8_K_avx2(int64_t n, float *s, const void *vw, size_t rb, int nr, const void *va,
                                  const float *as) {
    (void)as;
    switch (nr) {   /* NR a constant in each call: the row loops unroll */
    case 1: dot_tq2_0_nr(n, s, vw, rb, va, 1); break;
    case 2: dot_tq2_0_nr(n, s, vw, rb, va, 2); break;
    case 3: dot_tq2_0_nr(n, s, vw, rb, va, 3); break;
    default: dot_tq2_0_nr(n, s, vw, rb, va, 4); break;
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* x86_64 */
