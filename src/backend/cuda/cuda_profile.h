/*
 * cuda_profile.h — where a step's GPU time goes, op by op, for tuning on
 * the device without a profiler there (the GPU machine has no nsys).
 *
 * Set HEADROOM_CUDA_PROFILE=1 and run with eager steps (--graphs off: a
 * replayed graph runs no op code to mark). The backend marks the stream
 * where each op starts and where the step ends; an op's time is the span
 * from its mark to the next one, so it also holds any idle gap that follows
 * it (a step the host cannot feed fast enough shows as time in the op
 * before the gap). The first step of each size is not counted (kernels
 * load at their first launch). Totals by op, rows of the step and weight
 * shape are logged when the backend is freed, largest first.
 */
#ifndef HR_BACKEND_CUDA_CUDA_PROFILE_H
#define HR_BACKEND_CUDA_CUDA_PROFILE_H

#include "util/error.h"

#include <cuda_runtime_api.h>
#include <stdint.h>

typedef struct cuda_profile cuda_profile;

/* NULL in *out (and HR_OK) when HEADROOM_CUDA_PROFILE is unset or "0". */
hr_status cuda_profile_create(cuda_profile **out, hr_error *err);
void cuda_profile_free(cuda_profile *p);

/* Marks the start of an op on stream s in a step of step_rows rows;
 * n_rows x k names a matmul's weight (0 x 0 for other ops). op must be a
 * string literal (it is kept). */
void cuda_profile_mark(cuda_profile *p, cudaStream_t s, const char *op, int64_t step_rows,
                       int64_t n_rows, int64_t k);
/* Marks the end of the step's work; call before synchronising the stream. */
void cuda_profile_step_end(cuda_profile *p, cudaStream_t s);
/* After the stream is synchronised: adds the step's spans to the totals. */
void cuda_profile_collect(cuda_profile *p);
/* Logs the totals (warning level, so the default log shows them). */
void cuda_profile_report(const cuda_profile *p);

#endif
