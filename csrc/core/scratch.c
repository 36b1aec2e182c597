/* scratch.c -- per-thread scratch buffers that are kept between calls.
 *
 * A forward pass makes hundreds of matmul and attention calls, each needing a few buffers of the
 * same sizes as the last time. Allocating them fresh each call costs page faults: glibc hands out
 * blocks past its mmap threshold (and a worker thread's arena after trimming) as new pages, which
 * the kernel zeroes first -- with transparent huge pages 2 MiB at a time (BENCHMARKS.md, "Kernel choices": a large share of
 * gemma3's pp512 profile). Each thread keeps one grow-only buffer per slot instead; a slot's buffer
 * is valid until the same thread asks for that slot again, and it is freed when the thread exits.
 */
#include <pthread.h>
#include <stdlib.h>

#include "core/li.h"

typedef struct {
    void *p[LI_SCRATCH_SLOTS];
    size_t n[LI_SCRATCH_SLOTS];
} scratch_set;

static pthread_key_t key;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void free_set(void *v) {
    scratch_set *s = v;
    for (int i = 0; i < LI_SCRATCH_SLOTS; i++) free(s->p[i]);
    free(s);
}

static void make_key(void) { pthread_key_create(&key, free_set); }

void *li_scratch(int slot, size_t bytes) {
    pthread_once(&once, make_key);
    scratch_set *s = pthread_getspecific(key);
    if (!s) {
        s = calloc(1, sizeof(*s));
        if (!s || pthread_setspecific(key, s) != 0) { free(s); return NULL; }
    }
    if (bytes > s->n[slot]) {
        free(s->p[slot]);
        const size_t n = (bytes + bytes / 4 + 4095) / 4096 * 4096;   /* some headroom: sizes vary a little */
        s->p[slot] = aligned_alloc(64, n);
        s->n[slot] = s->p[slot] ? n : 0;
    }
    return s->p[slot];
}
