/*
 * thread_tuner.h — how many of the pool's threads decode steps use, from
 * their measured times.
 *
 * All cores is the best count on an idle machine, and far from it when
 * another process keeps a core busy: a thread that shares a core is off it
 * for milliseconds at a time, and the step waits for the rows it holds
 * (docs/journal/cpu.md has the figures).
 * No cheap reading of the machine says which count is best (the load
 * average lags and counts our own threads), so the tuner measures: now and
 * then a few decode steps run with one thread fewer (or more), and the count
 * that gives shorter steps stays. Only steps of the same shape are compared
 * (decode steps of one row count; prefill steps use the current count and
 * are not timed). A trial that loses makes the next one twice as far away
 * (at most CPU_TUNER_MAX_INTERVAL steps), so an idle machine pays about one
 * slower step in that many; a change in the steps' time (a neighbour comes
 * or goes) brings the next trial forward.
 */
#ifndef HR_BACKEND_CPU_THREAD_TUNER_H
#define HR_BACKEND_CPU_THREAD_TUNER_H

#include <stdbool.h>
#include <stdint.h>

#define CPU_TUNER_WINDOW 8 /* baseline steps remembered */

typedef struct {
    bool enabled;
    int max;    /* the pool's threads */
    int active; /* the count in use */
    int32_t key;      /* the shape compared (decode rows); -1: none yet */
    bool timing;      /* the step in progress counts */
    double base[CPU_TUNER_WINDOW]; /* last step times at `active`, ns (a ring) */
    int n_base;                    /* steps recorded (the ring holds the last 8) */
    int since_trial, interval;     /* baseline steps since the last trial; between trials */
    double ref_ns;                 /* baseline mean when the last trial ended */
    int trial;                     /* the count being tried; 0: none */
    int n_trial;
    double trial_sum;
    int direction; /* the next trial's side: -1 fewer threads, +1 more */
} cpu_thread_tuner;

/* max: the pool's size; enabled false keeps max threads always. */
void cpu_tuner_init(cpu_thread_tuner *t, int max, bool enabled);

/* Before a step: the threads it runs with. decode_rows: the row count when
 * every row decodes one token, -1 for a step that prefills. */
int cpu_tuner_before(cpu_thread_tuner *t, int32_t decode_rows);

/* After that step: its time. */
void cpu_tuner_after(cpu_thread_tuner *t, double ns);

#endif
