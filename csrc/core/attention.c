/* attention.c -- causal attention over an f16 KV cache, as llama.cpp computes it without flash
 * attention (the reference data's setting):
 *
 *   scores = K . f16(Q)          (n_kv, n_q) per head, f32 lanes, tinyBLAS order (li_dot_rows_fn)
 *   P      = f16(softmax(scores * scale, causal / sliding-window mask, optional soft cap; a sink logit
 *            per head in the denominator, gpt-oss))
 *   out    = V^T . P             the dot runs over keys (llama.cpp stores V transposed)
 *
 * K is read in place from the f16 cache (rows of a multiple of 16 elements; otherwise it is
 * widened once per call into zero-padded rows). For a batch of queries V is widened once per call
 * into Vt (d, n_kvp) per KV head, zero-padded to 16 keys, so that P.V^T runs over keys as above;
 * for a few queries (decode) that would cost as much as the attention itself, so P.V is summed key
 * after key straight from the cache instead (llama.cpp's decode takes yet another order, ggml's
 * vec_dot_f16). Work unit: one token and one KV head, i.e. the `group` query heads that share K/V
 * and the same visible keys; units are dealt round-robin to the pool's threads, which balances the
 * causal triangle. Only the visible keys of a unit are scored.
 * The numpy oracle is ops_reference.attention (tests/kernels/test_ops.py).
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "core/li.h"
#include "generic/generic.h"

#define LI_ATTN_BATCH 16                 /* queries from which V is widened and transposed once per call */
#define LI_ATTN_PARALLEL_MIN (1 << 20)   /* multiply-adds below which waking the pool costs more */

typedef struct {
    const float *q;                /* (n_q, n_head, d) */
    const ggml_half *k16, *v16;    /* (n_kv, n_head_kv, d) f16: key j at position key_start + j */
    float *kf;                     /* (n_head_kv, n_kv, dp) widened K, or NULL: K read in place */
    float *vt;                     /* (n_head_kv, d, n_kvp) widened, transposed V, or NULL: in place */
    float *out;                    /* (n_q, n_head, d) */
    const int64_t *q_pos;          /* (n_q) absolute positions */
    const float *sinks;            /* (n_head) sink logits (gpt-oss), or NULL */
    int64_t n_q, n_head, n_head_kv, d, dp, n_kv, n_kvp, key_start, window;
    float scale, softcap;
    li_dot_rows_fn dot;
    li_dot_rows_f16_fn dot_f16;
    li_axpy_rows_f16_fn axpy_f16;
    li_softmax_f16_fn softmax;
    li_round_f16_fn round;
    li_widen_f16_fn widen;
    atomic_int error;
} attn_job;

static int64_t up16(int64_t n) { return (n + 15) / 16 * 16; }

/* widen keys [lo, hi) of every KV head (K only if kf, V only if vt); thread ith of nth takes its share */
static void task_widen(void *ctx, int ith, int nth) {
    attn_job *a = ctx;
    const int64_t per = (a->n_kv + nth - 1) / nth, lo = ith * per, hi = lo + per < a->n_kv ? lo + per : a->n_kv;
    const int64_t d = a->d, dp = a->dp, n_kvp = a->n_kvp;
    float *tmp = li_scratch(LI_SCRATCH_TASK, sizeof(float) * (size_t)(16 * d));   /* 16 keys' V rows */
    if (!tmp) { atomic_store(&a->error, LI_ENOMEM); return; }
    for (int64_t hk = 0; hk < a->n_head_kv; hk++) {
        for (int64_t j = lo; a->kf && j < hi; j++) {
            float *kr = a->kf + (hk * a->n_kv + j) * dp;
            a->widen(a->k16 + (j * a->n_head_kv + hk) * d, kr, d);
            for (int64_t i = d; i < dp; i++) kr[i] = 0.0f;
        }
        /* V transposed 16 keys at a time: each of Vt's rows gets 16 adjacent floats (a cache line)
         * at once, not one float per key scattered over d lines */
        for (int64_t j0 = lo; a->vt && j0 < hi; j0 += 16) {
            const int64_t nj = hi - j0 < 16 ? hi - j0 : 16;
            for (int64_t jj = 0; jj < nj; jj++) a->widen(a->v16 + ((j0 + jj) * a->n_head_kv + hk) * d, tmp + jj * d, d);
            float *vt = a->vt + hk * d * n_kvp + j0;
            for (int64_t i = 0; i < d; i++)
                for (int64_t jj = 0; jj < nj; jj++) vt[i * n_kvp + jj] = tmp[jj * d + i];
        }
        if (a->vt && ith == nth - 1)   /* the zero columns past n_kv */
            for (int64_t i = 0; i < d; i++)
                for (int64_t j = a->n_kv; j < n_kvp; j++) a->vt[(hk * d + i) * n_kvp + j] = 0.0f;
    }
}

static void task_attend(void *ctx, int ith, int nth) {
    attn_job *a = ctx;
    const int64_t group = a->n_head / a->n_head_kv, d = a->d, dp = a->dp, n_kvp = a->n_kvp;
    const int64_t ld_kv = a->n_head_kv * d;   /* between keys in the cache */
    /* scratch: q (group, dp) | s (group, n_kvp) */
    float *q = li_scratch(LI_SCRATCH_TASK, sizeof(float) * (size_t)(group * (dp + n_kvp)));
    if (!q) { atomic_store(&a->error, LI_ENOMEM); return; }
    float *s = q + group * dp;
    for (int64_t u = ith; u < a->n_q * a->n_head_kv; u += nth) {
        const int64_t t = u / a->n_head_kv, hk = u % a->n_head_kv, qp = a->q_pos[t];
        /* visible keys: position in (qp - window, qp], i.e. j in [j0, j1) */
        int64_t j0 = 0, j1 = qp - a->key_start + 1;
        if (a->window > 0 && qp - a->window + 1 - a->key_start > 0) j0 = qp - a->window + 1 - a->key_start;
        if (j1 > a->n_kv) j1 = a->n_kv;
        const float *qs = a->q + (t * a->n_head + hk * group) * d;
        float *o = a->out + (t * a->n_head + hk * group) * d;
        if (j1 <= j0) {   /* no visible key: zeros, as the reference's all-masked rows */
            for (int64_t i = 0; i < group * d; i++) o[i] = 0.0f;
            continue;
        }
        for (int64_t h = 0; h < group; h++) {
            a->round(qs + h * d, q + h * dp, d);
            for (int64_t i = d; i < dp; i++) q[h * dp + i] = 0.0f;
        }
        if (a->kf) a->dot(dp, q, (int)group, dp, a->kf + (hk * a->n_kv + j0) * dp, j1 - j0, dp, s + j0, n_kvp);
        else a->dot_f16(d, q, (int)group, dp, a->k16 + j0 * ld_kv + hk * d, j1 - j0, ld_kv, s + j0, n_kvp);
        const int64_t b0 = j0 / 16 * 16, b1 = up16(j1);   /* the 16-aligned span P.V^T runs over */
        for (int64_t h = 0; h < group; h++) {
            float *p = s + h * n_kvp;
            a->softmax(p + j0, j1 - j0, a->scale, a->softcap, a->sinks ? a->sinks[hk * group + h] : -INFINITY);
            if (!a->vt) continue;
            for (int64_t j = b0; j < j0; j++) p[j] = 0.0f;
            for (int64_t j = j1; j < b1; j++) p[j] = 0.0f;
        }
        if (a->vt) a->dot(b1 - b0, s + b0, (int)group, n_kvp, a->vt + hk * d * n_kvp + b0, d, n_kvp, o, d);
        else a->axpy_f16(d, s + j0, (int)group, n_kvp, a->v16 + j0 * ld_kv + hk * d, j1 - j0, ld_kv, o, d);
    }
}

/* Causal (and optionally sliding-window, soft-capped) attention of n_q queries over an f16
 * cache with grouped K/V heads. */
int li_attention_f16(const float *q, const void *k, const void *v, float *out, int64_t n_q, int64_t n_head,
                     int64_t n_head_kv, int64_t head_dim, int64_t n_kv, const int64_t *q_pos, int64_t key_start,
                     float scale, int64_t window, float softcap, const float *sinks) {
    if (n_head_kv <= 0 || n_head % n_head_kv || head_dim <= 0 || n_q < 0 || n_kv < 0) return LI_EINVAL;
    if (n_q == 0) return LI_OK;
    attn_job a = {0};
    a.q = q, a.k16 = k, a.v16 = v, a.out = out, a.q_pos = q_pos, a.sinks = sinks;
    a.n_q = n_q, a.n_head = n_head, a.n_head_kv = n_head_kv, a.d = head_dim, a.dp = up16(head_dim);
    a.n_kv = n_kv, a.n_kvp = up16(n_kv > 0 ? n_kv : 1), a.key_start = key_start, a.window = window;
    a.scale = scale, a.softcap = softcap;
    const li_isa_kernels *kern = li_active_kernels();
    a.dot = kern->dot_rows ? kern->dot_rows : li_dot_rows_generic;
    a.dot_f16 = kern->dot_rows_f16 ? kern->dot_rows_f16 : li_dot_rows_f16_generic;
    a.axpy_f16 = kern->axpy_rows_f16 ? kern->axpy_rows_f16 : li_axpy_rows_f16_generic;
    a.softmax = kern->softmax_f16 ? kern->softmax_f16 : li_softmax_f16_generic;
    a.round = kern->round_f16 ? kern->round_f16 : li_round_f16_generic;
    a.widen = kern->widen_f16 ? kern->widen_f16 : li_widen_f16_generic;
    const int in_place = head_dim % 16 == 0;
    const int widen_k = !in_place, widen_v = !in_place || n_q >= LI_ATTN_BATCH || li_batched_rows();
    const size_t k_floats = widen_k ? (size_t)n_kv * (size_t)a.dp : 0;
    const size_t v_floats = widen_v ? (size_t)head_dim * (size_t)a.n_kvp : 0;
    if (widen_k || widen_v) {
        float *buf = li_scratch(LI_SCRATCH_CALL, sizeof(float) * (size_t)n_head_kv * (k_floats + v_floats));
        if (!buf) return LI_ENOMEM;
        a.kf = widen_k ? buf : NULL;
        a.vt = widen_v ? buf + (size_t)n_head_kv * k_floats : NULL;
        const double cost = (double)n_kv * (double)n_head_kv * (double)head_dim;
        li_pool_run(task_widen, &a, cost >= LI_ATTN_PARALLEL_MIN ? 2 : 1);
    }
    const double macs = 2.0 * (double)n_q * (double)n_head * (double)n_kv * (double)head_dim;
    li_pool_run(task_attend, &a, macs >= LI_ATTN_PARALLEL_MIN ? (int)(n_q * n_head_kv) : 1);
    return atomic_load(&a.error) ? LI_ENOMEM : LI_OK;   /* a task's scratch (the only error a task sets) */
}
