/*
 * server_engine.h — the one thread that owns the engine, and the jobs that
 * HTTP threads hand it.
 *
 * An HTTP thread submits a job (prompt ids and sampling parameters, copied)
 * and then reads its channel: text as the engine produces it, and at the end
 * a finish reason with the token counts. Nothing but the engine thread calls
 * into the hr_engine; the HTTP side only sees jobs, under the server's lock.
 *
 * Lifetime: a job has two owners, the HTTP side (until server_job_release)
 * and the engine thread (until the job's finish is routed); whichever lets go
 * last frees it. A client that goes away calls server_job_cancel and then
 * releases: the engine thread cancels the request at its next turn, and the
 * engine frees its KV blocks at the step after.
 */
#ifndef HR_SERVER_ENGINE_H
#define HR_SERVER_ENGINE_H

#include "server/server_request.h"

#include "headroom.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct server_engine server_engine;
typedef struct server_job server_job;

typedef struct {
    int32_t parallel;  /* the engine's n_seq_max */
    int32_t queue_max; /* jobs waiting for the engine beyond what it holds */
} server_engine_params;

/* Starts the engine thread on e (which must outlive server_engine_free and
 * be used by nothing else from now on). */
hr_status server_engine_start(hr_engine *e, const server_engine_params *p,
                              server_engine **out, hr_error *err);

/* Stops taking jobs: the queued ones finish at once as cancelled (with
 * shutdown set), and running ones are cancelled when cancel_running, else
 * left to finish. Waits for the engine thread to end. *n_running and
 * *n_queued (may be NULL) receive how many of each there were. */
void server_engine_stop(server_engine *s, bool cancel_running, int32_t *n_running,
                        int32_t *n_queued);
/* After server_engine_stop and after every job is released. NULL is fine. */
void server_engine_free(server_engine *s);

/* Queues a job. HR_ERR_NO_FIT: the queue is full (429); HR_ERR_CANCELLED:
 * the server is stopping (503); HR_ERR_NOMEM. The prompt, the parameters
 * and their stop strings are copied. t_arrival_ms: when the request came in
 * (hr_now_ms's clock), from which time to first token counts. */
hr_status server_engine_submit(server_engine *s, const int32_t *prompt, int32_t n_prompt,
                               const hr_sampling_params *sp, double t_arrival_ms,
                               server_job **out, hr_error *err);

/* What a job has done so far. */
typedef struct {
    hr_finish_reason finish; /* HR_FINISH_NONE while it runs */
    int32_t n_prompt, n_gen;
    bool shutdown;           /* cancelled because the server is stopping */
    hr_status status;        /* HR_OK, or why the engine refused or failed it */
    char error[512];         /* with status != HR_OK, or finish HR_FINISH_ERROR */
} server_job_state;

/* Waits up to timeout_ms for text or the finish, then appends the text
 * produced since the last call to out and fills *st. Returns true when
 * something new came (text or the finish), false on timeout. */
bool server_job_wait(server_job *j, int timeout_ms, server_buf *out, server_job_state *st);
/* The client is gone: stop generating (idempotent; any thread). */
void server_job_cancel(server_job *j);
/* The HTTP side is done with j (NULL is fine). */
void server_job_release(server_job *j);

/* Counters and gauges for /metrics. */
#define SERVER_TTFT_BUCKETS 14
#define SERVER_ITL_BUCKETS 13
extern const double server_ttft_bounds[SERVER_TTFT_BUCKETS]; /* seconds, upper bounds */
extern const double server_itl_bounds[SERVER_ITL_BUCKETS];

typedef struct {
    int32_t running, waiting;       /* requests decoding or prefilling; waiting for a slot */
    hr_engine_stats engine;         /* as of the last step */
    uint64_t generated_tokens;
    uint64_t finished[HR_FINISH_ERROR + 1]; /* by finish reason */
    uint64_t rejected_full;         /* 429s */
    uint64_t ttft_count[SERVER_TTFT_BUCKETS + 1]; /* per bucket, the last one +Inf */
    double ttft_sum;
    uint64_t itl_count[SERVER_ITL_BUCKETS + 1];
    double itl_sum;
} server_metrics;

void server_engine_metrics(server_engine *s, server_metrics *out);

#endif
