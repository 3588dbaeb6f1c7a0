/*
 * server_http.h — the HTTP side of `headroom serve`: libmicrohttpd, one
 * thread per connection, the OpenAI routes (server_http.c says which and
 * why this threading mode).
 *
 * Built into the headroom program, not the library: it is the one file that
 * links libmicrohttpd, so libheadroom and its users (tests, the device pack)
 * do not carry it.
 */
#ifndef HR_SERVER_HTTP_H
#define HR_SERVER_HTTP_H

#include "server/server_engine.h"

#include "headroom.h"

#include <stddef.h>
#include <stdint.h>

typedef struct server_http server_http;

typedef struct {
    const char *host;       /* numeric address or name to listen on */
    int port;               /* 0: any free port (server_http_port says which) */
    const char *api_key;    /* NULL: no authentication */
    const char *model_id;   /* the name /v1/models lists and responses carry */
    const char *model_path; /* as given on the command line: accepted as a name too */
    int32_t n_ctx;          /* tokens per sequence */
    int32_t parallel, queue_max;
    size_t max_body_bytes;  /* larger request bodies get 413 */
    unsigned idle_timeout_s; /* a connection quiet this long is closed (not while its
                                request is generated); 0: never */
} server_http_params;

/* Listens and serves until server_http_stop. m (its tokenizer and chat
 * template) and eng must outlive it; the strings in p are copied. */
hr_status server_http_start(const hr_model *m, server_engine *eng, const server_http_params *p,
                            server_http **out, hr_error *err);
/* The port listened on. */
int server_http_port(const server_http *h);
/* Stops accepting connections; /health says 503 from now on. */
void server_http_quiesce(server_http *h);
/* Waits up to 2 s for requests under way to be answered (their jobs must be
 * ending: stop the engine first), then closes every connection and waits
 * for their threads. */
void server_http_stop(server_http *h);
/* NULL is fine. Stops first if needed. */
void server_http_free(server_http *h);

#endif
