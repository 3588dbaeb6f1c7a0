/*
 * server_request.h — the wire format of `headroom serve`: request bodies
 * (OpenAI chat completions and completions, /tokenize, /detokenize) parsed
 * and checked into plain C structs; the replies (whole, and as server-sent
 * events), OpenAI-style error objects, and the small JSON writer they are
 * built with.
 *
 * Bodies are hostile input: malformed JSON, wrong types, invalid UTF-8,
 * numbers out of range or not finite, too many messages or stop strings.
 * Each gives a server_error (HTTP status, message, the parameter at fault),
 * never a crash; the fuzz target tests/fuzz/fuzz_server_request.c drives
 * these functions. Nothing here knows the model: limits that depend on it
 * (the context, the vocabulary, the model's name) are checked by the
 * caller.
 */
#ifndef HR_SERVER_REQUEST_H
#define HR_SERVER_REQUEST_H

#include "headroom.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SERVER_MAX_STOP 16        /* stop strings a request (the engine's limit) */
#define SERVER_MAX_STOP_BYTES 256 /* bytes a stop string (the engine's limit) */
#define SERVER_MAX_MESSAGES 4096  /* messages a chat request */

/* The OpenAI error object's fields, and the HTTP status that carries it. */
typedef struct {
    int status;        /* 400, 401, 404, 413, 429, 500, 503 */
    const char *type;  /* "invalid_request_error", "server_error", ... */
    char param[64];    /* the parameter at fault; "" gives null */
    char code[48];     /* a machine-readable code; "" gives null */
    char message[512];
} server_error;

/* Fills e and returns false (so that checks read `return server_fail(...)`).
 * param and code may be NULL. */
bool server_fail(server_error *e, int status, const char *param, const char *code,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));

typedef enum { SERVER_CHAT, SERVER_COMPLETION } server_kind;

typedef struct {
    char *role;    /* owned; "developer" is read as "system" */
    char *content; /* owned; text parts joined; NULL when null (assistant tool turns) */
} server_message;

typedef struct {
    server_kind kind;
    char *model;            /* owned; NULL when not given */
    /* chat */
    server_message *msgs;   /* owned, n_msgs of them */
    int32_t n_msgs;
    /* completion: a string, or token ids */
    char *prompt;           /* owned; NULL when ids were given */
    size_t prompt_len;
    int32_t *prompt_ids;    /* owned */
    int32_t n_prompt_ids;
    /* generation */
    int64_t max_tokens;     /* -1: not given (the caller applies its default) */
    double temperature;     /* [0, 2]; default 1 */
    double top_p;           /* [0, 1]; default 1 (0 is read as greedy) */
    int32_t top_k;          /* 0: off (default; -1 is read as off too) */
    double min_p;           /* [0, 1]; default 0 */
    double repetition_penalty; /* > 0; default 1 (off); a vLLM extension */
    uint64_t seed;
    bool seed_given;
    char *stop[SERVER_MAX_STOP]; /* owned */
    int32_t n_stop;
    bool stream;
    bool include_usage;     /* stream_options.include_usage */
    bool ignore_eos;        /* a vLLM extension */
} server_request;

/* Parses a request body (len bytes, no NUL needed) of kind. On success *out
 * owns its strings (server_request_free); on failure *out is left empty and
 * e says why (status 400, or 500 when memory ran out). */
bool server_request_parse(const char *body, size_t len, server_kind kind, server_request *out,
                          server_error *e);
void server_request_free(server_request *r);

/* POST /tokenize: {"content": string, "add_special": bool (default false)}. */
typedef struct {
    char *content; /* owned */
    size_t len;
    bool add_special;
} server_tokenize_request;
bool server_tokenize_parse(const char *body, size_t len, server_tokenize_request *out,
                           server_error *e);

/* POST /detokenize: {"tokens": [int, ...]}; ids are checked against the
 * vocabulary by the caller. */
typedef struct {
    int32_t *tokens; /* owned */
    int32_t n_tokens;
} server_detokenize_request;
bool server_detokenize_parse(const char *body, size_t len, server_detokenize_request *out,
                             server_error *e);

/* ---- the JSON writer: a growable text buffer */

typedef struct {
    char *p;      /* NUL-terminated when not NULL; hr_malloc'd */
    size_t len, cap;
    bool failed;  /* an allocation failed: later appends do nothing */
} server_buf;

void server_buf_free(server_buf *b);
void server_buf_append(server_buf *b, const char *s, size_t n);
void server_buf_printf(server_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s (n bytes of UTF-8) as a JSON string, quotes included. */
void server_buf_json_string(server_buf *b, const char *s, size_t n);
/* {"error": {"message", "type", "param", "code"}} */
void server_error_json(const server_error *e, server_buf *b);

/* ---- the OpenAI reply objects */

typedef struct {
    server_kind kind;  /* chat.completion(.chunk) or text_completion */
    char id[48];       /* "chatcmpl-...", "cmpl-..." */
    long created;      /* unix seconds */
    const char *model; /* borrowed */
} server_reply_head;

/* One server-sent event ("data: {...}\n\n") of a stream: the role (chat's
 * first, role true), a piece of text (text not NULL), or the end (finish:
 * "stop", "length"). */
void server_reply_chunk(server_buf *b, const server_reply_head *rh, bool role, const char *text,
                        size_t len, const char *finish);
/* The event with the usage and no choices (stream_options.include_usage). */
void server_reply_usage_chunk(server_buf *b, const server_reply_head *rh, int32_t n_prompt,
                              int32_t n_gen);
/* A whole reply: chat.completion or text_completion, with its usage. */
void server_reply(server_buf *b, const server_reply_head *rh, const char *text, size_t len,
                  const char *finish, int32_t n_prompt, int32_t n_gen);

#endif
