/*
 * cuda_backend.h — the CUDA backend as the rest of the library sees it:
 * plain C, no CUDA headers. The host side is cuda_backend.c and the files
 * it lists; the kernels are the *.cu files behind kernels.h.
 */
#ifndef HR_BACKEND_CUDA_CUDA_BACKEND_H
#define HR_BACKEND_CUDA_CUDA_BACKEND_H

#include "backend/backend.h"

/* Number of CUDA devices (0 when none or the driver is missing). */
int cuda_device_count(void);
/* Why cuda_device_count() is 0, in words. */
const char *cuda_why_not(void);
/* The name of device 0 as the driver reports it ("NVIDIA H200"). */
const char *cuda_device_name(void);
/* The kernels' path on the device the backend runs on: "hopper" or
 * "generic" (caps.cu says what each holds). */
const char *cuda_path(void);

/* Free and total memory of device 0 (cudaMemGetInfo). */
hr_status cuda_memory(uint64_t *free_bytes, uint64_t *total_bytes, hr_error *err);

/* The device's copy bandwidth (bytes read plus written a second) and read
 * bandwidth, timed on buffers much larger than L2; freed after. */
hr_status cuda_bandwidth(double *copy_bytes_per_s, double *read_bytes_per_s, hr_error *err);

/* Decode steps of one row at positions below this run as one kernel
 * (persistent.cu; its attention walks the keys with one warp a key, and the
 * flash-decoding kernel is faster beyond). */
#define CUDA_PSTEP_MAX_CTX 4096

/* Decode steps this backend ran as one kernel (persistent.cu), for tests
 * and reports; b must be a CUDA backend. */
int64_t cuda_pstep_steps(const hr_backend *b);

hr_status backend_cuda_create(const hr_model_info *info, const be_params *p, hr_backend **out,
                              hr_error *err);

#endif
