/*
 * sampler.c — repetition penalty, temperature, top-k, top-p, min-p and the
 * draw (see sampler.h for the order and why).
 *
 * Candidates are kept as (logit, id) pairs; top-k selects with a partial
 * quickselect then sorts only the k survivors, so a 128k vocabulary with
 * top-k 40 costs one pass, not a full sort.
 */
#include "engine/sampler.h"

#include "backend/sample_params.h" /* be_sample_is_greedy */
#include "util/alloc.h"
#include "util/error.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro(uint64_t s[4]) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

/* uniform in [0, 1) with 53 random bits */
static double uniform(uint64_t s[4]) { return (double)(xoshiro(s) >> 11) * 0x1.0p-53; }

bool sampler_is_greedy(const hr_sampling_params *p) {
    return be_sample_is_greedy(p->temperature, p->top_k);
}

hr_status sampler_init(sampler *s, const hr_sampling_params *p, hr_error *err) {
    memset(s, 0, sizeof *s);
    s->p = *p;
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64(&x);
    if (p->repeat_penalty != 1.0f && p->repeat_last_n > 0) {
        s->recent = hr_calloc((size_t)p->repeat_last_n, sizeof(int32_t));
        if (!s->recent)
            return hr_err_set(err, HR_ERR_NOMEM, "sampler: out of memory");
    }
    return HR_OK;
}

void sampler_free(sampler *s) {
    hr_free(s->recent);
    s->recent = NULL;
}

void sampler_accept(sampler *s, int32_t token) {
    if (!s->recent)
        return;
    s->recent[s->head] = token;
    s->head = (s->head + 1) % s->p.repeat_last_n;
    if (s->n_recent < s->p.repeat_last_n)
        s->n_recent++;
}

/* NaN ranks below every number, -inf included, so the order stays total
 * whatever the logits hold (a comparison that is false both ways for NaN
 * lets the quickselect's scans run off the array). */
static float rank_key(float x) { return isnan(x) ? -INFINITY : x; }

static int cmp_desc(const void *a, const void *b) {
    const sampler_cand *x = a, *y = b;
    float kx = rank_key(x->logit), ky = rank_key(y->logit);
    if (kx != ky)
        return kx < ky ? 1 : -1;
    if (isnan(x->logit) != isnan(y->logit)) /* -inf before NaN */
        return isnan(x->logit) ? 1 : -1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

/* Moves the k largest candidates to the front (order unspecified). */
static void select_top(sampler_cand *c, int32_t n, int32_t k) {
    int32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        sampler_cand pivot = c[(lo + hi) / 2];
        int32_t i = lo, j = hi;
        while (i <= j) {
            while (cmp_desc(&c[i], &pivot) < 0)
                i++;
            while (cmp_desc(&c[j], &pivot) > 0)
                j--;
            if (i <= j) {
                sampler_cand t = c[i];
                c[i++] = c[j];
                c[j--] = t;
            }
        }
        if (k - 1 <= j)
            hi = j;
        else if (k - 1 >= i)
            lo = i;
        else
            break;
    }
}

int32_t sampler_sample(sampler *s, float *logits, int32_t n_vocab, sampler_cand *cand) {
    const hr_sampling_params *p = &s->p;
    /* each distinct token of the window is penalised once, as transformers'
     * gather/scatter does */
    if (s->recent && p->repeat_penalty > 0.0f)
        for (int32_t i = 0; i < s->n_recent; i++) {
            int32_t t = s->recent[i];
            bool seen = t < 0 || t >= n_vocab;
            for (int32_t j = 0; j < i && !seen; j++)
                seen = s->recent[j] == t;
            if (!seen)
                logits[t] = logits[t] > 0.0f ? logits[t] / p->repeat_penalty
                                             : logits[t] * p->repeat_penalty;
        }
    if (sampler_is_greedy(p)) {
        int32_t best = 0;
        for (int32_t i = 1; i < n_vocab; i++)
            if (rank_key(logits[i]) > rank_key(logits[best]))
                best = i;
        return best;
    }
    int32_t n = n_vocab;
    for (int32_t i = 0; i < n; i++)
        cand[i] = (sampler_cand){.logit = logits[i] / p->temperature, .id = i};
    if (p->top_k > 0 && p->top_k < n) {
        select_top(cand, n, p->top_k);
        n = p->top_k;
    }
    qsort(cand, (size_t)n, sizeof *cand, cmp_desc);
    /* no finite best (an infinite or NaN logit on top): no distribution to
     * draw from, so the top-ranked token, as greedy would pick */
    if (!isfinite(cand[0].logit))
        return cand[0].id;
    while (n > 1 && isnan(cand[n - 1].logit)) /* NaN ranks last: never drawn */
        n--;
    /* softmax over the survivors, in double for the cumulative sums */
    double mx = cand[0].logit, sum = 0.0;
    for (int32_t i = 0; i < n; i++)
        sum += exp((double)cand[i].logit - mx);
    if (p->top_p < 1.0f) {
        double cum = 0.0;
        for (int32_t i = 0; i < n; i++) {
            cum += exp((double)cand[i].logit - mx) / sum;
            if (cum >= (double)p->top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0.0f) {
        /* p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p) */
        double cut = mx + log((double)p->min_p);
        int32_t keep = 1;
        while (keep < n && (double)cand[keep].logit >= cut)
            keep++;
        n = keep;
    }
    double total = 0.0;
    for (int32_t i = 0; i < n; i++)
        total += exp((double)cand[i].logit - mx);
    double r = uniform(s->rng) * total, acc = 0.0;
    for (int32_t i = 0; i < n; i++) {
        acc += exp((double)cand[i].logit - mx);
        if (r < acc)
            return cand[i].id;
    }
    return cand[n - 1].id;
}
