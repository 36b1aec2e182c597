/* quants_k_neon.c -- NEON (dotprod) dot products of the k-quants users run most: Q4_K, Q5_K and
 * Q6_K against Q8_K (Q4_K_M files are mostly Q4_K and Q6_K, Q5_K_M ones Q5_K and Q6_K).
 *
 * Per super-block the sub-block dots are taken by vdotq_s32 on signed bytes and multiplied by their
 * integer sub-block scales in int32, so the integer part is exact; it is scaled once by d * da in f32.
 * The minimum term of Q4_K and Q5_K, -dmin * sum over sub-blocks of m * sum(q), takes sum(q) from
 * the activation's bsums. The results equal the generic ones up to float summation order.
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

/* Q4_K: 8 sub-blocks of 32 with 6-bit scale and min; qs[32k..32k+31] hold sub-block 2k in the low
 * nibbles and 2k + 1 in the high ones. |sumi lane| <= 8 * 8 * 15 * 127 * 63 < 2^23. */
static inline __attribute__((always_inline)) void dot_q4_K_nr(int64_t n, float *s, const uint8_t *vw, size_t rb,
                                                              const void *va, const int NR) {
    const block_q8_K *a = va;
    const block_q4_K *w[LI_DOT_ROWS];
    float32x4_t acc[LI_DOT_ROWS];
    float mins[LI_DOT_ROWS];
    for (int r = 0; r < NR; r++) {
        w[r] = (const block_q4_K *)(vw + r * rb);
        acc[r] = vdupq_n_f32(0);
        mins[r] = 0;
    }
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    for (int64_t i = 0; i < n / QK_K; i++) {
        /* the activation's sum per 32: bsums pairwise (|sum| <= 32 * 128 fits int16) */
        const int16x8_t qsum32 = vpaddq_s16(vld1q_s16(a[i].bsums), vld1q_s16(a[i].bsums + 8));
        for (int r = 0; r < NR; r++) {
            const block_q4_K *b = &w[r][i];
            uint8_t sm[16];   /* scales 0..7, mins 8..15 */
            li_scales_mins_k4(b->scales, sm);
            const int16x8_t mins16 = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(sm + 8)));
            const int32_t msum = vaddvq_s32(vmull_s16(vget_low_s16(mins16), vget_low_s16(qsum32))) +
                                 vaddvq_s32(vmull_high_s16(mins16, qsum32));
            int32x4_t sumi = vdupq_n_s32(0);
            for (int k = 0; k < 4; k++) {
                const int8_t *q = a[i].qs + 64 * k;
                const uint8x16_t b0 = vld1q_u8(b->qs + 32 * k), b1 = vld1q_u8(b->qs + 32 * k + 16);
                int32x4_t lo = vdotq_s32(vdupq_n_s32(0), vreinterpretq_s8_u8(vandq_u8(b0, m4)), vld1q_s8(q));
                lo = vdotq_s32(lo, vreinterpretq_s8_u8(vandq_u8(b1, m4)), vld1q_s8(q + 16));
                int32x4_t hi = vdotq_s32(vdupq_n_s32(0), vreinterpretq_s8_u8(vshrq_n_u8(b0, 4)), vld1q_s8(q + 32));
                hi = vdotq_s32(hi, vreinterpretq_s8_u8(vshrq_n_u8(b1, 4)), vld1q_s8(q + 48));
                sumi = vmlaq_n_s32(sumi, lo, sm[2 * k]);
                sumi = vmlaq_n_s32(sumi, hi, sm[2 * k + 1]);
            }
            acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(sumi), li_neon_fp16(b->d) * a[i].d);
            mins[r] += li_neon_fp16(b->dmin) * a[i].d * (float)msum;
        }
    }
    for (int r = 0; r < NR; r++) s[r] = vaddvq_f32(acc[r]) - mins[r];
}

/* Q5_K: Q4_K with a 5th bit, bit s of qh[l] for element 32 s + l. |sumi lane| <= 8 * 8 * 31 * 128 * 63 < 2^24. */
static inline __attribute__((always_inline)) void dot_q5_K_nr(int64_t n, float *s, const uint8_t *vw, size_t rb,
                                                              const void *va, const int NR) {
    const block_q8_K *a = va;
    const block_q5_K *w[LI_DOT_ROWS];
    float32x4_t acc[LI_DOT_ROWS];
    float mins[LI_DOT_ROWS];
    for (int r = 0; r < NR; r++) {
        w[r] = (const block_q5_K *)(vw + r * rb);
        acc[r] = vdupq_n_f32(0);
        mins[r] = 0;
    }
    const uint8x16_t m4 = vdupq_n_u8(0x0F), one = vdupq_n_u8(1);
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int16x8_t qsum32 = vpaddq_s16(vld1q_s16(a[i].bsums), vld1q_s16(a[i].bsums + 8));
        for (int r = 0; r < NR; r++) {
            const block_q5_K *b = &w[r][i];
            uint8_t sm[16];   /* scales 0..7, mins 8..15 */
            li_scales_mins_k4(b->scales, sm);
            const int16x8_t mins16 = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(sm + 8)));
            const int32_t msum = vaddvq_s32(vmull_s16(vget_low_s16(mins16), vget_low_s16(qsum32))) +
                                 vaddvq_s32(vmull_high_s16(mins16, qsum32));
            const uint8x16_t h0 = vld1q_u8(b->qh), h1 = vld1q_u8(b->qh + 16);
            int32x4_t sumi = vdupq_n_s32(0);
            for (int k = 0; k < 4; k++) {
                const int8_t *q = a[i].qs + 64 * k;
                const uint8x16_t b0 = vld1q_u8(b->qs + 32 * k), b1 = vld1q_u8(b->qs + 32 * k + 16);
                const int8x16_t sh_lo = vdupq_n_s8((int8_t)(-2 * k)), sh_hi = vdupq_n_s8((int8_t)(-2 * k - 1));
                /* sub-block 2k: low nibbles | bit 2k << 4; 2k + 1: high nibbles | bit 2k + 1 << 4 */
                const uint8x16_t l0 = vorrq_u8(vandq_u8(b0, m4), vshlq_n_u8(vandq_u8(vshlq_u8(h0, sh_lo), one), 4));
                const uint8x16_t l1 = vorrq_u8(vandq_u8(b1, m4), vshlq_n_u8(vandq_u8(vshlq_u8(h1, sh_lo), one), 4));
                const uint8x16_t u0 = vorrq_u8(vshrq_n_u8(b0, 4), vshlq_n_u8(vandq_u8(vshlq_u8(h0, sh_hi), one), 4));
                const uint8x16_t u1 = vorrq_u8(vshrq_n_u8(b1, 4), vshlq_n_u8(vandq_u8(vshlq_u8(h1, sh_hi), one), 4));
                int32x4_t lo = vdotq_s32(vdupq_n_s32(0), vreinterpretq_s8_u8(l0), vld1q_s8(q));
                lo = vdotq_s32(lo, vreinterpretq_s8_u8(l1), vld1q_s8(q + 16));
                int32x4_t hi = vdotq_s32(vdupq_n_s32(0), vreinterpretq_s8_u8(u0), vld1q_s8(q + 32));
                hi = vdotq_s32(hi, vreinterpretq_s8_u8(u1), vld1q_s8(q + 48));
                sumi = vmlaq_n_s32(sumi, lo, sm[2 * k]);
                sumi = vmlaq_n_s32(sumi, hi, sm[2 * k + 1]);
            }
            acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(sumi), li_neon_fp16(b->d) * a[i].d);
            mins[r] += li_neon_fp16(b->dmin) * a[i].d * (float)msum;
        }
    }
    for (int r = 0; r < NR; r++) s[r] = vaddvq_f32(acc[r]) - mins[r];
}

/* Q6_K: 16 sub-blocks of 16 with int8 scales; q = (4 low bits | 2 high bits << 4) - 32. In half h
 * (128 elements), quarter k (32 elements l): the low bits are the low (k < 2) or high nibbles of
 * ql[64h + 32(k % 2) + l], the high bits bits 2k.. of qh[32h + l]. |sumi lane| <= 16 * 4 * 32 * 128 * 128 = 2^25. */
static inline __attribute__((always_inline)) void dot_q6_K_nr(int64_t n, float *s, const uint8_t *vw, size_t rb,
                                                              const void *va, const int NR) {
    const block_q8_K *a = va;
    const block_q6_K *w[LI_DOT_ROWS];
    float32x4_t acc[LI_DOT_ROWS];
    for (int r = 0; r < NR; r++) {
        w[r] = (const block_q6_K *)(vw + r * rb);
        acc[r] = vdupq_n_f32(0);
    }
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m2 = vdupq_n_u8(0x03);
    const int8x16_t off = vdupq_n_s8(32);
    for (int64_t i = 0; i < n / QK_K; i++) {
        for (int r = 0; r < NR; r++) {
            const block_q6_K *b = &w[r][i];
            int32x4_t sumi = vdupq_n_s32(0);
            for (int h = 0; h < 2; h++) {
                const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
                const uint8x16_t l0 = vld1q_u8(ql), l1 = vld1q_u8(ql + 16), l2 = vld1q_u8(ql + 32), l3 = vld1q_u8(ql + 48);
                const uint8x16_t h0 = vld1q_u8(qh), h1 = vld1q_u8(qh + 16);
                /* the quarters' low bits: (element l, l + 16) of quarter k */
                const uint8x16_t low[4][2] = {{vandq_u8(l0, m4), vandq_u8(l1, m4)},
                                              {vandq_u8(l2, m4), vandq_u8(l3, m4)},
                                              {vshrq_n_u8(l0, 4), vshrq_n_u8(l1, 4)},
                                              {vshrq_n_u8(l2, 4), vshrq_n_u8(l3, 4)}};
                for (int k = 0; k < 4; k++) {
                    const int8x16_t shift = vdupq_n_s8((int8_t)(2 * k));
                    const uint8x16_t hb0 = vandq_u8(vshlq_u8(h0, vnegq_s8(shift)), m2);
                    const uint8x16_t hb1 = vandq_u8(vshlq_u8(h1, vnegq_s8(shift)), m2);
                    const int8x16_t q0 = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(low[k][0], vshlq_n_u8(hb0, 4))), off);
                    const int8x16_t q1 = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(low[k][1], vshlq_n_u8(hb1, 4))), off);
                    const int e = 128 * h + 32 * k;   /* first element; sub-blocks e / 16 and e / 16 + 1 */
                    const int32x4_t p0 = vdotq_s32(vdupq_n_s32(0), q0, vld1q_s8(a[i].qs + e));
                    const int32x4_t p1 = vdotq_s32(vdupq_n_s32(0), q1, vld1q_s8(a[i].qs + e + 16));
                    sumi = vmlaq_n_s32(sumi, p0, b->scales[e / 16]);
                    sumi = vmlaq_n_s32(sumi, p1, b->scales[e / 16 + 1]);
                }
            }
            acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(sumi), li_neon_fp16(b->d) * a[i].d);
        }
    }
    for (int r = 0; r < NR; r++) s[r] = vaddvq_f32(acc[r]);
}

LI_NEON_ENTRY_POINTS(q4_K, q8_K, dot_q4_K_nr)
LI_NEON_ENTRY_POINTS(q5_K, q8_K, dot_q5_K_nr)
LI_NEON_ENTRY_POINTS(q6_K, q8_K, dot_q6_K_nr)

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* __aarch64__ */
