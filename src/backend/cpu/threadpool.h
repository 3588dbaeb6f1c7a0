/*
 * threadpool.h — a fixed set of worker threads that run one task at a time.
 *
 * A decode step of a 1B model issues about 200 short parallel sections (one
 * per matmul, tens of microseconds each), so the cost that matters is the
 * round trip of one cpu_pool_run, not throughput of a task queue. Workers
 * therefore wait on an atomic generation counter: they spin (with the CPU's
 * pause hint) for up to CPU_POOL_SPIN_US after the last task, then sleep on a
 * condition variable so that an idle engine burns no CPU. The caller of
 * cpu_pool_run is thread 0 and works too.
 *
 * Not a general executor: one run at a time, from one thread (the engine's
 * step loop). Every thread receives the same task and picks its share from
 * (ith, nth), usually through an atomic work counter in the task's context.
 */
#ifndef HR_BACKEND_CPU_THREADPOOL_H
#define HR_BACKEND_CPU_THREADPOOL_H

#include "headroom.h"

typedef struct cpu_pool cpu_pool;

/* The body of a parallel section: thread ith of nth (0 <= ith < nth). */
typedef void (*cpu_task_fn)(void *ctx, int ith, int nth);

/* Starts n_threads - 1 workers (n_threads >= 1; 1 makes a pool that runs
 * everything on the caller). *out is written only on success. Fails with
 * HR_ERR_INVALID (bad count), HR_ERR_NOMEM, or HR_ERR_UNSUPPORTED when the OS
 * refuses to create a thread. */
hr_status cpu_pool_create(int n_threads, cpu_pool **out, hr_error *err);

/* Stops and joins the workers. NULL is a no-op. Must not be called while a
 * run is in progress. */
void cpu_pool_free(cpu_pool *p);

/* Number of threads, the caller included. */
int cpu_pool_size(const cpu_pool *p);

/* Runs fn(ctx, ith, nth) on every thread (the caller is ith 0) and returns
 * when all have returned. Everything the caller wrote before the call is
 * visible to the workers, and everything the workers wrote is visible to the
 * caller after it. Not reentrant: fn must not call cpu_pool_run. */
void cpu_pool_run(cpu_pool *p, cpu_task_fn fn, void *ctx);

/* Inside a run: waits until every thread of the run has reached the barrier
 * (all nth threads must call it the same number of times). Writes before the
 * barrier are visible to all threads after it. */
void cpu_pool_barrier(cpu_pool *p);

#endif
