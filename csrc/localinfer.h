/* localinfer.h -- the public C API of the kernels: the one contract between C and Python.
 *
 * Every function that can fail validates its integer arguments and returns LI_OK or a
 * negative li_status code; pointers must be valid for the sizes implied (the Python
 * wrapper, localinfer/backend/kernels.py, checks buffers before calling and turns a status into
 * an exception in one place). Type ids are ggml's.
 *
 * The declarations between LI_CDEF_BEGIN and LI_CDEF_END are also the cffi cdef of
 * localinfer._kernels: build_kernels.py reads them from this file, so C and Python cannot
 * drift apart. cffi parses them without a preprocessor: no '#' lines or macros in there.
 */
#ifndef LOCALINFER_H
#define LOCALINFER_H

#include <stddef.h>
#include <stdint.h>

/* LI_CDEF_BEGIN */

/* What every entry point returns (besides the queries that return a name or a count). */
typedef enum {
    LI_OK = 0,
    LI_EINVAL = -1,     /* bad size, count or pointer */
    LI_ETYPE = -2,      /* a type these kernels do not handle */
    LI_ENOMEM = -3,     /* an allocation (scratch, thread-local buffers) failed */
    LI_EISA = -4,       /* an ISA this build lacks or this CPU cannot run */
} li_status;

/* y[m][n_out] = x[m][k] . w[n_out][k]^T; w rows are raw GGUF rows of `row_bytes` bytes
 * (k / block_size * type_size), x and y float32 row-major. */
int li_matmul(int wtype, const void *w, size_t row_bytes, int64_t n_out, int64_t k,
              const float *x, int64_t m, float *y);

/* Weight layouts (core/repack.c). LI_LAYOUT_ROWS: the GGUF rows as they are. LI_LAYOUT_X4: groups of four
 * rows with their blocks interleaved, built once at load by li_repack (n_out a multiple of 4; the same
 * bytes, the same offsets per group), which the decode GEMV reads as one stream. */
typedef enum {
    LI_LAYOUT_ROWS = 0,
    LI_LAYOUT_X4 = 1,
} li_layout;
/* the layout worth building for wtype on the active ISA: LI_LAYOUT_X4 where it has a dot over x4 groups */
int li_layout_for(int wtype);
/* 1 where that layout gives, for any number of activation rows, the bits of the rows as they are: a
 * matrix of wtype can then move into it while in use (a repack after the first token), unseen */
int li_layout_same_bits(int wtype);
/* n_out rows of row_bytes at src -> dst (as many bytes, not overlapping src) in `layout` */
int li_repack(int wtype, int layout, const void *src, size_t row_bytes, int64_t n_out, void *dst);
/* li_matmul over w in `layout` (GEMV rows of an x4 matrix agree with li_matmul's up to float rounding) */
int li_matmul_layout(int wtype, int layout, const void *w, size_t row_bytes, int64_t n_out, int64_t k,
                     const float *x, int64_t m, float *y);
/* li_matmul_layout over a matrix kept in up to LI_MAX_PARTS pieces: its rows are the part_rows[i] rows at
 * parts[i], in order (q | k | v, gate | up, each where the file mapped it: one call, one quantization of
 * x, no copy). Every part but the last has a multiple of 16 rows, so the GEMV's row chunks and the x4
 * groups never straddle two parts. */
enum { LI_MAX_PARTS = 4 };
int li_matmul_parts(int wtype, int layout, const void *const *parts, const int64_t *part_rows, int n_parts,
                    size_t row_bytes, int64_t k, const float *x, int64_t m, float *y);

/* With m > 0, li_matmul on the calling thread uses the GEMV below m rows, each row's result bitwise a
 * 1-row call's, and the tiled GEMM from m on; speculative decoding sets it while verifying drafted
 * tokens so that each verified row rounds as a decode step. 0 (the default): the GEMV below 6 rows
 * (LI_GEMM_MIN_M), and from 3 rows to 15 (23 on AVX-512) of an x4 matrix through a 16-row kernel
 * where its type has one, whose rows are not a 1-row call's bits. Returns the previous value, or
 * LI_EINVAL for m < 0. */
int li_set_gemm_min_rows(int m);

/* on != 0: li_matmul on the calling thread takes the tiled GEMM, and li_attention_f16 its batched P.V
 * (V widened once per call), for any number of rows, so that each row has the bits it has among many
 * (from 16 rows on, each row's result is independent of the others). A prompt whose first tokens'
 * K/V came from a cache computes its last few rows this way and gets the logits of the whole prompt
 * computed at once. Overrides li_set_gemm_min_rows while set. Returns the previous value. */
int li_set_batched_rows(int on);

/* bytes ahead of its reads from which a dot that streams a weight matrix prefetches (the x4 dots, and
 * the row dots of types whose ISA table says so; core/li.h), for the whole process; 0: none, the
 * hardware prefetcher alone. At most 1 MiB. Returns the previous value, or LI_EINVAL. */
int li_set_stream_ahead(int bytes);

/* n elements of one row of `type` -> float32 (bit-identical to localinfer.formats.dequantize) */
int li_dequantize_row(int type, const void *src, float *dst, int64_t n);

/* n floats -> one row of an activation type (Q8_0, Q8_1, Q8_K, F16, BF16, F32) */
int li_quantize_row(int act_type, const float *src, void *dst, int64_t n);

/* dot product of one weight row with one row already in the type's vec_dot_type */
int li_vec_dot(int wtype, int64_t n, const void *w, const void *a, float *out);

/* block size, bytes per block and activation (vec_dot) type of a weight type */
int li_type_info(int type, int *block_size, int *type_size, int *vec_dot_type);

/* ISA variants: the one in use, the ones this build contains (comma-separated), and
 * whether one can run here (1: built and supported by this CPU, 0: built but the CPU
 * lacks it, -1: not in this build). li_force_isa switches variants (LI_EISA if it
 * cannot run here); the env var LOCALINFER_ISA does the same at load time. */
const char *li_isa_name(void);
const char *li_isa_built(void);
int li_isa_supported(const char *name);
int li_force_isa(const char *name);

/* thread pool: n >= 1 threads (the caller counts as one) */
int li_set_threads(int n);
int li_get_threads(void);
int li_default_threads(void);
/* on != 0: every call from the calling thread runs on that thread alone, never on the pool's workers: a
 * background job (a repack after load) that must not hold the pool while a forward pass wants it (a
 * caller that finds the pool busy runs its matmul alone). Returns the previous value. */
int li_set_pool_alone(int on);

/* core/ops.c, core/attention.c: the non-matmul ops of a layer. The attention's sinks: (n_head) logits that
 * join each head's softmax denominator and attend to nothing (gpt-oss), or NULL */
int li_rms_norm(const float *x, const float *w, float *y, int64_t n_rows, int64_t dim, float eps);
int li_layer_norm(const float *x, const float *w, const float *b, float *y, int64_t n_rows, int64_t dim,
                  double eps);
int li_rope(float *x, int64_t n_tok, int64_t n_head, int64_t head_dim, int64_t n_rot,
            const int64_t *pos, const double *inv_freq, int neox);
int li_glu(const float *g, int64_t ldg, const float *u, int64_t ldu, float *y, int64_t n_rows, int64_t n_cols,
           const float *table);
int li_attention_f16(const float *q, const void *k, const void *v, float *out, int64_t n_q, int64_t n_head,
                     int64_t n_head_kv, int64_t head_dim, int64_t n_kv, const int64_t *q_pos, int64_t key_start,
                     float scale, int64_t window, float softcap, const float *sinks);
/* core/attention_kv.c: the same with K and V rows of type k_type / v_type (F16, Q8_0 or Q4_0; head_dim a
 * multiple of the block sizes), read in place: (n_kv, n_head_kv, head_dim / block * type_size) bytes each */
int li_attention_kv(const float *q, int k_type, const void *k, int v_type, const void *v, float *out, int64_t n_q,
                    int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t n_kv, const int64_t *q_pos,
                    int64_t key_start, float scale, int64_t window, float softcap, const float *sinks);

/* core/attention_encoder.c: an encoder's bidirectional attention over a batch of padded texts, float32:
 * q, k, v, out (n_batch, n_len, n_head, head_dim); text b is its first lengths[b] (0..n_len) rows, the
 * keys past it are masked and its query rows past it are written as zeros; alibi_slopes (n_head) lower
 * the score of key j for query i by slope * |i - j|, or NULL; n_swa > 0: query i sees only the keys with
 * |i - j| <= n_swa / 2 (llama.cpp's LLAMA_SWA_TYPE_SYMMETRIC: ModernBERT's local layers), 0: all */
int li_encoder_attention(const float *q, const float *k, const float *v, float *out, int64_t n_batch,
                         int64_t n_len, int64_t n_head, int64_t head_dim, const int64_t *lengths, float scale,
                         const float *alibi_slopes, int64_t n_swa);

typedef struct {
    int wtype;                 /* ggml type id of w's rows */
    const void *w;             /* (n_out, row_bytes) raw rows */
    size_t row_bytes;
    int64_t n_out, k;
    const float *bias;         /* (n_out) or NULL */
    int layout;                /* li_layout of w (0: rows) */
    int n_parts;               /* > 1: w is the first of the parts at `parts` (li_matmul_parts); 0 or 1: w alone */
    const void *const *parts;
    const int64_t *part_rows;
} li_linear;

typedef struct {
    int64_t n_embd, n_head, n_head_kv, head_dim, n_ff, n_rot;
    float eps;
    float attn_scale;          /* multiplies the scores */
    float q_scale;             /* multiplies q after rope when > 0 (phi3) */
    float rope_mscale;         /* multiplies q and k's rotated dimensions (longrope); 1: none */
    int neox;                  /* rope pairs (i, i + n_rot/2) instead of (2i, 2i + 1) */
    const double *inv_freq;    /* (n_rot / 2), unless a layer has its own */
    const float *geglu_table;  /* NULL: SiLU gating; else GELU from ggml's f16 table (core/ops.c) */
} li_decoder_config;

/* core/moe.c: a sparse mixture-of-experts block (arch/moe.py): out (n, n_embd) = the weighted sum of each
 * token's n_used most probable experts' gated MLPs on h (n, n_embd); SiLU gating, or GELU from
 * glu_table (as li_glu), or gpt-oss's clamped SwiGLU. Every expert's matrices have one type per kind;
 * biases (router, experts) are optional. With a shared expert (qwen2moe, no biases),
 * out += sigmoid(h . shexp_gate_inp) * shexp_down(glu(shexp_gate(h), shexp_up(h))). */
typedef enum {
    LI_MOE_GLU = 0,            /* li_glu: SiLU, or GELU from the table */
    LI_MOE_SWIGLU_OAI = 1,     /* gpt-oss: min(g, 7) * sigmoid(1.702 min(g, 7)) * (clamp(u, -7, 7) + 1) */
} li_moe_act;

typedef struct li_moe {
    li_linear router;          /* (n_expert, n_embd): the routing logits, bias optional (gpt-oss) */
    const li_linear *gate, *up;   /* n_expert of them, each (n_ff_exp, n_embd), bias optional */
    const li_linear *down;     /* n_expert of them, each (n_embd, n_ff_exp), bias optional */
    int64_t n_expert, n_used;
    int normalize;             /* divide the chosen experts' weights by their sum (expert_weights_norm) */
    int after_top_k;           /* 0: softmax over every logit, then the top k; 1: the k largest logits, then
                                  softmax over those k (gpt-oss) */
    int act;                   /* li_moe_act */
    const float *shexp_gate_inp;   /* (n_embd) the shared expert's gate vector, or NULL: no shared expert */
    li_linear shexp_gate, shexp_up;   /* (n_ff_shexp, n_embd) each, when shexp_gate_inp */
    li_linear shexp_down;      /* (n_embd, n_ff_shexp) */
} li_moe;
int li_moe_ffn(const li_moe *m, const float *h, int64_t n, float *out, const float *glu_table);

typedef struct {
    const float *attn_norm, *ffn_norm;   /* (n_embd) */
    const float *q_norm, *k_norm;        /* (head_dim) or NULL; (n_head * head_dim), (n_head_kv * head_dim) with qk_norm_whole */
    int qk_norm_whole;         /* 1: one RMSNorm over each token's whole Q and K projections (olmoe), 0: per head */
    li_linear qkv[3];
    int n_qkv;                 /* 1: qkv[0] rows are q | k | v; 3: q, k, v */
    li_linear wo;
    li_linear gate_up[2];
    int n_gate_up;             /* 1: gate_up[0] rows are gate | up; 2: gate, up */
    li_linear down;
    const float *attn_post_norm, *ffn_post_norm;   /* (n_embd) on each branch's output, or NULL (gemma3) */
    const double *inv_freq;    /* this layer's rope frequencies, or NULL: the config's */
    int64_t window;            /* sliding window (keys within the last `window` positions), 0: none */
    int ring;                  /* 0: K/V in the sequence's full cache, 1: in its ring (sliding window) */
    int64_t cache_layer;       /* this layer's index inside that cache */
    const struct li_moe *moe;  /* routed experts in place of gate_up / down (qwen3moe, mixtral), or NULL */
    const float *attn_sinks;   /* (n_head) the attention's sink logits (gpt-oss), or NULL */
} li_decoder_layer;

typedef struct {
    void *k, *v;               /* the sequence's full caches, (n_full_layers, n_ctx, n_head_kv, head_dim) of type_k / type_v */
    int64_t n_ctx, offset;     /* its new keys go to rows [offset, offset + n_tokens) */
    int64_t n_tokens;          /* its rows of x, after those of the sequences before it */
    void *ring_k, *ring_v;     /* sliding-window layers: (n_ring_layers, n_slots, ...) as k / v, position p in
                                  slot p % n_slots; NULL when no layer uses them */
    int64_t n_slots;
    int type_k, type_v;        /* ggml type of the cache rows (of k / ring_k, v / ring_v): F16, Q8_0 or Q4_0 */
} li_kv_seq;

/* core/decoder_layers.c: n_layers decoder layers (the llama family's, gemma3's) on x (n, n_embd) in place, n the
 * sum of the sequences' n_tokens, at positions pos (n) */
int li_decoder_layers(const li_decoder_config *c, const li_decoder_layer *layers, int n_layers, float *x,
                      const int64_t *pos, const li_kv_seq *seqs, int n_seqs);

/* core/membw.c: best-of-`reps` bandwidth in bytes/s of the pool's threads (li_get_threads) streaming a
 * buffer of `bytes` bytes (allocated and faulted in first; give more than the last-level cache):
 * read, and copy (read + write bytes) unless copy_bps is NULL. */
int li_membw(int64_t bytes, int reps, double *read_bps, double *copy_bps);

/* core/merge.c: the tokenizers' pair merges (llama.cpp's llm_bigram_bpe / llm_bigram_spm work queue).
 * A vocabulary is looked up either by pairs of symbol ids (BPE: pair i is pair_left[i], pair_right[i],
 * merging at rank pair_rank[i] into symbol pair_result[i]; byte_symbol (256) is each byte's symbol) or,
 * when pair_slots is NULL, by text (SPM: text i is text_blob[text_offsets[i] .. text_offsets[i+1]],
 * rank text_rank[i], and it is symbol i). Lower ranks merge first, the leftmost pair on ties.
 * The slots are an open-addressing index (a power of two, more than the entries) that
 * li_merge_pairs_index / li_merge_texts_index fill. */
typedef struct {
    const int32_t *pair_left, *pair_right, *pair_rank, *pair_result;   /* (n_pairs) each */
    const int32_t *pair_slots;                 /* (n_pair_slots), or NULL to look up by text */
    int64_t n_pair_slots;
    const int32_t *byte_symbol;                /* (256) a byte's symbol id, -1 when it has none */
    const uint8_t *text_blob;
    const int64_t *text_offsets;               /* (n_texts + 1) */
    const int32_t *text_rank;                  /* (n_texts) */
    const int32_t *text_slots;                 /* (n_text_slots) */
    int64_t n_text_slots;
    int64_t text_max_bytes;                    /* the longest text: longer pairs are not looked up */
    int64_t n_ranks;                           /* 1 + the highest rank */
    int64_t rank_queue_from;                   /* words of this many bytes and more queue pairs in lists
                                                  per rank (n_ranks heads), shorter ones in one heap */
} li_merge_vocab;

int li_merge_pairs_index(const int32_t *left, const int32_t *right, int64_t n_pairs, int32_t *slots, int64_t n_slots);
int li_merge_texts_index(const uint8_t *blob, const int64_t *offsets, int64_t n_texts, int32_t *slots, int64_t n_slots);

/* Merges one word of n bytes (valid UTF-8). The first symbols are its bytes (by pairs) or its code
 * points (by text). Writes the final symbols' ids to sym[0..k) (-1: a code point that is no text)
 * and their byte lengths to span[0..k); both (n). Returns k, or a negative li_status. */
int64_t li_merge_word(const li_merge_vocab *v, const uint8_t *word, int64_t n, int32_t *sym, int32_t *span);

/* li_merge_word on each word of a text of n bytes, the words ending at word_end[0..n_words) (ascending;
 * the last is n). Writes all words' final symbols one after the other, and each word's number of them
 * to n_sym (n_words) unless it is NULL; returns their count, or a negative li_status. */
int64_t li_merge_words(const li_merge_vocab *v, const uint8_t *text, int64_t n, const int64_t *word_end,
                       int64_t n_words, int32_t *sym, int32_t *span, int32_t *n_sym);

/* core/strings.c: the GGUF string array of `count` strings at buf[pos..] (each a u64 length <= max_len,
 * then its bytes; all within size). Returns the offset after it, or -(i + 1) when string i does not
 * fit. With out NULL it only measures: *n_out = the bytes of the strings joined by one NUL each. With
 * out (of *n_out bytes, from a measuring call) it writes them so, and *has_nul = 1 if a string holds a
 * NUL byte itself. */
int64_t li_string_array(const uint8_t *buf, int64_t size, int64_t pos, int64_t count, int64_t max_len,
                        uint8_t *out, int64_t *n_out, int32_t *has_nul);

/* LI_CDEF_END */

#endif /* LOCALINFER_H */
