/*
 * request.c — a request's life outside the step: adding, cancelling, the
 * text it streams (UTF-8 safe, stop strings held back), and hr_generate,
 * the one-request loop the CLI's run command uses.
 *
 * Stop strings: decoded text goes into a hold buffer. When a stop string
 * appears in it, everything before it is released and the rest dropped.
 * Otherwise everything is released except the longest tail that could still
 * grow into a stop string, so a stop string is never half-printed.
 */
#include "util/clock.h"
#include "engine/engine.h"

#include "util/alloc.h"
#include "util/log.h"

#include <string.h>

engine_request *engine_find(hr_engine *e, int32_t id) {
    for (int32_t i = 0; i < e->n_reqs; i++)
        if (e->reqs[i]->id == id)
            return e->reqs[i];
    return NULL;
}

bool engine_is_eos(const hr_engine *e, int32_t token) {
    const hr_model_info *in = &e->model->info;
    for (int32_t i = 0; i < in->n_eos; i++)
        if (in->eos_ids[i] == token)
            return true;
    return e->tok && hr_tokenizer_is_eog(e->tok, token);
}

void engine_request_free(engine_request *r) {
    if (!r)
        return;
    hr_free(r->tokens);
    sampler_free(&r->smp);
    hr_detok_free(r->detok);
    for (int32_t i = 0; i < r->n_stop; i++)
        hr_free(r->stop[i]);
    hr_free(r->hold);
    hr_free(r->out);
    hr_free(r);
}

hr_status hr_engine_add(hr_engine *e, const int32_t *prompt, int32_t n_prompt,
                        const hr_sampling_params *params, int32_t *id, hr_error *err) {
    hr_sampling_params p = params ? *params : hr_sampling_params_default();
    const int32_t V = e->model->info.n_vocab;
    if (n_prompt < 1)
        return hr_err_set(err, HR_ERR_INVALID, "request: the prompt is empty");
    if (n_prompt >= e->n_ctx && e->p.truncate_prompt) {
        /* keep the most recent tokens, with room for the new ones asked for
         * (at least one): the beginning is what gets forgotten */
        int32_t keep = e->n_ctx - (p.max_tokens > 0 && p.max_tokens < e->n_ctx / 2
                                       ? p.max_tokens
                                       : 1);
        HR_LOG_W("request: the prompt has %d tokens, the context %d: keeping the last %d",
                 n_prompt, e->n_ctx, keep);
        prompt += n_prompt - keep;
        n_prompt = keep;
    }
    if (n_prompt >= e->n_ctx)
        return hr_err_set(err, HR_ERR_NO_FIT,
                          "request: the prompt has %d tokens but the context holds %d (%d "
                          "prompt tokens at most, to leave room for one new token; "
                          "--context-overflow truncate keeps the most recent)",
                          n_prompt, e->n_ctx, e->n_ctx - 1);
    for (int32_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= V)
            return hr_err_set(err, HR_ERR_INVALID,
                              "request: prompt token %d is %d, outside the vocabulary [0, %d)",
                              i, prompt[i], V);
    if (p.n_stop < 0 || p.n_stop > ENGINE_MAX_STOP)
        return hr_err_set(err, HR_ERR_INVALID, "request: %d stop strings (at most %d)",
                          p.n_stop, ENGINE_MAX_STOP);
    if (p.top_p <= 0.0f || p.top_p > 1.0f || p.min_p < 0.0f || p.min_p > 1.0f ||
        p.top_k < 0 || p.repeat_penalty <= 0.0f || p.repeat_last_n < 0 || p.max_tokens < -1 ||
        p.temperature != p.temperature)
        return hr_err_set(err, HR_ERR_INVALID,
                          "request: sampling parameters out of range (top_p in (0,1], min_p in "
                          "[0,1], top_k >= 0, repeat_penalty > 0, max_tokens >= -1)");
    if (e->n_reqs == e->cap_reqs)
        return hr_err_set(err, HR_ERR_NO_FIT, "request: %d requests are already queued",
                          e->n_reqs);
    /* KV needed at admission: refuse now what could never be admitted */
    int32_t need = n_prompt + (p.max_tokens < 0 ? e->n_ctx : p.max_tokens);
    need = need > e->n_ctx ? e->n_ctx : need;
    if (kv_blocks_for(e->kv, need) > e->kv->n_block)
        return hr_err_set(err, HR_ERR_NO_FIT,
                          "request: needs %d tokens of KV cache but the pool holds %d",
                          need, e->kv->n_block * e->kv->block_size);

    hr_status s = HR_ERR_NOMEM;
    engine_request *r = hr_calloc(1, sizeof *r);
    if (!r)
        return hr_err_set(err, s, "request: out of memory");
    r->id = e->next_id;
    r->seq = -1;
    r->params = p;
    r->n_prompt = n_prompt;
    r->max_new = p.max_tokens;
    r->tokens = hr_calloc((size_t)e->n_ctx, sizeof(int32_t));
    if (!r->tokens)
        goto nomem;
    memcpy(r->tokens, prompt, (size_t)n_prompt * sizeof(int32_t));
    r->n_tokens = n_prompt;
    for (int32_t i = 0; i < p.n_stop; i++) {
        size_t len = strlen(p.stop[i]);
        if (len == 0 || len > ENGINE_MAX_STOP_BYTES) {
            engine_request_free(r);
            return hr_err_set(err, HR_ERR_INVALID, "request: stop string %d is %zu bytes (1 to "
                                                   "%d)",
                              i, len, ENGINE_MAX_STOP_BYTES);
        }
        if (!(r->stop[i] = hr_strdup(p.stop[i])))
            goto nomem;
        r->n_stop++;
        r->max_stop_len = (int32_t)len > r->max_stop_len ? (int32_t)len : r->max_stop_len;
    }
    r->params.stop = NULL; /* the caller's array need not outlive the call */
    r->text_cap = e->max_piece + r->max_stop_len + 64;
    r->hold = hr_malloc((size_t)r->text_cap);
    r->out = hr_malloc((size_t)r->text_cap);
    if (!r->hold || !r->out)
        goto nomem;
    if ((e->tok && (s = hr_detok_create(e->tok, &r->detok, err)) != HR_OK) ||
        (s = sampler_init(&r->smp, &p, err)) != HR_OK) {
        engine_request_free(r);
        return s;
    }
    for (int32_t i = 0; i < n_prompt; i++)
        sampler_accept(&r->smp, prompt[i]);
    e->reqs[e->n_reqs++] = r;
    e->next_id++;
    *id = r->id;
    return HR_OK;
nomem:
    engine_request_free(r);
    return hr_err_set(err, HR_ERR_NOMEM, "request: out of memory");
}

void hr_engine_cancel(hr_engine *e, int32_t id) {
    engine_request *r = engine_find(e, id);
    if (r)
        r->cancel = true;
}

/* Length of the longest tail of s[0..n) that is a proper prefix of a stop
 * string (it may still become one). */
static int32_t held_tail(const engine_request *r, const char *s, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 0; i < r->n_stop; i++) {
        int32_t len = (int32_t)strlen(r->stop[i]);
        for (int32_t k = len - 1 < n ? len - 1 : n; k > best; k--)
            if (memcmp(s + n - k, r->stop[i], (size_t)k) == 0) {
                best = k;
                break;
            }
    }
    return best;
}

int32_t engine_request_text(engine_request *r, int32_t token, bool flush) {
    if (!r->detok)
        return 0;
    int32_t room = r->text_cap - r->hold_len;
    int32_t n = token >= 0 ? hr_detok_push(r->detok, token, r->hold + r->hold_len, room) : 0;
    HR_ASSERT(n >= 0); /* text_cap covers the longest piece */
    r->hold_len += n;
    if (flush) {
        n = hr_detok_flush(r->detok, r->hold + r->hold_len, r->text_cap - r->hold_len);
        HR_ASSERT(n >= 0);
        r->hold_len += n;
    }
    int32_t release = r->hold_len;
    for (int32_t i = 0; i < r->n_stop; i++) {
        size_t len = strlen(r->stop[i]);
        for (int32_t at = 0; at + (int32_t)len <= r->hold_len; at++)
            if (memcmp(r->hold + at, r->stop[i], len) == 0) {
                if (at < release)
                    release = at;
                r->stopped = true;
                break;
            }
    }
    if (!r->stopped && !flush)
        release -= held_tail(r, r->hold, r->hold_len);
    memcpy(r->out, r->hold, (size_t)release);
    if (r->stopped) {
        r->hold_len = 0;
    } else {
        memmove(r->hold, r->hold + release, (size_t)(r->hold_len - release));
        r->hold_len -= release;
    }
    return release;
}

/* ---------------------------------------------------------------- hr_generate */

hr_status hr_generate(hr_engine *e, const char *prompt, size_t len,
                      const hr_sampling_params *params, hr_text_fn on_text, void *user_data,
                      hr_generation_stats *stats, hr_error *err) {
    if (e->n_reqs > 0)
        return hr_err_set(err, HR_ERR_INVALID, "hr_generate: the engine has other requests");
    if (!e->tok)
        return hr_err_set(err, HR_ERR_INVALID, "hr_generate: the model has no tokenizer");
    hr_tokenize_params tp = hr_tokenize_params_default();
    /* a byte is one id or less in most text, but invalid UTF-8 (each byte
     * a 3-byte U+FFFD, then byte tokens) and normalizers give more: when
     * the first guess is short, hr_tokenize says how many and we retry */
    size_t n = 0, cap = len + 8;
    int32_t *ids = NULL;
    hr_status s;
    for (int attempt = 0;; attempt++) {
        if (!(ids = hr_calloc(cap, sizeof(int32_t))))
            return hr_err_set(err, HR_ERR_NOMEM, "hr_generate: out of memory for %zu ids", cap);
        s = hr_tokenize(e->tok, prompt, len, &tp, ids, cap, &n, err);
        if (s != HR_ERR_INVALID || n <= cap || attempt > 0)
            break;
        hr_free(ids);
        cap = n;
    }
    if (s == HR_OK && n > (size_t)INT32_MAX)
        s = hr_err_set(err, HR_ERR_NO_FIT, "hr_generate: the prompt is too long");
    if (s == HR_OK)
        s = engine_generate_ids(e, ids, (int32_t)n, params, on_text, user_data, NULL, 0, NULL,
                                stats, err);
    hr_free(ids);
    return s;
}

hr_status engine_generate_ids(hr_engine *e, const int32_t *ids, int32_t n,
                              const hr_sampling_params *params, hr_text_fn on_text,
                              void *user_data, int32_t *out, int32_t out_cap, int32_t *n_out,
                              hr_generation_stats *stats, hr_error *err) {
    hr_generation_stats st = {0};
    const double t0 = hr_now_ms();
    if (n_out)
        *n_out = 0;
    if (e->n_reqs > 0)
        return hr_err_set(err, HR_ERR_INVALID, "generate: the engine has other requests");
    int32_t id = -1;
    hr_status s = hr_engine_add(e, ids, n, params, &id, err);
    if (s != HR_OK)
        return s;
    st.n_prompt = engine_find(e, id)->n_prompt; /* after any truncation */

    hr_event ev[4];
    double t_first = 0.0;
    while (st.finish == HR_FINISH_NONE) {
        int32_t n_ev = 0;
        s = hr_engine_step(e, ev, 4, &n_ev, err);
        if (s != HR_OK) {
            st.finish = HR_FINISH_ERROR;
            hr_engine_cancel(e, id);
            /* collect the request's final event so the engine is empty again */
            hr_event drain[4];
            int32_t n_drain;
            hr_engine_step(e, drain, 4, &n_drain, NULL);
            break;
        }
        for (int32_t i = 0; i < n_ev; i++) {
            if (ev[i].id != id)
                continue;
            if (ev[i].token >= 0) {
                if (st.n_gen == 0) {
                    t_first = hr_now_ms();
                    st.first_token_ms = t_first - t0;
                }
                if (out && n_out && *n_out < out_cap)
                    out[(*n_out)++] = ev[i].token;
                st.n_gen++;
            }
            if (ev[i].text_len > 0 && on_text &&
                !on_text(ev[i].text, (size_t)ev[i].text_len, ev[i].token, user_data))
                hr_engine_cancel(e, id);
            if (ev[i].finish != HR_FINISH_NONE)
                st.finish = ev[i].finish;
            if (ev[i].finish == HR_FINISH_ERROR && ev[i].error)
                s = hr_err_set(err, HR_ERR_NUMERIC, "%s", ev[i].error);
        }
    }
    double t_end = hr_now_ms();
    /* with no token (max_tokens 0, an error), the prompt took the whole run */
    st.prompt_ms = st.n_gen > 0 ? st.first_token_ms : t_end - t0;
    st.gen_ms = st.n_gen > 0 ? t_end - t_first : 0.0;
    if (stats)
        *stats = st;
    return s;
}
