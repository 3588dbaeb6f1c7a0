/*
 * threadpool.h — a fixed set of worker threads that run one task at a time.
 *
 * A decode step of a 1B model issues about 200 short parallel sections (one
 * per matmul, tens of microseconds each), so the cost that matters is the
 * round trip of one cpu_pool_run, not throughput of a task queue. Workers
 * therefore wait on an atomic word: they spin (with the CPU's pause hint) for
 * up to CPU_POOL_SPIN_US after the last task, then sleep on a condition
 * variable so that an idle engine burns no CPU.
 *
 * A run has n_threads slots, fn(ctx, slot, n_threads) each. Threads take
 * slots from a shared counter, the caller first; a slot is run exactly once,
 * by whichever thread took it. So a worker that the OS has not scheduled (a
 * busy neighbour process holds its core) does not hold the run: the others
 * run its slot. Tasks therefore must not wait for one another inside a run
 * (no barrier: a slot waiting for another slot that only it could run would
 * never return); a task that has phases takes its items from atomic counters
 * (matmul.c).
 *
 * Not a general executor: one run at a time, from one thread (the engine's
 * step loop).
 */
#ifndef HR_BACKEND_CPU_THREADPOOL_H
#define HR_BACKEND_CPU_THREADPOOL_H

#include "headroom.h"

#include <stdint.h>

typedef struct cpu_pool cpu_pool;

/* One slot of a run: 0 <= slot < n_slots. Per-slot scratch indexed by slot
 * is private to the thread running that slot. */
typedef void (*cpu_task_fn)(void *ctx, int slot, int n_slots);

/* Starts n_threads - 1 workers (n_threads >= 1; 1 makes a pool that runs
 * everything on the caller). *out is written only on success. Fails with
 * HR_ERR_INVALID (bad count), HR_ERR_NOMEM, or HR_ERR_UNSUPPORTED when the OS
 * refuses to create a thread. */
hr_status cpu_pool_create(int n_threads, cpu_pool **out, hr_error *err);

/* Stops and joins the workers. NULL is a no-op. Must not be called while a
 * run is in progress. */
void cpu_pool_free(cpu_pool *p);

/* Number of threads, the caller included, and of slots a run has. */
int cpu_pool_size(const cpu_pool *p);

/* Runs fn(ctx, slot, n) for every slot (n = cpu_pool_size) and returns when
 * all have returned. Everything the caller wrote before the call is visible
 * to the slots, and everything the slots wrote is visible to the caller
 * after it. Not reentrant: fn must not call cpu_pool_run. */
void cpu_pool_run(cpu_pool *p, cpu_task_fn fn, void *ctx);

/* Threads that take slots from the next run on: the caller and workers
 * 1 .. n-1 (1 <= n <= cpu_pool_size, clamped); the others sleep until set
 * back. Slots stay cpu_pool_size a run, so results do not change. With 1 the
 * caller runs every slot and no worker wakes. Between runs only. */
void cpu_pool_set_active(cpu_pool *p, int n);
int cpu_pool_active(const cpu_pool *p);

/* Counters of the runs so far (tests): slots run by the caller although a
 * worker could have (its worker was late). */
typedef struct {
    uint64_t runs;
    uint64_t slots_taken_over; /* slots beyond the first the caller ran */
} cpu_pool_stats;

cpu_pool_stats cpu_pool_get_stats(const cpu_pool *p);

/* Spins of a thread waiting for others inside a task (matmul's phases)
 * before it yields the CPU: an oversubscribed machine still makes progress. */
void cpu_pool_wait_relax(uint32_t spins);

#endif
