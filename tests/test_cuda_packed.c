// ctest-label: cuda
// ctest-timeout: 600
/*
 * test_cuda_packed.c — the CUDA backend's packed weights (backend/packed.h)
 * through the ops table, for every packed type, at odd shapes: matmul with
 * up to 8 rows (the packed GEMV: activations rounded to 8 bits as the CPU's
 * FAST mode does, backend/cpu/matmul.h), with 9 to 64 (tensor cores on
 * weights decoded to bf16 in registers) and with more (a chunk of rows
 * expanded to bf16 for cuBLASLt), a weight of mixed parts (Q4_K, Q4_K,
 * Q6_K, as a Q4_K_M file's q, k, v) with a bias, and the embedding lookup
 * from a packed table. The references are computed here in double from the
 * reference dequantizer (quant/), the oracle of the CPU kernels too.
 *
 * Tolerances, from the arithmetic:
 *   - GEMV: the same products as the reference (exact integer block sums,
 *     f32 scales; NF4/FP4 with the table at 2^-14, as the CPU's FAST
 *     kernel): only summation order differs, 1e-5 of the sum of |terms|;
 *     bf16 outputs one rounding more (2^-8 relative);
 *   - more rows: the weights rounded to bf16 in the reference too, f32
 *     accumulation (tensor cores, cuBLASLt): 1e-4 of the sum of |terms|;
 *   - embed: bit for bit.
 * Then whole models: SmolLM2-135M-Instruct's Q4_1 file and the bitsandbytes
 * fixtures (NF4, LLM.int8) on the GPU (packed, and expanded to bf16)
 * against the same files on the CPU (exact: f32 activations): perplexity
 * over a text within 1e-2 relative.
 * Without a CUDA device (CI) it prints "SKIP: no CUDA device" and exits 77.
 */
#include "backend/backend.h"
#include "backend/packed.h"
#include "backend/registry.h"
#include "quant/blocks.h" /* block_nf4 and the codebooks */
#include "quant/quant.h"
#include "test.h"
#include "util/fp16.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

/* rows of K elements of type t, quantized from random values (some rows
 * tiny, some with an outlier); *deq gets the reference values */
static model_tensor quant_tensor(const char *name, hr_dtype t, int64_t K, int64_t N, float **deq) {
    const size_t row = hr_dtype_row_bytes(t, K);
    uint8_t *data = malloc(row * (size_t)N);
    float *x = malloc((size_t)K * sizeof *x);
    *deq = malloc((size_t)(K * N) * sizeof **deq);
    for (int64_t r = 0; r < N; r++) {
        const float scale = r % 5 == 0 ? 1e-3f : 1.0f / sqrtf((float)K);
        for (int64_t k = 0; k < K; k++)
            x[k] = frand() * scale;
        if (r % 7 == 3)
            x[(r * 13) % K] = 8.0f * scale;
        quant_quantize_row(t, x, data + (size_t)r * row, K);
        quant_dequantize_row(t, data + (size_t)r * row, *deq + r * K, K);
    }
    free(x);
    return (model_tensor){.name = (char *)name, .dtype = t, .n_dims = 2, .ne = {K, N, 1, 1},
                          .data = data, .n_bytes = row * (size_t)N};
}

/* The weights as the packed GEMV multiplies them: the reference's, but for
 * NF4/FP4 the table rounded to multiples of 2^-14 (the CPU's FAST table,
 * backend/cpu/matmul.h) times the block's absmax. */
static float *gemv_weights(const model_tensor *w, const float *deq) {
    const int64_t K = w->ne[0], N = w->ne[1];
    float *out = malloc((size_t)(K * N) * sizeof *out);
    memcpy(out, deq, (size_t)(K * N) * sizeof *out);
    if (w->dtype != HR_DTYPE_NF4 && w->dtype != HR_DTYPE_FP4)
        return out;
    const float *table = w->dtype == HR_DTYPE_NF4 ? quant_nf4_values : quant_fp4_values;
    const block_nf4 *b = (const block_nf4 *)w->data;
    for (int64_t i = 0; i < K * N / 64; i++, b++)
        for (int j = 0; j < 64; j++) {
            const int code = j < 32 ? b->qs[j] & 15 : b->qs[j - 32] >> 4;
            out[64 * i + j] =
                (float)lrintf(table[code] * 16384.0f) / 16384.0f * hr_f16_to_f32(b->d);
        }
    return out;
}

/* the CPU's FAST rounding of an activation row (backend/cpu/matmul.h) */
static void quantize_x(const float *x, int64_t K, float *xq) {
    for (int64_t b = 0; b < K; b += 32) {
        float amax = 0.0f;
        for (int i = 0; i < 32; i++)
            amax = fmaxf(amax, fabsf(x[b + i]));
        const float d = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
        for (int i = 0; i < 32; i++)
            xq[b + i] = d * rintf(x[b + i] * id);
    }
}

static float round_bf16(float v) { return hr_bf16_to_f32(hr_f32_to_bf16(v)); }

typedef struct {
    hr_backend *b;
    be_tensor x, y, y16, emb;
    int32_t tokens[256], pos[256], slot[256];
    step_segment seg;
    hr_step step;
} gpu;

static bool begin(gpu *g, int64_t n, hr_error *err) {
    for (int64_t i = 0; i < n; i++) {
        g->pos[i] = (int32_t)i;
        g->slot[i] = (int32_t)i;
    }
    g->seg = (step_segment){.seq = 0, .pos0 = 0, .n = (int32_t)n, .row0 = 0};
    static int32_t bt[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    g->step = (hr_step){.tokens = g->tokens, .pos = g->pos, .slot = g->slot, .segs = &g->seg,
                        .n_seg = 1, .n_rows = (int32_t)n, .block_tables = bt};
    return g->b->ops->begin_step(g->b, &g->step, err) == HR_OK;
}

static bool end(gpu *g, hr_error *err) {
    return g->b->ops->end_step(g->b, &g->y, NULL, NULL, NULL, err) == HR_OK;
}

/* y = x . W^T (+ bias) for n rows; checks against the reference */
static void check_matmul(gpu *g, const be_weight *w, const float *wdq, const float *wgemv,
                         const float *bias, int64_t N, int64_t K, int64_t n, const char *what) {
    hr_error err;
    float *x = malloc((size_t)(n * K) * sizeof *x), *xq = malloc((size_t)K * sizeof *xq),
          *y = malloc((size_t)(n * N) * sizeof *y), *y16 = malloc((size_t)(n * N) * sizeof *y16);
    for (int64_t i = 0; i < n * K; i++)
        x[i] = round_bf16(frand() * 2.0f); /* what the narrow x holds exactly */
    const bool gemv = n <= 8; /* the packed GEMV (8-bit x); above, W rounded to 16 bits */
    bool ok = begin(g, n, &err) && g->b->ops->write_tensor(g->b, &g->x, n, x, &err) == HR_OK;
    if (ok) {
        g->b->ops->matmul(g->b, &g->y, &g->x, w, n);
        g->b->ops->matmul(g->b, &g->y16, &g->x, w, n);
        ok = end(g, &err) && g->b->ops->read_tensor(g->b, &g->y, n, y, &err) == HR_OK &&
             g->b->ops->read_tensor(g->b, &g->y16, n, y16, &err) == HR_OK;
    }
    CHECK_MSG(ok, "%s: %s", what, err.msg);
    double worst = 0.0;
    for (int64_t i = 0; ok && i < n; i++) {
        if (gemv)
            quantize_x(x + i * K, K, xq);
        else
            memcpy(xq, x + i * K, (size_t)K * sizeof *xq);
        for (int64_t r = 0; r < N; r++) {
            double sum = bias ? bias[r] : 0.0, mag = bias ? fabs(bias[r]) : 0.0;
            for (int64_t k = 0; k < K; k++) {
                const double wv = gemv ? wgemv[r * K + k] : round_bf16(wdq[r * K + k]);
                sum += wv * xq[k];
                mag += fabs(wv * xq[k]);
            }
            const double tol = (gemv ? 1e-5 : 1e-4) * mag + 1e-30;
            const double tol16 = tol + fabs(sum) / 256.0;
            worst = fmax(worst, fabs(y[i * N + r] - sum) / tol);
            worst = fmax(worst, fabs(y16[i * N + r] - sum) / tol16);
        }
    }
    printf("%-28s rows %-4lld N %-5lld K %-5lld err/tol %.3f  %s\n", what, (long long)n,
           (long long)N, (long long)K, worst, ok && worst <= 1.0 ? "OK" : "FAIL");
    CHECK_MSG(worst <= 1.0, "%s rows %lld: %.3g x tolerance", what, (long long)n, worst);
    free(x);
    free(xq);
    free(y);
    free(y16);
}

static void check_type(hr_dtype t, int64_t K, int64_t N) {
    hr_error err;
    const int64_t V = 37;
    hr_model_info in = {.n_embd = (int32_t)K, .n_layer = 1, .n_head = 4, .n_head_kv = 4,
                        .head_dim = 64, .n_ff = (int32_t)N, .n_vocab = (int32_t)V,
                        .rms_eps = 1e-5f, .rope_theta = 10000.0f};
    float inv_freq[32];
    for (int i = 0; i < 32; i++)
        inv_freq[i] = 1.0f / powf(10000.0f, (float)(2 * i) / 64.0f);
    be_config cfg = {.max_rows = 160, .max_out = 1, .n_seq_max = 1, .max_blocks_per_seq = 16,
                     .n_block = 16, .block_size = 16, .kv_dtype = HR_DTYPE_BF16,
                     .rope_inv_freq = inv_freq};
    be_params gp = {.compute = HR_DTYPE_BF16, .packed = true, .tuning = {.no_graphs = true}};
    gpu g = {0};
    float *wdq = NULL, *edq = NULL;
    model_tensor w = quant_tensor("w", t, K, N, &wdq), e = quant_tensor("emb", t, K, V, &edq);
    float *wgemv = gemv_weights(&w, wdq);
    const model_tensor *wp = &w, *ep = &e;
    be_weight *bw = NULL, *be = NULL;
    bool ok = backend_device(HR_DEVICE_CUDA)->create(&in, &gp, &g.b, &err) == HR_OK;
    ok = ok && g.b->ops->weight_create(g.b, &wp, NULL, 1, NULL, &bw, &err) == HR_OK &&
         g.b->ops->weight_create(g.b, &ep, NULL, 1, NULL, &be, &err) == HR_OK &&
         g.b->ops->tensor_alloc(g.b, cfg.max_rows, K, true, &g.x, &err) == HR_OK &&
         g.b->ops->tensor_alloc(g.b, cfg.max_rows, N, false, &g.y, &err) == HR_OK &&
         g.b->ops->tensor_alloc(g.b, cfg.max_rows, N, true, &g.y16, &err) == HR_OK &&
         g.b->ops->tensor_alloc(g.b, cfg.max_rows, K, false, &g.emb, &err) == HR_OK &&
         g.b->ops->kv_alloc(g.b, &cfg, &err) == HR_OK;
    CHECK_MSG(ok, "%s: setup: %s", hr_dtype_name(t), err.msg);
    char what[64];
    snprintf(what, sizeof what, "matmul %s", hr_dtype_name(t));
    static const int64_t rows[] = {1, 2, 3, 8, 19, 64, 70, 150};
    for (size_t i = 0; ok && i < sizeof rows / sizeof rows[0]; i++)
        check_matmul(&g, bw, wdq, wgemv, NULL, N, K, rows[i], what);

    /* the embedding from a packed table, bit for bit */
    if (ok) {
        const int64_t n = 9;
        float *x = malloc((size_t)(n * K) * sizeof *x);
        for (int64_t i = 0; i < n; i++)
            g.tokens[i] = (int32_t)((i * 11 + 3) % V);
        ok = begin(&g, n, &err);
        if (ok) {
            g.b->ops->embed(g.b, &g.emb, be);
            ok = end(&g, &err) && g.b->ops->read_tensor(g.b, &g.emb, n, x, &err) == HR_OK;
        }
        int bad = 0;
        for (int64_t i = 0; ok && i < n; i++)
            bad += memcmp(x + i * K, edq + g.tokens[i] * K, (size_t)K * sizeof *x) != 0;
        CHECK_MSG(ok && bad == 0, "embed %s: %d rows differ (%s)", hr_dtype_name(t), bad,
                  ok ? "" : err.msg);
        printf("%-28s rows %-4lld %s\n", "embed", (long long)n, ok && !bad ? "OK" : "FAIL");
        free(x);
    }
    if (g.b)
        g.b->ops->free(g.b);
    free((void *)w.data);
    free((void *)e.data);
    free(wdq);
    free(wgemv);
    free(edq);
}

/* q and k Q4_K, v Q6_K, with a bias: two packed runs in one weight */
static void check_mixed(void) {
    hr_error err;
    const int64_t K = 512, Nq = 64, Nv = 24, N = 2 * Nq + Nv;
    hr_model_info in = {.n_embd = (int32_t)K, .n_layer = 1, .n_head = 4, .n_head_kv = 4,
                        .head_dim = 64, .n_ff = 64, .n_vocab = 64, .rms_eps = 1e-5f,
                        .rope_theta = 10000.0f};
    float inv_freq[32] = {0};
    be_config cfg = {.max_rows = 160, .max_out = 1, .n_seq_max = 1, .max_blocks_per_seq = 16,
                     .n_block = 16, .block_size = 16, .kv_dtype = HR_DTYPE_BF16,
                     .rope_inv_freq = inv_freq};
    be_params gp = {.compute = HR_DTYPE_BF16, .packed = true, .tuning = {.no_graphs = true}};
    float *dq[3];
    model_tensor q = quant_tensor("q", HR_DTYPE_Q4_K, K, Nq, &dq[0]),
                 k = quant_tensor("k", HR_DTYPE_Q4_K, K, Nq, &dq[1]),
                 v = quant_tensor("v", HR_DTYPE_Q6_K, K, Nv, &dq[2]);
    float *bias = malloc((size_t)N * sizeof *bias), *wdq = malloc((size_t)(N * K) * sizeof *wdq);
    for (int64_t i = 0; i < N; i++)
        bias[i] = frand();
    memcpy(wdq, dq[0], (size_t)(Nq * K) * sizeof *wdq);
    memcpy(wdq + Nq * K, dq[1], (size_t)(Nq * K) * sizeof *wdq);
    memcpy(wdq + 2 * Nq * K, dq[2], (size_t)(Nv * K) * sizeof *wdq);
    model_tensor b[3] = {{.name = "bq", .dtype = HR_DTYPE_F32, .n_dims = 1, .ne = {Nq, 1, 1, 1},
                          .data = (const uint8_t *)bias, .n_bytes = (size_t)Nq * 4},
                         {.name = "bk", .dtype = HR_DTYPE_F32, .n_dims = 1, .ne = {Nq, 1, 1, 1},
                          .data = (const uint8_t *)(bias + Nq), .n_bytes = (size_t)Nq * 4},
                         {.name = "bv", .dtype = HR_DTYPE_F32, .n_dims = 1, .ne = {Nv, 1, 1, 1},
                          .data = (const uint8_t *)(bias + 2 * Nq), .n_bytes = (size_t)Nv * 4}};
    const model_tensor *parts[3] = {&q, &k, &v}, *biases[3] = {&b[0], &b[1], &b[2]};
    gpu g = {0};
    be_weight *w = NULL;
    bool ok = backend_device(HR_DEVICE_CUDA)->create(&in, &gp, &g.b, &err) == HR_OK &&
              g.b->ops->weight_create(g.b, parts, biases, 3, NULL, &w, &err) == HR_OK &&
              g.b->ops->tensor_alloc(g.b, cfg.max_rows, K, true, &g.x, &err) == HR_OK &&
              g.b->ops->tensor_alloc(g.b, cfg.max_rows, N, false, &g.y, &err) == HR_OK &&
              g.b->ops->tensor_alloc(g.b, cfg.max_rows, N, true, &g.y16, &err) == HR_OK &&
              g.b->ops->kv_alloc(g.b, &cfg, &err) == HR_OK;
    CHECK_MSG(ok, "mixed: setup: %s", err.msg);
    for (int64_t n = 1; ok && n <= 100; n = n * 3 + 1)
        check_matmul(&g, w, wdq, wdq, bias, N, K, n, "matmul q4_K,q4_K,q6_K bias");
    if (g.b)
        g.b->ops->free(g.b);
    for (int i = 0; i < 3; i++)
        free(dq[i]);
    free((void *)q.data);
    free((void *)k.data);
    free((void *)v.data);
    free(bias);
    free(wdq);
}

static double perplexity(const hr_model *m, hr_device dev, bool expand, const int32_t *ids,
                         int64_t n) {
    hr_engine_params ep = hr_engine_params_default();
    ep.device = dev;
    /* the cpu's reference arithmetic (f32 activations), as the GPU's prefill
     * multiplies: the default 8-bit rounding of activations moved the int8
     * fixture's perplexity on this window from 327536 to 243786 (its random
     * weights make outliers that one 8-bit scale a 32 values loses) */
    ep.exact_matmul = true;
    ep.n_ctx = 512;
    ep.logits_all = true;
    ep.expand_weights = expand;
    hr_engine *e = NULL;
    hr_error err;
    double ppl = 0.0;
    CHECK_OK(hr_engine_create(m, &ep, &e, &err), &err);
    if (e)
        CHECK_OK(hr_engine_perplexity(e, ids, n, 512, &ppl, NULL, NULL, &err), &err);
    hr_engine_free(e);
    return ppl;
}

/* One model file on the GPU (packed, and expanded to 16 bits) against the
 * same file on the CPU: perplexity over README.md's text, n_max ids. */
static void check_model_file(const char *path, const char *label, size_t n_max) {
    hr_error err;
    hr_model *m = NULL;
    CHECK_OK(hr_model_load(path, NULL, &m, &err), &err);
    if (!m)
        return;
    FILE *f = fopen(HR_SOURCE_DIR "/README.md", "rb");
    static char text[1 << 16];
    size_t len = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f)
        fclose(f);
    int32_t *ids = malloc((len + 8) * sizeof *ids);
    size_t n = 0;
    hr_tokenize_params tp = hr_tokenize_params_default();
    CHECK_OK(hr_tokenize(hr_model_tokenizer(m), text, len, &tp, ids, len + 8, &n, &err), &err);
    n = n > n_max ? n_max : n;
    const double cpu = perplexity(m, HR_DEVICE_CPU, false, ids, (int64_t)n),
                 packed = perplexity(m, HR_DEVICE_CUDA, false, ids, (int64_t)n),
                 expanded = perplexity(m, HR_DEVICE_CUDA, true, ids, (int64_t)n);
    printf("%s perplexity over %zu tokens: cpu %.4f, cuda packed %.4f, cuda expanded %.4f\n",
           label, n, cpu, packed, expanded);
    CHECK_MSG(fabs(packed - cpu) <= 1e-2 * cpu, "%s: packed %.4f against cpu %.4f", label, packed,
              cpu);
    CHECK_MSG(fabs(expanded - cpu) <= 1e-2 * cpu, "%s: expanded %.4f against cpu %.4f", label,
              expanded, cpu);
    free(ids);
    hr_model_free(m);
}

/* SmolLM2's Q4_1 file (two windows of 512), and the bitsandbytes fixtures
 * (NF4 with double quantization, LLM.int8 as Q8_0 rows: one window of 512,
 * their context) */
static void check_models(void) {
    FILE *p = popen(HR_SOURCE_DIR "/tools/fetch_smollm2.sh", "r");
    char path[4096] = "";
    if (!p || !fgets(path, sizeof path, p))
        path[0] = '\0';
    if (p)
        pclose(p);
    path[strcspn(path, "\n")] = '\0';
    if (path[0])
        check_model_file(path, "SmolLM2 Q4_1", 1024);
    else
        printf("SmolLM2 could not be fetched: its whole-model check is skipped\n");
    check_model_file(HR_SOURCE_DIR "/tests/fixtures/bnb/llama-nf4", "bnb nf4 fixture", 512);
    check_model_file(HR_SOURCE_DIR "/tests/fixtures/bnb/llama-int8", "bnb int8 fixture", 512);
}

/* "models": the whole-model checks alone */
int main(int argc, char **argv) {
    if (!backend_device(HR_DEVICE_CUDA)->available())
        TEST_SKIP("no CUDA device (%s)", backend_device(HR_DEVICE_CUDA)->why_not());
    if (argc > 1 && strcmp(argv[1], "models") == 0) {
        check_models();
        TEST_END();
    }
    static const hr_dtype types[] = {HR_DTYPE_Q8_0, HR_DTYPE_Q4_0, HR_DTYPE_Q4_1,
                                     HR_DTYPE_Q5_0, HR_DTYPE_Q5_1, HR_DTYPE_Q4_K,
                                     HR_DTYPE_Q5_K, HR_DTYPE_Q6_K, HR_DTYPE_NF4,
                                     HR_DTYPE_FP4};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        /* odd row counts and an odd block count; then the fixtures' shape:
         * rows of one or two blocks (K 64 or the one super-block) */
        const int64_t block = packed_block(packed_type_of(types[i]));
        check_type(types[i], block == 256 ? 768 : block == 64 ? 320 : 352, 75);
        check_type(types[i], block == 256 ? 256 : 64, 128);
    }
    check_mixed();
    check_models();
    TEST_END();
}
