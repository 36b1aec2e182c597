/* dequant_generic.c -- scalar dequantize_row_<type>: raw blocks -> float32.
 *
 * Ports of ggml's dequantize_row_* (ggml/src/ggml-quants.c). They must be
 * bit-identical to the numpy oracle (localinfer.formats.dequantize), so the float
 * operations keep ggml's order -- an fp16 scale widened to f32, then q * d, then
 * "+ m" (or "- ml") as a separate rounded step -- and this file is compiled with
 * -ffp-contract=off so the compiler never fuses them into an fma.
 */
#include "core/li.h"
#include "generic/generic.h"

void dequantize_row_f32(const void *src, float *y, int64_t n) {
    memcpy(y, src, (size_t)n * sizeof(float));
}

void dequantize_row_f16(const void *src, float *y, int64_t n) {
    const ggml_half *x = src;
    for (int64_t i = 0; i < n; i++) y[i] = li_fp16_to_fp32(x[i]);
}

void dequantize_row_bf16(const void *src, float *y, int64_t n) {
    const ggml_bf16 *x = src;
    for (int64_t i = 0; i < n; i++) y[i] = li_bf16_to_fp32(x[i]);
}

void dequantize_row_q4_0(const void *src, float *y, int64_t n) {
    const block_q4_0 *x = src;
    for (int64_t i = 0; i < n / QK4_0; i++, y += QK4_0) {
        const float d = li_fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            y[j] = ((x[i].qs[j] & 0x0F) - 8) * d;
            y[j + QK4_0 / 2] = ((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void dequantize_row_q4_1(const void *src, float *y, int64_t n) {
    const block_q4_1 *x = src;
    for (int64_t i = 0; i < n / QK4_1; i++, y += QK4_1) {
        const float d = li_fp16_to_fp32(x[i].d), m = li_fp16_to_fp32(x[i].m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            y[j] = (x[i].qs[j] & 0x0F) * d + m;
            y[j + QK4_1 / 2] = (x[i].qs[j] >> 4) * d + m;
        }
    }
}

static inline uint32_t load_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void dequantize_row_q5_0(const void *src, float *y, int64_t n) {
    const block_q5_0 *x = src;
    for (int64_t i = 0; i < n / QK5_0; i++, y += QK5_0) {
        const float d = li_fp16_to_fp32(x[i].d);
        const uint32_t qh = load_u32(x[i].qh);
        for (int j = 0; j < QK5_0 / 2; j++) {
            const int x0 = ((x[i].qs[j] & 0x0F) | ((qh >> j) & 1) << 4) - 16;
            const int x1 = ((x[i].qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - 16;
            y[j] = x0 * d;
            y[j + QK5_0 / 2] = x1 * d;
        }
    }
}

void dequantize_row_q5_1(const void *src, float *y, int64_t n) {
    const block_q5_1 *x = src;
    for (int64_t i = 0; i < n / QK5_1; i++, y += QK5_1) {
        const float d = li_fp16_to_fp32(x[i].d), m = li_fp16_to_fp32(x[i].m);
        const uint32_t qh = load_u32(x[i].qh);
        for (int j = 0; j < QK5_1 / 2; j++) {
            const int x0 = (x[i].qs[j] & 0x0F) | ((qh >> j) & 1) << 4;
            const int x1 = (x[i].qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4;
            y[j] = x0 * d + m;
            y[j + QK5_1 / 2] = x1 * d + m;
        }
    }
}

void dequantize_row_q8_0(const void *src, float *y, int64_t n) {
    const block_q8_0 *x = src;
    for (int64_t i = 0; i < n / QK8_0; i++, y += QK8_0) {
        const float d = li_fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK8_0; j++) y[j] = x[i].qs[j] * d;
    }
}

void dequantize_row_q2_K(const void *src, float *y, int64_t n) {
    const block_q2_K *x = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = li_fp16_to_fp32(x[i].d), dmin = li_fp16_to_fp32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        int is = 0;
        for (int half = 0; half < 2; half++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int k = 0; k < 2; k++) {          /* two sub-blocks of 16 per shift */
                    const uint8_t sc = x[i].scales[is++];
                    const float dl = d * (sc & 0xF), ml = dmin * (sc >> 4);
                    for (int l = 0; l < 16; l++) *y++ = dl * ((q[l + 16 * k] >> shift) & 3) - ml;
                }
            }
        }
    }
}

/* Q3_K's 16 six-bit scales (stored +32): low 4 bits from the nibbles of bytes 0..7
 * (low nibbles are scales 0..7, high nibbles 8..15), top 2 bits from bytes 8..11:
 * scale i takes bits 2*(i/4).. of byte 8 + i%4. (ggml unpacks this with kmask1/kmask2.) */
void li_q3_K_scales(const uint8_t *s, int8_t out[16]) {
    for (int i = 0; i < 16; i++) {
        const int low = i < 8 ? s[i] & 0xF : s[i - 8] >> 4;
        const int high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        out[i] = (int8_t)((low | high << 4) - 32);
    }
}

void dequantize_row_q3_K(const void *src, float *y, int64_t n) {
    const block_q3_K *x = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = li_fp16_to_fp32(x[i].d);
        int8_t scales[16];
        li_q3_K_scales(x[i].scales, scales);
        const uint8_t *q = x[i].qs, *hm = x[i].hmask;
        uint8_t m = 1;
        int is = 0;
        for (int half = 0; half < 2; half++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
                for (int k = 0; k < 2; k++) {
                    const float dl = d * scales[is++];
                    for (int l = 16 * k; l < 16 * k + 16; l++)
                        *y++ = dl * (((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
                }
            }
        }
    }
}

/* ggml's get_scale_min_k4: scale and min j (0..7) of Q4_K / Q5_K from 12 packed bytes. */
void li_get_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

void dequantize_row_q4_K(const void *src, float *y, int64_t n) {
    const block_q4_K *x = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = li_fp16_to_fp32(x[i].d), dmin = li_fp16_to_fp32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        for (int j = 0; j < 8; j += 2, q += 32) {   /* 32 bytes: sub-block j (low), j+1 (high) */
            uint8_t sc, m;
            li_get_scale_min_k4(j, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            li_get_scale_min_k4(j + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

void dequantize_row_q5_K(const void *src, float *y, int64_t n) {
    const block_q5_K *x = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = li_fp16_to_fp32(x[i].d), dmin = li_fp16_to_fp32(x[i].dmin);
        const uint8_t *ql = x[i].qs, *qh = x[i].qh;
        for (int j = 0; j < 8; j += 2, ql += 32) {
            uint8_t sc, m;
            li_get_scale_min_k4(j, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            li_get_scale_min_k4(j + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * ((ql[l] & 0xF) | ((qh[l] >> j) & 1) << 4) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * ((ql[l] >> 4) | ((qh[l] >> (j + 1)) & 1) << 4) - m2;
        }
    }
}

void dequantize_row_q6_K(const void *src, float *y, int64_t n) {
    const block_q6_K *x = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = li_fp16_to_fp32(x[i].d);
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int half = 0; half < 2; half++, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32;
                const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                y[l + 0] = d * sc[is + 0] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

/* --- table types: an index per element into a table of 16 int8 values ------------------ */

void dequantize_row_iq4_nl(const void *src, float *y, int64_t n) {
    const block_iq4_nl *x = src;
    for (int64_t i = 0; i < n / QK4_NL; i++, y += QK4_NL) {
        const float d = li_fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK4_NL / 2; j++) {
            y[j] = d * li_kvalues_iq4nl[x[i].qs[j] & 0xF];
            y[j + QK4_NL / 2] = d * li_kvalues_iq4nl[x[i].qs[j] >> 4];
        }
    }
}

void li_iq4_xs_scales(const block_iq4_xs *x, int8_t out[8]) {
    for (int s = 0; s < 8; s++) {
        const int lo = (x->scales_l[s / 2] >> 4 * (s % 2)) & 0xF, hi = (x->scales_h >> 2 * s) & 3;
        out[s] = (int8_t)((lo | hi << 4) - 32);
    }
}

void dequantize_row_iq4_xs(const void *src, float *y, int64_t n) {
    const block_iq4_xs *x = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = li_fp16_to_fp32(x[i].d);
        int8_t ls[8];
        li_iq4_xs_scales(&x[i], ls);
        for (int s = 0; s < 8; s++, y += 32) {
            const float dl = d * ls[s];   /* rounded once, as ggml and gguf-py */
            const uint8_t *qs = x[i].qs + 16 * s;
            for (int j = 0; j < 16; j++) {
                y[j] = dl * li_kvalues_iq4nl[qs[j] & 0xF];
                y[j + 16] = dl * li_kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}

/* 2^(e - 128) as an f32 bit pattern: a subnormal for e < 2 (ggml_e8m0_to_fp32_half) */
float li_e8m0_to_fp32_half(uint8_t e) {
    return li_bits_to_f32(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}

void dequantize_row_mxfp4(const void *src, float *y, int64_t n) {
    const block_mxfp4 *x = src;
    for (int64_t i = 0; i < n / QK_MXFP4; i++, y += QK_MXFP4) {
        const float d = li_e8m0_to_fp32_half(x[i].e);
        for (int j = 0; j < QK_MXFP4 / 2; j++) {
            y[j] = d * li_kvalues_mxfp4[x[i].qs[j] & 0xF];
            y[j + QK_MXFP4 / 2] = d * li_kvalues_mxfp4[x[i].qs[j] >> 4];
        }
    }
}

/* --- ternary types ------------------------------------------------------------------------ */

/* the top base-3 digit of b * 3^k (mod 256): ggml's (q * 3) >> 8 after the uint8 multiply */
static inline uint8_t trit(uint8_t b, int k) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    return (uint8_t)(((uint16_t)(uint8_t)(b * pow3[k]) * 3) >> 8);
}

void li_tq1_0_trits(const block_tq1_0 *x, uint8_t t[QK_K]) {
    for (int k = 0; k < 5; k++)
        for (int m = 0; m < 32; m++) t[32 * k + m] = trit(x->qs[m], k);
    for (int k = 0; k < 5; k++)
        for (int m = 0; m < 16; m++) t[160 + 16 * k + m] = trit(x->qs[32 + m], k);
    for (int k = 0; k < 4; k++)
        for (int m = 0; m < 4; m++) t[240 + 4 * k + m] = trit(x->qh[m], k);
}

void li_tq2_0_trits(const block_tq2_0 *x, uint8_t t[QK_K]) {
    for (int c = 0; c < 2; c++)
        for (int l = 0; l < 4; l++)
            for (int m = 0; m < 32; m++) t[128 * c + 32 * l + m] = (x->qs[32 * c + m] >> 2 * l) & 3;
}

void dequantize_row_tq1_0(const void *src, float *y, int64_t n) {
    const block_tq1_0 *x = src;
    uint8_t t[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float d = li_fp16_to_fp32(x[i].d);
        li_tq1_0_trits(&x[i], t);
        for (int j = 0; j < QK_K; j++) y[j] = d * (float)(t[j] - 1);
    }
}

void dequantize_row_tq2_0(const void *src, float *y, int64_t n) {
    const block_tq2_0 *x = src;
    uint8_t t[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float d = li_fp16_to_fp32(x[i].d);
        li_tq2_0_trits(&x[i], t);
        for (int j = 0; j < QK_K; j++) y[j] = d * (float)(t[j] - 1);
    }
}
