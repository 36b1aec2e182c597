/* vec_dot_generic.c -- scalar dot products of one weight row with one activation row.
 *
 * vec_dot_<w>_<act>_generic(n, &s, w, a): the weight row in its own type, the
 * activation row already quantized to the type's vec_dot_type (ggml's pairing:
 * Q4_0/Q5_0/Q8_0 with Q8_0, Q4_1/Q5_1 with Q8_1, the k-quants with Q8_K, F16
 * with F16, BF16 with BF16, F32 with F32).
 *
 * All quant types go through the integer form of unpack_generic.c: per group of
 * G elements, isum = sum((u - o) * q) exactly in int32, then
 *   s += da * (dw * isum + mw * sum(q)),
 * i.e. the exact dot of the dequantized weights with the dequantized activations
 * up to float rounding (accumulated in double here). ggml's Q4_1 x Q8_1 reads the
 * fp16-rounded s = d*sum(q) instead of sum(q); the exact sum is closer to the
 * dequantized product, so localinfer uses it everywhere (GEMV and GEMM agree).
 */
#include "core/li.h"
#include "generic/generic.h"

/* One activation block -> its quants, and the scale and the sum of quants per group of G. */
static const int8_t *act_block(int act_type, const void *a, int64_t i, int group, float *da, int32_t *sums) {
    if (act_type == LI_TYPE_Q8_K) {
        const block_q8_K *b = (const block_q8_K *)a + i;
        for (int g = 0; g < QK_K / group; g++) {
            da[g] = b->d;
            sums[g] = 0;
            for (int h = 0; h < group / 16; h++) sums[g] += b->bsums[g * (group / 16) + h];
        }
        return b->qs;
    }
    const int8_t *qs;
    ggml_half d;
    if (act_type == LI_TYPE_Q8_1) {
        const block_q8_1 *b = (const block_q8_1 *)a + i;
        qs = b->qs, d = b->d;
    } else {
        const block_q8_0 *b = (const block_q8_0 *)a + i;
        qs = b->qs, d = b->d;
    }
    da[0] = li_fp16_to_fp32(d);
    sums[0] = 0;
    for (int j = 0; j < QK8_0; j++) sums[0] += qs[j];
    return qs;
}

static void vec_dot_quant(li_unpack_fn unpack, int act_type, int block_size, int type_size, int group,
                          int offset, int has_min, int64_t n, float *s, const void *w, const void *a) {
    uint8_t u[QK_K];
    float dw[QK_K / 16], mw[QK_K / 16] = {0}, da[QK_K / 16];
    int32_t sums[QK_K / 16];
    double sumf = 0;
    const uint8_t *wb = w;
    for (int64_t i = 0; i < n / block_size; i++, wb += type_size) {
        unpack(wb, block_size, u, dw, mw);                       /* one block */
        const int8_t *q = act_block(act_type, a, i, group, da, sums);
        for (int g = 0; g < block_size / group; g++) {
            int32_t isum = 0;
            for (int e = g * group; e < (g + 1) * group; e++) isum += (u[e] - offset) * q[e];
            double v = (double)dw[g] * isum;
            if (has_min) v += (double)mw[g] * sums[g];
            sumf += (double)da[g] * v;
        }
    }
    *s = (float)sumf;
}

/* name, weight block struct, activation type, block size, G, o, has_min (see unpack_generic.c) */
#define VEC_DOT_QUANT(wname, aname, ACT, BS, G, O, MIN)                                          \
    void vec_dot_##wname##_##aname##_generic(int64_t n, float *s, const void *w, const void *a,       \
                                             const float *a_sums) {                                \
        (void)a_sums; /* the sums are recomputed here: the generic code is the reference */      \
        vec_dot_quant(unpack_##wname, ACT, BS, (int)sizeof(block_##wname), G, O, MIN, n, s, w, a); \
    }

VEC_DOT_QUANT(q4_0, q8_0, LI_TYPE_Q8_0, QK4_0, 32, 8, 0)
VEC_DOT_QUANT(q4_1, q8_1, LI_TYPE_Q8_1, QK4_1, 32, 0, 1)
VEC_DOT_QUANT(q5_0, q8_0, LI_TYPE_Q8_0, QK5_0, 32, 16, 0)
VEC_DOT_QUANT(q5_1, q8_1, LI_TYPE_Q8_1, QK5_1, 32, 0, 1)
VEC_DOT_QUANT(q8_0, q8_0, LI_TYPE_Q8_0, QK8_0, 32, 128, 0)
VEC_DOT_QUANT(q2_K, q8_K, LI_TYPE_Q8_K, QK_K, 16, 0, 1)
VEC_DOT_QUANT(q3_K, q8_K, LI_TYPE_Q8_K, QK_K, 16, 4, 0)
VEC_DOT_QUANT(q4_K, q8_K, LI_TYPE_Q8_K, QK_K, 32, 0, 1)
VEC_DOT_QUANT(q5_K, q8_K, LI_TYPE_Q8_K, QK_K, 32, 0, 1)
VEC_DOT_QUANT(q6_K, q8_K, LI_TYPE_Q8_K, QK_K, 16, 32, 0)
VEC_DOT_QUANT(iq4_nl, q8_0, LI_TYPE_Q8_0, QK4_NL, 32, 128, 0)
VEC_DOT_QUANT(iq4_xs, q8_K, LI_TYPE_Q8_K, QK_K, 32, 128, 0)
VEC_DOT_QUANT(mxfp4, q8_0, LI_TYPE_Q8_0, QK_MXFP4, 32, 128, 0)
VEC_DOT_QUANT(tq1_0, q8_K, LI_TYPE_Q8_K, QK_K, 32, 1, 0)
VEC_DOT_QUANT(tq2_0, q8_K, LI_TYPE_Q8_K, QK_K, 32, 1, 0)
VEC_DOT_QUANT(iq2_xxs, q8_K, LI_TYPE_Q8_K, QK_K, 32, LI_O_IQ2, 0)
VEC_DOT_QUANT(iq2_xs, q8_K, LI_TYPE_Q8_K, QK_K, 16, LI_O_IQ2, 0)
VEC_DOT_QUANT(iq2_s, q8_K, LI_TYPE_Q8_K, QK_K, 16, LI_O_IQ2, 0)
VEC_DOT_QUANT(iq3_xxs, q8_K, LI_TYPE_Q8_K, QK_K, 32, LI_O_IQ3_XXS, 0)
VEC_DOT_QUANT(iq3_s, q8_K, LI_TYPE_Q8_K, QK_K, 32, LI_O_IQ3_S, 0)
VEC_DOT_QUANT(iq1_s, q8_K, LI_TYPE_Q8_K, QK_K, 32, LI_O_IQ1, 0)
VEC_DOT_QUANT(iq1_m, q8_K, LI_TYPE_Q8_K, QK_K, 16, LI_O_IQ1, 0)

/* float types: products in f32 (exact for f16/bf16 inputs), sums in double as ggml's generic f16 dot */
void vec_dot_f32_f32_generic(int64_t n, float *s, const void *w, const void *a, const float *a_sums) {
    (void)a_sums;
    const float *x = w, *y = a;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)x[i] * y[i];
    *s = (float)sum;
}

void vec_dot_f16_f16_generic(int64_t n, float *s, const void *w, const void *a, const float *a_sums) {
    (void)a_sums;
    const ggml_half *x = w, *y = a;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)(li_fp16_to_fp32(x[i]) * li_fp16_to_fp32(y[i]));
    *s = (float)sum;
}

void vec_dot_bf16_bf16_generic(int64_t n, float *s, const void *w, const void *a, const float *a_sums) {
    (void)a_sums;
    const ggml_bf16 *x = w, *y = a;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)(li_bf16_to_fp32(x[i]) * li_bf16_to_fp32(y[i]));
    *s = (float)sum;
}
