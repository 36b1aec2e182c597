/* reduce_avx2.h -- included by AVX2 files after their target pragma. */
#ifndef LI_REDUCE_AVX2_H
#define LI_REDUCE_AVX2_H

#include <immintrin.h>

/* The sum of 8 lanes: high half + low half, then pairs, then the last two (one order for every
 * AVX2 kernel, so their results agree to the bit where their callers do). */
static inline float hsum_ps(__m256 x) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* hsum_ps of four vectors at once, [sum a, sum b, sum c, sum d]: every add on the operands hsum_ps
 * adds (so the same bits), 14 shuffles and adds for the four where hsum_ps takes 6 each */
static inline __m128 hsum4_ps(__m256 a, __m256 b, __m256 c, __m256 d) {
    /* lanes l + l+4: [a0+a4 .. a3+a7 | b0+b4 .. b3+b7], and c, d */
    const __m256 ab = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
    const __m256 cd = _mm256_add_ps(_mm256_permute2f128_ps(c, d, 0x20), _mm256_permute2f128_ps(c, d, 0x31));
    /* then l + l+2: [a02, a13, c02, c13 | b02, b13, d02, d13] */
    const __m256 u = _mm256_add_ps(_mm256_shuffle_ps(ab, cd, 0x44), _mm256_shuffle_ps(ab, cd, 0xEE));
    /* then l + l+1: [a, c, a, c | b, d, b, d] */
    const __m256 v = _mm256_add_ps(_mm256_shuffle_ps(u, u, 0x88), _mm256_shuffle_ps(u, u, 0xDD));
    return _mm_unpacklo_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
}

#endif
