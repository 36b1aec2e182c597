/* quantize_generic.c -- activations: float32 rows -> the weight type's vec_dot_type.
 *
 * Ports of ggml's reference quantizers (quantize_row_q8_0_ref, _q8_1_ref,
 * _q8_K_ref in ggml/src/ggml-quants.c), with their rounding: Q8_0/Q8_1 use
 * roundf (half away from zero) of x * (1/d), d = amax/127; Q8_K uses
 * nearest_int (half to even) of x * (-127/max). The SIMD versions are checked
 * bit for bit against these and against the numpy oracle (src/localinfer/formats/activations.py).
 * One difference from ggml: an all-zero Q8_K block also zeroes bsums (ggml
 * leaves them unset).
 */
#include <math.h>
#include <stddef.h>

#include "core/li.h"
#include "generic/generic.h"

static inline int8_t round_away(float v) { return (int8_t)roundf(v); }

void quantize_row_q8_0_generic(const float *x, void *dst, int64_t n) {
    block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = li_fp32_to_fp16(d);
        for (int j = 0; j < QK8_0; j++) y[i].qs[j] = round_away(x[j] * id);
    }
}

/* The KV cache's q4_0 rows (ggml's quantize_row_q4_0_ref): d = max / -8 with max the signed element of
 * largest magnitude (the first one to reach it), q = min(15, (int8)(x * id + 8.5)), element j in the low
 * nibble of byte j and element j + 16 in its high nibble. */
void quantize_row_q4_0_generic(const float *x, void *dst, int64_t n) {
    block_q4_0 *y = dst;
    for (int64_t i = 0; i < n / QK4_0; i++, x += QK4_0) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK4_0; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]), max = x[j];
        const float d = max / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = li_fp32_to_fp16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            const int8_t lo = (int8_t)(x[j] * id + 8.5f), hi = (int8_t)(x[QK4_0 / 2 + j] * id + 8.5f);
            y[i].qs[j] = (uint8_t)((lo < 15 ? lo : 15) | (hi < 15 ? hi : 15) << 4);
        }
    }
}

void quantize_row_q8_1_generic(const float *x, void *dst, int64_t n) {
    block_q8_1 *y = dst;
    for (int64_t i = 0; i < n / QK8_1; i++, x += QK8_1) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_1; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = li_fp32_to_fp16(d);
        int sum = 0;
        for (int j = 0; j < QK8_1; j++) {
            y[i].qs[j] = round_away(x[j] * id);
            sum += y[i].qs[j];
        }
        /* clamped to the fp16 range as ggml does */
        y[i].s = li_fp32_to_fp16(fminf(65504.0f, fmaxf(-65504.0f, sum * d)));
    }
}

/* ggml's nearest_int: round half to even through the float adder (|v| < 2^22). */
static inline int nearest_int(float v) {
    const float val = v + 12582912.f;
    int i;
    memcpy(&i, &val, sizeof(int));
    return (i & 0x007fffff) - 0x00400000;
}

void quantize_row_q8_K_generic(const float *x, void *dst, int64_t n) {
    block_q8_K *y = dst;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < QK_K; j++) {
            const float ax = fabsf(x[j]);
            if (ax > amax) { amax = ax; max = x[j]; }
        }
        if (!amax) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) {
            const int v = nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < QK_K / 16; j++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) sum += y[i].qs[16 * j + l];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

void quantize_row_f32_generic(const float *x, void *dst, int64_t n) {
    memcpy(dst, x, (size_t)n * sizeof(float));
}

void quantize_row_f16_generic(const float *x, void *dst, int64_t n) {
    ggml_half *y = dst;
    for (int64_t i = 0; i < n; i++) y[i] = li_fp32_to_fp16(x[i]);
}

void quantize_row_bf16_generic(const float *x, void *dst, int64_t n) {
    ggml_bf16 *y = dst;
    for (int64_t i = 0; i < n; i++) y[i] = li_fp32_to_bf16(x[i]);
}

/* a_sums of li_vec_dot_fn: per block of a Q8_0 / Q8_1 row, {d, d * sum(qs)}. Both are exact
 * in f32: d is an fp16 value and |sum(qs)| <= 32 * 127 < 2^12, so d * sum has < 24 bits. */
int li_act_sums_count(int act_type, int64_t n) {
    return act_type == LI_TYPE_Q8_0 || act_type == LI_TYPE_Q8_1 ? (int)(2 * (n / 32)) : 0;
}

void li_act_sums(int act_type, const void *row, int64_t n, float *sums) {
    if (act_type != LI_TYPE_Q8_0 && act_type != LI_TYPE_Q8_1) return;
    const size_t size = act_type == LI_TYPE_Q8_0 ? sizeof(block_q8_0) : sizeof(block_q8_1);
    const size_t qs_offset = act_type == LI_TYPE_Q8_0 ? offsetof(block_q8_0, qs) : offsetof(block_q8_1, qs);
    for (int64_t b = 0; b < n / 32; b++) {
        const uint8_t *blk = (const uint8_t *)row + b * size;
        ggml_half dh;
        memcpy(&dh, blk, sizeof(dh));
        const int8_t *qs = (const int8_t *)(blk + qs_offset);
        int sum = 0;
        for (int j = 0; j < 32; j++) sum += qs[j];
        const float d = li_fp16_to_fp32(dh);
        sums[2 * b] = d;
        sums[2 * b + 1] = d * (float)sum;
    }
}
