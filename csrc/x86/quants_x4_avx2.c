/* quants_x4_avx2.c -- AVX2 dots over repacked groups of four rows (core/repack.c), as
 * quants_x4_avx512.c does with dpbusd: here maddubs + madd in 256-bit registers, two rows per
 * register for Q4_0 (16 nibble bytes each), one row per register for Q8_0 (signed times signed
 * through the sign trick, as quants_avx2.c's Q8_0 dot). No Q6_K: its row dot over the mapped rows,
 * with the GEMV's prefetch, reads faster than the row dot repeated over an x4 group did
 * (BENCHMARKS.md, "Kernel choices"), so AVX2 leaves Q6_K unrepacked.
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
#include "x86/x4_x86.h"

static inline float hsum8(__m256 v) {
    float l[8], t = 0.0f;
    _mm256_storeu_ps(l, v);
    for (int e = 0; e < 8; e++) t += l[e];
    return t;
}

void vec_dot_x4_q4_0_q8_0_avx2(int64_t n, float *s, const void *vg, const void *va, const float *as) {
    const block_q4_0x4 *g = vg;
    const block_q8_0 *a = va;
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    const __m256i rows01 = _mm256_set_epi32(1, 1, 1, 1, 0, 0, 0, 0), rows23 = _mm256_set_epi32(3, 3, 3, 3, 2, 2, 2, 2);
    __m256 acc01 = _mm256_setzero_ps(), acc23 = _mm256_setzero_ps();   /* lanes 4r'..: rows 0,1 | 2,3 */
    __m128 side = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK4_0; i++) {
        const __m256 sc = _mm256_castps128_ps256(x4_scales(g[i].d, as + 2 * i, &side));
        const __m256i alo = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)a[i].qs));
        const __m256i ahi = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(a[i].qs + 16)));
        for (int h = 0; h < 2; h++) {   /* rows 2h, 2h + 1 */
            const __m256i q = _mm256_loadu_si256((const __m256i *)(g[i].qs + 32 * h));
            /* |u * q| <= 15 * 128 per product, two per int16 and two such sums: no saturation */
            const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_and_si256(q, m4), alo),
                                               _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), ahi));
            const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
            if (h == 0) acc01 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(sc, rows01), f, acc01);
            else acc23 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(sc, rows23), f, acc23);
        }
    }
    float l01[8], l23[8], sd[4];
    _mm256_storeu_ps(l01, acc01);
    _mm256_storeu_ps(l23, acc23);
    _mm_storeu_ps(sd, side);
    for (int r = 0; r < LI_X4_ROWS; r++) {
        const float *l = (r < 2 ? l01 : l23) + 4 * (r & 1);
        s[r] = (l[0] + l[1] + l[2] + l[3]) - 8.0f * sd[r];
    }
}

void vec_dot_x4_q8_0_q8_0_avx2(int64_t n, float *s, const void *vg, const void *va, const float *as) {
    const block_q8_0x4 *g = vg;
    const block_q8_0 *a = va;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[LI_X4_ROWS];
    for (int r = 0; r < LI_X4_ROWS; r++) acc[r] = _mm256_setzero_ps();
    __m128 side = _mm_setzero_ps();   /* unused by Q8_0 (no offset); x4_scales keeps one code path */
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const __m256 sc = _mm256_castps128_ps256(x4_scales(g[i].d, as + 2 * i, &side));
        const __m256i av = _mm256_loadu_si256((const __m256i *)a[i].qs);
        for (int r = 0; r < LI_X4_ROWS; r++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(g[i].qs + 32 * r));
            /* |q| * sign(a, q): unsigned times signed, each product <= 128 * 127, pairs fit int16 */
            const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(av, q));
            acc[r] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(sc, _mm256_set1_epi32(r)),
                                     _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones)), acc[r]);
        }
    }
    for (int r = 0; r < LI_X4_ROWS; r++) s[r] = hsum8(acc[r]);
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* x86_64 */
