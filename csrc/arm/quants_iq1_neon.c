/* quants_iq1_neon.c -- NEON (dotprod) dot products of the 1.5- and 1.75-bit grid i-quants IQ1_S and
 * IQ1_M against Q8_K.
 *
 * Each 8 elements are a point of li_iq1s_grid (-1, 0, 1) plus delta = +-1/8; as in
 * generic/grids_generic.c's decoders the element is the integer v = 8 * grid +- 1 (|v| <= 9) and the
 * scale d * (2 ls + 1) / 8. vdotq_s32 dots v with the activations, the integer 2 ls + 1 (<= 15)
 * multiplies in int32 (|lane| <= 16 * 4 * 9 * 128 * 15 < 2^21, exact) and d / 8 is applied once per
 * super-block, so the results equal the generic ones up to float summation order.
 */
#if defined(__aarch64__)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("dotprod"))), apply_to = function)
#else
#pragma GCC target("arch=armv8.2-a+dotprod")
#endif

#include "arm/dot_neon.h"
#include "arm/neon.h"
#include "core/iq_grids.h"
#include "core/li.h"
#include "generic/generic.h"

/* 16 elements: 8 * grid + delta for the points of indices i0, i1, with deltas (+1 / -1) d0, d1 */
static inline int8x16_t iq1_points(int i0, int i1, int8_t d0, int8_t d1) {
    return vaddq_s8(vshlq_n_s8(li_neon_rows2(li_iq1s_grid[i0], li_iq1s_grid[i1]), 3),
                    vcombine_s8(vdup_n_s8(d0), vdup_n_s8(d1)));
}

/* IQ1_S: per 32 elements a u16 qh: 3 high index bits per 8 elements (bits 3l..), ls in bits 12..14,
 * bit 15 the sign of delta */
static inline int32x4_t iq1_s_dot(const block_iq1_s *b, const int8_t *q) {
    int32x4_t sumi = vdupq_n_s32(0);
    for (int ib = 0; ib < QK_K / 32; ib++, q += 32) {
        const int qh = b->qh[ib];
        const int8_t delta = qh & 0x8000 ? -1 : 1;
        const uint8_t *qs = b->qs + 4 * ib;
        const int8x16_t v0 = iq1_points(qs[0] | (qh & 7) << 8, qs[1] | ((qh >> 3) & 7) << 8, delta, delta);
        const int8x16_t v1 = iq1_points(qs[2] | ((qh >> 6) & 7) << 8, qs[3] | ((qh >> 9) & 7) << 8, delta, delta);
        const int32x4_t p = vdotq_s32(vdotq_s32(vdupq_n_s32(0), v0, vld1q_s8(q)), v1, vld1q_s8(q + 16));
        sumi = vmlaq_n_s32(sumi, p, 2 * ((qh >> 12) & 7) + 1);
    }
    return sumi;
}

/* IQ1_M: per 8 elements g a nibble of qh[g / 2] (3 high index bits, bit 3 the sign of delta); a
 * 3-bit ls per 16 elements in the scale u16 (g16 / 4), bits 3 (g16 % 4).. */
static inline int32x4_t iq1_m_dot(const block_iq1_m *b, const int8_t *q) {
    uint16_t sc[4];
    memcpy(sc, b->scales, 8);
    int32x4_t sumi = vdupq_n_s32(0);
    for (int g = 0; g < QK_K / 8; g += 2, q += 16) {
        const int nib0 = b->qh[g / 2] & 0xF, nib1 = b->qh[g / 2] >> 4;
        const int8x16_t v = iq1_points(b->qs[g] | (nib0 & 7) << 8, b->qs[g + 1] | (nib1 & 7) << 8,
                                       nib0 & 8 ? -1 : 1, nib1 & 8 ? -1 : 1);
        const int g16 = g / 2;
        sumi = vmlaq_n_s32(sumi, vdotq_s32(vdupq_n_s32(0), v, vld1q_s8(q)), 2 * ((sc[g16 / 4] >> 3 * (g16 % 4)) & 7) + 1);
    }
    return sumi;
}

static inline float scale_iq1_s(const block_iq1_s *b) { return li_neon_fp16(b->d) * 0.125f; }
static inline float scale_iq1_m(const block_iq1_m *b) { return li_iq1_m_d(b) * 0.125f; }

LI_NEON_Q8_K_DOT_NR(iq1_s, iq1_s_dot, scale_iq1_s)
LI_NEON_Q8_K_DOT_NR(iq1_m, iq1_m_dot, scale_iq1_m)

LI_NEON_ENTRY_POINTS(iq1_s, q8_K, dot_iq1_s_nr)
LI_NEON_ENTRY_POINTS(iq1_m, q8_K, dot_iq1_m_nr)

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* __aarch64__ */
