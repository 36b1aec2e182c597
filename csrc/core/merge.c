/* merge.c -- the tokenizers' pair-merge loop: llama.cpp's `llm_bigram_bpe` / `llm_bigram_spm` work
 * queue (src/llama-vocab.cpp) over the bytes of one word, in time O(n log n) and a few int32s per byte.
 *
 * The readable oracles are `bpe_merge_ref` and `spm_merge_ref` in src/localinfer/tokenizer/; this
 * loop must give the same symbols for every word (tests/tokenizer/test_merge_c.py).
 *
 * A symbol is a byte range [s, s + span) of the word. Its span is kept at both its first and its
 * last byte (boundary tags), so the neighbours of a symbol are found without prev/next arrays:
 * the next one starts at s + span[s], the previous one at s - span[s - 1]. sym[s] holds the
 * symbol's id at its first byte, or LI_MERGE_GONE once it was merged into its left neighbour.
 *
 * Heap entries are (rank << 32 | left start). A popped entry is acted on when the pair now at
 * `left` still has that rank; otherwise it is stale and skipped. That check is llama.cpp's: by
 * pairs (BPE) a rank names one pair of symbols, so an equal rank means an unchanged pair. By text
 * (SPM) a rank is a score that several pairs share, but a pair that formed at `left` was queued
 * under its own rank and left, so an entry with an equal key is in the heap anyway and taking
 * this one instead changes nothing.
 */
#include <stdlib.h>
#include <string.h>

#include "core/li.h"

#define LI_MERGE_GONE INT32_MIN

static inline uint64_t mix64(uint64_t h) {
    /* splitmix64's finalizer: every input bit reaches every slot bit */
    h ^= h >> 30; h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27; h *= 0x94d049bb133111ebULL;
    return h ^ (h >> 31);
}

static inline uint64_t pair_hash(int32_t a, int32_t b) {
    return mix64(((uint64_t)(uint32_t)a << 32) | (uint32_t)b);
}

static inline uint64_t text_hash(const uint8_t *p, int64_t n) {
    uint64_t h = 1469598103934665603ULL;           /* FNV-1a 64 */
    for (int64_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
    return mix64(h);
}

/* a[0..n) == b[0..n) for the short texts of tokens: 8 bytes at a time, no call */
static inline int bytes_equal(const uint8_t *a, const uint8_t *b, int64_t n) {
    for (; n >= 8; a += 8, b += 8, n -= 8) {
        uint64_t x, y;
        memcpy(&x, a, 8); memcpy(&y, b, 8);
        if (x != y) return 0;
    }
    for (; n > 0; a++, b++, n--)
        if (*a != *b) return 0;
    return 1;
}

static int slots_ok(const int32_t *slots, int64_t n_slots) {
    return slots && n_slots > 0 && (n_slots & (n_slots - 1)) == 0;
}

int li_merge_pairs_index(const int32_t *left, const int32_t *right, int64_t n_pairs, int32_t *slots, int64_t n_slots) {
    if (!slots_ok(slots, n_slots) || n_pairs < 0 || n_pairs >= n_slots || n_pairs > INT32_MAX || (n_pairs && (!left || !right)))
        return LI_EINVAL;
    for (int64_t i = 0; i < n_slots; i++) slots[i] = -1;
    const uint64_t mask = (uint64_t)n_slots - 1;
    for (int64_t i = 0; i < n_pairs; i++) {
        uint64_t h = pair_hash(left[i], right[i]) & mask;
        for (;;) {                                  /* the first pair of a kind wins, as in parse_merges */
            int32_t j = slots[h];
            if (j < 0) { slots[h] = (int32_t)i; break; }
            if (left[j] == left[i] && right[j] == right[i]) break;
            h = (h + 1) & mask;
        }
    }
    return LI_OK;
}

int li_merge_texts_index(const uint8_t *blob, const int64_t *offsets, int64_t n_texts, int32_t *slots, int64_t n_slots) {
    if (!slots_ok(slots, n_slots) || n_texts < 0 || n_texts >= n_slots || n_texts > INT32_MAX || !offsets)
        return LI_EINVAL;
    for (int64_t i = 0; i < n_texts; i++)
        if (offsets[i + 1] < offsets[i] || offsets[i] < 0) return LI_EINVAL;
    for (int64_t i = 0; i < n_slots; i++) slots[i] = -1;
    const uint64_t mask = (uint64_t)n_slots - 1;
    for (int64_t i = 0; i < n_texts; i++) {
        const uint8_t *p = blob + offsets[i];
        int64_t n = offsets[i + 1] - offsets[i];
        uint64_t h = text_hash(p, n) & mask;
        for (;;) {
            int32_t j = slots[h];
            if (j < 0) { slots[h] = (int32_t)i; break; }
            if (offsets[j + 1] - offsets[j] == n && memcmp(blob + offsets[j], p, (size_t)n) == 0) break;
            h = (h + 1) & mask;
        }
    }
    return LI_OK;
}

/* the rank and merged id of the pair of symbols starting at l and r, or -1 */
static inline int64_t lookup(const li_merge_vocab *v, const uint8_t *word, const int32_t *sym, const int32_t *span,
                             int64_t l, int64_t r, int32_t *result) {
    if (v->pair_slots) {
        int32_t a = sym[l], b = sym[r];
        if (a < 0 || b < 0) return -1;
        const uint64_t mask = (uint64_t)v->n_pair_slots - 1;
        for (uint64_t h = pair_hash(a, b) & mask;; h = (h + 1) & mask) {
            int32_t j = v->pair_slots[h];
            if (j < 0) return -1;
            if (v->pair_left[j] == a && v->pair_right[j] == b) { *result = v->pair_result[j]; return v->pair_rank[j]; }
        }
    }
    int64_t n = (int64_t)span[l] + span[r];
    if (n > v->text_max_bytes) return -1;
    const uint8_t *p = word + l;
    const uint64_t mask = (uint64_t)v->n_text_slots - 1;
    for (uint64_t h = text_hash(p, n) & mask;; h = (h + 1) & mask) {
        int32_t j = v->text_slots[h];
        if (j < 0) return -1;
        const int64_t o = v->text_offsets[j];
        if (v->text_offsets[j + 1] - o == n && bytes_equal(v->text_blob + o, p, n)) { *result = j; return v->text_rank[j]; }
    }
}

/* the id of a whole symbol by its text, or -1 (by text only) */
static int32_t text_id(const li_merge_vocab *v, const uint8_t *p, int64_t n) {
    if (n > v->text_max_bytes) return -1;
    const uint64_t mask = (uint64_t)v->n_text_slots - 1;
    for (uint64_t h = text_hash(p, n) & mask;; h = (h + 1) & mask) {
        int32_t j = v->text_slots[h];
        if (j < 0) return -1;
        const int64_t o = v->text_offsets[j];
        if (v->text_offsets[j + 1] - o == n && bytes_equal(v->text_blob + o, p, n)) return j;
    }
}

/* a binary min-heap of (rank << 32 | left) */
typedef struct { uint64_t *a, *local; int64_t n, cap; } heap64;   /* a == local: a caller's buffer */

static void sift_down(uint64_t *a, int64_t n, int64_t i) {
    uint64_t x = a[i];
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && a[c + 1] < a[c]) c++;
        if (a[c] >= x) break;
        a[i] = a[c];
        i = c;
    }
    a[i] = x;
}

static int heap_push(heap64 *h, uint64_t x) {
    if (h->n == h->cap) {
        int64_t cap = h->cap ? h->cap * 2 : 64;
        uint64_t *a = h->a == h->local ? malloc((size_t)cap * sizeof *a) : realloc(h->a, (size_t)cap * sizeof *a);
        if (!a) return LI_ENOMEM;
        if (h->a == h->local && h->n) memcpy(a, h->a, (size_t)h->n * sizeof *a);
        h->a = a, h->cap = cap;
    }
    int64_t i = h->n++;
    while (i > 0 && h->a[(i - 1) / 2] > x) { h->a[i] = h->a[(i - 1) / 2]; i = (i - 1) / 2; }
    h->a[i] = x;
    return LI_OK;
}

static uint64_t heap_pop(heap64 *h) {
    const uint64_t top = h->a[0];
    h->a[0] = h->a[--h->n];
    sift_down(h->a, h->n, 0);
    return top;
}

static inline uint64_t heap_key(int64_t rank, int64_t left) { return ((uint64_t)rank << 32) | (uint64_t)left; }

/* The work queue. One heap of a long word's pairs is a cache miss per level of every pop, so a long
 * word queues its pairs by rank instead and takes the ranks in order, each rank's pairs sorted by left
 * start (a batch). The word's first pairs are sorted by rank up front (a counting sort). A merge's new
 * pairs nearly always rank after the merge itself (a BPE vocabulary learns a token before the merges
 * that use it), so they go to a list for their rank, joined to its batch when its turn comes; the
 * others (a rank not above the batch's) go to the heap, and each step takes the smaller of the
 * batch's next entry and the heap's top. Short words use the heap alone. */
#define CHUNK_LEFTS 14
typedef struct { int32_t next, n; int32_t left[CHUNK_LEFTS]; } rank_chunk;   /* one cache line */

typedef struct {
    heap64 heap;
    int64_t rank;                 /* the batch's rank: pairs ranked above it go to the lists */
    int64_t n_ranks;              /* 0: no lists (heap only) */
    int64_t *first;               /* (n_ranks + 1) rank r's first pairs: first_left[first[r] .. first[r+1]) */
    int32_t *first_left;          /* (n) */
    int32_t *head, *tail;         /* (n_ranks) each rank's list of chunks, -1 when empty */
    rank_chunk *chunks;           /* free ones chained from free_chunk */
    int64_t n_chunks, chunk_cap;
    int32_t free_chunk;
    const int32_t *batch;         /* the rank being taken: a slice of first_left, or own_batch */
    int32_t *own_batch;
    int64_t batch_n, batch_i, own_cap;
    const int32_t *sym, *span;    /* prefetched ahead of the batch: its lefts are far apart in a long word */
    const uint8_t *word;
} merge_queue;

static int queue_push(merge_queue *q, int64_t rank, int64_t left) {
    if (rank <= q->rank) return heap_push(&q->heap, heap_key(rank, left));
    int32_t t = q->tail[rank];
    if (t < 0 || q->chunks[t].n == CHUNK_LEFTS) {
        int32_t c = q->free_chunk;
        if (c >= 0) {
            q->free_chunk = q->chunks[c].next;
        } else {
            if (q->n_chunks == q->chunk_cap) {
                int64_t cap = q->chunk_cap ? q->chunk_cap * 2 : 1024;
                rank_chunk *p = cap > INT32_MAX ? NULL : realloc(q->chunks, (size_t)cap * sizeof *p);
                if (!p) return LI_ENOMEM;
                q->chunks = p, q->chunk_cap = cap;
            }
            c = (int32_t)q->n_chunks++;
        }
        q->chunks[c].next = -1;
        q->chunks[c].n = 0;
        if (t >= 0) q->chunks[t].next = c; else q->head[rank] = c;
        q->tail[rank] = t = c;
    }
    q->chunks[t].left[q->chunks[t].n++] = (int32_t)left;
    return LI_OK;
}

static int cmp_i32(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* the next rank with pairs as the batch, or 0 when no rank is left */
static int queue_next_batch(merge_queue *q, int *rc) {
    int64_t r = q->rank + 1;
    while (r < q->n_ranks && q->head[r] < 0 && q->first[r] == q->first[r + 1]) r++;
    q->rank = r;
    if (r >= q->n_ranks) return 0;
    const int32_t *firsts = q->first_left + q->first[r];
    const int64_t n_firsts = q->first[r + 1] - q->first[r];
    q->batch_i = 0;
    if (q->head[r] < 0) { q->batch = firsts, q->batch_n = n_firsts; return 1; }
    int64_t n = n_firsts;
    for (int32_t c = q->head[r]; c >= 0; c = q->chunks[c].next) n += q->chunks[c].n;
    if (n > q->own_cap) {
        int32_t *p = realloc(q->own_batch, (size_t)n * sizeof *p);
        if (!p) { *rc = LI_ENOMEM; return 0; }
        q->own_batch = p, q->own_cap = n;
    }
    memcpy(q->own_batch, firsts, (size_t)n_firsts * sizeof *firsts);
    n = n_firsts;
    for (int32_t c = q->head[r], next; c >= 0; c = next) {
        next = q->chunks[c].next;
        memcpy(q->own_batch + n, q->chunks[c].left, (size_t)q->chunks[c].n * sizeof(int32_t));
        n += q->chunks[c].n;
        q->chunks[c].next = q->free_chunk;
        q->free_chunk = c;
    }
    q->head[r] = q->tail[r] = -1;
    qsort(q->own_batch, (size_t)n, sizeof *q->own_batch, cmp_i32);
    q->batch = q->own_batch, q->batch_n = n;
    return 1;
}

/* the next (rank << 32 | left) in order, or 0 with *more = 0 when the queue is empty */
static uint64_t queue_pop(merge_queue *q, int *more, int *rc) {
    for (;;) {
        if (q->batch_i < q->batch_n) {
            uint64_t b = heap_key(q->rank, q->batch[q->batch_i]);
            if (q->heap.n == 0 || b < q->heap.a[0]) {
#if defined(__GNUC__) || defined(__clang__)
                if (q->batch_i + 16 < q->batch_n) {
                    __builtin_prefetch(q->sym + q->batch[q->batch_i + 16]);
                    __builtin_prefetch(q->span + q->batch[q->batch_i + 16]);
                    __builtin_prefetch(q->word + q->batch[q->batch_i + 16]);
                }
#endif
                q->batch_i++;
                return b;
            }
            return heap_pop(&q->heap);
        }
        if (q->heap.n > 0) return heap_pop(&q->heap);
        if (!q->n_ranks || !queue_next_batch(q, rc)) { *more = 0; return 0; }
    }
}

static void queue_free(merge_queue *q) {
    if (q->heap.a != q->heap.local) free(q->heap.a);
    free(q->first); free(q->first_left); free(q->head); free(q->tail); free(q->chunks);
    free(q->own_batch);
}

/* queues the pairs[0..n_pairs) of (rank << 32 | left), in order of left; the queue owns `pairs` unless
 * it is `local` (a buffer of `cap` entries the caller keeps) */
static int queue_init(merge_queue *q, uint64_t *pairs, uint64_t *local, int64_t cap, int64_t n_pairs, int64_t n_ranks) {
    memset(q, 0, sizeof *q);
    q->free_chunk = -1;
    q->heap.a = pairs, q->heap.local = local, q->heap.n = n_pairs, q->heap.cap = cap;
    if (!n_ranks) {
        q->rank = INT64_MAX;
        for (int64_t i = n_pairs / 2 - 1; i >= 0; i--) sift_down(pairs, n_pairs, i);
        return LI_OK;
    }
    q->rank = -1;
    q->n_ranks = n_ranks;
    q->first = calloc((size_t)n_ranks + 1, sizeof *q->first);
    q->first_left = malloc((size_t)(n_pairs ? n_pairs : 1) * sizeof *q->first_left);
    q->head = malloc((size_t)n_ranks * sizeof *q->head);
    q->tail = malloc((size_t)n_ranks * sizeof *q->tail);
    if (!q->first || !q->first_left || !q->head || !q->tail) return LI_ENOMEM;
    memset(q->head, 0xff, (size_t)n_ranks * sizeof *q->head);
    memset(q->tail, 0xff, (size_t)n_ranks * sizeof *q->tail);
    for (int64_t i = 0; i < n_pairs; i++) q->first[(pairs[i] >> 32) + 1]++;
    for (int64_t r = 0; r < n_ranks; r++) q->first[r + 1] += q->first[r];
    for (int64_t i = 0; i < n_pairs; i++) {          /* stable: each rank's lefts stay in order */
        int64_t r = (int64_t)(pairs[i] >> 32);
        q->first_left[q->first[r]++] = (int32_t)(pairs[i] & 0xffffffffu);
    }
    for (int64_t r = n_ranks; r > 0; r--) q->first[r] = q->first[r - 1];
    q->first[0] = 0;
    q->heap.n = 0;                                   /* the pairs' buffer becomes the (empty) heap */
    return LI_OK;
}

static int push_pair(merge_queue *q, const li_merge_vocab *v, const uint8_t *word, const int32_t *sym, const int32_t *span,
                     int64_t l, int64_t r) {
    int32_t result;
    int64_t rank = lookup(v, word, sym, span, l, r, &result);
    return rank < 0 ? LI_OK : queue_push(q, rank, l);
}

/* the length of the UTF-8 sequence a lead byte starts (the text is valid UTF-8: it came from a str) */
static inline int32_t utf8_len(uint8_t b) { return b < 0xC0 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }

static int vocab_ok(const li_merge_vocab *v) {
    return v->pair_slots ? slots_ok(v->pair_slots, v->n_pair_slots) && v->pair_left && v->pair_right && v->pair_rank
                               && v->pair_result && v->byte_symbol
                         : slots_ok(v->text_slots, v->n_text_slots) && v->text_blob && v->text_offsets && v->text_rank;
}

#define LOCAL_PAIRS 64   /* a word this short queues its pairs on the stack */

/* li_merge_word without the argument checks */
static int64_t merge_word(const li_merge_vocab *v, const uint8_t *word, int64_t n, int32_t *sym, int32_t *span) {
    const int by_pairs = v->pair_slots != NULL;
    if (n == 0) return 0;

    /* one symbol per byte (BPE) or per code point (SPM), spans tagged at both ends */
    if (by_pairs) {
        for (int64_t i = 0; i < n; i++) { sym[i] = v->byte_symbol[word[i]]; span[i] = 1; }
    } else {
        for (int64_t i = 0; i < n;) {
            int32_t k = utf8_len(word[i]);
            if (k > n - i) return LI_EINVAL;
            for (int32_t j = 1; j < k; j++) { sym[i + j] = LI_MERGE_GONE; span[i + j] = 0; }
            span[i] = span[i + k - 1] = k;
            sym[i] = text_id(v, word + i, k);
            i += k;
        }
    }
    if (span[0] == n) return 1;                      /* one symbol: nothing to merge */

    /* every adjacent pair; lists per rank pay for their (n_ranks) heads on long words only */
    uint64_t local[LOCAL_PAIRS];
    uint64_t *pairs = n <= LOCAL_PAIRS ? local : malloc((size_t)n * sizeof *pairs);
    if (!pairs) return LI_ENOMEM;
    int64_t n_pairs = 0;
    for (int64_t l = 0; l + span[l] < n; l += span[l]) {
        int32_t result;
        int64_t rank = lookup(v, word, sym, span, l, l + span[l], &result);
        if (rank >= 0) pairs[n_pairs++] = heap_key(rank, l);
    }
    const int by_rank = v->n_ranks > 0 && n >= v->rank_queue_from;
    merge_queue q;
    int rc = queue_init(&q, pairs, local, pairs == local ? LOCAL_PAIRS : n, n_pairs, by_rank ? v->n_ranks : 0);
    q.sym = sym, q.span = span, q.word = word;

    for (int more = 1; rc == LI_OK;) {
        const uint64_t top = queue_pop(&q, &more, &rc);
        if (!more) break;
        const int64_t left = (int64_t)(top & 0xffffffffu), rank = (int64_t)(top >> 32);
        if (sym[left] == LI_MERGE_GONE) continue;
        const int64_t right = left + span[left];
        if (right >= n) continue;
        int32_t result;
        if (lookup(v, word, sym, span, left, right, &result) != rank) continue;   /* stale */
        const int32_t joined = span[left] + span[right];
        sym[left] = result;
        sym[right] = LI_MERGE_GONE;
        span[left] = span[left + joined - 1] = joined;
        if (left > 0) rc = push_pair(&q, v, word, sym, span, left - span[left - 1], left);
        if (rc == LI_OK && left + joined < n) rc = push_pair(&q, v, word, sym, span, left, left + joined);
    }
    queue_free(&q);
    if (rc != LI_OK) return rc;

    int64_t k = 0;                                   /* compact: the i-th final symbol at index i */
    for (int64_t s = 0; s < n;) {
        const int32_t w = span[s];
        sym[k] = sym[s];
        span[k] = w;
        k++;
        s += w;
    }
    return k;
}

int64_t li_merge_word(const li_merge_vocab *v, const uint8_t *word, int64_t n, int32_t *sym, int32_t *span) {
    if (!v || n < 0 || n >= INT32_MAX || (n && (!word || !sym || !span)) || !vocab_ok(v))
        return LI_EINVAL;
    return merge_word(v, word, n, sym, span);
}

int64_t li_merge_words(const li_merge_vocab *v, const uint8_t *text, int64_t n, const int64_t *word_end,
                       int64_t n_words, int32_t *sym, int32_t *span, int32_t *n_sym) {
    if (!v || n < 0 || n >= INT32_MAX || n_words < 0 || (n && (!text || !sym || !span)) || (n_words && !word_end)
        || !vocab_ok(v))
        return LI_EINVAL;
    int64_t k = 0, start = 0;
    for (int64_t w = 0; w < n_words; w++) {
        const int64_t end = word_end[w];
        if (end < start || end > n) return LI_EINVAL;
        const int64_t m = merge_word(v, text + start, end - start, sym + start, span + start);
        if (m < 0) return m;
        if (n_sym) n_sym[w] = (int32_t)m;
        if (k != start) {   /* the word's symbols follow the ones before it */
            memmove(sym + k, sym + start, (size_t)m * sizeof *sym);
            memmove(span + k, span + start, (size_t)m * sizeof *span);
        }
        k += m;
        start = end;
    }
    return start == n ? k : LI_EINVAL;
}
