/* decoder_layers.c -- the decoder layers of the llama family (llama, mistral, qwen2, qwen3, phi3)
 * and of gemma3 (post-norms, GeGLU, sliding-window layers over a ring cache) in one C call: what
 * run_layers (src/localinfer/arch/layer.py) does op by op over the same DecoderLayer data (arch/fused.py
 * maps each field onto li_decoder_layer), with the same kernels in the
 * same order, so the result is the same bits. A decode step made ~13 Python-level calls per layer (each a few
 * microseconds of checks and buffer handling around microseconds of work); here it is one call
 * for the whole stack.
 *
 * Per layer, for the n rows of a batch (the tokens of each sequence in turn, at positions pos;
 * each sequence's go to rows [offset, offset + n_tokens) of its own cache):
 *   h = rms_norm(x, attn_norm);  q | k | v = h . Wqkv (+ bias), one stacked matmul or three
 *   q, k = rms_norm per head, or of the whole projection (olmoe), if the layer has q_norm / k_norm; rope, times rope_mscale on the
 *   rotated dimensions; q *= q_scale (if > 0)
 *   per sequence: cache[offset ..] = f16(k), f16(v) (or q8_0 / q4_0 rows: li_kv_seq's type_k / type_v);
 *   a = attention(q, cache[0 .. offset + n_tokens))
 *   x += a . Wo (+ bias)
 *   (gemma3: the branch output goes through attn_post_norm before the add)
 *   h = rms_norm(x, ffn_norm);  x += down(silu(gate(h)) * up(h)), gate | up one matmul or two
 *   (qwen3moe, mixtral, qwen2moe, olmoe, gpt-oss: x += the routed experts' weighted sum instead, core/moe.c;
 *   gpt-oss's attention has a sink logit per head in its softmax, attn_sinks)
 *   (gemma3: GELU from the f16 table, and ffn_post_norm before the add)
 * The Python wrapper (arch/fused.py) checks every shape and pointer before calling.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/li.h"
#include "localinfer.h"

static int linear(const li_linear *w, const float *x, int64_t n, float *y) {
    int rc = w->n_parts > 1 ? li_matmul_parts(w->wtype, w->layout, w->parts, w->part_rows, w->n_parts, w->row_bytes, w->k, x, n, y)
                            : li_matmul_layout(w->wtype, w->layout, w->w, w->row_bytes, w->n_out, w->k, x, n, y);
    if (rc == LI_OK && w->bias)
        for (int64_t i = 0; i < n; i++)
            for (int64_t o = 0; o < w->n_out; o++) y[i * w->n_out + o] += w->bias[o];
    return rc;
}

/* rows [lo, lo + width) of each of n rows of `ld` floats -> dst (n, width) */
static void take_cols(const float *src, int64_t ld, int64_t lo, int64_t width, int64_t n, float *dst) {
    for (int64_t i = 0; i < n; i++) memcpy(dst + i * width, src + i * ld + lo, sizeof(float) * (size_t)width);
}

typedef struct {
    const li_decoder_config *c;
    const li_decoder_layer *L;
    const li_kv_seq *seqs;
    int n_seqs;
    const int64_t *seq_row;        /* first row of each sequence */
    const float *q, *k, *v;
    float *a;
    const int64_t *pos;
    uint8_t *ring_kv;              /* ring_stride bytes per sequence: its gathered keys | values */
    size_t ring_stride;
    int batched;                   /* the caller's li_batched_rows(), for the pool's threads too */
    atomic_int rc;
} attn_seqs_job;

/* sequence s of the batch at one layer: its new K/V into its cache, attention over what it sees */
static int attend_seq(attn_seqs_job *j, int s) {
    const li_decoder_config *c = j->c;
    const li_decoder_layer *L = j->L;
    const li_kv_seq *sq = &j->seqs[s];
    const int64_t hd = c->head_dim, q_dim = c->n_head * hd, kv_dim = c->n_head_kv * hd;
    const int64_t m = sq->n_tokens, off = sq->offset, row = j->seq_row[s];
    const li_type_traits *kt = li_traits(sq->type_k), *vt = li_traits(sq->type_v);
    /* bytes of one position's K / V (kv_dim values: whole blocks, checked by li_decoder_layers) */
    const size_t k_row = (size_t)(kv_dim / kt->block_size * kt->type_size);
    const size_t v_row = (size_t)(kv_dim / vt->block_size * vt->type_size);
    const uint8_t *keys, *values;
    int64_t n_kv, key_start;
    if (!L->ring) {   /* every position from 0 */
        uint8_t *kc = (uint8_t *)sq->k + (size_t)L->cache_layer * (size_t)sq->n_ctx * k_row;
        uint8_t *vc = (uint8_t *)sq->v + (size_t)L->cache_layer * (size_t)sq->n_ctx * v_row;
        kt->from_float(j->k + row * kv_dim, kc + off * k_row, m * kv_dim);
        vt->from_float(j->v + row * kv_dim, vc + off * v_row, m * kv_dim);
        keys = kc, values = vc, n_kv = off + m, key_start = 0;
    } else {   /* the ring (kv_cache.RotatingKVCache): the window before the first new token, then the new */
        uint8_t *rk = (uint8_t *)sq->ring_k + (size_t)L->cache_layer * (size_t)sq->n_slots * k_row;
        uint8_t *rv = (uint8_t *)sq->ring_v + (size_t)L->cache_layer * (size_t)sq->n_slots * v_row;
        key_start = off - L->window + 1 > 0 ? off - L->window + 1 : 0;
        const int64_t n_old = off - key_start;
        n_kv = n_old + m;
        uint8_t *kb = j->ring_kv + (size_t)s * j->ring_stride, *vb = kb + n_kv * k_row;
        for (int64_t p = key_start; p < off; p++) {
            memcpy(kb + (p - key_start) * k_row, rk + (p % sq->n_slots) * k_row, k_row);
            memcpy(vb + (p - key_start) * v_row, rv + (p % sq->n_slots) * v_row, v_row);
        }
        kt->from_float(j->k + row * kv_dim, kb + n_old * k_row, m * kv_dim);
        vt->from_float(j->v + row * kv_dim, vb + n_old * v_row, m * kv_dim);
        const int64_t n_store = m < sq->n_slots ? m : sq->n_slots;   /* the newest go to their slots */
        for (int64_t i = m - n_store; i < m; i++) {
            const int64_t slot = (off + i) % sq->n_slots;
            memcpy(rk + slot * k_row, kb + (n_old + i) * k_row, k_row);
            memcpy(rv + slot * v_row, vb + (n_old + i) * v_row, v_row);
        }
        keys = kb, values = vb;
    }
    return li_attention_kv(j->q + row * q_dim, sq->type_k, keys, sq->type_v, values, j->a + row * q_dim, m, c->n_head,
                           c->n_head_kv, hd, n_kv, j->pos + row, key_start, c->attn_scale, L->window, 0.0f,
                           L->attn_sinks);
}

static void task_attend_seqs(void *ctx, int ith, int nth) {
    attn_seqs_job *j = ctx;
    const int was = li_set_batched_rows(j->batched);
    for (int s = ith; s < j->n_seqs; s += nth) {
        const int rc = attend_seq(j, s);
        if (rc != LI_OK) atomic_store(&j->rc, rc);
    }
    li_set_batched_rows(was);
}

int li_decoder_layers(const li_decoder_config *c, const li_decoder_layer *layers, int n_layers, float *x,
                      const int64_t *pos, const li_kv_seq *seqs, int n_seqs) {
    if (!c || !layers || !x || !pos || !seqs || n_seqs <= 0 || c->n_head_kv <= 0 || c->n_head % c->n_head_kv)
        return LI_EINVAL;
    int64_t n = 0, max_window = 0, ring_rows = 0, max_tokens = 0;
    for (int l = 0; l < n_layers; l++)
        if (layers[l].ring) max_window = layers[l].window > max_window ? layers[l].window : max_window;
    for (int s = 0; s < n_seqs; s++) {
        const li_kv_seq *q = &seqs[s];
        if (!q->k || !q->v || q->n_tokens <= 0 || q->offset < 0 || q->offset + q->n_tokens > q->n_ctx)
            return LI_EINVAL;
        for (int t = 0; t < 2; t++) {   /* cache rows: f16, q8_0 or q4_0, whole blocks per head */
            const int type = t ? q->type_v : q->type_k;
            if (type != LI_TYPE_F16 && type != LI_TYPE_Q8_0 && type != LI_TYPE_Q4_0) return LI_ETYPE;
            if (c->head_dim % li_traits(type)->block_size) return LI_EINVAL;
        }
        if (max_window > 0) {   /* a ring layer gathers each sequence's visible keys into its own buffer */
            if (!q->ring_k || !q->ring_v || q->n_slots <= 0) return LI_EINVAL;
            const int64_t old = q->offset < max_window - 1 ? q->offset : max_window - 1;
            ring_rows = old + q->n_tokens > ring_rows ? old + q->n_tokens : ring_rows;
        }
        n += q->n_tokens;
        max_tokens = q->n_tokens > max_tokens ? q->n_tokens : max_tokens;
    }
    const int64_t d = c->n_embd, hd = c->head_dim, q_dim = c->n_head * hd, kv_dim = c->n_head_kv * hd;
    const int64_t qkv_dim = q_dim + 2 * kv_dim, n_ff = c->n_ff;
    /* scratch: h (n, d) | qkv (n, qkv_dim) | q, k, v (n, q_dim + 2 kv_dim) | a (n, q_dim) |
     * gu (n, 2 n_ff) | act (n, n_ff) | o (n, d) */
    const size_t floats = (size_t)n * (size_t)(d + qkv_dim + qkv_dim + q_dim + 2 * n_ff + n_ff + d);
    /* bytes per sequence, at f16's size (the largest row of the cache types) */
    const size_t ring_stride = 2 * sizeof(ggml_half) * (size_t)ring_rows * (size_t)kv_dim;
    float *buf = malloc(sizeof(float) * floats + sizeof(int64_t) * (size_t)n_seqs +
                        ring_stride * (size_t)n_seqs);
    if (!buf) return LI_ENOMEM;
    int64_t *seq_row = (int64_t *)(buf + floats);
    uint8_t *ring_kv = (uint8_t *)(seq_row + n_seqs);   /* per sequence: gathered keys | values */
    seq_row[0] = 0;
    for (int s = 1; s < n_seqs; s++) seq_row[s] = seq_row[s - 1] + seqs[s - 1].n_tokens;
    float *h = buf, *qkv = h + n * d, *q = qkv + n * qkv_dim, *k = q + n * q_dim, *v = k + n * kv_dim;
    float *a = v + n * kv_dim, *gu = a + n * q_dim, *act = gu + 2 * n * n_ff, *o = act + n * n_ff;
    int rc = LI_OK;

    for (int l = 0; l < n_layers && rc == LI_OK; l++) {
        const li_decoder_layer *L = &layers[l];
        /* attention */
        li_rms_norm(x, L->attn_norm, h, n, d, c->eps);
        if (L->n_qkv == 1) {
            if ((rc = linear(&L->qkv[0], h, n, qkv)) != LI_OK) break;
            take_cols(qkv, qkv_dim, 0, q_dim, n, q);
            take_cols(qkv, qkv_dim, q_dim, kv_dim, n, k);
            take_cols(qkv, qkv_dim, q_dim + kv_dim, kv_dim, n, v);
        } else {
            if ((rc = linear(&L->qkv[0], h, n, q)) != LI_OK || (rc = linear(&L->qkv[1], h, n, k)) != LI_OK ||
                (rc = linear(&L->qkv[2], h, n, v)) != LI_OK)
                break;
        }
        if (L->q_norm)   /* per head (qwen3, gemma3) or over the whole projection (olmoe) */
            li_rms_norm(q, L->q_norm, q, L->qk_norm_whole ? n : n * c->n_head, L->qk_norm_whole ? q_dim : hd, c->eps);
        if (L->k_norm)
            li_rms_norm(k, L->k_norm, k, L->qk_norm_whole ? n : n * c->n_head_kv, L->qk_norm_whole ? kv_dim : hd,
                        c->eps);
        const double *freq = L->inv_freq ? L->inv_freq : c->inv_freq;
        if (li_rope(q, n, c->n_head, hd, c->n_rot, pos, freq, c->neox) ||
            li_rope(k, n, c->n_head_kv, hd, c->n_rot, pos, freq, c->neox)) {
            rc = LI_ENOMEM;
            break;
        }
        if (c->rope_mscale != 1.0f) {
            for (int64_t r = 0; r < n * c->n_head; r++)
                for (int64_t i = 0; i < c->n_rot; i++) q[r * hd + i] *= c->rope_mscale;
            for (int64_t r = 0; r < n * c->n_head_kv; r++)
                for (int64_t i = 0; i < c->n_rot; i++) k[r * hd + i] *= c->rope_mscale;
        }
        if (c->q_scale > 0.0f)
            for (int64_t i = 0; i < n * q_dim; i++) q[i] *= c->q_scale;
        attn_seqs_job job = {c, L, seqs, n_seqs, seq_row, q, k, v, a, pos, ring_kv, ring_stride,
                             li_batched_rows(), 0};
        /* a decode step of several sequences: one sequence per pool slot (each attention is too small
         * to split); otherwise sequence after sequence, each attention over the pool's threads */
        li_pool_run(task_attend_seqs, &job, n_seqs > 1 && max_tokens <= 4 ? 2 : 1);
        rc = atomic_load(&job.rc);
        if (rc != LI_OK) break;
        if ((rc = linear(&L->wo, a, n, o)) != LI_OK) break;
        if (L->attn_post_norm) li_rms_norm(o, L->attn_post_norm, o, n, d, c->eps);
        for (int64_t i = 0; i < n * d; i++) x[i] += o[i];
        /* gated MLP */
        li_rms_norm(x, L->ffn_norm, h, n, d, c->eps);
        if (L->moe) {   /* routed experts (core/moe.c) */
            if ((rc = li_moe_ffn(L->moe, h, n, o, c->geglu_table)) != LI_OK) break;
        } else if (L->n_gate_up == 1) {
            if ((rc = linear(&L->gate_up[0], h, n, gu)) != LI_OK) break;
            li_glu(gu, 2 * n_ff, gu + n_ff, 2 * n_ff, act, n, n_ff, c->geglu_table);
        } else {
            if ((rc = linear(&L->gate_up[0], h, n, gu)) != LI_OK ||
                (rc = linear(&L->gate_up[1], h, n, gu + n * n_ff)) != LI_OK)
                break;
            li_glu(gu, n_ff, gu + n * n_ff, n_ff, act, n, n_ff, c->geglu_table);
        }
        if (!L->moe && (rc = linear(&L->down, act, n, o)) != LI_OK) break;
        if (L->ffn_post_norm) li_rms_norm(o, L->ffn_post_norm, o, n, d, c->eps);
        for (int64_t i = 0; i < n * d; i++) x[i] += o[i];
    }
    free(buf);
    return rc;
}
