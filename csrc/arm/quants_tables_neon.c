/* quants_tables_neon.c -- NEON (dotprod) dot products of the table types: IQ4_NL and MXFP4 against
 * Q8_0, IQ4_XS against Q8_K (ggml's pairings).
 *
 * An element is a 4-bit index into 16 int8 values (li_kvalues_iq4nl, li_kvalues_mxfp4): one
 * vqtbl1q_s8 per 16 elements turns the nibbles into the values, and vdotq_s32 multiplies them with
 * the activations as signed bytes, summing in int32 (exact: a block's sum is at most
 * 32 * 127 * 127 < 2^19). The block's sum is scaled in f32: the results equal the generic ones up to
 * float summation order.
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

/* the 32 elements of 16 nibble bytes (low nibbles: elements 0..15, high: 16..31) as table values,
 * dotted with the 32 activations q */
static inline int32x4_t table_dot_32(int8x16_t table, const uint8_t *qs, const int8_t *q) {
    const uint8x16_t b = vld1q_u8(qs);
    const int8x16_t lo = vqtbl1q_s8(table, vandq_u8(b, vdupq_n_u8(0x0F)));
    const int8x16_t hi = vqtbl1q_s8(table, vshrq_n_u8(b, 4));
    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), lo, vld1q_s8(q)), hi, vld1q_s8(q + 16));
}

static inline float scale_iq4_nl(const block_iq4_nl *b) { return li_neon_fp16(b->d); }
static inline float scale_mxfp4(const block_mxfp4 *b) {   /* ggml_e8m0_to_fp32_half, as the generic one */
    return li_bits_to_f32(b->e < 2 ? 0x00200000u << b->e : (uint32_t)(b->e - 1) << 23);
}

/* IQ4_NL / MXFP4 x Q8_0: s = sum over blocks of (dw * da) * dot(values, q) */
#define TABLE32(W, TABLE)                                                                             \
    static inline __attribute__((always_inline)) void dot_##W##_nr(int64_t n, float *s, const uint8_t *vw, \
                                                                   size_t rb, const void *va, const int NR) { \
        const int8x16_t table = vld1q_s8(TABLE);                                                      \
        const block_q8_0 *a = va;                                                                     \
        const block_##W *w[LI_DOT_ROWS];                                                              \
        float32x4_t acc[LI_DOT_ROWS];                                                                 \
        for (int r = 0; r < NR; r++) {                                                                \
            w[r] = (const block_##W *)(vw + r * rb);                                                  \
            acc[r] = vdupq_n_f32(0);                                                                  \
        }                                                                                             \
        for (int64_t i = 0; i < n / 32; i++) {                                                        \
            const float da = li_neon_fp16(a[i].d);                                                    \
            for (int r = 0; r < NR; r++) {                                                            \
                const int32x4_t p = table_dot_32(table, w[r][i].qs, a[i].qs);                         \
                acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(p), scale_##W(&w[r][i]) * da);             \
            }                                                                                         \
        }                                                                                             \
        for (int r = 0; r < NR; r++) s[r] = vaddvq_f32(acc[r]);                                       \
    }

TABLE32(iq4_nl, li_kvalues_iq4nl)
TABLE32(mxfp4, li_kvalues_mxfp4)

/* IQ4_XS x Q8_K: per super-block (d * da) * sum over the 8 sub-blocks of (ls - 32) * dot(values, q),
 * the sub-block scale applied in int32 (|lane| <= 8 * 8 * 127 * 127 * 32 < 2^26: exact) */
static inline __attribute__((always_inline)) void dot_iq4_xs_nr(int64_t n, float *s, const uint8_t *vw, size_t rb,
                                                                const void *va, const int NR) {
    const int8x16_t table = vld1q_s8(li_kvalues_iq4nl);
    const block_q8_K *a = va;
    const block_iq4_xs *w[LI_DOT_ROWS];
    float32x4_t acc[LI_DOT_ROWS];
    for (int r = 0; r < NR; r++) {
        w[r] = (const block_iq4_xs *)(vw + r * rb);
        acc[r] = vdupq_n_f32(0);
    }
    for (int64_t i = 0; i < n / QK_K; i++) {
        for (int r = 0; r < NR; r++) {
            const block_iq4_xs *b = &w[r][i];
            int32x4_t sumi = vdupq_n_s32(0);
            for (int sb = 0; sb < 8; sb++) {
                const int ls = (((b->scales_l[sb / 2] >> 4 * (sb % 2)) & 0xF) | ((b->scales_h >> 2 * sb) & 3) << 4) - 32;
                sumi = vmlaq_n_s32(sumi, table_dot_32(table, b->qs + 16 * sb, a[i].qs + 32 * sb), ls);
            }
            acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(sumi), li_neon_fp16(b->d) * a[i].d);
        }
    }
    for (int r = 0; r < NR; r++) s[r] = vaddvq_f32(acc[r]);
}

LI_NEON_ENTRY_POINTS(iq4_nl, q8_0, dot_iq4_nl_nr)
LI_NEON_ENTRY_POINTS(mxfp4, q8_0, dot_mxfp4_nr)
LI_NEON_ENTRY_POINTS(iq4_xs, q8_K, dot_iq4_xs_nr)

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* __aarch64__ */
