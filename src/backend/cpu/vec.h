/*
 * vec.h — small f32 vector primitives for the ops that are not matmuls
 * (attention's q.k dot products and its weighted sum of v), one version per
 * SIMD level like the matmul kernels: vec.c is the portable reference,
 * vec_avx2.c and vec_avx512.c the fast ones, picked by cpu_vec_ops_get().
 */
#ifndef HR_BACKEND_CPU_VEC_H
#define HR_BACKEND_CPU_VEC_H

#include <stdint.h>

typedef struct {
    float (*dot)(const float *a, const float *b, int64_t n);
    void (*axpy)(float *y, float a, const float *x, int64_t n); /* y += a x */
} cpu_vec_ops;

/* The primitives of the active SIMD level (cpu_features.h). */
const cpu_vec_ops *cpu_vec_ops_get(void);

float cpu_dot_ref(const float *a, const float *b, int64_t n);
void cpu_axpy_ref(float *y, float a, const float *x, int64_t n);
float cpu_dot_avx2(const float *a, const float *b, int64_t n);
void cpu_axpy_avx2(float *y, float a, const float *x, int64_t n);
float cpu_dot_avx512(const float *a, const float *b, int64_t n);
void cpu_axpy_avx512(float *y, float a, const float *x, int64_t n);

#endif
