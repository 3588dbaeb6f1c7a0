/*
 * test_sampler.c — the sampler on hand-made logits: greedy, top-k, top-p,
 * min-p, temperature, repetition penalty, and that a seed reproduces a run.
 */
#include "engine/sampler.h"
#include "test.h"

#include <math.h>

#define V 64

static int32_t sample(const hr_sampling_params *p, const float *logits_in, int n_accept,
                      const int32_t *accepted) {
    sampler s;
    hr_error err;
    if (sampler_init(&s, p, &err) != HR_OK)
        return -1;
    for (int i = 0; i < n_accept; i++)
        sampler_accept(&s, accepted[i]);
    float logits[V];
    sampler_cand cand[V];
    memcpy(logits, logits_in, sizeof logits);
    int32_t t = sampler_sample(&s, logits, V, cand);
    sampler_free(&s);
    return t;
}

static void make_logits(float *l) {
    for (int i = 0; i < V; i++)
        l[i] = -0.1f * (float)i; /* token 0 most likely, then 1, 2, ... */
}

int main(void) {
    float logits[V];
    make_logits(logits);
    hr_sampling_params p = hr_sampling_params_greedy();

    /* greedy: the argmax, lowest id on ties */
    CHECK_EQ_I64(sample(&p, logits, 0, NULL), 0);
    logits[5] = logits[7] = 3.0f;
    CHECK_EQ_I64(sample(&p, logits, 0, NULL), 5);
    make_logits(logits);

    /* repetition penalty: token 0 (positive after the shift below) is
     * divided, so token 1 wins; a repeated token is penalised once */
    for (int i = 0; i < V; i++)
        logits[i] += 1.0f; /* token 0: 1.0, token 1: 0.9 */
    p.repeat_penalty = 1.2f;
    int32_t seen[3] = {0, 0, 0};
    CHECK_EQ_I64(sample(&p, logits, 3, seen), 1);
    p.repeat_penalty = 1.05f; /* 1.0 / 1.05 = 0.952 > 0.9: once, token 0 still wins */
    CHECK_EQ_I64(sample(&p, logits, 3, seen), 0);
    p.repeat_penalty = 1.0f;
    make_logits(logits);

    /* top-k 1 and min-p 1 and tiny top-p all reduce to greedy, whatever the seed */
    p.temperature = 1.0f;
    for (uint64_t seed = 0; seed < 50; seed++) {
        p.seed = seed;
        p.top_k = 1;
        CHECK_EQ_I64(sample(&p, logits, 0, NULL), 0);
        p.top_k = 0;
        p.top_p = 1e-6f;
        CHECK_EQ_I64(sample(&p, logits, 0, NULL), 0);
        p.top_p = 1.0f;
        p.min_p = 1.0f;
        CHECK_EQ_I64(sample(&p, logits, 0, NULL), 0);
        p.min_p = 0.0f;
    }

    /* top-k 3: only tokens 0..2 ever come out */
    p.top_k = 3;
    int bad = 0;
    for (uint64_t seed = 0; seed < 500; seed++) {
        p.seed = seed;
        bad += sample(&p, logits, 0, NULL) > 2;
    }
    CHECK_EQ_I64(bad, 0);
    p.top_k = 0;

    /* top-p 0.5 over a known distribution: the smallest prefix reaching 0.5 */
    double z = 0.0;
    for (int i = 0; i < V; i++)
        z += exp((double)logits[i]);
    double cum = 0.0;
    int keep = 0;
    while (cum < 0.5)
        cum += exp((double)logits[keep++]) / z;
    p.top_p = 0.5f;
    bad = 0;
    for (uint64_t seed = 0; seed < 500; seed++) {
        p.seed = seed;
        bad += sample(&p, logits, 0, NULL) >= keep;
    }
    CHECK_MSG(bad == 0, "top-p let %d draws past the first %d tokens", bad, keep);
    p.top_p = 1.0f;

    /* min-p 0.5: p_i >= 0.5 p_0 <=> logit_i >= logit_0 + ln 0.5 = -0.693: ids 0..6 */
    p.min_p = 0.5f;
    bad = 0;
    for (uint64_t seed = 0; seed < 500; seed++) {
        p.seed = seed;
        bad += sample(&p, logits, 0, NULL) > 6;
    }
    CHECK_EQ_I64(bad, 0);
    p.min_p = 0.0f;

    /* temperature 1: frequencies follow the softmax (4000 draws, 5 sigma) */
    int count[V] = {0};
    const int draws = 4000;
    for (int d = 0; d < draws; d++) {
        p.seed = (uint64_t)d * 7919u + 1u;
        int32_t t = sample(&p, logits, 0, NULL);
        if (t >= 0 && t < V)
            count[t]++;
    }
    for (int i = 0; i < 4; i++) {
        double pi = exp((double)logits[i]) / z;
        double sd = sqrt(draws * pi * (1 - pi));
        CHECK_MSG(fabs(count[i] - draws * pi) < 5 * sd, "token %d: %d draws, expected %.0f", i,
                  count[i], draws * pi);
    }

    /* same seed, same sequence of draws from one sampler */
    sampler a, b;
    hr_error err;
    p.seed = 1234;
    CHECK_OK(sampler_init(&a, &p, &err), &err);
    CHECK_OK(sampler_init(&b, &p, &err), &err);
    sampler_cand cand[V];
    int same = 1;
    for (int i = 0; i < 100; i++) {
        float la[V], lb[V];
        make_logits(la);
        make_logits(lb);
        same &= sampler_sample(&a, la, V, cand) == sampler_sample(&b, lb, V, cand);
    }
    CHECK(same);
    sampler_free(&a);
    sampler_free(&b);

    /* any float input: a valid id, never a crash (NaN ranks below every
     * number; an infinite best is taken as greedy would) */
    const float specials[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, 1e38f, -1e38f};
    const int n_spec = (int)(sizeof specials / sizeof specials[0]);
    hr_sampling_params modes[4];
    for (int m = 0; m < 4; m++)
        modes[m] = hr_sampling_params_greedy();
    modes[1].temperature = 0.8f;
    modes[2].temperature = 0.8f, modes[2].top_k = 40, modes[2].top_p = 0.95f;
    modes[2].min_p = 0.05f;
    modes[3].temperature = 1e-30f, modes[3].top_k = 3, modes[3].repeat_penalty = 1.3f;
    int out_of_range = 0;
    uint64_t lcg = 99;
    for (int trial = 0; trial < 400; trial++) {
        float l[V];
        for (int i = 0; i < V; i++) {
            lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
            int r = (int)(lcg >> 59); /* 0..31 */
            l[i] = r < n_spec && trial % 4 ? specials[r] : (float)(r % 7) - 3.0f;
        }
        if (trial % 10 == 0)
            for (int i = 0; i < V; i++)
                l[i] = specials[trial / 10 % n_spec]; /* a whole row of one value */
        hr_sampling_params q = modes[trial % 4];
        q.seed = (uint64_t)trial;
        int32_t t = sample(&q, l, 3, seen);
        out_of_range += t < 0 || t >= V;
    }
    CHECK_EQ_I64(out_of_range, 0);
    /* NaN never wins over a number; +inf wins (greedy and sampled) */
    make_logits(logits);
    logits[0] = NAN;
    hr_sampling_params k1 = hr_sampling_params_greedy();
    k1.temperature = 1.0f, k1.top_k = 1;
    CHECK_EQ_I64(sample(&k1, logits, 0, NULL), 1);
    hr_sampling_params g = hr_sampling_params_greedy();
    CHECK_EQ_I64(sample(&g, logits, 0, NULL), 1);
    logits[9] = INFINITY;
    CHECK_EQ_I64(sample(&p, logits, 0, NULL), 9);
    CHECK_EQ_I64(sample(&g, logits, 0, NULL), 9);
    TEST_END();
}
