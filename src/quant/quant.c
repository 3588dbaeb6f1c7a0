/*
 * quant.c — dispatch from hr_dtype to the reference row converters, plus the
 * three plain float formats (F32, F16, BF16).
 *
 * One designated-initializer table maps each dtype to its dequantize and
 * quantize functions; a NULL entry means "not supported", so the can_*
 * queries and the dispatchers can never disagree, and test_quant walks
 * hr_dtype_table to check every quantized type has a dequantizer. The block
 * formats live in q_legacy.c (32-element blocks), q_kquants*.c (256-element
 * super-blocks) and q_codebook.c (bitsandbytes' NF4/FP4). The row functions
 * take n elements (a multiple of the block size, checked here) and pointers
 * aligned for the block struct (2 bytes; 4 for F32 and Q8_K), as GGUF's
 * 32-byte tensor alignment guarantees.
 *
 * F16/BF16 go through util/fp16.h: round-to-nearest-even, NaN stays NaN,
 * overflow to infinity, subnormals kept (no flush to zero), matching ggml's
 * GGML_FP32_TO_FP16 / GGML_FP32_TO_BF16 bit for bit on every non-NaN input.
 */
#include "quant/quant.h"

#include "quant/blocks.h"
#include "util/dtype.h"
#include "util/error.h"
#include "util/fp16.h"

#include <string.h>

typedef void (*quant_dequantize_fn)(const void *src, float *dst, int64_t n);
typedef void (*quant_quantize_fn)(const float *src, void *dst, int64_t n);

typedef struct {
    quant_dequantize_fn dequantize;
    quant_quantize_fn quantize;
} quant_ops;

static void dequantize_f32(const void *src, float *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static void quantize_f32(const float *src, void *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static void dequantize_f16(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = hr_f16_to_f32(h[i]);
}

static void quantize_f16(const float *src, void *dst, int64_t n) {
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++)
        h[i] = hr_f32_to_f16(src[i]);
}

static void dequantize_bf16(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = hr_bf16_to_f32(h[i]);
}

static void quantize_bf16(const float *src, void *dst, int64_t n) {
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++)
        h[i] = hr_f32_to_bf16(src[i]);
}

static const quant_ops quant_table[HR_DTYPE_COUNT] = {
    [HR_DTYPE_F32] = {dequantize_f32, quantize_f32},
    [HR_DTYPE_F16] = {dequantize_f16, quantize_f16},
    [HR_DTYPE_BF16] = {dequantize_bf16, quantize_bf16},
    [HR_DTYPE_Q8_0] = {quant_dequantize_q8_0, quant_quantize_q8_0},
    [HR_DTYPE_Q4_0] = {quant_dequantize_q4_0, quant_quantize_q4_0},
    [HR_DTYPE_Q4_1] = {quant_dequantize_q4_1, quant_quantize_q4_1},
    [HR_DTYPE_Q5_0] = {quant_dequantize_q5_0, quant_quantize_q5_0},
    [HR_DTYPE_Q5_1] = {quant_dequantize_q5_1, quant_quantize_q5_1},
    [HR_DTYPE_Q2_K] = {quant_dequantize_q2_K, quant_quantize_q2_K},
    [HR_DTYPE_Q3_K] = {quant_dequantize_q3_K, quant_quantize_q3_K},
    [HR_DTYPE_Q4_K] = {quant_dequantize_q4_K, quant_quantize_q4_K},
    [HR_DTYPE_Q5_K] = {quant_dequantize_q5_K, quant_quantize_q5_K},
    [HR_DTYPE_Q6_K] = {quant_dequantize_q6_K, quant_quantize_q6_K},
    [HR_DTYPE_Q8_K] = {quant_dequantize_q8_K, quant_quantize_q8_K},
    [HR_DTYPE_NF4] = {quant_dequantize_nf4, quant_quantize_nf4},
    [HR_DTYPE_FP4] = {quant_dequantize_fp4, quant_quantize_fp4},
    /* integer and f64 tensors are never weights; they have no entry */
};

bool quant_can_dequantize(hr_dtype t) {
    return (unsigned)t < HR_DTYPE_COUNT && quant_table[t].dequantize != NULL;
}

bool quant_can_quantize(hr_dtype t) {
    return (unsigned)t < HR_DTYPE_COUNT && quant_table[t].quantize != NULL;
}

void quant_dequantize_row(hr_dtype t, const void *src, float *dst, int64_t n) {
    HR_ASSERT(quant_can_dequantize(t));
    HR_ASSERT(n >= 0 && n % hr_dtype_table[t].block_elems == 0);
    if (n > 0) /* empty rows may come with NULL pointers */
        quant_table[t].dequantize(src, dst, n);
}

void quant_quantize_row(hr_dtype t, const float *src, void *dst, int64_t n) {
    HR_ASSERT(quant_can_quantize(t));
    HR_ASSERT(n >= 0 && n % hr_dtype_table[t].block_elems == 0);
    if (n > 0)
        quant_table[t].quantize(src, dst, n);
}
