/* membw.c -- memory bandwidth as a decode step sees it: the pool's threads streaming a buffer
 * larger than the last-level cache.
 *
 * A decode step reads every weight once, spread over the pool (li_pool_run), so the figure it is
 * judged against is what those same threads can read from DRAM, not what one numpy thread can.
 * Read: every thread sums its share of 64-bit words into 8 independent lanes (plain C that the
 * compiler vectorizes, at baseline flags and again for AVX2; integer adds, so the loop is bound by
 * loads, not by an add's latency). Copy: memcpy of each share, counted as read + write bytes (STREAM's convention;
 * the write-allocate reads come on top and are not counted). The buffers are first written by the
 * pool's threads, so on a NUMA machine each share lies near the thread that streams it the most.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/li.h"

#define LANES 8
#define LI_MEMBW_MAX_SLOTS 1024   /* li_pool_run's slots: 4 per thread, 256 threads at most */
#define WORDS_PER_SLICE 512   /* shares are whole 4 KiB slices of 64-bit words */

typedef struct {
    uint64_t *src, *dst;      /* (n_words) each; dst NULL for the read test */
    int64_t n_words;
    int mode;                 /* 0: fill, 1: read, 2: copy */
    uint64_t sums[LI_MEMBW_MAX_SLOTS];   /* per slot, so the reads are not optimized away */
} membw_job;

static void share(const membw_job *j, int ith, int nth, int64_t *lo, int64_t *hi) {
    const int64_t n_slices = j->n_words / WORDS_PER_SLICE;
    *lo = n_slices * ith / nth * WORDS_PER_SLICE;
    *hi = n_slices * (ith + 1) / nth * WORDS_PER_SLICE;
}

/* the sum of words [lo, hi) in LANES independent lanes; hi - lo a multiple of LANES */
#define SUM_WORDS_BODY                                                  \
    uint64_t acc[LANES] = {0};                                          \
    for (int64_t i = lo; i < hi; i += LANES)                            \
        for (int l = 0; l < LANES; l++) acc[l] += s[i + l];             \
    uint64_t total = 0;                                                 \
    for (int l = 0; l < LANES; l++) total += acc[l];                    \
    return total;

static uint64_t sum_words_generic(const uint64_t *s, int64_t lo, int64_t hi) { SUM_WORDS_BODY }

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
/* The same loop with 32-byte loads: one core streams about a quarter faster with them than with
 * baseline SSE2's 16-byte ones (the AVX2 kernels' decode loads as wide). Used when the kernels in
 * use are AVX2 or AVX-512, so the CPU is known to have it. */
__attribute__((target("avx2"))) static uint64_t sum_words_avx2(const uint64_t *s, int64_t lo, int64_t hi) {
    SUM_WORDS_BODY
}
#define HAVE_SUM_WORDS_AVX2 1
#endif

typedef uint64_t (*sum_words_fn)(const uint64_t *s, int64_t lo, int64_t hi);
static sum_words_fn sum_words = sum_words_generic;

static void task_membw(void *ctx, int ith, int nth) {
    membw_job *j = ctx;
    int64_t lo, hi;
    share(j, ith, nth, &lo, &hi);
    if (j->mode == 0) {
        for (int64_t i = lo; i < hi; i++) j->src[i] = (uint64_t)i;
        if (j->dst) memset(j->dst + lo, 0, (size_t)(hi - lo) * sizeof(uint64_t));
    } else if (j->mode == 1) {
        const uint64_t total = sum_words(j->src, lo, hi);
        if (ith < LI_MEMBW_MAX_SLOTS) j->sums[ith] = total;
    } else {
        memcpy(j->dst + lo, j->src + lo, (size_t)(hi - lo) * sizeof(uint64_t));
    }
}

static double seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* the best of `reps` runs of `mode` over the pool, in seconds */
static double best_time(membw_job *j, int mode, int reps) {
    double best = 0.0;
    j->mode = mode;
    for (int r = 0; r < reps; r++) {
        const double t0 = seconds();
        li_pool_run(task_membw, j, li_get_threads());
        const double dt = seconds() - t0;
        if (r == 0 || dt < best) best = dt;
    }
    return best;
}

int li_membw(int64_t bytes, int reps, double *read_bps, double *copy_bps) {
    if (bytes < (int64_t)(WORDS_PER_SLICE * sizeof(uint64_t)) || reps < 1 || !read_bps) return LI_EINVAL;
    if ((uint64_t)bytes > SIZE_MAX / 2) return LI_EINVAL;
#ifdef HAVE_SUM_WORDS_AVX2
    const char *isa = li_isa_name();
    sum_words = (strcmp(isa, "avx2") == 0 || strcmp(isa, "avx512") == 0) ? sum_words_avx2 : sum_words_generic;
#endif
    membw_job j = {0};
    j.n_words = bytes / (int64_t)sizeof(uint64_t) / WORDS_PER_SLICE * WORDS_PER_SLICE;
    const size_t n = (size_t)j.n_words * sizeof(uint64_t);
    j.src = aligned_alloc(64, n);
    if (copy_bps) j.dst = aligned_alloc(64, n);
    if (!j.src || (copy_bps && !j.dst)) {
        free(j.src);
        free(j.dst);
        return LI_ENOMEM;
    }
    best_time(&j, 0, 1);                                    /* fault every page in first */
    const int64_t streamed = j.n_words / WORDS_PER_SLICE * WORDS_PER_SLICE * (int64_t)sizeof(uint64_t);
    *read_bps = (double)streamed / best_time(&j, 1, reps);
    if (copy_bps) *copy_bps = 2.0 * (double)streamed / best_time(&j, 2, reps);
    free(j.src);
    free(j.dst);
    return LI_OK;
}
