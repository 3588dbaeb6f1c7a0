/*
 * env.h — every environment variable headroom reads, read once (env.c), and
 * the tuning switches: how the engine runs, never what it computes.
 *
 * Users set hr_engine_params; benchmarks, checks and diagnostics also set an
 * hr_tuning (headroom.h shows only a pointer to it). An engine made without
 * one takes hr_tuning_default(), which is where the environment's switches
 * enter. docs/performance.md lists the variables.
 */
#ifndef HR_UTIL_ENV_H
#define HR_UTIL_ENV_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hr_tuning {
    bool attn_naive;   /* cuda: the simple attention kernel, not flash */
    bool no_graphs;    /* cuda: launch every kernel instead of replaying a graph */
    bool no_norm_fold; /* cuda: each RMSNorm's weight applied by the norm, not folded into
                          the bf16 matrix after it at load */
    bool no_overlap;   /* wait for each decode step before queuing the next, instead of
                          queuing a lone sequence's next step while the host takes in the
                          token before */
    bool skip_upload;  /* cuda: weights allocated but not copied (memory and speed
                          measurements only: the outputs are meaningless) */
    bool no_pstep;     /* cuda: batch-1 decode steps op by op, not as one persistent
                          kernel (HEADROOM_CUDA_PSTEP=0) */
    int32_t dec_fill;  /* cuda: blocks a decode step's attention aims at; 0: the backend's
                          choice, -1: every split (HEADROOM_CUDA_DEC_FILL) */
} hr_tuning;

/* Nothing switched, but what the environment switches. */
hr_tuning hr_tuning_default(void);

typedef struct {
    const char *model;          /* HEADROOM_MODEL: the CLI's model when -m is not given */
    const char *cpu;            /* HEADROOM_CPU: ref, avx2 or avx512, a kernel level */
    bool cuda_pstep_off;        /* HEADROOM_CUDA_PSTEP=0 */
    int32_t cuda_dec_fill;      /* HEADROOM_CUDA_DEC_FILL=N (0: every split; unset: -1) */
    bool cuda_pstep_trace;      /* HEADROOM_CUDA_PSTEP_TRACE: time per op kind, logged */
    const char *cuda_pstep_timeline; /* HEADROOM_CUDA_PSTEP_TIMELINE=STEP:FILE (a build
                                        with -DHR_PSTEP_TIMELINE=ON) */
    bool cuda_profile;          /* HEADROOM_CUDA_PROFILE (not 0): GPU time by op, logged */
    bool cuda_pdl_off;          /* HEADROOM_CUDA_PDL=0: no programmatic dependent launch */
    bool cuda_wgmma_off;        /* HEADROOM_CUDA_WGMMA=0: prefill attention on mma.sync */
    int32_t cuda_arch_fallback; /* HEADROOM_CUDA_ARCH_FALLBACK=1|80|86|89: the generic
                                   path (with that card's shared memory); 0: unset */
    int32_t cuda_packed_mma_rows; /* HEADROOM_CUDA_PACKED_MMA_ROWS=N: packed-weight steps of
                                     up to N rows (8..64) on the tensor-core kernel, longer
                                     ones on the 16-bit scratch (8: none); unset: -1 */
} hr_env;

/* The environment as it was at the first call (thread-safe); strings are
 * NULL when a variable is unset or empty. */
const hr_env *hr_env_get(void);

#ifdef __cplusplus
}
#endif

#endif
