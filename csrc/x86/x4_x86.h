/* x86/x4_x86.h -- what the AVX2 and AVX-512 dots over repacked x4 groups share (quants_x4_avx2.c,
 * quants_x4_avx512.c). Static inline, so each includer compiles it for its own ISA: include it after
 * the file's `#pragma GCC target`.
 */
#ifndef LI_X86_X4_X86_H
#define LI_X86_X4_X86_H

#include <immintrin.h>

#include "core/li.h"

/* the four rows' fp16 scales widened */
static inline __m128 x4_dw(const ggml_half *d) { return _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)d)); }

/* the four rows' fp16 scales times the activation block's {d, d * sum(q)} (a_sums): returns dw * d,
 * and *side += dw * d * sum(q), the sums the offset types (Q4_0's 8, Q8_0's 128 as unsigned) take off */
static inline __m128 x4_scales(const ggml_half *d, const float *as, __m128 *side) {
    const __m128 dw = x4_dw(d);
    *side = _mm_fmadd_ps(dw, _mm_set1_ps(as[1]), *side);
    return _mm_mul_ps(dw, _mm_set1_ps(as[0]));
}

/* The 16-row kernels (vec_dot_x16_m) take the activation rows LI_X4_M at a time through an always-inline
 * f(nb, R, ...): R = min(left, LI_X4_M) is a constant in each call, so that f unrolls its loops over the
 * rows and keeps their accumulators in registers. */
_Static_assert(LI_X4_M == 4, "LI_X4_M_CALL spells out the row counts 1 to 4");
#define LI_X4_M_CALL(left, f, nb, ...)                                   \
    do {                                                                 \
        switch ((left) < LI_X4_M ? (int)(left) : LI_X4_M) {              \
        case 1: f(nb, 1, __VA_ARGS__); break;                            \
        case 2: f(nb, 2, __VA_ARGS__); break;                            \
        case 3: f(nb, 3, __VA_ARGS__); break;                            \
        default: f(nb, 4, __VA_ARGS__); break;                           \
        }                                                                \
    } while (0)

/* The same up to six rows, for the kernels that take six activation rows a pass (quants_x4_avx512.c) */
#define LI_M6_CALL(left, f, nb, ...)                                     \
    do {                                                                 \
        if ((left) >= 6) f(nb, 6, __VA_ARGS__);                          \
        else if ((left) == 5) f(nb, 5, __VA_ARGS__);                     \
        else LI_X4_M_CALL(left, f, nb, __VA_ARGS__);                     \
    } while (0)

/* vec_dot_x16_m NAME for a type whose ROWS(nb, R, s, s_stride, group, a, a_stride) takes one x4 group
 * (blocks of BLOCK, QK elements each) and up to LI_X4_M activation rows: the four groups one after
 * another, each against every activation row (a type without a_sums: Q4_K, Q6_K) */
#define LI_X16_M_BY_GROUP(NAME, ROWS, BLOCK, QK)                                                                \
    void NAME(int64_t n, int64_t m, float *s, int64_t s_stride, const void *vg, size_t g_stride, const void *va, \
              size_t a_stride, const float *as, int64_t as_stride) {                                            \
        (void)as, (void)as_stride;                                                                              \
        for (int q = 0; q < LI_X4_ROWS; q++) {                                                                  \
            const BLOCK *g = (const BLOCK *)((const uint8_t *)vg + (size_t)q * g_stride);                      \
            for (int64_t r = 0; r < m; r += LI_X4_M)                                                            \
                LI_X4_M_CALL(m - r, ROWS, n / (QK), s + r * s_stride + LI_X4_ROWS * q, s_stride, g,             \
                             (const uint8_t *)va + (size_t)r * a_stride, a_stride);                             \
        }                                                                                                       \
    }

#endif /* LI_X86_X4_X86_H */
