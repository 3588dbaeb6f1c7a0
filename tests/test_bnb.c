// ctest-label: numeric
/*
 * test_bnb.c — bitsandbytes checkpoints (tests/fixtures/bnb, written by
 * bitsandbytes 0.50 itself through transformers: tools/make_bnb_fixtures.py).
 *
 *   - Dequantization: every matrix in dequant.bin (bitsandbytes' own
 *     dequantize_4bit, or int8 * SCB / 127, in f32) against headroom's
 *     repacked weights dequantized by the reference (quant_dequantize_row).
 *     headroom keeps each absmax (4-bit) or row scale / 127 (8-bit) in f16,
 *     so a weight may differ by one f16 rounding of its scale: relative
 *     2^-11 (checked as |a - b| <= 2^-11 |b| + 1e-30); zeros stay zeros.
 *   - Whole models (NF4 with double quantization, LLM.int8) against
 *     transformers' float32 results on the same checkpoint: perplexity within
 *     1e-2 relative (the bound), and every logit at the reference
 *     positions within a share of the largest |logit| (NF4 5%, int8 10%).
 *     The weights are not the same numbers on both sides: bitsandbytes
 *     rounds each dequantized 4-bit weight to bf16 (2^-9 relative) where
 *     headroom keeps f32 products with an f16 absmax, and transformers' int8
 *     path rounds the activations to 8 bits per row; this random 2-layer
 *     model (initializer range 0.25) turns those into logit differences of
 *     0.19 (NF4) and 0.53 (int8) out of 8.8 and 9.0 (2026-12-05), while the
 *     perplexities agree within 6e-4 and 1.4e-3.
 *   - Bad input: a missing absmax, a quant_state whose shape disagrees with
 *     the codes, an unknown quant_type, a foreign quant_map, broken JSON, a
 *     missing SCB: each an error that names the tensor.
 */
#include "headroom.h"
#include "model/model_load.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "test.h"
#include "test_reference.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIXTURES HR_SOURCE_DIR "/tests/fixtures/bnb"

static const char *const config_4bit =
    "{\"quantization_config\": {\"quant_method\": \"bitsandbytes\", \"load_in_4bit\": true}}";
static const char *const config_8bit =
    "{\"quantization_config\": {\"quant_method\": \"bitsandbytes\", \"load_in_8bit\": true}}";

/* ---------------------------------------------------------------- dequantization */

static void check_dequant(const char *variant, const char *config) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/model.safetensors", FIXTURES, variant);
    hr_error err;
    st_set *st = NULL;
    hr_model *m = NULL;
    CHECK_OK(st_open_file(path, &st, &err), &err);
    if (!st)
        return;
    CHECK_OK(model_wrap_st(st, &m, &err), &err);
    if (!m)
        return;
    CHECK_OK(model_bnb_repack(m, config, strlen(config), path, &err), &err);

    snprintf(path, sizeof path, "%s/%s/dequant.bin", FIXTURES, variant);
    FILE *f = fopen(path, "rb");
    CHECK_MSG(f != NULL, "%s: missing", path);
    char magic[8];
    uint32_t n = 0;
    CHECK(f && read_exact(f, magic, 8) && memcmp(magic, "HRBNBDQ1", 8) == 0 &&
          read_exact(f, &n, 4) && n > 0);
    for (uint32_t i = 0; f && i < n; i++) {
        uint32_t nl, N, K;
        char name[256] = {0};
        if (!read_exact(f, &nl, 4) || nl >= sizeof name || !read_exact(f, name, nl) ||
            !read_exact(f, &N, 4) || !read_exact(f, &K, 4)) {
            CHECK_MSG(false, "%s: truncated", path);
            break;
        }
        float *ref = malloc(sizeof(float) * N * K), *got = malloc(sizeof(float) * K);
        CHECK(read_exact(f, ref, sizeof(float) * N * K));
        const model_tensor *t = model_find_tensor(m, name);
        CHECK_MSG(t && t->ne[0] == K && t->ne[1] == N && quant_can_dequantize(t->dtype),
                  "%s: %s missing, misshapen or not repacked", variant, name);
        if (t && !quant_can_dequantize(t->dtype))
            t = NULL;
        double worst = 0;
        int64_t n_exact = 0;
        bool zeros_ok = true;
        for (uint32_t r = 0; t && r < N; r++) {
            quant_dequantize_row(t->dtype, t->data + hr_dtype_row_bytes(t->dtype, K) * r, got,
                                 K);
            for (uint32_t k = 0; k < K; k++) {
                const double b = ref[(size_t)r * K + k], a = got[k];
                worst = fmax(worst, fabs(a - b) / (ldexp(fabs(b), -11) + 1e-30));
                n_exact += a == b;
                zeros_ok = zeros_ok && ((a == 0) == (b == 0));
            }
        }
        CHECK_MSG(worst <= 1.0 && zeros_ok, "%s %s: dequantization off by %.3g x 2^-11", variant,
                  name, worst);
        printf("%-10s %-36s %-4s worst %.3f x 2^-11, %lld of %u equal bit for bit\n", variant,
               name, t ? hr_dtype_name(t->dtype) : "?", worst, (long long)n_exact, N * K);
        free(ref);
        free(got);
    }
    if (f)
        fclose(f);
    hr_model_free(m);
}

/* ---------------------------------------------------------------- whole models */

static void check_model(const char *variant, double logit_share) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", FIXTURES, variant);
    reference ref = {0};
    CHECK_MSG(load_reference(dir, &ref), "%s: cannot read reference.bin", dir);
    hr_error err;
    hr_model *m = NULL;
    hr_engine *e = NULL;
    CHECK_OK(hr_model_load(dir, NULL, &m, &err), &err);
    hr_engine_params ep = hr_engine_params_default();
    ep.device = HR_DEVICE_CPU;
    ep.n_threads = 2;
    ep.n_ctx = 128;
    ep.exact_matmul = true;
    ep.logits_all = true;
    if (m)
        CHECK_OK(hr_engine_create(m, &ep, &e, &err), &err);
    if (e && ref.tokens) {
        const uint32_t T = ref.T, V = ref.V;
        double *nll = malloc((T - 1) * sizeof(double));
        float *logits = malloc((size_t)(T - 1) * V * sizeof(float));
        CHECK_OK(hr_engine_score(e, ref.tokens, (int32_t)T, nll, logits, &err), &err);
        double sum = 0, big = 0, worst_abs = 0;
        for (uint32_t k = 0; k < ref.n_full; k++) {
            const uint32_t p = ref.full_pos[k];
            for (uint32_t v = 0; p < T - 1 && v < V; v++) {
                const double a = logits[(size_t)p * V + v], b = ref.logits[(size_t)k * V + v];
                worst_abs = fmax(worst_abs, fabs(a - b));
                big = fmax(big, fabs(b));
            }
        }
        const double worst = worst_abs / (logit_share * big);
        for (uint32_t i = 0; i < T - 1; i++)
            sum += nll[i];
        const double ppl = exp(sum / (T - 1));
        CHECK_MSG(worst <= 1.0, "%s: logits off by %.3g x the tolerance", variant, worst);
        CHECK_MSG(fabs(ppl - ref.ppl) <= 1e-2 * ref.ppl, "%s: perplexity %.6f vs %.6f", variant,
                  ppl, ref.ppl);
        printf("%-10s logits off by at most %.4f (largest |logit| %.2f: %.3f x tolerance), "
               "perplexity %.4f (transformers %.4f, %+.2e relative)\n",
               variant, worst_abs, big, worst, ppl, ref.ppl, (ppl - ref.ppl) / ref.ppl);
        free(nll);
        free(logits);
    }
    hr_engine_free(e);
    hr_model_free(m);
    free_reference(&ref);
}

/* ---------------------------------------------------------------- bad input */

typedef struct {
    const char *name, *dtype;
    int64_t shape[2];
    int n_dims;
    const void *data;
    size_t n;
} st_entry;

/* A safetensors image of the entries (data in order). */
static uint8_t *build_st(const st_entry *e, int n, size_t *size) {
    char header[8192];
    size_t at = 0, off = 0;
    at += (size_t)snprintf(header + at, sizeof header - at, "{");
    for (int i = 0; i < n; i++) {
        at += (size_t)snprintf(header + at, sizeof header - at,
                               "%s\"%s\": {\"dtype\": \"%s\", \"shape\": [", i ? ", " : "",
                               e[i].name, e[i].dtype);
        for (int d = 0; d < e[i].n_dims; d++)
            at += (size_t)snprintf(header + at, sizeof header - at, "%s%lld", d ? ", " : "",
                                   (long long)e[i].shape[d]);
        at += (size_t)snprintf(header + at, sizeof header - at,
                               "], \"data_offsets\": [%zu, %zu]}", off, off + e[i].n);
        off += e[i].n;
    }
    at += (size_t)snprintf(header + at, sizeof header - at, "}");
    while (at % 8)
        header[at++] = ' ';
    *size = 8 + at + off;
    uint8_t *b = calloc(1, *size);
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)((uint64_t)at >> (8 * i));
    memcpy(b + 8, header, at);
    off = 8 + at;
    for (int i = 0; i < n; i++) {
        memcpy(b + off, e[i].data, e[i].n);
        off += e[i].n;
    }
    return b;
}

/* Repacks the entries under config; expects an error whose message holds want. */
static void expect_error(const char *label, const st_entry *e, int n, const char *config,
                         const char *want) {
    size_t size;
    uint8_t *img = build_st(e, n, &size);
    hr_error err;
    st_set *st = NULL;
    hr_model *m = NULL;
    CHECK_OK(st_parse(img, size, label, &st, &err), &err);
    if (st)
        CHECK_OK(model_wrap_st(st, &m, &err), &err);
    if (m) {
        hr_status s = model_bnb_repack(m, config, strlen(config), label, &err);
        CHECK_MSG(s != HR_OK && strstr(err.msg, want) != NULL, "%s: got '%s'", label,
                  s == HR_OK ? "success" : err.msg);
        if (s != HR_OK)
            printf("bad input %-22s -> %s\n", label, err.msg);
    }
    hr_model_free(m);
    free(img);
}

static void check_bad_input(void) {
    /* one 4-bit (4, 64) matrix: 128 code bytes, 4 f32 absmax, NF4's table */
    static uint8_t codes[128];
    float absmax[4] = {1.0f, 0.5f, 0.25f, 2.0f}, map[16], bad_map[16];
    memcpy(map, quant_nf4_values, sizeof map);
    memcpy(bad_map, map, sizeof map);
    bad_map[3] = 0.125f;
    for (int i = 0; i < 128; i++)
        codes[i] = (uint8_t)(i * 37);
    const char *qs_ok = "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"bfloat16\", "
                        "\"shape\": [4, 64]}";
    const char *qs_shape = "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": "
                           "\"bfloat16\", \"shape\": [8, 64]}";
    const char *qs_type = "{\"quant_type\": \"int3\", \"blocksize\": 64, \"dtype\": "
                          "\"bfloat16\", \"shape\": [4, 64]}";
    const char *qs_json = "{\"quant_type\": \"nf4\", \"blocksize\": 6";
    const char *w = "model.layers.0.mlp.up_proj.weight";
    const char *qn = "model.layers.0.mlp.up_proj.weight.quant_state.bitsandbytes__nf4";
#define QS(s) {qn, "U8", {(int64_t)strlen(s)}, 1, s, strlen(s)}
    const st_entry base[] = {
        {w, "U8", {128, 1}, 2, codes, 128},
        {"model.layers.0.mlp.up_proj.weight.absmax", "F32", {4}, 1, absmax, 16},
        {"model.layers.0.mlp.up_proj.weight.quant_map", "F32", {16}, 1, map, 64},
        QS(qs_ok),
    };
    /* the good one repacks */
    {
        size_t size;
        uint8_t *img = build_st(base, 4, &size);
        hr_error err;
        st_set *st = NULL;
        hr_model *m = NULL;
        CHECK_OK(st_parse(img, size, "good", &st, &err), &err);
        if (st)
            CHECK_OK(model_wrap_st(st, &m, &err), &err);
        if (m)
            CHECK_OK(model_bnb_repack(m, config_4bit, strlen(config_4bit), "good", &err), &err);
        hr_model_free(m);
        free(img);
    }
    st_entry e[4];
    memcpy(e, base, sizeof e);
    e[1] = base[3]; /* no absmax */
    expect_error("missing absmax", e, 3, config_4bit, "no 'model.layers.0.mlp.up_proj.weight.absmax'");
    memcpy(e, base, sizeof e);
    e[3] = (st_entry)QS(qs_shape);
    expect_error("shape vs codes", e, 4, config_4bit, "'model.layers.0.mlp.up_proj.weight' holds 128 bytes");
    e[3] = (st_entry)QS(qs_type);
    expect_error("unknown quant_type", e, 4, config_4bit, "quant_type 'int3'");
    e[3] = (st_entry)QS(qs_json);
    expect_error("broken quant_state", e, 4, config_4bit, "is not valid JSON");
    memcpy(e, base, sizeof e);
    e[2].data = bad_map;
    expect_error("foreign quant_map", e, 4, config_4bit, "quant_map' entry 3");
    memcpy(e, base, sizeof e);
    expect_error("no quant_state", e, 3, config_4bit, "no 'model.layers.0.mlp.up_proj.weight.quant_state");
    /* 8-bit without its row scales */
    static int8_t i8[4 * 64];
    const st_entry q8[] = {{w, "I8", {4, 64}, 2, i8, sizeof i8}};
    expect_error("missing SCB", q8, 1, config_8bit, "no row scales 'model.layers.0.mlp.up_proj.SCB'");
#undef QS
}

int main(void) {
    check_dequant("llama-nf4", config_4bit);
    check_dequant("llama-fp4", config_4bit);
    check_dequant("llama-int8", config_8bit);
    check_model("llama-nf4", 0.05);
    check_model("llama-int8", 0.1);
    check_bad_input();
    TEST_END();
}
