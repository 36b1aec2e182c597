/* quants_k_low_neon.c -- NEON (dotprod) dot products of the 2- and 3-bit k-quants Q2_K and Q3_K
 * against Q8_K (the bulk of Q2_K and Q3_K_* files).
 *
 * Both have 16 sub-blocks of 16 elements. In half h (128 elements), element 128h + 32j + l holds its
 * 2 low bits in bits 2j.. of qs[32h + l]; Q3_K adds a high bit, bit 4h + j of hmask[l] (set: no -4).
 * vdotq_s32 dots each 16 with the activations, the integer sub-block scales multiply in int32 (exact)
 * and d * da scales once per super-block in f32; Q2_K's minimum term takes the activation's bsums.
 * The results equal the generic ones up to float summation order.
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
#include "generic/generic.h"

/* Q2_K: scales[s] = min << 4 | scale (4 bits each) of sub-block s; y = d * scale * q - dmin * min.
 * |sumi lane| <= 16 * 4 * 3 * 128 * 15 < 2^19. */
static inline __attribute__((always_inline)) void dot_q2_K_nr(int64_t n, float *s, const uint8_t *vw, size_t rb,
                                                              const void *va, const int NR) {
    const block_q8_K *a = va;
    const block_q2_K *w[LI_DOT_ROWS];
    float32x4_t acc[LI_DOT_ROWS];
    float mins[LI_DOT_ROWS];
    for (int r = 0; r < NR; r++) {
        w[r] = (const block_q2_K *)(vw + r * rb);
        acc[r] = vdupq_n_f32(0);
        mins[r] = 0;
    }
    const uint8x16_t m2 = vdupq_n_u8(3);
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int16x8_t bs0 = vld1q_s16(a[i].bsums), bs1 = vld1q_s16(a[i].bsums + 8);
        for (int r = 0; r < NR; r++) {
            const block_q2_K *b = &w[r][i];
            const uint8x16_t sc = vld1q_u8(b->scales);
            const int16x8_t m0 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(vshrq_n_u8(sc, 4))));
            const int16x8_t m1 = vreinterpretq_s16_u16(vmovl_high_u8(vshrq_n_u8(sc, 4)));
            const int32_t msum = vaddvq_s32(vmlal_high_s16(vmull_s16(vget_low_s16(m0), vget_low_s16(bs0)), m0, bs0)) +
                                 vaddvq_s32(vmlal_high_s16(vmull_s16(vget_low_s16(m1), vget_low_s16(bs1)), m1, bs1));
            int32x4_t sumi = vdupq_n_s32(0);
            for (int h = 0; h < 2; h++) {
                const uint8x16_t x0 = vld1q_u8(b->qs + 32 * h), x1 = vld1q_u8(b->qs + 32 * h + 16);
                for (int j = 0; j < 4; j++) {
                    const int8x16_t sh = vdupq_n_s8((int8_t)(-2 * j));
                    const int e = 128 * h + 32 * j;   /* sub-blocks e / 16 and e / 16 + 1 */
                    const int8x16_t t0 = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(x0, sh), m2));
                    const int8x16_t t1 = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(x1, sh), m2));
                    sumi = vmlaq_n_s32(sumi, vdotq_s32(vdupq_n_s32(0), t0, vld1q_s8(a[i].qs + e)), b->scales[e / 16] & 0xF);
                    sumi = vmlaq_n_s32(sumi, vdotq_s32(vdupq_n_s32(0), t1, vld1q_s8(a[i].qs + e + 16)),
                                       b->scales[e / 16 + 1] & 0xF);
                }
            }
            acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(sumi), li_neon_fp16(b->d) * a[i].d);
            mins[r] += li_neon_fp16(b->dmin) * a[i].d * (float)msum;
        }
    }
    for (int r = 0; r < NR; r++) s[r] = vaddvq_f32(acc[r]) - mins[r];
}

/* Q3_K: q = low 2 bits + 4 * high bit - 4 (-4..3), 6-bit scales - 32 (li_q3_K_scales).
 * |sumi lane| <= 16 * 4 * 4 * 128 * 32 < 2^22. */
static inline __attribute__((always_inline)) void dot_q3_K_nr(int64_t n, float *s, const uint8_t *vw, size_t rb,
                                                              const void *va, const int NR) {
    const block_q8_K *a = va;
    const block_q3_K *w[LI_DOT_ROWS];
    float32x4_t acc[LI_DOT_ROWS];
    for (int r = 0; r < NR; r++) {
        w[r] = (const block_q3_K *)(vw + r * rb);
        acc[r] = vdupq_n_f32(0);
    }
    const uint8x16_t m2 = vdupq_n_u8(3), one = vdupq_n_u8(1);
    const int8x16_t four = vdupq_n_s8(4);
    for (int64_t i = 0; i < n / QK_K; i++) {
        for (int r = 0; r < NR; r++) {
            const block_q3_K *b = &w[r][i];
            int8_t scales[16];
            li_q3_K_scales(b->scales, scales);
            const uint8x16_t hm0 = vld1q_u8(b->hmask), hm1 = vld1q_u8(b->hmask + 16);
            int32x4_t sumi = vdupq_n_s32(0);
            for (int h = 0; h < 2; h++) {
                const uint8x16_t x0 = vld1q_u8(b->qs + 32 * h), x1 = vld1q_u8(b->qs + 32 * h + 16);
                for (int j = 0; j < 4; j++) {
                    const int8x16_t sh = vdupq_n_s8((int8_t)(-2 * j)), shh = vdupq_n_s8((int8_t)(-(4 * h + j)));
                    const int e = 128 * h + 32 * j;
                    const uint8x16_t u0 = vorrq_u8(vandq_u8(vshlq_u8(x0, sh), m2), vshlq_n_u8(vandq_u8(vshlq_u8(hm0, shh), one), 2));
                    const uint8x16_t u1 = vorrq_u8(vandq_u8(vshlq_u8(x1, sh), m2), vshlq_n_u8(vandq_u8(vshlq_u8(hm1, shh), one), 2));
                    const int8x16_t q0 = vsubq_s8(vreinterpretq_s8_u8(u0), four), q1 = vsubq_s8(vreinterpretq_s8_u8(u1), four);
                    sumi = vmlaq_n_s32(sumi, vdotq_s32(vdupq_n_s32(0), q0, vld1q_s8(a[i].qs + e)), scales[e / 16]);
                    sumi = vmlaq_n_s32(sumi, vdotq_s32(vdupq_n_s32(0), q1, vld1q_s8(a[i].qs + e + 16)), scales[e / 16 + 1]);
                }
            }
            acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(sumi), li_neon_fp16(b->d) * a[i].d);
        }
    }
    for (int r = 0; r < NR; r++) s[r] = vaddvq_f32(acc[r]);
}

LI_NEON_ENTRY_POINTS(q2_K, q8_K, dot_q2_K_nr)
LI_NEON_ENTRY_POINTS(q3_K, q8_K, dot_q3_K_nr)

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* __aarch64__ */
