// ctest-label: numeric
/*
 * test_prefix_cache.c — the engine's prefix cache on the embedded model
 * (cpu): a request whose prompt begins with blocks another request computed
 * prefills only the rest, and its logits equal, bit for bit, those of an
 * engine without the cache; hits and misses are counted; a full pool evicts
 * idle cached blocks instead of refusing; requests sharing a prefix at the
 * same time share its blocks.
 */
#include "engine/engine.h"
#include "headroom.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

#define MODEL HR_SOURCE_DIR "/models/tiny-shakespeare"

static hr_engine *make(const hr_model *m, bool prefix, int32_t n_seq, int32_t n_ctx,
                       int32_t n_batch) {
    hr_engine_params ep = hr_engine_params_default();
    ep.device = HR_DEVICE_CPU;
    ep.n_threads = 2;
    ep.n_seq_max = n_seq;
    ep.n_ctx = n_ctx;
    ep.n_batch = n_batch;
    ep.prefix_cache = prefix;
    hr_engine *e = NULL;
    hr_error err;
    CHECK_OK(hr_engine_create(m, &ep, &e, &err), &err);
    return e;
}

/* Runs prompt to n_gen greedy tokens alone; keeps the logits of the first
 * sampled token (the prompt's last row) in first_logits. */
static void run(hr_engine *e, const int32_t *prompt, int32_t n, int32_t n_gen, int32_t *out,
                float *first_logits) {
    hr_sampling_params sp = hr_sampling_params_greedy();
    sp.max_tokens = n_gen;
    int32_t id;
    hr_error err;
    CHECK_OK(hr_engine_add(e, prompt, n, &sp, &id, &err), &err);
    hr_event ev[4];
    int32_t n_ev, got = 0;
    const int32_t V = e->model->info.n_vocab;
    while (hr_engine_n_active(e) > 0) {
        if (hr_engine_step(e, ev, 4, &n_ev, &err) != HR_OK) {
            CHECK_MSG(false, "step: %s", err.msg);
            return;
        }
        for (int32_t i = 0; i < n_ev; i++)
            if (ev[i].token >= 0 && got < n_gen) {
                if (got == 0 && first_logits)
                    memcpy(first_logits, e->logits, (size_t)V * sizeof(float));
                out[got++] = ev[i].token;
            }
    }
    CHECK_EQ_I64(got, n_gen);
}

int main(void) {
    hr_error err;
    hr_model *m = NULL;
    CHECK_OK(hr_model_load(MODEL, NULL, &m, &err), &err);
    if (!m)
        TEST_END();
    const int32_t V = m->info.n_vocab;
    /* a shared "system prompt" of 70 tokens (4 whole blocks and 6), then
     * two different questions */
    enum { SHARED = 70, N = 90 };
    int32_t a[N], b[N];
    for (int32_t i = 0; i < N; i++) {
        a[i] = 1 + (i * 37 + 11) % (V - 1);
        b[i] = i < SHARED ? a[i] : 1 + (i * 53 + 5) % (V - 1);
    }
    float *with = malloc((size_t)V * sizeof(float)), *without = malloc((size_t)V * sizeof(float));
    int32_t out_with[8], out_without[8], scratch[32];

    /* the reference: no cache, b alone */
    hr_engine *ref = make(m, false, 2, 256, 512);
    /* with the cache: a first, then b finds a's first 4 blocks */
    hr_engine *e = make(m, true, 2, 256, 512);
    if (ref && e) {
        run(ref, b, N, 8, out_without, without);
        hr_engine_stats st;
        hr_engine_get_stats(ref, &st);
        CHECK_EQ_I64(st.prefix_hit_tokens, 0);

        run(e, a, N, 8, scratch, NULL);
        hr_engine_get_stats(e, &st);
        CHECK_EQ_I64(st.prompt_tokens, N);
        CHECK_EQ_I64(st.prefix_hit_tokens, 0);
        /* a's prompt and generated blocks stay cached, idle */
        CHECK_MSG(st.kv_blocks_cached == (N + 8 - 1) / 16, "cached %d", st.kv_blocks_cached);
        run(e, b, N, 8, out_with, with);
        hr_engine_get_stats(e, &st);
        CHECK_EQ_I64(st.prompt_tokens, 2 * N);
        CHECK_EQ_I64(st.prefix_hit_tokens, SHARED / 16 * 16);
        CHECK_MSG(memcmp(with, without, (size_t)V * sizeof(float)) == 0,
                  "the logits after a prefix hit differ from those without the cache");
        CHECK(memcmp(out_with, out_without, sizeof out_with) == 0);

        /* the whole of a again: every whole block but the last token's */
        run(e, a, N, 8, out_with, with);
        hr_engine_get_stats(e, &st);
        CHECK_EQ_I64(st.prefix_hit_tokens, SHARED / 16 * 16 + (N - 1) / 16 * 16);
        run(ref, a, N, 8, out_without, without);
        CHECK(memcmp(with, without, (size_t)V * sizeof(float)) == 0);
        CHECK(memcmp(out_with, out_without, sizeof out_with) == 0);
    }
    hr_engine_free(ref);
    hr_engine_free(e);

    /* a pool that holds one sequence: cached blocks are evicted for new
     * prompts instead of refusing them, forever */
    e = make(m, true, 1, 128, 512);
    if (e) {
        for (int round = 0; round < 6; round++) {
            int32_t p[100];
            for (int32_t i = 0; i < 100; i++)
                p[i] = 1 + (i * 31 + round * 977) % (V - 1);
            run(e, p, 100, 20, scratch, NULL);
            CHECK_EQ_I64(hr_engine_n_active(e), 0);
        }
        hr_engine_stats st;
        hr_engine_get_stats(e, &st);
        CHECK_EQ_I64(st.kv_blocks_free + st.kv_blocks_cached, st.kv_blocks);
    }
    hr_engine_free(e);

    /* two requests with the same prompt at once: the second starts after the
     * first's prompt is in, finds it, and both decode the same tokens */
    e = make(m, true, 2, 256, 32);
    if (e) {
        hr_sampling_params sp = hr_sampling_params_greedy();
        sp.max_tokens = 6;
        int32_t id[2];
        CHECK_OK(hr_engine_add(e, a, N, &sp, &id[0], &err), &err);
        hr_event ev[4];
        int32_t n_ev, toks[2][6], got[2] = {0, 0};
        /* 90 prompt tokens in chunks of 32: after 3 steps a is prefilled */
        id[1] = -1;
        for (int s = 0; hr_engine_n_active(e) > 0; s++) {
            if (s == 3)
                CHECK_OK(hr_engine_add(e, a, N, &sp, &id[1], &err), &err);
            if (hr_engine_step(e, ev, 4, &n_ev, &err) != HR_OK)
                break;
            for (int32_t i = 0; i < n_ev; i++)
                if (ev[i].token >= 0) {
                    int k = ev[i].id == id[0] ? 0 : 1;
                    toks[k][got[k]++] = ev[i].token;
                }
        }
        CHECK(got[0] == 6 && got[1] == 6);
        CHECK(memcmp(toks[0], toks[1], sizeof toks[0]) == 0);
        hr_engine_stats st;
        hr_engine_get_stats(e, &st);
        CHECK_EQ_I64(st.prefix_hit_tokens, (N - 1) / 16 * 16);
    }
    hr_engine_free(e);
    free(with);
    free(without);
    hr_model_free(m);
    TEST_END();
}
