/* arm/dot_neon.h -- pieces the NEON dot product files share: the fp16 scale, the activation sums,
 * the loop over rows and super-blocks of the Q8_K types, the sign helpers of the grid i-quants and
 * the two entry points (one row, LI_DOT_ROWS rows) every type's kernel is wrapped in.
 *
 * Include after the file's `#pragma GCC target` / `#pragma clang attribute` (so these inline
 * functions get dotprod too), in place of <arm_neon.h>, which it includes.
 */
#ifndef LI_ARM_DOT_NEON_H
#define LI_ARM_DOT_NEON_H

/* clang 14's arm_neon.h (the one checked) declares the dotprod intrinsics only when this macro is
 * set, which -march would do for the whole file; the including file's `#pragma clang attribute`
 * already gives every function from here on, arm_neon.h's included, the dotprod target. gcc declares
 * them always and takes the feature from its `#pragma GCC target`. */
#if defined(__clang__) && !defined(__ARM_FEATURE_DOTPROD)
#define __ARM_FEATURE_DOTPROD 1
#endif
#include <arm_neon.h>

#include "core/li.h"

static inline float li_neon_fp16(ggml_half h) {
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

/* sum of the 16 int16 bsums of a Q8_K block: the block's sum of quants (|sum| <= 256 * 128) */
static inline int32_t li_neon_q8_K_sum(const block_q8_K *a) {
    return vaddlvq_s16(vaddq_s16(vld1q_s16(a->bsums), vld1q_s16(a->bsums + 8)));
}

/* NR rows of a 256-element type against Q8_K whose super-block dot is an exact int32x4,
 * BLOCK_DOT(block, q) (its sub-block scales' integer parts applied), scaled by SCALE(block) * da
 * (the type's d times the scales' power-of-two part) in f32 lanes. */
#define LI_NEON_Q8_K_DOT_NR(W, BLOCK_DOT, SCALE)                                                      \
    static inline __attribute__((always_inline)) void dot_##W##_nr(int64_t n, float *s, const uint8_t *vw, \
                                                                   size_t rb, const void *va, const int NR) { \
        const block_q8_K *a = va;                                                                     \
        const block_##W *w[LI_DOT_ROWS];                                                              \
        float32x4_t acc[LI_DOT_ROWS];                                                                 \
        for (int r = 0; r < NR; r++) {                                                                \
            w[r] = (const block_##W *)(vw + r * rb);                                                  \
            acc[r] = vdupq_n_f32(0);                                                                  \
        }                                                                                             \
        for (int64_t i = 0; i < n / QK_K; i++)                                                        \
            for (int r = 0; r < NR; r++)                                                              \
                acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(BLOCK_DOT(&w[r][i], a[i].qs)),             \
                                     SCALE(&w[r][i]) * a[i].d);                                       \
        for (int r = 0; r < NR; r++) s[r] = vaddvq_f32(acc[r]);                                       \
    }

/* 16 bytes from two 8-byte table rows (grid points, sign rows) */
static inline int8x16_t li_neon_rows2(const void *r0, const void *r1) {
    return vcombine_s8(vld1_s8((const int8_t *)r0), vld1_s8((const int8_t *)r1));
}

/* v with the elements whose bit is set in 16 explicit sign bits (bit k of byte j: element 8j + k)
 * negated: (v ^ m) - m with m = -1 where the bit is set */
static inline int8x16_t li_neon_apply_sign_bits(int8x16_t v, uint16_t bits) {
    static const uint8_t spread[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
    static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t b = vqtbl1q_u8(vreinterpretq_u8_u16(vdupq_n_u16(bits)), vld1q_u8(spread));
    const int8x16_t m = vreinterpretq_s8_u8(vtstq_u8(b, vld1q_u8(bit)));
    return vsubq_s8(veorq_s8(v, m), m);
}

/* The li_vec_dot_fn and li_vec_dot_rows_fn entry points around an always-inline kernel
 * CALL(n, s, vw, row_bytes, va, NR) that dots NR weight rows (row_bytes apart) with one activation
 * row. NR is a constant in every call, so each row count gets its own unrolled copy, and a row's
 * arithmetic does not depend on NR: vec_dot_rows gives, bit for bit, what vec_dot gives per row. */
#define LI_NEON_ENTRY_POINTS(W, A, CALL)                                                              \
    void vec_dot_##W##_##A##_neon(int64_t n, float *s, const void *vw, const void *va, const float *as) { \
        (void)as; /* the activation's scales are read from its blocks */                              \
        CALL(n, s, (const uint8_t *)vw, 0, va, 1);                                                    \
    }                                                                                                 \
    void vec_dot_rows_##W##_##A##_neon(int64_t n, float *s, const void *vw, size_t rb, int nr,         \
                                       const void *va, const float *as) {                             \
        (void)as;                                                                                     \
        const uint8_t *w = vw;                                                                        \
        switch (nr) {                                                                                 \
        case 1: CALL(n, s, w, rb, va, 1); break;                                                      \
        case 2: CALL(n, s, w, rb, va, 2); break;                                                      \
        case 3: CALL(n, s, w, rb, va, 3); break;                                                      \
        default: CALL(n, s, w, rb, va, 4); break;                                                     \
        }                                                                                             \
    }

#endif /* LI_ARM_DOT_NEON_H */
