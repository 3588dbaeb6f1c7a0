// ctest-label: cuda
// ctest-timeout: 900
/*
 * test_cuda_pstep.c — the persistent decode step (a decode step of one row
 * as one kernel, backend/cuda/persistent.cu) against the op-by-op decode
 * that test_cuda_model checks against transformers.
 *
 * Two engines on the same synthetic model, one with the persistent step
 * (the default) and one without (HEADROOM_CUDA_PSTEP=0), generate from the
 * same prompt in lockstep; every step's logits must agree. The persistent
 * engine is fed the reference engine's tokens (written over its own into
 * the request, so both contexts stay the same: random weights make nearly
 * flat distributions, where the two would soon sample apart). Sampling
 * stays on the host (a repetition penalty keeps it there), so the logits
 * come back.
 *
 * Shapes: tinyllama-1.1b (head size 64, 8 query heads a kv head) past the
 * persistent step's longest context (the steps after it run op by op), and
 * in f16; llama2-7b (head size 128); llama3-8b (a vocabulary the lm head
 * takes in several ops, the widest F, 4 query heads a kv head). In bf16
 * the norms' weights are folded into the matrices after them (the
 * default), so the persistent step runs its form that loads none; in f16
 * the form that loads them. Both paths
 * round at the same points; they sum in different orders, so a bf16
 * rounding can differ by one unit here and there: the bounds are the ones
 * test_cuda_model holds against transformers, |a - b| <= 0.03 max|b| +
 * 0.03 |b| and NMSE <= 1e-3.
 * Then the same engine draws 64 greedy tokens in the persistent step itself
 * (the argmax folded into its lm head) and 64 through the sampling kernel:
 * the same tokens.
 * Without a CUDA device it prints "SKIP: no CUDA device" and exits 77; so
 * does it on the generic path (a GPU before Hopper, or
 * HEADROOM_CUDA_ARCH_FALLBACK=1), which has no persistent step.
 */
#include "backend/cuda/cuda_backend.h"
#include "engine/engine.h"
#include "headroom.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

static hr_engine *engine(const hr_model *m, hr_dtype dt, bool pstep, int32_t n_ctx) {
    hr_tuning t = hr_tuning_default();
    t.no_pstep = !pstep;
    hr_engine_params ep = hr_engine_params_default();
    ep.tuning = &t;
    ep.device = HR_DEVICE_CUDA;
    ep.dtype = dt;
    ep.n_ctx = n_ctx;
    ep.n_seq_max = 1;
    hr_engine *e = NULL;
    hr_error err;
    CHECK_OK(hr_engine_create(m, &ep, &e, &err), &err);
    return e;
}

static bool step_one(hr_engine *e, int32_t *token) {
    hr_event ev[4];
    int32_t n = 0;
    hr_error err;
    if (hr_engine_step(e, ev, 4, &n, &err) != HR_OK) {
        CHECK_MSG(false, "step: %s", err.msg);
        return false;
    }
    *token = -1;
    for (int32_t i = 0; i < n; i++)
        if (ev[i].token >= 0)
            *token = ev[i].token;
    return true;
}

/* n greedy-like tokens from prompt, sampled on the device at temperature t */
static void generate(hr_engine *e, const int32_t *prompt, float t, int32_t n, int32_t *out) {
    hr_sampling_params sp = hr_sampling_params_greedy();
    sp.max_tokens = n;
    sp.ignore_eos = true;
    sp.temperature = t;
    hr_error err;
    int32_t id = -1, got = 0;
    CHECK_OK(hr_engine_add(e, prompt, 8, &sp, &id, &err), &err);
    while (hr_engine_n_active(e) > 0) {
        int32_t tok;
        if (!step_one(e, &tok))
            return;
        if (tok >= 0 && got < n)
            out[got++] = tok;
    }
    CHECK_MSG(got == n, "%d of %d tokens", got, n);
}

static void compare(const char *shape, hr_dtype dt, int32_t n_new) {
    hr_error err;
    hr_model *m = NULL;
    CHECK_OK(hr_model_synthetic(shape, dt, NULL, &m, &err), &err);
    if (!m)
        return;
    hr_model_info info;
    hr_model_get_info(m, &info);
    const int32_t n_prompt = 8, V = info.n_vocab;
    hr_engine *ref = engine(m, dt, false, n_prompt + n_new + 8);
    hr_engine *ps = engine(m, dt, true, n_prompt + n_new + 8);
    if (!ref || !ps) {
        hr_engine_free(ref);
        hr_engine_free(ps);
        hr_model_free(m);
        return;
    }
    int32_t prompt[8];
    for (int32_t j = 0; j < n_prompt; j++)
        prompt[j] = j == 0 ? 1 : 100 + 13 * j;
    hr_sampling_params sp = hr_sampling_params_greedy();
    sp.max_tokens = n_new;
    sp.ignore_eos = true;
    sp.temperature = 0.0f;
    sp.repeat_penalty = 1.0001f;
    int32_t id_ref = -1, id_ps = -1;
    CHECK_OK(hr_engine_add(ref, prompt, n_prompt, &sp, &id_ref, &err), &err);
    CHECK_OK(hr_engine_add(ps, prompt, n_prompt, &sp, &id_ps, &err), &err);

    int32_t compared = 0, expect_ps = 0;
    double worst_excess = -1e30, worst_nmse = 0.0, worst_diff = 0.0;
    for (int32_t t = 0; t < n_new; t++) {
        int32_t ta = -1, tb = -1;
        if (!step_one(ref, &ta) || !step_one(ps, &tb))
            break;
        engine_request *r = engine_find(ps, id_ps);
        if (r && r->n_tokens > 0) /* the next step feeds the reference's token */
            r->tokens[r->n_tokens - 1] = ta;
        if (t == 0)
            continue; /* the prompt's step is a prefill, the same kernels on both */
        const float *a = ps->logits, *b = ref->logits;
        double max_b = 0.0, se = 0.0, ss = 0.0;
        for (int32_t v = 0; v < V; v++)
            max_b = fabs(b[v]) > max_b ? fabs(b[v]) : max_b;
        for (int32_t v = 0; v < V; v++) {
            const double d = fabs((double)a[v] - b[v]);
            const double excess = d - (0.03 * max_b + 0.03 * fabs(b[v]));
            worst_excess = excess > worst_excess ? excess : worst_excess;
            worst_diff = d > worst_diff ? d : worst_diff;
            se += d * d;
            ss += (double)b[v] * b[v];
        }
        const double nmse = se / (ss > 0 ? ss : 1.0);
        worst_nmse = nmse > worst_nmse ? nmse : worst_nmse;
        compared++;
        expect_ps += n_prompt + t - 1 < CUDA_PSTEP_MAX_CTX; /* the position this step fed */
    }
    const int64_t steps_ps = backend_device(HR_DEVICE_CUDA)->fused_steps(ps->be),
                  steps_ref = backend_device(HR_DEVICE_CUDA)->fused_steps(ref->be);
    printf("%s %s: %d decode steps compared, max |a-b| %.4g, worst NMSE %.3g, margin %.4g; "
           "persistent steps %lld (reference engine %lld)\n",
           shape, hr_dtype_name(dt), compared, worst_diff, worst_nmse, -worst_excess,
           (long long)steps_ps, (long long)steps_ref);
    CHECK_MSG(compared == n_new - 1, "%s: %d of %d steps compared", shape, compared, n_new - 1);
    CHECK_MSG(worst_excess <= 0.0, "%s: logits differ beyond bf16 tolerance", shape);
    CHECK_MSG(worst_nmse <= 1e-3, "%s: NMSE %.3g", shape, worst_nmse);
    CHECK_MSG(steps_ref == 0, "%s: the reference engine ran persistent steps", shape);
    CHECK_MSG(steps_ps >= expect_ps, "%s: %lld steps ran as one kernel, %d expected", shape,
              (long long)steps_ps, expect_ps);

    /* greedy on the device: the argmax the persistent step draws itself (its
     * lm head ranks the logits, in several ops for a 128k vocabulary) against
     * the sampling kernel's (a temperature of 1e-30 draws the argmax, exact
     * ties aside) */
    int32_t folded[64] = {0}, sampled[64] = {0};
    generate(ps, prompt, 0.0f, 64, folded);
    generate(ps, prompt, 1e-30f, 64, sampled);
    CHECK_MSG(memcmp(folded, sampled, sizeof folded) == 0,
              "%s: the persistent step's greedy tokens differ from the sampler's", shape);
    printf("%s %s: 64 greedy tokens drawn in the persistent step, as the sampler draws them\n",
           shape, hr_dtype_name(dt));
    hr_engine_free(ref);
    hr_engine_free(ps);
    hr_model_free(m);
}

int main(void) {
    if (!backend_device(HR_DEVICE_CUDA)->available())
        TEST_SKIP("no CUDA device (%s)", backend_device(HR_DEVICE_CUDA)->why_not());
    if (strcmp(backend_device(HR_DEVICE_CUDA)->path(), "hopper") != 0)
        TEST_SKIP("the persistent step runs on the Hopper path only (this GPU: %s path)",
                  backend_device(HR_DEVICE_CUDA)->path());
    compare("llama2-7b", HR_DTYPE_BF16, 600);
    compare("tinyllama-1.1b", HR_DTYPE_BF16, 4300);
    compare("tinyllama-1.1b", HR_DTYPE_F16, 300);
    /* a 128k vocabulary (the lm head in several ops), F = 14336, 4 q heads
     * a kv head at Dh 128 */
    compare("llama3-8b", HR_DTYPE_BF16, 200);
    TEST_END();
}
