/* unpack_generic.c -- weight rows -> integer form: element e = dw[e/G] * (u[e] - o) + mw[e/G].
 *
 * Every quant type is an unsigned integer u (0..umax) per element with one float
 * scale dw (and, for the "_1" and k-quant types, one float min mw) per group of
 * G elements, and a type-wide integer offset o. That one form feeds both the
 * generic dot products (vec_dot_generic.c) and the GEMM panels (core/panel.c), so a
 * SIMD microkernel needs no per-type code. The scales are computed exactly as the
 * dequantizers compute them (dl = d * sc in f32), so dw * (u - o) + mw
 * reproduces dequantize_row_<type> value for value.
 *
 *   type   G   o    umax  min   dw, mw
 *   Q4_0   32  8    15    -     d
 *   Q4_1   32  0    15    yes   d, m
 *   Q5_0   32  16   31    -     d
 *   Q5_1   32  0    31    yes   d, m
 *   Q8_0   32  128  255   -     d          (u = q + 128)
 *   Q2_K   16  0    3     yes   d*sc, -dmin*min
 *   Q3_K   16  4    7     -     d*(sc-32)
 *   Q4_K   32  0    15    yes   d*sc, -dmin*min
 *   Q5_K   32  0    31    yes   d*sc, -dmin*min
 *   Q6_K   16  32   63    -     d*sc
 *   IQ4_NL 32  128  241   -     d          (u = kvalues_iq4nl[q] + 128)
 *   IQ4_XS 32  128  241   -     d*(ls-32)  (u = kvalues_iq4nl[q] + 128)
 *   MXFP4  32  128  140   -     2^(e-128)  (u = kvalues_mxfp4[q] + 128)
 *   TQ1_0  32  1    2     -     d          (u = the trit)
 *   TQ2_0  32  1    3     -     d          (u = the 2-bit code)
 *   IQ2_XXS 32 43   86    -     d*(2ls+1)/8   (u = sign * grid + 43; IQ2_XS, IQ2_S: G = 16)
 *   IQ3_XXS 32 62   124   -     d*(2ls+1)/4   (u = sign * grid + 62)
 *   IQ3_S  32  15   30    -     d*(2ls+1)     (u = sign * grid + 15)
 *   IQ1_S  32  9    18    -     d*(2ls+1)/8   (u = 8 * (grid + delta) + 9; IQ1_M: G = 16)
 * The grid i-quants' unpackers are in grids_generic.c, beside their decoders.
 */
#include "core/li.h"
#include "generic/generic.h"

static inline uint32_t load_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void unpack_q4_0(const void *src, int64_t n, uint8_t *u, float *dw, float *mw) {
    const block_q4_0 *x = src;
    (void)mw;
    for (int64_t i = 0; i < n / QK4_0; i++, u += QK4_0) {
        dw[i] = li_fp16_to_fp32(x[i].d);
        for (int j = 0; j < 16; j++) {
            u[j] = x[i].qs[j] & 0xF;
            u[j + 16] = x[i].qs[j] >> 4;
        }
    }
}

void unpack_q4_1(const void *src, int64_t n, uint8_t *u, float *dw, float *mw) {
    const block_q4_1 *x = src;
    for (int64_t i = 0; i < n / QK4_1; i++, u += QK4_1) {
        dw[i] = li_fp16_to_fp32(x[i].d);
        mw[i] = li_fp16_to_fp32(x[i].m);
        for (int j = 0; j < 16; j++) {
            u[j] = x[i].qs[j] & 0xF;
            u[j + 16] = x[i].qs[j] >> 4;
        }
    }
}

static void unpack_5bit(const uint8_t *qs, const uint8_t *qh_bytes, uint8_t *u) {
    const uint32_t qh = load_u32(qh_bytes);
    for (int j = 0; j < 16; j++) {
        u[j] = (uint8_t)((qs[j] & 0xF) | ((qh >> j) & 1) << 4);
        u[j + 16] = (uint8_t)((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
    }
}

void unpack_q5_0(const void *src, int64_t n, uint8_t *u, float *dw, float *mw) {
    const block_q5_0 *x = src;
    (void)mw;
    for (int64_t i = 0; i < n / QK5_0; i++, u += QK5_0) {
        dw[i] = li_fp16_to_fp32(x[i].d);
        unpack_5bit(x[i].qs, x[i].qh, u);
    }
}

void unpack_q5_1(const void *src, int64_t n, uint8_t *u, float *dw, float *mw) {
    const block_q5_1 *x = src;
    for (int64_t i = 0; i < n / QK5_1; i++, u += QK5_1) {
        dw[i] = li_fp16_to_fp32(x[i].d);
        mw[i] = li_fp16_to_fp32(x[i].m);
        unpack_5bit(x[i].qs, x[i].qh, u);
    }
}

void unpack_q8_0(const void *src, int64_t n, uint8_t *u, float *dw, float *mw) {
    const block_q8_0 *x = src;
    (void)mw;
    for (int64_t i = 0; i < n / QK8_0; i++, u += QK8_0) {
        dw[i] = li_fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK8_0; j++) u[j] = (uint8_t)(x[i].qs[j] ^ 0x80);   /* q + 128 */
    }
}

void unpack_q2_K(const void *src, int64_t n, uint8_t *u, float *dw, float *mw) {
    const block_q2_K *x = src;
    for (int64_t i = 0; i < n / QK_K; i++, dw += 16, mw += 16) {
        const float d = li_fp16_to_fp32(x[i].d), dmin = li_fp16_to_fp32(x[i].dmin);
        for (int s = 0; s < 16; s++) {
            dw[s] = d * (x[i].scales[s] & 0xF);
            mw[s] = -(dmin * (x[i].scales[s] >> 4));
        }
        for (int half = 0; half < 2; half++)
            for (int j = 0; j < 4; j++)
                for (int l = 0; l < 32; l++) *u++ = (x[i].qs[32 * half + l] >> (2 * j)) & 3;
    }
}

void unpack_q3_K(const void *src, int64_t n, uint8_t *u, float *dw, float *mw) {
    const block_q3_K *x = src;
    (void)mw;
    for (int64_t i = 0; i < n / QK_K; i++, dw += 16) {
        const float d = li_fp16_to_fp32(x[i].d);
        int8_t scales[16];
        li_q3_K_scales(x[i].scales, scales);
        for (int s = 0; s < 16; s++) dw[s] = d * scales[s];
        for (int half = 0; half < 2; half++)
            for (int j = 0; j < 4; j++)
                for (int l = 0; l < 32; l++) {
                    const int low = (x[i].qs[32 * half + l] >> (2 * j)) & 3;
                    const int high = (x[i].hmask[l] >> (4 * half + j)) & 1;   /* set: no -4 */
                    *u++ = (uint8_t)(low | high << 2);
                }
    }
}

void unpack_q4_K(const void *src, int64_t n, uint8_t *u, float *dw, float *mw) {
    const block_q4_K *x = src;
    for (int64_t i = 0; i < n / QK_K; i++, dw += 8, mw += 8) {
        const float d = li_fp16_to_fp32(x[i].d), dmin = li_fp16_to_fp32(x[i].dmin);
        for (int s = 0; s < 8; s++) {
            uint8_t sc, m;
            li_get_scale_min_k4(s, x[i].scales, &sc, &m);
            dw[s] = d * sc;
            mw[s] = -(dmin * m);
        }
        for (int c = 0; c < 4; c++, u += 64)
            for (int l = 0; l < 32; l++) {
                u[l] = x[i].qs[32 * c + l] & 0xF;
                u[l + 32] = x[i].qs[32 * c + l] >> 4;
            }
    }
}

void unpack_q5_K(const void *src, int64_t n, uint8_t *u, float *dw, float *mw) {
    const block_q5_K *x = src;
    for (int64_t i = 0; i < n / QK_K; i++, dw += 8, mw += 8) {
        const float d = li_fp16_to_fp32(x[i].d), dmin = li_fp16_to_fp32(x[i].dmin);
        for (int s = 0; s < 8; s++) {
            uint8_t sc, m;
            li_get_scale_min_k4(s, x[i].scales, &sc, &m);
            dw[s] = d * sc;
            mw[s] = -(dmin * m);
        }
        for (int c = 0; c < 4; c++, u += 64)
            for (int l = 0; l < 32; l++) {
                const uint8_t q = x[i].qs[32 * c + l], h = x[i].qh[l];
                u[l] = (uint8_t)((q & 0xF) | ((h >> (2 * c)) & 1) << 4);
                u[l + 32] = (uint8_t)((q >> 4) | ((h >> (2 * c + 1)) & 1) << 4);
            }
    }
}

void unpack_q6_K(const void *src, int64_t n, uint8_t *u, float *dw, float *mw) {
    const block_q6_K *x = src;
    (void)mw;
    for (int64_t i = 0; i < n / QK_K; i++, dw += 16) {
        const float d = li_fp16_to_fp32(x[i].d);
        for (int s = 0; s < 16; s++) dw[s] = d * x[i].scales[s];
        for (int half = 0; half < 2; half++, u += 128) {
            const uint8_t *ql = x[i].ql + 64 * half, *qh = x[i].qh + 32 * half;
            for (int l = 0; l < 32; l++) {
                u[l + 0] = (uint8_t)((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4);
                u[l + 32] = (uint8_t)((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4);
                u[l + 64] = (uint8_t)((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4);
                u[l + 96] = (uint8_t)((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4);
            }
        }
    }
}

/* table types: u = table value + 128 (o = 128, as Q8_0), dw = the dequantizer's scale */
static void unpack_table_32(const uint8_t *qs, const int8_t *table, uint8_t *u) {
    for (int j = 0; j < 16; j++) {
        u[j] = (uint8_t)(table[qs[j] & 0xF] + 128);
        u[j + 16] = (uint8_t)(table[qs[j] >> 4] + 128);
    }
}

void unpack_iq4_nl(const void *src, int64_t n, uint8_t *u, float *dw, float *mw) {
    const block_iq4_nl *x = src;
    (void)mw;
    for (int64_t i = 0; i < n / QK4_NL; i++, u += QK4_NL) {
        dw[i] = li_fp16_to_fp32(x[i].d);
        unpack_table_32(x[i].qs, li_kvalues_iq4nl, u);
    }
}

void unpack_iq4_xs(const void *src, int64_t n, uint8_t *u, float *dw, float *mw) {
    const block_iq4_xs *x = src;
    (void)mw;
    for (int64_t i = 0; i < n / QK_K; i++, dw += 8) {
        const float d = li_fp16_to_fp32(x[i].d);
        int8_t ls[8];
        li_iq4_xs_scales(&x[i], ls);
        for (int s = 0; s < 8; s++, u += 32) {
            dw[s] = d * ls[s];
            unpack_table_32(x[i].qs + 16 * s, li_kvalues_iq4nl, u);
        }
    }
}

void unpack_mxfp4(const void *src, int64_t n, uint8_t *u, float *dw, float *mw) {
    const block_mxfp4 *x = src;
    (void)mw;
    for (int64_t i = 0; i < n / QK_MXFP4; i++, u += QK_MXFP4) {
        dw[i] = li_e8m0_to_fp32_half(x[i].e);
        unpack_table_32(x[i].qs, li_kvalues_mxfp4, u);
    }
}

void unpack_tq1_0(const void *src, int64_t n, uint8_t *u, float *dw, float *mw) {
    const block_tq1_0 *x = src;
    (void)mw;
    for (int64_t i = 0; i < n / QK_K; i++, u += QK_K, dw += QK_K / 32) {
        const float d = li_fp16_to_fp32(x[i].d);
        for (int g = 0; g < QK_K / 32; g++) dw[g] = d;
        li_tq1_0_trits(&x[i], u);
    }
}

void unpack_tq2_0(const void *src, int64_t n, uint8_t *u, float *dw, float *mw) {
    const block_tq2_0 *x = src;
    (void)mw;
    for (int64_t i = 0; i < n / QK_K; i++, u += QK_K, dw += QK_K / 32) {
        const float d = li_fp16_to_fp32(x[i].d);
        for (int g = 0; g < QK_K / 32; g++) dw[g] = d;
        li_tq2_0_trits(&x[i], u);
    }
}
