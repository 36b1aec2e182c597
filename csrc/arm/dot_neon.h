/* arm/dot_neon.h -- pieces the NEON dot product files share: the fp16 scale, the horizontal sums and
 * the two entry points (one row, LI_DOT_ROWS rows) every type's kernel is wrapped in.
 *
 * Include after the file's `#pragma GCC target` (so these inline functions get dotprod too) and after
 * <arm_neon.h>.
 */
#ifndef LI_ARM_DOT_NEON_H
#define LI_ARM_DOT_NEON_H

#include <arm_neon.h>

#include "core/li.h"

static inline float li_neon_fp16(ggml_half h) {
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

/* sum of the 16 int16 bsums of a Q8_K block: the block's sum of quants (|sum| <= 256 * 128) */
static inline int32_t li_neon_q8_K_sum(const block_q8_K *a) {
    return vaddlvq_s16(vaddq_s16(vld1q_s16(a->bsums), vld1q_s16(a->bsums + 8)));
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
