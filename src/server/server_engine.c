/*
 * server_engine.c — the engine thread: takes queued jobs into the engine,
 * steps it, and routes each event to its job's channel.
 *
 * One lock (s->mu) covers the queue, every job's channel and the metrics;
 * the engine itself is touched by this thread alone, and the step runs with
 * the lock released, so HTTP threads submit, read and cancel while it
 * computes. Per-step work under the lock is copying each event's text (valid
 * only until the next step) into its job's buffer and signalling the job's
 * condition variable: microseconds against a step's milliseconds, so one
 * lock does not contend (a lock per job was rejected: nothing gained, and a
 * lock order to keep).
 *
 * The engine holds at most `parallel` requests (its sequence count): the
 * rest wait here, in arrival order, bounded by queue_max (the 429 limit).
 * So "running" and "waiting" are exact: what the engine holds, and this
 * queue. A request refused by hr_engine_add (which the HTTP side's checks
 * make rare: prompt and max_tokens are checked against the context before
 * submitting) ends its job with the engine's message.
 *
 * Idle, the thread sleeps on s->work (no polling); a submit, a cancel or a
 * stop signals it.
 */
#include "util/clock.h"
#include "server/server_engine.h"

#include "util/alloc.h"
#include "util/log.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

const double server_ttft_bounds[SERVER_TTFT_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                        0.5,   1,    2.5,   5,    10,  30,
                                                        60,    120};
const double server_itl_bounds[SERVER_ITL_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025,
                                                      0.05,  0.075,  0.1,   0.25, 0.5,
                                                      1,     2.5,    5};

struct server_job {
    /* set at submit, read by the engine thread */
    int32_t *prompt;
    int32_t n_prompt;
    hr_sampling_params sp;
    char *stop[SERVER_MAX_STOP]; /* owned copies; sp.stop points here when added */
    double t_arrival, t_last;    /* ms */
    /* under s->mu */
    server_engine *s;
    pthread_cond_t cv;   /* new text or the finish */
    server_buf text;     /* produced, not yet read */
    server_job_state st;
    int32_t id;          /* the engine's request id; -1 before it is added */
    bool queued, cancel, cancel_sent;
    int refs;            /* the HTTP side, the engine thread */
    server_job *prev, *next; /* the queue */
};

struct server_engine {
    hr_engine *e;
    server_engine_params p;
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t work;
    server_job *head, *tail;
    int32_t n_queued;
    server_job **active; /* in the engine, p.parallel at most */
    int32_t n_active;
    int32_t n_adding;    /* taken from the queue, being added (lock released) */
    bool stopping, cancel_running;
    server_metrics m;
    hr_event *events;
    int32_t cap_events;
    char step_error[512]; /* the last failed step's message, for its requests */
};


/* ---------------------------------------------------------------- jobs */

static void job_free(server_job *j) {
    hr_free(j->prompt);
    for (int32_t i = 0; i < SERVER_MAX_STOP; i++)
        hr_free(j->stop[i]);
    server_buf_free(&j->text);
    pthread_cond_destroy(&j->cv);
    hr_free(j);
}

/* Under the lock. */
static void job_unref(server_job *j) {
    if (--j->refs == 0)
        job_free(j);
}

static void unlink_queued(server_engine *s, server_job *j) {
    if (j->prev)
        j->prev->next = j->next;
    else
        s->head = j->next;
    if (j->next)
        j->next->prev = j->prev;
    else
        s->tail = j->prev;
    j->prev = j->next = NULL;
    j->queued = false;
    s->n_queued--;
}

/* Ends j from this side (never reached the engine, or finished there);
 * drops the engine thread's reference. Under the lock. */
static void job_end(server_engine *s, server_job *j, hr_finish_reason why) {
    j->st.finish = why;
    s->m.finished[why]++;
    pthread_cond_broadcast(&j->cv);
    job_unref(j);
}

/* ---------------------------------------------------------------- the thread */

static void add_to_engine(server_engine *s, server_job *j) {
    hr_error err = {0};
    int32_t id = -1;
    j->sp.stop = (const char *const *)j->stop;
    s->n_adding++; /* counted against the limit while the lock is down */
    pthread_mutex_unlock(&s->mu);
    hr_status st = hr_engine_add(s->e, j->prompt, j->n_prompt, &j->sp, &id, &err);
    pthread_mutex_lock(&s->mu);
    s->n_adding--;
    if (st != HR_OK) {
        j->st.status = st;
        snprintf(j->st.error, sizeof j->st.error, "%s", err.msg);
        job_end(s, j, HR_FINISH_ERROR);
        return;
    }
    j->id = id;
    if (s->stopping && s->cancel_running) { /* the stop came while it was being added */
        j->cancel = true;
        j->st.shutdown = true;
    }
    s->active[s->n_active++] = j;
}

static void route(server_engine *s, const hr_event *ev, double t) {
    int32_t k = 0;
    while (k < s->n_active && s->active[k]->id != ev->id)
        k++;
    if (k == s->n_active)
        return; /* not ours: cannot happen, the engine runs only our jobs */
    server_job *j = s->active[k];
    if (ev->token >= 0) {
        double gap = (t - (j->st.n_gen == 0 ? j->t_arrival : j->t_last)) / 1e3;
        if (j->st.n_gen == 0) {
            int b = 0;
            while (b < SERVER_TTFT_BUCKETS && gap > server_ttft_bounds[b])
                b++;
            s->m.ttft_count[b]++;
            s->m.ttft_sum += gap;
        } else {
            int b = 0;
            while (b < SERVER_ITL_BUCKETS && gap > server_itl_bounds[b])
                b++;
            s->m.itl_count[b]++;
            s->m.itl_sum += gap;
        }
        j->t_last = t;
        j->st.n_gen++;
        s->m.generated_tokens++;
    }
    if (ev->text_len > 0)
        server_buf_append(&j->text, ev->text, (size_t)ev->text_len);
    if (ev->finish == HR_FINISH_NONE) {
        pthread_cond_broadcast(&j->cv);
        return;
    }
    if (ev->finish == HR_FINISH_ERROR)
        snprintf(j->st.error, sizeof j->st.error, "%s",
                 ev->error ? ev->error : s->step_error[0] ? s->step_error : "the step failed");
    s->active[k] = s->active[--s->n_active];
    job_end(s, j, ev->finish);
}

static void *engine_main(void *arg) {
    server_engine *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        for (int32_t i = 0; i < s->n_active; i++) {
            server_job *j = s->active[i];
            if (j->cancel && !j->cancel_sent) {
                hr_engine_cancel(s->e, j->id); /* reported, and its blocks freed, next step */
                j->cancel_sent = true;
            }
        }
        while (s->head && s->n_active < s->p.parallel) {
            server_job *j = s->head;
            unlink_queued(s, j);
            add_to_engine(s, j);
        }
        if (s->n_active == 0) {
            if (s->stopping && !s->head)
                break;
            pthread_cond_wait(&s->work, &s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        hr_error err = {0};
        int32_t n = 0;
        hr_status st = hr_engine_step(s->e, s->events, s->cap_events, &n, &err);
        if (st != HR_OK) /* the requests in the step end with HR_FINISH_ERROR; others go on */
            HR_LOG_W("serve: a step failed: %s", err.msg);
        double t = hr_now_ms();
        pthread_mutex_lock(&s->mu);
        if (st != HR_OK)
            snprintf(s->step_error, sizeof s->step_error, "%s", err.msg);
        /* events written before a failure are valid: finishes reported */
        for (int32_t i = 0; i < n; i++)
            route(s, &s->events[i], t);
        hr_engine_get_stats(s->e, &s->m.engine);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---------------------------------------------------------------- the API */

hr_status server_engine_start(hr_engine *e, const server_engine_params *p,
                              server_engine **out, hr_error *err) {
    if (p->parallel < 1 || p->queue_max < 0)
        return hr_err_set(err, HR_ERR_INVALID, "serve: parallel %d, queue %d", p->parallel,
                          p->queue_max);
    server_engine *s = hr_calloc(1, sizeof *s);
    if (!s)
        return hr_err_set(err, HR_ERR_NOMEM, "serve: out of memory");
    s->e = e;
    s->p = *p;
    /* every request the engine holds may report, and each running one
     * produce a token, in one step */
    s->cap_events = 2 * p->parallel + 4;
    s->events = hr_calloc((size_t)s->cap_events, sizeof *s->events);
    s->active = hr_calloc((size_t)p->parallel, sizeof *s->active);
    if (!s->events || !s->active) {
        hr_free(s->events);
        hr_free(s->active);
        hr_free(s);
        return hr_err_set(err, HR_ERR_NOMEM, "serve: out of memory");
    }
    hr_engine_get_stats(e, &s->m.engine);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    int rc = pthread_create(&s->thread, NULL, engine_main, s);
    if (rc != 0) {
        server_engine_free(s);
        return hr_err_set(err, HR_ERR_NOMEM, "serve: cannot start the engine thread (%s)",
                          strerror(rc));
    }
    s->started = true;
    *out = s;
    return HR_OK;
}

void server_engine_stop(server_engine *s, bool cancel_running, int32_t *n_running,
                        int32_t *n_queued) {
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    s->cancel_running = cancel_running;
    if (n_running)
        *n_running = s->n_active + s->n_adding;
    if (n_queued)
        *n_queued = s->n_queued;
    while (s->head) {
        server_job *j = s->head;
        unlink_queued(s, j);
        j->st.shutdown = true;
        j->st.status = HR_ERR_CANCELLED;
        snprintf(j->st.error, sizeof j->st.error, "the server is shutting down");
        job_end(s, j, HR_FINISH_CANCELLED);
    }
    if (cancel_running)
        for (int32_t i = 0; i < s->n_active; i++) {
            s->active[i]->cancel = true;
            s->active[i]->st.shutdown = true;
        }
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    if (s->started) {
        pthread_join(s->thread, NULL);
        s->started = false;
    }
}

void server_engine_free(server_engine *s) {
    if (!s)
        return;
    if (s->started)
        server_engine_stop(s, true, NULL, NULL);
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->mu);
    hr_free(s->events);
    hr_free(s->active);
    hr_free(s);
}

hr_status server_engine_submit(server_engine *s, const int32_t *prompt, int32_t n_prompt,
                               const hr_sampling_params *sp, double t_arrival_ms,
                               server_job **out, hr_error *err) {
    if (sp->n_stop < 0 || sp->n_stop > SERVER_MAX_STOP || n_prompt < 1)
        return hr_err_set(err, HR_ERR_INVALID, "serve: %d stop strings, %d prompt tokens",
                          sp->n_stop, n_prompt);
    server_job *j = hr_calloc(1, sizeof *j);
    if (!j)
        return hr_err_set(err, HR_ERR_NOMEM, "serve: out of memory");
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* timed waits immune to clock changes */
    pthread_cond_init(&j->cv, &ca);
    pthread_condattr_destroy(&ca);
    j->s = s;
    j->id = -1;
    j->refs = 2;
    j->sp = *sp;
    j->sp.stop = NULL;
    j->n_prompt = n_prompt;
    j->t_arrival = t_arrival_ms;
    j->st.n_prompt = n_prompt;
    bool ok = (j->prompt = hr_malloc((size_t)n_prompt * sizeof(int32_t))) != NULL;
    if (ok)
        memcpy(j->prompt, prompt, (size_t)n_prompt * sizeof(int32_t));
    for (int32_t i = 0; ok && i < sp->n_stop; i++)
        ok = (j->stop[i] = hr_strdup(sp->stop[i])) != NULL;
    if (!ok) {
        job_free(j);
        return hr_err_set(err, HR_ERR_NOMEM, "serve: out of memory");
    }
    pthread_mutex_lock(&s->mu);
    hr_status st = HR_OK;
    if (s->stopping) {
        st = hr_err_set(err, HR_ERR_CANCELLED, "the server is shutting down");
    } else if (s->n_queued + s->n_active + s->n_adding >= s->p.parallel + s->p.queue_max) {
        s->m.rejected_full++;
        st = hr_err_set(err, HR_ERR_NO_FIT,
                        "the server is busy: %d requests running and %d waiting (--queue %d); "
                        "try again shortly",
                        s->n_active + s->n_adding, s->n_queued, s->p.queue_max);
    } else {
        j->queued = true;
        j->prev = s->tail;
        if (s->tail)
            s->tail->next = j;
        else
            s->head = j;
        s->tail = j;
        s->n_queued++;
        pthread_cond_signal(&s->work);
    }
    pthread_mutex_unlock(&s->mu);
    if (st != HR_OK) {
        job_free(j);
        return st;
    }
    *out = j;
    return HR_OK;
}

bool server_job_wait(server_job *j, int timeout_ms, server_buf *out, server_job_state *st) {
    server_engine *s = j->s;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->mu);
    while (j->text.len == 0 && j->st.finish == HR_FINISH_NONE)
        if (pthread_cond_timedwait(&j->cv, &s->mu, &until) == ETIMEDOUT)
            break;
    bool news = j->text.len > 0 || j->st.finish != HR_FINISH_NONE;
    if (j->text.len > 0) {
        server_buf_append(out, j->text.p, j->text.len);
        j->text.len = 0;
    }
    *st = j->st;
    pthread_mutex_unlock(&s->mu);
    return news;
}

void server_job_cancel(server_job *j) {
    server_engine *s = j->s;
    pthread_mutex_lock(&s->mu);
    if (j->st.finish == HR_FINISH_NONE && !j->cancel) {
        j->cancel = true;
        if (j->queued) { /* never reached the engine: end it here */
            unlink_queued(s, j);
            job_end(s, j, HR_FINISH_CANCELLED);
        } else {
            pthread_cond_signal(&s->work);
        }
    }
    pthread_mutex_unlock(&s->mu);
}

void server_job_release(server_job *j) {
    if (!j)
        return;
    server_engine *s = j->s;
    pthread_mutex_lock(&s->mu);
    job_unref(j);
    pthread_mutex_unlock(&s->mu);
}

void server_engine_metrics(server_engine *s, server_metrics *out) {
    pthread_mutex_lock(&s->mu);
    *out = s->m;
    out->running = s->n_active + s->n_adding;
    out->waiting = s->n_queued;
    pthread_mutex_unlock(&s->mu);
}
