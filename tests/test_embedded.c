// ctest-label: numeric
// ctest-timeout: 1800
/*
 * test_embedded.c — the embedded model (models/tiny-shakespeare) against
 * transformers (reference.json, tools/make_embedded_reference.py):
 *   - perplexity on the held-out text within 1e-3 relative, and greedy
 *     continuations token for token, from the Hugging Face folder;
 *   - the same after `headroom convert` to GGUF f16 and bf16 (the bf16
 *     weights survive both exactly, so the same reference applies);
 *   - the same after converting to q8_0, against transformers run on that
 *     q8_0 file (its own GGUF reader dequantizes the blocks), so the check
 *     stays exact while the weights change.
 * All in EXACT mode (f32 arithmetic on the CPU), as transformers computes.
 * The timeout is for `make asan` (sanitizers, -O1): there the four
 * perplexity passes took 872 s on a 2-core CI-like machine (2026-12-01;
 * 915-1154 s at -O0), 59 s in the RelWithDebInfo build.
 */
#include "headroom.h"
#include "test.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#define MODEL HR_SOURCE_DIR "/models/tiny-shakespeare"
#define N_PROMPTS 5

typedef struct {
    double ppl;
    int32_t ids[N_PROMPTS][64], n_ids[N_PROMPTS];
    int32_t greedy[N_PROMPTS][64], n_greedy[N_PROMPTS];
} expect;

static void read_list(const cJSON *arr, int32_t *out, int32_t *n) {
    const cJSON *x;
    *n = 0;
    cJSON_ArrayForEach(x, arr) if (*n < 64) out[(*n)++] = x->valueint;
}

static bool load_expect(expect *bf16, expect *q8) {
    FILE *f = fopen(MODEL "/reference.json", "rb");
    if (!f)
        return false;
    static char buf[1 << 17];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    cJSON *root = cJSON_Parse(buf);
    if (!root)
        return false;
    bf16->ppl = cJSON_GetObjectItem(root, "perplexity")->valuedouble;
    const cJSON *q = cJSON_GetObjectItem(root, "gguf_q8_0");
    q8->ppl = cJSON_GetObjectItem(q, "perplexity")->valuedouble;
    int k = 0;
    const cJSON *g;
    cJSON_ArrayForEach(g, cJSON_GetObjectItem(root, "greedy")) {
        if (k == N_PROMPTS)
            break;
        read_list(cJSON_GetObjectItem(g, "ids"), bf16->ids[k], &bf16->n_ids[k]);
        read_list(cJSON_GetObjectItem(g, "greedy"), bf16->greedy[k], &bf16->n_greedy[k]);
        memcpy(q8->ids[k], bf16->ids[k], sizeof q8->ids[k]);
        q8->n_ids[k] = bf16->n_ids[k];
        k++;
    }
    k = 0;
    cJSON_ArrayForEach(g, cJSON_GetObjectItem(q, "greedy")) {
        if (k == N_PROMPTS)
            break;
        read_list(g, q8->greedy[k], &q8->n_greedy[k]);
        k++;
    }
    cJSON_Delete(root);
    return true;
}

static void check(const char *label, const char *path, const expect *x) {
    hr_error err;
    hr_model *m = NULL;
    CHECK_OK(hr_model_load(path, NULL, &m, &err), &err);
    if (!m)
        return;
    hr_engine_params ep = hr_engine_params_default();
    ep.device = HR_DEVICE_CPU;
    ep.n_threads = 2;
    ep.exact_matmul = true;
    ep.logits_all = true;
    hr_engine *e = NULL;
    CHECK_OK(hr_engine_create(m, &ep, &e, &err), &err);
    size_t len = 0;
    char *text = test_read_file(MODEL "/heldout.txt", &len, 0);
    size_t cap = len + 8, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    hr_tokenize_params tp = hr_tokenize_params_default();
    tp.add_bos = 1;
    tp.parse_special = false;
    CHECK_OK(hr_tokenize(hr_model_tokenizer(m), text, len, &tp, ids, cap, &n, &err), &err);
    double ppl = 0.0;
    if (e)
        CHECK_OK(hr_engine_perplexity(e, ids, (int64_t)n, hr_engine_n_ctx(e), &ppl, NULL, NULL,
                                      &err),
                 &err);
    double rel = fabs(ppl - x->ppl) / x->ppl;
    CHECK_MSG(rel <= 1e-3, "%s: perplexity %.6f vs transformers' %.6f", label, ppl, x->ppl);

    int ok = 0;
    for (int k = 0; e && k < N_PROMPTS; k++) {
        hr_sampling_params sp = hr_sampling_params_greedy();
        sp.max_tokens = x->n_greedy[k];
        sp.ignore_eos = true;
        int32_t id, got[64], n_got = 0;
        CHECK_OK(hr_engine_add(e, x->ids[k], x->n_ids[k], &sp, &id, &err), &err);
        hr_event ev[4];
        while (hr_engine_n_active(e) > 0) {
            int32_t n_ev;
            if (hr_engine_step(e, ev, 4, &n_ev, &err) != HR_OK)
                break;
            for (int32_t i = 0; i < n_ev; i++)
                if (ev[i].token >= 0 && n_got < 64)
                    got[n_got++] = ev[i].token;
        }
        bool same = n_got == x->n_greedy[k];
        for (int32_t i = 0; same && i < n_got; i++)
            same = got[i] == x->greedy[k][i];
        CHECK_MSG(same, "%s: greedy continuation %d differs", label, k);
        ok += same;
    }
    printf("%-26s perplexity %.6f (transformers %.6f, rel %.1e), greedy %d/%d\n", label, ppl,
           x->ppl, rel, ok, N_PROMPTS);
    free(ids);
    free(text);
    hr_engine_free(e);
    hr_model_free(m);
}

int main(void) {
    static expect bf16, q8;
    CHECK(load_expect(&bf16, &q8));
    check("safetensors (bf16)", MODEL, &bf16);
    hr_error err;
    hr_model *m = NULL;
    CHECK_OK(hr_model_load(MODEL, NULL, &m, &err), &err);
    static const struct {
        hr_dtype t;
        const expect *x;
    } conv[] = {{HR_DTYPE_F16, &bf16}, {HR_DTYPE_BF16, &bf16}, {HR_DTYPE_Q8_0, &q8}};
    for (size_t i = 0; m && i < sizeof conv / sizeof conv[0]; i++) {
        char path[1024], label[64];
        snprintf(path, sizeof path, "%s/embedded-%s.gguf", HR_BINARY_DIR,
                 hr_dtype_name(conv[i].t));
        CHECK_OK(hr_model_convert(m, path, conv[i].t, &err), &err);
        snprintf(label, sizeof label, "gguf %s", hr_dtype_name(conv[i].t));
        check(label, path, conv[i].x);
        remove(path);
    }
    hr_model_free(m);
    TEST_END();
}
