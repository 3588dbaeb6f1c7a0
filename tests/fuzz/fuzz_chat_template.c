/*
 * fuzz_chat_template.c — libFuzzer target: arbitrary bytes as a chat
 * template and a conversation, through chat_template_parse and
 * chat_template_render (src/chat/).
 *
 * Input: the template, then optionally a NUL and message contents separated
 * by NULs (roles cycle system, user, assistant; none given: three fixed
 * messages). The first template byte's low bit sets add_generation_prompt.
 * Checked: each call returns HR_OK or an error with a message, never both
 * an error and output; a rendered text is well-formed UTF-8 (every input is
 * checked or refused, and no operation splits a character) and its length
 * is what out_len says.
 */
#include "chat/template.h"
#include "fuzz_util.h"
#include "util/alloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_MSGS 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size + 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    /* split at NULs: template, then contents */
    static const char *const roles[] = {"system", "user", "assistant"};
    chat_message msgs[MAX_MSGS];
    int n = 0;
    size_t tl = strlen(buf);
    for (size_t i = tl + 1; i < size && n < MAX_MSGS; i += strlen(buf + i) + 1) {
        msgs[n] = (chat_message){roles[n % 3], buf + i};
        n++;
    }
    if (n == 0) {
        msgs[0] = (chat_message){"system", "Be brief."};
        msgs[1] = (chat_message){"user", "Hi \xc3\xa9"};
        msgs[2] = (chat_message){"assistant", " ok "};
        n = 3;
    }
    chat_render_opts o = {.add_generation_prompt = size && (data[0] & 1),
                          .bos_token = "<s>",
                          .eos_token = "</s>",
                          .now_unix = 1700000000};
    hr_error err = {0};
    chat_template *t = NULL;
    hr_status st = chat_template_parse(buf, &t, &err);
    if (st != HR_OK) {
        if (t || !err.msg[0])
            __builtin_trap();
    } else {
        char *out = NULL;
        size_t out_len = 0;
        st = chat_template_render(t, msgs, n, &o, &out, &out_len, &err);
        if (st == HR_OK) {
            if (!out || out[out_len] != '\0' || !fuzz_valid_utf8(out, out_len))
                __builtin_trap();
        } else if (out || !err.msg[0]) {
            __builtin_trap();
        }
        hr_free(out);
        chat_template_free(t);
    }
    free(buf);
    return 0;
}
