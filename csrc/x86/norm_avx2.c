/* norm_avx2.c -- the LayerNorm row (li_norm_row_fn) in AVX2: the generic one's 16 double lanes as
 * four 4-double registers (floats 0-3, 4-7, 8-11, 12-15 of each step of 16) and its tree, so the
 * results are the same bits (generic/norm_generic.c). Plain mul and add, never fma: the reference
 * rounds d * scale and then * w separately. */
#if defined(__x86_64__) || defined(_M_X64)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c")
#endif

#include <immintrin.h>
#include <math.h>

#include "core/li.h"
#include "x86/avx2.h"

/* 16 floats at x + 8 * 0 .. 1 widened and added into lanes 0-3, 4-7, 8-11, 12-15 */
static inline void add16(__m256d acc[4], __m256 lo, __m256 hi) {
    acc[0] = _mm256_add_pd(acc[0], _mm256_cvtps_pd(_mm256_castps256_ps128(lo)));
    acc[1] = _mm256_add_pd(acc[1], _mm256_cvtps_pd(_mm256_extractf128_ps(lo, 1)));
    acc[2] = _mm256_add_pd(acc[2], _mm256_cvtps_pd(_mm256_castps256_ps128(hi)));
    acc[3] = _mm256_add_pd(acc[3], _mm256_cvtps_pd(_mm256_extractf128_ps(hi, 1)));
}

/* the tree l+8, l+4, l+2, l+1 of the generic reduce16 */
static inline double reduce16(const __m256d acc[4]) {
    const __m256d s4 = _mm256_add_pd(_mm256_add_pd(acc[0], acc[2]), _mm256_add_pd(acc[1], acc[3]));
    const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
}

void li_norm_row_avx2(const float *x, const float *w, const float *b, float *y, int64_t n, double eps) {
    const int64_t n16 = n / 16 * 16;
    __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
    for (int64_t i = 0; i < n16; i += 16) add16(acc, _mm256_loadu_ps(x + i), _mm256_loadu_ps(x + i + 8));
    double sum = reduce16(acc);
    for (int64_t i = n16; i < n; i++) sum += (double)x[i];
    const float mean = (float)(sum / (double)n);

    const __m256 mv = _mm256_set1_ps(mean);
    for (int k = 0; k < 4; k++) acc[k] = _mm256_setzero_pd();
    for (int64_t i = 0; i < n16; i += 16) {   /* y = d = x - mean; the squares in float */
        const __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(x + i), mv);
        const __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), mv);
        _mm256_storeu_ps(y + i, d0);
        _mm256_storeu_ps(y + i + 8, d1);
        add16(acc, _mm256_mul_ps(d0, d0), _mm256_mul_ps(d1, d1));
    }
    double sum2 = reduce16(acc);
    for (int64_t i = n16; i < n; i++) {
        const float d = x[i] - mean;
        y[i] = d;
        sum2 += (double)(d * d);
    }
    const float scale = (float)(1.0 / sqrt(sum2 / (double)n + eps));

    const __m256 sv = _mm256_set1_ps(scale);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(y + i), sv), _mm256_loadu_ps(w + i));
        if (b) v = _mm256_add_ps(v, _mm256_loadu_ps(b + i));
        _mm256_storeu_ps(y + i, v);
    }
    for (; i < n; i++) {
        const float v = (y[i] * scale) * w[i];
        y[i] = b ? v + b[i] : v;
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* x86_64 */
