/* quants_ternary_neon.c -- NEON (dotprod) dot products of the ternary types TQ1_0 and TQ2_0 against
 * Q8_K.
 *
 * A block's integer dot is sum(t * q) - sum(q), t the trit (TQ2_0: its 2-bit code, 0..3, as the
 * generic code reads a hostile 3) taken as a signed byte by vdotq_s32, sum(q) from the activation's
 * bsums; exact in int32. One fp16 scale per 256 elements. TQ1_0's k-th base-3 digit of a byte b is
 * the top digit of x = b * 3^k (mod 256), (x * 3) >> 8: a wrapping byte multiply, then the high byte
 * of a widening one. The results equal the generic ones up to float summation order.
 */
#if defined(__aarch64__)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("dotprod"))), apply_to = function)
#else
#pragma GCC target("arch=armv8.2-a+dotprod")
#endif

#include "arm/dot_neon.h"
#include "arm/neon.h"
#include "core/li.h"

/* TQ2_0: element 128c + 32l + m is bits 2l.. of qs[32c + m] */
static inline int32x4_t tq2_0_dot(const block_tq2_0 *b, const int8_t *q) {
    const uint8x16_t three = vdupq_n_u8(3);
    int32x4_t sumi = vdupq_n_s32(0);
    for (int c = 0; c < 2; c++) {
        const uint8x16_t x0 = vld1q_u8(b->qs + 32 * c), x1 = vld1q_u8(b->qs + 32 * c + 16);
        for (int l = 0; l < 4; l++) {
            const int8x16_t sh = vdupq_n_s8((int8_t)(-2 * l));   /* right shift by 2l */
            const int8x16_t t0 = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(x0, sh), three));
            const int8x16_t t1 = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(x1, sh), three));
            sumi = vdotq_s32(sumi, t0, vld1q_s8(q + 128 * c + 32 * l));
            sumi = vdotq_s32(sumi, t1, vld1q_s8(q + 128 * c + 32 * l + 16));
        }
    }
    return sumi;
}

/* the top base-3 digit of each byte x: (x * 3) >> 8 */
static inline int8x16_t top_trit(uint8x16_t x) {
    const uint8x8_t three = vdup_n_u8(3);
    const uint8x8_t lo = vshrn_n_u16(vmull_u8(vget_low_u8(x), three), 8);
    const uint8x8_t hi = vshrn_n_u16(vmull_high_u8(x, vdupq_n_u8(3)), 8);
    return vreinterpretq_s8_u8(vcombine_u8(lo, hi));
}

/* TQ1_0: qs[0..31] -> elements 32k + m, qs[32..47] -> 160 + 16k + m (k = 0..4), qh[0..3]
 * (four trits each) -> 240 + 4k + m */
static inline int32x4_t tq1_0_dot(const block_tq1_0 *b, const int8_t *q) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    /* the 16 tail elements 240 + 4k + m: byte m of qh times 3^k */
    static const uint8_t tail_pow3[16] = {1, 1, 1, 1, 3, 3, 3, 3, 9, 9, 9, 9, 27, 27, 27, 27};
    static const uint8_t tail_byte[16] = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3};
    const uint8x16_t x0 = vld1q_u8(b->qs), x1 = vld1q_u8(b->qs + 16), x2 = vld1q_u8(b->qs + 32);
    int32x4_t sumi = vdupq_n_s32(0);
    for (int k = 0; k < 5; k++) {
        const uint8x16_t p = vdupq_n_u8(pow3[k]);
        sumi = vdotq_s32(sumi, top_trit(vmulq_u8(x0, p)), vld1q_s8(q + 32 * k));
        sumi = vdotq_s32(sumi, top_trit(vmulq_u8(x1, p)), vld1q_s8(q + 32 * k + 16));
        sumi = vdotq_s32(sumi, top_trit(vmulq_u8(x2, p)), vld1q_s8(q + 160 + 16 * k));
    }
    uint32_t qh;
    memcpy(&qh, b->qh, 4);
    const uint8x16_t th = vqtbl1q_u8(vreinterpretq_u8_u32(vdupq_n_u32(qh)), vld1q_u8(tail_byte));
    return vdotq_s32(sumi, top_trit(vmulq_u8(th, vld1q_u8(tail_pow3))), vld1q_s8(q + 240));
}

#define TERNARY(W, DOT)                                                                               \
    static inline __attribute__((always_inline)) void dot_##W##_nr(int64_t n, float *s, const uint8_t *vw, \
                                                                   size_t rb, const void *va, const int NR) { \
        const block_q8_K *a = va;                                                                     \
        const block_##W *w[LI_DOT_ROWS];                                                              \
        float32x4_t acc[LI_DOT_ROWS];                                                                 \
        float side[LI_DOT_ROWS];                                                                      \
        for (int r = 0; r < NR; r++) {                                                                \
            w[r] = (const block_##W *)(vw + r * rb);                                                  \
            acc[r] = vdupq_n_f32(0);                                                                  \
            side[r] = 0;                                                                              \
        }                                                                                             \
        for (int64_t i = 0; i < n / QK_K; i++) {                                                      \
            const float qsum = (float)li_neon_q8_K_sum(&a[i]);                                        \
            for (int r = 0; r < NR; r++) {                                                            \
                const float dd = li_neon_fp16(w[r][i].d) * a[i].d;                                    \
                acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(DOT(&w[r][i], a[i].qs)), dd);              \
                side[r] += dd * qsum;   /* the -1 of every trit */                                    \
            }                                                                                         \
        }                                                                                             \
        for (int r = 0; r < NR; r++) s[r] = vaddvq_f32(acc[r]) - side[r];                             \
    }

TERNARY(tq1_0, tq1_0_dot)
TERNARY(tq2_0, tq2_0_dot)

LI_NEON_ENTRY_POINTS(tq1_0, q8_K, dot_tq1_0_nr)
LI_NEON_ENTRY_POINTS(tq2_0, q8_K, dot_tq2_0_nr)

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* __aarch64__ */
