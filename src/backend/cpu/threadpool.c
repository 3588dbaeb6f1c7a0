/*
 * threadpool.c — spin-then-sleep worker pool (see threadpool.h).
 *
 * Protocol. The caller publishes (fn, ctx), sets n_active = nth - 1 and
 * increments `generation` (seq_cst). A worker that sees a new generation runs
 * the task and decrements n_active (release); the caller, after its own share,
 * spins until n_active is 0 (acquire). A worker that saw no new generation for
 * CPU_POOL_SPIN_US sleeps: under the mutex it increments n_sleeping and checks
 * the generation again before waiting. The caller reads n_sleeping after its
 * increment and broadcasts (under the mutex) when it is non-zero. Both sides
 * use seq_cst on these two variables, so at least one of them sees the other's
 * write (Dekker): either the caller broadcasts or the worker sees the new
 * generation; a wake-up cannot be lost.
 *
 * Hot counters sit on separate cache lines (padding) so that spinning readers
 * of `generation` do not slow the decrements of n_active. The barrier is a
 * sense-reversing counter: the last thread to arrive resets the count and
 * bumps the phase the others spin on.
 *
 * Rejected: a task queue with a mutex per task (microseconds per run); pure
 * spinning (a paused engine would keep every core busy); futexes directly (not
 * portable, and the condition variable only matters on the slow path).
 */
#include "backend/cpu/threadpool.h"

#include "util/alloc.h"
#include "util/error.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* How long an idle worker spins before sleeping. Between the matmuls of one
 * decode step the caller does little serial work (well under this), so
 * workers stay awake during generation; an idle engine sleeps after 1 ms. */
#define CPU_POOL_SPIN_US 1000

/* Spins of the waiting caller / barrier before yielding the CPU, so that an
 * oversubscribed machine still makes progress. */
#define CPU_POOL_SPINS_BEFORE_YIELD (1 << 14)

#define CACHE_LINE 64

typedef struct {
    cpu_pool *pool;
    int ith;
} worker_arg;

struct cpu_pool {
    int n_threads;
    pthread_t *threads;  /* (n_threads - 1) workers */
    worker_arg *args;    /* (n_threads - 1) */
    cpu_task_fn fn;      /* task of the current generation */
    void *ctx;
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    bool stop; /* written under mutex, read after a generation change */

    char pad0[CACHE_LINE];
    atomic_uint generation; /* bumped once per run */
    char pad1[CACHE_LINE];
    atomic_int n_active; /* workers still inside the current task */
    char pad2[CACHE_LINE];
    atomic_int n_sleeping; /* workers in (or entering) the condition wait */
    char pad3[CACHE_LINE];
    atomic_int barrier_count;
    atomic_uint barrier_phase;
    char pad4[CACHE_LINE];
};

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Returns the first generation different from `seen` (or any, once stop). */
static unsigned wait_generation(cpu_pool *p, unsigned seen) {
    unsigned g;
    uint64_t t0 = 0;
    for (uint32_t i = 0;; i++) {
        g = atomic_load_explicit(&p->generation, memory_order_acquire);
        if (g != seen)
            return g;
        CPU_RELAX();
        if ((i & 255) == 255) { /* read the clock rarely: it costs ~20 ns */
            uint64_t t = now_ns();
            if (t0 == 0)
                t0 = t;
            else if (t - t0 > (uint64_t)CPU_POOL_SPIN_US * 1000u)
                break;
        }
    }
    pthread_mutex_lock(&p->mutex);
    atomic_fetch_add(&p->n_sleeping, 1);
    while ((g = atomic_load(&p->generation)) == seen)
        pthread_cond_wait(&p->cond, &p->mutex);
    atomic_fetch_sub(&p->n_sleeping, 1);
    pthread_mutex_unlock(&p->mutex);
    return g;
}

static void *worker_main(void *arg) {
    const worker_arg *a = arg;
    cpu_pool *p = a->pool;
    unsigned seen = 0; /* generation starts at 0 before any worker exists */
    for (;;) {
        seen = wait_generation(p, seen);
        if (p->stop)
            break;
        p->fn(p->ctx, a->ith, p->n_threads);
        atomic_fetch_sub_explicit(&p->n_active, 1, memory_order_release);
    }
    return NULL;
}

static void wake_sleepers(cpu_pool *p) {
    if (atomic_load(&p->n_sleeping) > 0) {
        pthread_mutex_lock(&p->mutex);
        pthread_cond_broadcast(&p->cond);
        pthread_mutex_unlock(&p->mutex);
    }
}

hr_status cpu_pool_create(int n_threads, cpu_pool **out, hr_error *err) {
    if (n_threads < 1 || n_threads > 4096)
        return hr_err_set(err, HR_ERR_INVALID, "cpu pool: %d threads requested (expected 1..4096)",
                          n_threads);
    cpu_pool *p = hr_calloc(1, sizeof(*p));
    if (p == NULL)
        return hr_err_set(err, HR_ERR_NOMEM, "cpu pool: out of memory");
    p->n_threads = n_threads;
    atomic_init(&p->generation, 0);
    atomic_init(&p->n_active, 0);
    atomic_init(&p->n_sleeping, 0);
    atomic_init(&p->barrier_count, 0);
    atomic_init(&p->barrier_phase, 0);
    int n_workers = n_threads - 1;
    int n_started = 0;
    hr_status st = HR_OK;
    if (pthread_mutex_init(&p->mutex, NULL) != 0) {
        hr_free(p);
        return hr_err_set(err, HR_ERR_NOMEM, "cpu pool: cannot create a mutex");
    }
    if (pthread_cond_init(&p->cond, NULL) != 0) {
        pthread_mutex_destroy(&p->mutex);
        hr_free(p);
        return hr_err_set(err, HR_ERR_NOMEM, "cpu pool: cannot create a condition variable");
    }
    if (n_workers > 0) {
        p->threads = hr_calloc((size_t)n_workers, sizeof(*p->threads));
        p->args = hr_calloc((size_t)n_workers, sizeof(*p->args));
        if (p->threads == NULL || p->args == NULL) {
            st = hr_err_set(err, HR_ERR_NOMEM, "cpu pool: out of memory");
            goto fail;
        }
    }
    for (; n_started < n_workers; n_started++) {
        p->args[n_started] = (worker_arg){.pool = p, .ith = n_started + 1};
        int rc = pthread_create(&p->threads[n_started], NULL, worker_main, &p->args[n_started]);
        if (rc != 0) {
            st = hr_err_set(err, rc == EAGAIN ? HR_ERR_NOMEM : HR_ERR_UNSUPPORTED,
                            "cpu pool: cannot start worker thread %d of %d: %s", n_started + 1,
                            n_workers, strerror(rc));
            goto fail;
        }
    }
    *out = p;
    return HR_OK;

fail:
    p->n_threads = n_started + 1; /* cpu_pool_free joins only those started */
    cpu_pool_free(p);
    return st;
}

void cpu_pool_free(cpu_pool *p) {
    if (p == NULL)
        return;
    int n_workers = p->n_threads - 1;
    if (n_workers > 0) {
        pthread_mutex_lock(&p->mutex);
        p->stop = true;
        atomic_fetch_add(&p->generation, 1);
        pthread_cond_broadcast(&p->cond);
        pthread_mutex_unlock(&p->mutex);
        for (int i = 0; i < n_workers; i++)
            pthread_join(p->threads[i], NULL);
    }
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->mutex);
    hr_free(p->threads);
    hr_free(p->args);
    hr_free(p);
}

int cpu_pool_size(const cpu_pool *p) {
    return p->n_threads;
}

void cpu_pool_run(cpu_pool *p, cpu_task_fn fn, void *ctx) {
    if (p->n_threads == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->n_active, p->n_threads - 1, memory_order_relaxed);
    atomic_fetch_add(&p->generation, 1); /* seq_cst: publishes fn/ctx, orders vs n_sleeping */
    wake_sleepers(p);
    fn(ctx, 0, p->n_threads);
    for (uint32_t i = 0; atomic_load_explicit(&p->n_active, memory_order_acquire) != 0; i++) {
        CPU_RELAX();
        if (i >= CPU_POOL_SPINS_BEFORE_YIELD)
            sched_yield();
    }
}

void cpu_pool_barrier(cpu_pool *p) {
    if (p->n_threads == 1)
        return;
    unsigned phase = atomic_load_explicit(&p->barrier_phase, memory_order_relaxed);
    if (atomic_fetch_add_explicit(&p->barrier_count, 1, memory_order_acq_rel) ==
        p->n_threads - 1) {
        atomic_store_explicit(&p->barrier_count, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&p->barrier_phase, 1, memory_order_release);
        return;
    }
    for (uint32_t i = 0; atomic_load_explicit(&p->barrier_phase, memory_order_acquire) == phase;
         i++) {
        CPU_RELAX();
        if (i >= CPU_POOL_SPINS_BEFORE_YIELD)
            sched_yield();
    }
}
