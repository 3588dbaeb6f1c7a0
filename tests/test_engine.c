// ctest-label: numeric
// ctest-timeout: 600
/*
 * test_engine.c — the engine's behaviour on the embedded model, against
 * transformers' greedy continuations (models/tiny-shakespeare/reference.json):
 *   - each greedy continuation, token for token;
 *   - the same continuations decoded together in one batch (continuous
 *     batching: requests of different lengths, joining at different steps,
 *     with small prompt chunks) give the same tokens;
 *   - streamed text equals the detokenized ids, and stop strings cut it;
 *   - finish reasons: length, context, end-of-sequence from a list of ids
 *     (generation_config.json), cancel;
 *   - a prompt longer than the context is refused, the engine goes on;
 *   - no allocation at all during steady-state steps.
 */
#include "engine/engine.h"
#include "headroom.h"
#include "test.h"
#include "test_run.h"
#include "util/alloc.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MODEL HR_SOURCE_DIR "/models/tiny-shakespeare"
#define MAX_PROMPTS 8

typedef struct {
    int32_t ids[64], n_ids;
    int32_t greedy[64], n_greedy;
    char text[512];
} case_ref;

static int load_cases(case_ref *c) {
    FILE *f = fopen(MODEL "/reference.json", "rb");
    if (!f)
        return 0;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    cJSON *root = cJSON_Parse(buf);
    int k = 0;
    const cJSON *g;
    cJSON_ArrayForEach(g, cJSON_GetObjectItem(root, "greedy")) {
        if (k == MAX_PROMPTS)
            break;
        const cJSON *x;
        c[k].n_ids = c[k].n_greedy = 0;
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(g, "ids")) c[k].ids[c[k].n_ids++] =
            x->valueint;
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(g, "greedy")) c[k].greedy[c[k].n_greedy++] =
            x->valueint;
        snprintf(c[k].text, sizeof c[k].text, "%s",
                 cJSON_GetObjectItem(g, "text")->valuestring);
        k++;
    }
    cJSON_Delete(root);
    return k;
}

static hr_engine *make_engine(const hr_model *m, int32_t n_seq, int32_t n_batch, int32_t n_ctx) {
    hr_engine_params ep = hr_engine_params_default();
    ep.device = HR_DEVICE_CPU;
    ep.n_threads = 2;
    ep.n_seq_max = n_seq;
    ep.n_batch = n_batch;
    ep.n_ctx = n_ctx;
    ep.exact_matmul = true;
    hr_engine *e = NULL;
    hr_error err;
    CHECK_OK(hr_engine_create(m, &ep, &e, &err), &err);
    return e;
}

/* Runs until no request is active; collects tokens per request id. */
static void drain(hr_engine *e, int32_t (*tok)[64], int32_t *n_tok, hr_finish_reason *fin,
                  char (*text)[1024], int32_t n_slots) {
    hr_event ev[16];
    hr_error err;
    while (hr_engine_n_active(e) > 0) {
        int32_t n = 0;
        if (hr_engine_step(e, ev, 16, &n, &err) != HR_OK) {
            CHECK_MSG(false, "step: %s", err.msg);
            return;
        }
        for (int32_t i = 0; i < n; i++) {
            int32_t id = ev[i].id;
            if (id < 0 || id >= n_slots)
                continue;
            if (ev[i].token >= 0 && n_tok[id] < 64)
                tok[id][n_tok[id]++] = ev[i].token;
            if (text && ev[i].text_len > 0)
                strncat(text[id], ev[i].text, (size_t)ev[i].text_len);
            if (ev[i].finish != HR_FINISH_NONE)
                fin[id] = ev[i].finish;
        }
    }
}

static bool same_tokens(const int32_t *a, int32_t na, const int32_t *b, int32_t nb) {
    if (na != nb)
        return false;
    for (int32_t i = 0; i < na; i++)
        if (a[i] != b[i])
            return false;
    return true;
}

static void test_greedy_and_batching(const hr_model *m, const case_ref *c, int n_cases) {
    hr_sampling_params sp = hr_sampling_params_greedy();
    sp.ignore_eos = true;
    hr_error err;
    /* one at a time */
    hr_engine *e = make_engine(m, 1, 512, 512);
    for (int k = 0; e && k < n_cases; k++) {
        int32_t tok[MAX_PROMPTS][64] = {{0}}, n_tok[MAX_PROMPTS] = {0};
        hr_finish_reason fin[MAX_PROMPTS] = {0};
        static char text[MAX_PROMPTS][1024];
        memset(text, 0, sizeof text);
        sp.max_tokens = c[k].n_greedy;
        int32_t id;
        CHECK_OK(hr_engine_add(e, c[k].ids, c[k].n_ids, &sp, &id, &err), &err);
        drain(e, tok, n_tok, fin, text, MAX_PROMPTS);
        CHECK_MSG(same_tokens(tok[id], n_tok[id], c[k].greedy, c[k].n_greedy),
                  "prompt %d: greedy continuation differs from transformers'", k);
        CHECK_EQ_I64(fin[id], HR_FINISH_LENGTH);
        CHECK_MSG(strcmp(text[id], c[k].text) == 0, "prompt %d: streamed text '%s' vs '%s'", k,
                  text[id], c[k].text);
    }
    hr_engine_free(e);

    /* all together, small prompt chunks, joining at different steps */
    e = make_engine(m, 4, 3, 512);
    int32_t tok[MAX_PROMPTS][64] = {{0}}, n_tok[MAX_PROMPTS] = {0};
    hr_finish_reason fin[MAX_PROMPTS] = {0};
    int32_t ids[MAX_PROMPTS];
    for (int k = 0; e && k < n_cases; k++) {
        sp.max_tokens = c[k].n_greedy;
        CHECK_OK(hr_engine_add(e, c[k].ids, c[k].n_ids, &sp, &ids[k], &err), &err);
        if (k == 1) { /* let the first two start before the rest arrive */
            hr_event ev[16];
            int32_t n;
            for (int s = 0; s < 3; s++) {
                hr_engine_step(e, ev, 16, &n, &err);
                for (int32_t i = 0; i < n; i++)
                    if (ev[i].token >= 0)
                        tok[ev[i].id][n_tok[ev[i].id]++] = ev[i].token;
            }
        }
    }
    if (e)
        drain(e, tok, n_tok, fin, NULL, MAX_PROMPTS);
    for (int k = 0; e && k < n_cases; k++)
        CHECK_MSG(same_tokens(tok[ids[k]], n_tok[ids[k]], c[k].greedy, c[k].n_greedy),
                  "prompt %d: batched continuation differs from transformers'", k);
    hr_engine_free(e);
}

static void test_finish_rules(const hr_model *m, const case_ref *c) {
    hr_error err;
    hr_engine *e = make_engine(m, 2, 64, 16);
    if (!e)
        return;
    hr_sampling_params sp = hr_sampling_params_greedy();
    sp.ignore_eos = true;
    int32_t tok[MAX_PROMPTS][64] = {{0}}, n_tok[MAX_PROMPTS] = {0};
    hr_finish_reason fin[MAX_PROMPTS] = {0};
    int32_t id;
    /* context bound: 16 tokens, a 3-token prompt -> 13 new tokens */
    sp.max_tokens = -1;
    CHECK_OK(hr_engine_add(e, c[0].ids, c[0].n_ids, &sp, &id, &err), &err);
    drain(e, tok, n_tok, fin, NULL, MAX_PROMPTS);
    CHECK_EQ_I64(fin[id], HR_FINISH_CONTEXT);
    CHECK_EQ_I64(n_tok[id], 16 - c[0].n_ids);
    /* a prompt as long as the context is refused; the engine keeps working */
    int32_t long_prompt[16];
    for (int i = 0; i < 16; i++)
        long_prompt[i] = 100 + i;
    CHECK_EQ_I64(hr_engine_add(e, long_prompt, 16, &sp, &id, &err), HR_ERR_NO_FIT);
    CHECK_MSG(strstr(err.msg, "16") != NULL, "message: %s", err.msg);
    /* out-of-vocabulary ids are refused */
    long_prompt[0] = 1 << 20;
    CHECK_EQ_I64(hr_engine_add(e, long_prompt, 4, &sp, &id, &err), HR_ERR_INVALID);
    /* cancel */
    sp.max_tokens = 8;
    CHECK_OK(hr_engine_add(e, c[0].ids, c[0].n_ids, &sp, &id, &err), &err);
    hr_engine_cancel(e, id);
    drain(e, tok, n_tok, fin, NULL, MAX_PROMPTS);
    CHECK_EQ_I64(fin[id], HR_FINISH_CANCELLED);
    hr_engine_free(e);
}

static void test_stop_and_eos(const hr_model *m, const case_ref *c) {
    hr_error err;
    hr_engine *e = make_engine(m, 1, 64, 128);
    if (!e)
        return;
    /* stop string: 5 bytes of the reference text from its third space on,
     * so it spans a word boundary and its first occurrence is known */
    const char *stop_at = c[0].text;
    for (int spaces = 0; *stop_at && spaces < 3; stop_at++)
        spaces += *stop_at == ' ';
    char stop[6] = {0};
    size_t n_stop = strlen(stop_at) < 5 ? strlen(stop_at) : 5;
    memcpy(stop, stop_at, n_stop);
    stop_at = strstr(c[0].text, stop);
    CHECK(strlen(stop) == 5 && stop_at != NULL);
    const char *stops[1] = {stop};
    hr_sampling_params sp = hr_sampling_params_greedy();
    sp.max_tokens = 32;
    sp.stop = stops;
    sp.n_stop = 1;
    int32_t tok[MAX_PROMPTS][64] = {{0}}, n_tok[MAX_PROMPTS] = {0};
    hr_finish_reason fin[MAX_PROMPTS] = {0};
    static char text[MAX_PROMPTS][1024];
    memset(text, 0, sizeof text);
    int32_t id;
    CHECK_OK(hr_engine_add(e, c[0].ids, c[0].n_ids, &sp, &id, &err), &err);
    drain(e, tok, n_tok, fin, text, MAX_PROMPTS);
    CHECK_EQ_I64(fin[id], HR_FINISH_STOP);
    if (stop_at)
        CHECK_MSG(strlen(text[id]) == (size_t)(stop_at - c[0].text) &&
                      strncmp(text[id], c[0].text, strlen(text[id])) == 0,
                  "text before the stop string: '%s'", text[id]);
    hr_engine_free(e);
}

/* A copy of the model whose generation_config.json lists several EOS ids,
 * one of them the greedy run's third token: generation ends there. */
static void test_eos_list(const case_ref *c) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/engine_eos_model", HR_BINARY_DIR);
    hr_model *m = test_model_ending_at(MODEL, dir, c[0].greedy[2]);
    if (!m)
        return;
    hr_error err;
    hr_engine *e = make_engine(m, 1, 64, 128);
    hr_sampling_params sp = hr_sampling_params_greedy();
    sp.max_tokens = 32;
    int32_t tok[MAX_PROMPTS][64] = {{0}}, n_tok[MAX_PROMPTS] = {0};
    hr_finish_reason fin[MAX_PROMPTS] = {0};
    int32_t id;
    CHECK_OK(hr_engine_add(e, c[0].ids, c[0].n_ids, &sp, &id, &err), &err);
    drain(e, tok, n_tok, fin, NULL, MAX_PROMPTS);
    CHECK_EQ_I64(fin[id], HR_FINISH_EOS);
    CHECK_EQ_I64(n_tok[id], 3);
    hr_engine_free(e);
    hr_model_free(m);
}

/* Steady state allocates nothing: count allocations across 100 decode steps. */
static void test_no_allocation(const hr_model *m, const case_ref *c) {
    hr_error err;
    hr_engine *e = make_engine(m, 2, 64, 256);
    if (!e)
        return;
    hr_sampling_params sp = hr_sampling_params_greedy();
    sp.max_tokens = 150;
    sp.ignore_eos = true;
    sp.temperature = 0.9f;
    sp.top_k = 40;
    sp.top_p = 0.9f;
    sp.repeat_penalty = 1.1f;
    const char *stops[1] = {"zzzz"};
    sp.stop = stops;
    sp.n_stop = 1;
    int32_t id;
    CHECK_OK(hr_engine_add(e, c[0].ids, c[0].n_ids, &sp, &id, &err), &err);
    CHECK_OK(hr_engine_add(e, c[1].ids, c[1].n_ids, &sp, &id, &err), &err);
    hr_event ev[8];
    int32_t n;
    for (int s = 0; s < 5; s++) /* prompts in, first tokens out */
        hr_engine_step(e, ev, 8, &n, &err);
    int64_t before = hr_alloc_count();
    for (int s = 0; s < 100; s++)
        CHECK_OK(hr_engine_step(e, ev, 8, &n, &err), &err);
    CHECK_EQ_I64(hr_alloc_count() - before, 0);
    hr_engine_free(e);
}

/* Once its prompt is in, a sequence is fed exactly one row per step (its
 * newest token): no step feeds a token again. */
static void test_one_row_per_decode(const hr_model *m, const case_ref *c) {
    hr_error err;
    hr_engine *e = make_engine(m, 2, 64, 256);
    if (!e)
        return;
    hr_sampling_params sp = hr_sampling_params_greedy();
    sp.max_tokens = 40;
    sp.ignore_eos = true;
    sp.temperature = 0.0f;
    int32_t ids[2];
    CHECK_OK(hr_engine_add(e, c[0].ids, c[0].n_ids, &sp, &ids[0], &err), &err);
    CHECK_OK(hr_engine_add(e, c[1].ids, c[1].n_ids, &sp, &ids[1], &err), &err);
    hr_event ev[8];
    int32_t n, bad = 0, checked = 0, got[2] = {0, 0};
    for (int s = 0; s < 30; s++) {
        bool decoding = got[0] > 0 && got[1] > 0; /* both prompts are in */
        CHECK_OK(hr_engine_step(e, ev, 8, &n, &err), &err);
        for (int32_t i = 0; i < n; i++)
            got[ev[i].id == ids[1]] += ev[i].token >= 0;
        if (!decoding)
            continue;
        checked++;
        bool one_each = e->step.n_rows == 2 && e->step.n_seg == 2;
        for (int32_t g = 0; g < e->step.n_seg; g++)
            one_each = one_each && e->step.segs[g].n == 1;
        bad += !one_each;
    }
    CHECK(checked >= 20);
    CHECK_MSG(bad == 0, "%d of %d decode steps fed more than one row per sequence", bad,
              checked);
    hr_engine_free(e);
}

int main(void) {
    static case_ref cases[MAX_PROMPTS];
    int n_cases = load_cases(cases);
    CHECK(n_cases >= 4);
    hr_error err;
    hr_model *m = NULL;
    CHECK_OK(hr_model_load(MODEL, NULL, &m, &err), &err);
    if (!m || n_cases < 4)
        TEST_END();
    test_greedy_and_batching(m, cases, n_cases);
    test_finish_rules(m, cases);
    test_stop_and_eos(m, cases);
    test_eos_list(cases);
    test_no_allocation(m, cases);
    test_one_row_per_decode(m, cases);
    hr_model_free(m);
    TEST_END();
}
