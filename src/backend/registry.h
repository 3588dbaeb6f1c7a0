/*
 * registry.h — the devices behind --device, one entry each: whether this
 * build and machine have it, what it is, its memory, and the constructor of
 * its backend. The engine chooses and builds a backend here and nowhere
 * else; a device not built in (CUDA without nvcc) still has an entry, whose
 * answers say why it cannot run.
 */
#ifndef HR_BACKEND_REGISTRY_H
#define HR_BACKEND_REGISTRY_H

#include "backend/backend.h"

typedef struct {
    hr_device device;
    const char *name;                  /* "cpu", "cuda" */
    bool (*available)(void);           /* built in and present */
    const char *(*why_not)(void);      /* when not available, in words */
    const char *(*describe)(void);     /* "NVIDIA H200", or the CPU's model name */
    const char *(*path)(void);         /* the kernels it runs: "hopper", "generic", "avx512" */
    hr_status (*memory)(uint64_t *free_bytes, uint64_t *total_bytes, hr_error *err);
    /* bytes a second copied (read + written) and read alone; HR_ERR_UNSUPPORTED
     * where not measured */
    hr_status (*bandwidth)(double *copy_bytes_per_s, double *read_bytes_per_s, hr_error *err);
    hr_status (*create)(const hr_model_info *info, const be_params *p, hr_backend **out,
                        hr_error *err);
    int64_t (*fused_steps)(const hr_backend *b); /* decode steps run as one kernel so far */
} be_device;

/* The entry of a device (cpu or cuda); NULL for HR_DEVICE_AUTO or an unknown
 * value. */
const be_device *backend_device(hr_device device);

/* The device to run on: `wanted`, or with HR_DEVICE_AUTO the first available
 * of cuda, cpu. HR_ERR_UNSUPPORTED with the entry's why_not when `wanted`
 * is not available. */
hr_status backend_pick(hr_device wanted, const be_device **out, hr_error *err);

#endif
