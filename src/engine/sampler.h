/*
 * sampler.h — choosing the next token from a row of logits, on the host.
 *
 * Order, as transformers applies its processors: repetition penalty,
 * temperature, top-k, top-p, min-p, then a draw from the softmax. With
 * temperature <= 0 the choice is the argmax (lowest id on ties, as
 * torch.argmax), after the penalty. The generator is xoshiro256** seeded
 * through splitmix64, so a seed reproduces a generation exactly.
 */
#ifndef HR_ENGINE_SAMPLER_H
#define HR_ENGINE_SAMPLER_H

#include "headroom.h"

typedef struct {
    float logit;
    int32_t id;
} sampler_cand;

typedef struct {
    hr_sampling_params p;
    uint64_t rng[4];
    int32_t *recent;   /* ring of the last repeat_last_n tokens */
    int32_t n_recent;
    int32_t head;
} sampler;

/* Whether p picks the argmax: temperature <= 0 (or NaN), or top_k 1. The
 * engine asks this to fold the argmax into a device step; the sampler to
 * skip the distribution. */
bool sampler_is_greedy(const hr_sampling_params *p);

hr_status sampler_init(sampler *s, const hr_sampling_params *p, hr_error *err);
void sampler_free(sampler *s);
/* Remembers a token for the repetition penalty (prompt and generated). */
void sampler_accept(sampler *s, int32_t token);
/* logits (V) are modified in place; cand is scratch of V entries. */
int32_t sampler_sample(sampler *s, float *logits, int32_t n_vocab, sampler_cand *cand);

#endif
