/*
 * test_run.h — one request run to its end through an engine, for the tests
 * that compare ways of running it (test_cuda_model, test_engine_overlap;
 * include after test.h): its tokens, streamed text and finish reason, with
 * an optional cancel and a second request joining mid-run; and a model
 * whose end ids include a token a run is known to produce (test_engine
 * too).
 */
#ifndef HR_TEST_RUN_H
#define HR_TEST_RUN_H

#include "headroom.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t tok[256];
    int n;
    char text[8192];
    size_t len;
    hr_finish_reason finish;
} test_run_out;

/* Runs prompt (n_prompt ids) with sp until no request is active. cancel_after
 * > 0 cancels it after that many steps; join (optional) is added, same
 * prompt, after join_after steps and reported into o_join. */
static inline void test_run(hr_engine *e, const int32_t *prompt, int32_t n_prompt,
                            const hr_sampling_params *sp, int cancel_after,
                            const hr_sampling_params *join, int join_after, test_run_out *o,
                            test_run_out *o_join) {
    memset(o, 0, sizeof *o);
    if (o_join)
        memset(o_join, 0, sizeof *o_join);
    hr_error err;
    int32_t id[2] = {-1, -1};
    CHECK_OK(hr_engine_add(e, prompt, n_prompt, sp, &id[0], &err), &err);
    hr_event ev[4];
    for (int steps = 1; hr_engine_n_active(e) > 0; steps++) {
        int32_t n;
        if (hr_engine_step(e, ev, 4, &n, &err) != HR_OK) {
            CHECK_MSG(false, "step: %s", err.msg);
            return;
        }
        for (int32_t j = 0; j < n; j++)
            for (int k = 0; k < 2; k++) {
                test_run_out *r = k == 0 ? o : o_join;
                if (!r || ev[j].id != id[k])
                    continue;
                if (ev[j].token >= 0 && r->n < 256)
                    r->tok[r->n++] = ev[j].token;
                if (r->len + (size_t)ev[j].text_len < sizeof r->text) {
                    memcpy(r->text + r->len, ev[j].text, (size_t)ev[j].text_len);
                    r->len += (size_t)ev[j].text_len;
                }
                if (ev[j].finish != HR_FINISH_NONE)
                    r->finish = ev[j].finish;
            }
        if (steps == cancel_after)
            hr_engine_cancel(e, id[0]);
        if (steps == join_after && join)
            CHECK_OK(hr_engine_add(e, prompt, n_prompt, join, &id[1], &err), &err);
    }
}

static inline bool test_same_run(const test_run_out *a, const test_run_out *b) {
    return a->n == b->n && memcmp(a->tok, b->tok, (size_t)a->n * sizeof a->tok[0]) == 0 &&
           a->len == b->len && memcmp(a->text, b->text, a->len) == 0 && a->finish == b->finish;
}

/* A copy of the Hugging Face folder model (its .json, .model and
 * .safetensors files) in dir, whose end-of-generation ids are 2 and end_id
 * (the embedded model's own: bos 1, end 2, kept): a run that meets end_id
 * ends there as if the model had ended it. NULL on failure (reported). */
static inline hr_model *test_model_ending_at(const char *model, const char *dir,
                                             int32_t end_id) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && cp '%s'/*.json '%s'/*.model "
                              "'%s'/*.safetensors '%s'/",
             dir, dir, model, model, model, dir);
    CHECK(system(cmd) == 0);
    snprintf(cmd, sizeof cmd, "%s/generation_config.json", dir);
    FILE *f = fopen(cmd, "w");
    CHECK(f != NULL);
    if (!f)
        return NULL;
    fprintf(f, "{\"bos_token_id\": 1, \"eos_token_id\": [2, %d]}\n", end_id);
    fclose(f);
    hr_model *m = NULL;
    hr_error err;
    CHECK_OK(hr_model_load(dir, NULL, &m, &err), &err);
    return m;
}

#endif
