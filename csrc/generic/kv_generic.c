/* kv_generic.c -- P.V over one value row of a q8_0 / q4_0 KV cache (core/attention_kv.c), readable:
 * the row's d values are dequantized block by block (x = q * d, ggml's dequantize_row_q8_0 / _q4_0)
 * and added, weighted, to the outputs of the na query heads that share the row:
 *   out[h*d + e] += p[h*ldp] * x[e]
 * One f32 mul for x, one mul and one add per output (the build turns off contraction into FMA), so
 * the SIMD versions (x86/kv_avx2.c) give the same bits.
 */
#include "core/li.h"
#include "generic/generic.h"

static void add_block(const float x[32], const float *p, int64_t ldp, int64_t na, float *out, int64_t d) {
    for (int64_t h = 0; h < na; h++) {
        const float w = p[h * ldp];
        float *o = out + h * d;
        for (int e = 0; e < 32; e++) o[e] = o[e] + w * x[e];
    }
}

void li_axpy_kv_q8_0_generic(int64_t d, const void *v, const float *p, int64_t ldp, int64_t na, float *out) {
    const block_q8_0 *b = v;
    float x[32];
    for (int64_t i = 0; i < d / QK8_0; i++) {
        const float s = li_fp16_to_fp32(b[i].d);
        for (int e = 0; e < 32; e++) x[e] = (float)b[i].qs[e] * s;
        add_block(x, p, ldp, na, out + i * QK8_0, d);
    }
}

void li_axpy_kv_q4_0_generic(int64_t d, const void *v, const float *p, int64_t ldp, int64_t na, float *out) {
    const block_q4_0 *b = v;
    float x[32];
    for (int64_t i = 0; i < d / QK4_0; i++) {
        const float s = li_fp16_to_fp32(b[i].d);
        for (int e = 0; e < 16; e++) {   /* element e in the low nibble of byte e, e + 16 in its high one */
            x[e] = (float)((b[i].qs[e] & 0x0f) - 8) * s;
            x[e + 16] = (float)((b[i].qs[e] >> 4) - 8) * s;
        }
        add_block(x, p, ldp, na, out + i * QK4_0, d);
    }
}
