/* ops.c -- the non-matmul ops of a transformer layer, in C: RMSNorm, LayerNorm, RoPE, gated
 * activations (attention is attention.c; the readable gating and LayerNorm row kernels
 * generic/act_generic.c, generic/norm_generic.c).
 *
 * Each follows the numpy reference in src/localinfer/backend/ops_reference.py operation for operation
 * (tests/kernels/test_ops.py compares them); the arithmetic that changes results mirrors ggml:
 * RMSNorm sums squares in double; attention rounds Q and the softmax weights to f16 as
 * llama.cpp's non-flash path does with an f16 cache. Plain C, compiled at baseline flags:
 * these ops move a few KB per token, the matmuls are where the time goes.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "core/li.h"
#include "generic/generic.h"

/* Row-wise ops split over the pool when a call has this many elements (a prefill; a decode
 * step's few hundred floats stay on the calling thread). Rows are independent, so the split
 * does not change any result. */
#define LI_OPS_PARALLEL_MIN (1 << 15)

typedef struct {
    const float *x, *w;
    float *y;
    int64_t n_rows, dim;
    float eps;
} norm_job;

static void task_norm(void *ctx, int ith, int nth) {
    const norm_job *j = ctx;
    const int64_t lo = j->n_rows * ith / nth, hi = j->n_rows * (ith + 1) / nth, dim = j->dim;
    for (int64_t r = lo; r < hi; r++) {
        const float *xr = j->x + r * dim;
        float *yr = j->y + r * dim;
        double sum = 0.0;
        for (int64_t i = 0; i < dim; i++) sum += (double)xr[i] * (double)xr[i];
        const float scale = (float)(1.0 / sqrt(sum / (double)dim + (double)j->eps));
        for (int64_t i = 0; i < dim; i++) yr[i] = (xr[i] * scale) * j->w[i];
    }
}

/* y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, rows of `dim` floats. y may alias x. */
int li_rms_norm(const float *x, const float *w, float *y, int64_t n_rows, int64_t dim, float eps) {
    norm_job j = {x, w, y, n_rows, dim, eps};
    li_pool_run(task_norm, &j, n_rows > 1 && n_rows * dim >= LI_OPS_PARALLEL_MIN ? 2 : 1);
    return LI_OK;
}

typedef struct {
    const float *x, *w, *b;
    float *y;
    int64_t n_rows, dim;
    double eps;
    li_norm_row_fn norm_row;
} layer_norm_job;

static void task_layer_norm(void *ctx, int ith, int nth) {
    const layer_norm_job *j = ctx;
    const int64_t lo = j->n_rows * ith / nth, hi = j->n_rows * (ith + 1) / nth, dim = j->dim;
    for (int64_t r = lo; r < hi; r++) j->norm_row(j->x + r * dim, j->w, j->b, j->y + r * dim, dim, j->eps);
}

/* y[r] = (x[r] - mean) / sqrt(var + eps) * w + b (b may be NULL), rows of `dim` floats, as
 * ops_reference.layer_norm (the row kernel: li_norm_row_fn in core/li.h). y may alias x. eps is a
 * double because the reference adds it to the double variance. */
int li_layer_norm(const float *x, const float *w, const float *b, float *y, int64_t n_rows, int64_t dim,
                  double eps) {
    if (n_rows < 0 || dim < 0) return LI_EINVAL;
    if (n_rows == 0 || dim == 0) return LI_OK;
    const li_isa_kernels *kern = li_active_kernels();
    layer_norm_job j = {x, w, b, y, n_rows, dim, eps, kern->norm_row ? kern->norm_row : li_norm_row_generic};
    li_pool_run(task_layer_norm, &j, n_rows > 1 && n_rows * dim >= LI_OPS_PARALLEL_MIN ? 2 : 1);
    return LI_OK;
}

typedef struct {
    float *x;
    int64_t n_tok, n_head, head_dim, n_rot;
    const int64_t *pos;
    const double *inv_freq;
    int neox;
    atomic_int failed;
} rope_job;

static void task_rope(void *ctx, int ith, int nth) {
    rope_job *j = ctx;
    const int64_t lo = j->n_tok * ith / nth, hi = j->n_tok * (ith + 1) / nth, half = j->n_rot / 2;
    if (lo >= hi) return;
    float *cs = li_scratch(LI_SCRATCH_TASK, sizeof(float) * 2 * (size_t)(half > 0 ? half : 1));
    if (!cs) { atomic_store(&j->failed, 1); return; }
    for (int64_t t = lo; t < hi; t++) {
        for (int64_t i = 0; i < half; i++) {
            const double a = (double)j->pos[t] * j->inv_freq[i];
            cs[2 * i] = (float)cos(a);
            cs[2 * i + 1] = (float)sin(a);
        }
        for (int64_t h = 0; h < j->n_head; h++) {
            float *v = j->x + (t * j->n_head + h) * j->head_dim;
            for (int64_t i = 0; i < half; i++) {
                const int64_t i0 = j->neox ? i : 2 * i, i1 = j->neox ? i + half : 2 * i + 1;
                const float c = cs[2 * i], s = cs[2 * i + 1], a = v[i0], b = v[i1];
                v[i0] = a * c - b * s;
                v[i1] = a * s + b * c;
            }
        }
    }
}

/* In place on x (n_tok, n_head, head_dim) at positions pos (n_tok): pairs (2i, 2i+1) in
 * normal mode, (i, i + n_rot/2) in NeoX mode; angle = pos * inv_freq[i] in double. */
int li_rope(float *x, int64_t n_tok, int64_t n_head, int64_t head_dim, int64_t n_rot,
            const int64_t *pos, const double *inv_freq, int neox) {
    rope_job j = {x, n_tok, n_head, head_dim, n_rot, pos, inv_freq, neox, 0};
    li_pool_run(task_rope, &j, n_tok > 1 && n_tok * n_head * head_dim >= LI_OPS_PARALLEL_MIN ? 2 : 1);
    return atomic_load(&j.failed) ? LI_ENOMEM : LI_OK;   /* a task's cos/sin scratch */
}

typedef struct {
    const float *g, *u, *table;
    float *y;
    int64_t ldg, ldu, n_rows, n_cols;
    void (*silu_mul)(const float *, const float *, float *, int64_t);
    void (*geglu)(const float *, const float *, float *, int64_t, const float *);
} glu_job;

static void task_glu(void *ctx, int ith, int nth) {
    const glu_job *j = ctx;
    /* by rows, or by 16-element pieces of the one row of a decode step */
    const int64_t units = j->n_rows > 1 ? j->n_rows : (j->n_cols + 15) / 16;
    const int64_t lo = units * ith / nth, hi = units * (ith + 1) / nth;
    for (int64_t t = lo; t < hi; t++) {
        int64_t r = t, c0 = 0, n = j->n_cols;
        if (j->n_rows <= 1) {
            r = 0, c0 = t * 16;
            n = j->n_cols - c0 < 16 ? j->n_cols - c0 : 16;
        }
        const float *g = j->g + r * j->ldg + c0, *u = j->u + r * j->ldu + c0;
        float *y = j->y + r * j->n_cols + c0;
        if (j->table) j->geglu(g, u, y, n, j->table);
        else j->silu_mul(g, u, y, n);
    }
}

/* y (n_rows, n_cols) = act(g) * u, for gate and up rows `ldg` / `ldu` floats apart (the two
 * halves of one fused gate|up matmul are read in place); act = GELU from `table` (see
 * li_geglu_f16_generic) or SiLU when table is NULL. Split over the pool's threads when it pays. */
int li_glu(const float *g, int64_t ldg, const float *u, int64_t ldu, float *y, int64_t n_rows, int64_t n_cols,
           const float *table) {
    if (n_rows < 0 || n_cols < 0 || ldg < n_cols || ldu < n_cols) return LI_EINVAL;
    const li_isa_kernels *kern = li_active_kernels();
    glu_job j = {g, u, table, y, ldg, ldu, n_rows, n_cols, kern->silu_mul ? kern->silu_mul : li_silu_mul_generic,
                 kern->geglu_f16 ? kern->geglu_f16 : li_geglu_f16_generic};
    li_pool_run(task_glu, &j, n_rows * n_cols >= 16384 ? 2 : 1);
    return LI_OK;
}
