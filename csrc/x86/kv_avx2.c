/* kv_avx2.c -- P.V over one value row of a q8_0 / q4_0 KV cache in AVX2: a block of 32 values is
 * widened to four 8-float registers (x = q * d), then added, weighted, to each query head's outputs.
 * The same mul / mul / add as generic/kv_generic.c (no FMA), so the same bits. */
#if defined(__x86_64__) || defined(_M_X64)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c")
#endif

#include <immintrin.h>

#include "core/li.h"
#include "x86/avx2.h"

/* out[h*d + 0..31] += p[h*ldp] * x[0..3] for every head h */
static inline void add_block(const __m256 x[4], const float *p, int64_t ldp, int64_t na, float *out, int64_t d) {
    for (int64_t h = 0; h < na; h++) {
        const __m256 w = _mm256_set1_ps(p[h * ldp]);
        float *o = out + h * d;
        for (int i = 0; i < 4; i++)
            _mm256_storeu_ps(o + 8 * i, _mm256_add_ps(_mm256_loadu_ps(o + 8 * i), _mm256_mul_ps(w, x[i])));
    }
}

/* 8 int8 at q -> 8 floats times s */
static inline __m256 widen8(const void *q, __m256 s) {
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)q))), s);
}

void li_axpy_kv_q8_0_avx2(int64_t d, const void *v, const float *p, int64_t ldp, int64_t na, float *out) {
    const block_q8_0 *b = v;
    for (int64_t i = 0; i < d / QK8_0; i++) {
        const __m256 s = _mm256_set1_ps(li_fp16_to_fp32(b[i].d));
        const __m256 x[4] = {widen8(b[i].qs, s), widen8(b[i].qs + 8, s), widen8(b[i].qs + 16, s),
                             widen8(b[i].qs + 24, s)};
        add_block(x, p, ldp, na, out + i * QK8_0, d);
    }
}

void li_axpy_kv_q4_0_avx2(int64_t d, const void *v, const float *p, int64_t ldp, int64_t na, float *out) {
    const block_q4_0 *b = v;
    const __m128i low4 = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
    for (int64_t i = 0; i < d / QK4_0; i++) {
        const __m256 s = _mm256_set1_ps(li_fp16_to_fp32(b[i].d));
        const __m128i q = _mm_loadu_si128((const __m128i *)b[i].qs);
        /* elements 0..15: low nibbles; 16..31: high nibbles; each minus 8, as int8 */
        const __m128i lo = _mm_sub_epi8(_mm_and_si128(q, low4), eight);
        const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), low4), eight);
        const __m256 x[4] = {
            _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), s),
            _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), s),
            _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), s),
            _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), s),
        };
        add_block(x, p, ldp, na, out + i * QK4_0, d);
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* x86_64 */
