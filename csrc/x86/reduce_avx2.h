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

#endif
