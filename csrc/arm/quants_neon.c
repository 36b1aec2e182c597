/* quants_neon.c -- aarch64 NEON dot products (vdotq_s32, the dotprod extension) and GEMM tile.
 *
 * Compiled on aarch64 only, with the dotprod extension enabled for these functions;
 * core/dispatch.c uses them when getauxval reports HWCAP_ASIMDDP. vdotq_s32 multiplies
 * signed bytes, so the unsigned weight quants u (<= 127 for every type but Q8_0)
 * are used as they are, and Q8_0's u = q + 128 is flipped back to q (offset 0).
 * The dots come in the one-row and LI_DOT_ROWS-row forms (arm/dot_neon.h); the sums of the
 * activation quants are cheap to recompute with vdotq, so a_sums is not read. The activation
 * quantizers use the generic code.
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

/* 16 bytes of nibbles -> elements 0..15 (low nibbles) and 16..31 (high), as s8 0..15 */
static inline void nibbles(const uint8_t *qs, int8x16_t *lo, int8x16_t *hi) {
    const uint8x16_t q = vld1q_u8(qs);
    *lo = vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F)));
    *hi = vreinterpretq_s8_u8(vshrq_n_u8(q, 4));
}

/* Q4_0 x Q8_0 and Q8_0 x Q8_0: s = sum over blocks of (dw * da) * dot(q_w, q_a), the blocks
 * alternating between two accumulators (two fma chains in flight) */
#define LEGACY_32(W, BLOCK_DOT)                                                                       \
    static inline __attribute__((always_inline)) void dot_##W##_nr(int64_t n, float *s, const uint8_t *vw, \
                                                                   size_t rb, const void *va, const int NR) { \
        const block_q8_0 *a = va;                                                                     \
        const block_##W *w[LI_DOT_ROWS];                                                              \
        float32x4_t acc[LI_DOT_ROWS][2];                                                              \
        for (int r = 0; r < NR; r++) {                                                                \
            w[r] = (const block_##W *)(vw + r * rb);                                                  \
            acc[r][0] = acc[r][1] = vdupq_n_f32(0);                                                   \
        }                                                                                             \
        for (int64_t i = 0; i < n / 32; i++) {                                                        \
            const int8x16_t q0 = vld1q_s8(a[i].qs), q1 = vld1q_s8(a[i].qs + 16);                     \
            const float da = li_neon_fp16(a[i].d);                                                    \
            for (int r = 0; r < NR; r++)                                                              \
                acc[r][i & 1] = vfmaq_n_f32(acc[r][i & 1], vcvtq_f32_s32(BLOCK_DOT(&w[r][i], q0, q1)), \
                                            li_neon_fp16(w[r][i].d) * da);                            \
        }                                                                                             \
        for (int r = 0; r < NR; r++) s[r] = vaddvq_f32(vaddq_f32(acc[r][0], acc[r][1]));             \
    }

static inline int32x4_t q4_0_block_dot(const block_q4_0 *b, int8x16_t q0, int8x16_t q1) {
    const int8x16_t eight = vdupq_n_s8(8);
    int8x16_t lo, hi;
    nibbles(b->qs, &lo, &hi);
    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), vsubq_s8(lo, eight), q0), vsubq_s8(hi, eight), q1);
}

static inline int32x4_t q8_0_block_dot(const block_q8_0 *b, int8x16_t q0, int8x16_t q1) {
    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), vld1q_s8(b->qs), q0), vld1q_s8(b->qs + 16), q1);
}

LEGACY_32(q4_0, q4_0_block_dot)
LEGACY_32(q8_0, q8_0_block_dot)

/* Q4_1 x Q8_1: d * dot(u, q) + m * sum(q), with the exact sum of the quants */
static inline __attribute__((always_inline)) void dot_q4_1_nr(int64_t n, float *s, const uint8_t *vw, size_t rb,
                                                              const void *va, const int NR) {
    const block_q8_1 *a = va;
    const block_q4_1 *w[LI_DOT_ROWS];
    float32x4_t acc[LI_DOT_ROWS], accm[LI_DOT_ROWS];
    for (int r = 0; r < NR; r++) {
        w[r] = (const block_q4_1 *)(vw + r * rb);
        acc[r] = accm[r] = vdupq_n_f32(0);
    }
    const int8x16_t ones = vdupq_n_s8(1);
    for (int64_t i = 0; i < n / QK4_1; i++) {
        const int8x16_t q0 = vld1q_s8(a[i].qs), q1 = vld1q_s8(a[i].qs + 16);
        const float32x4_t sq = vcvtq_f32_s32(vdotq_s32(vdotq_s32(vdupq_n_s32(0), ones, q0), ones, q1));
        const float da = li_neon_fp16(a[i].d);
        for (int r = 0; r < NR; r++) {
            int8x16_t lo, hi;
            nibbles(w[r][i].qs, &lo, &hi);
            const int32x4_t p = vdotq_s32(vdotq_s32(vdupq_n_s32(0), lo, q0), hi, q1);
            acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(p), li_neon_fp16(w[r][i].d) * da);
            accm[r] = vfmaq_n_f32(accm[r], sq, li_neon_fp16(w[r][i].m) * da);
        }
    }
    for (int r = 0; r < NR; r++) s[r] = vaddvq_f32(vaddq_f32(acc[r], accm[r]));
}

LI_NEON_ENTRY_POINTS(q4_0, q8_0, dot_q4_0_nr)
LI_NEON_ENTRY_POINTS(q4_1, q8_1, dot_q4_1_nr)
LI_NEON_ENTRY_POINTS(q8_0, q8_0, dot_q8_0_nr)

/* --- GEMM tile over the panels of core/panel.c: 4-lane quarters of each super-group --------- */

#define NW LI_NEON_Q_NW   /* the tile shape (arm/neon.h) */
#define NA LI_NEON_Q_NA

static inline __attribute__((always_inline)) void sg_quarter(const uint8_t *w, size_t w_row, const uint8_t *a,
                                                             size_t a_row, int steps, int flip, int has_min,
                                                             float32x4_t facc[NW][NA]) {
    const int side = steps * 64;
    int32x4_t isum[NW][NA];
    for (int j = 0; j < NW; j++)
        for (int i = 0; i < NA; i++)   /* corr; Q8_0's flipped path needs none */
            isum[j][i] = flip ? vdupq_n_s32(0) : vld1q_s32((const int32_t *)(a + i * a_row + side + 64));
    for (int s = 0; s < steps; s++) {
        int8x16_t wv[NW], av[NA];
        for (int j = 0; j < NW; j++) {
            uint8x16_t u = vld1q_u8(w + j * w_row + s * 64);
            wv[j] = vreinterpretq_s8_u8(flip ? veorq_u8(u, vdupq_n_u8(0x80)) : u);
        }
        for (int i = 0; i < NA; i++) av[i] = vld1q_s8((const int8_t *)(a + i * a_row + s * 64));
        for (int j = 0; j < NW; j++)
            for (int i = 0; i < NA; i++) isum[j][i] = vdotq_s32(isum[j][i], wv[j], av[i]);
    }
    for (int j = 0; j < NW; j++) {
        const float32x4_t dw = vld1q_f32((const float *)(w + j * w_row + side));
        const float32x4_t mw = vld1q_f32((const float *)(w + j * w_row + side + 64));
        for (int i = 0; i < NA; i++) {
            const float *as = (const float *)(a + i * a_row + side);
            float32x4_t f = vmulq_f32(vcvtq_f32_s32(isum[j][i]), dw);
            if (has_min) f = vfmaq_f32(f, mw, vld1q_f32(as + 32));
            facc[j][i] = vfmaq_f32(facc[j][i], f, vld1q_f32(as));
        }
    }
}

void li_gemm_q_neon(const li_panel_plan *p, const uint8_t *w, const uint8_t *a, int has_min, int offset,
                    int umax, float *y, int64_t ldy, int nw_valid, int na_valid) {
    const int flip = umax > 127;   /* Q8_0: offset 128 folded away by the flip */
    (void)offset;
    float32x4_t facc[NW][NA];
    for (int j = 0; j < NW; j++)
        for (int i = 0; i < NA; i++) facc[j][i] = vdupq_n_f32(0);
    size_t off_w = 0, off_a = 0;
    for (int64_t sg = 0; sg < p->n_sg; sg++) {
        const int steps = li_panel_steps(p, sg);
        for (int q = 0; q < 4; q++) {
            const uint8_t *wq = w + off_w + q * 16, *aq = a + off_a + q * 16;
            if (steps == 8 && !flip && has_min) sg_quarter(wq, p->w_row_bytes, aq, p->a_row_bytes, 8, 0, 1, facc);
            else if (steps == 8 && !flip && !has_min) sg_quarter(wq, p->w_row_bytes, aq, p->a_row_bytes, 8, 0, 0, facc);
            else sg_quarter(wq, p->w_row_bytes, aq, p->a_row_bytes, steps, flip, has_min, facc);
        }
        off_w += (size_t)steps * 64 + LI_W_SIDE;
        off_a += (size_t)steps * 64 + LI_A_SIDE;
    }
    for (int j = 0; j < nw_valid; j++)
        for (int i = 0; i < na_valid; i++) y[i * ldy + j] = vaddvq_f32(facc[j][i]);
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* __aarch64__ */
