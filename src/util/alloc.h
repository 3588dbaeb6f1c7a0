/*
 * alloc.h — every host allocation of the library goes through here.
 *
 * Why a wrapper: the count of live allocations is what tests read to prove
 * that steady-state decode allocates nothing, and the fault hook makes the
 * Nth allocation fail so that every error path can be walked (SQLite's
 * memfault loop). The device-side budget allocator (memory/budget.c) sits on
 * top of the same hook.
 */
#ifndef HR_UTIL_ALLOC_H
#define HR_UTIL_ALLOC_H

#include <stddef.h>
#include <stdint.h>

void *hr_malloc(size_t n_bytes);
void *hr_calloc(size_t n, size_t elem_bytes); /* NULL on overflow */
void *hr_realloc(void *p, size_t n_bytes);
void hr_free(void *p);
char *hr_strdup(const char *s);
/* n_bytes aligned to align (a power of two >= sizeof(void *)); hr_free frees it. */
void *hr_malloc_aligned(size_t n_bytes, size_t align);
char *hr_strndup(const char *s, size_t n);
/* Large, long-lived buffers (weights): zeroed anonymous memory in 2 MiB
 * units, 2 MiB aligned, asked to be backed by transparent huge pages. A
 * decode step streams every weight byte once; with 4 KiB pages that is a TLB
 * miss per 4 KiB, and the quantized kernels, which run near the compute
 * ceiling, lose 5-12% to them (2-core Zen 4, TinyLlama Q4_0). Free with
 * hr_free_pages and the same n_bytes. */
void *hr_alloc_pages(size_t n_bytes);
void hr_free_pages(void *p, size_t n_bytes);

/* Fault injection: the n-th allocation counted from now fails (n >= 1);
 * 0 disables. Returns whether an injected failure has happened since. */
void hr_alloc_fail_at(int64_t n);
int hr_alloc_fault_fired(void);
/* Whether an allocation of this thread has failed since the last reset: lets
 * a caller of a library that only says "NULL" (cJSON) tell out-of-memory
 * from bad input. */
void hr_alloc_failed_reset(void);
int hr_alloc_failed(void);
/* Allocations made since the process started (monotonic). */
int64_t hr_alloc_count(void);
/* True when the fault hook says this allocation must fail; used by other
 * allocators (device memory, budget) so that one counter covers all. */
int hr_alloc_should_fail(void);

#endif
