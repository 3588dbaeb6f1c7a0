// ctest-timeout: 900
/*
 * test_faults.c — out of memory at every allocation, the way SQLite tests:
 * for N = 1, 2, ... the N-th allocation of a whole run (loading a GGUF model
 * and its tokenizer, planning, creating the engine, generating) fails; each
 * run must end with a clean HR_ERR_NOMEM (never a crash, never another
 * error), free everything (AddressSanitizer's leak check sees it under
 * `make asan`), and the next run must work. The loop ends at the first N
 * the run no longer reaches.
 */
#include "headroom.h"
#include "test.h"
#include "util/alloc.h"

static hr_status one_run(const char *path, int *n_tokens, hr_error *err) {
    hr_model *m = NULL;
    hr_engine *e = NULL;
    hr_status s = hr_model_load(path, NULL, &m, err);
    if (s == HR_OK) {
        hr_engine_params p = hr_engine_params_default();
        p.device = HR_DEVICE_CPU;
        p.n_threads = 1;
        p.n_ctx = 64;
        p.n_batch = 16;
        p.exact_matmul = true;
        s = hr_engine_create(m, &p, &e, err);
    }
    if (s == HR_OK) {
        hr_sampling_params sp = hr_sampling_params_greedy();
        sp.max_tokens = 4;
        sp.ignore_eos = true;
        const char *stops[1] = {"zz"};
        sp.stop = stops;
        sp.n_stop = 1;
        hr_generation_stats st;
        s = hr_generate(e, "First Citizen: Before we proceed", 32, &sp, NULL, NULL, &st, err);
        *n_tokens = st.n_gen;
    }
    hr_engine_free(e);
    hr_model_free(m);
    return s;
}

int main(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/faults-model.gguf", HR_BINARY_DIR);
    hr_error err;
    hr_model *m = NULL;
    CHECK_OK(hr_model_load(HR_SOURCE_DIR "/tests/fixtures/models/llama-gqa", NULL, &m, &err),
             &err);
    if (m)
        CHECK_OK(hr_model_convert(m, path, HR_DTYPE_F16, &err), &err);
    hr_model_free(m);

    int n_tokens = 0;
    CHECK_OK(one_run(path, &n_tokens, &err), &err);
    CHECK_EQ_I64(n_tokens, 4);
    int64_t n;
    int bad = 0;
    for (n = 1; n < 1000000; n++) {
        hr_alloc_fail_at(n);
        n_tokens = 0;
        hr_status s = one_run(path, &n_tokens, &err);
        int fired = hr_alloc_fault_fired();
        hr_alloc_fail_at(0);
        if (!fired) {
            CHECK_OK(s, &err);
            break;
        }
        if (s != HR_ERR_NOMEM && bad++ < 5)
            CHECK_MSG(false, "allocation %lld failed: got %s: %s", (long long)n,
                      hr_status_name(s), err.msg);
    }
    printf("failed each of the %lld allocations of a load + plan + engine + generate run in "
           "turn: every one ended in a clean HR_ERR_NOMEM\n",
           (long long)(n - 1));
    CHECK(n > 100);
    /* and the process goes on */
    CHECK_OK(one_run(path, &n_tokens, &err), &err);
    remove(path);
    TEST_END();
}
