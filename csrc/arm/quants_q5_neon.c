/* quants_q5_neon.c -- NEON (dotprod) dot products of the 5-bit legacy types: Q5_0 against Q8_0 and
 * Q5_1 against Q8_1.
 *
 * Q4_K_M files carry many Q5_0 tensors: llama.cpp quantizes a tensor whose rows are not a whole
 * number of 256-element super-blocks (gemma-3-270m's 640 columns) to Q5_0 instead of Q4_K. The 5th
 * bit of element j is bit j of the block's u32 qh: each qh byte is spread over 8 lanes and tested
 * against the lane's bit. The block's dot is exact in int32 and scaled in f32 (Q5_1's minimum term
 * with the exact sum of the activation quants, as the generic code), so the results equal the
 * generic ones up to float summation order.
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

/* the 32 unsigned 5-bit quants of a block, elements 0..15 and 16..31 */
static inline void q5_quants(const uint8_t qh_bytes[4], const uint8_t *qs, int8x16_t *lo, int8x16_t *hi) {
    static const uint8_t spread_lo[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
    static const uint8_t spread_hi[16] = {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
    static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    uint32_t qh;
    memcpy(&qh, qh_bytes, 4);
    const uint8x16_t h = vreinterpretq_u8_u32(vdupq_n_u32(qh)), bits = vld1q_u8(bit), b16 = vdupq_n_u8(16);
    const uint8x16_t h_lo = vandq_u8(vtstq_u8(vqtbl1q_u8(h, vld1q_u8(spread_lo)), bits), b16);
    const uint8x16_t h_hi = vandq_u8(vtstq_u8(vqtbl1q_u8(h, vld1q_u8(spread_hi)), bits), b16);
    const uint8x16_t q = vld1q_u8(qs);
    *lo = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q, vdupq_n_u8(0x0F)), h_lo));
    *hi = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(q, 4), h_hi));
}

/* Q5_0 x Q8_0: s = sum over blocks of (dw * da) * dot(u - 16, q) */
static inline __attribute__((always_inline)) void dot_q5_0_nr(int64_t n, float *s, const uint8_t *vw, size_t rb,
                                                              const void *va, const int NR) {
    const block_q8_0 *a = va;
    const block_q5_0 *w[LI_DOT_ROWS];
    float32x4_t acc[LI_DOT_ROWS];
    for (int r = 0; r < NR; r++) {
        w[r] = (const block_q5_0 *)(vw + r * rb);
        acc[r] = vdupq_n_f32(0);
    }
    const int8x16_t sixteen = vdupq_n_s8(16);
    for (int64_t i = 0; i < n / QK5_0; i++) {
        const int8x16_t q0 = vld1q_s8(a[i].qs), q1 = vld1q_s8(a[i].qs + 16);
        const float da = li_neon_fp16(a[i].d);
        for (int r = 0; r < NR; r++) {
            int8x16_t lo, hi;
            q5_quants(w[r][i].qh, w[r][i].qs, &lo, &hi);
            const int32x4_t p = vdotq_s32(vdotq_s32(vdupq_n_s32(0), vsubq_s8(lo, sixteen), q0), vsubq_s8(hi, sixteen), q1);
            acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(p), li_neon_fp16(w[r][i].d) * da);
        }
    }
    for (int r = 0; r < NR; r++) s[r] = vaddvq_f32(acc[r]);
}

/* Q5_1 x Q8_1: s = sum over blocks of da * (dw * dot(u, q) + mw * sum(q)) */
static inline __attribute__((always_inline)) void dot_q5_1_nr(int64_t n, float *s, const uint8_t *vw, size_t rb,
                                                              const void *va, const int NR) {
    const block_q8_1 *a = va;
    const block_q5_1 *w[LI_DOT_ROWS];
    float32x4_t acc[LI_DOT_ROWS], accm[LI_DOT_ROWS];
    for (int r = 0; r < NR; r++) {
        w[r] = (const block_q5_1 *)(vw + r * rb);
        acc[r] = accm[r] = vdupq_n_f32(0);
    }
    const int8x16_t ones = vdupq_n_s8(1);
    for (int64_t i = 0; i < n / QK5_1; i++) {
        const int8x16_t q0 = vld1q_s8(a[i].qs), q1 = vld1q_s8(a[i].qs + 16);
        const float32x4_t sq = vcvtq_f32_s32(vdotq_s32(vdotq_s32(vdupq_n_s32(0), ones, q0), ones, q1));
        const float da = li_neon_fp16(a[i].d);
        for (int r = 0; r < NR; r++) {
            int8x16_t lo, hi;
            q5_quants(w[r][i].qh, w[r][i].qs, &lo, &hi);
            const int32x4_t p = vdotq_s32(vdotq_s32(vdupq_n_s32(0), lo, q0), hi, q1);
            acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(p), li_neon_fp16(w[r][i].d) * da);
            accm[r] = vfmaq_n_f32(accm[r], sq, li_neon_fp16(w[r][i].m) * da);
        }
    }
    for (int r = 0; r < NR; r++) s[r] = vaddvq_f32(vaddq_f32(acc[r], accm[r]));
}

LI_NEON_ENTRY_POINTS(q5_0, q8_0, dot_q5_0_nr)
LI_NEON_ENTRY_POINTS(q5_1, q8_1, dot_q5_1_nr)

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* __aarch64__ */
