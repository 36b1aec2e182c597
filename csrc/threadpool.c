/* threadpool.c -- a persistent pthread pool; the calling thread is worker 0.
 *
 * li_pool_run(fn, ctx, want) runs fn(ctx, ith, nth) for ith = 0..nth-1 on all the
 * pool's threads (nth = li_get_threads()), or inline with nth = 1 when want <= 1,
 * and returns when all are done. Workers wait for a new job by spinning on a generation
 * counter for a short while (back-to-back matmuls of one forward pass then start
 * without a syscall) and then sleep on a condition variable, so an idle
 * embedding application sees no CPU use from the pool.
 *
 * Calls from several application threads at once do not queue: whoever finds
 * the pool busy runs its job alone on its own thread (nth = 1). After fork() the
 * child has none of the parent's workers; an atfork handler forgets them and
 * the next job starts fresh ones.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "li.h"

#define LI_MAX_THREADS 256
#define SPIN_NS 200000          /* how long an idle worker spins before it sleeps: 0.2 ms */

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
static inline void cpu_relax(void) { _mm_pause(); }
#elif defined(__aarch64__)
static inline void cpu_relax(void) { __asm__ __volatile__("yield"); }
#else
static inline void cpu_relax(void) {}
#endif

typedef struct {
    pthread_mutex_t lock;          /* guards sleeping workers and start/stop */
    pthread_cond_t wake;
    pthread_mutex_t busy;          /* held by the thread whose job runs */
    atomic_uint generation;        /* bumped for every job (and for stop) */
    atomic_int pending;            /* workers still running the current job */
    atomic_int n_sleeping;
    li_task_fn fn;
    void *ctx;
    int job_nth;
    int stop;
    int n_workers;                 /* started worker threads (ith 1..n_workers) */
    unsigned start_generation;     /* generation before the workers' first job */
    pthread_t threads[LI_MAX_THREADS];
} li_pool;

static li_pool pool = {
    .lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER,
    .busy = PTHREAD_MUTEX_INITIALIZER,
};
static int n_threads = 0;   /* 0: not decided yet -> li_default_threads() */

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *worker_main(void *arg) {
    const int ith = (int)(intptr_t)arg;
    /* the generation current when the pool started this worker, not whatever it is by the
     * time the thread runs: a job published in between must not be missed */
    unsigned seen = pool.start_generation;
    for (;;) {
        /* wait for the next generation: spin, then sleep */
        const uint64_t t0 = now_ns();
        unsigned spins = 0;
        while (atomic_load(&pool.generation) == seen) {
            cpu_relax();
            if ((++spins & 255) == 0) {
                /* more threads than free CPUs: let the ones with work run */
                sched_yield();
                if (now_ns() - t0 <= SPIN_NS) continue;
                pthread_mutex_lock(&pool.lock);
                atomic_fetch_add(&pool.n_sleeping, 1);
                while (atomic_load(&pool.generation) == seen) pthread_cond_wait(&pool.wake, &pool.lock);
                atomic_fetch_sub(&pool.n_sleeping, 1);
                pthread_mutex_unlock(&pool.lock);
            }
        }
        seen = atomic_load(&pool.generation);
        if (pool.stop) return NULL;
        pool.fn(pool.ctx, ith, pool.job_nth);
        atomic_fetch_sub(&pool.pending, 1);
    }
}

static void stop_workers(void) {
    if (pool.n_workers == 0) return;
    pthread_mutex_lock(&pool.lock);
    pool.stop = 1;
    atomic_fetch_add(&pool.generation, 1);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    for (int i = 0; i < pool.n_workers; i++) pthread_join(pool.threads[i], NULL);
    pool.n_workers = 0;
    pool.stop = 0;
}

/* called with pool.busy held */
static void start_workers(int n) {
    pool.start_generation = atomic_load(&pool.generation);
    for (int i = 0; i < n; i++) {
        if (pthread_create(&pool.threads[i], NULL, worker_main, (void *)(intptr_t)(i + 1)) != 0) {
            n = i;   /* run with the workers we could start */
            break;
        }
    }
    pool.n_workers = n;
}

static void after_fork_in_child(void) {
    /* the workers did not survive the fork; forget them (their stacks are leaked) */
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pthread_mutex_init(&pool.busy, NULL);
    pool.n_workers = 0;
    pool.stop = 0;
    atomic_store(&pool.n_sleeping, 0);
}

__attribute__((constructor)) static void li_pool_init(void) {
    pthread_atfork(NULL, NULL, after_fork_in_child);
}

int li_pool_run(li_task_fn fn, void *ctx, int want) {
    if (want <= 1 || li_get_threads() <= 1 || pthread_mutex_trylock(&pool.busy) != 0) {
        fn(ctx, 0, 1);
        return 1;
    }
    if (pool.n_workers != li_get_threads() - 1) {
        stop_workers();
        start_workers(li_get_threads() - 1);
    }
    /* Every worker takes part in every job (a task with less work than threads hands
     * the extra ones empty ranges): that way no worker can still be looking at an
     * old job when the next one is published. */
    const int nth = pool.n_workers + 1;
    pool.fn = fn;
    pool.ctx = ctx;
    pool.job_nth = nth;
    atomic_store(&pool.pending, nth - 1);
    atomic_fetch_add(&pool.generation, 1);                      /* publishes the job */
    if (atomic_load(&pool.n_sleeping) > 0) {
        pthread_mutex_lock(&pool.lock);
        pthread_cond_broadcast(&pool.wake);
        pthread_mutex_unlock(&pool.lock);
    }
    fn(ctx, 0, nth);
    unsigned spins = 0;
    while (atomic_load(&pool.pending) > 0) {
        cpu_relax();
        if (++spins > 4096) sched_yield();   /* a worker lost its CPU: do not burn ours */
    }
    pthread_mutex_unlock(&pool.busy);
    return nth;
}

/* online CPUs this process may use, capped by the physical cores among them when sysfs tells */
int li_default_threads(void) {
    int n_cpus = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) n_cpus = CPU_COUNT(&set);
    if (n_cpus <= 0) n_cpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n_cpus <= 0) return 1;
    int n_cores = 0, unknown = 0;
    long seen[LI_MAX_THREADS];
    for (int cpu = 0; cpu < CPU_SETSIZE && !unknown; cpu++) {
        if (!CPU_ISSET(cpu, &set)) continue;
        char path[128];
        long core = -1, pkg = -1;
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
        FILE *f = fopen(path, "r");
        if (!f || fscanf(f, "%ld", &core) != 1) unknown = 1;
        if (f) fclose(f);
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
        f = fopen(path, "r");
        if (!f || fscanf(f, "%ld", &pkg) != 1) unknown = 1;
        if (f) fclose(f);
        if (unknown) break;
        const long id = pkg * 100000 + core;
        int dup = 0;
        for (int i = 0; i < n_cores; i++) dup |= seen[i] == id;
        if (!dup && n_cores < LI_MAX_THREADS) seen[n_cores++] = id;
    }
    int n = (!unknown && n_cores > 0 && n_cores < n_cpus) ? n_cores : n_cpus;
    return n < LI_MAX_THREADS ? n : LI_MAX_THREADS;
}

int li_set_threads(int n) {
    if (n < 1 || n > LI_MAX_THREADS) return LI_EINVAL;
    pthread_mutex_lock(&pool.busy);          /* wait for a running job; workers restart lazily */
    n_threads = n;
    if (pool.n_workers > n - 1) stop_workers();
    pthread_mutex_unlock(&pool.busy);
    return LI_OK;
}

int li_get_threads(void) {
    if (n_threads == 0) n_threads = li_default_threads();
    return n_threads;
}
