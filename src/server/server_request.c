/*
 * server_request.c — request bodies into plain structs, checked field by
 * field as the OpenAI API documents them; the error object; the replies
 * (chat.completion, text_completion, their stream chunks); the JSON writer.
 *
 * Order of checks: the body's size is the caller's (it caps the upload),
 * then the whole body must be UTF-8 (so every string taken from it is, and
 * cJSON refuses lone surrogates in \u escapes), then JSON with nothing after
 * the value, then an object, then each field: its type, then its range.
 * A null field counts as not given, as the OpenAI API reads it. Unknown
 * fields are ignored (vLLM's default; OpenAI refuses them, which breaks
 * clients that send extensions).
 *
 * What is refused rather than half-done, each with its own message:
 * n > 1 and best_of > 1, logprobs, nonzero presence/frequency penalties
 * (additive penalties per count; the engine's repetition penalty is CTRL's
 * multiplicative one, so mapping them would change what the numbers mean:
 * repetition_penalty is taken as the extension vLLM defines instead),
 * logit_bias, tools and tool calls, non-text content parts, echo, suffix,
 * response_format other than text, several prompts in one completion.
 */
#include "server/server_request.h"

#include "util/alloc.h"
#include "util/json.h"
#include "util/utf8.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* a string literal, without its NUL */
#define append_lit(b, lit) server_buf_append((b), (lit), sizeof(lit) - 1)

bool server_fail(server_error *e, int status, const char *param, const char *code,
                 const char *fmt, ...) {
    e->status = status;
    e->type = status >= 500 ? "server_error"
              : status == 401 ? "authentication_error"
              : status == 429 ? "rate_limit_error"
                              : "invalid_request_error";
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    snprintf(e->code, sizeof e->code, "%s", code ? code : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return false;
}

static bool nomem(server_error *e) {
    return server_fail(e, 500, NULL, NULL, "the server ran out of memory reading the request");
}

/* ---------------------------------------------------------------- the body */

/* s cut to fit cap (NUL included) at a character boundary, for messages
 * that quote the user's text. */
static const char *clip(const char *s, char *buf, size_t cap) {
    size_t n = strlen(s);
    if (n >= cap) {
        n = cap - 1;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
    }
    memcpy(buf, s, n);
    buf[n] = '\0';
    return buf;
}

/* The body as a JSON object, or NULL with e filled. */
static cJSON *parse_object(const char *body, size_t len, server_error *e) {
    if (len == 0) {
        server_fail(e, 400, NULL, NULL, "the request body is empty; a JSON object is expected");
        return NULL;
    }
    size_t bad = hr_utf8_valid_prefix(body, len);
    if (bad < len) {
        server_fail(e, 400, NULL, NULL, "the request body is not valid UTF-8 (byte %zu)", bad);
        return NULL;
    }
    const char *end = NULL;
    bool oom = false;
    cJSON *root = hr_json_parse(body, len, &end, &oom);
    if (!root) {
        if (oom)
            nomem(e);
        else
            server_fail(e, 400, NULL, NULL,
                        "the request body is not valid JSON (at byte %zu of %zu)",
                        end && end >= body ? (size_t)(end - body) : (size_t)0, len);
        return NULL;
    }
    size_t at = end ? (size_t)(end - body) : len;
    while (at < len && strchr(" \t\r\n", body[at]) && body[at] != '\0')
        at++;
    if (at < len) {
        cJSON_Delete(root);
        server_fail(e, 400, NULL, NULL,
                    "the request body has more after its JSON value (at byte %zu of %zu)", at,
                    len);
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        server_fail(e, 400, NULL, NULL, "the request body must be a JSON object");
        return NULL;
    }
    return root;
}

/* ---------------------------------------------------------------- fields */

static const char *type_name(const cJSON *v) {
    return cJSON_IsString(v)   ? "a string"
           : cJSON_IsNumber(v) ? "a number"
           : cJSON_IsBool(v)   ? "a boolean"
           : cJSON_IsArray(v)  ? "an array"
           : cJSON_IsObject(v) ? "an object"
                               : "null";
}

static bool wrong_type(server_error *e, const char *name, const char *want, const cJSON *v) {
    return server_fail(e, 400, name, "invalid_type",
                       "Invalid type for '%s': expected %s, but got %s.", name, want,
                       type_name(v));
}

/* The field, or NULL when absent or null. */
static const cJSON *field(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* A number in [lo, hi] (an integer when integer). *given says whether it
 * was there; *out is untouched when not. */
static bool get_number(const cJSON *o, const char *name, double lo, double hi, bool integer,
                       double *out, bool *given, server_error *e) {
    const cJSON *v = field(o, name);
    if (given)
        *given = v != NULL;
    if (!v)
        return true;
    if (!cJSON_IsNumber(v))
        return wrong_type(e, name, integer ? "an integer" : "a number", v);
    double x = v->valuedouble;
    if (!isfinite(x))
        return server_fail(e, 400, name, "invalid_value",
                           "Invalid value for '%s': the number is too large.", name);
    if (integer && x != floor(x))
        return server_fail(e, 400, name, "invalid_type",
                           "Invalid type for '%s': expected an integer, but got %g.", name, x);
    if (x < lo)
        return server_fail(e, 400, name, "invalid_value",
                           "Invalid value for '%s': %g is below the minimum of %g.", name, x, lo);
    if (x > hi)
        return server_fail(e, 400, name, "invalid_value",
                           "Invalid value for '%s': %g is above the maximum of %g.", name, x, hi);
    *out = x;
    return true;
}

static bool get_bool(const cJSON *o, const char *name, bool *out, server_error *e) {
    const cJSON *v = field(o, name);
    if (!v)
        return true;
    if (!cJSON_IsBool(v))
        return wrong_type(e, name, "a boolean", v);
    *out = cJSON_IsTrue(v);
    return true;
}

/* An owned copy of a string field (NULL when absent). */
static bool get_string(const cJSON *o, const char *name, char **out, server_error *e) {
    const cJSON *v = field(o, name);
    if (!v)
        return true;
    if (!cJSON_IsString(v))
        return wrong_type(e, name, "a string", v);
    if (!(*out = hr_strdup(v->valuestring)))
        return nomem(e);
    return true;
}

/* A field that must be absent, null, false, 0 or empty: what is not built. */
static bool refuse_set(const cJSON *o, const char *name, const char *what, server_error *e) {
    const cJSON *v = field(o, name);
    if (!v || cJSON_IsFalse(v) || (cJSON_IsNumber(v) && v->valuedouble == 0.0) ||
        ((cJSON_IsArray(v) || cJSON_IsObject(v)) && !v->child) ||
        (cJSON_IsString(v) && v->valuestring[0] == '\0'))
        return true;
    return server_fail(e, 400, name, "unsupported_parameter", "'%s': %s", name, what);
}

/* ---------------------------------------------------------------- chat */

/* content: a string, or a list of parts of which only text ones are taken
 * (joined by newlines, as vLLM joins them); null stays NULL. */
static bool get_content(const cJSON *m, int32_t i, char **out, server_error *e) {
    char name[64];
    snprintf(name, sizeof name, "messages[%d].content", i);
    const cJSON *v = field(m, "content");
    if (!v)
        return true;
    if (cJSON_IsString(v)) {
        if (!(*out = hr_strdup(v->valuestring)))
            return nomem(e);
        return true;
    }
    if (!cJSON_IsArray(v))
        return wrong_type(e, name, "a string or an array of content parts", v);
    server_buf b = {0};
    char t64[64];
    int32_t k = 0;
    for (const cJSON *part = v->child; part; part = part->next, k++) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(type)) {
            server_buf_free(&b);
            return server_fail(e, 400, name, "invalid_type",
                               "Invalid content part %d of '%s': expected an object with a "
                               "string 'type'.",
                               k, name);
        }
        if (strcmp(type->valuestring, "text") != 0) {
            server_buf_free(&b);
            return server_fail(e, 400, name, "unsupported_parameter",
                               "content part %d of '%s' has type '%s': only text parts are "
                               "supported",
                               k, name, clip(type->valuestring, t64, sizeof t64));
        }
        if (!cJSON_IsString(text)) {
            server_buf_free(&b);
            return server_fail(e, 400, name, "invalid_type",
                               "Invalid content part %d of '%s': 'text' must be a string.", k,
                               name);
        }
        if (k > 0)
            append_lit(&b, "\n");
        server_buf_append(&b, text->valuestring, strlen(text->valuestring));
    }
    if (k == 0)
        append_lit(&b, "");
    if (b.failed || !b.p) {
        server_buf_free(&b);
        return nomem(e);
    }
    *out = b.p;
    return true;
}

static bool parse_messages(const cJSON *root, server_request *r, server_error *e) {
    const cJSON *v = field(root, "messages");
    if (!v)
        return server_fail(e, 400, "messages", "missing_required_parameter",
                           "Missing required parameter: 'messages'.");
    if (!cJSON_IsArray(v))
        return wrong_type(e, "messages", "an array", v);
    int n = cJSON_GetArraySize(v);
    if (n == 0)
        return server_fail(e, 400, "messages", "empty_array",
                           "Invalid 'messages': empty array. Expected an array with minimum "
                           "length 1.");
    if (n > SERVER_MAX_MESSAGES)
        return server_fail(e, 400, "messages", "invalid_value",
                           "Invalid 'messages': %d messages; at most %d are accepted.", n,
                           SERVER_MAX_MESSAGES);
    if (!(r->msgs = hr_calloc((size_t)n, sizeof *r->msgs)))
        return nomem(e);
    int32_t i = 0;
    for (const cJSON *m = v->child; m; m = m->next, i++) {
        char name[64];
        snprintf(name, sizeof name, "messages[%d]", i);
        if (!cJSON_IsObject(m))
            return wrong_type(e, name, "an object", m);
        r->n_msgs = i + 1; /* from here the message's strings are r's to free */
        const cJSON *role = field(m, "role");
        snprintf(name, sizeof name, "messages[%d].role", i);
        if (!role)
            return server_fail(e, 400, name, "missing_required_parameter",
                               "Missing required parameter: '%s'.", name);
        if (!cJSON_IsString(role))
            return wrong_type(e, name, "a string", role);
        const char *rs = strcmp(role->valuestring, "developer") == 0 ? "system"
                                                                       : role->valuestring;
        if (rs[0] == '\0')
            return server_fail(e, 400, name, "invalid_value", "Invalid value for '%s': empty.",
                               name);
        if (!(r->msgs[i].role = hr_strdup(rs)))
            return nomem(e);
        snprintf(name, sizeof name, "messages[%d].tool_calls", i);
        if (!refuse_set(m, "tool_calls", "tool calls are not supported", e)) {
            snprintf(e->param, sizeof e->param, "%s", name);
            return false;
        }
        if (!get_content(m, i, &r->msgs[i].content, e))
            return false;
    }
    return true;
}

/* ---------------------------------------------------------------- completions */

/* A token id list: every element an integer in [0, INT32_MAX]. */
static bool parse_ids(const cJSON *a, server_request *r, server_error *e) {
    int n = cJSON_GetArraySize(a);
    if (n == 0)
        return server_fail(e, 400, "prompt", "invalid_value", "Invalid 'prompt': empty array.");
    if (!(r->prompt_ids = hr_calloc((size_t)n, sizeof(int32_t))))
        return nomem(e);
    int32_t i = 0;
    for (const cJSON *t = a->child; t; t = t->next, i++) {
        double x = t->valuedouble;
        if (!cJSON_IsNumber(t) || !isfinite(x) || x != floor(x) || x < 0 || x > INT32_MAX)
            return server_fail(e, 400, "prompt", "invalid_value",
                               "Invalid 'prompt': element %d of the token list is not a token "
                               "id (an integer >= 0).",
                               i);
        r->prompt_ids[i] = (int32_t)x;
    }
    r->n_prompt_ids = i;
    return true;
}

/* prompt: a string, a token list, or a list holding one of those. */
static bool parse_prompt(const cJSON *root, server_request *r, server_error *e) {
    const cJSON *v = field(root, "prompt");
    if (!v)
        return server_fail(e, 400, "prompt", "missing_required_parameter",
                           "Missing required parameter: 'prompt'.");
    if (cJSON_IsArray(v) && v->child && !v->child->next &&
        (cJSON_IsString(v->child) || cJSON_IsArray(v->child)))
        v = v->child; /* ["text"] or [[1, 2, 3]]: one prompt */
    if (cJSON_IsString(v)) {
        r->prompt_len = strlen(v->valuestring);
        if (!(r->prompt = hr_strdup(v->valuestring)))
            return nomem(e);
        return true;
    }
    if (!cJSON_IsArray(v))
        return wrong_type(e, "prompt", "a string or an array of token ids", v);
    if (v->child && (cJSON_IsString(v->child) || cJSON_IsArray(v->child)))
        return server_fail(e, 400, "prompt", "unsupported_parameter",
                           "several prompts in one request are not supported; send one "
                           "request each");
    return parse_ids(v, r, e);
}

/* ---------------------------------------------------------------- both */

static bool parse_stop(const cJSON *root, server_request *r, server_error *e) {
    const cJSON *v = field(root, "stop");
    if (!v)
        return true;
    const cJSON *one = cJSON_IsString(v) ? v : NULL;
    if (!one && !cJSON_IsArray(v))
        return wrong_type(e, "stop", "a string or an array of strings", v);
    if (!one && cJSON_GetArraySize(v) > SERVER_MAX_STOP)
        return server_fail(e, 400, "stop", "invalid_value",
                           "Invalid 'stop': %d strings; at most %d are accepted.",
                           cJSON_GetArraySize(v), SERVER_MAX_STOP);
    for (const cJSON *s = one ? one : v->child; s; s = one ? NULL : s->next) {
        if (!cJSON_IsString(s))
            return wrong_type(e, "stop", "a string or an array of strings", s);
        size_t n = strlen(s->valuestring);
        if (n == 0 || n > SERVER_MAX_STOP_BYTES)
            return server_fail(e, 400, "stop", "invalid_value",
                               "Invalid 'stop': a stop string of %zu bytes (1 to %d).", n,
                               SERVER_MAX_STOP_BYTES);
        if (!(r->stop[r->n_stop] = hr_strdup(s->valuestring)))
            return nomem(e);
        r->n_stop++;
    }
    return true;
}

static bool parse_sampling(const cJSON *root, server_request *r, server_error *e) {
    double x = 0.0;
    bool given = false;
    /* chat's newer name wins over the older one */
    const char *mt = field(root, "max_completion_tokens") ? "max_completion_tokens"
                                                         : "max_tokens";
    if (!get_number(root, mt, 1, 9e15, true, &x, &given, e))
        return false;
    if (given)
        r->max_tokens = (int64_t)x;
    if (!get_number(root, "temperature", 0, 2, false, &r->temperature, NULL, e) ||
        !get_number(root, "top_p", 0, 1, false, &r->top_p, NULL, e) ||
        !get_number(root, "min_p", 0, 1, false, &r->min_p, NULL, e) ||
        !get_number(root, "repetition_penalty", 1e-3, 100, false, &r->repetition_penalty,
                    NULL, e))
        return false;
    if (!get_number(root, "top_k", -1, 1 << 30, true, &x, &given, e))
        return false;
    if (given)
        r->top_k = x < 0 ? 0 : (int32_t)x;
    /* any 64-bit integer, signed or not, as the bits of the seed */
    if (!get_number(root, "seed", -9223372036854775808.0, 18446744073709549568.0, true, &x,
                    &r->seed_given, e))
        return false;
    if (r->seed_given)
        r->seed = x < 0 ? (uint64_t)(int64_t)x : (uint64_t)x;
    if (!get_number(root, "n", 1, 1 << 30, true, &x, &given, e))
        return false;
    if (given && x > 1)
        return server_fail(e, 400, "n", "unsupported_parameter",
                           "'n': %g choices asked for, but only n = 1 is supported; send "
                           "several requests",
                           x);
    if (!get_number(root, "best_of", 1, 1 << 30, true, &x, &given, e))
        return false;
    if (given && x > 1)
        return server_fail(e, 400, "best_of", "unsupported_parameter",
                           "'best_of': only 1 is supported");
    static const char *const penalties[] = {"presence_penalty", "frequency_penalty"};
    for (int i = 0; i < 2; i++) {
        if (!get_number(root, penalties[i], -2, 2, false, &x, &given, e))
            return false;
        if (given && x != 0.0)
            return server_fail(e, 400, penalties[i], "unsupported_parameter",
                               "'%s' is not supported (only 0); 'repetition_penalty' (a "
                               "multiplicative penalty, 1 = off) is",
                               penalties[i]);
    }
    if (!parse_stop(root, r, e) || !get_bool(root, "stream", &r->stream, e) ||
        !get_bool(root, "ignore_eos", &r->ignore_eos, e))
        return false;
    const cJSON *so = field(root, "stream_options");
    if (so && !cJSON_IsObject(so))
        return wrong_type(e, "stream_options", "an object", so);
    if (so && !get_bool(so, "include_usage", &r->include_usage, e)) {
        snprintf(e->param, sizeof e->param, "stream_options.include_usage");
        return false;
    }
    if (!refuse_set(root, "logprobs", "log probabilities are not supported", e) ||
        !refuse_set(root, "top_logprobs", "log probabilities are not supported", e) ||
        !refuse_set(root, "logit_bias", "logit_bias is not supported", e) ||
        !refuse_set(root, "tools", "tools are not supported", e) ||
        !refuse_set(root, "functions", "functions are not supported", e) ||
        !refuse_set(root, "echo", "echo is not supported", e) ||
        !refuse_set(root, "suffix", "suffix is not supported", e))
        return false;
    const cJSON *rf = field(root, "response_format");
    char t64[64];
    if (rf) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(rf, "type");
        if (!cJSON_IsObject(rf) || !cJSON_IsString(t))
            return server_fail(e, 400, "response_format", "invalid_type",
                               "Invalid 'response_format': expected an object with a string "
                               "'type'.");
        if (strcmp(t->valuestring, "text") != 0)
            return server_fail(e, 400, "response_format", "unsupported_parameter",
                               "'response_format': type '%s' is not supported (only text)",
                               clip(t->valuestring, t64, sizeof t64));
    }
    return true;
}

bool server_request_parse(const char *body, size_t len, server_kind kind, server_request *out,
                          server_error *e) {
    server_request r = {.kind = kind,
                        .max_tokens = -1,
                        .temperature = 1.0,
                        .top_p = 1.0,
                        .repetition_penalty = 1.0};
    memset(out, 0, sizeof *out);
    cJSON *root = parse_object(body, len, e);
    if (!root)
        return false;
    bool ok = get_string(root, "model", &r.model, e) &&
              (kind == SERVER_CHAT ? parse_messages(root, &r, e) : parse_prompt(root, &r, e)) &&
              parse_sampling(root, &r, e);
    cJSON_Delete(root);
    if (!ok) {
        server_request_free(&r);
        return false;
    }
    *out = r;
    return true;
}

void server_request_free(server_request *r) {
    if (!r)
        return;
    hr_free(r->model);
    for (int32_t i = 0; i < r->n_msgs; i++) {
        hr_free(r->msgs[i].role);
        hr_free(r->msgs[i].content);
    }
    hr_free(r->msgs);
    hr_free(r->prompt);
    hr_free(r->prompt_ids);
    for (int32_t i = 0; i < r->n_stop; i++)
        hr_free(r->stop[i]);
    memset(r, 0, sizeof *r);
}

/* ---------------------------------------------------------------- tokenize */

bool server_tokenize_parse(const char *body, size_t len, server_tokenize_request *out,
                           server_error *e) {
    memset(out, 0, sizeof *out);
    cJSON *root = parse_object(body, len, e);
    if (!root)
        return false;
    server_tokenize_request r = {0};
    bool ok = true;
    const cJSON *v = field(root, "content");
    if (!v)
        ok = server_fail(e, 400, "content", "missing_required_parameter",
                         "Missing required parameter: 'content'.");
    else if (!cJSON_IsString(v))
        ok = wrong_type(e, "content", "a string", v);
    else if (!(r.content = hr_strdup(v->valuestring)))
        ok = nomem(e);
    else
        r.len = strlen(r.content);
    ok = ok && get_bool(root, "add_special", &r.add_special, e);
    cJSON_Delete(root);
    if (!ok) {
        hr_free(r.content);
        return false;
    }
    *out = r;
    return true;
}

bool server_detokenize_parse(const char *body, size_t len, server_detokenize_request *out,
                             server_error *e) {
    memset(out, 0, sizeof *out);
    cJSON *root = parse_object(body, len, e);
    if (!root)
        return false;
    const cJSON *v = field(root, "tokens");
    server_request r = {0}; /* parse_ids fills its prompt_ids */
    bool ok = true;
    if (!v)
        ok = server_fail(e, 400, "tokens", "missing_required_parameter",
                         "Missing required parameter: 'tokens'.");
    else if (!cJSON_IsArray(v))
        ok = wrong_type(e, "tokens", "an array of token ids", v);
    else if (v->child)
        ok = parse_ids(v, &r, e);
    if (!ok)
        snprintf(e->param, sizeof e->param, "tokens");
    cJSON_Delete(root);
    if (!ok) {
        hr_free(r.prompt_ids);
        return false;
    }
    out->tokens = r.prompt_ids;
    out->n_tokens = r.n_prompt_ids;
    return true;
}

/* ---------------------------------------------------------------- writing */

void server_buf_free(server_buf *b) {
    hr_free(b->p);
    memset(b, 0, sizeof *b);
}

/* Room for n more bytes and the NUL. */
static bool reserve(server_buf *b, size_t n) {
    if (b->failed)
        return false;
    if (b->len + n + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1)
        cap *= 2;
    char *p = hr_realloc(b->p, cap);
    if (!p) {
        b->failed = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void server_buf_append(server_buf *b, const char *s, size_t n) {
    if (!reserve(b, n))
        return;
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void server_buf_printf(server_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void server_buf_json_string(server_buf *b, const char *s, size_t n) {
    /* at most 6 bytes per input byte (\u00XX) and the quotes */
    if (!reserve(b, 6 * n + 2))
        return;
    char *o = b->p + b->len;
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *o++ = (char)c;
            continue;
        }
        *o++ = '\\';
        switch (c) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '\n': *o++ = 'n'; break;
        case '\r': *o++ = 'r'; break;
        case '\t': *o++ = 't'; break;
        default: o += sprintf(o, "u%04x", c); break;
        }
    }
    *o++ = '"';
    *o = '\0';
    b->len = (size_t)(o - b->p);
}

static void string_or_null(server_buf *b, const char *s) {
    if (s && s[0])
        server_buf_json_string(b, s, strlen(s));
    else
        append_lit(b, "null");
}

void server_error_json(const server_error *e, server_buf *b) {
    append_lit(b, "{\"error\": {\"message\": ");
    /* a message cut at its buffer's end may end inside a character */
    server_buf_json_string(b, e->message, hr_utf8_valid_prefix(e->message, strlen(e->message)));
    server_buf_printf(b, ", \"type\": \"%s\", \"param\": ", e->type ? e->type : "server_error");
    string_or_null(b, e->param);
    append_lit(b, ", \"code\": ");
    string_or_null(b, e->code);
    append_lit(b, "}}");
}

/* ---------------------------------------------------------------- replies */

static void usage_json(server_buf *b, int32_t n_prompt, int32_t n_gen) {
    server_buf_printf(b,
                      "\"usage\": {\"prompt_tokens\": %d, \"completion_tokens\": %d, "
                      "\"total_tokens\": %d}",
                      n_prompt, n_gen, n_prompt + n_gen);
}

static void head_json(server_buf *b, const server_reply_head *rh, bool chunk) {
    const char *object = rh->kind == SERVER_CHAT ? (chunk ? "chat.completion.chunk"
                                                          : "chat.completion")
                                                 : "text_completion";
    server_buf_printf(b, "{\"id\": \"%s\", \"object\": \"%s\", \"created\": %ld, \"model\": ",
                      rh->id, object, rh->created);
    server_buf_json_string(b, rh->model, strlen(rh->model));
}

void server_reply_chunk(server_buf *b, const server_reply_head *rh, bool role, const char *text,
                        size_t len, const char *finish) {
    append_lit(b, "data: ");
    head_json(b, rh, true);
    append_lit(b, ", \"choices\": [{\"index\": 0, ");
    if (rh->kind == SERVER_CHAT) {
        append_lit(b, "\"delta\": {");
        if (role)
            append_lit(b, "\"role\": \"assistant\", \"content\": \"\"");
        else if (text) {
            append_lit(b, "\"content\": ");
            server_buf_json_string(b, text, len);
        }
        append_lit(b, "}");
    } else {
        append_lit(b, "\"text\": ");
        server_buf_json_string(b, text ? text : "", text ? len : 0);
    }
    server_buf_printf(b, ", \"logprobs\": null, \"finish_reason\": %s%s%s}]}\n\n",
                      finish ? "\"" : "", finish ? finish : "null", finish ? "\"" : "");
}

void server_reply_usage_chunk(server_buf *b, const server_reply_head *rh, int32_t n_prompt,
                              int32_t n_gen) {
    append_lit(b, "data: ");
    head_json(b, rh, true);
    append_lit(b, ", \"choices\": [], ");
    usage_json(b, n_prompt, n_gen);
    append_lit(b, "}\n\n");
}

void server_reply(server_buf *b, const server_reply_head *rh, const char *text, size_t len,
                  const char *finish, int32_t n_prompt, int32_t n_gen) {
    head_json(b, rh, false);
    append_lit(b, ", \"choices\": [{\"index\": 0, ");
    if (rh->kind == SERVER_CHAT) {
        append_lit(b, "\"message\": {\"role\": \"assistant\", \"content\": ");
        server_buf_json_string(b, text, len);
        append_lit(b, "}");
    } else {
        append_lit(b, "\"text\": ");
        server_buf_json_string(b, text, len);
    }
    server_buf_printf(b, ", \"logprobs\": null, \"finish_reason\": \"%s\"}], ", finish);
    usage_json(b, n_prompt, n_gen);
    append_lit(b, "}");
}
