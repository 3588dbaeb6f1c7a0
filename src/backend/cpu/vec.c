/* vec.c — the portable reference of vec.h and the per-level dispatch. */
#include "backend/cpu/vec.h"

#include "backend/cpu/cpu_features.h"

float cpu_dot_ref(const float *a, const float *b, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

void cpu_axpy_ref(float *y, float a, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

static const cpu_vec_ops vec_ops[CPU_LEVEL_COUNT] = {
    [CPU_LEVEL_REF] = {.dot = cpu_dot_ref, .axpy = cpu_axpy_ref},
    [CPU_LEVEL_AVX2] = {.dot = cpu_dot_avx2, .axpy = cpu_axpy_avx2},
    [CPU_LEVEL_AVX512] = {.dot = cpu_dot_avx512, .axpy = cpu_axpy_avx512},
};

const cpu_vec_ops *cpu_vec_ops_get(void) { return &vec_ops[cpu_level_active()]; }
