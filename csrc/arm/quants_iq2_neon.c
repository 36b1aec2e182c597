/* quants_iq2_neon.c -- NEON (dotprod) dot products of the 2-bit grid i-quants IQ2_XXS, IQ2_XS and
 * IQ2_S against Q8_K.
 *
 * Each 8 elements are a point of an 8-byte grid (core/iq_grids.h, values 8, 25, 43) with a sign
 * per element: a 7-bit code into li_keven_signs_iq2xs (+1 / -1 bytes, multiplied in), or for
 * IQ2_S explicit sign bits. The signed points are the integers v of generic/grids_generic.c's
 * decoders; vdotq_s32 dots them with the activations and the sub-block scale's integer part
 * 2 ls + 1 (<= 31) multiplies in int32: |lane| <= 8 * 8 * 43 * 128 * 31 < 2^24, exact, and exact
 * again as f32. The scale's rest, d / 8, is applied once per super-block, so the results equal the
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
#include "core/iq_grids.h"
#include "core/li.h"

/* 16 elements: two grid points, each times its sign row */
static inline int8x16_t signed_points(const uint8_t *g0, const uint8_t *g1, int code0, int code1) {
    return vmulq_s8(li_neon_rows2(g0, g1), li_neon_rows2(li_keven_signs_iq2xs[code0], li_keven_signs_iq2xs[code1]));
}

/* IQ2_XXS: per 32 elements a u32 of four 8-bit grid indices and a u32 of four 7-bit sign codes with
 * the 4-bit ls in bits 28..31 */
static inline int32x4_t iq2_xxs_dot(const block_iq2_xxs *b, const int8_t *q) {
    int32x4_t sumi = vdupq_n_s32(0);
    for (int ib = 0; ib < QK_K / 32; ib++, q += 32) {
        uint32_t ga, sb;
        memcpy(&ga, b->qs + 4 * ib, 4);
        memcpy(&sb, b->qs + 4 * ib + 2, 4);
        const int8x16_t v0 = signed_points(li_iq2xxs_grid[ga & 0xFF], li_iq2xxs_grid[(ga >> 8) & 0xFF],
                                           sb & 0x7F, (sb >> 7) & 0x7F);
        const int8x16_t v1 = signed_points(li_iq2xxs_grid[(ga >> 16) & 0xFF], li_iq2xxs_grid[ga >> 24],
                                           (sb >> 14) & 0x7F, (sb >> 21) & 0x7F);
        const int32x4_t p = vdotq_s32(vdotq_s32(vdupq_n_s32(0), v0, vld1q_s8(q)), v1, vld1q_s8(q + 16));
        sumi = vmlaq_n_s32(sumi, p, 2 * (int)(sb >> 28) + 1);
    }
    return sumi;
}

/* IQ2_XS / IQ2_S: a 4-bit ls per 16 elements, scales[i] low nibble for 32i.., high for 32i + 16.. */
static inline int ls16(const uint8_t *scales, int g16) { return 2 * ((scales[g16 / 2] >> 4 * (g16 % 2)) & 0xF) + 1; }

/* IQ2_XS: qs[g] = 9-bit grid index | 7-bit sign code << 9 for elements 8g.. */
static inline int32x4_t iq2_xs_dot(const block_iq2_xs *b, const int8_t *q) {
    int32x4_t sumi = vdupq_n_s32(0);
    for (int g = 0; g < QK_K / 8; g += 2, q += 16) {
        const uint16_t c0 = b->qs[g], c1 = b->qs[g + 1];
        const int8x16_t v = signed_points(li_iq2xs_grid[c0 & 511], li_iq2xs_grid[c1 & 511], c0 >> 9, c1 >> 9);
        sumi = vmlaq_n_s32(sumi, vdotq_s32(vdupq_n_s32(0), v, vld1q_s8(q)), ls16(b->scales, g / 2));
    }
    return sumi;
}

/* IQ2_S: 10-bit indices qs[g] | 2 bits of qh[g / 4] << 8; qs[32 + g] the sign bits of elements 8g.. */
static inline int32x4_t iq2_s_dot(const block_iq2_s *b, const int8_t *q) {
    const uint8_t *signs = b->qs + QK_K / 8;
    int32x4_t sumi = vdupq_n_s32(0);
    for (int g = 0; g < QK_K / 8; g += 2, q += 16) {
        const int i0 = b->qs[g] | ((b->qh[g / 4] >> 2 * (g % 4)) & 3) << 8;
        const int i1 = b->qs[g + 1] | ((b->qh[g / 4] >> 2 * (g % 4 + 1)) & 3) << 8;
        const int8x16_t v = li_neon_apply_sign_bits(li_neon_rows2(li_iq2s_grid[i0], li_iq2s_grid[i1]),
                                                    (uint16_t)(signs[g] | signs[g + 1] << 8));
        sumi = vmlaq_n_s32(sumi, vdotq_s32(vdupq_n_s32(0), v, vld1q_s8(q)), ls16(b->scales, g / 2));
    }
    return sumi;
}

/* d * (0.5 + ls) * 0.25 = (d / 8) * (2 ls + 1) */
static inline float scale_iq2_xxs(const block_iq2_xxs *b) { return li_neon_fp16(b->d) * 0.125f; }
static inline float scale_iq2_xs(const block_iq2_xs *b) { return li_neon_fp16(b->d) * 0.125f; }
static inline float scale_iq2_s(const block_iq2_s *b) { return li_neon_fp16(b->d) * 0.125f; }

LI_NEON_Q8_K_DOT_NR(iq2_xxs, iq2_xxs_dot, scale_iq2_xxs)
LI_NEON_Q8_K_DOT_NR(iq2_xs, iq2_xs_dot, scale_iq2_xs)
LI_NEON_Q8_K_DOT_NR(iq2_s, iq2_s_dot, scale_iq2_s)

LI_NEON_ENTRY_POINTS(iq2_xxs, q8_K, dot_iq2_xxs_nr)
LI_NEON_ENTRY_POINTS(iq2_xs, q8_K, dot_iq2_xs_nr)
LI_NEON_ENTRY_POINTS(iq2_s, q8_K, dot_iq2_s_nr)

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* __aarch64__ */
