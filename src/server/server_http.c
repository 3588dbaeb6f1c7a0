/*
 * server_http.c — `headroom serve`'s HTTP side on libmicrohttpd: routes,
 * authentication, prompts (the chat template, the tokenizer), the OpenAI
 * response objects, server-sent events, /metrics.
 *
 * Threading: one thread per connection (MHD_USE_THREAD_PER_CONNECTION).
 * A response that streams is produced by a content-reader callback, which
 * must either have bytes to give or block: returning 0 in MHD's internal
 * polling modes busy-loops, and the alternative, suspending and resuming
 * connections from the engine thread, spreads one request's flow over
 * three threads. With a thread per connection, the callback and the
 * non-streaming handler simply wait on their job's condition variable, and
 * a waiting client costs one mostly idle thread. Connections are few
 * hundred at most here (each request is seconds of generation, and the
 * engine, not the HTTP side, is the bottleneck), where threads are cheap.
 *
 * A client that goes away: while a handler waits (in 200 ms slices) it
 * peeks at its socket; end-of-file or an error cancels the job. A write
 * that fails makes MHD drop the response, whose free callback cancels the
 * job too. Either way the engine thread cancels the request at its next
 * turn and its KV blocks are freed at the step after.
 *
 * The listening socket is made here (not by MHD) so that a port in use or
 * a bad address is reported with its errno, and --port 0 can say which port
 * it got.
 */
#include "util/clock.h"
#include "server/server_http.h"

#include "chat/template.h"
#include "server/server_engine.h"
#include "util/alloc.h"
#include "util/error.h"

#include <microhttpd.h>

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { WAIT_SLICE_MS = 200 }; /* how often a waiting handler looks at its client */

/* The status codes counted for /metrics, in the order they are printed. */
static const int counted_codes[] = {200, 400, 401, 404, 405, 413, 429, 500, 503};
#define N_CODES (sizeof counted_codes / sizeof counted_codes[0])

struct server_http {
    const hr_model *model;
    const hr_tokenizer *tok;
    server_engine *eng;
    chat_template *tmpl;     /* NULL: the model has none, or it did not parse */
    char tmpl_error[600];    /* why not, for the 400 */
    char *bos_text, *eos_text;
    char *host, *api_key, *model_id, *model_path;
    int port;
    int32_t n_ctx, n_vocab;
    size_t max_body;
    unsigned idle_timeout_s; /* 0: connections may idle for ever */
    long created;            /* when the server started (unix seconds) */
    int listen_fd;
    struct MHD_Daemon *d;
    atomic_bool stopping;
    atomic_int in_flight;    /* requests begun and not yet answered to the end */
    atomic_uint_fast64_t seed_state, next_id;
    atomic_uint_fast64_t http_codes[N_CODES + 1]; /* the last: any other code */
};

typedef enum {
    ROUTE_NONE, ROUTE_HEALTH, ROUTE_METRICS, ROUTE_MODELS, ROUTE_MODEL, ROUTE_CHAT,
    ROUTE_COMPLETIONS, ROUTE_TOKENIZE, ROUTE_DETOKENIZE,
} route_id;

/* One request's state across MHD's calls of the handler. */
typedef struct {
    route_id route;
    server_buf body;
    bool too_big;     /* the body is larger than max_body */
    bool answered;    /* refused from its headers: the body is not read */
    double t_arrival; /* ms, engine clock */
} conn_ctx;


/* splitmix64: request seeds and ids, distinct per request without a lock */
static uint64_t next_random(server_http *h) {
    uint64_t z = atomic_fetch_add(&h->seed_state, 0x9E3779B97F4A7C15ull) + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* a string literal, without its NUL */
#define append_lit(b, lit) server_buf_append((b), (lit), sizeof(lit) - 1)

/* ---------------------------------------------------------------- responses */

static void count_code(server_http *h, unsigned code) {
    size_t k = 0;
    while (k < N_CODES && counted_codes[k] != (int)code)
        k++;
    atomic_fetch_add(&h->http_codes[k], 1);
}

/* A connection idle for idle_timeout_s is closed (MHD_OPTION_CONNECTION_TIMEOUT:
 * a client that sends half a request, or keeps a connection open unused,
 * holds one of the limited connection threads). While its request is being
 * generated a connection is quiet by design: the timeout is lifted then, and
 * set again when the answer starts (from zero, MHD restarts its timer). */
static void idle_timeout(server_http *h, struct MHD_Connection *c, bool on) {
    if (h->idle_timeout_s > 0)
        MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, on ? h->idle_timeout_s : 0u);
}

static enum MHD_Result send_text(server_http *h, struct MHD_Connection *c, unsigned code,
                                 const char *type, server_buf *b) {
    idle_timeout(h, c, true);
    if (b->failed) {
        server_buf_free(b);
        static const char oom[] = "{\"error\": {\"message\": \"the server ran out of memory\", "
                                  "\"type\": \"server_error\", \"param\": null, \"code\": null}}";
        server_buf_append(b, oom, sizeof oom - 1);
        code = 500;
        type = "application/json";
    }
    struct MHD_Response *r =
        MHD_create_response_from_buffer(b->len, b->p ? b->p : (char *)"", MHD_RESPMEM_MUST_COPY);
    server_buf_free(b);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (code == 401)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (code == 429)
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    count_code(h, code);
    enum MHD_Result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_json(server_http *h, struct MHD_Connection *c, unsigned code,
                                 server_buf *b) {
    return send_text(h, c, code, "application/json", b);
}

static enum MHD_Result send_error(server_http *h, struct MHD_Connection *c,
                                  const server_error *e) {
    server_buf b = {0};
    server_error_json(e, &b);
    return send_json(h, c, (unsigned)e->status, &b);
}

static enum MHD_Result fail(server_http *h, struct MHD_Connection *c, int status,
                            const char *param, const char *code, const char *msg) {
    server_error e;
    server_fail(&e, status, param, code, "%s", msg);
    return send_error(h, c, &e);
}

/* ---------------------------------------------------------------- the client */

/* Whether the client has closed its end (or the connection broke). */
static bool client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return false;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLIN};
    if (poll(&p, 1, 0) <= 0)
        return false;
    if (p.revents & (POLLERR | POLLHUP | POLLNVAL))
        return true;
    char byte;
    ssize_t n = recv(ci->connect_fd, &byte, 1, MSG_PEEK);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static bool authorized(const server_http *h, struct MHD_Connection *c) {
    if (!h->api_key)
        return true;
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!v || strncmp(v, "Bearer ", 7) != 0)
        return false;
    v += 7;
    /* compared in time independent of where they differ */
    size_t n = strlen(v), k = strlen(h->api_key);
    unsigned char diff = n != k;
    for (size_t i = 0; i < n && i < k; i++)
        diff |= (unsigned char)(v[i] ^ h->api_key[i]);
    return diff == 0;
}

/* ---------------------------------------------------------------- prompts */

/* The ids of text, in a buffer (hr_malloc) sized from what hr_tokenize asks for. */
static hr_status tokenize(const server_http *h, const char *text, size_t len,
                          const hr_tokenize_params *tp, int32_t **ids, int32_t *n,
                          hr_error *err) {
    size_t cap = len + 8, got = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        int32_t *buf = hr_malloc(cap * sizeof(int32_t));
        if (!buf)
            return hr_err_set(err, HR_ERR_NOMEM, "out of memory for %zu token ids", cap);
        hr_status s = hr_tokenize(h->tok, text, len, tp, buf, cap, &got, err);
        if (s == HR_OK && got <= (size_t)INT32_MAX) {
            *ids = buf;
            *n = (int32_t)got;
            return HR_OK;
        }
        hr_free(buf);
        if (s != HR_ERR_INVALID || got <= cap)
            return s != HR_OK ? s : hr_err_set(err, HR_ERR_INVALID, "the prompt is too long");
        cap = got;
    }
    return hr_err_set(err, HR_ERR_INVALID, "tokenizing the prompt did not settle on a length");
}

/* The prompt ids of a parsed request, or false with e filled. */
static bool prompt_ids(server_http *h, const server_request *r, int32_t **ids, int32_t *n,
                       server_error *e) {
    hr_error err = {0};
    if (r->kind == SERVER_COMPLETION && r->prompt_ids) {
        for (int32_t i = 0; i < r->n_prompt_ids; i++)
            if (r->prompt_ids[i] >= h->n_vocab)
                return server_fail(e, 400, "prompt", "invalid_value",
                                   "Invalid 'prompt': token %d is %d, outside the vocabulary "
                                   "[0, %d).",
                                   i, r->prompt_ids[i], h->n_vocab);
        if (!(*ids = hr_malloc((size_t)r->n_prompt_ids * sizeof(int32_t))))
            return server_fail(e, 500, NULL, NULL, "out of memory");
        memcpy(*ids, r->prompt_ids, (size_t)r->n_prompt_ids * sizeof(int32_t));
        *n = r->n_prompt_ids;
        return true;
    }
    if (r->kind == SERVER_COMPLETION) { /* BOS as the tokenizer says, as `headroom run` */
        hr_tokenize_params tp = hr_tokenize_params_default();
        if (tokenize(h, r->prompt, r->prompt_len, &tp, ids, n, &err) != HR_OK)
            return server_fail(e, 500, "prompt", NULL, "tokenizing the prompt: %s", err.msg);
        return true;
    }
    if (!h->tmpl)
        return server_fail(e, 400, "messages", "no_chat_template", "%s", h->tmpl_error);
    chat_message *msgs = hr_calloc((size_t)r->n_msgs, sizeof *msgs);
    if (!msgs)
        return server_fail(e, 500, NULL, NULL, "out of memory");
    for (int32_t i = 0; i < r->n_msgs; i++)
        msgs[i] = (chat_message){r->msgs[i].role, r->msgs[i].content};
    chat_render_opts o = {.add_generation_prompt = true,
                          .bos_token = h->bos_text,
                          .eos_token = h->eos_text};
    char *text = NULL;
    size_t len = 0;
    hr_status s = chat_template_render(h->tmpl, msgs, r->n_msgs, &o, &text, &len, &err);
    hr_free(msgs);
    if (s != HR_OK)
        return server_fail(e, s == HR_ERR_INVALID ? 400 : 500, "messages", NULL,
                           "the chat template refused the messages: %s", err.msg);
    /* the template writes BOS and the turn markers as text */
    hr_tokenize_params tp = hr_tokenize_params_default();
    tp.add_bos = 0;
    tp.parse_special = true;
    s = tokenize(h, text, len, &tp, ids, n, &err);
    hr_free(text);
    if (s != HR_OK)
        return server_fail(e, 500, "messages", NULL, "tokenizing the conversation: %s", err.msg);
    return true;
}

/* The sampling parameters of r, checked against the context: max_tokens is
 * r's, or until the context is full (chat), or 16 (completions, OpenAI's
 * default there) within the context. */
static bool sampling(server_http *h, const server_request *r, int32_t n_prompt,
                     hr_sampling_params *sp, server_error *e) {
    const int64_t ctx = h->n_ctx;
    if (n_prompt < 1)
        return server_fail(e, 400, r->kind == SERVER_CHAT ? "messages" : "prompt", NULL,
                           "the prompt is empty (no tokens)");
    if (n_prompt >= ctx)
        return server_fail(e, 400, r->kind == SERVER_CHAT ? "messages" : "prompt",
                           "context_length_exceeded",
                           "This model's maximum context length is %d tokens. However, your "
                           "prompt has %d tokens (at most %d, to leave room for one new "
                           "token). Please reduce the length of the %s.",
                           h->n_ctx, n_prompt, h->n_ctx - 1,
                           r->kind == SERVER_CHAT ? "messages" : "prompt");
    if (r->max_tokens > 0 && n_prompt + r->max_tokens > ctx)
        return server_fail(e, 400, "max_tokens", "context_length_exceeded",
                           "This model's maximum context length is %d tokens. However, you "
                           "requested %lld tokens (%d in the %s, %lld in the completion). "
                           "Please reduce the length of the %s or completion.",
                           h->n_ctx, (long long)(n_prompt + r->max_tokens), n_prompt,
                           r->kind == SERVER_CHAT ? "messages" : "prompt",
                           (long long)r->max_tokens,
                           r->kind == SERVER_CHAT ? "messages" : "prompt");
    *sp = hr_sampling_params_default();
    sp->temperature = (float)r->temperature;
    sp->top_p = (float)r->top_p;
    if (r->top_p == 0.0) { /* the smallest nucleus: the most likely token alone */
        sp->temperature = 0.0f;
        sp->top_p = 1.0f;
    }
    sp->top_k = r->top_k;
    sp->min_p = (float)r->min_p;
    sp->repeat_penalty = (float)r->repetition_penalty;
    sp->seed = r->seed_given ? r->seed : next_random(h);
    if (r->max_tokens > 0)
        sp->max_tokens = (int32_t)r->max_tokens;
    else if (r->kind == SERVER_COMPLETION)
        sp->max_tokens = (int32_t)(ctx - n_prompt < 16 ? ctx - n_prompt : 16);
    else
        sp->max_tokens = -1;
    sp->stop = (const char *const *)r->stop;
    sp->n_stop = r->n_stop;
    sp->ignore_eos = r->ignore_eos;
    return true;
}

/* ---------------------------------------------------------------- endings */

static const char *finish_name(hr_finish_reason f) {
    return f == HR_FINISH_LENGTH || f == HR_FINISH_CONTEXT ? "length" : "stop";
}

/* The error that ends a job that did not finish normally. */
static void job_error(const server_job_state *st, server_error *e) {
    if (st->shutdown)
        server_fail(e, 503, NULL, "shutting_down", "the server is shutting down");
    else if (st->status == HR_ERR_NO_FIT || st->status == HR_ERR_INVALID)
        server_fail(e, 400, NULL, NULL, "%s", st->error);
    else
        server_fail(e, 500, NULL, NULL, "generation failed: %s",
                    st->error[0] ? st->error : "cancelled");
}

/* ---------------------------------------------------------------- streaming */

typedef struct {
    server_http *h;
    struct MHD_Connection *c;
    server_job *job;
    server_reply_head rh;
    bool include_usage;
    server_buf out;   /* formatted, not yet handed to MHD */
    size_t out_pos;
    server_buf text;  /* scratch: the job's new text */
    bool ended;       /* the job finished and its last events are in out */
} sse_stream;

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    sse_stream *ss = cls;
    for (;;) {
        if (ss->out.failed)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (ss->out_pos < ss->out.len) {
            size_t n = ss->out.len - ss->out_pos;
            n = n < max ? n : max;
            memcpy(buf, ss->out.p + ss->out_pos, n);
            ss->out_pos += n;
            return (ssize_t)n;
        }
        if (ss->ended) {
            idle_timeout(ss->h, ss->c, true); /* a keep-alive connection idles from here */
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        ss->out.len = 0;
        ss->out_pos = 0;
        ss->text.len = 0;
        server_job_state st;
        if (!server_job_wait(ss->job, WAIT_SLICE_MS, &ss->text, &st)) {
            if (client_gone(ss->c)) {
                server_job_cancel(ss->job);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
            continue;
        }
        if (ss->text.len > 0)
            server_reply_chunk(&ss->out, &ss->rh, false, ss->text.p, ss->text.len, NULL);
        if (st.finish == HR_FINISH_NONE)
            continue;
        ss->ended = true;
        if (st.finish == HR_FINISH_CANCELLED && !st.shutdown)
            return MHD_CONTENT_READER_END_WITH_ERROR; /* cancelled for a client that left */
        if (st.finish == HR_FINISH_CANCELLED || st.finish == HR_FINISH_ERROR) {
            /* the status line went out with the first byte: the error is an event */
            server_error e;
            job_error(&st, &e);
            append_lit(&ss->out, "data: ");
            server_error_json(&e, &ss->out);
            append_lit(&ss->out, "\n\n");
        } else {
            server_reply_chunk(&ss->out, &ss->rh, false, NULL, 0, finish_name(st.finish));
            if (ss->include_usage)
                server_reply_usage_chunk(&ss->out, &ss->rh, st.n_prompt, st.n_gen);
        }
        append_lit(&ss->out, "data: [DONE]\n\n");
    }
}

static void sse_free(void *cls) {
    sse_stream *ss = cls;
    if (!ss->ended) /* the response was dropped before the end: the client is gone */
        server_job_cancel(ss->job);
    server_job_release(ss->job);
    server_buf_free(&ss->out);
    server_buf_free(&ss->text);
    hr_free(ss);
}

static enum MHD_Result start_stream(server_http *h, struct MHD_Connection *c, server_job *job,
                                    const server_reply_head *rh, bool include_usage) {
    sse_stream *ss = hr_calloc(1, sizeof *ss);
    if (!ss) {
        server_job_cancel(job);
        server_job_release(job);
        return fail(h, c, 500, NULL, NULL, "out of memory");
    }
    *ss = (sse_stream){.h = h, .c = c, .job = job, .rh = *rh, .include_usage = include_usage};
    if (rh->kind == SERVER_CHAT) /* the role first, as OpenAI sends it */
        server_reply_chunk(&ss->out, rh, true, NULL, 0, NULL);
    /* 4 KiB reads: MHD takes the buffer from the connection's memory pool */
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, sse_read, ss, sse_free);
    if (!r) {
        sse_free(ss);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no"); /* proxies: do not hold events */
    count_code(h, 200);
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* ---------------------------------------------------------------- completions */

static bool model_known(const server_http *h, const char *name) {
    if (strcmp(name, h->model_id) == 0 || strcmp(name, h->model_path) == 0)
        return true;
    const char *base = strrchr(h->model_path, '/');
    base = base ? base + 1 : h->model_path;
    size_t n = strlen(base);
    while (n > 0 && base[n - 1] == '/')
        n--;
    if (strcmp(name, base) == 0)
        return true;
    const char *dot = strrchr(base, '.'); /* "model" for "model.gguf" */
    return dot && (size_t)(dot - base) == strlen(name) && strncmp(name, base, strlen(name)) == 0;
}

static enum MHD_Result completions(server_http *h, struct MHD_Connection *c, conn_ctx *cc,
                                   server_kind kind) {
    server_request r;
    server_error e;
    if (!server_request_parse(cc->body.p, cc->body.len, kind, &r, &e))
        return send_error(h, c, &e);
    int32_t *ids = NULL, n_ids = 0;
    hr_sampling_params sp;
    server_job *job = NULL;
    hr_error err = {0};
    enum MHD_Result ret;
    if (r.model && !model_known(h, r.model)) {
        server_fail(&e, 404, "model", "model_not_found",
                    "The model '%s' does not exist; this server serves '%s'.", r.model,
                    h->model_id);
        goto refuse;
    }
    if (!prompt_ids(h, &r, &ids, &n_ids, &e) || !sampling(h, &r, n_ids, &sp, &e))
        goto refuse;
    hr_status s = server_engine_submit(h->eng, ids, n_ids, &sp, cc->t_arrival, &job, &err);
    if (s != HR_OK) {
        server_fail(&e, s == HR_ERR_NO_FIT ? 429 : s == HR_ERR_CANCELLED ? 503 : 500, NULL,
                    s == HR_ERR_NO_FIT ? "queue_full" : NULL, "%s", err.msg);
        goto refuse;
    }
    idle_timeout(h, c, false); /* until the answer starts */
    server_reply_head rh = {.kind = kind, .created = (long)time(NULL), .model = h->model_id};
    snprintf(rh.id, sizeof rh.id, "%s%016llx%08llx", kind == SERVER_CHAT ? "chatcmpl-" : "cmpl-",
             (unsigned long long)next_random(h),
             (unsigned long long)(atomic_fetch_add(&h->next_id, 1) & 0xffffffffu));
    if (r.stream) {
        bool usage = r.include_usage;
        hr_free(ids);
        server_request_free(&r);
        return start_stream(h, c, job, &rh, usage);
    }
    /* not streamed: wait for the whole text, watching the client */
    server_buf text = {0};
    server_job_state st;
    for (double checked = hr_now_ms();;) {
        /* text keeps coming while it runs: look at the client every slice anyway */
        bool news = server_job_wait(job, WAIT_SLICE_MS, &text, &st);
        bool look = !news || hr_now_ms() - checked >= WAIT_SLICE_MS;
        if (look)
            checked = hr_now_ms();
        if (look && st.finish == HR_FINISH_NONE && client_gone(c)) {
            server_job_cancel(job);
            server_job_release(job);
            server_buf_free(&text);
            hr_free(ids);
            server_request_free(&r);
            return MHD_NO; /* nobody to answer: MHD closes the connection */
        }
        if (st.finish != HR_FINISH_NONE)
            break;
    }
    server_job_release(job);
    server_buf b = {0};
    if (st.finish == HR_FINISH_CANCELLED || st.finish == HR_FINISH_ERROR) {
        job_error(&st, &e);
        server_buf_free(&text);
        goto refuse;
    }
    server_reply(&b, &rh, text.p ? text.p : "", text.len, finish_name(st.finish), st.n_prompt,
                 st.n_gen);
    server_buf_free(&text);
    hr_free(ids);
    server_request_free(&r);
    return send_json(h, c, 200, &b);
refuse:
    ret = send_error(h, c, &e);
    hr_free(ids);
    server_request_free(&r);
    return ret;
}

/* ---------------------------------------------------------------- the other routes */

static enum MHD_Result tokenize_route(server_http *h, struct MHD_Connection *c, conn_ctx *cc) {
    server_tokenize_request r;
    server_error e;
    if (!server_tokenize_parse(cc->body.p, cc->body.len, &r, &e))
        return send_error(h, c, &e);
    hr_tokenize_params tp = hr_tokenize_params_default();
    tp.add_bos = r.add_special ? -1 : 0;
    int32_t *ids = NULL, n = 0;
    hr_error err = {0};
    hr_status s = tokenize(h, r.content, r.len, &tp, &ids, &n, &err);
    hr_free(r.content);
    if (s != HR_OK)
        return fail(h, c, 500, "content", NULL, err.msg);
    server_buf b = {0};
    append_lit(&b, "{\"tokens\": [");
    for (int32_t i = 0; i < n; i++)
        server_buf_printf(&b, i ? ", %d" : "%d", ids[i]);
    append_lit(&b, "]}");
    hr_free(ids);
    return send_json(h, c, 200, &b);
}

static enum MHD_Result detokenize_route(server_http *h, struct MHD_Connection *c,
                                        conn_ctx *cc) {
    server_detokenize_request r;
    server_error e;
    if (!server_detokenize_parse(cc->body.p, cc->body.len, &r, &e))
        return send_error(h, c, &e);
    for (int32_t i = 0; i < r.n_tokens; i++)
        if (r.tokens[i] >= h->n_vocab) {
            server_fail(&e, 400, "tokens", "invalid_value",
                        "Invalid 'tokens': token %d is %d, outside the vocabulary [0, %d).", i,
                        r.tokens[i], h->n_vocab);
            hr_free(r.tokens);
            return send_error(h, c, &e);
        }
    hr_detok *d = NULL;
    hr_error err = {0};
    if (hr_detok_create(h->tok, &d, &err) != HR_OK) {
        hr_free(r.tokens);
        return fail(h, c, 500, NULL, NULL, err.msg);
    }
    server_buf text = {0};
    char piece[1024];
    append_lit(&text, "");
    for (int32_t i = 0; i <= r.n_tokens; i++) {
        int32_t n = i < r.n_tokens ? hr_detok_push(d, r.tokens[i], piece, (int32_t)sizeof piece)
                                   : hr_detok_flush(d, piece, (int32_t)sizeof piece);
        if (n < 0) { /* a piece longer than any vocabulary here has: grow once */
            char *big = hr_malloc((size_t)-n);
            if (!big) {
                text.failed = true;
                break;
            }
            n = i < r.n_tokens ? hr_detok_push(d, r.tokens[i], big, -n)
                               : hr_detok_flush(d, big, -n);
            server_buf_append(&text, big, n > 0 ? (size_t)n : 0);
            hr_free(big);
            continue;
        }
        server_buf_append(&text, piece, (size_t)n);
    }
    hr_detok_free(d);
    hr_free(r.tokens);
    server_buf b = {0};
    append_lit(&b, "{\"content\": ");
    server_buf_json_string(&b, text.p ? text.p : "", text.len);
    append_lit(&b, "}");
    if (text.failed)
        b.failed = true;
    server_buf_free(&text);
    return send_json(h, c, 200, &b);
}

static void model_json(const server_http *h, server_buf *b) {
    append_lit(b, "{\"id\": ");
    server_buf_json_string(b, h->model_id, strlen(h->model_id));
    server_buf_printf(b,
                      ", \"object\": \"model\", \"created\": %ld, \"owned_by\": \"headroom\", "
                      "\"max_model_len\": %d}",
                      h->created, h->n_ctx);
}

static enum MHD_Result models_route(server_http *h, struct MHD_Connection *c, const char *url) {
    server_buf b = {0};
    if (url) { /* /v1/models/{id} */
        if (!model_known(h, url)) {
            server_error e;
            server_fail(&e, 404, "model", "model_not_found", "The model '%s' does not exist.",
                        url);
            return send_error(h, c, &e);
        }
        model_json(h, &b);
        return send_json(h, c, 200, &b);
    }
    append_lit(&b, "{\"object\": \"list\", \"data\": [");
    model_json(h, &b);
    append_lit(&b, "]}");
    return send_json(h, c, 200, &b);
}

static void histogram(server_buf *b, const char *name, const char *help, const double *bounds,
                      int n, const uint64_t *counts, double sum) {
    server_buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t total = 0;
    for (int i = 0; i <= n; i++) {
        total += counts[i];
        if (i < n)
            server_buf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i],
                              (unsigned long long)total);
        else
            server_buf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name,
                              (unsigned long long)total);
    }
    server_buf_printf(b, "%s_sum %.6f\n%s_count %llu\n", name, sum, name,
                      (unsigned long long)total);
}

static void metric(server_buf *b, const char *name, const char *type, const char *help,
                   double v) {
    server_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name,
                      v);
}

static enum MHD_Result metrics_route(server_http *h, struct MHD_Connection *c) {
    server_metrics m;
    server_engine_metrics(h->eng, &m);
    const hr_engine_stats *es = &m.engine;
    const int32_t used = es->kv_blocks - es->kv_blocks_free - es->kv_blocks_cached;
    server_buf b = {0};
    metric(&b, "headroom_requests_running", "gauge",
           "Requests in the engine (prefilling or decoding).", m.running);
    metric(&b, "headroom_requests_waiting", "gauge",
           "Requests queued for a sequence slot (bounded by --queue).", m.waiting);
    metric(&b, "headroom_kv_blocks_total", "gauge", "KV cache blocks in the pool.",
           es->kv_blocks);
    metric(&b, "headroom_kv_blocks_used", "gauge", "KV cache blocks held by requests.", used);
    metric(&b, "headroom_kv_blocks_cached", "gauge",
           "KV cache blocks held by no request, kept for prefix-cache hits.",
           es->kv_blocks_cached);
    metric(&b, "headroom_kv_usage_ratio", "gauge", "Share of the KV blocks held by requests.",
           es->kv_blocks ? (double)used / es->kv_blocks : 0.0);
    metric(&b, "headroom_kv_block_size_tokens", "gauge", "Tokens a KV block holds.",
           es->kv_block_size);
    metric(&b, "headroom_prefix_cache_queries_tokens_total", "counter",
           "Prompt tokens looked up in the prefix cache (prompts admitted).",
           (double)es->prompt_tokens);
    metric(&b, "headroom_prefix_cache_hits_tokens_total", "counter",
           "Prompt tokens found in the prefix cache (not prefilled).",
           (double)es->prefix_hit_tokens);
    metric(&b, "headroom_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.",
           (double)es->prompt_tokens);
    metric(&b, "headroom_generation_tokens_total", "counter", "Tokens generated.",
           (double)m.generated_tokens);
    server_buf_printf(&b, "# HELP headroom_requests_finished_total Requests ended, by finish "
                          "reason.\n# TYPE headroom_requests_finished_total counter\n");
    for (int f = HR_FINISH_EOS; f <= HR_FINISH_ERROR; f++)
        server_buf_printf(&b, "headroom_requests_finished_total{reason=\"%s\"} %llu\n",
                          hr_finish_reason_name((hr_finish_reason)f),
                          (unsigned long long)m.finished[f]);
    metric(&b, "headroom_requests_rejected_queue_full_total", "counter",
           "Requests refused with 429: the queue was full.", (double)m.rejected_full);
    server_buf_printf(&b, "# HELP headroom_http_responses_total HTTP responses, by status.\n"
                          "# TYPE headroom_http_responses_total counter\n");
    for (size_t k = 0; k <= N_CODES; k++) {
        char code[8];
        snprintf(code, sizeof code, "%d", k < N_CODES ? counted_codes[k] : 0);
        server_buf_printf(&b, "headroom_http_responses_total{code=\"%s\"} %llu\n",
                          k < N_CODES ? code : "other",
                          (unsigned long long)atomic_load(&h->http_codes[k]));
    }
    histogram(&b, "headroom_time_to_first_token_seconds",
              "From a request's arrival to its first generated token.", server_ttft_bounds,
              SERVER_TTFT_BUCKETS, m.ttft_count, m.ttft_sum);
    histogram(&b, "headroom_inter_token_latency_seconds",
              "Between consecutive tokens of a request.", server_itl_bounds, SERVER_ITL_BUCKETS,
              m.itl_count, m.itl_sum);
    return send_text(h, c, 200, "text/plain; version=0.0.4; charset=utf-8", &b);
}

/* ---------------------------------------------------------------- dispatch */

static route_id route_of(const char *url, const char **model_name) {
    static const struct {
        const char *path;
        route_id id;
    } routes[] = {
        {"/health", ROUTE_HEALTH},           {"/metrics", ROUTE_METRICS},
        {"/v1/models", ROUTE_MODELS},        {"/models", ROUTE_MODELS},
        {"/v1/chat/completions", ROUTE_CHAT}, {"/chat/completions", ROUTE_CHAT},
        {"/v1/completions", ROUTE_COMPLETIONS}, {"/completions", ROUTE_COMPLETIONS},
        {"/tokenize", ROUTE_TOKENIZE},       {"/detokenize", ROUTE_DETOKENIZE},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (strcmp(url, routes[i].path) == 0)
            return routes[i].id;
    if (strncmp(url, "/v1/models/", 11) == 0 && url[11]) {
        *model_name = url + 11;
        return ROUTE_MODEL;
    }
    return ROUTE_NONE;
}

static bool is_post(route_id r) {
    return r == ROUTE_CHAT || r == ROUTE_COMPLETIONS || r == ROUTE_TOKENIZE ||
           r == ROUTE_DETOKENIZE;
}

static enum MHD_Result dispatch(server_http *h, struct MHD_Connection *c, conn_ctx *cc,
                                const char *url, const char *method) {
    const char *model_name = NULL;
    route_id r = route_of(url, &model_name);
    if (r == ROUTE_NONE) {
        server_error e;
        server_fail(&e, 404, NULL, "not_found", "no route %s %s", method, url);
        return send_error(h, c, &e);
    }
    if (r != ROUTE_HEALTH && !authorized(h, c))
        return fail(h, c, 401, NULL, "invalid_api_key",
                    "a valid API key is needed: send the header 'Authorization: Bearer KEY'");
    if (strcmp(method, is_post(r) ? "POST" : "GET") != 0) {
        server_error e;
        server_fail(&e, 405, NULL, "method_not_allowed", "%s takes %s, not %s", url,
                    is_post(r) ? "POST" : "GET", method);
        return send_error(h, c, &e);
    }
    if (cc->too_big) {
        server_error e;
        server_fail(&e, 413, NULL, "request_too_large",
                    "the request body is larger than %zu bytes", h->max_body);
        return send_error(h, c, &e);
    }
    server_buf b = {0};
    switch (r) {
    case ROUTE_HEALTH:
        if (atomic_load(&h->stopping)) {
            append_lit(&b, "{\"status\": \"shutting down\"}");
            return send_json(h, c, 503, &b);
        }
        append_lit(&b, "{\"status\": \"ok\"}");
        return send_json(h, c, 200, &b);
    case ROUTE_METRICS: return metrics_route(h, c);
    case ROUTE_MODELS: return models_route(h, c, NULL);
    case ROUTE_MODEL: return models_route(h, c, model_name);
    case ROUTE_CHAT: return completions(h, c, cc, SERVER_CHAT);
    case ROUTE_COMPLETIONS: return completions(h, c, cc, SERVER_COMPLETION);
    case ROUTE_TOKENIZE: return tokenize_route(h, c, cc);
    case ROUTE_DETOKENIZE: return detokenize_route(h, c, cc);
    case ROUTE_NONE: break;
    }
    return MHD_NO;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    (void)version;
    server_http *h = cls;
    conn_ctx *cc = *con_cls;
    if (!cc) { /* headers are in: the body (if any) comes in the next calls */
        if (!(cc = hr_calloc(1, sizeof *cc)))
            return MHD_NO;
        cc->t_arrival = hr_now_ms();
        *con_cls = cc;
        atomic_fetch_add(&h->in_flight, 1);
        const char *cl =
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (!cl || strtoull(cl, NULL, 10) <= h->max_body)
            return MHD_YES;
        cc->too_big = cc->answered = true; /* said up front: refused before reading it */
        return dispatch(h, c, cc, url, method);
    }
    if (cc->answered) { /* the rest of a body refused early: dropped */
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        /* a body without a length, past the cap: the rest is dropped as it
         * comes, and 413 answered at its end (MHD queues a response only
         * before a body or after it) */
        if (!cc->too_big && cc->body.len + *upload_data_size > h->max_body) {
            server_buf_free(&cc->body);
            cc->too_big = true;
        }
        if (!cc->too_big)
            server_buf_append(&cc->body, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    return dispatch(h, c, cc, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    server_http *h = cls;
    (void)c;
    (void)toe; /* a stream cut short is cancelled by its response's free callback */
    conn_ctx *cc = *con_cls;
    if (!cc)
        return;
    server_buf_free(&cc->body);
    hr_free(cc);
    *con_cls = NULL;
    atomic_fetch_sub(&h->in_flight, 1);
}

/* ---------------------------------------------------------------- start and stop */

static hr_status listen_on(const char *host, int port, int *fd_out, bool *ipv6,
                           hr_error *err) {
    char port_s[16];
    snprintf(port_s, sizeof port_s, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host, port_s, &hints, &res);
    if (rc != 0)
        return hr_err_set(err, HR_ERR_INVALID, "--host %s: %s", host, gai_strerror(rc));
    int last = 0;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) {
            last = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one); /* restarts rebind at once */
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 512) == 0) {
            *ipv6 = a->ai_family == AF_INET6;
            *fd_out = fd;
            freeaddrinfo(res);
            return HR_OK;
        }
        last = errno;
        close(fd);
    }
    freeaddrinfo(res);
    return hr_err_set(err, HR_ERR_IO, "cannot listen on %s:%d: %s", host, port,
                      strerror(last ? last : EADDRNOTAVAIL));
}

static char *token_text(const hr_tokenizer *tok, int32_t id) {
    if (id < 0)
        return NULL;
    char buf[256];
    int32_t n = hr_token_to_piece(tok, id, true, buf, (int32_t)sizeof buf);
    return n >= 0 ? hr_strndup(buf, (size_t)n) : NULL;
}

hr_status server_http_start(const hr_model *m, server_engine *eng, const server_http_params *p,
                            server_http **out, hr_error *err) {
    const hr_tokenizer *tok = hr_model_tokenizer(m);
    if (!tok)
        return hr_err_set(err, HR_ERR_UNSUPPORTED, "serve: the model has no tokenizer");
    server_http *h = hr_calloc(1, sizeof *h);
    if (!h)
        return hr_err_set(err, HR_ERR_NOMEM, "serve: out of memory");
    h->model = m;
    h->tok = tok;
    h->eng = eng;
    h->listen_fd = -1;
    h->port = p->port;
    h->n_ctx = p->n_ctx;
    h->n_vocab = hr_tokenizer_n_vocab(tok);
    h->max_body = p->max_body_bytes;
    h->idle_timeout_s = p->idle_timeout_s;
    h->created = (long)time(NULL);
    atomic_init(&h->stopping, false);
    atomic_init(&h->in_flight, 0);
    atomic_init(&h->seed_state, (uint64_t)time(NULL) * 0x2545F4914F6CDD1Dull ^
                                    (uint64_t)getpid() ^ (uint64_t)(uintptr_t)h);
    atomic_init(&h->next_id, 0);
    for (size_t k = 0; k <= N_CODES; k++)
        atomic_init(&h->http_codes[k], 0);
    hr_status s = HR_ERR_NOMEM;
    h->host = hr_strdup(p->host);
    h->model_id = hr_strdup(p->model_id);
    h->model_path = hr_strdup(p->model_path);
    h->api_key = p->api_key ? hr_strdup(p->api_key) : NULL;
    if (!h->host || !h->model_id || !h->model_path || (p->api_key && !h->api_key)) {
        hr_err_set(err, s, "serve: out of memory");
        goto fail;
    }
    /* the template is parsed once; rendering it is thread-safe */
    const char *src = hr_model_chat_template(m);
    hr_error terr = {0};
    if (!src) {
        snprintf(h->tmpl_error, sizeof h->tmpl_error,
                 "the model has no chat template (tokenizer_config.json's chat_template, GGUF "
                 "tokenizer.chat_template): use /v1/completions with a prompt");
    } else if (chat_template_parse(src, &h->tmpl, &terr) != HR_OK) {
        snprintf(h->tmpl_error, sizeof h->tmpl_error, "the model's chat template: %s", terr.msg);
        fprintf(stderr, "headroom: serve: %s; /v1/chat/completions will answer 400\n",
                h->tmpl_error);
    }
    h->bos_text = token_text(tok, hr_tokenizer_bos(tok));
    h->eos_text = token_text(tok, hr_tokenizer_eos(tok));

    bool ipv6 = false;
    if ((s = listen_on(p->host, p->port, &h->listen_fd, &ipv6, err)) != HR_OK)
        goto fail;
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    if (getsockname(h->listen_fd, (struct sockaddr *)&sa, &sl) == 0)
        h->port = sa.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&sa)->sin6_port)
                                           : ntohs(((struct sockaddr_in *)&sa)->sin_port);
    /* poll, not select: more than FD_SETSIZE connections; ITC: quiescing */
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ITC | (ipv6 ? MHD_USE_IPv6 : 0);
    /* each connection is a thread: room for every request that may run or
     * wait, and as many again that are refused or idle keep-alives */
    unsigned limit = (unsigned)(2 * (p->parallel + p->queue_max) + 64);
    h->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, h, MHD_OPTION_LISTEN_SOCKET,
                            h->listen_fd, MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                            MHD_OPTION_CONNECTION_LIMIT, limit, MHD_OPTION_CONNECTION_TIMEOUT,
                            h->idle_timeout_s, MHD_OPTION_END);
    if (!h->d) {
        s = hr_err_set(err, HR_ERR_IO, "serve: libmicrohttpd would not start on %s:%d",
                       p->host, h->port);
        goto fail;
    }
    *out = h;
    return HR_OK;
fail:
    server_http_free(h);
    return s;
}

int server_http_port(const server_http *h) { return h->port; }

void server_http_quiesce(server_http *h) {
    atomic_store(&h->stopping, true);
    if (h->d)
        MHD_quiesce_daemon(h->d); /* the socket is ours: closed after MHD_stop_daemon */
}

void server_http_stop(server_http *h) {
    atomic_store(&h->stopping, true);
    /* the jobs have ended: give their handlers a moment to send what they
     * say (a 503, the stream's last events) before the sockets close */
    for (int i = 0; h->d && i < 200 && atomic_load(&h->in_flight) > 0; i++) {
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 10000000L};
        nanosleep(&ts, NULL);
    }
    if (h->d) {
        MHD_stop_daemon(h->d);
        h->d = NULL;
    }
    if (h->listen_fd >= 0) {
        close(h->listen_fd);
        h->listen_fd = -1;
    }
}

void server_http_free(server_http *h) {
    if (!h)
        return;
    server_http_stop(h);
    chat_template_free(h->tmpl);
    hr_free(h->bos_text);
    hr_free(h->eos_text);
    hr_free(h->host);
    hr_free(h->api_key);
    hr_free(h->model_id);
    hr_free(h->model_path);
    hr_free(h);
}
