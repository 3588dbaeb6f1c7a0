/*
 * engine.c — requests in, tokens out: admission, the batched step, sampling,
 * stop rules and streaming text.
 *
 * Every request is a list of tokens (prompt, then generated) of which the
 * first n_cached are in the KV cache. A step feeds each running request the
 * tokens it has not cached yet: one for a decoding request, a chunk of the
 * prompt for a prefilling one, up to n_batch rows in all (decode rows first,
 * so generation never stalls behind a long prompt). The row that completes a
 * request's tokens asks for logits; the sampler turns them into the next
 * token. That is continuous batching: requests join and leave at any step.
 *
 * Memory: everything a step touches is allocated in hr_engine_create (step
 * arrays, logits, sampler scratch, event text) or in hr_engine_add (the
 * request's token list, sized to the context). A step allocates nothing.
 *
 * KV admission: a request is admitted when a sequence slot is free and the
 * pool has blocks for its prompt plus max_tokens (capped at the context);
 * those blocks are reserved then, so generation can never run out of KV
 * memory halfway. A request that could never fit is refused by hr_engine_add.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "util/clock.h"
#include "engine/engine.h"

#include "backend/registry.h"
#include "backend/sizes.h"
#include "model/llama.h"
#include "model/model.h"
#include "util/alloc.h"
#include "util/dtype.h"
#include "util/log.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


hr_engine_params hr_engine_params_default(void) {
    return (hr_engine_params){.device = HR_DEVICE_AUTO,
                              .n_threads = 0,
                              .adapt_threads = true,
                              .n_ctx = 0,
                              .n_seq_max = 1,
                              .n_batch = 512,
                              .kv_block_size = 16,
                              .kv_dtype = HR_DTYPE_COUNT,
                              .kv_dtype_v = HR_DTYPE_COUNT,
                              .dtype = HR_DTYPE_BF16,
                              .prefix_cache = true};
}

/* The one set of sampling defaults (run and every front end take these):
 * llama.cpp's, which people compare against. */
hr_sampling_params hr_sampling_params_default(void) {
    return (hr_sampling_params){.temperature = 0.8f,
                                .top_k = 40,
                                .top_p = 0.95f,
                                .min_p = 0.05f,
                                .repeat_penalty = 1.0f,
                                .repeat_last_n = 64,
                                .seed = 0,
                                .max_tokens = 256};
}

hr_sampling_params hr_sampling_params_greedy(void) {
    hr_sampling_params p = hr_sampling_params_default();
    p.temperature = 0.0f; /* the argmax: the filters below no longer matter */
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    return p;
}

const char *hr_finish_reason_name(hr_finish_reason r) {
    switch (r) {
    case HR_FINISH_NONE: return "none";
    case HR_FINISH_EOS: return "eos";
    case HR_FINISH_LENGTH: return "length";
    case HR_FINISH_STOP: return "stop";
    case HR_FINISH_CONTEXT: return "context";
    case HR_FINISH_CANCELLED: return "cancelled";
    case HR_FINISH_ERROR: return "error";
    }
    return "unknown";
}

/* ---------------------------------------------------------------- setup */

void hr_engine_free(hr_engine *e) {
    if (!e)
        return;
    for (int32_t i = 0; i < e->n_reqs; i++)
        engine_request_free(e->reqs[i]);
    hr_free(e->reqs);
    llama_free(e->lm);
    if (e->be)
        e->be->ops->free(e->be);
    kv_free(e->kv);
    hr_free(e->tokens);
    hr_free(e->pos);
    hr_free(e->slot);
    hr_free(e->segs);
    hr_free(e->out_rows);
    hr_free(e->out_req);
    hr_free(e->logits);
    hr_free(e->errors);
    hr_free(e->cand);
    hr_free(e->samples);
    hr_free(e->out_tokens);
    hr_free(e->text);
    hr_free(e);
}

/* The longest text one token can decode to (plus what the streaming
 * detokenizer may hold back), so event text buffers are sized once. */
static int32_t longest_piece(const hr_tokenizer *tok) {
    if (!tok) /* a synthetic model: ids only, no text */
        return 32;
    int32_t n_vocab = hr_tokenizer_n_vocab(tok), longest = 0;
    char buf[8];
    for (int32_t id = 0; id < n_vocab; id++) {
        int32_t n = hr_token_to_piece(tok, id, true, buf, (int32_t)sizeof buf);
        n = n < 0 ? -n : n;
        longest = n > longest ? n : longest;
    }
    return 3 * (longest + 3); /* invalid bytes come out as 3-byte U+FFFD */
}

/* Fills in the defaults that depend on the device and the model: the
 * device, the KV type, the thread count. n_ctx stays 0 (the planner picks). */
int32_t engine_cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return (int32_t)CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int32_t)n : 1;
}

/* The KV types, once resolved: ones the device stores, a head size the
 * block types divide, and on cuda one type for K and V (its kernels read
 * one). A plan for the GPU refuses them too, before anything is loaded. */
static hr_status check_kv_types(const hr_model *m, const hr_engine_params *p, hr_error *err) {
    const bool cuda = p->device == HR_DEVICE_CUDA;
    const hr_dtype kv[2] = {p->kv_dtype, p->kv_dtype_v};
    for (int i = 0; i < 2; i++) {
        const hr_dtype t = kv[i];
        const char *which = i == 0 ? "K" : "V";
        if ((int)t < 0 || t >= HR_DTYPE_COUNT)
            return hr_err_set(err, HR_ERR_INVALID, "engine: %s cache type %d is not a dtype",
                              which, (int)t);
        if (cuda && t == HR_DTYPE_Q4_0)
            return hr_err_set(err, HR_ERR_UNSUPPORTED,
                              "cuda: KV type %s is not implemented on the GPU yet; "
                              "--kv-dtype q8_0 or the compute type",
                              hr_dtype_name(t));
        if (!sizes_kv_type_ok(cuda ? SIZES_CUDA : SIZES_CPU, t))
            return hr_err_set(err, HR_ERR_INVALID,
                              "engine: %s cache type %s: the KV cache holds f32, f16, bf16, "
                              "q8_0 or q4_0",
                              which, hr_dtype_name(t));
        const int32_t blk = hr_dtype_table[t].block_elems;
        if (m->info.head_dim % blk != 0)
            return hr_err_set(err, HR_ERR_UNSUPPORTED,
                              "engine: KV type %s stores blocks of %d values, and %s's head "
                              "size %d is not a multiple of %d; --kv-dtype f16|bf16",
                              hr_dtype_name(t), blk, m->path, m->info.head_dim, blk);
    }
    if (cuda && p->kv_dtype_v != p->kv_dtype)
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "cuda: K and V in different types (%s:%s) are not implemented on "
                          "the GPU yet",
                          hr_dtype_name(p->kv_dtype), hr_dtype_name(p->kv_dtype_v));
    return HR_OK;
}

hr_status engine_resolve(const hr_model *m, const hr_engine_params *params, bool need_device,
                         hr_engine_params *out, hr_error *err) {
    hr_engine_params p = params ? *params : hr_engine_params_default();
    if (!m->layers)
        return hr_err_set(err, HR_ERR_INVALID, "%s: loaded without its tensors (vocab only)",
                          m->path);
    if (p.n_ctx < 0 || p.n_seq_max <= 0 || p.n_batch <= 0 || p.kv_block_size <= 0 ||
        p.n_ctx > (1 << 24) || p.n_seq_max > 4096 || p.kv_block_size > 4096 ||
        p.n_batch > (1 << 20))
        return hr_err_set(err, HR_ERR_INVALID,
                          "engine: bad parameters (ctx %d, sequences %d, batch %d, block %d)",
                          p.n_ctx, p.n_seq_max, p.n_batch, p.kv_block_size);
    if (p.dtype != HR_DTYPE_BF16 && p.dtype != HR_DTYPE_F16)
        return hr_err_set(err, HR_ERR_INVALID, "engine: compute type %s (bf16 or f16)",
                          hr_dtype_name(p.dtype));
    if (need_device || p.device == HR_DEVICE_AUTO) {
        const be_device *dev;
        HR_TRY(backend_pick(p.device, &dev, err));
        p.device = dev->device;
    }
    if (p.kv_dtype == HR_DTYPE_COUNT)
        p.kv_dtype = p.device == HR_DEVICE_CUDA ? p.dtype : HR_DTYPE_F32;
    if (p.kv_dtype_v == HR_DTYPE_COUNT)
        p.kv_dtype_v = p.kv_dtype;
    HR_TRY(check_kv_types(m, &p, err));
    /* more threads than the cores this process may run on only wait for
     * each other (each step's work is split evenly): clamped */
    const int32_t cores = engine_cores();
    if (p.n_threads > 0)
        p.adapt_threads = false;
    if (p.n_threads <= 0) {
        p.n_threads = cores;
    } else if (p.n_threads > cores) {
        HR_LOG_W("%d threads asked for, but this process may run on %d core%s: using %d",
                 p.n_threads, cores, cores == 1 ? "" : "s", cores);
        p.n_threads = cores;
    }
    *out = p;
    return HR_OK;
}

void engine_config(const hr_model *m, const hr_engine_params *p, be_config *cfg,
                   be_params *bp) {
    const int32_t max_blocks = (p->n_ctx + p->kv_block_size - 1) / p->kv_block_size;
    *cfg = (be_config){.max_rows = p->n_batch,
                       .max_out = p->logits_all ? p->n_batch : p->n_seq_max,
                       .n_seq_max = p->n_seq_max,
                       .max_blocks_per_seq = max_blocks,
                       .n_block = max_blocks * p->n_seq_max,
                       .block_size = p->kv_block_size,
                       .kv_dtype = p->kv_dtype,
                       .kv_dtype_v = p->kv_dtype_v,
                       .rope_inv_freq = m->rope_inv_freq};
    *bp = (be_params){.n_threads = p->n_threads,
                      .adapt_threads = p->adapt_threads,
                      .exact_matmul = p->exact_matmul,
                      .compute = p->dtype,
                      .tuning = p->tuning ? *p->tuning : hr_tuning_default(),
                      .expand_weights = p->expand_weights,
                      .progress = p->progress};
    /* cpu: the matrices leave the file mapping for huge-page memory, unless
     * asked not to (a synthetic model's weights are its own memory already) */
    if (p->device == HR_DEVICE_CPU && !p->use_mmap && (m->gguf != NULL || m->st != NULL))
        bp->weight_copy_bytes = llama_weight_copy_bytes(m);
    bp->weights_in_huge_pages = m->synthetic_data != NULL;
    bp->packed = p->device == HR_DEVICE_CUDA && llama_packed_weights(m, bp);
}

static const char *gib(uint64_t n, char *buf, size_t cap) {
    snprintf(buf, cap, "%.2f GiB", (double)n / (double)(1ull << 30));
    return buf;
}

hr_status hr_engine_create(const hr_model *m, const hr_engine_params *params, hr_engine **out,
                           hr_error *err) {
    const hr_model_info *in = &m->info;
    hr_engine_params p;
    HR_TRY(engine_resolve(m, params, true, &p, err));
    if (p.n_ctx > in->n_ctx_train)
        HR_LOG_W("context %d is longer than the model was trained for (%d): expect the text "
                 "to degrade past %d tokens",
                 p.n_ctx, in->n_ctx_train, in->n_ctx_train);

    /* the plan first: refused here, before a byte is allocated, if it does
     * not fit; with no --ctx, the largest context that fits */
    hr_plan plan;
    HR_TRY(hr_plan_compute(m, &p, &plan, err));
    char b[5][32];
    if (p.n_ctx == 0) {
        if (plan.fits)
            HR_LOG_I("context: %d tokens, the most that fits in %s%s", plan.n_ctx,
                     gib(plan.budget, b[0], 32),
                     plan.n_ctx == in->n_ctx_train ? " (the model's own limit)" : "");
        p.n_ctx = plan.n_ctx;
    }
    if (!plan.fits) {
        char hint[256] = "";
        if (plan.fit_max_ctx > 0)
            snprintf(hint, sizeof hint, "; --ctx %d fits", plan.fit_max_ctx);
        else if (plan.fit_max_parallel > 0)
            snprintf(hint, sizeof hint, "; --parallel %d fits", plan.fit_max_parallel);
        return hr_err_set(err, HR_ERR_NO_FIT,
                          "planning (before loading weights): %s needed, budget %s: weights %s, "
                          "KV cache %s (%d x %d tokens), the rest %s%s",
                          gib(plan.total, b[0], 32), gib(plan.budget, b[1], 32),
                          gib(plan.weights + plan.weights_mapped, b[2], 32),
                          gib(plan.kv, b[3], 32), p.n_seq_max, p.n_ctx,
                          gib(plan.total - plan.weights - plan.weights_mapped - plan.kv, b[4],
                              32),
                          hint);
    }
    hr_device dev = p.device;
    be_config cfg;
    be_params bp;
    engine_config(m, &p, &cfg, &bp);
    /* the backend takes what the plan says and not a byte more */
    if (dev == HR_DEVICE_CUDA)
        bp.arena_bytes = plan.weights + plan.kv + plan.activations + plan.workspace;
    else
        bp.host_cap = plan.weights + plan.kv + plan.activations + plan.workspace;

    hr_engine *e = hr_calloc(1, sizeof *e);
    if (!e)
        return hr_err_set(err, HR_ERR_NOMEM, "engine: out of memory");
    e->ahead_req = -1;
    e->model = m;
    e->tok = m->tok;
    e->p = p;
    e->p.tuning = NULL; /* the caller's; the engine keeps no_overlap, the backend the rest */
    e->no_overlap = bp.tuning.no_overlap;
    e->plan = plan;
    e->n_ctx = p.n_ctx;
    e->device = dev;
    e->dev = backend_device(dev);
    hr_status s;
    const int32_t max_blocks = cfg.max_blocks_per_seq;
    const int32_t max_rows = cfg.max_rows;
    const int32_t max_out = cfg.max_out;
    if ((s = e->dev->create(in, &bp, &e->be, err)) != HR_OK)
        goto fail;
    if ((s = llama_create(m, e->be, &cfg, &e->lm, err)) != HR_OK)
        goto fail;
    if ((s = kv_create(cfg.n_block, cfg.block_size, cfg.n_seq_max, max_blocks, p.prefix_cache,
                       &e->kv, err)) !=
        HR_OK)
        goto fail;

    e->max_piece = longest_piece(e->tok);
    e->text_cap = (size_t)p.n_seq_max * ((size_t)e->max_piece + ENGINE_MAX_STOP_BYTES + 64);
    e->tokens = hr_calloc((size_t)max_rows, sizeof(int32_t));
    e->pos = hr_calloc((size_t)max_rows, sizeof(int32_t));
    e->slot = hr_calloc((size_t)max_rows, sizeof(int32_t));
    e->segs = hr_calloc((size_t)max_rows, sizeof(step_segment));
    e->out_rows = hr_calloc((size_t)max_out, sizeof(int32_t));
    e->out_req = hr_calloc((size_t)max_out, sizeof(int32_t));
    e->logits = hr_calloc((size_t)max_out * (size_t)in->n_vocab, sizeof(float));
    e->cand = hr_calloc((size_t)in->n_vocab, sizeof(sampler_cand));
    e->samples = hr_calloc((size_t)max_out, sizeof(be_sample));
    e->out_tokens = hr_calloc((size_t)max_out, sizeof(int32_t));
    e->text = hr_malloc(e->text_cap);
    e->errors = hr_calloc((size_t)max_out, ENGINE_ERROR_BYTES);
    e->cap_reqs = p.n_seq_max * 4 + 16;
    e->reqs = hr_calloc((size_t)e->cap_reqs, sizeof *e->reqs);
    if (!e->tokens || !e->pos || !e->slot || !e->segs || !e->out_rows || !e->out_req ||
        !e->logits || !e->cand || !e->text || !e->reqs || !e->samples || !e->out_tokens ||
        !e->errors) {
        s = hr_err_set(err, HR_ERR_NOMEM, "engine: out of memory for step buffers");
        goto fail;
    }
    e->max_out = max_out;
    *out = e;
    return HR_OK;
fail:
    hr_engine_free(e);
    return s;
}

int32_t hr_engine_n_ctx(const hr_engine *e) { return e->n_ctx; }

const char *hr_engine_device_name(const hr_engine *e) {
    return e->device == HR_DEVICE_CUDA ? "cuda" : "cpu";
}

const char *hr_engine_device_desc(const hr_engine *e) { return e->dev->describe(); }

const char *hr_engine_device_path(const hr_engine *e) { return e->dev->path(); }

void hr_engine_plan(const hr_engine *e, hr_plan *out) { *out = e->plan; }

void hr_engine_memory(const hr_engine *e, hr_memory_report *out) {
    be_memory m = {0};
    e->be->ops->memory(e->be, &m);
    *out = (hr_memory_report){.weights = m.weights,
                              .kv = m.kv,
                              .activations = m.activations,
                              .workspace = m.workspace,
                              .graphs = m.graphs,
                              .runtime = m.runtime,
                              .device_total = m.device_total,
                              .device_free = m.device_free,
                              .upload_seconds = m.upload_seconds,
                              .upload_bytes = m.weights,
                              .host_rss = engine_host_rss()};
    out->total = m.weights + m.kv + m.activations + m.workspace + m.graphs + m.runtime;
}

int32_t hr_engine_n_active(const hr_engine *e) { return e->n_reqs; }

void hr_engine_get_stats(const hr_engine *e, hr_engine_stats *out) {
    *out = e->stats;
    out->kv_blocks = e->kv->n_block;
    out->kv_blocks_free = e->kv->n_free;
    out->kv_blocks_cached = e->kv->n_idle;
    out->kv_block_size = e->kv->block_size;
}

/* ---------------------------------------------------------------- the step */

/* Admits waiting requests in arrival order while a slot and their KV blocks
 * are free. Stops at the first that does not fit, so none is overtaken. The
 * prompt's longest prefix in the prefix cache is attached, not prefilled. */
static void admit(hr_engine *e) {
    for (int32_t i = 0; i < e->n_reqs; i++) {
        engine_request *r = e->reqs[i];
        if (r->seq >= 0 || r->finish != HR_FINISH_NONE)
            continue;
        int32_t need = r->n_prompt + (r->max_new < 0 ? e->n_ctx : r->max_new);
        need = need > e->n_ctx ? e->n_ctx : need;
        int32_t seq = kv_seq_acquire(e->kv);
        if (seq < 0)
            return;
        uint64_t chain;
        const int32_t hit = kv_seq_match(e->kv, seq, r->tokens, r->n_prompt, &chain);
        if (kv_seq_reserve(e->kv, seq, need, NULL) != HR_OK) {
            kv_seq_release(e->kv, seq); /* the matched blocks go back to the idle list */
            return;
        }
        r->seq = seq;
        r->n_cached = hit;
        r->n_published = hit / e->kv->block_size;
        r->chain = chain;
        e->stats.prompt_tokens += (uint64_t)r->n_prompt;
        e->stats.prefix_hit_tokens += (uint64_t)hit;
    }
}

/* Offers r's blocks that its cached tokens now fill to the prefix cache. */
static void publish(hr_engine *e, engine_request *r) {
    const int32_t BS = e->kv->block_size;
    if (!e->kv->prefix || r->seq < 0)
        return;
    while ((r->n_published + 1) * BS <= r->n_cached) {
        const int32_t *t = r->tokens + (int64_t)r->n_published * BS;
        r->chain = kv_block_hash(r->chain, t, BS);
        kv_seq_publish(e->kv, r->seq, r->n_published, r->chain, t);
        r->n_published++;
    }
}

/* Appends rows feeding request r's uncached tokens (at most budget). */
static int32_t add_rows(hr_engine *e, engine_request *r, int32_t budget, bool all_logits) {
    int32_t todo = r->n_tokens - r->n_cached;
    int32_t n = todo < budget ? todo : budget;
    if (n <= 0)
        return 0;
    int32_t row0 = e->step.n_rows;
    for (int32_t i = 0; i < n; i++) {
        int32_t pos = r->n_cached + i;
        e->tokens[row0 + i] = r->tokens[pos];
        e->pos[row0 + i] = pos;
        e->slot[row0 + i] = kv_slot(e->kv, r->seq, pos);
    }
    e->segs[e->step.n_seg++] = (step_segment){.seq = r->seq, .pos0 = r->n_cached, .n = n,
                                              .row0 = row0};
    e->step.n_rows += n;
    if (all_logits) {
        for (int32_t i = 0; i < n; i++) {
            e->out_req[e->step.n_out] = -1;
            e->out_rows[e->step.n_out++] = row0 + i;
        }
    } else if (n == todo && r->max_new != 0) { /* the chunk reaches the last token: sample
                                                  after it (max_tokens 0: prefill only) */
        e->out_req[e->step.n_out] = r->id;
        e->out_rows[e->step.n_out++] = row0 + n - 1;
    }
    r->n_step = n;
    return n;
}

static void begin_build(hr_engine *e) {
    e->step = (hr_step){.tokens = e->tokens,
                        .pos = e->pos,
                        .slot = e->slot,
                        .segs = e->segs,
                        .block_tables = e->kv->block_tables,
                        .out_rows = e->out_rows};
}

/* Text for an event: the request's newly released bytes, copied into the
 * step's text buffer. */
static const char *push_text(hr_engine *e, const char *s, int32_t n) {
    if (n <= 0)
        return "";
    HR_ASSERT(e->text_len + (size_t)n <= e->text_cap);
    char *dst = e->text + e->text_len;
    memcpy(dst, s, (size_t)n);
    e->text_len += (size_t)n;
    return dst;
}

static void finish(hr_engine *e, engine_request *r, hr_finish_reason why) {
    if (r->finish != HR_FINISH_NONE)
        return;
    r->finish = why;
    if (r->seq >= 0) {
        kv_seq_release(e->kv, r->seq);
        r->seq = -1;
    }
}

/* Takes the sampled token into the request: stop rules, text, event. */
static void accept_token(hr_engine *e, engine_request *r, int32_t token, hr_event *ev) {
    ev->id = r->id;
    ev->token = token;
    ev->text = "";
    ev->text_len = 0;
    r->tokens[r->n_tokens++] = token;
    r->n_gen++;
    sampler_accept(&r->smp, token);
    bool eog = !r->params.ignore_eos && engine_is_eos(e, token);
    if (!eog) {
        int32_t n = engine_request_text(r, token, false);
        ev->text = push_text(e, r->out, n);
        ev->text_len = n;
    }
    if (eog)
        finish(e, r, HR_FINISH_EOS);
    else if (r->stopped)
        finish(e, r, HR_FINISH_STOP);
    else if (r->max_new >= 0 && r->n_gen >= r->max_new)
        finish(e, r, HR_FINISH_LENGTH);
    else if (r->n_tokens >= e->n_ctx)
        finish(e, r, HR_FINISH_CONTEXT);
    if (r->finish != HR_FINISH_NONE && r->finish != HR_FINISH_STOP) {
        /* release what the stop-string check and the UTF-8 stream held back */
        int32_t n = engine_request_text(r, -1, true);
        if (n > 0) {
            const char *t = push_text(e, r->out, n);
            if (ev->text_len == 0)
                ev->text = t;
            ev->text_len += n; /* contiguous: pushed right after */
        }
    }
    ev->finish = r->finish;
    r->reported = r->finish != HR_FINISH_NONE;
}

/* The first entry of a row of logits that is NaN or +inf, or -1; when every
 * entry is -inf, entry 0. Weights or activations that overflowed give such
 * rows, and a token sampled from one is garbage, so the request stops with
 * an error instead (-inf alone is a mask: the device sampler agrees). */
static int32_t first_nonfinite(const float *row, int32_t n) {
    bool any_finite = false;
    for (int32_t i = 0; i < n; i++) {
        if (isnan(row[i]) || row[i] == INFINITY)
            return i;
        any_finite = any_finite || row[i] != -INFINITY;
    }
    return any_finite ? -1 : 0;
}

/* What first_nonfinite found at that entry, for messages. */
static const char *nonfinite_name(float x) {
    return isnan(x) ? "NaN" : x == INFINITY ? "+infinity" : "-infinity, as every entry,";
}

/* Finishes r with an error event (output slot o) that names where its
 * arithmetic broke: the position whose logits were to give the next token. */
static void fail_numeric(hr_engine *e, engine_request *r, int32_t o, const char *what,
                         hr_event *ev) {
    char *msg = e->errors + (size_t)o * ENGINE_ERROR_BYTES;
    snprintf(msg, ENGINE_ERROR_BYTES,
             "request %d: the logits after position %d (for generated token %d) %s; the "
             "model's weights or activations overflowed (a damaged or badly converted "
             "file?)",
             r->id, r->n_tokens - 1, r->n_gen + 1, what);
    finish(e, r, HR_FINISH_ERROR);
    *ev = (hr_event){.id = r->id, .token = -1, .text = "", .finish = r->finish, .error = msg};
    r->reported = true;
}

/* Takes the token sampled for r in output slot o (host-sampled from logits
 * when logits is not NULL), or fails r when its logits were not finite. */
static void take_token(hr_engine *e, engine_request *r, int32_t o, int32_t tok,
                       const float *logits, hr_event *ev) {
    const int32_t V = e->model->info.n_vocab;
    if (logits) {
        int32_t bad = first_nonfinite(logits, V);
        if (bad >= 0) {
            char what[64];
            snprintf(what, sizeof what, "hold %s at token id %d", nonfinite_name(logits[bad]),
                     bad);
            fail_numeric(e, r, o, what, ev);
            return;
        }
        tok = sampler_sample(&r->smp, (float *)logits, V, e->cand);
    } else if (tok < 0 || tok >= V) { /* the device sampler's word for "no finite logit" */
        fail_numeric(e, r, o, "hold no finite value", ev);
        return;
    }
    accept_token(e, r, tok, ev);
}

static void drop_reported(hr_engine *e) {
    int32_t j = 0;
    for (int32_t i = 0; i < e->n_reqs; i++) {
        if (e->reqs[i]->reported)
            engine_request_free(e->reqs[i]);
        else
            e->reqs[j++] = e->reqs[i];
    }
    e->n_reqs = j;
}

/* Overlap. A lone sequence decoding on a backend that chains (the CUDA
 * one) keeps one step queued ahead: its next step goes in before the host
 * has the token of the one before (the device feeds it: hr_step.chained),
 * so the device does not wait while the host takes in a token, checks the
 * stop rules and queues the next step (~20 us a token, 0.6% at Llama-2-7B
 * on an H200: bench --overlap on,off). A request that stops on a token the
 * host only then sees (end of generation, a stop string, a cancel) leaves
 * one queued step computed for nothing; its K/V row is the right one for
 * the token it fed, in blocks the request reserved. max_tokens and the
 * context end are known ahead, so no step is queued past them. */

/* whether r's step after the in_flight ones queued would run, were none of
 * their tokens a stop */
static bool overlaps(const hr_engine *e, const engine_request *r, int32_t in_flight) {
    return e->be->chains && e->be->ops->wait_step && !e->no_overlap && e->n_reqs == 1 &&
           r->seq >= 0 && r->finish == HR_FINISH_NONE && !r->cancel &&
           r->params.repeat_penalty == 1.0f && r->n_tokens - r->n_cached == in_flight &&
           (r->max_new < 0 || r->n_gen + in_flight + 1 <= r->max_new) &&
           r->n_tokens + in_flight < e->n_ctx;
}

static void set_sample(hr_engine *e, int32_t o, const engine_request *r, int32_t ahead) {
    const hr_sampling_params *sp = &r->params;
    e->samples[o] = (be_sample){.temperature = sp->temperature, .top_k = sp->top_k,
                                .top_p = sp->top_p, .min_p = sp->min_p, .seed = sp->seed,
                                .step = (uint64_t)(r->n_gen + ahead)};
}

/* Queues r's step after the one queued: position n_tokens, fed the token
 * that one samples. */
static hr_status queue_chained(hr_engine *e, engine_request *r, hr_error *err) {
    begin_build(e);
    const int32_t pos = r->n_tokens;
    e->tokens[0] = -1;
    e->pos[0] = pos;
    e->slot[0] = kv_slot(e->kv, r->seq, pos);
    e->segs[0] = (step_segment){.seq = r->seq, .pos0 = pos, .n = 1, .row0 = 0};
    e->step.n_seg = 1;
    e->step.n_rows = 1;
    e->out_req[0] = r->id;
    e->out_rows[0] = 0;
    e->step.n_out = 1;
    e->step.device_sample = e->step.defer = e->step.chained = true;
    e->step.greedy = sampler_is_greedy(&r->params);
    set_sample(e, 0, r, 1);
    HR_TRY(llama_forward(e->lm, &e->step, NULL, e->samples, NULL, err));
    e->n_chained++;
    return HR_OK;
}

/* Waits for r's oldest queued step and takes in its token (one event). */
static hr_status take_queued(hr_engine *e, engine_request *r, hr_event *ev, int32_t *n_events,
                             hr_error *err) {
    int32_t tok = -1;
    hr_status s = e->be->ops->wait_step(e->be, &tok, err);
    if (s != HR_OK)
        return s;
    r->n_cached++;
    publish(e, r);
    if (r->cancel) {
        finish(e, r, HR_FINISH_CANCELLED);
        return HR_OK; /* reported by the next step */
    }
    take_token(e, r, 0, tok, NULL, ev);
    (*n_events)++;
    return HR_OK;
}

/* With a step queued ahead for r: queue the one after it if r will want it,
 * then take in the queued one's token. */
static hr_status step_ahead(hr_engine *e, engine_request *r, hr_event *events,
                            int32_t *n_events, hr_error *err) {
    e->ahead_req = -1;
    hr_status qs = HR_OK;
    bool more = overlaps(e, r, 1);
    if (more && (qs = queue_chained(e, r, err)) != HR_OK)
        more = false;
    hr_status s = take_queued(e, r, &events[*n_events], n_events, err);
    if (s == HR_OK && qs != HR_OK)
        s = qs;
    if (s != HR_OK) {
        if (more) /* the step after failed one: drop the one queued after it */
            e->ahead_drop = true;
        finish(e, r, HR_FINISH_ERROR);
        return s;
    }
    if (more) {
        if (r->finish == HR_FINISH_NONE)
            e->ahead_req = r->id;
        else
            e->ahead_drop = true;
    }
    drop_reported(e);
    return HR_OK;
}

/* Waits for a queued step whose request has gone. */
static hr_status drop_queued(hr_engine *e, hr_error *err) {
    if (!e->ahead_drop)
        return HR_OK;
    e->ahead_drop = false;
    int32_t tok;
    return e->be->ops->wait_step(e->be, &tok, err);
}

hr_status hr_engine_step(hr_engine *e, hr_event *events, int32_t cap, int32_t *n_events,
                         hr_error *err) {
    *n_events = 0;
    e->text_len = 0;
    HR_TRY(drop_queued(e, err));
    if (e->ahead_req >= 0) {
        if (cap < 1)
            return hr_err_set(err, HR_ERR_INVALID, "engine step: room for no event");
        engine_request *r = engine_find(e, e->ahead_req);
        HR_ASSERT(r != NULL); /* a request with a step queued is not dropped */
        return step_ahead(e, r, events, n_events, err);
    }
    /* cancelled and already-finished requests report first */
    for (int32_t i = 0; i < e->n_reqs && *n_events < cap; i++) {
        engine_request *r = e->reqs[i];
        if (r->cancel)
            finish(e, r, HR_FINISH_CANCELLED);
        if (r->finish != HR_FINISH_NONE && !r->reported) {
            events[(*n_events)++] = (hr_event){.id = r->id, .token = -1, .text = "",
                                               .finish = r->finish};
            r->reported = true;
        }
    }
    drop_reported(e);
    admit(e);

    begin_build(e);
    int32_t budget = e->p.n_batch;
    /* decode rows first, then prompt chunks in arrival order (n_step is
     * cleared once, before both passes: clearing it in the second pass too
     * forgot the decode rows of the first, which were then fed again) */
    for (int32_t i = 0; i < e->n_reqs; i++)
        e->reqs[i]->n_step = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int32_t i = 0; i < e->n_reqs && budget > 0; i++) {
            engine_request *r = e->reqs[i];
            if (r->seq < 0 || r->finish != HR_FINISH_NONE)
                continue;
            bool decoding = r->n_tokens - r->n_cached == 1;
            if (decoding == (pass == 0))
                budget -= add_rows(e, r, budget, false);
        }
    if (e->step.n_rows == 0)
        return HR_OK;
    if (e->step.n_out > cap - *n_events)
        return hr_err_set(err, HR_ERR_INVALID,
                          "engine step: %d events to report but room for %d (pass cap >= "
                          "the number of parallel sequences)",
                          e->step.n_out, cap - *n_events);

    /* sample on the device when it can and no request needs the host sampler
     * (the repetition penalty looks at each request's history) */
    bool device_sampling = e->be->ops->can_sample, greedy = true;
    for (int32_t o = 0; o < e->step.n_out && device_sampling; o++) {
        const engine_request *r = engine_find(e, e->out_req[o]);
        device_sampling = r->params.repeat_penalty == 1.0f;
        greedy = greedy && sampler_is_greedy(&r->params);
        set_sample(e, o, r, 0);
    }
    e->step.device_sample = device_sampling;
    e->step.greedy = device_sampling && greedy;
    /* a lone decode row: queue it and the step after it, then wait */
    engine_request *lone = e->step.n_rows == 1 && e->step.n_out == 1 && device_sampling
                               ? engine_find(e, e->out_req[0])
                               : NULL;
    if (lone && lone->n_step == 1 && overlaps(e, lone, 1)) {
        e->step.defer = true;
        hr_status s = llama_forward(e->lm, &e->step, NULL, e->samples, NULL, err);
        if (s != HR_OK) {
            finish(e, lone, HR_FINISH_ERROR);
            return s;
        }
        return step_ahead(e, lone, events, n_events, err);
    }
    hr_status s = llama_forward(e->lm, &e->step, e->logits, device_sampling ? e->samples : NULL,
                                e->out_tokens, err);
    if (s != HR_OK) {
        /* a failed step fails the requests in it; the engine keeps serving */
        for (int32_t i = 0; i < e->n_reqs; i++)
            if (e->reqs[i]->n_step > 0)
                finish(e, e->reqs[i], HR_FINISH_ERROR);
        return s;
    }
    for (int32_t i = 0; i < e->n_reqs; i++) {
        engine_request *r = e->reqs[i];
        r->n_cached += r->n_step;
        publish(e, r);
        if (r->max_new == 0 && r->n_cached == r->n_tokens) /* reported by the next step */
            finish(e, r, HR_FINISH_LENGTH);
    }

    const int32_t V = e->model->info.n_vocab;
    for (int32_t o = 0; o < e->step.n_out; o++) {
        engine_request *r = engine_find(e, e->out_req[o]);
        HR_ASSERT(r != NULL);
        take_token(e, r, o, device_sampling ? e->out_tokens[o] : -1,
                   device_sampling ? NULL : e->logits + (int64_t)o * V, &events[(*n_events)++]);
    }
    drop_reported(e);
    return HR_OK;
}

/* ---------------------------------------------------------------- scoring */

hr_status hr_engine_score(hr_engine *e, const int32_t *tokens, int32_t n, double *nll,
                          float *logits, hr_error *err) {
    if (!e->p.logits_all)
        return hr_err_set(err, HR_ERR_INVALID, "engine: scoring needs logits_all");
    if (e->n_reqs > 0)
        return hr_err_set(err, HR_ERR_INVALID, "engine: scoring while requests are running");
    HR_TRY(drop_queued(e, err));
    if (n < 2 || n > e->n_ctx)
        return hr_err_set(err, HR_ERR_INVALID, "engine: %d tokens to score, context is %d", n,
                          e->n_ctx);
    const int32_t V = e->model->info.n_vocab;
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return hr_err_set(err, HR_ERR_INVALID, "engine: token %d = %d is outside [0, %d)",
                              i, tokens[i], V);
    int32_t seq = kv_seq_acquire(e->kv);
    if (seq < 0)
        return hr_err_set(err, HR_ERR_NO_FIT, "engine: no free sequence to score with");
    hr_status s = kv_seq_reserve(e->kv, seq, n, err);
    engine_request r = {.seq = seq, .n_tokens = n, .tokens = (int32_t *)tokens};
    while (s == HR_OK && r.n_cached < n - 1) {
        begin_build(e);
        /* the last token is only a target: feed tokens 0 .. n-2 */
        r.n_tokens = n - 1;
        add_rows(e, &r, e->p.n_batch, true);
        s = llama_forward(e->lm, &e->step, e->logits, NULL, NULL, err);
        if (s != HR_OK)
            break;
        for (int32_t o = 0; o < e->step.n_out && s == HR_OK; o++) {
            const float *row = e->logits + (int64_t)o * V;
            int32_t p = r.n_cached + o, bad = first_nonfinite(row, V);
            if (bad >= 0) {
                s = hr_err_set(err, HR_ERR_NUMERIC,
                               "the logits after token %d of the %d scored hold %s at "
                               "token id %d; the model's weights or activations overflowed (a "
                               "damaged or badly converted file?)",
                               p, n, nonfinite_name(row[bad]), bad);
                break;
            }
            double mx = row[0], sum = 0.0;
            for (int32_t v = 1; v < V; v++)
                mx = row[v] > mx ? row[v] : mx;
            for (int32_t v = 0; v < V; v++)
                sum += exp((double)row[v] - mx);
            nll[p] = -((double)row[tokens[p + 1]] - mx - log(sum));
            if (logits)
                memcpy(logits + (int64_t)p * V, row, (size_t)V * sizeof(float));
        }
        r.n_cached += r.n_step;
    }
    kv_seq_release(e->kv, seq);
    return s;
}

hr_status hr_engine_perplexity(hr_engine *e, const int32_t *tokens, int64_t n, int32_t window,
                               double *ppl,
                               void (*progress)(int64_t done, int64_t total, double ppl,
                                                void *user),
                               void *user, hr_error *err) {
    if (window < 2 || window > e->n_ctx)
        return hr_err_set(err, HR_ERR_INVALID, "perplexity: window %d outside [2, %d]", window,
                          e->n_ctx);
    if (n < 2)
        return hr_err_set(err, HR_ERR_INVALID, "perplexity: %lld tokens, at least 2 needed",
                          (long long)n);
    double *nll = hr_calloc((size_t)window, sizeof(double));
    if (!nll)
        return hr_err_set(err, HR_ERR_NOMEM, "perplexity: out of memory");
    double sum = 0.0;
    int64_t count = 0;
    hr_status s = HR_OK;
    for (int64_t start = 0; start + 1 < n; start += window) {
        int32_t len = (int32_t)(n - start < window ? n - start : window);
        if (len < 2)
            break;
        if ((s = hr_engine_score(e, tokens + start, len, nll, NULL, err)) != HR_OK) {
            hr_err_prefix(err, "the window from token %lld: ", (long long)start);
            break;
        }
        for (int32_t i = 0; i < len - 1; i++)
            sum += nll[i];
        count += len - 1;
        if (progress)
            progress(start + len, n, exp(sum / (double)count), user);
    }
    hr_free(nll);
    if (s == HR_OK)
        *ppl = exp(sum / (double)count);
    return s;
}
