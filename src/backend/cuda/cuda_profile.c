/*
 * cuda_profile.c — per-op GPU time from CUDA events (see cuda_profile.h).
 * A fixed ring of events is created once, so a profiled step allocates
 * nothing; a step with more ops than events keeps the first ones.
 */
#include "backend/cuda/cuda_profile.h"

#include "util/alloc.h"
#include "util/env.h"
#include "util/log.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROF_EVENTS 4096 /* marks per step: 32 layers use about 300 */
#define PROF_ROWS 256    /* distinct (op, step rows, shape) totals */
#define PROF_SIZES 256   /* step sizes whose first step was dropped */

typedef struct {
    const char *op;
    int64_t step_rows, n_rows, k;
    double ms;
    int64_t calls;
} prof_total;

struct cuda_profile {
    cudaEvent_t ev[PROF_EVENTS];
    const char *op[PROF_EVENTS];
    int64_t step_rows[PROF_EVENTS], n_rows[PROF_EVENTS], k[PROF_EVENTS];
    int n_marks;    /* op marks this step */
    bool step_done; /* the end mark is recorded after them */
    prof_total totals[PROF_ROWS];
    int n_totals;
    int64_t n_steps;
    int64_t seen_rows[PROF_SIZES]; /* step sizes already met once */
    int n_seen;
};

hr_status cuda_profile_create(cuda_profile **out, hr_error *err) {
    *out = NULL;
    if (!hr_env_get()->cuda_profile)
        return HR_OK;
    cuda_profile *p = hr_calloc(1, sizeof *p);
    if (!p)
        return hr_err_set(err, HR_ERR_NOMEM, "cuda profile: out of host memory");
    for (int i = 0; i < PROF_EVENTS; i++) {
        cudaError_t e = cudaEventCreate(&p->ev[i]);
        if (e != cudaSuccess) {
            cuda_profile_free(p);
            return hr_err_set(err, HR_ERR_DEVICE, "cuda profile: events: %s",
                              cudaGetErrorString(e));
        }
    }
    *out = p;
    return HR_OK;
}

void cuda_profile_free(cuda_profile *p) {
    if (!p)
        return;
    for (int i = 0; i < PROF_EVENTS; i++)
        if (p->ev[i])
            cudaEventDestroy(p->ev[i]);
    hr_free(p);
}

void cuda_profile_mark(cuda_profile *p, cudaStream_t s, const char *op, int64_t step_rows,
                       int64_t n_rows, int64_t k) {
    if (!p || p->n_marks >= PROF_EVENTS - 1) /* one event stays for the end mark */
        return;
    int i = p->n_marks++;
    cudaEventRecord(p->ev[i], s);
    p->op[i] = op;
    p->step_rows[i] = step_rows;
    p->n_rows[i] = n_rows;
    p->k[i] = k;
}

void cuda_profile_step_end(cuda_profile *p, cudaStream_t s) {
    if (!p || p->n_marks == 0)
        return;
    cudaEventRecord(p->ev[p->n_marks], s);
    p->step_done = true;
}

static prof_total *total_of(cuda_profile *p, const char *op, int64_t step_rows, int64_t n_rows,
                            int64_t k) {
    for (int i = 0; i < p->n_totals; i++)
        if (strcmp(p->totals[i].op, op) == 0 && p->totals[i].step_rows == step_rows &&
            p->totals[i].n_rows == n_rows && p->totals[i].k == k)
            return &p->totals[i];
    if (p->n_totals == PROF_ROWS)
        return NULL;
    prof_total *t = &p->totals[p->n_totals++];
    *t = (prof_total){.op = op, .step_rows = step_rows, .n_rows = n_rows, .k = k};
    return t;
}

/* The first step of each size is a warm-up (kernels load at their first
 * launch, cuBLASLt chooses algorithms, clocks ramp up): a 512-row prefill's
 * took ~7 times the second's on the H200. It is not counted. */
static bool first_of_size(cuda_profile *p, int64_t rows) {
    for (int i = 0; i < p->n_seen; i++)
        if (p->seen_rows[i] == rows)
            return false;
    if (p->n_seen < PROF_SIZES)
        p->seen_rows[p->n_seen++] = rows;
    return true;
}

void cuda_profile_collect(cuda_profile *p) {
    if (!p)
        return;
    if (p->step_done && !first_of_size(p, p->step_rows[0])) {
        for (int i = 0; i < p->n_marks; i++) {
            float ms = 0.0f;
            if (cudaEventElapsedTime(&ms, p->ev[i], p->ev[i + 1]) != cudaSuccess) {
                cudaGetLastError(); /* an event of a failed step: skip it */
                continue;
            }
            prof_total *t = total_of(p, p->op[i], p->step_rows[i], p->n_rows[i], p->k[i]);
            if (t) {
                t->ms += ms;
                t->calls++;
            }
        }
        p->n_steps++;
    }
    p->n_marks = 0;
    p->step_done = false;
}

static int by_time_desc(const void *a, const void *b) {
    double x = ((const prof_total *)a)->ms, y = ((const prof_total *)b)->ms;
    return (x < y) - (x > y);
}

void cuda_profile_report(const cuda_profile *p) {
    if (!p || p->n_steps == 0)
        return;
    prof_total sorted[PROF_ROWS];
    memcpy(sorted, p->totals, (size_t)p->n_totals * sizeof *sorted);
    qsort(sorted, (size_t)p->n_totals, sizeof *sorted, by_time_desc);
    double all = 0.0;
    for (int i = 0; i < p->n_totals; i++)
        all += sorted[i].ms;
    HR_LOG_W("cuda profile: %lld steps, %.3f ms of GPU time in ops", (long long)p->n_steps, all);
    for (int i = 0; i < p->n_totals; i++) {
        const prof_total *t = &sorted[i];
        char shape[64];
        int at = snprintf(shape, sizeof shape, " %5lld rows", (long long)t->step_rows);
        if (t->n_rows > 0)
            snprintf(shape + at, sizeof shape - (size_t)at, " %lldx%lld", (long long)t->n_rows,
                     (long long)t->k);
        HR_LOG_W("cuda profile: %-12s%-25s %10.3f ms %5.1f%%  %8lld calls  %9.2f us/call", t->op,
                 shape, t->ms, all > 0 ? 100.0 * t->ms / all : 0.0, (long long)t->calls,
                 1e3 * t->ms / (double)t->calls);
    }
}
