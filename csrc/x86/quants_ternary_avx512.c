/* quants_ternary_avx512.c -- the AVX-512 VNNI dot product of TQ2_0 against Q8_K.
 *
 * As quants_ternary_avx2.c with dpbusd: the 2-bit codes t (0..3) are unsigned already; a block's
 * integer dot is sum(t * q) - sum(q), sum(q) from the bsums. 64 elements per dpbusd: the same bit
 * pair of all 64 qs bytes (elements 32l + m and 128 + 32l + m). TQ1_0 takes the generic dot.
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

static inline __attribute__((always_inline)) void dot_tq2_0_nr(int64_t n, float *s, const uint8_t *vw, size_t rb,
                                                               const block_q8_K *a, const int NR) {
    const __m512i three = _mm512_set1_epi8(3);
    const block_tq2_0 *w[LI_DOT_ROWS];
    __m512 acc[LI_DOT_ROWS];
    float side[LI_DOT_ROWS];
    for (int r = 0; r < NR; r++) {
        w[r] = (const block_tq2_0 *)(vw + r * rb);
        acc[r] = _mm512_setzero_ps();
        side[r] = 0.0f;
    }
    for (int64_t i = 0; i < n / QK_K; i++) {
        int32_t qsum = 0;
        for (int j = 0; j < QK_K / 16; j++) qsum += a[i].bsums[j];
        __m512i q[4];
        for (int l = 0; l < 4; l++)
            q[l] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * l))),
                                      _mm256_loadu_si256((const __m256i *)(a[i].qs + 128 + 32 * l)), 1);
        for (int r = 0; r < NR; r++) {
            const block_tq2_0 *b = &w[r][i];
            const __m512i bits = _mm512_loadu_si512((const void *)b->qs);
            __m512i sumi = _mm512_setzero_si512();
            for (int l = 0; l < 4; l++)
                sumi = _mm512_dpbusd_epi32(sumi, _mm512_and_si512(_mm512_srli_epi16(bits, 2 * l), three), q[l]);
            const float dd = _cvtsh_ss(b->d) * a[i].d;
            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(dd), _mm512_cvtepi32_ps(sumi), acc[r]);
            side[r] += dd * (float)qsum;
        }
    }
    for (int r = 0; r < NR; r++) s[r] = _mm512_reduce_add_ps(acc[r]) - side[r];
}

void vec_dot_tq2_0_q8_K_avx512(int64_t n, float *s, const void *vw, const void *va, const float *as) {
    (void)as;
    dot_tq2_0_nr(n, s, vw, 0, va, 1);
}

void vec_dot_rows_tq2_0_q8_K_avx512(int64_t n, float *s, const void *vw, size_t rb, int nr, const void *va,
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
