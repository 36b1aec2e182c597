/* attention_generic.c -- the readable versions of the attention's row kernels (li_dot_rows_fn
 * and the others in core/li.h): plain loops in the order the SIMD ones keep, 16 lanes and the
 * same reduction tree for the dots. core/attention.c uses them where the active table has none.
 */
#include <math.h>

#include "core/li.h"
#include "generic/generic.h"

static inline float round_f16(float x) { return li_fp16_to_fp32(li_fp32_to_fp16(x)); }

/* p = exp(cap(p * scale) - max) in place; returns their sum in double, with the sink's term */
static double softmax_exp(float *p, int64_t n, float scale, float softcap, float sink) {
    float max = sink;   /* the sink's logit joins the max (-INFINITY: no sink) */
    for (int64_t j = 0; j < n; j++) {
        float x = p[j] * scale;
        if (softcap > 0.0f) x = tanhf(x / softcap) * softcap;
        p[j] = x;
        if (x > max) max = x;
    }
    double sum = 0.0;
    for (int64_t j = 0; j < n; j++) {
        p[j] = expf(p[j] - max);
        sum += p[j];
    }
    if (sink > -INFINITY) sum += expf(sink - max);   /* ... and the denominator, then attends to nothing */
    return sum;
}

/* li_softmax_f16_fn */
void li_softmax_f16_generic(float *p, int64_t n, float scale, float softcap, float sink) {
    const float inv = 1.0f / (float)softmax_exp(p, n, scale, softcap, sink);
    for (int64_t j = 0; j < n; j++) p[j] = round_f16(p[j] * inv);
}

/* li_softmax_f32_fn: a division per element, as ops_reference.softmax (x * 1.0f is exact) */
void li_softmax_f32_generic(float *p, int64_t n) {
    const float sum = (float)softmax_exp(p, n, 1.0f, 0.0f, -INFINITY);
    for (int64_t j = 0; j < n; j++) p[j] /= sum;
}

/* li_round_f16_fn */
void li_round_f16_generic(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = round_f16(x[i]);
}

/* li_widen_f16_fn: exact */
void li_widen_f16_generic(const ggml_half *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = li_fp16_to_fp32(x[i]);
}

/* The readable version of li_dot_rows_fn: 16 lanes in a plain array, the same tree. */
void li_dot_rows_generic(int64_t n, const float *a, int na, int64_t lda, const float *b, int64_t nb,
                         int64_t ldb, float *c, int64_t ldc) {
    for (int i = 0; i < na; i++) {
        for (int64_t j = 0; j < nb; j++) {
            float acc[16] = {0};
            const float *ar = a + i * lda, *br = b + j * ldb;
            for (int64_t l = 0; l < n; l += 16)
                for (int e = 0; e < 16; e++) acc[e] += ar[l + e] * br[l + e];
            for (int w = 8; w >= 1; w /= 2)
                for (int e = 0; e < w; e++) acc[e] += acc[e + w];
            c[i * ldc + j] = acc[0];
        }
    }
}

/* li_dot_rows_f16_fn: the same with b widened element by element (exact) */
void li_dot_rows_f16_generic(int64_t n, const float *a, int na, int64_t lda, const ggml_half *b, int64_t nb,
                             int64_t ldb, float *c, int64_t ldc) {
    for (int i = 0; i < na; i++) {
        for (int64_t j = 0; j < nb; j++) {
            float acc[16] = {0};
            const float *ar = a + i * lda;
            const ggml_half *br = b + j * ldb;
            for (int64_t l = 0; l < n; l += 16)
                for (int e = 0; e < 16; e++) acc[e] += ar[l + e] * li_fp16_to_fp32(br[l + e]);
            for (int w = 8; w >= 1; w /= 2)
                for (int e = 0; e < w; e++) acc[e] += acc[e + w];
            c[i * ldc + j] = acc[0];
        }
    }
}

/* li_axpy_rows_f16_fn: P.V key after key */
void li_axpy_rows_f16_generic(int64_t n, const float *p, int na, int64_t ldp, const ggml_half *v, int64_t nv,
                              int64_t ldv, float *out, int64_t ldo) {
    for (int i = 0; i < na; i++) {
        float *o = out + i * ldo;
        for (int64_t e = 0; e < n; e++) o[e] = 0.0f;
        for (int64_t j = 0; j < nv; j++) {
            const float w = p[i * ldp + j];
            for (int64_t e = 0; e < n; e++) o[e] += w * li_fp16_to_fp32(v[j * ldv + e]);
        }
    }
}
