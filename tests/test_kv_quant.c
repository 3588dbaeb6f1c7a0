// ctest-label: numeric
/*
 * test_kv_quant.c — the engine with a quantized KV cache (q8_0, q4_0, K:V
 * mixes; issue 42) on the embedded model (models/tiny-shakespeare, head
 * size 32: one block per cached row), on the cpu:
 *   - perplexity on the first 2048 tokens of the held-out text (4 windows
 *     of 512) against the f32 cache: q8_0 within 0.5% (the target,
 *     against 16 bits; here against f32, which is stricter), a q8_0:q4_0 mix
 *     within 1% and q4_0 within 2% (measured: +0.03%, +0.21%, +0.47%;
 *     the bounds leave room for another SIMD level's rounding);
 *   - greedy continuations of transformers' prompts (reference.json): with
 *     q8_0 the same 32 tokens as transformers' f32 run for at least 3 of 5
 *     prompts (measured 4: one rounding flips a near tie, and the rest of
 *     that continuation follows it), and text for every prompt and type;
 *   - the engine holds the KV bytes the plan counted, and a decode step
 *     allocates nothing.
 * EXACT matmuls, so the KV type is the only difference from the f32 run.
 */
#include "headroom.h"
#include "test.h"
#include "util/alloc.h"

#include <cjson/cJSON.h>

#define MODEL HR_SOURCE_DIR "/models/tiny-shakespeare"
#define N_PROMPTS 5
#define N_TOKENS 2048
#define WINDOW 512

typedef struct {
    int32_t ids[N_PROMPTS][64], n_ids[N_PROMPTS];
    int32_t greedy[N_PROMPTS][64], n_greedy[N_PROMPTS];
} prompts;

static void read_list(const cJSON *arr, int32_t *out, int32_t *n) {
    const cJSON *x;
    *n = 0;
    cJSON_ArrayForEach(x, arr) if (*n < 64) out[(*n)++] = x->valueint;
}

static bool load_prompts(prompts *p) {
    size_t len = 0;
    char *buf = test_read_file(MODEL "/reference.json", &len, 0);
    cJSON *root = buf ? cJSON_Parse(buf) : NULL;
    free(buf);
    if (!root)
        return false;
    int k = 0;
    const cJSON *g;
    cJSON_ArrayForEach(g, cJSON_GetObjectItem(root, "greedy")) {
        if (k == N_PROMPTS)
            break;
        read_list(cJSON_GetObjectItem(g, "ids"), p->ids[k], &p->n_ids[k]);
        read_list(cJSON_GetObjectItem(g, "greedy"), p->greedy[k], &p->n_greedy[k]);
        k++;
    }
    cJSON_Delete(root);
    return k == N_PROMPTS;
}

typedef struct {
    hr_dtype k, v;
    double max_rel; /* perplexity against the f32 cache's */
    int min_same;   /* greedy continuations equal to transformers' */
} kv_case;

/* Perplexity of the case, the greedy continuations it matched. */
static double run_case(const hr_model *m, const kv_case *c, const int32_t *ids, int64_t n,
                       const prompts *pr, int *same_out) {
    hr_error err;
    hr_engine_params ep = hr_engine_params_default();
    ep.device = HR_DEVICE_CPU;
    ep.n_threads = 2;
    ep.n_ctx = WINDOW;
    ep.exact_matmul = true;
    ep.logits_all = true;
    ep.kv_dtype = c->k;
    ep.kv_dtype_v = c->v;
    hr_engine *e = NULL;
    hr_plan pl;
    CHECK_OK(hr_plan_compute(m, &ep, &pl, &err), &err);
    CHECK_OK(hr_engine_create(m, &ep, &e, &err), &err);
    if (!e)
        return NAN;
    hr_memory_report r;
    hr_engine_memory(e, &r);
    CHECK_EQ_I64(r.kv, pl.kv);
    double ppl = NAN;
    CHECK_OK(hr_engine_perplexity(e, ids, n, WINDOW, &ppl, NULL, NULL, &err), &err);

    int same = 0;
    for (int k = 0; k < N_PROMPTS; k++) {
        hr_sampling_params sp = hr_sampling_params_greedy();
        sp.max_tokens = pr->n_greedy[k];
        sp.ignore_eos = true;
        int32_t id, got[64], n_got = 0;
        char text[1024] = "";
        size_t n_text = 0;
        CHECK_OK(hr_engine_add(e, pr->ids[k], pr->n_ids[k], &sp, &id, &err), &err);
        hr_event ev[4];
        int steps = 0;
        while (hr_engine_n_active(e) > 0) {
            int32_t n_ev;
            /* from the third step on, every step is decode: nothing allocated */
            int64_t before = hr_alloc_count();
            if (hr_engine_step(e, ev, 4, &n_ev, &err) != HR_OK)
                break;
            if (++steps > 2)
                CHECK_EQ_I64(hr_alloc_count() - before, 0);
            for (int32_t i = 0; i < n_ev; i++) {
                if (ev[i].token >= 0 && n_got < 64)
                    got[n_got++] = ev[i].token;
                if (ev[i].text && n_text + (size_t)ev[i].text_len < sizeof text) {
                    memcpy(text + n_text, ev[i].text, (size_t)ev[i].text_len);
                    n_text += (size_t)ev[i].text_len;
                    text[n_text] = '\0';
                }
            }
        }
        bool eq = n_got == pr->n_greedy[k];
        for (int32_t i = 0; eq && i < n_got; i++)
            eq = got[i] == pr->greedy[k][i];
        same += eq;
        CHECK_MSG(n_got == pr->n_greedy[k] && n_text > 0, "prompt %d: %d tokens, text '%s'", k,
                  n_got, text);
        if (k == 0)
            printf("  kv %s:%s, prompt 0 continues: %.60s...\n", hr_dtype_name(c->k),
                   hr_dtype_name(c->v), text);
    }
    *same_out = same;
    hr_engine_free(e);
    return ppl;
}

int main(void) {
    hr_error err;
    hr_model *m = NULL;
    prompts pr;
    if (!load_prompts(&pr))
        TEST_SKIP("%s/reference.json unreadable", MODEL);
    CHECK_OK(hr_model_load(MODEL, NULL, &m, &err), &err);
    if (!m)
        TEST_END();
    size_t len = 0;
    char *text = test_read_file(MODEL "/heldout.txt", &len, 1);
    size_t cap = len + 8, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    hr_tokenize_params tp = hr_tokenize_params_default();
    tp.add_bos = 1;
    tp.parse_special = false;
    CHECK_OK(hr_tokenize(hr_model_tokenizer(m), text, len, &tp, ids, cap, &n, &err), &err);
    CHECK(n >= N_TOKENS);

    static const kv_case cases[] = {
        {HR_DTYPE_F32, HR_DTYPE_F32, 0.0, 5},     /* the reference (f32 matches transformers) */
        {HR_DTYPE_Q8_0, HR_DTYPE_Q8_0, 0.005, 3},
        {HR_DTYPE_Q8_0, HR_DTYPE_Q4_0, 0.01, 0},
        {HR_DTYPE_Q4_0, HR_DTYPE_Q4_0, 0.02, 0},
    };
    double ppl32 = NAN;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int same = 0;
        double ppl = run_case(m, &cases[i], ids, N_TOKENS, &pr, &same);
        if (i == 0)
            ppl32 = ppl;
        double rel = (ppl - ppl32) / ppl32;
        printf("kv %-4s:%-4s perplexity %.4f (%+.3f%% vs f32), greedy as transformers %d/%d\n",
               hr_dtype_name(cases[i].k), hr_dtype_name(cases[i].v), ppl, 100.0 * rel, same,
               N_PROMPTS);
        CHECK_MSG(isfinite(ppl) && fabs(rel) <= cases[i].max_rel,
                  "kv %s:%s: perplexity %.4f vs f32 %.4f", hr_dtype_name(cases[i].k),
                  hr_dtype_name(cases[i].v), ppl, ppl32);
        CHECK_MSG(same >= cases[i].min_same, "kv %s:%s: %d greedy continuations as transformers",
                  hr_dtype_name(cases[i].k), hr_dtype_name(cases[i].v), same);
    }
    free(ids);
    free(text);
    hr_model_free(m);
    TEST_END();
}
