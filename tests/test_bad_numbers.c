// ctest-label: numeric
/*
 * test_bad_numbers.c — a model file whose weights hold NaN or infinity gives
 * an error that names where, never a crash or garbage text:
 *   - a copy of the embedded model with one token's embedding row set to NaN
 *     (then +inf): a request whose prompt holds that token finishes with
 *     HR_FINISH_ERROR and a message naming the position, while a request
 *     beside it in the same steps runs to its end, token for token as alone;
 *   - hr_generate returns HR_ERR_NUMERIC; scoring and perplexity too, naming
 *     the window;
 *   - -n 0 (max_tokens 0) prefills and generates nothing.
 * On the CPU, and on CUDA too where a device is present (there the host
 * sees no logits when the device samples: its sampler and the persistent
 * step answer -1 for a broken row, and the engine fails the request alike).
 */
#include "format/safetensors.h"
#include "headroom.h"
#include "test.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define MODEL HR_SOURCE_DIR "/models/tiny-shakespeare"
static int32_t BAD_TOKEN; /* the row made NaN: the last token of "ROMEO:" */
static hr_device g_device = HR_DEVICE_CPU;

static bool copy_file(const char *from, const char *to) {
    size_t n = 0;
    char *b = test_read_file(from, &n, 0);
    FILE *f = b ? fopen(to, "wb") : NULL;
    bool ok = f && fwrite(b, 1, n, f) == n;
    if (f)
        ok = fclose(f) == 0 && ok;
    free(b);
    return ok;
}

/* The embedded model in dir, token BAD_TOKEN's embedding row all `bits`
 * (bf16). */
static bool make_damaged(const char *dir, uint16_t bits) {
    static const char *const files[] = {"config.json", "generation_config.json",
                                        "tokenizer.json", "tokenizer_config.json"};
    char from[512], to[512];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(from, sizeof from, "%s/%s", MODEL, files[i]);
        snprintf(to, sizeof to, "%s/%s", dir, files[i]);
        if (!copy_file(from, to))
            return false;
    }
    hr_error err;
    st_set *st = NULL;
    if (st_open_file(MODEL "/model.safetensors", &st, &err) != HR_OK)
        return false;
    const st_tensor *t = st_find(st, "model.embed_tokens.weight");
    bool ok = t && t->dtype == HR_DTYPE_BF16 && t->n_dims == 2 && t->shape[0] > BAD_TOKEN;
    size_t size = st->files[0].size, off = ok ? (size_t)(t->data - st->files[0].data) : 0;
    int64_t row = ok ? t->shape[1] : 0;
    uint8_t *copy = ok ? malloc(size) : NULL;
    if (copy) {
        memcpy(copy, st->files[0].data, size);
        uint16_t *r = (uint16_t *)(copy + off) + (int64_t)BAD_TOKEN * row;
        for (int64_t i = 0; i < row; i++)
            r[i] = bits;
        snprintf(to, sizeof to, "%s/model.safetensors", dir);
        FILE *f = fopen(to, "wb");
        ok = f && fwrite(copy, 1, size, f) == size;
        if (f)
            ok = fclose(f) == 0 && ok;
    }
    free(copy);
    st_free(st);
    return ok && copy;
}

static hr_engine *engine(const hr_model *m, int32_t n_seq, bool logits_all) {
    hr_engine_params ep = hr_engine_params_default();
    ep.device = g_device;
    ep.n_threads = 2;
    ep.n_seq_max = n_seq;
    ep.n_ctx = 128;
    ep.logits_all = logits_all;
    hr_engine *e = NULL;
    hr_error err;
    CHECK_OK(hr_engine_create(m, &ep, &e, &err), &err);
    return e;
}

/* Two requests stepped together: `bad` holds BAD_TOKEN, `good` does not. */
static void test_one_fails_the_other_runs(const hr_model *m, const int32_t *good_ref,
                                          int n_ref) {
    hr_engine *e = engine(m, 2, false);
    if (!e)
        return;
    const int32_t good[] = {1, 40, 41, 42}, bad[] = {1, 40, BAD_TOKEN, 42};
    hr_sampling_params sp = hr_sampling_params_greedy();
    sp.max_tokens = 16;
    int32_t id_good = -1, id_bad = -1;
    hr_error err;
    CHECK_OK(hr_engine_add(e, bad, 4, &sp, &id_bad, &err), &err);
    CHECK_OK(hr_engine_add(e, good, 4, &sp, &id_good, &err), &err);
    int32_t got[32];
    int n_got = 0;
    hr_finish_reason fin_good = HR_FINISH_NONE, fin_bad = HR_FINISH_NONE;
    char bad_msg[256] = "";
    for (int guard = 0; hr_engine_n_active(e) > 0 && guard < 100; guard++) {
        hr_event ev[4];
        int32_t n = 0;
        CHECK_OK(hr_engine_step(e, ev, 4, &n, &err), &err);
        for (int32_t i = 0; i < n; i++) {
            if (ev[i].id == id_good && ev[i].token >= 0 && n_got < 32)
                got[n_got++] = ev[i].token;
            if (ev[i].id == id_good && ev[i].finish != HR_FINISH_NONE)
                fin_good = ev[i].finish;
            if (ev[i].id == id_bad && ev[i].finish != HR_FINISH_NONE) {
                fin_bad = ev[i].finish;
                CHECK(ev[i].token < 0);
                snprintf(bad_msg, sizeof bad_msg, "%s", ev[i].error ? ev[i].error : "(none)");
            }
            if (ev[i].id == id_bad && ev[i].finish == HR_FINISH_NONE)
                CHECK_MSG(false, "the damaged request produced token %d", ev[i].token);
        }
    }
    CHECK_EQ_I64(fin_bad, HR_FINISH_ERROR);
    /* the device sampler says only that no finite value came */
    CHECK_MSG(strstr(bad_msg, "position 3") &&
                  strstr(bad_msg, g_device == HR_DEVICE_CPU ? "NaN" : "no finite value"),
              "message: %s", bad_msg);
    CHECK_EQ_I64(fin_good, HR_FINISH_LENGTH);
    CHECK_EQ_I64(n_got, n_ref);
    /* token for token as alone on the cpu, whose rows are computed alike
     * in a batch or not; on cuda a batch of two takes other kernels */
    if (g_device == HR_DEVICE_CPU)
        CHECK(n_got == n_ref && memcmp(got, good_ref, sizeof(int32_t) * (size_t)n_ref) == 0);
    hr_engine_free(e);
}

/* The good prompt alone on the undamaged model: the tokens to expect. */
static int reference_tokens(int32_t *out) {
    hr_error err;
    hr_model *m = NULL;
    CHECK_OK(hr_model_load(MODEL, NULL, &m, &err), &err);
    hr_engine *e = m ? engine(m, 1, false) : NULL;
    int n = 0;
    if (e) {
        const int32_t good[] = {1, 40, 41, 42};
        hr_sampling_params sp = hr_sampling_params_greedy();
        sp.max_tokens = 16;
        int32_t id;
        CHECK_OK(hr_engine_add(e, good, 4, &sp, &id, &err), &err);
        for (int guard = 0; hr_engine_n_active(e) > 0 && guard < 100; guard++) {
            hr_event ev[4];
            int32_t k = 0;
            CHECK_OK(hr_engine_step(e, ev, 4, &k, &err), &err);
            for (int32_t i = 0; i < k; i++)
                if (ev[i].token >= 0 && n < 32)
                    out[n++] = ev[i].token;
        }
    }
    hr_engine_free(e);
    hr_model_free(m);
    return n;
}

static void test_generate_and_score(const hr_model *m, const char *kind) {
    hr_error err;
    /* hr_generate: a prompt that tokenizes to hold the damaged token */
    hr_engine *e = engine(m, 1, false);
    if (e) {
        hr_sampling_params sp = hr_sampling_params_greedy();
        sp.max_tokens = 8;
        hr_generation_stats st;
        hr_status s = hr_generate(e, "ROMEO:", 6, &sp, NULL, NULL, &st, &err);
        CHECK_MSG(s == HR_ERR_NUMERIC && strstr(err.msg, "position") &&
                      strstr(err.msg, g_device == HR_DEVICE_CPU ? kind : "no finite value"),
                  "%s (%s): %s", hr_status_name(s), kind, err.msg);
        CHECK_EQ_I64(st.n_gen, 0);
        CHECK_EQ_I64(st.finish, HR_FINISH_ERROR);
        CHECK_EQ_I64(hr_engine_n_active(e), 0); /* the engine is empty and serves on */
        const int32_t ok_prompt[] = {1, 40, 41};
        int32_t id;
        CHECK_OK(hr_engine_add(e, ok_prompt, 3, &sp, &id, &err), &err);
        hr_engine_free(e);
    }
    /* scoring and perplexity name the window */
    e = engine(m, 1, true);
    if (e) {
        int32_t toks[40];
        for (int i = 0; i < 40; i++)
            toks[i] = i == 25 ? BAD_TOKEN : 40 + i;
        double ppl = 0.0;
        hr_status s = hr_engine_perplexity(e, toks, 40, 20, &ppl, NULL, NULL, &err);
        CHECK_MSG(s == HR_ERR_NUMERIC && strstr(err.msg, "the window from token 20") &&
                      strstr(err.msg, "after token 5 ") && strstr(err.msg, kind),
                  "%s: %s", hr_status_name(s), err.msg);
        hr_engine_free(e);
    }
}

static void test_zero_new_tokens(void) {
    hr_error err;
    hr_model *m = NULL;
    CHECK_OK(hr_model_load(MODEL, NULL, &m, &err), &err);
    hr_engine *e = m ? engine(m, 1, false) : NULL;
    if (e) {
        hr_sampling_params sp = hr_sampling_params_greedy();
        sp.max_tokens = 0;
        hr_generation_stats st;
        CHECK_OK(hr_generate(e, "ROMEO:", 6, &sp, NULL, NULL, &st, &err), &err);
        CHECK_EQ_I64(st.n_gen, 0);
        CHECK_EQ_I64(st.finish, HR_FINISH_LENGTH);
        CHECK(st.n_prompt > 0 && st.prompt_ms > 0.0);
    }
    hr_engine_free(e);
    hr_model_free(m);
}

int main(void) {
    char dir[] = "/tmp/hr_bad_numbers_XXXXXX";
    if (!mkdtemp(dir))
        TEST_SKIP("cannot make a temporary folder");
    hr_error terr;
    hr_tokenizer *tok = NULL;
    CHECK_OK(hr_tokenizer_load(MODEL, &tok, &terr), &terr);
    int32_t ids[16];
    size_t n_ids = 0;
    hr_tokenize_params tp = hr_tokenize_params_default();
    CHECK_OK(hr_tokenize(tok, "ROMEO:", 6, &tp, ids, 16, &n_ids, &terr), &terr);
    hr_tokenizer_free(tok);
    if (n_ids < 2)
        TEST_END();
    BAD_TOKEN = ids[n_ids - 1];
    CHECK(BAD_TOKEN > 42); /* not in the good prompt */
    static const struct {
        uint16_t bits;
        const char *kind;
    } damage[] = {{0x7fc0, "NaN"}, {0x7f80, "NaN"}}; /* inf * 0 in the norm: NaN too */
    uint64_t free_b, total_b;
    const int n_dev = hr_device_memory(HR_DEVICE_CUDA, &free_b, &total_b, &terr) == HR_OK ? 2 : 1;
    if (n_dev == 1)
        printf("NOTE: no CUDA device: the cpu only\n");
    for (int d = 0; d < n_dev; d++) {
        g_device = d == 0 ? HR_DEVICE_CPU : HR_DEVICE_CUDA;
        int32_t ref[32];
        int n_ref = reference_tokens(ref);
        CHECK(n_ref == 16);
        for (size_t k = 0; k < sizeof damage / sizeof damage[0]; k++) {
            CHECK(make_damaged(dir, damage[k].bits));
            hr_error err;
            hr_model *m = NULL;
            CHECK_OK(hr_model_load(dir, NULL, &m, &err), &err);
            if (!m)
                break;
            test_one_fails_the_other_runs(m, ref, n_ref);
            test_generate_and_score(m, damage[k].kind);
            hr_model_free(m);
        }
        test_zero_new_tokens();
    }
    char path[600];
    static const char *const files[] = {"config.json", "generation_config.json", "tokenizer.json",
                                        "tokenizer_config.json", "model.safetensors"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        remove(path);
    }
    rmdir(dir);
    TEST_END();
}
