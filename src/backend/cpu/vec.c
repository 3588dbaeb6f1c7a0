/* vec.c — the portable reference of vec.h and the per-level dispatch: one
 * loop per primitive, summing in index order, the oracle of the SIMD files.
 * A block type's element is (float)code * f16(scale), quant_dequantize_row's
 * formula (quant/blocks.h), evaluated where it is read. */
#include "backend/cpu/vec.h"

#include "backend/cpu/cpu_features.h"
#include "quant/blocks.h"
#include "util/fp16.h"

/* What x's elements are: each primitive below is one body, specialised by a
 * constant of this type once inlined. */
typedef enum { ELEM_F32, ELEM_F16, ELEM_BF16, ELEM_Q8_0, ELEM_Q4_0 } vec_elem;

static inline float elem_at(const void *x, int64_t i, vec_elem e) {
    if (e == ELEM_F32)
        return ((const float *)x)[i];
    const int j = (int)(i % QUANT_QK);
    if (e == ELEM_Q8_0) {
        const block_q8_0 *b = (const block_q8_0 *)x + i / QUANT_QK;
        return (float)b->qs[j] * hr_f16_to_f32(b->d);
    }
    if (e == ELEM_Q4_0) {
        const block_q4_0 *b = (const block_q4_0 *)x + i / QUANT_QK;
        const int code = j < QUANT_QK / 2 ? b->qs[j] & 15 : b->qs[j - QUANT_QK / 2] >> 4;
        return (float)(code - 8) * hr_f16_to_f32(b->d);
    }
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

/* The entry points: one per (primitive, element type). */
#define VEC_REF(op, suffix, elem)                                                             \
    void cpu_##op##_rows##suffix##_ref(float *y, int64_t ldy, const float *a, int64_t lda,    \
                                       int32_t m, const void *x, int64_t n) {                 \
        op##_rows(y, ldy, a, lda, m, x, n, elem);                                             \
    }
VEC_REF(dot, , ELEM_F32)
VEC_REF(dot, _f16, ELEM_F16)
VEC_REF(dot, _bf16, ELEM_BF16)
VEC_REF(dot, _q8_0, ELEM_Q8_0)
VEC_REF(dot, _q4_0, ELEM_Q4_0)
VEC_REF(axpy, , ELEM_F32)
VEC_REF(axpy, _f16, ELEM_F16)
VEC_REF(axpy, _bf16, ELEM_BF16)
VEC_REF(axpy, _q8_0, ELEM_Q8_0)
VEC_REF(axpy, _q4_0, ELEM_Q4_0)

#define VEC_OPS(level)                                                                        \
    {.dot_rows = cpu_dot_rows_##level, .dot_rows_f16 = cpu_dot_rows_f16_##level,              \
     .dot_rows_bf16 = cpu_dot_rows_bf16_##level, .dot_rows_q8_0 = cpu_dot_rows_q8_0_##level,  \
     .dot_rows_q4_0 = cpu_dot_rows_q4_0_##level, .axpy_rows = cpu_axpy_rows_##level,          \
     .axpy_rows_f16 = cpu_axpy_rows_f16_##level, .axpy_rows_bf16 = cpu_axpy_rows_bf16_##level, \
     .axpy_rows_q8_0 = cpu_axpy_rows_q8_0_##level,                                            \
     .axpy_rows_q4_0 = cpu_axpy_rows_q4_0_##level}

static const cpu_vec_ops vec_ops[CPU_LEVEL_COUNT] = {
    [CPU_LEVEL_REF] = VEC_OPS(ref),
    [CPU_LEVEL_AVX2] = VEC_OPS(avx2),
    [CPU_LEVEL_AVX512] = VEC_OPS(avx512),
};

const cpu_vec_ops *cpu_vec_ops_get(void) { return &vec_ops[cpu_level_active()]; }

cpu_dot_rows_fn cpu_vec_dot_rows_for(const cpu_vec_ops *v, hr_dtype t) {
    switch (t) {
    case HR_DTYPE_F32: return v->dot_rows;
    case HR_DTYPE_F16: return v->dot_rows_f16;
    case HR_DTYPE_BF16: return v->dot_rows_bf16;
    case HR_DTYPE_Q8_0: return v->dot_rows_q8_0;
    case HR_DTYPE_Q4_0: return v->dot_rows_q4_0;
    default: return NULL;
    }
}

cpu_axpy_rows_fn cpu_vec_axpy_rows_for(const cpu_vec_ops *v, hr_dtype t) {
    switch (t) {
    case HR_DTYPE_F32: return v->axpy_rows;
    case HR_DTYPE_F16: return v->axpy_rows_f16;
    case HR_DTYPE_BF16: return v->axpy_rows_bf16;
    case HR_DTYPE_Q8_0: return v->axpy_rows_q8_0;
    case HR_DTYPE_Q4_0: return v->axpy_rows_q4_0;
    default: return NULL;
    }
}
