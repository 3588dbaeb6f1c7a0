// ctest-label: cuda
// ctest-timeout: 900
/*
 * test_cuda_model.c — whole models on the GPU against the float32 references:
 *   - the five fixture models (tests/fixtures/models): logits at four
 *     positions within bf16 tolerance of transformers' float32 logits, and
 *     perplexity within 1e-2 relative, in bf16 (each norm's weight folded
 *     into the matrix after it, as by default, and not) and in f16;
 *   - the embedded model: held-out perplexity within 1e-2 relative of the
 *     float32 reference, greedy agreement reported;
 *   - graphs change nothing: a greedy generation with CUDA graphs gives the
 *     same tokens as without, and as the same prompts decoded as a batch;
 *   - sampling on the device is reproducible from its seed;
 *   - a greedy step's argmax folded into the persistent step picks the
 *     sampling kernel's token;
 *   - overlap (a lone sequence's next step queued before its token is in)
 *     changes nothing: the same tokens, text and finish reasons as without,
 *     greedy and sampled, stopped by a stop string, end of generation (the
 *     model's own, or an end id the greedy run meets, in a copy of the
 *     model that lists it) or a cancel in the middle of a run, and with a
 *     request joining mid-run;
 *     op by op too (no persistent step), greedy and sampled.
 * Without a CUDA device it prints "SKIP: no CUDA device" and exits 77.
 *
 * Tolerance. Weights are the same bf16 values on both sides; the GPU rounds
 * every matmul input (normalised activations, attention and SwiGLU outputs)
 * to the compute type: a relative error of 2^-9 (bf16) per rounding, a few
 * roundings per layer, partly cancelling (a folded norm weight moves one
 * rounding from the norm's output into the matrix: no more of them).
 * Logits are then off by about 1% of their scale at worst: |a - b| <= 0.03
 * max|ref| + 0.03 |ref| and NMSE <= 1e-3 (f16 keeps 3 more bits: the same
 * bounds are loose for it).
 */
#include "engine/engine.h"
#include "headroom.h"
#include "test.h"
#include "test_run.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static bool read_exact(FILE *f, void *p, size_t n) { return fread(p, 1, n, f) == n; }

typedef struct {
    uint32_t T, V, n_full;
    int32_t *tokens;
    uint32_t *full_pos;
    float *logits;
    double ppl;
} reference;

static bool load_reference(const char *dir, reference *r) {
    char path[1100];
    snprintf(path, sizeof path, "%s/reference.bin", dir);
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    char magic[8];
    uint32_t h[4];
    bool ok = read_exact(f, magic, 8) && read_exact(f, h, sizeof h);
    if (ok) {
        r->T = h[1], r->V = h[2], r->n_full = h[3];
        r->tokens = malloc(r->T * 4);
        r->full_pos = malloc(r->n_full * 4);
        r->logits = malloc((size_t)r->n_full * r->V * 4);
        float *nll = malloc(r->T * 4);
        ok = read_exact(f, r->tokens, r->T * 4) && read_exact(f, r->full_pos, r->n_full * 4) &&
             read_exact(f, r->logits, (size_t)r->n_full * r->V * 4) &&
             read_exact(f, nll, (r->T - 1) * 4) && read_exact(f, &r->ppl, 8);
        free(nll);
    }
    fclose(f);
    return ok;
}

static hr_engine *engine_with(const hr_model *m, const hr_engine_params *ep) {
    hr_engine *e = NULL;
    hr_error err;
    CHECK_OK(hr_engine_create(m, ep, &e, &err), &err);
    return e;
}

static hr_tuning tuning(bool graphs, bool overlap) {
    hr_tuning t = hr_tuning_default();
    t.no_graphs = !graphs;
    t.no_overlap = !overlap;
    return t;
}

static hr_engine_params cuda_params(hr_dtype dt, int32_t n_seq, bool logits_all,
                                    const hr_tuning *t) {
    hr_engine_params ep = hr_engine_params_default();
    ep.device = HR_DEVICE_CUDA;
    ep.dtype = dt;
    ep.n_ctx = 512;
    ep.n_seq_max = n_seq;
    ep.logits_all = logits_all;
    ep.tuning = t;
    return ep;
}

static hr_engine *cuda_engine_tuned(const hr_model *m, hr_dtype dt, int32_t n_seq,
                                    bool logits_all, const hr_tuning *t) {
    const hr_engine_params ep = cuda_params(dt, n_seq, logits_all, t);
    return engine_with(m, &ep);
}

static hr_engine *cuda_engine(const hr_model *m, hr_dtype dt, int32_t n_seq, bool logits_all,
                              bool graphs, bool overlap) {
    const hr_tuning t = tuning(graphs, overlap);
    return cuda_engine_tuned(m, dt, n_seq, logits_all, &t);
}

/* fold: the norms' weights folded into the matrices after them (the
 * default; bf16 only) */
static void check_fixture(const char *name, hr_dtype dt, bool fold) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/models/%s", HR_SOURCE_DIR, name);
    reference ref = {0};
    CHECK(load_reference(dir, &ref));
    hr_error err;
    hr_model *m = NULL;
    CHECK_OK(hr_model_load(dir, NULL, &m, &err), &err);
    hr_tuning t = tuning(false, true);
    t.no_norm_fold = !fold;
    hr_engine *e = m ? cuda_engine_tuned(m, dt, 1, true, &t) : NULL;
    const char *how = dt == HR_DTYPE_F16 ? "f16" : fold ? "bf16" : "bf16 unfolded";
    if (e && ref.tokens) {
        double *nll = malloc(ref.T * sizeof *nll);
        float *lg = malloc((size_t)ref.T * ref.V * sizeof *lg);
        CHECK_OK(hr_engine_score(e, ref.tokens, (int32_t)ref.T, nll, lg, &err), &err);
        double worst = 0, se = 0, sr = 0, sum = 0;
        for (uint32_t k = 0; k < ref.n_full; k++) {
            uint32_t p = ref.full_pos[k];
            if (p >= ref.T - 1)
                continue;
            const float *a = lg + (size_t)p * ref.V, *b = ref.logits + (size_t)k * ref.V;
            double scale = 0;
            for (uint32_t v = 0; v < ref.V; v++)
                scale = fmax(scale, fabs(b[v]));
            for (uint32_t v = 0; v < ref.V; v++) {
                double d = (double)a[v] - b[v];
                se += d * d;
                sr += (double)b[v] * b[v];
                worst = fmax(worst, fabs(d) / (0.03 * scale + 0.03 * fabs(b[v])));
            }
        }
        for (uint32_t i = 0; i < ref.T - 1; i++)
            sum += nll[i];
        double ppl = exp(sum / (ref.T - 1)), nmse = se / sr;
        double rel = fabs(ppl - ref.ppl) / ref.ppl;
        printf("%-13s %-13s logits nmse %.2e err/tol %.3f  perplexity %.4f (f32 %.4f, "
               "rel %.1e)\n",
               name, how, nmse, worst, ppl, ref.ppl, rel);
        CHECK_MSG(worst <= 1.0 && nmse <= 1e-3, "%s %s: logits nmse %.3g, %.3g x tolerance",
                  name, how, nmse, worst);
        CHECK_MSG(rel <= 1e-2, "%s %s: perplexity %.6f vs %.6f", name, how, ppl, ref.ppl);
        free(nll);
        free(lg);
    }
    hr_engine_free(e);
    hr_model_free(m);
    free(ref.tokens);
    free(ref.full_pos);
    free(ref.logits);
}

/* Greedy generation of n tokens for each prompt, as one batch or one by one. */
static void generate(hr_engine *e, int32_t (*prompts)[8], int n_prompts, int n_new,
                     int32_t (*out)[64], float temperature, uint64_t seed) {
    hr_error err;
    hr_sampling_params sp = hr_sampling_params_greedy();
    sp.max_tokens = n_new;
    sp.ignore_eos = true;
    sp.temperature = temperature;
    sp.top_k = temperature > 0 ? 50 : 0;
    sp.top_p = temperature > 0 ? 0.9f : 1.0f;
    sp.seed = seed;
    int32_t ids[16], count[16] = {0};
    for (int i = 0; i < n_prompts; i++)
        CHECK_OK(hr_engine_add(e, prompts[i], 8, &sp, &ids[i], &err), &err);
    hr_event ev[16];
    while (hr_engine_n_active(e) > 0) {
        int32_t n;
        if (hr_engine_step(e, ev, 16, &n, &err) != HR_OK) {
            CHECK_MSG(false, "step: %s", err.msg);
            return;
        }
        for (int32_t j = 0; j < n; j++)
            for (int i = 0; i < n_prompts; i++)
                if (ev[j].id == ids[i] && ev[j].token >= 0 && count[i] < 64)
                    out[i][count[i]++] = ev[j].token;
    }
}

static void check_overlap(const hr_model *m);

static void check_embedded(void) {
    const char *dir = HR_SOURCE_DIR "/models/tiny-shakespeare";
    hr_error err;
    hr_model *m = NULL;
    CHECK_OK(hr_model_load(dir, NULL, &m, &err), &err);
    if (!m)
        return;
    /* perplexity on the held-out text against the f32 reference */
    FILE *f = fopen(HR_SOURCE_DIR "/models/tiny-shakespeare/reference.json", "rb");
    static char buf[1 << 17];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    cJSON *root = cJSON_Parse(buf);
    double ref_ppl = cJSON_GetObjectItem(root, "perplexity")->valuedouble;
    cJSON_Delete(root);
    f = fopen(HR_SOURCE_DIR "/models/tiny-shakespeare/heldout.txt", "rb");
    static char text[1 << 18];
    size_t len = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f)
        fclose(f);
    static int32_t ids[1 << 17];
    size_t n_ids = 0;
    hr_tokenize_params tp = hr_tokenize_params_default();
    tp.add_bos = 1;
    tp.parse_special = false;
    CHECK_OK(hr_tokenize(hr_model_tokenizer(m), text, len, &tp, ids, 1 << 17, &n_ids, &err),
             &err);
    hr_engine *e = cuda_engine(m, HR_DTYPE_BF16, 1, true, false, true);
    double ppl = 0;
    if (e)
        CHECK_OK(hr_engine_perplexity(e, ids, (int64_t)n_ids, 512, &ppl, NULL, NULL, &err),
                 &err);
    double rel = fabs(ppl - ref_ppl) / ref_ppl;
    printf("embedded bf16 held-out perplexity %.6f (f32 reference %.6f, rel %.2e)\n", ppl,
           ref_ppl, rel);
    CHECK_MSG(rel <= 1e-2, "embedded perplexity %.6f vs %.6f", ppl, ref_ppl);
    hr_engine_free(e);

    /* graphs, batching and sampling: same tokens whichever way they run */
    int32_t prompts[4][8];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 8; j++)
            prompts[i][j] = j == 0 ? 1 : 100 + 37 * i + 11 * j;
    static int32_t a[4][64], b[4][64], c[4][64], d[4][64], s1[4][64], s2[4][64];
    hr_engine *eg = cuda_engine(m, HR_DTYPE_BF16, 4, false, true, true);
    hr_engine *en = cuda_engine(m, HR_DTYPE_BF16, 4, false, false, true);
    if (eg && en) {
        for (int i = 0; i < 4; i++) {
            generate(eg, &prompts[i], 1, 48, &a[i], 0.0f, 0);
            generate(en, &prompts[i], 1, 48, &b[i], 0.0f, 0);
        }
        generate(eg, prompts, 4, 48, c, 0.0f, 0);
        generate(en, prompts, 4, 48, d, 0.0f, 0);
        CHECK_MSG(memcmp(a, b, sizeof a) == 0, "greedy tokens differ with and without graphs");
        CHECK_MSG(memcmp(c, d, sizeof c) == 0,
                  "batched greedy tokens differ with and without graphs");
        int same = 0;
        for (int i = 0; i < 4; i++)
            same += memcmp(a[i], c[i], sizeof a[i]) == 0;
        printf("graphs: identical tokens with and without; batch of 4 vs one by one: %d/4 "
               "identical\n",
               same);
        generate(eg, prompts, 4, 48, s1, 0.8f, 1234);
        generate(eg, prompts, 4, 48, s2, 0.8f, 1234);
        CHECK_MSG(memcmp(s1, s2, sizeof s1) == 0, "device sampling is not reproducible");
    }
    hr_engine_free(eg);
    hr_engine_free(en);
    check_overlap(m);
    hr_model_free(m);
}

static void check_overlap(const hr_model *m) {
    hr_engine *eo = cuda_engine(m, HR_DTYPE_BF16, 2, false, true, true);
    hr_engine *en = cuda_engine(m, HR_DTYPE_BF16, 2, false, true, false);
    if (!eo || !en) {
        hr_engine_free(eo);
        hr_engine_free(en);
        return;
    }
    int32_t prompt[8];
    for (int j = 0; j < 8; j++)
        prompt[j] = j == 0 ? 1 : 211 + 13 * j;
    static test_run_out a, b, c, d;
    hr_sampling_params greedy = hr_sampling_params_greedy();
    greedy.max_tokens = 100;
    greedy.ignore_eos = true;
    test_run_out first;
    test_run(eo, prompt, 8, &greedy, 0, NULL, 0, &a, NULL);
    test_run(en, prompt, 8, &greedy, 0, NULL, 0, &b, NULL);
    first = a;
    CHECK_MSG(a.n == 100 && a.finish == HR_FINISH_LENGTH, "overlap: %d tokens, finish %s", a.n,
              hr_finish_reason_name(a.finish));
    CHECK_MSG(test_same_run(&a, &b), "overlap: greedy run differs");
    CHECK_MSG(eo->n_chained >= 90 && en->n_chained == 0,
              "overlap: %lld chained steps with, %lld without", (long long)eo->n_chained,
              (long long)en->n_chained);

    /* a near-zero temperature draws the argmax through the sampling kernel:
     * the persistent step's folded argmax must agree (ties aside) */
    hr_sampling_params cold = greedy;
    cold.temperature = 1e-30f;
    test_run(eo, prompt, 8, &cold, 0, NULL, 0, &a, NULL);
    CHECK_MSG(test_same_run(&a, &first), "greedy folded into the step differs from the sampler's");

    hr_sampling_params sampled = greedy;
    sampled.temperature = 0.8f;
    sampled.top_k = 50;
    sampled.top_p = 0.9f;
    sampled.seed = 77;
    test_run(eo, prompt, 8, &sampled, 0, NULL, 0, &a, NULL);
    test_run(en, prompt, 8, &sampled, 0, NULL, 0, &b, NULL);
    CHECK_MSG(test_same_run(&a, &b), "overlap: sampled run differs");

    /* a stop string from the middle of the greedy text */
    char stop[8] = {0};
    memcpy(stop, first.text + first.len / 2, 4);
    const char *stops[1] = {stop};
    hr_sampling_params stopped = greedy;
    stopped.stop = stops;
    stopped.n_stop = strlen(stop) == 4 ? 1 : 0;
    test_run(eo, prompt, 8, &stopped, 0, NULL, 0, &a, NULL);
    test_run(en, prompt, 8, &stopped, 0, NULL, 0, &b, NULL);
    CHECK_MSG(a.finish == HR_FINISH_STOP && test_same_run(&a, &b),
              "overlap: stop string run differs (finish %s / %s)",
              hr_finish_reason_name(a.finish), hr_finish_reason_name(b.finish));

    /* end of generation where the model says so */
    hr_sampling_params eos = greedy;
    eos.ignore_eos = false;
    eos.max_tokens = 250;
    int n_eos = 0;
    for (int i = 0; i < 4; i++) {
        int32_t p[8];
        for (int j = 0; j < 8; j++)
            p[j] = j == 0 ? 1 : 100 + 37 * i + 11 * j;
        test_run(eo, p, 8, &eos, 0, NULL, 0, &a, NULL);
        test_run(en, p, 8, &eos, 0, NULL, 0, &b, NULL);
        n_eos += a.finish == HR_FINISH_EOS;
        CHECK_MSG(test_same_run(&a, &b), "overlap: prompt %d differs (%d tokens, %s / %d, %s)", i,
                  a.n, hr_finish_reason_name(a.finish), b.n, hr_finish_reason_name(b.finish));
    }

    /* cancelled mid-run */
    test_run(eo, prompt, 8, &greedy, 10, NULL, 0, &a, NULL);
    test_run(en, prompt, 8, &greedy, 10, NULL, 0, &b, NULL);
    CHECK_MSG(a.finish == HR_FINISH_CANCELLED && test_same_run(&a, &b),
              "overlap: cancelled run differs (%d tokens, %s / %d, %s)", a.n,
              hr_finish_reason_name(a.finish), b.n, hr_finish_reason_name(b.finish));

    /* a second request joins mid-run: both run to their lengths, the first
     * as alone until then */
    hr_sampling_params join = greedy;
    join.max_tokens = 30;
    test_run(eo, prompt, 8, &greedy, 0, &join, 5, &a, &c);
    test_run(en, prompt, 8, &greedy, 0, &join, 5, &b, &d);
    CHECK_MSG(a.n == 100 && c.n == 30 && b.n == 100 && d.n == 30 &&
                  memcmp(a.tok, first.tok, 5 * sizeof a.tok[0]) == 0,
              "overlap: joined runs %d + %d tokens, %d + %d without", a.n, c.n, b.n, d.n);

    /* and the engine is as it was */
    test_run(eo, prompt, 8, &greedy, 0, NULL, 0, &a, NULL);
    CHECK_MSG(test_same_run(&a, &first), "overlap: greedy run differs after the others");

    /* decode op by op (the path past the persistent step's longest context):
     * the sampling kernel advances the chained steps' metadata */
    hr_tuning op_by_op = tuning(true, true);
    op_by_op.no_pstep = true;
    hr_engine *po = cuda_engine_tuned(m, HR_DTYPE_BF16, 2, false, &op_by_op);
    op_by_op.no_overlap = true;
    hr_engine *pn = cuda_engine_tuned(m, HR_DTYPE_BF16, 2, false, &op_by_op);
    if (po && pn) {
        test_run(po, prompt, 8, &greedy, 0, NULL, 0, &a, NULL);
        test_run(pn, prompt, 8, &greedy, 0, NULL, 0, &b, NULL);
        CHECK_MSG(a.n == 100 && test_same_run(&a, &b), "overlap op by op: greedy run differs");
        test_run(po, prompt, 8, &sampled, 0, NULL, 0, &a, NULL);
        test_run(pn, prompt, 8, &sampled, 0, NULL, 0, &b, NULL);
        CHECK_MSG(test_same_run(&a, &b), "overlap op by op: sampled run differs");
        CHECK_MSG(po->n_chained >= 180, "overlap op by op: %lld chained steps",
                  (long long)po->n_chained);
    }
    hr_engine_free(po);
    hr_engine_free(pn);
    printf("overlap: same tokens, text and finish with and without (greedy, sampled, stop "
           "string, %d/4 ended by the model, cancelled, joined); %lld chained steps\n",
           n_eos, (long long)eo->n_chained);
    hr_engine_free(eo);
    hr_engine_free(en);

    /* an end id the greedy run meets at its fifth token (a copy of the model
     * that says so): the step queued past it is dropped, the engine goes on */
    char dir[512];
    snprintf(dir, sizeof dir, "%s/cuda_eos_model", HR_BINARY_DIR);
    hr_model *me = test_model_ending_at(HR_SOURCE_DIR "/models/tiny-shakespeare", dir,
                                        first.tok[4]);
    eo = me ? cuda_engine(me, HR_DTYPE_BF16, 2, false, true, true) : NULL;
    en = me ? cuda_engine(me, HR_DTYPE_BF16, 2, false, true, false) : NULL;
    if (eo && en) {
        hr_sampling_params ends = greedy;
        ends.ignore_eos = false;
        test_run(eo, prompt, 8, &ends, 0, NULL, 0, &a, NULL);
        test_run(en, prompt, 8, &ends, 0, NULL, 0, &b, NULL);
        CHECK_MSG(a.finish == HR_FINISH_EOS && a.n <= 5 && test_same_run(&a, &b),
                  "overlap: end id after %d tokens (%s), %d without (%s)", a.n,
                  hr_finish_reason_name(a.finish), b.n, hr_finish_reason_name(b.finish));
        test_run(eo, prompt, 8, &greedy, 0, NULL, 0, &c, NULL);
        CHECK_MSG(test_same_run(&c, &first), "overlap: greedy run differs after an end id");
        printf("overlap: an end id met after %d tokens, the same with and without\n", a.n);
    }
    hr_engine_free(eo);
    hr_engine_free(en);
    hr_model_free(me);
}

int main(void) {
    if (!backend_device(HR_DEVICE_CUDA)->available())
        TEST_SKIP("no CUDA device (%s)", backend_device(HR_DEVICE_CUDA)->why_not());
    /* the bench's bounds: an H200 copies at ~4.25 TB/s (read + written) */
    hr_bandwidth bw = {0.0, 0.0};
    hr_error err;
    CHECK_OK(hr_device_bandwidth(HR_DEVICE_CUDA, &bw, &err), &err);
    CHECK_MSG(bw.copy_bytes_per_s > 1e11 && bw.copy_bytes_per_s < 2e13, "copy bandwidth %.3g B/s",
              bw.copy_bytes_per_s);
    CHECK_MSG(bw.read_bytes_per_s > 1e11 && bw.read_bytes_per_s < 2e13, "read bandwidth %.3g B/s",
              bw.read_bytes_per_s);
    printf("bandwidth: copy %.3f TB/s, read %.3f TB/s\n", bw.copy_bytes_per_s / 1e12,
           bw.read_bytes_per_s / 1e12);
    static const char *const models[] = {"llama-gqa", "mistral", "qwen2-tied", "llama3-rope",
                                         "llama-linear"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        check_fixture(models[i], HR_DTYPE_BF16, true);
        check_fixture(models[i], HR_DTYPE_BF16, false);
        check_fixture(models[i], HR_DTYPE_F16, false);
    }
    check_embedded();
    TEST_END();
}
