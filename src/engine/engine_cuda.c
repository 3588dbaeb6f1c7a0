/*
 * engine_cuda.c — the engine's view of the CUDA backend: whether it is built
 * in and a device is present. Without HR_HAVE_CUDA it says why not.
 */
#include "engine/engine.h"

#include <string.h>

#ifdef HR_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"

bool engine_cuda_available(void) { return cuda_device_count() > 0; }

const char *engine_cuda_why_not(void) { return cuda_why_not(); }

const char *engine_cuda_device_name(void) { return cuda_device_name(); }

const char *engine_cuda_path(void) { return cuda_path(); }

hr_status engine_cuda_memory(uint64_t *free_bytes, uint64_t *total_bytes, hr_error *err) {
    return cuda_memory(free_bytes, total_bytes, err);
}

hr_status engine_cuda_bandwidth(double *copy_bytes_per_s, double *read_bytes_per_s,
                                hr_error *err) {
    return cuda_bandwidth(copy_bytes_per_s, read_bytes_per_s, err);
}

hr_status engine_cuda_backend_create(const hr_model_info *info, const be_params *p,
                                     hr_backend **out, hr_error *err) {
    return backend_cuda_create(info, p, out, err);
}

int64_t engine_cuda_pstep_steps(const hr_backend *b) {
    return strcmp(b->ops->name, "cuda") == 0 ? cuda_pstep_steps(b) : 0;
}
#else
bool engine_cuda_available(void) { return false; }

const char *engine_cuda_why_not(void) {
    return "this binary was built without the CUDA backend (no nvcc or no GPU at build "
           "time): rebuild with make CUDA=ON or cmake -DHR_CUDA=ON";
}

const char *engine_cuda_device_name(void) { return "none"; }

const char *engine_cuda_path(void) { return "none"; }

hr_status engine_cuda_memory(uint64_t *free_bytes, uint64_t *total_bytes, hr_error *err) {
    (void)free_bytes;
    (void)total_bytes;
    return hr_err_set(err, HR_ERR_UNSUPPORTED, "%s; give the budget with --mem",
                      engine_cuda_why_not());
}

hr_status engine_cuda_bandwidth(double *copy_bytes_per_s, double *read_bytes_per_s,
                                hr_error *err) {
    (void)copy_bytes_per_s;
    (void)read_bytes_per_s;
    return hr_err_set(err, HR_ERR_UNSUPPORTED, "%s", engine_cuda_why_not());
}

hr_status engine_cuda_backend_create(const hr_model_info *info, const be_params *p,
                                     hr_backend **out, hr_error *err) {
    (void)info;
    (void)p;
    (void)out;
    return hr_err_set(err, HR_ERR_UNSUPPORTED, "%s", engine_cuda_why_not());
}

int64_t engine_cuda_pstep_steps(const hr_backend *b) {
    (void)b;
    return 0;
}
#endif
