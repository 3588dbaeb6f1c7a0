/*
 * fuzz_prompt.c — libFuzzer target: arbitrary bytes as `headroom run`'s
 * prompt, through hr_generate on the embedded model (CPU): tokenizing any
 * bytes (invalid UTF-8 included), the context limit, a short greedy decode
 * and the streamed text.
 *
 * The first input byte picks the options: bit 0 truncates an over-long
 * prompt instead of refusing it, bits 1-2 the new tokens (0-3). Checked:
 * hr_generate returns HR_OK or, for a prompt longer than the context when
 * not truncating, HR_ERR_NO_FIT with a message; the streamed pieces are
 * well-formed UTF-8; the engine is empty afterwards (it serves the next).
 * The context is small (64) so long inputs reach the limit quickly.
 */
#include "fuzz_util.h"
#include "headroom.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static hr_model *g_model;
static hr_engine *g_engine[2]; /* [truncate] */

static void load_once(void) {
    if (g_model)
        return;
    char path[4096];
    snprintf(path, sizeof path, "%s/models/tiny-shakespeare", fuzz_root_dir());
    hr_error err;
    if (hr_model_load(path, NULL, &g_model, &err) != HR_OK) {
        fprintf(stderr, "fuzz_prompt: %s\n", err.msg);
        abort();
    }
    for (int t = 0; t < 2; t++) {
        hr_engine_params ep = hr_engine_params_default();
        ep.device = HR_DEVICE_CPU;
        ep.n_threads = 1;
        ep.n_ctx = 64;
        ep.truncate_prompt = t == 1;
        if (hr_engine_create(g_model, &ep, &g_engine[t], &err) != HR_OK) {
            fprintf(stderr, "fuzz_prompt: %s\n", err.msg);
            abort();
        }
    }
    hr_log_set(NULL, NULL); /* the truncation warning on every long input */
}

static bool check_piece(const char *text, size_t len, int32_t token, void *user) {
    (void)token;
    (void)user;
    if (!fuzz_valid_utf8(text, len)) {
        fprintf(stderr, "fuzz_prompt: a streamed piece is not UTF-8\n");
        abort();
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    load_once();
    if (size < 1)
        return 0;
    const int truncate = data[0] & 1;
    hr_engine *e = g_engine[truncate];
    hr_sampling_params sp = hr_sampling_params_greedy();
    sp.max_tokens = (data[0] >> 1) & 3;
    hr_generation_stats st;
    hr_error err = {0};
    hr_status s =
        hr_generate(e, (const char *)data + 1, size - 1, &sp, check_piece, NULL, &st, &err);
    bool expected = s == HR_OK || (s == HR_ERR_NO_FIT && !truncate && err.msg[0]) ||
                    (s == HR_ERR_INVALID && size == 1 && err.msg[0]); /* an empty prompt
                                                                        without BOS */
    if (!expected) {
        fprintf(stderr, "fuzz_prompt: %s: %s\n", hr_status_name(s), err.msg);
        abort();
    }
    if (s == HR_OK && (st.n_gen > sp.max_tokens || st.n_prompt > 64)) {
        fprintf(stderr, "fuzz_prompt: %d tokens generated (max %d), prompt %d\n", st.n_gen,
                sp.max_tokens, st.n_prompt);
        abort();
    }
    if (hr_engine_n_active(e) != 0) {
        fprintf(stderr, "fuzz_prompt: the engine still holds requests\n");
        abort();
    }
    return 0;
}
