/* attention_encoder.c -- an encoder's bidirectional attention over a batch of padded texts, in
 * float32 throughout, as ops_reference.encoder_attention (llama.cpp without a KV cache):
 *
 *   scores = (Q . K^T) * scale - slope * |i - j|     per text b and head h, keys j < lengths[b]
 *                                                     (and |i - j| <= n_swa / 2 when n_swa > 0)
 *   P      = softmax(scores)                          the exponentials summed in double (li_softmax_f32_fn)
 *   out    = P . V                                    as V^T . P: the dot runs over keys
 *
 * The two products are the decoder attention's li_dot_rows_fn (core/attention.c: 16 lanes and
 * tinyBLAS's tree, the same bits in every variant), P.V over V transposed into rows of keys
 * zero-padded to 16, as attention.c does for a batch of queries. Its task is not reused: it walks
 * an f16 cache token by token through causal windows and K/V groups, rounding Q and P to f16;
 * here K and V are float rows of the batch itself and every query of a text sees the same keys.
 *
 * Work unit: a block of LI_ENC_QUERIES queries of one text and one head. Units are numbered text,
 * head, block, and each pool slot takes a run of consecutive ones, so it transposes V (and pads K
 * when head_dim is not a multiple of 16) once per (text, head) it meets, not once per block.
 * Per thread that is O(n_len * head_dim + LI_ENC_QUERIES * n_len) floats of scratch, never a
 * head's (n_len, n_len) scores. Query rows past a text's length get zeros, not garbage: pooling
 * multiplies them by 0 and the next layer reads them, so they must stay finite. A text of length
 * 0 is all such rows.
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "core/li.h"
#include "generic/generic.h"

#define LI_ENC_QUERIES 32                /* queries per work unit: a (32, n_len) block of scores */
#define LI_ENC_PARALLEL_MIN (1 << 20)    /* multiply-adds below which waking the pool costs more */

typedef struct {
    const float *q, *k, *v;        /* (n_batch, n_len, n_head, d) */
    float *out;                    /* (n_batch, n_len, n_head, d) */
    const int64_t *lengths;        /* (n_batch) */
    const float *slopes;           /* (n_head) ALiBi slopes, or NULL */
    int64_t half_swa;              /* keys further than this from the query are masked; -1: none */
    int64_t n_batch, n_len, n_head, d, dp, n_lenp, n_blocks;
    float scale;
    li_dot_rows_fn dot;
    li_softmax_f32_fn softmax;
    atomic_int error;
} enc_attn_job;

static int64_t up16(int64_t n) { return (n + 15) / 16 * 16; }

/* rows of d floats, ld apart -> n rows of dp floats, zero-padded */
static void pad_rows(const float *x, int64_t ld, int64_t n, int64_t d, int64_t dp, float *y) {
    for (int64_t r = 0; r < n; r++) {
        memcpy(y + r * dp, x + r * ld, sizeof(float) * (size_t)d);
        memset(y + r * dp + d, 0, sizeof(float) * (size_t)(dp - d));
    }
}

static void task_encoder_attend(void *ctx, int ith, int nth) {
    enc_attn_job *a = ctx;
    const int64_t n_units = a->n_batch * a->n_head * a->n_blocks;
    const int64_t lo = n_units * ith / nth, hi = n_units * (ith + 1) / nth;
    if (lo >= hi) return;
    const int64_t d = a->d, dp = a->dp, lp = a->n_lenp, ld = a->n_head * d;   /* ld: between tokens */
    const int padded = dp != d;
    /* scratch: vt (d, lp) | s (LI_ENC_QUERIES, lp) | if padded: kf (n_len, dp), qf (LI_ENC_QUERIES, dp) */
    const size_t floats = (size_t)((d + LI_ENC_QUERIES) * lp + (padded ? (a->n_len + LI_ENC_QUERIES) * dp : 0));
    float *vt = li_scratch(LI_SCRATCH_TASK, sizeof(float) * floats);
    if (!vt) { atomic_store(&a->error, LI_ENOMEM); return; }
    float *s = vt + d * lp, *kf = s + LI_ENC_QUERIES * lp, *qf = kf + a->n_len * dp;
    int64_t held = -1;   /* the (text, head) whose V^T (and padded K) the scratch holds */
    for (int64_t u = lo; u < hi; u++) {
        const int64_t bh = u / a->n_blocks, b = bh / a->n_head, h = bh % a->n_head;
        const int64_t n = a->lengths[b], i0 = u % a->n_blocks * LI_ENC_QUERIES;
        const int64_t i1 = i0 + LI_ENC_QUERIES < a->n_len ? i0 + LI_ENC_QUERIES : a->n_len;
        const int64_t nq = (i1 < n ? i1 : n) - i0;   /* queries of the block inside the text */
        float *o = a->out + ((b * a->n_len + i0) * a->n_head + h) * d;
        for (int64_t i = nq > 0 ? nq : 0; i < i1 - i0; i++) memset(o + i * ld, 0, sizeof(float) * (size_t)d);
        if (nq <= 0) continue;
        const float *kb = a->k + (b * a->n_len * a->n_head + h) * d;   /* key j at kb + j * ld */
        const int64_t np = up16(n);
        if (bh != held) {
            const float *vb = a->v + (b * a->n_len * a->n_head + h) * d;
            for (int64_t e = 0; e < d; e++) {
                float *row = vt + e * lp;
                for (int64_t j = 0; j < n; j++) row[j] = vb[j * ld + e];
                for (int64_t j = n; j < np; j++) row[j] = 0.0f;   /* 0 * 0 past the keys: nothing */
            }
            if (padded) pad_rows(kb, ld, n, d, dp, kf);
            held = bh;
        }
        const float *qb = a->q + ((b * a->n_len + i0) * a->n_head + h) * d;
        if (padded) pad_rows(qb, ld, nq, d, dp, qf);
        /* the keys any query of the block sees, [k0, k1): the text, or on a local layer the block's
         * window span; P.V runs over [p0, p1), that span widened to 16-aligned ends */
        int64_t k0 = 0, k1 = n;
        if (a->half_swa >= 0) {
            k0 = i0 - a->half_swa > 0 ? i0 - a->half_swa : 0;
            k1 = i0 + nq + a->half_swa < n ? i0 + nq + a->half_swa : n;
        }
        const int64_t p0 = k0 / 16 * 16, p1 = up16(k1);
        const float *kr = padded ? kf + k0 * dp : kb + k0 * ld;
        a->dot(dp, padded ? qf : qb, (int)nq, padded ? dp : ld, kr, k1 - k0, padded ? dp : ld, s + k0, lp);
        const float slope = a->slopes ? a->slopes[h] : 0.0f;
        for (int64_t i = 0; i < nq; i++) {
            float *p = s + i * lp;
            const int64_t qi = i0 + i;
            /* the keys this query sees: [j0, j1), the whole text or its window around qi; the
             * softmax runs over them only and the others get probability 0 (the reference's -inf) */
            int64_t j0 = 0, j1 = n;
            if (a->half_swa >= 0) {
                j0 = qi - a->half_swa > 0 ? qi - a->half_swa : 0;
                j1 = qi + a->half_swa + 1 < n ? qi + a->half_swa + 1 : n;
            }
            if (a->slopes)   /* the reference's order: scaled first, then the distance's penalty */
                for (int64_t j = j0; j < j1; j++) p[j] = p[j] * a->scale - slope * (float)(qi > j ? qi - j : j - qi);
            else
                for (int64_t j = j0; j < j1; j++) p[j] *= a->scale;
            a->softmax(p + j0, j1 - j0);
            for (int64_t j = p0; j < j0; j++) p[j] = 0.0f;
            for (int64_t j = j1; j < p1; j++) p[j] = 0.0f;
        }
        /* Each score is its own dot, and P.V's lane l still sums the keys j = l (mod 16) in order:
         * the keys left out of [p0, p1) only added p = 0 terms (V is finite), so these are the bits
         * of the whole-text products, ~3x less work on a 512-token text's local layers. */
        a->dot(p1 - p0, s + p0, (int)nq, lp, vt + p0, d, lp, o, ld);
    }
}

int li_encoder_attention(const float *q, const float *k, const float *v, float *out, int64_t n_batch,
                         int64_t n_len, int64_t n_head, int64_t head_dim, const int64_t *lengths, float scale,
                         const float *alibi_slopes, int64_t n_swa) {
    if (n_batch < 0 || n_len < 0 || n_head < 0 || head_dim < 0 || n_swa < 0) return LI_EINVAL;
    double macs = 0.0;
    for (int64_t b = 0; b < n_batch; b++) {
        if (lengths[b] < 0 || lengths[b] > n_len) return LI_EINVAL;
        macs += 2.0 * (double)lengths[b] * (double)lengths[b];
    }
    if (n_batch == 0 || n_len == 0 || n_head == 0 || head_dim == 0) return LI_OK;
    enc_attn_job a = {0};
    a.q = q, a.k = k, a.v = v, a.out = out, a.lengths = lengths, a.slopes = alibi_slopes;
    a.half_swa = n_swa > 0 ? n_swa / 2 : -1;
    a.n_batch = n_batch, a.n_len = n_len, a.n_head = n_head, a.d = head_dim, a.dp = up16(head_dim);
    a.n_lenp = up16(n_len), a.n_blocks = (n_len + LI_ENC_QUERIES - 1) / LI_ENC_QUERIES, a.scale = scale;
    const li_isa_kernels *kern = li_active_kernels();
    a.dot = kern->dot_rows ? kern->dot_rows : li_dot_rows_generic;
    a.softmax = kern->softmax_f32 ? kern->softmax_f32 : li_softmax_f32_generic;
    macs *= (double)n_head * (double)head_dim;
    li_pool_run(task_encoder_attend, &a, macs >= LI_ENC_PARALLEL_MIN ? 2 : 1);
    return atomic_load(&a.error) ? LI_ENOMEM : LI_OK;   /* a task's scratch (the only error a task sets) */
}
