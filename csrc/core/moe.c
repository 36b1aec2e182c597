/* moe.c -- a sparse mixture-of-experts feed-forward block (qwen3moe; mixtral; olmoe; qwen2moe with its
 * shared expert; gpt-oss) in one call: what src/localinfer/arch/moe.py's SparseMoE (and SharedExpertMoE)
 * does with a Python loop over the C matmuls.
 *
 *   l = h . router^T (+ bias)                 per token, (n_expert) floats
 *   p = softmax(l); the k = n_used largest p (ties: the lower index), w = their p;
 *     or (after_top_k, gpt-oss) the k largest l, w = softmax over those k
 *   w /= sum(w) when normalize
 *   out = sum over the chosen experts e, in ascending e, of w_e * down_e(act(gate_e(h), up_e(h)))
 *     (each matrix + its bias if it has one; act: silu(g) * u, or gpt-oss's clamped SwiGLU)
 *   out += sigmoid(h . shexp_gate_inp) * shexp_down(silu(shexp_gate(h)) * shexp_up(h))   (qwen2moe only)
 *
 * Each expert's matrices are their own li_linear (a slice of the 3-D ffn_*_exps tensor in the
 * mmap), so only the chosen experts' bytes are read. The products and sums are those of the Python
 * loop, in its order (experts ascending, each y * w added to a zero start), with the same kernels:
 *   one token (decode): the activation is quantized once per weight type, then one pool run
 *     computes the gate and up rows of all k experts (each thread a share of each expert's rows)
 *     and one the down rows, each thread summing its own output rows over the experts -- two pool
 *     runs per layer instead of six li_matmul calls per expert. The rows are the vec_dot of
 *     li_matmul's GEMV on the same quantized activation, so the bits are li_matmul's.
 *   several tokens (prefill, a batch): per chosen expert, ascending, one li_matmul each for gate,
 *     up and down over the tokens routed to it (a GEMM once enough tokens share an expert).
 * Only the exponentials differ from numpy's (expf here, numpy's own exp there: the softmax, gpt-oss's
 * SwiGLU): a weight may differ by an ulp, so the result matches the Python loop to rounding, not bit for bit.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "core/li.h"
#include "localinfer.h"

#define MOE_ROW_ALIGN 16                /* rows per chunk of a thread's share: one cache line of y */
#define MOE_PREFETCH_BYTES 4096         /* how far ahead the rows are prefetched (as matmul.c's GEMV) */

/* rows [lo, hi) of n for thread ith of nth, in chunks of `align` (matmul.c's split) */
static void split(int64_t n, int64_t align, int ith, int nth, int64_t *lo, int64_t *hi) {
    const int64_t units = (n + align - 1) / align, per = units / nth, rem = units % nth;
    const int64_t u0 = ith * per + (ith < rem ? ith : rem), u1 = u0 + per + (ith < rem);
    *lo = u0 * align < n ? u0 * align : n;
    *hi = u1 * align < n ? u1 * align : n;
}

/* one token's router logits -> its k experts and their weights, sorted by expert index (the order the
 * weighted sum adds them in): softmax over every logit, then the k most probable; or, with
 * after_top_k (gpt-oss), the k largest logits, then softmax over those k. Ties: the lower index.
 * Then divided by their sum when normalize. p: (n_expert) scratch, taken: (n_expert) scratch */
static void route_token(const li_moe *m, const float *logits, float *p, unsigned char *taken, int32_t *experts,
                        float *weights) {
    const int64_t n_expert = m->n_expert, k = m->n_used;
    if (m->after_top_k) {
        memcpy(p, logits, sizeof(float) * (size_t)n_expert);
    } else {
        float mx = logits[0], sum = 0.0f;
        for (int64_t e = 1; e < n_expert; e++) mx = logits[e] > mx ? logits[e] : mx;
        for (int64_t e = 0; e < n_expert; e++) sum += p[e] = expf(logits[e] - mx);
        for (int64_t e = 0; e < n_expert; e++) p[e] /= sum;
    }
    for (int64_t e = 0; e < n_expert; e++) taken[e] = 0;
    for (int64_t j = 0; j < k; j++) {   /* k passes: k is small (8 of 128 for Qwen3-30B-A3B) */
        int64_t best = -1;   /* NaN scores (a corrupt router) are passed over, yet some expert is taken */
        for (int64_t e = 0; e < n_expert; e++)
            if (!taken[e] && (best < 0 || p[e] > p[best] || (p[best] != p[best] && p[e] == p[e]))) best = e;
        experts[j] = (int32_t)best, weights[j] = p[best], taken[best] = 1;
    }
    if (m->after_top_k) {   /* softmax over the k chosen logits (moe.py's route: its float32 exp and sum) */
        float mx = weights[0], sum = 0.0f;
        for (int64_t j = 1; j < k; j++) mx = weights[j] > mx ? weights[j] : mx;
        for (int64_t j = 0; j < k; j++) sum += weights[j] = expf(weights[j] - mx);
        for (int64_t j = 0; j < k; j++) weights[j] /= sum;
    }
    if (m->normalize) {
        float chosen_sum = 0.0f;
        for (int64_t j = 0; j < k; j++) chosen_sum += weights[j];
        for (int64_t j = 0; j < k; j++) weights[j] /= chosen_sum;
    }
    for (int64_t j = 1; j < k; j++)   /* insertion sort by expert index */
        for (int64_t i = j; i > 0 && experts[i - 1] > experts[i]; i--) {
            const int32_t e = experts[i]; experts[i] = experts[i - 1]; experts[i - 1] = e;
            const float w = weights[i]; weights[i] = weights[i - 1]; weights[i - 1] = w;
        }
}

/* act (rows, f) = the block's gated activation of g and u (rows, f): li_glu, or gpt-oss's clamped SwiGLU
 * written as arch/gptoss.py's swiglu_oai computes it */
static int expert_act(const li_moe *m, const float *g, const float *u, float *act, int64_t rows, int64_t f,
                      const float *glu_table) {
    if (m->act != LI_MOE_SWIGLU_OAI) return li_glu(g, f, u, f, act, rows, f, glu_table);
    for (int64_t i = 0; i < rows * f; i++) {
        const float x = g[i] < 7.0f ? g[i] : 7.0f, y = u[i] < -7.0f ? -7.0f : (u[i] > 7.0f ? 7.0f : u[i]);
        act[i] = x / (1.0f + expf(-1.702f * x)) * (y + 1.0f);
    }
    return LI_OK;
}

/* y (rows, n_out) += bias, when the matrix has one (gpt-oss's experts) */
static void add_bias(const li_linear *w, float *y, int64_t rows, int64_t lo, int64_t hi, int64_t ld) {
    if (!w->bias) return;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = lo; o < hi; o++) y[r * ld + o] += w->bias[o];
}

/* Ask the kernel to read the chosen experts' matrices ahead (MADV_WILLNEED on their pages) when they
 * are not in memory: a 17 GB model on a machine whose page cache cannot hold it then has all of a
 * layer's expert reads in flight at once, instead of faulting in one readahead window at a time as
 * the GEMV reaches them. A matrix whose first page is resident is taken as resident (experts are
 * read whole) and costs one mincore of one page; WILLNEED on resident pages would cost a page-cache
 * lookup per page (BENCHMARKS.md, "Kernel choices"). */
static void advise_experts(const li_moe *m, const int32_t *experts, int64_t count) {
#if defined(__linux__) && defined(MADV_WILLNEED)
    static long page = 0;
    if (!page) page = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
    for (int64_t s = 0; s < count; s++) {
        const li_linear *ws[3] = {&m->gate[experts[s]], &m->up[experts[s]], &m->down[experts[s]]};
        for (int i = 0; i < 3; i++) {
            const uintptr_t lo = (uintptr_t)ws[i]->w / (uintptr_t)page * (uintptr_t)page;
            const uintptr_t hi = (uintptr_t)ws[i]->w + ws[i]->row_bytes * (size_t)ws[i]->n_out;
            unsigned char resident = 0;
            if (mincore((void *)lo, (size_t)page, &resident) == 0 && (resident & 1)) continue;
            madvise((void *)lo, hi - lo, MADV_WILLNEED);   /* advice only: a failure changes nothing */
        }
    }
#else
    (void)m, (void)experts, (void)count;
#endif
}

/* y[r] = dot(row r of w, a) for r in [lo, hi): matmul.c's GEMV loop for one activation row. A thread
 * reads several experts' row ranges in turn, so near the end of this one the prefetch runs on into
 * the next range (`next`, its first bytes; NULL: none) instead of stopping: small ranges (384 rows of
 * a 768-row expert) would otherwise start each time on memory the prefetcher has not asked for. */
static void gemv_rows(const li_linear *w, int64_t lo, int64_t hi, const uint8_t *a, const float *a_sums, float *y,
                      const uint8_t *next, size_t next_bytes) {
    const li_type_traits *t = li_traits(w->wtype);
    const int step = t->vec_dot_rows ? LI_DOT_ROWS : 1;
    const size_t ahead = MOE_PREFETCH_BYTES / w->row_bytes + 1;   /* rows */
    const uint8_t *base = w->w;
    for (int64_t r = lo; r < hi; r += step) {
        const int nr = (int)(hi - r < step ? hi - r : step);
        const size_t chunk = (size_t)nr * w->row_bytes;
        if (r + (int64_t)ahead < hi) {
            const uint8_t *pf = base + (r + (int64_t)ahead) * w->row_bytes;
            for (size_t b = 0; b < chunk; b += 64) __builtin_prefetch(pf + b, 0, 3);
        } else if (next) {   /* bytes of the next range this far past the end of this one */
            const size_t at = (size_t)(r + (int64_t)ahead - hi) * w->row_bytes;
            for (size_t b = at; b < at + chunk && b < next_bytes; b += 64) __builtin_prefetch(next + b, 0, 3);
        }
        if (t->vec_dot_rows) t->vec_dot_rows(w->k, y + r, base + r * w->row_bytes, w->row_bytes, nr, a, a_sums);
        else t->vec_dot(w->k, y + r, base + r * w->row_bytes, a, a_sums);
    }
}

/* one activation row in a weight type's vec_dot type, with its sums (as matmul.c's task_quantize) */
typedef struct {
    uint8_t *q;
    float *sums;   /* NULL when the type has none */
} act_row;

static size_t act_row_bytes(const li_type_traits *t, int64_t k) {
    const li_type_traits *at = li_traits(t->vec_dot_type);
    return ((size_t)(k / at->block_size) * (size_t)at->type_size + 63) / 64 * 64 +
           ((size_t)li_act_sums_count(t->vec_dot_type, k) * sizeof(float) + 63) / 64 * 64;
}

static act_row quantize_act(const li_type_traits *t, const float *x, int64_t k, uint8_t *buf) {
    const li_type_traits *at = li_traits(t->vec_dot_type);
    const size_t q_bytes = ((size_t)(k / at->block_size) * (size_t)at->type_size + 63) / 64 * 64;
    act_row r = {buf, li_act_sums_count(t->vec_dot_type, k) ? (float *)(buf + q_bytes) : NULL};
    at->from_float(x, r.q, k);
    if (r.sums) li_act_sums(t->vec_dot_type, r.q, k, r.sums);
    return r;
}

typedef struct {
    const li_moe *m;
    int64_t k, d, f;
    const int32_t *experts;        /* (k) ascending */
    const float *weights;          /* (k) */
    act_row x_gate, x_up;          /* the token in gate's / up's vec_dot type */
    const act_row *acts;           /* (k) each expert's activation in down's vec_dot type */
    float *g, *u;                  /* (k, f) */
    float *y;                      /* (k, d) each expert's down output */
    float *out;                    /* (d) */
} token_job;

/* the first byte of rows [lo, hi) of w, and their size */
static const uint8_t *rows_at(const li_linear *w, int64_t lo, int64_t hi, size_t *bytes) {
    *bytes = (size_t)(hi - lo) * w->row_bytes;
    return (const uint8_t *)w->w + (size_t)lo * w->row_bytes;
}

static void task_gate_up(void *ctx, int ith, int nth) {
    const token_job *j = ctx;
    int64_t lo, hi;
    split(j->f, MOE_ROW_ALIGN, ith, nth, &lo, &hi);
    if (lo >= hi) return;
    for (int64_t s = 0; s < j->k; s++) {
        const int32_t e = j->experts[s];
        size_t up_bytes, next_bytes = 0;
        const uint8_t *up = rows_at(&j->m->up[e], lo, hi, &up_bytes);
        const uint8_t *next = s + 1 < j->k ? rows_at(&j->m->gate[j->experts[s + 1]], lo, hi, &next_bytes) : NULL;
        gemv_rows(&j->m->gate[e], lo, hi, j->x_gate.q, j->x_gate.sums, j->g + s * j->f, up, up_bytes);
        gemv_rows(&j->m->up[e], lo, hi, j->x_up.q, j->x_up.sums, j->u + s * j->f, next, next_bytes);
        add_bias(&j->m->gate[e], j->g + s * j->f, 1, lo, hi, j->f);
        add_bias(&j->m->up[e], j->u + s * j->f, 1, lo, hi, j->f);
    }
}

static void task_down(void *ctx, int ith, int nth) {
    const token_job *j = ctx;
    int64_t lo, hi;
    split(j->d, MOE_ROW_ALIGN, ith, nth, &lo, &hi);
    if (lo >= hi) return;
    for (int64_t s = 0; s < j->k; s++) {
        size_t next_bytes = 0;
        const uint8_t *next = s + 1 < j->k ? rows_at(&j->m->down[j->experts[s + 1]], lo, hi, &next_bytes) : NULL;
        gemv_rows(&j->m->down[j->experts[s]], lo, hi, j->acts[s].q, j->acts[s].sums, j->y + s * j->d, next, next_bytes);
        add_bias(&j->m->down[j->experts[s]], j->y + s * j->d, 1, lo, hi, j->d);
    }
    for (int64_t r = lo; r < hi; r++) {   /* the Python loop's out[t] += y * w, expert by expert */
        float acc = 0.0f;
        for (int64_t s = 0; s < j->k; s++) acc += j->y[s * j->d + r] * j->weights[s];
        j->out[r] = acc;
    }
}

static int one_token(const li_moe *m, const float *h, const int32_t *experts, const float *weights, float *out,
                     const float *glu_table) {
    const int64_t k = m->n_used, d = m->router.k, f = m->gate[0].n_out;
    const li_type_traits *tg = li_traits(m->gate[0].wtype), *tu = li_traits(m->up[0].wtype),
                         *td = li_traits(m->down[0].wtype);
    const size_t xg_bytes = act_row_bytes(tg, d), xu_bytes = act_row_bytes(tu, d), a_bytes = act_row_bytes(td, f);
    /* g, u, act: (k, f) floats each | y: (k, d) | the quantized rows | acts: (k); 64-byte aligned
     * like li_matmul's scratch (the rows as the SIMD dots expect them) */
    const size_t floats = (size_t)(3 * k * f + k * d + 15) / 16 * 16;
    const size_t bytes = floats * sizeof(float) + xg_bytes + xu_bytes + (size_t)k * a_bytes + (size_t)k * sizeof(act_row);
    uint8_t *buf = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!buf) return LI_ENOMEM;
    float *g = (float *)buf, *u = g + k * f, *act = u + k * f, *y = act + k * f;
    uint8_t *q = buf + floats * sizeof(float);
    act_row *acts = (act_row *)(q + xg_bytes + xu_bytes + (size_t)k * a_bytes);
    token_job j = {m, k, d, f, experts, weights, quantize_act(tg, h, d, q), quantize_act(tu, h, d, q + xg_bytes),
                   acts, g, u, y, out};
    const int threads = li_get_threads();
    advise_experts(m, experts, k);
    li_pool_run(task_gate_up, &j, threads);
    int rc = expert_act(m, g, u, act, k, f, glu_table);
    for (int64_t s = 0; s < k && rc == LI_OK; s++)
        acts[s] = quantize_act(td, act + s * f, f, q + xg_bytes + xu_bytes + (size_t)s * a_bytes);
    if (rc == LI_OK) li_pool_run(task_down, &j, threads);
    free(buf);
    return rc;
}

/* several tokens: per chosen expert, ascending, its tokens (ascending) through three li_matmul */
static int many_tokens(const li_moe *m, const float *h, int64_t n, const int32_t *experts, const float *weights,
                       float *out, const float *glu_table) {
    const int64_t k = m->n_used, d = m->router.k, f = m->gate[0].n_out;
    /* rows: (n) token indices | w: (n) their weights | x: (n, d) | g, u, act: (n, f) | y: (n, d) */
    int64_t *rows = malloc(sizeof(int64_t) * (size_t)n + sizeof(float) * (size_t)n * (size_t)(1 + 2 * d + 3 * f));
    if (!rows) return LI_ENOMEM;
    float *w = (float *)(rows + n), *x = w + n, *g = x + n * d, *u = g + n * f, *act = u + n * f, *y = act + n * f;
    memset(out, 0, sizeof(float) * (size_t)(n * d));
    int rc = LI_OK;
    for (int64_t e = 0; e < m->n_expert && rc == LI_OK; e++) {
        int64_t me = 0;
        for (int64_t t = 0; t < n; t++)
            for (int64_t s = 0; s < k; s++)
                if (experts[t * k + s] == e) {
                    rows[me] = t, w[me] = weights[t * k + s];
                    memcpy(x + me * d, h + t * d, sizeof(float) * (size_t)d);
                    me++;
                }
        if (!me) continue;   /* no token chose it: never read */
        const int32_t chosen = (int32_t)e;
        advise_experts(m, &chosen, 1);
        if ((rc = li_matmul(m->gate[e].wtype, m->gate[e].w, m->gate[e].row_bytes, f, d, x, me, g)) != LI_OK ||
            (rc = li_matmul(m->up[e].wtype, m->up[e].w, m->up[e].row_bytes, f, d, x, me, u)) != LI_OK)
            break;
        add_bias(&m->gate[e], g, me, 0, f, f);
        add_bias(&m->up[e], u, me, 0, f, f);
        if ((rc = expert_act(m, g, u, act, me, f, glu_table)) != LI_OK ||
            (rc = li_matmul(m->down[e].wtype, m->down[e].w, m->down[e].row_bytes, d, f, act, me, y)) != LI_OK)
            break;
        add_bias(&m->down[e], y, me, 0, d, d);
        for (int64_t i = 0; i < me; i++) {
            float *o = out + rows[i] * d;
            for (int64_t c = 0; c < d; c++) o[c] += y[i * d + c] * w[i];
        }
    }
    free(rows);
    return rc;
}

/* qwen2moe's shared expert, which every token runs: out += sigmoid(h . shexp_gate_inp) * its gated MLP,
 * added after the routed sum as SharedExpertMoE adds it (routed + shared * gate). Three li_matmul:
 * one expert's rows are few (a decode step's GEMV spreads them over the pool as well as moe.c would) */
static int shared_expert(const li_moe *m, const float *h, int64_t n, float *out, const float *glu_table) {
    const int64_t d = m->router.k, f = m->shexp_gate.n_out;
    /* g, u, act: (n, f) each | y: (n, d) */
    float *g = malloc(sizeof(float) * (size_t)n * (size_t)(3 * f + d));
    if (!g) return LI_ENOMEM;
    float *u = g + n * f, *act = u + n * f, *y = act + n * f;
    const li_linear *wg = &m->shexp_gate, *wu = &m->shexp_up, *wd = &m->shexp_down;
    int rc;
    if ((rc = li_matmul_layout(wg->wtype, wg->layout, wg->w, wg->row_bytes, f, d, h, n, g)) == LI_OK &&
        (rc = li_matmul_layout(wu->wtype, wu->layout, wu->w, wu->row_bytes, f, d, h, n, u)) == LI_OK &&
        (rc = li_glu(g, f, u, f, act, n, f, glu_table)) == LI_OK &&
        (rc = li_matmul_layout(wd->wtype, wd->layout, wd->w, wd->row_bytes, d, f, act, n, y)) == LI_OK) {
        for (int64_t t = 0; t < n; t++) {
            float z = 0.0f;
            for (int64_t c = 0; c < d; c++) z += h[t * d + c] * m->shexp_gate_inp[c];
            const float s = 1.0f / (1.0f + expf(-z));
            for (int64_t c = 0; c < d; c++) out[t * d + c] += y[t * d + c] * s;
        }
    }
    free(g);
    return rc;
}

/* one matrix at w->w (the experts' row slices are read straight from it: no parts) */
static int linear_ok(const li_linear *w, int64_t n_out, int64_t k) {
    const li_type_traits *t = w->w ? li_traits(w->wtype) : NULL;
    return t && t->vec_dot && w->n_parts <= 1 && w->n_out == n_out && w->k == k && k % t->block_size == 0 &&
           k % li_traits(t->vec_dot_type)->block_size == 0 &&
           w->row_bytes == (size_t)(k / t->block_size) * (size_t)t->type_size;
}

int li_moe_ffn(const li_moe *m, const float *h, int64_t n, float *out, const float *glu_table) {
    if (!m || !h || !out || n <= 0 || !m->gate || !m->up || !m->down || m->n_expert <= 0 || m->n_used <= 0 ||
        m->n_used > m->n_expert || m->router.n_out != m->n_expert ||
        (m->act != LI_MOE_GLU && m->act != LI_MOE_SWIGLU_OAI))
        return LI_EINVAL;
    const int64_t d = m->router.k, f = m->gate[0].n_out, ne = m->n_expert, k = m->n_used;
    for (int64_t e = 0; e < ne; e++)   /* cheap beside the matmuls: 3 * n_expert comparisons */
        if (!linear_ok(&m->gate[e], f, d) || !linear_ok(&m->up[e], f, d) || !linear_ok(&m->down[e], d, f) ||
            m->gate[e].wtype != m->gate[0].wtype || m->up[e].wtype != m->up[0].wtype ||
            m->down[e].wtype != m->down[0].wtype || m->gate[e].layout || m->up[e].layout || m->down[e].layout)
            return LI_EINVAL;   /* the experts' rows are read in place by gemv_rows: GGUF's layout only */
    const int64_t fs = m->shexp_gate.n_out;
    if (m->shexp_gate_inp && (fs <= 0 || !linear_ok(&m->shexp_gate, fs, d) || !linear_ok(&m->shexp_up, fs, d) ||
                              !linear_ok(&m->shexp_down, d, fs) || m->shexp_gate.bias || m->shexp_up.bias ||
                              m->shexp_down.bias))
        return LI_EINVAL;
    /* logits: (n, ne) | p: (ne) | weights: (n, k) | experts: (n, k) | taken: (ne) */
    float *logits = malloc(sizeof(float) * (size_t)(n * ne + ne + n * k) + sizeof(int32_t) * (size_t)(n * k) +
                           (size_t)ne);
    if (!logits) return LI_ENOMEM;
    float *p = logits + n * ne, *weights = p + ne;
    int32_t *experts = (int32_t *)(weights + n * k);
    unsigned char *taken = (unsigned char *)(experts + n * k);
    int rc = li_matmul_layout(m->router.wtype, m->router.layout, m->router.w, m->router.row_bytes, ne, d, h, n, logits);
    if (rc == LI_OK) {
        add_bias(&m->router, logits, n, 0, ne, ne);
        for (int64_t t = 0; t < n; t++)
            route_token(m, logits + t * ne, p, taken, experts + t * k, weights + t * k);
        rc = n == 1 && !li_batched_rows() ? one_token(m, h, experts, weights, out, glu_table)
                    : many_tokens(m, h, n, experts, weights, out, glu_table);
        if (rc == LI_OK && m->shexp_gate_inp) rc = shared_expert(m, h, n, out, glu_table);
    }
    free(logits);
    return rc;
}
