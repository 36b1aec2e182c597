/* quants_ternary_avx2.c -- the AVX2 dot product of TQ2_0 (ternary, 2 bits per element) against Q8_K.
 *
 * A block's integer dot is sum(t * q) - sum(q) with t the 2-bit code (0..3) and sum(q) from the
 * activation's bsums: maddubs takes t unsigned (pair sums <= 2 * 3 * 127, exact), so no sign trick
 * is needed. One fp16 scale per 256 elements. TQ1_0's base-3 bytes take the generic dot.
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

static inline float hsum_ps(__m256 x) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

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
