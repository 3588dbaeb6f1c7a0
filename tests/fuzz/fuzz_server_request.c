/*
 * fuzz_server_request.c — libFuzzer target: arbitrary bytes as the body of
 * each request `headroom serve` parses (chat completions, completions,
 * /tokenize, /detokenize), through server_request.c.
 *
 * Checked: a parse succeeds with values in their documented ranges and
 * well-formed UTF-8 strings, or fails with a 4xx/5xx status and a message,
 * never both; the error object it writes is JSON that cJSON reads back
 * with the same message; and the JSON string writer, and a whole reply,
 * round-trip the body when it is UTF-8 without NULs.
 */
#include "fuzz_util.h"
#include "server/server_request.h"
#include "util/alloc.h"
#include "util/json.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_error(const server_error *e) {
    if (e->status < 400 || e->status > 599 || !e->message[0] || !e->type)
        __builtin_trap();
    server_buf b = {0};
    server_error_json(e, &b);
    if (b.failed) {
        server_buf_free(&b);
        return;
    }
    bool oom = false;
    cJSON *j = hr_json_parse(b.p, b.len, NULL, &oom);
    if (!j && !oom)
        __builtin_trap(); /* the writer made invalid JSON */
    if (j) {
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(j, "error"), "message");
        if (!cJSON_IsString(msg) || !fuzz_valid_utf8(msg->valuestring, strlen(msg->valuestring)))
            __builtin_trap();
        cJSON_Delete(j);
    }
    server_buf_free(&b);
}

static void check_string(const char *s) {
    if (s && !fuzz_valid_utf8(s, strlen(s)))
        __builtin_trap();
}

static void check_request(const server_request *r) {
    if (r->max_tokens < -1 || r->max_tokens == 0 ||
        !(r->temperature >= 0 && r->temperature <= 2) || !(r->top_p >= 0 && r->top_p <= 1) ||
        !(r->min_p >= 0 && r->min_p <= 1) || r->top_k < 0 || !(r->repetition_penalty > 0) ||
        r->n_stop < 0 || r->n_stop > SERVER_MAX_STOP)
        __builtin_trap();
    for (int32_t i = 0; i < r->n_stop; i++) {
        size_t n = strlen(r->stop[i]);
        if (n == 0 || n > SERVER_MAX_STOP_BYTES)
            __builtin_trap();
        check_string(r->stop[i]);
    }
    check_string(r->model);
    if (r->kind == SERVER_CHAT) {
        if (r->n_msgs < 1 || r->n_msgs > SERVER_MAX_MESSAGES)
            __builtin_trap();
        for (int32_t i = 0; i < r->n_msgs; i++) {
            if (!r->msgs[i].role || !r->msgs[i].role[0])
                __builtin_trap();
            check_string(r->msgs[i].role);
            check_string(r->msgs[i].content);
        }
    } else {
        if (!r->prompt == !r->prompt_ids)
            __builtin_trap(); /* exactly one of text and ids */
        if (r->prompt && (strlen(r->prompt) != r->prompt_len))
            __builtin_trap();
        check_string(r->prompt);
        for (int32_t i = 0; i < r->n_prompt_ids; i++)
            if (r->prompt_ids[i] < 0)
                __builtin_trap();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *body = (const char *)data;
    server_error e;
    for (int k = 0; k < 2; k++) {
        server_request r;
        memset(&e, 0, sizeof e);
        if (server_request_parse(body, size, k ? SERVER_COMPLETION : SERVER_CHAT, &r, &e)) {
            check_request(&r);
            server_request_free(&r);
        } else {
            check_error(&e);
        }
    }
    server_tokenize_request t;
    if (server_tokenize_parse(body, size, &t, &e)) {
        if (!t.content || strlen(t.content) != t.len)
            __builtin_trap();
        check_string(t.content);
        hr_free(t.content);
    } else {
        check_error(&e);
    }
    server_detokenize_request d;
    if (server_detokenize_parse(body, size, &d, &e)) {
        for (int32_t i = 0; i < d.n_tokens; i++)
            if (d.tokens[i] < 0)
                __builtin_trap();
        hr_free(d.tokens);
    } else {
        check_error(&e);
    }
    /* the string writer: its output reads back as the input */
    if (fuzz_valid_utf8(body, size) && !memchr(body, '\0', size)) {
        server_buf b = {0};
        server_buf_json_string(&b, body, size);
        bool oom = false;
        cJSON *j = b.failed ? NULL : hr_json_parse(b.p, b.len, NULL, &oom);
        if (!b.failed && !oom &&
            (!cJSON_IsString(j) || strlen(j->valuestring) != size ||
             memcmp(j->valuestring, body, size) != 0))
            __builtin_trap();
        cJSON_Delete(j);
        server_buf_free(&b);
        /* and a whole reply carrying it reads back as JSON with it inside */
        server_reply_head rh = {.kind = size & 1 ? SERVER_CHAT : SERVER_COMPLETION,
                                .id = "cmpl-0", .created = 1, .model = "m\"odel"};
        server_reply(&b, &rh, body, size, "stop", 3, 4);
        j = b.failed ? NULL : hr_json_parse(b.p, b.len, NULL, &oom);
        if (j) {
            const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
            const cJSON *t = rh.kind == SERVER_CHAT
                                 ? cJSON_GetObjectItemCaseSensitive(
                                       cJSON_GetObjectItemCaseSensitive(c0, "message"), "content")
                                 : cJSON_GetObjectItemCaseSensitive(c0, "text");
            if (!cJSON_IsString(t) || strlen(t->valuestring) != size ||
                memcmp(t->valuestring, body, size) != 0)
                __builtin_trap();
        } else if (!b.failed && !oom) {
            __builtin_trap();
        }
        cJSON_Delete(j);
        server_buf_free(&b);
    }
    return 0;
}
