/*
 * engine.h — the engine's internals, shared by engine.c (setup and the
 * step), request.c (requests, text, stop strings, hr_generate) and the
 * device glue.
 */
#ifndef HR_ENGINE_ENGINE_H
#define HR_ENGINE_ENGINE_H

#include "backend/backend.h"
#include "backend/registry.h"
#include "engine/sampler.h"
#include "headroom.h"
#include "kv/kv_cache.h"
#include "model/llama.h"

#include <math.h>

#define ENGINE_MAX_STOP 16          /* stop strings per request */
#define ENGINE_MAX_STOP_BYTES 256   /* bytes per stop string */
#define ENGINE_ERROR_BYTES 256      /* an error event's message */

typedef struct {
    int32_t id;
    int32_t seq;          /* sequence slot once admitted, else -1 */
    int32_t *tokens;      /* (n_ctx) prompt then generated */
    int32_t n_tokens;
    int32_t n_prompt;
    int32_t n_cached;     /* tokens whose K/V are in the cache */
    int32_t n_published;  /* full blocks offered to the prefix cache (or found there) */
    uint64_t chain;       /* the chained hash of those blocks (kv_block_hash) */
    int32_t n_step;       /* rows fed in the current step */
    int32_t n_gen;
    int32_t max_new;      /* -1: until the context is full */
    hr_sampling_params params;
    sampler smp;
    hr_detok *detok;
    char *stop[ENGINE_MAX_STOP]; /* owned copies */
    int32_t n_stop;
    int32_t max_stop_len;
    char *hold;           /* decoded text not yet released (may begin a stop string) */
    int32_t hold_len;
    char *out;            /* text released by the last call of engine_request_text */
    int32_t text_cap;     /* bytes of hold and of out */
    bool stopped;         /* a stop string appeared */
    bool cancel;
    bool reported;        /* its finish event went out: drop it */
    hr_finish_reason finish;
} engine_request;

struct hr_engine {
    const hr_model *model;
    const hr_tokenizer *tok;
    hr_engine_params p;           /* as resolved (p.tuning not kept: the caller's) */
    bool no_overlap;              /* hr_tuning's */
    hr_engine_stats stats;        /* counters since create (KV fields filled when read) */
    hr_plan plan;                 /* what was planned (and taken) at create */
    hr_device device;
    const be_device *dev;         /* its entry in the registry (backend/registry.h) */
    int32_t n_ctx;
    hr_backend *be;
    llama *lm;
    kv_cache *kv;
    /* step buffers, sized at create */
    hr_step step;
    int32_t *tokens, *pos, *slot; /* (n_batch) */
    step_segment *segs;           /* (n_batch) */
    int32_t *out_rows, *out_req;  /* (max_out) */
    int32_t max_out;
    float *logits;                /* (max_out, V) */
    sampler_cand *cand;           /* (V) */
    be_sample *samples;           /* (max_out) device sampling parameters */
    int32_t *out_tokens;          /* (max_out) tokens the device sampled */
    char *text;                   /* event text of the current step */
    char *errors;                 /* (max_out, ENGINE_ERROR_BYTES) error events' messages */
    size_t text_len, text_cap;
    int32_t max_piece;
    /* requests, in arrival order */
    engine_request **reqs;
    int32_t n_reqs, cap_reqs;
    int32_t next_id;
    /* overlap (engine.c, "the step"): the request whose chained step is
     * queued and not yet waited for (-1: none), or a queued step to wait
     * for and drop (its request finished before it) */
    int32_t ahead_req;
    bool ahead_drop;
    int64_t n_chained; /* chained steps queued (tests) */
};

/* Device choice, KV type, thread count: the defaults that depend on the
 * machine and the model. n_ctx stays as given (0: the planner picks).
 * need_device false lets a plan name cuda on a machine without a GPU. */
/* The cores this process may run on (its affinity mask). */
int32_t engine_cores(void);
hr_status engine_resolve(const hr_model *m, const hr_engine_params *params, bool need_device,
                         hr_engine_params *out, hr_error *err);
/* The backend configuration of resolved parameters (n_ctx > 0): what both
 * hr_engine_create and the planner use. */
void engine_config(const hr_model *m, const hr_engine_params *p, be_config *cfg, be_params *bp);
engine_request *engine_find(hr_engine *e, int32_t id);
/* hr_generate from token ids: the request alone on the engine, its text
 * streamed; the generated ids (up to out_cap, the end-of-generation one
 * included) go to out when it is not NULL. */
hr_status engine_generate_ids(hr_engine *e, const int32_t *ids, int32_t n,
                              const hr_sampling_params *params, hr_text_fn on_text,
                              void *user_data, int32_t *out, int32_t out_cap, int32_t *n_out,
                              hr_generation_stats *stats, hr_error *err);
bool engine_is_eos(const hr_engine *e, int32_t token);
void engine_request_free(engine_request *r);
/* Feeds token's text (token -1: none) through the UTF-8 stream and the
 * stop-string check; flush releases everything held. Returns the number of
 * bytes released into r->out; sets r->stopped when a stop string appears
 * (the stop string and what follows are dropped). */
int32_t engine_request_text(engine_request *r, int32_t token, bool flush);

/* The process's resident bytes (host.c). */
uint64_t engine_host_rss(void);

#endif
