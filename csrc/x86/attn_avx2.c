/* attn_avx2.c -- li_dot_rows_fn in AVX2 + FMA: the 16 lanes as two 8-float halves (so the
 * result is bit for bit the AVX-512 one), tiles of 4 a-rows x 3 b-rows, a half at a time. */
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
#include "x86/reduce_avx2.h"

/* A tile of up to 4 a-rows x 3 b-rows in two passes over n: lanes 0..7 of every 16, then lanes 8..15,
 * twelve accumulators a pass (two 8-lane halves at once would fit only 2 x 3). Each lane's sum is the
 * AVX-512 lane's, FMA after FMA over the 16-element chunks; then s = lo + hi, and the tree l+4, l+2,
 * l+1 (hsum4_ps, four dots at once): the AVX-512 reduction's order. F16: b rows in f16, widened in
 * registers (exact). */
static inline __attribute__((always_inline)) __m256 load_b(const void *b, int64_t i, const int F16) {
    if (F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const ggml_half *)b + i)));
    return _mm256_loadu_ps((const float *)b + i);
}

static inline __attribute__((always_inline)) void tile(int64_t n, const float *a, int64_t lda, const void *b,
                                                       int64_t ldb, float *c, int64_t ldc, const int NA,
                                                       const int NB, const int F16) {
    __m256 s[4][3];
    for (int half = 0; half < 2; half++) {
        __m256 acc[4][3];
        for (int i = 0; i < NA; i++)
            for (int j = 0; j < NB; j++) acc[i][j] = _mm256_setzero_ps();
        for (int64_t l = 8 * half; l < n; l += 16) {
            __m256 bv[3];
            for (int j = 0; j < NB; j++) bv[j] = load_b(b, j * ldb + l, F16);
            for (int i = 0; i < NA; i++) {
                const __m256 av = _mm256_loadu_ps(a + i * lda + l);
                for (int j = 0; j < NB; j++) acc[i][j] = _mm256_fmadd_ps(av, bv[j], acc[i][j]);
            }
        }
        for (int i = 0; i < NA; i++)
            for (int j = 0; j < NB; j++) s[i][j] = half ? _mm256_add_ps(s[i][j], acc[i][j]) : acc[i][j];
    }
    /* the NA x NB sums in row order, four at a time */
    float out[12] __attribute__((aligned(16)));
    const __m256 zero = _mm256_setzero_ps();
    for (int q = 0; q < NA * NB; q += 4) {
        __m256 v[4];
        for (int r = 0; r < 4; r++) v[r] = q + r < NA * NB ? s[(q + r) / NB][(q + r) % NB] : zero;
        _mm_store_ps(out + q, hsum4_ps(v[0], v[1], v[2], v[3]));
    }
    for (int i = 0; i < NA; i++)
        for (int j = 0; j < NB; j++) c[i * ldc + j] = out[i * NB + j];
}

#define TILES_NB(NA, F16)                                                                           \
    for (j = 0; j + 3 <= nb; j += 3) tile(n, a, lda, b + j * ldb, ldb, c + j, ldc, NA, 3, F16);      \
    if (nb - j == 2) tile(n, a, lda, b + j * ldb, ldb, c + j, ldc, NA, 2, F16);                     \
    if (nb - j == 1) tile(n, a, lda, b + j * ldb, ldb, c + j, ldc, NA, 1, F16);

#define DOT_ROWS(F16)                                                                               \
    for (; na > 0; na -= 4, a += 4 * lda, c += 4 * ldc) {                                           \
        int64_t j;                                                                                  \
        switch (na) {                                                                               \
        case 1: TILES_NB(1, F16) break;                                                             \
        case 2: TILES_NB(2, F16) break;                                                             \
        case 3: TILES_NB(3, F16) break;                                                             \
        default: TILES_NB(4, F16) break;                                                            \
        }                                                                                           \
    }

void li_dot_rows_avx2(int64_t n, const float *a, int na, int64_t lda, const float *b, int64_t nb,
                      int64_t ldb, float *c, int64_t ldc) {
    DOT_ROWS(0)
}

/* b in f16 */
void li_dot_rows_f16_avx2(int64_t n, const float *a, int na, int64_t lda, const ggml_half *b, int64_t nb,
                          int64_t ldb, float *c, int64_t ldc) {
    DOT_ROWS(1)
}

/* 16 output columns (two halves) of up to 2 queries at a time */
static inline __attribute__((always_inline)) void axpy_tile(const float *p, int64_t ldp, const ggml_half *v,
                                                            int64_t nv, int64_t ldv, float *out, int64_t ldo,
                                                            const int NA) {
    __m256 lo[2], hi[2];
    for (int i = 0; i < NA; i++) lo[i] = hi[i] = _mm256_setzero_ps();
    for (int64_t j = 0; j < nv; j++) {
        const __m256 vl = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + j * ldv)));
        const __m256 vh = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + j * ldv + 8)));
        for (int i = 0; i < NA; i++) {
            const __m256 pv = _mm256_set1_ps(p[i * ldp + j]);
            lo[i] = _mm256_fmadd_ps(pv, vl, lo[i]);
            hi[i] = _mm256_fmadd_ps(pv, vh, hi[i]);
        }
    }
    for (int i = 0; i < NA; i++) {
        _mm256_storeu_ps(out + i * ldo, lo[i]);
        _mm256_storeu_ps(out + i * ldo + 8, hi[i]);
    }
}

void li_axpy_rows_f16_avx2(int64_t n, const float *p, int na, int64_t ldp, const ggml_half *v, int64_t nv,
                           int64_t ldv, float *out, int64_t ldo) {
    for (; na > 0; na -= 2, p += 2 * ldp, out += 2 * ldo)
        for (int64_t e = 0; e < n; e += 16) {
            if (na == 1) axpy_tile(p, ldp, v + e, nv, ldv, out + e, ldo, 1);
            else axpy_tile(p, ldp, v + e, nv, ldv, out + e, ldo, 2);
        }
}

/* --- the row steps (also used by the AVX-512 table: O(n) work, 8 lanes are plenty) --- */

void li_round_f16_avx2(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
    for (; i < n; i++) y[i] = _cvtsh_ss(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT));
}

void li_widen_f16_avx2(const ggml_half *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    for (; i < n; i++) y[i] = _cvtsh_ss(x[i]);
}

/* the F16 type's row conversions (li_dequantize_fn / li_quantize_fn), F16C instead of bit
 * arithmetic: the f32 GEMM widens every weight tile and rounds every activation row this way */
void dequantize_row_f16_avx2(const void *x, float *y, int64_t n) { li_widen_f16_avx2(x, y, n); }

void quantize_row_f16_avx2(const float *x, void *dst, int64_t n) {
    ggml_half *y = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

/* p = exp(cap(p * scale) - max) in place; returns their sum in double, with the sink's term */
static double softmax_exp(float *p, int64_t n, float scale, float softcap, float sink) {
    float max = sink;   /* the sink's logit joins the max (-INFINITY: no sink) */
    int64_t j = 0;
    if (softcap > 0.0f) {
        for (; j < n; j++) {
            const float x = tanhf(p[j] * scale / softcap) * softcap;
            p[j] = x;
            max = x > max ? x : max;
        }
    } else {
        const __m256 sv = _mm256_set1_ps(scale);
        __m256 mv = _mm256_set1_ps(-INFINITY);
        for (; j + 8 <= n; j += 8) {
            const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(p + j), sv);
            _mm256_storeu_ps(p + j, x);
            mv = _mm256_max_ps(mv, x);
        }
        float lanes[8];
        _mm256_storeu_ps(lanes, mv);
        for (int l = 0; l < 8; l++) max = lanes[l] > max ? lanes[l] : max;
        for (; j < n; j++) {
            p[j] *= scale;
            max = p[j] > max ? p[j] : max;
        }
    }
    /* an exp that rounds as expf does (act_avx2.c): a 2-ulp float polynomial moved SmolLM2's
     * median logit distance to llama.cpp from 0.115 to 0.123. The sum in double, 4 lanes at a
     * time (the order does not matter at this precision). */
    for (j = 0; j < n; j++) p[j] -= max;
    li_exp_avx2(p, p, n);
    __m256d acc = _mm256_setzero_pd();
    for (j = 0; j + 4 <= n; j += 4) acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm_loadu_ps(p + j)));
    double lanes[4];
    _mm256_storeu_pd(lanes, acc);
    double sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    for (; j < n; j++) sum += p[j];
    if (sink > -INFINITY) sum += expf(sink - max);   /* ... and the denominator, then attends to nothing */
    return sum;
}

void li_softmax_f16_avx2(float *p, int64_t n, float scale, float softcap, float sink) {
    const float inv = 1.0f / (float)softmax_exp(p, n, scale, softcap, sink);
    const __m256 iv = _mm256_set1_ps(inv);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(p + j, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(p + j), iv),
                                                                 _MM_FROUND_TO_NEAREST_INT)));
    for (; j < n; j++) p[j] = _cvtsh_ss(_cvtss_sh(p[j] * inv, _MM_FROUND_TO_NEAREST_INT));
}

/* li_softmax_f32_fn: divided by the float sum, as the generic one (x * 1.0f is exact) */
void li_softmax_f32_avx2(float *p, int64_t n) {
    const float sum = (float)softmax_exp(p, n, 1.0f, 0.0f, -INFINITY);
    const __m256 sv = _mm256_set1_ps(sum);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(p + j, _mm256_div_ps(_mm256_loadu_ps(p + j), sv));
    for (; j < n; j++) p[j] /= sum;
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* x86_64 */
