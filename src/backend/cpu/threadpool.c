/*
 * threadpool.c — spin-then-sleep worker pool with slots (see threadpool.h).
 *
 * Protocol. One 64-bit word `run` holds the run's generation (high half) and
 * the next slot nobody has taken (low half). The caller publishes (fn, ctx),
 * zeroes n_done and stores (generation + 1, 0) (seq_cst). Every thread, the
 * caller first, takes slots by compare-and-swap on that word for the
 * generation it saw, so a thread that comes late (its generation is over)
 * takes nothing; each slot ends with an increment of n_done (release). The
 * caller returns when n_done reaches the slot count (acquire).
 *
 * Why a thread that read fn for generation g never runs it with another
 * generation's ctx: it reads (fn, ctx) after seeing g, and its CAS succeeds
 * only while g still has a free slot, so g is not over and the caller has not
 * published g + 1's (fn, ctx) yet (that waits for all of g's slots).
 *
 * Sleeping. A worker that saw no new generation for CPU_POOL_SPIN_US sleeps:
 * under the mutex it increments n_sleeping and checks the word again before
 * waiting; the caller reads n_sleeping after its store and broadcasts (under
 * the mutex) when it is non-zero. The caller, waiting for slots that others
 * run, spins CPU_POOL_CALLER_SPIN_US, then sleeps the same way (caller_asleep
 * against n_done): its core is then free for the late worker (the kernel
 * moves a runnable thread to an idle core at once), where a spinning caller
 * would keep it. Both pairs use seq_cst (Dekker): a wake-up cannot be lost.
 *
 * Hot words sit on separate cache lines so that spinning readers of `run` do
 * not slow the increments of n_done.
 *
 * Rejected (docs/journal/cpu.md): a fixed slot per thread with a barrier
 * (one worker without a core held every run); a task
 * queue with a mutex per task (microseconds per run); pure spinning (a paused
 * engine would keep every core busy).
 */
#include "util/clock.h"
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

/* How long the caller spins for slots others are running before it sleeps.
 * A decode section's slots end within microseconds of each other; a longer
 * wait means a thread lost its core. */
#define CPU_POOL_CALLER_SPIN_US 100

/* Spins of a thread waiting inside a task before yielding the CPU. */
#define CPU_POOL_SPINS_BEFORE_YIELD (1 << 12)

#define CACHE_LINE 64

typedef struct {
    cpu_pool *pool;
    int index; /* 1 .. n_threads - 1 (the caller is 0) */
} worker_arg;

typedef _Atomic(cpu_task_fn) atomic_task_fn;

struct cpu_pool {
    int n_threads;
    pthread_t *threads; /* (n_threads - 1) workers */
    worker_arg *args;   /* (n_threads - 1) */
    atomic_task_fn fn;  /* task of the current generation */
    _Atomic(void *) ctx;
    uint32_t generation; /* the caller's copy */
    pthread_mutex_t mutex;
    pthread_cond_t wake;  /* workers sleep here */
    pthread_cond_t done;  /* the caller sleeps here */
    pthread_cond_t parked; /* workers at or above `active` sleep here */
    atomic_int active;     /* threads that take slots: the caller and workers below it */
    bool stop;            /* written under mutex, read after a generation change */
    cpu_pool_stats stats; /* the caller's thread only */

    char pad0[CACHE_LINE];
    _Atomic uint64_t run; /* generation << 32 | next free slot */
    char pad1[CACHE_LINE];
    atomic_int n_done; /* slots of the current run that have returned */
    char pad2[CACHE_LINE];
    atomic_int n_sleeping;    /* workers in (or entering) the condition wait */
    atomic_int caller_asleep; /* the caller is in (or entering) its wait */
    char pad3[CACHE_LINE];
};


static uint32_t gen_of(uint64_t run) {
    return (uint32_t)(run >> 32);
}

/* Spins until the generation in *word differs from `unlike` (word given) or
 * *count reaches `target` (count given), or `us` microseconds have passed;
 * true when the condition was met. The clock is read rarely: ~20 ns. */
static bool spin_for(const _Atomic uint64_t *word, uint64_t unlike, const atomic_int *count,
                     int target, uint64_t us) {
    uint64_t t0 = 0;
    for (uint32_t i = 0;; i++) {
        if (word != NULL && gen_of(atomic_load_explicit(word, memory_order_acquire)) != unlike)
            return true;
        if (count != NULL && atomic_load_explicit(count, memory_order_acquire) == target)
            return true;
        CPU_RELAX();
        if ((i & 255) == 255) {
            uint64_t t = hr_now_ns();
            if (t0 == 0)
                t0 = t;
            else if (t - t0 > us * 1000u)
                return false;
        }
    }
}

/* Returns the run word once its generation differs from `seen`. */
static uint64_t wait_generation(cpu_pool *p, uint32_t seen) {
    if (!spin_for(&p->run, seen, NULL, 0, CPU_POOL_SPIN_US)) {
        pthread_mutex_lock(&p->mutex);
        atomic_fetch_add(&p->n_sleeping, 1);
        while (gen_of(atomic_load(&p->run)) == seen)
            pthread_cond_wait(&p->wake, &p->mutex);
        atomic_fetch_sub(&p->n_sleeping, 1);
        pthread_mutex_unlock(&p->mutex);
    }
    return atomic_load_explicit(&p->run, memory_order_acquire);
}

/* Takes and runs slots of generation gen_of(r) until none is left; returns
 * how many this thread ran. */
static int run_slots(cpu_pool *p, uint64_t r) {
    const uint32_t gen = gen_of(r);
    const int n = p->n_threads;
    cpu_task_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
    void *ctx = atomic_load_explicit(&p->ctx, memory_order_relaxed);
    int ran = 0;
    while (gen_of(r) == gen && (uint32_t)r < (uint32_t)n) {
        /* on failure r is reloaded: try again from there */
        if (!atomic_compare_exchange_weak_explicit(&p->run, &r, r + 1, memory_order_acquire,
                                                   memory_order_acquire))
            continue;
        fn(ctx, (int)(uint32_t)r, n);
        ran++;
        if (atomic_fetch_add(&p->n_done, 1) + 1 == n && atomic_load(&p->caller_asleep)) {
            pthread_mutex_lock(&p->mutex);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mutex);
        }
        r = atomic_load_explicit(&p->run, memory_order_acquire);
    }
    return ran;
}

static bool parked(cpu_pool *p, int index) {
    return index >= atomic_load(&p->active);
}

static void *worker_main(void *arg) {
    const worker_arg *a = arg;
    cpu_pool *p = a->pool;
    uint32_t seen = 0; /* generation 0 is before any run */
    for (;;) {
        if (parked(p, a->index)) { /* set aside (cpu_pool_set_active): no spinning */
            pthread_mutex_lock(&p->mutex);
            while (!p->stop && parked(p, a->index))
                pthread_cond_wait(&p->parked, &p->mutex);
            pthread_mutex_unlock(&p->mutex);
        }
        uint64_t r = wait_generation(p, seen);
        if (p->stop)
            break;
        seen = gen_of(r);
        if (!parked(p, a->index)) /* active is set before a run is published */
            run_slots(p, r);
    }
    return NULL;
}

hr_status cpu_pool_create(int n_threads, cpu_pool **out, hr_error *err) {
    if (n_threads < 1 || n_threads > 4096)
        return hr_err_set(err, HR_ERR_INVALID, "cpu pool: %d threads requested (expected 1..4096)",
                          n_threads);
    cpu_pool *p = hr_calloc(1, sizeof(*p));
    if (p == NULL)
        return hr_err_set(err, HR_ERR_NOMEM, "cpu pool: out of memory");
    p->n_threads = n_threads;
    atomic_init(&p->fn, NULL);
    atomic_init(&p->ctx, NULL);
    atomic_init(&p->run, 0);
    atomic_init(&p->n_done, 0);
    atomic_init(&p->n_sleeping, 0);
    atomic_init(&p->caller_asleep, 0);
    atomic_init(&p->active, n_threads);
    int n_workers = n_threads - 1;
    int n_started = 0;
    hr_status st = HR_OK;
    if (pthread_mutex_init(&p->mutex, NULL) != 0) {
        hr_free(p);
        return hr_err_set(err, HR_ERR_NOMEM, "cpu pool: cannot create a mutex");
    }
    pthread_cond_t *conds[] = {&p->wake, &p->done, &p->parked};
    int n_conds = 0;
    while (n_conds < 3 && pthread_cond_init(conds[n_conds], NULL) == 0)
        n_conds++;
    if (n_conds < 3) {
        while (n_conds > 0)
            pthread_cond_destroy(conds[--n_conds]);
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
        p->args[n_started] = (worker_arg){.pool = p, .index = n_started + 1};
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
        /* a new generation with no free slot: workers wake and leave */
        atomic_store(&p->run, ((uint64_t)(p->generation + 1) << 32) | (uint32_t)p->n_threads);
        pthread_cond_broadcast(&p->wake);
        pthread_cond_broadcast(&p->parked);
        pthread_mutex_unlock(&p->mutex);
        for (int i = 0; i < n_workers; i++)
            pthread_join(p->threads[i], NULL);
    }
    pthread_cond_destroy(&p->parked);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mutex);
    hr_free(p->threads);
    hr_free(p->args);
    hr_free(p);
}

int cpu_pool_size(const cpu_pool *p) {
    return p->n_threads;
}

void cpu_pool_set_active(cpu_pool *p, int n) {
    n = n < 1 ? 1 : n > p->n_threads ? p->n_threads : n;
    if (n == atomic_load(&p->active))
        return;
    pthread_mutex_lock(&p->mutex);
    atomic_store(&p->active, n);
    pthread_cond_broadcast(&p->parked);
    pthread_mutex_unlock(&p->mutex);
}

int cpu_pool_active(const cpu_pool *p) {
    return atomic_load(&p->active);
}

cpu_pool_stats cpu_pool_get_stats(const cpu_pool *p) {
    return p->stats;
}

void cpu_pool_run(cpu_pool *p, cpu_task_fn fn, void *ctx) {
    p->stats.runs++;
    const int n = p->n_threads;
    if (atomic_load_explicit(&p->active, memory_order_relaxed) == 1) {
        for (int slot = 0; slot < n; slot++) /* the workers stay asleep */
            fn(ctx, slot, n);
        return;
    }
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&p->n_done, 0, memory_order_relaxed);
    p->generation++;
    if (p->generation == 0) /* 0 means "no run yet" to a new worker */
        p->generation = 1;
    const uint64_t r = (uint64_t)p->generation << 32;
    atomic_store(&p->run, r); /* seq_cst: publishes the above, orders vs n_sleeping */
    if (atomic_load(&p->n_sleeping) > 0) {
        pthread_mutex_lock(&p->mutex);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mutex);
    }
    int ran = run_slots(p, r);
    if (ran > 1)
        p->stats.slots_taken_over += (uint64_t)(ran - 1);
    if (!spin_for(NULL, 0, &p->n_done, n, CPU_POOL_CALLER_SPIN_US)) {
        pthread_mutex_lock(&p->mutex);
        atomic_store(&p->caller_asleep, 1);
        while (atomic_load(&p->n_done) != n)
            pthread_cond_wait(&p->done, &p->mutex);
        atomic_store(&p->caller_asleep, 0);
        pthread_mutex_unlock(&p->mutex);
    }
}

void cpu_pool_wait_relax(uint32_t spins) {
    if (spins < CPU_POOL_SPINS_BEFORE_YIELD)
        CPU_RELAX();
    else
        sched_yield();
}
