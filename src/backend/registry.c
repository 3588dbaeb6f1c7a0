/*
 * registry.c — the table of devices (registry.h): the CPU, always present,
 * and CUDA, which without HR_HAVE_CUDA is an entry that says how to build
 * it. The only file outside backend/cuda/ that knows whether CUDA is in.
 */
#include "backend/registry.h"

#include "backend/cpu/cpu_features.h"
#include "util/error.h"

#include <stdio.h>
#include <string.h>

#ifdef HR_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

/* ---------------------------------------------------------------- cpu */

static bool cpu_available(void) { return true; }

static const char *cpu_why_not(void) { return "the cpu is always there"; }

/* the CPU's model name from /proc/cpuinfo, read once */
static const char *cpu_describe(void) {
    static char name[256];
    if (name[0])
        return name;
    snprintf(name, sizeof name, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return name;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0)
            continue;
        char *c = strchr(line, ':');
        if (c) {
            c++;
            while (*c == ' ')
                c++;
            c[strcspn(c, "\n")] = '\0';
            snprintf(name, sizeof name, "%s", c);
        }
        break;
    }
    fclose(f);
    return name;
}

static const char *cpu_path(void) { return cpu_level_name(cpu_level_active()); }

/* MemAvailable and MemTotal from /proc/meminfo */
static hr_status cpu_memory(uint64_t *free_bytes, uint64_t *total_bytes, hr_error *err) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return hr_err_set(err, HR_ERR_IO, "cannot read /proc/meminfo");
    char line[256];
    unsigned long long avail = 0, total = 0, v;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemAvailable: %llu kB", &v) == 1)
            avail = v * 1024;
        else if (sscanf(line, "MemTotal: %llu kB", &v) == 1)
            total = v * 1024;
    }
    fclose(f);
    if (!total)
        return hr_err_set(err, HR_ERR_IO, "/proc/meminfo: no MemTotal");
    *free_bytes = avail;
    *total_bytes = total;
    return HR_OK;
}

static hr_status cpu_bandwidth(double *copy_bytes_per_s, double *read_bytes_per_s,
                               hr_error *err) {
    (void)copy_bytes_per_s;
    (void)read_bytes_per_s;
    return hr_err_set(err, HR_ERR_UNSUPPORTED, "bandwidth: measured on cuda only");
}

static int64_t no_fused_steps(const hr_backend *b) {
    (void)b;
    return 0;
}

/* ---------------------------------------------------------------- cuda */

#ifdef HR_HAVE_CUDA
static bool cuda_available(void) { return cuda_device_count() > 0; }

static int64_t cuda_fused_steps(const hr_backend *b) {
    return strcmp(b->ops->name, "cuda") == 0 ? cuda_pstep_steps(b) : 0;
}
#else
static bool cuda_available(void) { return false; }

static const char *cuda_why_not(void) {
    return "this binary was built without the CUDA backend (no nvcc or no GPU at build "
           "time): rebuild with make CUDA=ON or cmake -DHR_CUDA=ON";
}

static const char *cuda_device_name(void) { return "none"; }

static const char *cuda_path(void) { return "none"; }

static hr_status cuda_memory(uint64_t *free_bytes, uint64_t *total_bytes, hr_error *err) {
    (void)free_bytes;
    (void)total_bytes;
    return hr_err_set(err, HR_ERR_UNSUPPORTED, "%s; give the budget with --mem",
                      cuda_why_not());
}

static hr_status cuda_bandwidth(double *copy_bytes_per_s, double *read_bytes_per_s,
                                hr_error *err) {
    (void)copy_bytes_per_s;
    (void)read_bytes_per_s;
    return hr_err_set(err, HR_ERR_UNSUPPORTED, "%s", cuda_why_not());
}

static hr_status backend_cuda_create(const hr_model_info *info, const be_params *p,
                                     hr_backend **out, hr_error *err) {
    (void)info;
    (void)p;
    (void)out;
    return hr_err_set(err, HR_ERR_UNSUPPORTED, "%s", cuda_why_not());
}

#define cuda_fused_steps no_fused_steps
#endif

/* ---------------------------------------------------------------- the table */

static const be_device devices[] = {
    {.device = HR_DEVICE_CUDA,
     .name = "cuda",
     .available = cuda_available,
     .why_not = cuda_why_not,
     .describe = cuda_device_name,
     .path = cuda_path,
     .memory = cuda_memory,
     .bandwidth = cuda_bandwidth,
     .create = backend_cuda_create,
     .fused_steps = cuda_fused_steps},
    {.device = HR_DEVICE_CPU,
     .name = "cpu",
     .available = cpu_available,
     .why_not = cpu_why_not,
     .describe = cpu_describe,
     .path = cpu_path,
     .memory = cpu_memory,
     .bandwidth = cpu_bandwidth,
     .create = backend_cpu_create,
     .fused_steps = no_fused_steps},
};
#define N_DEVICES (sizeof devices / sizeof devices[0])

const be_device *backend_device(hr_device device) {
    for (size_t i = 0; i < N_DEVICES; i++)
        if (devices[i].device == device)
            return &devices[i];
    return NULL;
}

hr_status backend_pick(hr_device wanted, const be_device **out, hr_error *err) {
    if (wanted == HR_DEVICE_AUTO) { /* the table's order is the preference */
        for (size_t i = 0; i < N_DEVICES; i++)
            if (devices[i].available()) {
                *out = &devices[i];
                return HR_OK;
            }
    }
    const be_device *d = backend_device(wanted);
    if (!d)
        return hr_err_set(err, HR_ERR_INVALID, "device %d is not cpu, cuda or auto",
                          (int)wanted);
    if (!d->available())
        return hr_err_set(err, HR_ERR_UNSUPPORTED, "%s (use --device cpu)", d->why_not());
    *out = d;
    return HR_OK;
}
