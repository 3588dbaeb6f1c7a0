/*
 * cmd_serve.c — `headroom serve`: the OpenAI-compatible HTTP server. Loads
 * the model and the engine, starts the engine thread (server/server_engine.c)
 * and the HTTP side (server/server_http.c), prints "listening on
 * http://HOST:PORT" once connections are taken, and on SIGTERM or SIGINT
 * stops accepting, cancels what runs and waits, and exits 0.
 *
 * Signals: a handler writes to a pipe that the main thread reads (the one
 * async-signal-safe way to wake it); whichever thread the signal lands on,
 * the shutdown itself runs here, in order: no new connections, the engine
 * stopped (queued and running requests cancelled, their clients told 503 or
 * an error event), the connections' threads joined, everything freed.
 */
#include "cli/cli.h"
#include "server/server_engine.h"
#include "server/server_http.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

enum {
    SERVE_PARALLEL = 4,              /* sequences by default: a few users at once */
    SERVE_QUEUE = 256,               /* requests waiting by default, beyond those running */
    SERVE_IDLE_TIMEOUT = 60,         /* seconds a connection may idle (nginx's keep-alive: 75) */
    SERVE_MAX_BODY = 4 * 1024 * 1024 /* request bodies: a long prompt, JSON-escaped */
};

static void help(FILE *f) {
    fprintf(f,
            "usage: headroom serve [-m PATH] [--host ADDR] [--port N] [--parallel N]\n"
            "                      [--queue N] [--api-key KEY] [--idle-timeout S] [options]\n\n"
            "Serves the model over HTTP with the OpenAI API: POST /v1/chat/completions\n"
            "(the model's chat template), POST /v1/completions, GET /v1/models, GET /health,\n"
            "GET /metrics (Prometheus), POST /tokenize and /detokenize. Requests are\n"
            "batched together as they come (continuous batching).\n"
            "  --host ADDR        address to listen on (default 127.0.0.1)\n"
            "  --port N           port (default 8080; 0: any free one, printed)\n"
            "  --queue N          requests that may wait for a sequence beyond those\n"
            "                     running (default %d); more get 429 with Retry-After\n"
            "  --api-key KEY      requests must send 'Authorization: Bearer KEY' (all\n"
            "                     routes but /health)\n"
            "  --idle-timeout S   close a connection that sends or receives nothing for\n"
            "                     S seconds, a half-sent request included; never while\n"
            "                     its answer is generated (default %d; 0: never)\n"
            "Per request, as OpenAI: temperature 1, top_p 1, no top_k or min_p unless\n"
            "given; max_tokens until the context is full (chat) or 16 (completions);\n"
            "seed random unless given. Not supported (400): n > 1, logprobs, nonzero\n"
            "presence/frequency penalties (repetition_penalty is), tools, logit_bias.\n"
            "SIGTERM or SIGINT: stop accepting, cancel running and queued requests, exit.\n",
            SERVE_QUEUE, SERVE_IDLE_TIMEOUT);
    cli_engine_help(f, CLI_SERVE);
}

static int sig_pipe[2] = {-1, -1};
static volatile sig_atomic_t sig_got;

static void on_signal(int sig) {
    sig_got = sig;
    ssize_t r = write(sig_pipe[1], "x", 1); /* async-signal-safe; a full pipe is fine */
    (void)r;
}

/* The name clients use: the model's own, else its file or folder name. */
static void model_name(const hr_model *m, const char *path, char *buf, size_t cap) {
    hr_model_info in;
    hr_model_get_info(m, &in);
    if (in.name[0]) {
        snprintf(buf, cap, "%s", in.name);
        return;
    }
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/')
        b--;
    snprintf(buf, cap, "%.*s", (int)(n - b), path + b);
}

int cmd_serve(int argc, char **argv) {
    cli_engine_opts o;
    cli_engine_opts_init(&o, CLI_SERVE);
    o.ep.n_seq_max = SERVE_PARALLEL;
    const char *host = "127.0.0.1", *api_key = NULL;
    int64_t port = 8080, queue = SERVE_QUEUE, idle_timeout = SERVE_IDLE_TIMEOUT;
    for (int i = 1; i < argc; i++) {
        int r = cli_engine_option(argc, argv, &i, &o);
        if (r < 0)
            return 1;
        if (r > 0)
            continue;
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            help(stdout);
            return 0;
        } else if (strcmp(a, "--host") == 0) {
            if (!cli_value(argc, argv, &i, &host))
                return 1;
        } else if (strcmp(a, "--port") == 0) {
            if (!cli_int(argc, argv, &i, 0, 65535, &port))
                return 1;
        } else if (strcmp(a, "--queue") == 0) {
            if (!cli_int(argc, argv, &i, 0, 1 << 20, &queue))
                return 1;
        } else if (strcmp(a, "--idle-timeout") == 0) {
            if (!cli_int(argc, argv, &i, 0, 86400, &idle_timeout))
                return 1;
        } else if (strcmp(a, "--api-key") == 0) {
            if (!cli_value(argc, argv, &i, &api_key))
                return 1;
            if (!api_key[0]) {
                cli_error("serve: --api-key is empty");
                return 1;
            }
        } else {
            cli_error("serve: unknown option '%s'", a);
            help(stderr);
            return 1;
        }
    }
    if (!cli_budget(&o))
        return 1;

    hr_error err;
    hr_model *m = NULL;
    hr_engine *e = NULL;
    server_engine *se = NULL;
    server_http *sh = NULL;
    int rc = 1;
    if (cli_load_model(&o, false, &m, &err) != HR_OK) {
        cli_error("%s", err.msg);
        goto done;
    }
    if (!hr_model_tokenizer(m)) {
        cli_error("serve: %s has no tokenizer", o.model);
        goto done;
    }
    if (hr_engine_create(m, &o.ep, &e, &err) != HR_OK) {
        cli_error("%s", err.msg);
        goto done;
    }
    cli_device_line(e, &o);
    hr_plan pl;
    hr_engine_plan(e, &pl);
    hr_model_info in;
    hr_model_get_info(m, &in);
    char b[32];
    fprintf(stderr, "headroom: %d sequences of %d tokens%s (the model's limit: %d), budget %s\n",
            pl.n_seq_max, hr_engine_n_ctx(e), o.ep.n_ctx == 0 ? ", the most that fits" : "",
            in.n_ctx_train, cli_bytes(pl.budget, b, sizeof b));
    if (o.mem_report)
        cli_memory_report(e, "after load");

    server_engine_params sep = {.parallel = pl.n_seq_max, .queue_max = (int32_t)queue};
    if (server_engine_start(e, &sep, &se, &err) != HR_OK) {
        cli_error("%s", err.msg);
        goto done;
    }
    char name[160];
    model_name(m, o.model, name, sizeof name);
    server_http_params hp = {.host = host,
                             .port = (int)port,
                             .api_key = api_key,
                             .model_id = name,
                             .model_path = o.model,
                             .n_ctx = hr_engine_n_ctx(e),
                             .parallel = pl.n_seq_max,
                             .queue_max = (int32_t)queue,
                             .max_body_bytes = SERVE_MAX_BODY,
                             .idle_timeout_s = (unsigned)idle_timeout};
    if (pipe(sig_pipe) != 0) {
        cli_error("serve: pipe: %s", strerror(errno));
        goto done;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client gone mid-write is an error return, not a kill */
    if (server_http_start(m, se, &hp, &sh, &err) != HR_OK) {
        cli_error("%s", err.msg);
        goto done;
    }
    bool v6 = strchr(host, ':') != NULL;
    fprintf(stderr, "listening on http://%s%s%s:%d\n", v6 ? "[" : "", host, v6 ? "]" : "",
            server_http_port(sh));
    fflush(stderr);

    char c;
    while (read(sig_pipe[0], &c, 1) < 0 && errno == EINTR)
        ;
    const char *sig = sig_got == SIGTERM ? "SIGTERM" : "SIGINT";
    server_http_quiesce(sh);
    int32_t n_running = 0, n_queued = 0;
    server_engine_stop(se, true, &n_running, &n_queued);
    fprintf(stderr,
            "headroom: %s: stopped accepting connections; cancelled %d running and %d queued "
            "request%s\n",
            sig, n_running, n_queued, n_running + n_queued == 1 ? "" : "s");
    server_http_stop(sh);
    if (o.mem_report)
        cli_memory_report(e, "at exit");
    rc = 0;
done:
    server_http_free(sh);
    server_engine_free(se);
    hr_engine_free(e);
    hr_model_free(m);
    if (sig_pipe[0] >= 0) {
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        close(sig_pipe[0]);
        close(sig_pipe[1]);
        sig_pipe[0] = sig_pipe[1] = -1;
    }
    return rc;
}
