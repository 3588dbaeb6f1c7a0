// ctest-label: numeric
// ctest-timeout: 600
/*
 * test_model_reference.c — the CPU engine against transformers' float32
 * results (tools/make_reference.py) for small random models in real
 * layouts: Llama with GQA, Mistral, Qwen2 with q/k/v bias and tied
 * embeddings, Llama 3 and linear rope scaling. Each model is checked as its
 * Hugging Face folder (bf16 safetensors) and after conversion to GGUF by
 * headroom's own writer, as F16 and as BF16:
 *   - logits at a few positions (every vocabulary entry),
 *   - the negative log-likelihood of every next token, and the perplexity,
 *   - the greedy continuation, token for token,
 *   - the tokenization of the reference text.
 *
 * Tolerances. Both sides compute in f32 from the same bf16 weights (bf16 ->
 * f32 is exact); only summation order differs. A dot product of K terms
 * then differs by about sqrt(K) * 2^-24 relative to the sum of |terms|, a few
 * 1e-7 here (K <= 96), and two layers with norms and a softmax keep it near
 * 1e-6 relative. So logits get |a - b| <= 1e-4 + 1e-4 |ref| (a hundred
 * times that), nll the same, perplexity 1e-4 relative. The F16 file rounds
 * bf16 weights below 2^-14 into f16 subnormals (absolute error <= 2^-25),
 * which moves logits by ~1e-6: the same bounds hold.
 */
#include "headroom.h"
#include "test.h"
#include "test_reference.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* use_mmap: the backend reads the matrices in the file mapping instead of its
 * huge-page copy (the default); both must give the reference's numbers. */
static void check_model(const char *label, const char *path, const reference *ref,
                        bool check_tokens, bool use_mmap) {
    hr_error err;
    hr_model *m = NULL;
    hr_engine *e = NULL;
    CHECK_OK(hr_model_load(path, NULL, &m, &err), &err);
    if (!m)
        return;
    hr_engine_params ep = hr_engine_params_default();
    ep.device = HR_DEVICE_CPU;
    ep.n_threads = 2;
    ep.n_ctx = 128;
    ep.n_batch = 16; /* several prompt chunks: the KV cache carries across steps */
    ep.exact_matmul = true;
    ep.use_mmap = use_mmap;
    ep.logits_all = true;
    ep.kv_block_size = 8;
    CHECK_OK(hr_engine_create(m, &ep, &e, &err), &err);
    if (!e) {
        hr_model_free(m);
        return;
    }
    const uint32_t T = ref->T, V = ref->V;
    double *nll = malloc((T - 1) * sizeof(double));
    float *logits = malloc((size_t)(T - 1) * V * sizeof(float));
    CHECK_OK(hr_engine_score(e, ref->tokens, (int32_t)T, nll, logits, &err), &err);

    double worst = 0.0, sum = 0.0;
    for (uint32_t k = 0; k < ref->n_full; k++) {
        uint32_t p = ref->full_pos[k];
        if (p >= T - 1)
            continue; /* the last row has no next token; scored rows are 0..T-2 */
        for (uint32_t v = 0; v < V; v++) {
            double a = logits[(size_t)p * V + v], b = ref->logits[(size_t)k * V + v];
            double ex = (a - b < 0 ? b - a : a - b) / (1e-4 + 1e-4 * (b < 0 ? -b : b));
            worst = ex > worst ? ex : worst;
        }
    }
    CHECK_MSG(worst <= 1.0, "%s: logits off by %.3g x the tolerance", label, worst);
    double worst_nll = 0.0;
    for (uint32_t i = 0; i < T - 1; i++) {
        double d = nll[i] - ref->nll[i];
        d = d < 0 ? -d : d;
        double ex = d / (1e-4 + 1e-4 * ref->nll[i]);
        worst_nll = ex > worst_nll ? ex : worst_nll;
        sum += nll[i];
    }
    CHECK_MSG(worst_nll <= 1.0, "%s: nll off by %.3g x the tolerance", label, worst_nll);
    double ppl = exp(sum / (double)(T - 1));
    CHECK_MSG(fabs(ppl - ref->ppl) <= 1e-4 * ref->ppl, "%s: perplexity %.8g vs %.8g", label,
              ppl, ref->ppl);
    printf("%-30s logits %.2e  nll %.2e (x tolerance)  perplexity %.6f (ref %.6f)\n", label,
           worst, worst_nll, ppl, ref->ppl);

    /* greedy continuation, token for token */
    hr_sampling_params sp = hr_sampling_params_greedy();
    sp.max_tokens = (int32_t)ref->n_greedy;
    sp.ignore_eos = true;
    int32_t id;
    CHECK_OK(hr_engine_add(e, ref->tokens, (int32_t)T, &sp, &id, &err), &err);
    int32_t got[64], n_got = 0;
    hr_event ev[4];
    while (hr_engine_n_active(e) > 0) {
        int32_t n_ev = 0;
        if (hr_engine_step(e, ev, 4, &n_ev, &err) != HR_OK) {
            CHECK_MSG(false, "%s: step: %s", label, err.msg);
            break;
        }
        for (int32_t i = 0; i < n_ev; i++)
            if (ev[i].token >= 0 && n_got < 64)
                got[n_got++] = ev[i].token;
    }
    CHECK_EQ_I64(n_got, ref->n_greedy);
    bool same = n_got == (int32_t)ref->n_greedy;
    for (int32_t i = 0; same && i < n_got; i++)
        same = got[i] == ref->greedy[i];
    CHECK_MSG(same, "%s: greedy continuation differs from transformers'", label);

    if (check_tokens && ref->text[0]) {
        int32_t ids[256];
        size_t n = 0;
        hr_tokenize_params tp = hr_tokenize_params_default();
        tp.add_bos = 1;
        CHECK_OK(hr_tokenize(hr_model_tokenizer(m), ref->text, strlen(ref->text), &tp, ids, 256,
                             &n, &err),
                 &err);
        bool same_ids = n == T;
        for (size_t i = 0; same_ids && i < n; i++)
            same_ids = ids[i] == ref->tokens[i];
        CHECK_MSG(same_ids, "%s: tokenization of the reference text differs", label);
    }
    free(nll);
    free(logits);
    hr_engine_free(e);
    hr_model_free(m);
}

int main(void) {
    static const char *const models[] = {"llama-gqa", "mistral", "qwen2-tied", "llama3-rope",
                                         "llama-linear"};
    static const hr_dtype gguf_types[] = {HR_DTYPE_F16, HR_DTYPE_BF16};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        char dir[1024], label[128], gguf[1024];
        snprintf(dir, sizeof dir, "%s/tests/fixtures/models/%s", HR_SOURCE_DIR, models[i]);
        reference ref = {0};
        CHECK_MSG(load_reference(dir, &ref), "%s: cannot read reference.bin", dir);
        if (!ref.tokens)
            continue;
        snprintf(label, sizeof label, "%s (safetensors)", models[i]);
        check_model(label, dir, &ref, true, false);
        hr_error err;
        hr_model *m = NULL;
        CHECK_OK(hr_model_load(dir, NULL, &m, &err), &err);
        for (size_t t = 0; m && t < sizeof gguf_types / sizeof gguf_types[0]; t++) {
            snprintf(gguf, sizeof gguf, "%s/%s-%s.gguf", HR_BINARY_DIR, models[i],
                     hr_dtype_name(gguf_types[t]));
            CHECK_OK(hr_model_convert(m, gguf, gguf_types[t], &err), &err);
            const bool use_mmap = gguf_types[t] == HR_DTYPE_BF16;
            snprintf(label, sizeof label, "%s (gguf %s%s)", models[i],
                     hr_dtype_name(gguf_types[t]), use_mmap ? ", mmap" : "");
            check_model(label, gguf, &ref, true, use_mmap);
            remove(gguf);
        }
        hr_model_free(m);
        free_reference(&ref);
    }
    TEST_END();
}
