/* ops.c -- the non-matmul ops of a transformer layer, in C: RMSNorm, RoPE, gated
 * activations and attention over an f16 KV cache.
 *
 * Each follows the numpy reference in src/localinfer/layers.py operation for operation
 * (tests/test_ops.py compares them); the arithmetic that changes results mirrors ggml:
 * RMSNorm sums squares in double; attention rounds Q and the softmax weights to f16 as
 * llama.cpp's non-flash path does with an f16 cache. Plain C, compiled at baseline flags:
 * these ops move a few KB per token, the matmuls are where the time goes.
 */
#include <math.h>
#include <stdlib.h>

#include "li.h"

/* y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, rows of `dim` floats. y may alias x. */
int li_rms_norm(const float *x, const float *w, float *y, int64_t n_rows, int64_t dim, float eps) {
    for (int64_t r = 0; r < n_rows; r++) {
        const float *xr = x + r * dim;
        float *yr = y + r * dim;
        double sum = 0.0;
        for (int64_t i = 0; i < dim; i++) sum += (double)xr[i] * (double)xr[i];
        const float scale = (float)(1.0 / sqrt(sum / (double)dim + (double)eps));
        for (int64_t i = 0; i < dim; i++) yr[i] = (xr[i] * scale) * w[i];
    }
    return 0;
}

/* In place on x (n_tok, n_head, head_dim) at positions pos (n_tok): pairs (2i, 2i+1) in
 * normal mode, (i, i + n_rot/2) in NeoX mode; angle = pos * inv_freq[i] in double. */
int li_rope(float *x, int64_t n_tok, int64_t n_head, int64_t head_dim, int64_t n_rot,
            const int64_t *pos, const double *inv_freq, int neox) {
    const int64_t half = n_rot / 2;
    float *cs = malloc(sizeof(float) * 2 * (size_t)half);
    if (!cs) return -1;
    for (int64_t t = 0; t < n_tok; t++) {
        for (int64_t i = 0; i < half; i++) {
            const double a = (double)pos[t] * inv_freq[i];
            cs[2 * i] = (float)cos(a);
            cs[2 * i + 1] = (float)sin(a);
        }
        for (int64_t h = 0; h < n_head; h++) {
            float *v = x + (t * n_head + h) * head_dim;
            for (int64_t i = 0; i < half; i++) {
                const int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
                const float c = cs[2 * i], s = cs[2 * i + 1], a = v[i0], b = v[i1];
                v[i0] = a * c - b * s;
                v[i1] = a * s + b * c;
            }
        }
    }
    free(cs);
    return 0;
}

/* y = silu(g) * u */
int li_silu_mul(const float *g, const float *u, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    return 0;
}

/* --- attention ------------------------------------------------------------------------ */

typedef struct {
    const float *q;                /* (n_q, n_head, head_dim) */
    const float *k, *v;            /* (n_kv, n_head_kv, head_dim), widened from the f16 cache once per
                                    * call: key j at position key_start + j */
    float *out;                    /* (n_q, n_head, head_dim) */
    const int64_t *q_pos;          /* (n_q) absolute positions */
    int64_t n_q, n_head, n_head_kv, head_dim, n_kv, key_start, window;
    float scale, softcap;
    int round_f16;
} attn_args;

static inline float round_f16(float x) { return li_fp16_to_fp32(li_fp32_to_fp16(x)); }

static void attn_rows(void *ctx, int ith, int nth) {
    const attn_args *a = ctx;
    const int64_t rows = a->n_q * a->n_head, group = a->n_head / a->n_head_kv, d = a->head_dim;
    float *p = malloc(sizeof(float) * (size_t)(a->n_kv + 2 * d));
    if (!p) return;
    float *qr = p + a->n_kv, *acc = qr + d;
    for (int64_t r = ith; r < rows; r += nth) {
        const int64_t t = r / a->n_head, h = r % a->n_head, hk = h / group, qp = a->q_pos[t];
        const float *q = a->q + r * d;
        for (int64_t i = 0; i < d; i++) qr[i] = a->round_f16 ? round_f16(q[i]) : q[i];
        float max = -INFINITY;
        for (int64_t j = 0; j < a->n_kv; j++) {
            const int64_t kp = a->key_start + j;
            if (kp > qp || (a->window > 0 && kp <= qp - a->window)) { p[j] = -INFINITY; continue; }
            const float *kj = a->k + (j * a->n_head_kv + hk) * d;
            float s = 0.0f;
            for (int64_t i = 0; i < d; i++) s += qr[i] * kj[i];
            s *= a->scale;
            if (a->softcap > 0.0f) s = tanhf(s / a->softcap) * a->softcap;
            p[j] = s;
            if (s > max) max = s;
        }
        double sum = 0.0;
        for (int64_t j = 0; j < a->n_kv; j++) {
            const float e = p[j] == -INFINITY ? 0.0f : expf(p[j] - max);
            p[j] = e;
            sum += e;
        }
        const float inv = (float)sum > 0.0f ? 1.0f / (float)sum : 0.0f;
        for (int64_t i = 0; i < d; i++) acc[i] = 0.0f;
        for (int64_t j = 0; j < a->n_kv; j++) {
            if (p[j] == 0.0f) continue;
            const float w = a->round_f16 ? round_f16(p[j] * inv) : p[j] * inv;
            const float *vj = a->v + (j * a->n_head_kv + hk) * d;
            for (int64_t i = 0; i < d; i++) acc[i] += w * vj[i];
        }
        float *o = a->out + r * d;
        for (int64_t i = 0; i < d; i++) o[i] = acc[i];
    }
    free(p);
}

/* Causal (and optionally sliding-window, soft-capped) attention of n_q queries over an f16
 * cache, grouped K/V heads; work split over (query, head) rows on the thread pool. */
int li_attention_f16(const float *q, const void *k, const void *v, float *out, int64_t n_q, int64_t n_head,
                     int64_t n_head_kv, int64_t head_dim, int64_t n_kv, const int64_t *q_pos, int64_t key_start,
                     float scale, int64_t window, float softcap) {
    if (n_head_kv <= 0 || n_head % n_head_kv) return -1;
    /* widen K and V once: every query reads every key, so converting in the inner loop
     * would cost n_q times more (exact: f16 -> f32 loses nothing) */
    const int64_t n = n_kv * n_head_kv * head_dim;
    float *kv = malloc(sizeof(float) * 2 * (size_t)(n > 0 ? n : 1));
    if (!kv) return -2;
    const ggml_half *k16 = k, *v16 = v;
    for (int64_t i = 0; i < n; i++) {
        kv[i] = li_fp16_to_fp32(k16[i]);
        kv[n + i] = li_fp16_to_fp32(v16[i]);
    }
    attn_args a = {q, kv, kv + n, out, q_pos, n_q, n_head, n_head_kv, head_dim, n_kv, key_start, window, scale,
                   softcap, 1};
    const int64_t work = n_q * n_head * n_kv * head_dim;
    li_pool_run(attn_rows, &a, work < 32768 ? 1 : (int)(n_q * n_head));
    free(kv);
    return 0;
}
