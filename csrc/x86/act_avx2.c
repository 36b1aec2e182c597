/* act_avx2.c -- exp for 8 floats at a time (AVX2 + FMA), and the SiLU gating built on it.
 *
 * The exponential is computed in double and rounded to float once: x = n*ln2 + r with
 * |r| <= ln2/2, e^r by its Taylor series to r^11 (relative error < 1e-14), 2^n put in the
 * exponent field. A double result that close to e^x rounds to the same float as expf()
 * (glibc's, itself correctly rounded but for rare ties), so the softmax and SiLU keep their
 * results while the 8-lane loop replaces a libm call per element. Overflow gives +inf,
 * underflow rounds through the float subnormals to 0, as expf does; -inf gives 0.
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

/* e^x for 4 doubles; x already clamped to [-160, 100] (2^n stays a normal double) */
static inline __m256d exp4(__m256d x) {
    const __m256d log2e = _mm256_set1_pd(1.4426950408889634), ln2_hi = _mm256_set1_pd(6.93147180369123816490e-01),
                  ln2_lo = _mm256_set1_pd(1.90821492927058770002e-10);
    const __m256d n = _mm256_round_pd(_mm256_mul_pd(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256d r = _mm256_fnmadd_pd(n, ln2_hi, x);
    r = _mm256_fnmadd_pd(n, ln2_lo, r);
    /* 1/k! for k = 11 .. 0, Horner */
    static const double c[12] = {2.505210838544172e-08, 2.755731922398589e-07, 2.755731922398589e-06,
                                 2.48015873015873e-05, 0.0001984126984126984, 0.001388888888888889,
                                 0.008333333333333333, 0.041666666666666664, 0.16666666666666666,
                                 0.5, 1.0, 1.0};
    __m256d p = _mm256_set1_pd(c[0]);
    for (int i = 1; i < 12; i++) p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(c[i]));
    const __m128i ni = _mm256_cvtpd_epi32(n);   /* exact: n is an integer in [-231, 145] */
    const __m256i bits = _mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(ni), _mm256_set1_epi64x(1023)), 52);
    return _mm256_mul_pd(p, _mm256_castsi256_pd(bits));
}

/* e^x for 8 floats, each result rounded once from double */
static inline __m256 exp8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-160.0f), hi = _mm256_set1_ps(100.0f);
    /* max/min return their second operand for a NaN x: keep x itself there */
    const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    const __m128 r0 = _mm256_cvtpd_ps(exp4(_mm256_cvtps_pd(_mm256_castps256_ps128(xc))));
    const __m128 r1 = _mm256_cvtpd_ps(exp4(_mm256_cvtps_pd(_mm256_extractf128_ps(xc, 1))));
    return _mm256_blendv_ps(_mm256_set_m128(r1, r0), x, nan);
}

void li_exp_avx2(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {   /* two at once: each exp is a chain of dependent FMAs */
        const __m256 e0 = exp8(_mm256_loadu_ps(x + i)), e1 = exp8(_mm256_loadu_ps(x + i + 8));
        _mm256_storeu_ps(y + i, e0);
        _mm256_storeu_ps(y + i + 8, e1);
    }
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        float in[8] = {0}, out[8];
        for (int64_t j = i; j < n; j++) in[j - i] = x[j];
        _mm256_storeu_ps(out, exp8(_mm256_loadu_ps(in)));
        for (int64_t j = i; j < n; j++) y[j] = out[j - i];
    }
}

/* y = g / (1 + e^-g) * u, in the reference's order of float operations */
void li_silu_mul_avx2(const float *g, const float *u, float *y, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    int64_t i = 0;
    /* two at once: each exp is a chain of dependent FMAs. Both exps come before either store: written
     * as two calls of the 8-wide body, the second's loads wait behind the first's store (y may be g or
     * u as far as the compiler knows), and the gain is gone (SwiGLU 512 x 8192, 3.44 -> 3.64 ms) */
    for (; i + 16 <= n; i += 16) {
        const __m256 g0 = _mm256_loadu_ps(g + i), g1 = _mm256_loadu_ps(g + i + 8);
        const __m256 e0 = exp8(_mm256_xor_ps(g0, sign)), e1 = exp8(_mm256_xor_ps(g1, sign));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_div_ps(g0, _mm256_add_ps(one, e0)), _mm256_loadu_ps(u + i)));
        _mm256_storeu_ps(y + i + 8, _mm256_mul_ps(_mm256_div_ps(g1, _mm256_add_ps(one, e1)), _mm256_loadu_ps(u + i + 8)));
    }
    for (; i + 8 <= n; i += 8) {
        const __m256 gv = _mm256_loadu_ps(g + i);
        const __m256 e = exp8(_mm256_xor_ps(gv, sign));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
    }
    if (i < n) {   /* the tail through the same exp, so no element depends on where it sits */
        float e[8];
        for (int64_t j = i; j < n; j++) e[j - i] = -g[j];
        li_exp_avx2(e, e, n - i);
        for (int64_t j = i; j < n; j++) y[j] = g[j] / (1.0f + e[j - i]) * u[j];
    }
}

/* y = gelu(g) * u from ggml's f16 table (see generic/act_generic.c): the index is g rounded to f16 by F16C,
 * the same round-to-nearest-even as the portable conversion, so the same entries */
void li_geglu_f16_avx2(const float *g, const float *u, float *y, int64_t n, const float *table) {
    const __m256 hi = _mm256_set1_ps(10.0f), lo = _mm256_set1_ps(-10.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(g + i);
        const __m256i idx = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
        __m256 act = _mm256_i32gather_ps(table, idx, 4);
        act = _mm256_blendv_ps(act, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LE_OQ));
        act = _mm256_blendv_ps(act, x, _mm256_cmp_ps(x, hi, _CMP_GE_OQ));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(act, _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) {
        const float x = g[i];
        const float act = x >= 10.0f ? x : x <= -10.0f ? 0.0f : table[_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT)];
        y[i] = act * u[i];
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* x86_64 */
