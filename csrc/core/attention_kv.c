/* attention_kv.c -- causal attention over a KV cache whose K and/or V rows are ggml blocks (q8_0,
 * q4_0; llama.cpp's -ctk / -ctv), read in place: no dequantized copy of the cache is ever made.
 *
 * Per work unit (one query token t, one KV head hk, the `group` query heads sharing it):
 *   qx     = q rows in K's vec_dot_type (q8_0 for q8_0/q4_0 keys, as ggml's mul_mat quantizes the
 *            activations; f16 for f16 keys, as attention.c rounds them)
 *   scores = K_row . qx          the type's vec_dot / vec_dot_rows: the ISA's SIMD dot products
 *                                (x86 AVX2 / AVX-512, NEON) from the traits table, LI_DOT_ROWS keys at once
 *   P      = f16(softmax(scores * scale, causal / sliding-window mask, optional soft cap))
 *   out    = sum_j P_j * dequantize(V_j)   key after key: each block of the row is widened in
 *                                registers and added, weighted, to the group's outputs (axpy_kv_*:
 *                                generic/kv_generic.c, x86/kv_avx2.c; f16 values: dequantize + add)
 * A row of the cache is one (key, KV head): d / 32 blocks; keys are n_head_kv rows apart.
 * Both f16 goes to li_attention_f16 (attention.c), unchanged. The numpy oracle is
 * ops_reference.attention with k_type / v_type (tests/kernels/test_attention_kv.py).
 */
#include <math.h>
#include <stdatomic.h>

#include "core/li.h"
#include "generic/generic.h"

#define LI_ATTN_KV_PARALLEL_MIN (1 << 20)   /* multiply-adds below which waking the pool costs more */

typedef struct {
    const float *q;                /* (n_q, n_head, d) */
    const uint8_t *k, *v;          /* (n_kv, n_head_kv, row bytes): key j at position key_start + j */
    float *out;                    /* (n_q, n_head, d) */
    const int64_t *q_pos;          /* (n_q) absolute positions */
    const float *sinks;            /* (n_head) sink logits (gpt-oss), or NULL */
    int64_t n_q, n_head, n_head_kv, d, n_kv, key_start, window;
    size_t k_row, v_row, q_row;    /* bytes of one head's row: K, V, and the query in K's vec_dot_type */
    int n_sums;                    /* a_sums floats per query row (li_act_sums; 0 for f16) */
    float scale, softcap;
    const li_type_traits *kt, *vt, *qt;
    li_softmax_f16_fn softmax;
    li_axpy_kv_fn axpy;            /* P.V of one value row; NULL: f16 values (dequantize + add_scaled) */
    atomic_int error;
} kv_job;

/* out[h][e] += p[h] * x[e] for the group's heads: the dequantized value row x shared by all of them */
static void add_scaled(float *out, int64_t d, const float *x, const float *p, int64_t ldp, int64_t group) {
    for (int64_t h = 0; h < group; h++) {
        const float w = p[h * ldp];
        float *o = out + h * d;
        for (int64_t e = 0; e < d; e++) o[e] += w * x[e];
    }
}

static void task_attend_kv(void *ctx, int ith, int nth) {
    kv_job *a = ctx;
    const int64_t group = a->n_head / a->n_head_kv, d = a->d, n_kv = a->n_kv;
    const size_t ld_k = (size_t)a->n_head_kv * a->k_row, ld_v = (size_t)a->n_head_kv * a->v_row;
    /* scratch: s (group, n_kv) | x (d) | sums (group, n_sums) | qx (group, q_row bytes) */
    const size_t floats = (size_t)(group * n_kv + d + group * a->n_sums);
    float *s = li_scratch(LI_SCRATCH_TASK, sizeof(float) * floats + (size_t)group * a->q_row + 64);
    if (!s) { atomic_store(&a->error, LI_ENOMEM); return; }
    float *x = s + group * n_kv, *sums = x + d;
    uint8_t *qx = (uint8_t *)(sums + group * a->n_sums);
    for (int64_t u = ith; u < a->n_q * a->n_head_kv; u += nth) {
        const int64_t t = u / a->n_head_kv, hk = u % a->n_head_kv, qp = a->q_pos[t];
        /* visible keys: position in (qp - window, qp], i.e. j in [j0, j1) */
        int64_t j0 = 0, j1 = qp - a->key_start + 1;
        if (a->window > 0 && qp - a->window + 1 - a->key_start > 0) j0 = qp - a->window + 1 - a->key_start;
        if (j1 > n_kv) j1 = n_kv;
        const float *qs = a->q + (t * a->n_head + hk * group) * d;
        float *o = a->out + (t * a->n_head + hk * group) * d;
        for (int64_t i = 0; i < group * d; i++) o[i] = 0.0f;
        if (j1 <= j0) continue;   /* no visible key: zeros, as the reference's all-masked rows */
        const uint8_t *k0 = a->k + hk * a->k_row, *v0 = a->v + hk * a->v_row;
        for (int64_t h = 0; h < group; h++) {
            uint8_t *qh = qx + h * a->q_row;
            float *sh = s + h * n_kv, *sum_h = a->n_sums ? sums + h * a->n_sums : NULL;
            a->qt->from_float(qs + h * d, qh, d);
            if (sum_h) li_act_sums(a->kt->vec_dot_type, qh, d, sum_h);
            int64_t j = j0;
            if (a->kt->vec_dot_rows)
                for (; j + LI_DOT_ROWS <= j1; j += LI_DOT_ROWS)
                    a->kt->vec_dot_rows(d, sh + j, k0 + j * ld_k, ld_k, LI_DOT_ROWS, qh, sum_h);
            for (; j < j1; j++) a->kt->vec_dot(d, sh + j, k0 + j * ld_k, qh, sum_h);
            a->softmax(sh + j0, j1 - j0, a->scale, a->softcap, a->sinks ? a->sinks[hk * group + h] : -INFINITY);
        }
        for (int64_t j = j0; j < j1; j++) {
            if (a->axpy) {
                a->axpy(d, v0 + j * ld_v, s + j, n_kv, group, o);
            } else {
                a->vt->dequantize(v0 + j * ld_v, x, d);
                add_scaled(o, d, x, s + j, n_kv, group);
            }
        }
    }
}

static int kv_type_ok(int type) { return type == LI_TYPE_F16 || type == LI_TYPE_Q8_0 || type == LI_TYPE_Q4_0; }

int li_attention_kv(const float *q, int k_type, const void *k, int v_type, const void *v, float *out, int64_t n_q,
                    int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t n_kv, const int64_t *q_pos,
                    int64_t key_start, float scale, int64_t window, float softcap, const float *sinks) {
    if (!kv_type_ok(k_type) || !kv_type_ok(v_type)) return LI_ETYPE;
    if (k_type == LI_TYPE_F16 && v_type == LI_TYPE_F16)
        return li_attention_f16(q, k, v, out, n_q, n_head, n_head_kv, head_dim, n_kv, q_pos, key_start, scale,
                                window, softcap, sinks);
    if (n_head_kv <= 0 || n_head % n_head_kv || head_dim <= 0 || n_q < 0 || n_kv < 0) return LI_EINVAL;
    kv_job a = {0};
    a.kt = li_traits(k_type), a.vt = li_traits(v_type), a.qt = li_traits(a.kt->vec_dot_type);
    if (head_dim % a.kt->block_size || head_dim % a.vt->block_size || head_dim % a.qt->block_size)
        return LI_EINVAL;
    if (n_q == 0) return LI_OK;
    a.q = q, a.k = k, a.v = v, a.out = out, a.q_pos = q_pos, a.sinks = sinks;
    a.n_q = n_q, a.n_head = n_head, a.n_head_kv = n_head_kv, a.d = head_dim, a.n_kv = n_kv;
    a.key_start = key_start, a.window = window, a.scale = scale, a.softcap = softcap;
    a.k_row = (size_t)(head_dim / a.kt->block_size * a.kt->type_size);
    a.v_row = (size_t)(head_dim / a.vt->block_size * a.vt->type_size);
    a.q_row = (size_t)(head_dim / a.qt->block_size * a.qt->type_size);
    a.n_sums = li_act_sums_count(a.kt->vec_dot_type, head_dim);
    const li_isa_kernels *kern = li_active_kernels();
    a.softmax = kern->softmax_f16 ? kern->softmax_f16 : li_softmax_f16_generic;
    if (v_type == LI_TYPE_Q8_0) a.axpy = kern->axpy_kv_q8_0 ? kern->axpy_kv_q8_0 : li_axpy_kv_q8_0_generic;
    if (v_type == LI_TYPE_Q4_0) a.axpy = kern->axpy_kv_q4_0 ? kern->axpy_kv_q4_0 : li_axpy_kv_q4_0_generic;
    const double macs = 2.0 * (double)n_q * (double)n_head * (double)n_kv * (double)head_dim;
    li_pool_run(task_attend_kv, &a, macs >= LI_ATTN_KV_PARALLEL_MIN ? (int)(n_q * n_head_kv) : 1);
    return atomic_load(&a.error) ? LI_ENOMEM : LI_OK;   /* a task's scratch (the only error a task sets) */
}
