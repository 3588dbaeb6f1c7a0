/*
 * template.c — the public face of src/chat/: checks the untrusted inputs
 * (size, UTF-8), normalizes the source as jinja2 does (every "\r\n" and "\r"
 * becomes "\n", then one trailing newline is dropped: keep_trailing_newline
 * is False in transformers' environment), and wires lexer, parser and
 * evaluator together with the variables apply_chat_template passes.
 */
#include "chat/chat_internal.h"

#include "util/alloc.h"

#include <string.h>

/* line:col (characters) of byte offset off in s. */
static void line_col(const char *s, size_t off, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < off; i++) {
        if (s[i] == '\n') {
            ++*line;
            *col = 1;
        } else if (((unsigned char)s[i] & 0xC0) != 0x80) {
            ++*col;
        }
    }
}

hr_status chat_template_parse(const char *source, chat_template **out, hr_error *err) {
    if (!source || !out)
        return hr_err_set(err, HR_ERR_INVALID, "chat_template_parse: NULL argument");
    size_t len = strnlen(source, CHAT_MAX_SOURCE_BYTES + 1);
    if (len > CHAT_MAX_SOURCE_BYTES)
        return hr_err_set(err, HR_ERR_INVALID, "chat template: longer than the %zu KiB allowed",
                          CHAT_MAX_SOURCE_BYTES >> 10);
    size_t bad = chat_utf8_check(source, len);
    if (bad < len) {
        int line, col;
        line_col(source, bad, &line, &col);
        return hr_err_set(err, HR_ERR_FORMAT, "chat template %d:%d: not valid UTF-8 (byte 0x%02X)",
                          line, col, (unsigned char)source[bad]);
    }
    chat_template *t = hr_calloc(1, sizeof *t);
    if (!t)
        return hr_err_set(err, HR_ERR_NOMEM, "chat template: out of memory");
    chat_arena_init(&t->arena, CHAT_MAX_MEMORY_BYTES);
    hr_status st = HR_OK;
    char *src = chat_arena_alloc(&t->arena, len + 1);
    if (!src) {
        st = hr_err_set(err, HR_ERR_NOMEM, "chat template: out of memory");
        goto fail;
    }
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (source[i] == '\r') {
            src[n++] = '\n';
            if (i + 1 < len && source[i + 1] == '\n')
                i++;
        } else {
            src[n++] = source[i];
        }
    }
    if (n && src[n - 1] == '\n')
        n--;
    src[n] = '\0';
    chat_token *toks;
    size_t n_toks;
    if ((st = chat_lex(src, n, &t->arena, &toks, &n_toks, err)) != HR_OK ||
        (st = chat_parse(toks, n_toks, &t->arena, &t->root, err)) != HR_OK)
        goto fail;
    *out = t;
    return HR_OK;
fail:
    chat_template_free(t);
    return st;
}

void chat_template_free(chat_template *t) {
    if (!t)
        return;
    chat_arena_free(&t->arena);
    hr_free(t);
}

/* ---------------------------------------------------------------- variables */

typedef struct {
    const chat_message *msgs;
    int n;
} msg_list;

static bool make_messages(chat_ctx *c, const void *arg, cv *out) {
    const msg_list *m = arg;
    chat_arena *a = chat_ctx_arena(c);
    cv_list *l = cv_list_new(a, (size_t)m->n);
    if (!l)
        return chat_fail_mem(c, NULL);
    for (int k = 0; k < m->n; k++) {
        cv_dict *d = cv_dict_new(a, 2);
        if (!d)
            return chat_fail_mem(c, NULL);
        /* a dict built as {"role": ..., "content": ...}: that key order */
        if (m->msgs[k].role)
            d->keys[d->n] = cv_str("role", 4),
            d->vals[d->n++] = cv_str(m->msgs[k].role, strlen(m->msgs[k].role));
        if (m->msgs[k].content)
            d->keys[d->n] = cv_str("content", 7),
            d->vals[d->n++] = cv_str(m->msgs[k].content, strlen(m->msgs[k].content));
        l->v[l->n++] = cv_of_dict(d);
    }
    *out = cv_of_list(l, false);
    return true;
}

static bool make_bool(chat_ctx *c, const void *arg, cv *out) {
    (void)c;
    *out = cv_bool(*(const bool *)arg);
    return true;
}

static bool make_str(chat_ctx *c, const void *arg, cv *out) {
    (void)c;
    *out = cv_str(arg, strlen(arg));
    return true;
}

static bool make_none(chat_ctx *c, const void *arg, cv *out) {
    (void)c;
    (void)arg;
    *out = cv_none();
    return true;
}

static hr_status check_text(const char *s, const char *what, hr_error *err) {
    size_t n = strlen(s), bad = chat_utf8_check(s, n);
    if (bad < n)
        return hr_err_set(err, HR_ERR_INVALID, "chat: %s is not valid UTF-8 (byte %zu)", what, bad);
    return HR_OK;
}

hr_status chat_template_render(const chat_template *t, const chat_message *msgs, int n_msgs,
                               const chat_render_opts *opts, char **out, size_t *out_len,
                               hr_error *err) {
    if (!t || !out || (n_msgs > 0 && !msgs))
        return hr_err_set(err, HR_ERR_INVALID, "chat_template_render: NULL argument");
    if (n_msgs <= 0)
        return hr_err_set(
            err, HR_ERR_INVALID,
            "chat: cannot render an empty conversation (transformers refuses it too)");
    if (n_msgs > CHAT_MAX_MESSAGES)
        return hr_err_set(err, HR_ERR_INVALID, "chat: more than %d messages", CHAT_MAX_MESSAGES);
    chat_render_opts o = {0};
    if (opts)
        o = *opts;
    for (int k = 0; k < n_msgs; k++) {
        const char *fields[2] = {msgs[k].role, msgs[k].content};
        for (int f = 0; f < 2; f++) {
            if (!fields[f])
                continue;
            size_t n = strlen(fields[f]), bad = chat_utf8_check(fields[f], n);
            if (bad < n)
                return hr_err_set(err, HR_ERR_INVALID,
                                  "chat: message %d's %s is not valid UTF-8 (byte %zu)", k,
                                  f ? "content" : "role", bad);
        }
    }
    hr_status st;
    if ((o.bos_token && (st = check_text(o.bos_token, "bos_token", err)) != HR_OK) ||
        (o.eos_token && (st = check_text(o.eos_token, "eos_token", err)) != HR_OK))
        return st;

    msg_list ml = {msgs, n_msgs};
    chat_eval_var vars[6];
    int nv = 0;
    vars[nv++] = (chat_eval_var){"messages", make_messages, &ml};
    vars[nv++] = (chat_eval_var){"add_generation_prompt", make_bool, &o.add_generation_prompt};
    vars[nv++] = (chat_eval_var){"tools", make_none, NULL};
    vars[nv++] = (chat_eval_var){"documents", make_none, NULL};
    if (o.bos_token)
        vars[nv++] = (chat_eval_var){"bos_token", make_str, o.bos_token};
    if (o.eos_token)
        vars[nv++] = (chat_eval_var){"eos_token", make_str, o.eos_token};
    return chat_eval_template(t->root, vars, nv, o.now_unix, out, out_len, err);
}
