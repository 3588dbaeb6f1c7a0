// ctest-label: numeric
// ctest-timeout: 600
/*
 * test_engine_overlap.c — the engine's overlap (a lone sequence's next step
 * queued before its token is in: hr_step.defer / chained, wait_step) on the
 * CPU, so CI runs it without a GPU.
 *
 * The CUDA backend is the only one that queues steps; here a stand-in wraps
 * the CPU backend of an engine: it samples greedily itself (the argmax, the
 * host sampler's tie rule), keeps the tokens of deferred steps until
 * wait_step, feeds a chained step the token the step before drew, and
 * checks the engine keeps the contract (a chained step follows exactly one
 * queued step of the same sequence, one position on; no unchained step
 * while one is queued). On the embedded model, greedy:
 *   - overlap on and off and the plain CPU engine (host sampling) give the
 *     same tokens, text and finish reason: to a length, to a stop string,
 *     to an end-of-generation id, cancelled mid-run;
 *   - a second request joining mid-run: both run to their lengths with the
 *     tokens each gets alone;
 *   - steps were in fact chained (none without overlap).
 */
#include "engine/engine.h"
#include "headroom.h"
#include "test.h"
#include "test_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MODEL HR_SOURCE_DIR "/models/tiny-shakespeare"

/* ---------------------------------------------------------------- the stand-in */

#define MAX_OUT 8

static const hr_backend_ops *cpu_ops;
static hr_backend_ops standin_ops;
typedef struct {
    const hr_backend *b;
    hr_step step;       /* the step as the CPU backend sees it (it keeps the pointer) */
    int32_t token;      /* a chained step's token */
    bool defer;
    int32_t n_out;
    int32_t queue[2];   /* tokens of deferred steps, oldest first */
    int n_queued;
    int32_t last_seq, last_pos, last_tok; /* the last step's row 0 and its draw */
    float *logits;      /* (MAX_OUT, V) */
} standin;
static standin standins[2]; /* one per wrapped engine */

static standin *state_of(const hr_backend *b) {
    return standins[0].b == b ? &standins[0] : &standins[1];
}

static hr_status standin_begin(hr_backend *b, const hr_step *s, hr_error *err) {
    standin *si = state_of(b);
    if (s->chained && (!s->defer || si->n_queued != 1 || s->n_rows != 1 ||
                       s->segs[0].seq != si->last_seq || s->pos[0] != si->last_pos + 1))
        return hr_err_set(err, HR_ERR_INVALID,
                          "stand-in: chained step (seq %d pos %d) after seq %d pos %d with %d "
                          "queued",
                          s->segs[0].seq, s->pos[0], si->last_seq, si->last_pos, si->n_queued);
    if (!s->chained && si->n_queued > 0)
        return hr_err_set(err, HR_ERR_INVALID, "stand-in: unchained step with %d queued",
                          si->n_queued);
    si->step = *s;
    if (s->chained) {
        si->token = si->last_tok;
        si->step.tokens = &si->token;
    }
    si->defer = s->defer;
    si->n_out = s->n_out;
    si->last_seq = s->n_seg > 0 ? s->segs[0].seq : -1;
    si->last_pos = s->pos[s->n_rows - 1];
    return cpu_ops->begin_step(b, &si->step, err);
}

static hr_status standin_end(hr_backend *b, const be_tensor *logits, float *host_logits,
                             const be_sample *samples, int32_t *host_tokens, hr_error *err) {
    standin *si = state_of(b);
    if (!samples) /* the engine samples (a repetition penalty) */
        return cpu_ops->end_step(b, logits, host_logits, NULL, NULL, err);
    if (si->n_out > MAX_OUT)
        return hr_err_set(err, HR_ERR_INVALID, "stand-in: %d outputs", si->n_out);
    HR_TRY(cpu_ops->end_step(b, logits, si->logits, NULL, NULL, err));
    const int32_t V = b->info->n_vocab;
    for (int32_t o = 0; o < si->n_out; o++) {
        if (samples[o].temperature > 0.0f)
            return hr_err_set(err, HR_ERR_UNSUPPORTED, "stand-in: greedy only");
        const float *l = si->logits + (int64_t)o * V;
        int32_t best = 0;
        for (int32_t v = 1; v < V; v++)
            if (l[v] > l[best])
                best = v;
        if (o == 0)
            si->last_tok = best;
        if (si->defer)
            si->queue[si->n_queued++] = best;
        else
            host_tokens[o] = best;
    }
    return HR_OK;
}

static hr_status standin_wait(hr_backend *b, int32_t *host_tokens, hr_error *err) {
    standin *si = state_of(b);
    if (si->n_queued == 0)
        return hr_err_set(err, HR_ERR_INVALID, "stand-in: wait with nothing queued");
    host_tokens[0] = si->queue[0];
    si->queue[0] = si->queue[1];
    si->n_queued--;
    return HR_OK;
}

/* a CPU engine; with the stand-in over its backend (state slot) when slot >= 0 */
static hr_engine *make_engine(const hr_model *m, int slot, bool overlap) {
    hr_engine_params ep = hr_engine_params_default();
    ep.device = HR_DEVICE_CPU;
    ep.n_threads = 2;
    ep.n_seq_max = 2;
    ep.n_ctx = 256;
    ep.exact_matmul = true;
    hr_tuning t = hr_tuning_default();
    t.no_overlap = !overlap;
    ep.tuning = &t;
    hr_engine *e = NULL;
    hr_error err;
    CHECK_OK(hr_engine_create(m, &ep, &e, &err), &err);
    if (e && slot >= 0) {
        hr_model_info in;
        hr_model_get_info(m, &in);
        standin *si = &standins[slot];
        free(si->logits);
        *si = (standin){.b = e->be,
                        .logits = malloc((size_t)MAX_OUT * (size_t)in.n_vocab * sizeof(float))};
        CHECK(si->logits != NULL);
        cpu_ops = e->be->ops;
        standin_ops = *cpu_ops;
        standin_ops.begin_step = standin_begin;
        standin_ops.end_step = standin_end;
        standin_ops.wait_step = standin_wait;
        standin_ops.can_sample = true;
        e->be->ops = &standin_ops;
        e->be->chains = true;
    }
    return e;
}

/* ---------------------------------------------------------------- runs */

/* the same request on the three engines: all alike; returns the overlap run */
static void three_ways(hr_engine *const eng[3], const int32_t *prompt, int32_t n_prompt,
                       const hr_sampling_params *sp, int cancel_after, const char *what,
                       test_run_out *out) {
    static test_run_out r[3];
    for (int i = 0; i < 3; i++)
        test_run(eng[i], prompt, n_prompt, sp, cancel_after, NULL, 0, &r[i], NULL);
    CHECK_MSG(test_same_run(&r[0], &r[1]) && test_same_run(&r[0], &r[2]),
              "%s: overlap %d tokens (%s), without %d (%s), host sampling %d (%s)", what,
              r[0].n, hr_finish_reason_name(r[0].finish), r[1].n,
              hr_finish_reason_name(r[1].finish), r[2].n, hr_finish_reason_name(r[2].finish));
    *out = r[0];
}

int main(void) {
    hr_error err;
    hr_model *m = NULL;
    CHECK_OK(hr_model_load(MODEL, NULL, &m, &err), &err);
    if (!m)
        TEST_END();
    hr_engine *eng[3] = {make_engine(m, 0, true), make_engine(m, 1, false),
                         make_engine(m, -1, false)};
    if (!eng[0] || !eng[1] || !eng[2])
        goto done;
    const int32_t prompt[6] = {1, 311, 524, 97, 1870, 40};
    static test_run_out a, b, first;
    hr_sampling_params greedy = hr_sampling_params_greedy();
    greedy.max_tokens = 60;

    greedy.ignore_eos = true;
    three_ways(eng, prompt, 6, &greedy, 0, "to a length", &first);
    CHECK_MSG(first.n == 60 && first.finish == HR_FINISH_LENGTH, "%d tokens, %s", first.n,
              hr_finish_reason_name(first.finish));
    CHECK_MSG(eng[0]->n_chained >= 50 && eng[1]->n_chained == 0,
              "%lld chained steps with overlap, %lld without", (long long)eng[0]->n_chained,
              (long long)eng[1]->n_chained);

    /* a stop string from the middle of the text */
    char stop[6] = {0};
    memcpy(stop, first.text + first.len / 2, 5);
    const char *stops[1] = {stop};
    hr_sampling_params stopped = greedy;
    stopped.stop = stops;
    stopped.n_stop = 1;
    three_ways(eng, prompt, 6, &stopped, 0, "to a stop string", &a);
    CHECK_MSG(a.finish == HR_FINISH_STOP, "stop string '%s': %s", stop,
              hr_finish_reason_name(a.finish));

    three_ways(eng, prompt, 6, &greedy, 9, "cancelled", &a);
    CHECK_MSG(a.finish == HR_FINISH_CANCELLED && a.n > 0 && a.n < 60, "cancelled: %d, %s", a.n,
              hr_finish_reason_name(a.finish));

    /* a second request joins after 4 steps: each gets its tokens as alone */
    hr_sampling_params join = greedy;
    join.max_tokens = 20;
    test_run(eng[0], prompt, 6, &greedy, 0, &join, 4, &a, &b);
    CHECK_MSG(a.n == 60 && b.n == 20 && memcmp(a.tok, first.tok, sizeof a.tok) == 0 &&
                  memcmp(b.tok, first.tok, 20 * sizeof b.tok[0]) == 0,
              "joined: %d and %d tokens", a.n, b.n);
    three_ways(eng, prompt, 6, &greedy, 0, "after the others", &a);
    CHECK(test_same_run(&a, &first));
    printf("overlap on / off / host sampling alike: to a length, to a stop string, cancelled, "
           "joined; %lld chained steps\n",
           (long long)eng[0]->n_chained);
done:
    for (int i = 0; i < 3; i++)
        hr_engine_free(eng[i]);
    hr_model_free(m);

    /* end of generation: a copy of the model whose end ids include the
     * greedy run's fifth token */
    char dir[512];
    snprintf(dir, sizeof dir, "%s/overlap_eos_model", HR_BINARY_DIR);
    m = test_model_ending_at(MODEL, dir, first.tok[4]);
    if (m) {
        hr_engine *ee[3] = {make_engine(m, 0, true), make_engine(m, 1, false),
                            make_engine(m, -1, false)};
        if (ee[0] && ee[1] && ee[2]) {
            greedy.ignore_eos = false;
            three_ways(ee, prompt, 6, &greedy, 0, "to an end id", &a);
            CHECK_MSG(a.finish == HR_FINISH_EOS && a.n <= 5, "end id: %d tokens, %s", a.n,
                      hr_finish_reason_name(a.finish));
            /* the step queued past the end was dropped: the engine goes on */
            three_ways(ee, prompt, 6, &greedy, 0, "after an end id", &b);
            CHECK(test_same_run(&a, &b));
            printf("an end id after %d tokens: alike; %lld chained steps\n", a.n,
                   (long long)ee[0]->n_chained);
        }
        for (int i = 0; i < 3; i++)
            hr_engine_free(ee[i]);
        hr_model_free(m);
    }
    for (int i = 0; i < 2; i++)
        free(standins[i].logits);
    TEST_END();
}
