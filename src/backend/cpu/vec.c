/* vec.c — the portable reference of vec.h and the per-level dispatch: one
 * loop per primitive, summing in index order, the oracle of the SIMD files. */
#include "backend/cpu/vec.h"

#include "backend/cpu/cpu_features.h"
#include "util/fp16.h"

/* What x's elements are: each primitive below is one body, specialised by a
 * constant of this type once inlined. */
typedef enum { ELEM_F32, ELEM_F16, ELEM_BF16 } vec_elem;

static inline float elem_at(const void *x, int64_t i, vec_elem e) {
    if (e == ELEM_F32)
        return ((const float *)x)[i];
    uint16_t h = ((const uint16_t *)x)[i];
    return e == ELEM_F16 ? hr_f16_to_f32(h) : hr_bf16_to_f32(h);
}

static inline void dot_rows(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                            const void *x, int64_t n, vec_elem e) {
    for (int32_t j = 0; j < m; j++) {
        const float *aj = a + (int64_t)j * lda;
        float s = 0.0f;
        for (int64_t i = 0; i < n; i++)
            s += aj[i] * elem_at(x, i, e);
        y[(int64_t)j * ldy] = s;
    }
}

static inline void axpy_rows(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                             const void *x, int64_t n, vec_elem e) {
    for (int32_t j = 0; j < m; j++) {
        float *yj = y + (int64_t)j * ldy;
        const float aj = a[(int64_t)j * lda];
        for (int64_t i = 0; i < n; i++)
            yj[i] += aj * elem_at(x, i, e);
    }
}

void cpu_dot_rows_ref(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                      const void *x, int64_t n) {
    dot_rows(y, ldy, a, lda, m, x, n, ELEM_F32);
}

void cpu_dot_rows_f16_ref(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                          const void *x, int64_t n) {
    dot_rows(y, ldy, a, lda, m, x, n, ELEM_F16);
}

void cpu_dot_rows_bf16_ref(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                           const void *x, int64_t n) {
    dot_rows(y, ldy, a, lda, m, x, n, ELEM_BF16);
}

void cpu_axpy_rows_ref(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                       const void *x, int64_t n) {
    axpy_rows(y, ldy, a, lda, m, x, n, ELEM_F32);
}

void cpu_axpy_rows_f16_ref(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                           const void *x, int64_t n) {
    axpy_rows(y, ldy, a, lda, m, x, n, ELEM_F16);
}

void cpu_axpy_rows_bf16_ref(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                            const void *x, int64_t n) {
    axpy_rows(y, ldy, a, lda, m, x, n, ELEM_BF16);
}

static const cpu_vec_ops vec_ops[CPU_LEVEL_COUNT] = {
    [CPU_LEVEL_REF] = {.dot_rows = cpu_dot_rows_ref,
                       .dot_rows_f16 = cpu_dot_rows_f16_ref,
                       .dot_rows_bf16 = cpu_dot_rows_bf16_ref,
                       .axpy_rows = cpu_axpy_rows_ref,
                       .axpy_rows_f16 = cpu_axpy_rows_f16_ref,
                       .axpy_rows_bf16 = cpu_axpy_rows_bf16_ref},
    [CPU_LEVEL_AVX2] = {.dot_rows = cpu_dot_rows_avx2,
                        .dot_rows_f16 = cpu_dot_rows_f16_avx2,
                        .dot_rows_bf16 = cpu_dot_rows_bf16_avx2,
                        .axpy_rows = cpu_axpy_rows_avx2,
                        .axpy_rows_f16 = cpu_axpy_rows_f16_avx2,
                        .axpy_rows_bf16 = cpu_axpy_rows_bf16_avx2},
    [CPU_LEVEL_AVX512] = {.dot_rows = cpu_dot_rows_avx512,
                          .dot_rows_f16 = cpu_dot_rows_f16_avx512,
                          .dot_rows_bf16 = cpu_dot_rows_bf16_avx512,
                          .axpy_rows = cpu_axpy_rows_avx512,
                          .axpy_rows_f16 = cpu_axpy_rows_f16_avx512,
                          .axpy_rows_bf16 = cpu_axpy_rows_bf16_avx512},
};

const cpu_vec_ops *cpu_vec_ops_get(void) { return &vec_ops[cpu_level_active()]; }
