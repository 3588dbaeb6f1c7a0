/*
 * bench_plan_sweep.c — the planner against the device: for every model x
 * context x parallel sequences x budget, the plan's total next to the
 * device memory actually in use at the engine's peak (cudaMemGetInfo after
 * prefill and captured decode steps of every sequence), and for every
 * configuration that does not fit, proof that it was refused before any
 * device memory was taken. Weights are allocated but not copied
 * (skip_upload): the bytes are what is measured, not their values.
 *
 *   bench_plan_sweep [out.jsonl]
 * One JSON object per configuration, then a summary: the largest
 * difference, whether any plan was under, and the number of out-of-memory
 * failures (the target: within 2%, never under, none).
 */
#include "headroom.h"
#include "util/env.h" /* hr_tuning: skip_upload */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t device_used(void) {
    uint64_t free_b = 0, total_b = 0;
    hr_error err;
    if (hr_device_memory(HR_DEVICE_CUDA, &free_b, &total_b, &err) != HR_OK)
        return 0;
    return total_b - free_b;
}

/* Prefill and a few decode steps of every sequence: the step tensors,
 * workspaces and graphs all in use. */
static hr_status exercise(hr_engine *e, int32_t n_seq, int32_t n_vocab, hr_error *err) {
    int32_t prompt[8];
    for (int i = 0; i < 8; i++)
        prompt[i] = 1 + (i * 7919) % (n_vocab - 1);
    hr_sampling_params sp = hr_sampling_params_greedy();
    sp.max_tokens = 4;
    sp.ignore_eos = true;
    for (int32_t s = 0; s < n_seq; s++) {
        int32_t id;
        hr_status st = hr_engine_add(e, prompt, 8, &sp, &id, err);
        if (st != HR_OK)
            return st;
    }
    hr_event *ev = malloc((size_t)(n_seq + 4) * sizeof *ev);
    hr_status st = HR_OK;
    while (st == HR_OK && hr_engine_n_active(e) > 0) {
        int32_t n;
        st = hr_engine_step(e, ev, n_seq + 4, &n, err);
    }
    free(ev);
    return st;
}

int main(int argc, char **argv) {
    FILE *out = argc > 1 ? fopen(argv[1], "w") : NULL;
    if (device_used() == 0) {
        printf("SKIP: no CUDA device\n");
        return 0;
    }
    static const char *const models[] = {"llama2-7b", "llama3-8b", "llama2-13b"};
    static const int32_t ctxs[] = {2048, 4096, 8192, 16384, 32768};
    static const int32_t seqs[] = {1, 4, 16, 64};
    static const uint64_t budgets_gib[] = {8, 12, 24, 80};
    int n_cfg = 0, n_fit = 0, n_under = 0, n_oom = 0, n_refused_late = 0;
    double worst = 0.0;
    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++) {
        hr_model_params mp = hr_model_params_default();
        mp.vocab_only = true; /* shapes only: no host memory for weights */
        hr_model *m = NULL;
        hr_error err;
        if (hr_model_synthetic(models[mi], HR_DTYPE_BF16, &mp, &m, &err) != HR_OK) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        hr_model_info in;
        hr_model_get_info(m, &in);
        for (size_t ci = 0; ci < sizeof ctxs / sizeof ctxs[0]; ci++)
            for (size_t si = 0; si < sizeof seqs / sizeof seqs[0]; si++)
                for (size_t bi = 0; bi < sizeof budgets_gib / sizeof budgets_gib[0]; bi++) {
                    hr_engine_params p = hr_engine_params_default();
                    p.device = HR_DEVICE_CUDA;
                    p.n_ctx = ctxs[ci];
                    p.n_seq_max = seqs[si];
                    p.mem_budget = budgets_gib[bi] << 30;
                    hr_tuning tune = hr_tuning_default();
                    tune.skip_upload = true;
                    p.tuning = &tune;
                    hr_plan pl;
                    if (hr_plan_compute(m, &p, &pl, &err) != HR_OK) {
                        fprintf(stderr, "plan: %s\n", err.msg);
                        return 1;
                    }
                    n_cfg++;
                    uint64_t before = device_used(), peak = 0;
                    hr_engine *e = NULL;
                    hr_status s = hr_engine_create(m, &p, &e, &err);
                    uint64_t after_create = device_used();
                    bool oom = false, late = false;
                    if (pl.fits) {
                        n_fit++;
                        if (s == HR_OK)
                            s = exercise(e, p.n_seq_max, in.n_vocab, &err);
                        peak = device_used();
                        if (s != HR_OK) {
                            oom = true;
                            n_oom++;
                            fprintf(stderr, "%s ctx %d x %d, %llu GiB: %s\n", models[mi],
                                    p.n_ctx, p.n_seq_max, (unsigned long long)budgets_gib[bi],
                                    err.msg);
                        }
                    } else {
                        /* refused at planning: not a byte taken */
                        late = s != HR_ERR_NO_FIT || after_create > before + (2u << 20);
                        n_refused_late += late;
                    }
                    hr_engine_free(e);
                    /* measured: everything the process holds on the device at the
                     * peak, the CUDA context included (the plan's "runtime") */
                    double diff = pl.fits && peak ? ((double)pl.total - (double)peak) /
                                                        (double)peak * 100.0
                                                  : 0.0;
                    if (pl.fits && !oom) {
                        if (diff < 0)
                            n_under++;
                        double a = diff < 0 ? -diff : diff;
                        worst = a > worst ? a : worst;
                    }
                    char line[512];
                    snprintf(line, sizeof line,
                             "{\"model\": \"%s\", \"ctx\": %d, \"parallel\": %d, "
                             "\"budget_gib\": %llu, \"fits\": %s, \"planned_bytes\": %llu, "
                             "\"measured_peak_bytes\": %llu, \"diff_pct\": %.3f, "
                             "\"refused_before_load\": %s, \"oom\": %s}",
                             models[mi], p.n_ctx, p.n_seq_max,
                             (unsigned long long)budgets_gib[bi], pl.fits ? "true" : "false",
                             (unsigned long long)pl.total, (unsigned long long)peak, diff,
                             pl.fits ? "false" : (late ? "false" : "true"),
                             oom ? "true" : "false");
                    puts(line);
                    if (out)
                        fprintf(out, "%s\n", line);
                }
        hr_model_free(m);
    }
    printf("sweep: %d configurations, %d fit; planned vs measured peak: worst %.2f%%, %d "
           "under; %d out-of-memory failures; %d refusals that were not clean\n",
           n_cfg, n_fit, worst, n_under, n_oom, n_refused_late);
    if (out)
        fclose(out);
    return n_under || n_oom || n_refused_late || worst > 2.0 ? 1 : 0;
}
