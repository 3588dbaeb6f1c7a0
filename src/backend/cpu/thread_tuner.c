/*
 * thread_tuner.c — trials of one thread fewer or more (see thread_tuner.h).
 *
 * A trial runs up to CPU_TUNER_TRIAL_STEPS steps at the other count. The
 * first one ends it when it is much slower than the baseline (the usual
 * answer on an idle machine: one slow step per trial); otherwise the mean of
 * the trial steps must beat the baseline mean by CPU_TUNER_GAIN to move.
 */
#include "backend/cpu/thread_tuner.h"

#define CPU_TUNER_FIRST_INTERVAL 32
#define CPU_TUNER_MAX_INTERVAL 512
#define CPU_TUNER_TRIAL_STEPS 3
#define CPU_TUNER_GAIN 0.93       /* a trial wins below 0.93 x the baseline */
#define CPU_TUNER_CLEAR_LOSS 1.30 /* a first trial step above this loses at once */
#define CPU_TUNER_SHIFT 0.25      /* a baseline this far from the last one: trial soon */
#define CPU_TUNER_MIN_BASE 4      /* baseline steps before a trial */

void cpu_tuner_init(cpu_thread_tuner *t, int max, bool enabled) {
    *t = (cpu_thread_tuner){.enabled = enabled && max > 1,
                            .max = max,
                            .active = max,
                            .key = -1,
                            .interval = CPU_TUNER_FIRST_INTERVAL,
                            .direction = -1};
}

static double base_mean(const cpu_thread_tuner *t) {
    const int n = t->n_base < CPU_TUNER_WINDOW ? t->n_base : CPU_TUNER_WINDOW;
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += t->base[i];
    return n > 0 ? sum / n : 0;
}

static void restart_baseline(cpu_thread_tuner *t) {
    t->n_base = 0;
    t->since_trial = 0;
    t->trial = 0;
    t->ref_ns = 0;
}

int cpu_tuner_before(cpu_thread_tuner *t, int32_t decode_rows) {
    t->timing = false;
    if (!t->enabled)
        return t->max;
    if (decode_rows < 0) { /* a prefill: a trial in progress waits */
        return t->trial ? t->trial : t->active;
    }
    if (decode_rows != t->key) {
        t->key = decode_rows;
        restart_baseline(t);
    }
    t->timing = true;
    if (t->trial == 0 && t->n_base >= CPU_TUNER_MIN_BASE && t->since_trial >= t->interval) {
        int other = t->active + t->direction;
        if (other < 1 || other > t->max)
            other = t->active - t->direction;
        t->trial = other;
        t->n_trial = 0;
        t->trial_sum = 0;
    }
    return t->trial ? t->trial : t->active;
}

static void end_trial(cpu_thread_tuner *t, bool won) {
    const int tried = t->trial;
    t->trial = 0;
    t->since_trial = 0;
    if (won) {
        t->direction = tried < t->active ? -1 : 1; /* the same way next */
        t->active = tried;
        t->n_base = 0;
        t->ref_ns = 0;
        t->interval = CPU_TUNER_FIRST_INTERVAL;
    } else {
        t->ref_ns = base_mean(t);
        t->interval = t->interval * 2 > CPU_TUNER_MAX_INTERVAL ? CPU_TUNER_MAX_INTERVAL
                                                               : t->interval * 2;
        if (t->active > 1 && t->active < t->max) /* both sides possible: try the other */
            t->direction = -t->direction;
    }
}

void cpu_tuner_after(cpu_thread_tuner *t, double ns) {
    if (!t->timing)
        return;
    t->timing = false;
    if (t->trial) {
        const double base = base_mean(t);
        t->n_trial++;
        t->trial_sum += ns;
        if (t->n_trial == 1 && ns > CPU_TUNER_CLEAR_LOSS * base)
            end_trial(t, false);
        else if (t->n_trial == CPU_TUNER_TRIAL_STEPS)
            end_trial(t, t->trial_sum / t->n_trial < CPU_TUNER_GAIN * base);
        return;
    }
    t->base[t->n_base % CPU_TUNER_WINDOW] = ns;
    t->n_base++;
    t->since_trial++;
    if (t->n_base >= CPU_TUNER_WINDOW && t->ref_ns > 0) {
        const double m = base_mean(t);
        if (m > (1 + CPU_TUNER_SHIFT) * t->ref_ns || m < (1 - CPU_TUNER_SHIFT) * t->ref_ns) {
            t->interval = CPU_TUNER_FIRST_INTERVAL / 4; /* the machine changed: look again */
            t->ref_ns = m;
        }
    }
}
