/*
 * sample_params.h — the sampling parameters of one output row below the
 * engine. The engine fills one per row from the request's
 * hr_sampling_params; a backend that samples on its device (and CUDA's
 * sample kernel, which includes this header) reads them as they are.
 */
#ifndef HR_BACKEND_SAMPLE_PARAMS_H
#define HR_BACKEND_SAMPLE_PARAMS_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __CUDACC__
#define BE_HOST_DEVICE __host__ __device__
#else
#define BE_HOST_DEVICE
#endif

/* the same chain as engine/sampler.c: temperature, then top-k, top-p,
 * min-p; the random number of a draw is a function of (seed, step) */
typedef struct be_sample {
    float temperature; /* <= 0 (or NaN): greedy */
    int32_t top_k;     /* 0: off */
    float top_p;       /* 1: off */
    float min_p;       /* 0: off */
    uint64_t seed;
    uint64_t step;
} be_sample;

/* Whether a draw is the argmax (no random number taken): the one rule the
 * CPU sampler, the engine and the device kernels share. */
static inline BE_HOST_DEVICE bool be_sample_is_greedy(float temperature, int32_t top_k) {
    return !(temperature > 0.0f) || top_k == 1;
}

#endif
