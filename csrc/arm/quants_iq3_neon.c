/* quants_iq3_neon.c -- NEON (dotprod) dot products of the 3-bit grid i-quants IQ3_XXS and IQ3_S
 * against Q8_K.
 *
 * Each 4 elements are a point of a 4-byte grid (core/iq_grids.h: IQ3_XXS 4..62, IQ3_S odd 1..15),
 * eight signs per 8 elements (IQ3_XXS: a 7-bit code into li_keven_signs_iq2xs; IQ3_S: explicit
 * bits). The signed points are the integers v of generic/grids_generic.c's decoders; vdotq_s32 dots
 * them with the activations and the integer part of the sub-block scale (IQ3_XXS: 2 ls + 1, the
 * rest d / 4; IQ3_S: 1 + 2 ls, the rest d) multiplies in int32: |lane| <= 8 * 8 * 62 * 128 * 31
 * < 2^24, exact, and exact again as f32. The results equal the generic ones up to float summation
 * order.
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

/* 16 elements: the 4-byte grid points of indices i0..i3 */
static inline int8x16_t points4(const uint8_t (*grid)[4], int i0, int i1, int i2, int i3) {
    uint32_t p[4];
    memcpy(&p[0], grid[i0], 4);
    memcpy(&p[1], grid[i1], 4);
    memcpy(&p[2], grid[i2], 4);
    memcpy(&p[3], grid[i3], 4);
    return vreinterpretq_s8_u32(vld1q_u32(p));
}

/* IQ3_XXS: qs[0..63] 8-bit indices (4 elements each); per 32 elements a u32 at qs[64 + 4 ib] of four
 * 7-bit sign codes and the 4-bit ls in bits 28..31 */
static inline int32x4_t iq3_xxs_dot(const block_iq3_xxs *b, const int8_t *q) {
    int32x4_t sumi = vdupq_n_s32(0);
    for (int ib = 0; ib < QK_K / 32; ib++, q += 32) {
        const uint8_t *idx = b->qs + 8 * ib;
        uint32_t sb;
        memcpy(&sb, b->qs + QK_K / 4 + 4 * ib, 4);
        const int8x16_t v0 = vmulq_s8(points4(li_iq3xxs_grid, idx[0], idx[1], idx[2], idx[3]),
                                      li_neon_rows2(li_keven_signs_iq2xs[sb & 0x7F], li_keven_signs_iq2xs[(sb >> 7) & 0x7F]));
        const int8x16_t v1 = vmulq_s8(points4(li_iq3xxs_grid, idx[4], idx[5], idx[6], idx[7]),
                                      li_neon_rows2(li_keven_signs_iq2xs[(sb >> 14) & 0x7F],
                                                    li_keven_signs_iq2xs[(sb >> 21) & 0x7F]));
        const int32x4_t p = vdotq_s32(vdotq_s32(vdupq_n_s32(0), v0, vld1q_s8(q)), v1, vld1q_s8(q + 16));
        sumi = vmlaq_n_s32(sumi, p, 2 * (int)(sb >> 28) + 1);
    }
    return sumi;
}

/* IQ3_S: 9-bit indices qs[j] | bit j % 8 of qh[j / 8] << 8 (elements 4j..), sign bits signs[g] for
 * elements 8g.., a 4-bit ls per 32 (scales[ib / 2] nibble ib % 2) */
static inline int32x4_t iq3_s_dot(const block_iq3_s *b, const int8_t *q) {
    int32x4_t sumi = vdupq_n_s32(0);
    for (int ib = 0; ib < QK_K / 32; ib++, q += 32) {
        const uint8_t *qs = b->qs + 8 * ib;
        const int qh = b->qh[ib];
#define IDX(j) (qs[j] | ((qh >> (j)) & 1) << 8)
        const int8x16_t v0 = li_neon_apply_sign_bits(points4(li_iq3s_grid, IDX(0), IDX(1), IDX(2), IDX(3)),
                                                     (uint16_t)(b->signs[4 * ib] | b->signs[4 * ib + 1] << 8));
        const int8x16_t v1 = li_neon_apply_sign_bits(points4(li_iq3s_grid, IDX(4), IDX(5), IDX(6), IDX(7)),
                                                     (uint16_t)(b->signs[4 * ib + 2] | b->signs[4 * ib + 3] << 8));
#undef IDX
        const int32x4_t p = vdotq_s32(vdotq_s32(vdupq_n_s32(0), v0, vld1q_s8(q)), v1, vld1q_s8(q + 16));
        sumi = vmlaq_n_s32(sumi, p, 1 + 2 * ((b->scales[ib / 2] >> 4 * (ib % 2)) & 0xF));
    }
    return sumi;
}

/* IQ3_XXS: d * (0.5 + ls) * 0.5 = (d / 4) * (2 ls + 1); IQ3_S: d * (1 + 2 ls) */
static inline float scale_iq3_xxs(const block_iq3_xxs *b) { return li_neon_fp16(b->d) * 0.25f; }
static inline float scale_iq3_s(const block_iq3_s *b) { return li_neon_fp16(b->d); }

LI_NEON_Q8_K_DOT_NR(iq3_xxs, iq3_xxs_dot, scale_iq3_xxs)
LI_NEON_Q8_K_DOT_NR(iq3_s, iq3_s_dot, scale_iq3_s)

LI_NEON_ENTRY_POINTS(iq3_xxs, q8_K, dot_iq3_xxs_nr)
LI_NEON_ENTRY_POINTS(iq3_s, q8_K, dot_iq3_s_nr)

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* __aarch64__ */
