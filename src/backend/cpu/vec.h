/*
 * vec.h — small vector primitives for the ops that are not matmuls
 * (attention's q.k dot products and its weighted sum of v), one version per
 * SIMD level like the matmul kernels: vec.c is the portable reference,
 * vec_avx2.c and vec_avx512.c the fast ones, picked by cpu_vec_ops_get().
 *
 * Each primitive works on m rows at once against one vector x: attention's
 * m = H/Hkv query heads share a kv head, so one call loads each cached K or
 * V row once for the whole group. x comes in the KV cache's element type
 * (f32, or f16 / bf16 as their uint16_t bits) and is widened to f32 in
 * registers as it is loaded, so attention reads cached rows where they lie.
 * Converting each row into an f32 buffer first, with a scalar loop, again
 * for every query row and every decode step, made a 16-bit cache 1.6-2.8x
 * slower than an f32 one (issue 49). Products and sums are f32 whatever the
 * element type; the widening is exact.
 *
 * x may also be a row of GGUF blocks (q8_0, q4_0: n a multiple of 32, x
 * n/32 blocks of quant/blocks.h): each block's codes are widened to f32 and
 * multiplied by its f16 scale in registers, (float)code * scale being exactly
 * what quant_dequantize_row gives, so a block row is an f32 row of those
 * values to the primitives (the same bounds hold; issue 42).
 *
 * Strides are in elements; row j of a is a + j * lda, and so on.
 */
#ifndef HR_BACKEND_CPU_VEC_H
#define HR_BACKEND_CPU_VEC_H

#include "headroom.h" /* hr_dtype */

#include <stdint.h>

/* y[j * ldy] = a[j * lda + 0 .. n) . x[0 .. n)        for j < m */
typedef void (*cpu_dot_rows_fn)(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                                const void *x, int64_t n);
/* y[j * ldy + 0 .. n) += a[j * lda] * x[0 .. n)       for j < m */
typedef void (*cpu_axpy_rows_fn)(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                                 const void *x, int64_t n);

typedef struct {
    cpu_dot_rows_fn dot_rows, dot_rows_f16, dot_rows_bf16;    /* x: f32, f16, bf16 */
    cpu_dot_rows_fn dot_rows_q8_0, dot_rows_q4_0;             /* x: blocks of 32 */
    cpu_axpy_rows_fn axpy_rows, axpy_rows_f16, axpy_rows_bf16;
    cpu_axpy_rows_fn axpy_rows_q8_0, axpy_rows_q4_0;
} cpu_vec_ops;

/* The primitives of the active SIMD level (cpu_features.h). */
const cpu_vec_ops *cpu_vec_ops_get(void);
/* The primitive of v for x of type t (f32, f16, bf16, q8_0, q4_0); NULL for
 * another type. */
cpu_dot_rows_fn cpu_vec_dot_rows_for(const cpu_vec_ops *v, hr_dtype t);
cpu_axpy_rows_fn cpu_vec_axpy_rows_for(const cpu_vec_ops *v, hr_dtype t);

void cpu_dot_rows_ref(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                      const void *x, int64_t n);
void cpu_dot_rows_f16_ref(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                          const void *x, int64_t n);
void cpu_dot_rows_bf16_ref(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                           const void *x, int64_t n);
void cpu_axpy_rows_ref(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                       const void *x, int64_t n);
void cpu_axpy_rows_f16_ref(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                           const void *x, int64_t n);
void cpu_axpy_rows_bf16_ref(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                            const void *x, int64_t n);
void cpu_dot_rows_q8_0_ref(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                           const void *x, int64_t n);
void cpu_dot_rows_q4_0_ref(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                           const void *x, int64_t n);
void cpu_axpy_rows_q8_0_ref(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                            const void *x, int64_t n);
void cpu_axpy_rows_q4_0_ref(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                            const void *x, int64_t n);

void cpu_dot_rows_avx2(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                       const void *x, int64_t n);
void cpu_dot_rows_f16_avx2(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                           const void *x, int64_t n);
void cpu_dot_rows_bf16_avx2(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                            const void *x, int64_t n);
void cpu_axpy_rows_avx2(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                        const void *x, int64_t n);
void cpu_axpy_rows_f16_avx2(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                            const void *x, int64_t n);
void cpu_axpy_rows_bf16_avx2(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                             const void *x, int64_t n);
void cpu_dot_rows_q8_0_avx2(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                            const void *x, int64_t n);
void cpu_dot_rows_q4_0_avx2(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                            const void *x, int64_t n);
void cpu_axpy_rows_q8_0_avx2(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                             const void *x, int64_t n);
void cpu_axpy_rows_q4_0_avx2(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                             const void *x, int64_t n);

void cpu_dot_rows_avx512(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                         const void *x, int64_t n);
void cpu_dot_rows_f16_avx512(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                             const void *x, int64_t n);
void cpu_dot_rows_bf16_avx512(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                              const void *x, int64_t n);
void cpu_axpy_rows_avx512(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                          const void *x, int64_t n);
void cpu_axpy_rows_f16_avx512(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                              const void *x, int64_t n);
void cpu_axpy_rows_bf16_avx512(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                               const void *x, int64_t n);
void cpu_dot_rows_q8_0_avx512(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                              const void *x, int64_t n);
void cpu_dot_rows_q4_0_avx512(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                              const void *x, int64_t n);
void cpu_axpy_rows_q8_0_avx512(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                               const void *x, int64_t n);
void cpu_axpy_rows_q4_0_avx512(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                               const void *x, int64_t n);

#endif
