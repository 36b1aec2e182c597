/* threadpool.c -- a persistent pthread pool; the calling thread works too.
 *
 * li_pool_run(fn, ctx, want) runs fn(ctx, ith, nth) for ith = 0..nth-1 (nth = LI_SLOTS_PER_THREAD
 * slots per pool thread), or inline with nth = 1 when want <= 1, and returns when all are done.
 * Slots are claimed, not assigned: the caller and every awake worker take the next unclaimed
 * slot until none is left, and the caller returns once every slot has *finished*. A worker the
 * OS has not scheduled (this machine is often shared by more busy threads than it has CPUs)
 * therefore delays nothing: the others take its slots. Claiming is one compare-and-swap on a
 * word holding the job's generation and the next slot, so a late worker can never claim a slot
 * of a job that has ended; and since a job ends only when all its slots are done, the job it
 * claimed in is the job whose fn/ctx it read.
 *
 * Workers wait for a new job by spinning on the generation for a short while (back-to-back
 * matmuls of one forward pass then start without a syscall) and then sleep on a condition
 * variable, so an idle embedding application sees no CPU use from the pool.
 *
 * Calls from several application threads at once do not queue: whoever finds the pool busy runs
 * its job alone on its own thread (nth = 1). After fork() the child has none of the parent's
 * workers; an atfork handler forgets them and the next job starts fresh ones.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "core/li.h"

#define LI_MAX_THREADS 256
#define SPIN_NS 200000          /* how long an idle worker spins before it sleeps: 0.2 ms */
#define LI_SLOTS_PER_THREAD 4   /* finer slots: a thread that loses its CPU mid-job holds up less */

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
    _Atomic uint64_t claim;        /* generation << 32 | next unclaimed slot of the current job */
    atomic_int done;               /* slots of the current job finished */
    atomic_int n_sleeping;
    _Atomic(li_task_fn) fn;
    _Atomic(void *) ctx;
    atomic_int job_nth;
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

/* claim and run slots of job `gen` until none is left (or that job has ended) */
static void run_slots(unsigned gen) {
    for (;;) {
        uint64_t c = atomic_load(&pool.claim);
        if ((unsigned)(c >> 32) != gen) return;
        const li_task_fn fn = atomic_load_explicit(&pool.fn, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&pool.ctx, memory_order_relaxed);
        const int nth = atomic_load_explicit(&pool.job_nth, memory_order_relaxed);
        const int slot = (int)(uint32_t)c;
        if (slot >= nth) return;
        if (!atomic_compare_exchange_weak(&pool.claim, &c, c + 1)) continue;
        fn(ctx, slot, nth);
        atomic_fetch_add(&pool.done, 1);
    }
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
        (void)ith;
        run_slots(seen);
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
    /* the workers block every signal (they inherit the mask they are created with), so a
       Ctrl-C always reaches the Python thread that can act on it, even while it sleeps in read() */
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    pool.start_generation = atomic_load(&pool.generation);
    for (int i = 0; i < n; i++) {
        if (pthread_create(&pool.threads[i], NULL, worker_main, (void *)(intptr_t)(i + 1)) != 0) {
            n = i;   /* run with the workers we could start */
            break;
        }
    }
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
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

static _Thread_local int alone = 0;   /* li_set_pool_alone */

int li_set_pool_alone(int on) {
    const int old = alone;
    alone = on != 0;
    return old;
}

int li_pool_run(li_task_fn fn, void *ctx, int want) {
    if (want <= 1 || alone || li_get_threads() <= 1 || pthread_mutex_trylock(&pool.busy) != 0) {
        fn(ctx, 0, 1);
        return 1;
    }
    if (pool.n_workers != li_get_threads() - 1) {
        stop_workers();
        start_workers(li_get_threads() - 1);
    }
    const int nth = (pool.n_workers + 1) * LI_SLOTS_PER_THREAD;
    atomic_store_explicit(&pool.fn, fn, memory_order_relaxed);
    atomic_store_explicit(&pool.ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&pool.job_nth, nth, memory_order_relaxed);
    atomic_store(&pool.done, 0);
    const unsigned gen = atomic_load(&pool.generation) + 1;
    atomic_store(&pool.claim, (uint64_t)gen << 32);            /* opens the slots (seq_cst: after the fields) */
    atomic_store(&pool.generation, gen);                       /* wakes the spinning workers */
    if (atomic_load(&pool.n_sleeping) > 0) {
        pthread_mutex_lock(&pool.lock);
        pthread_cond_broadcast(&pool.wake);
        pthread_mutex_unlock(&pool.lock);
    }
    run_slots(gen);
    unsigned spins = 0;
    while (atomic_load(&pool.done) < nth) {   /* slots others claimed and are still running */
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
