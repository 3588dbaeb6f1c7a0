/*
 * q_codebook.c — bitsandbytes' 4-bit codebook types, NF4 and FP4, in
 * headroom's block of 64 (blocks.h): reference dequantizer and quantizer.
 *
 * The quantizer is bitsandbytes' (its "default" backend, 0.50): per block of
 * 64, absmax = max |x|; each x * (1 / absmax) (f32, absmax at least 1e-38),
 * clamped to [-1, 1], takes the code of the table value whose interval of
 * midpoints holds it, a value on a midpoint going to the smaller neighbour
 * (torch.bucketize). Only the absmax kept differs: f16 here, f32 there.
 */
#include "quant/blocks.h"

#include "util/fp16.h"

#include <math.h>

/* bitsandbytes' tables (functional.get_4bit_type), as the f32 values its
 * checkpoints store in quant_map (blocks.h holds the numbers). */
const float quant_nf4_values[16] = QUANT_NF4_VALUES;
const float quant_fp4_values[16] = QUANT_FP4_VALUES;

static void dequantize(const float table[16], const void *src, float *dst, int64_t n) {
    const block_nf4 *b = src;
    for (int64_t i = 0; i < n / QUANT_QK_NF4; i++, b++) {
        const float d = hr_f16_to_f32(b->d);
        for (int j = 0; j < 32; j++) {
            dst[64 * i + j] = table[b->qs[j] & 15] * d;
            dst[64 * i + 32 + j] = table[b->qs[j] >> 4] * d;
        }
    }
}

void quant_dequantize_nf4(const void *src, float *dst, int64_t n) {
    dequantize(quant_nf4_values, src, dst, n);
}

void quant_dequantize_fp4(const void *src, float *dst, int64_t n) {
    dequantize(quant_fp4_values, src, dst, n);
}

/* The table's codes in ascending order of value and the 15 midpoints between
 * neighbours, computed as bitsandbytes does ((a + b) / 2 in f32). */
typedef struct {
    uint8_t order[16];
    float mid[15];
} codebook;

static codebook make_codebook(const float table[16]) {
    codebook c;
    for (int i = 0; i < 16; i++)
        c.order[i] = (uint8_t)i;
    /* insertion sort, stable: FP4's +0 (code 0) stays before its -0 (code 8) */
    for (int i = 1; i < 16; i++)
        for (int j = i; j > 0 && table[c.order[j - 1]] > table[c.order[j]]; j--) {
            uint8_t t = c.order[j];
            c.order[j] = c.order[j - 1];
            c.order[j - 1] = t;
        }
    for (int i = 0; i < 15; i++)
        c.mid[i] = (table[c.order[i]] + table[c.order[i + 1]]) / 2.0f;
    return c;
}

static uint8_t nearest(const codebook *c, float v) {
    int k = 0; /* midpoints strictly below v */
    while (k < 15 && c->mid[k] < v)
        k++;
    return c->order[k];
}

static void quantize(const float table[16], const float *src, void *dst, int64_t n) {
    const codebook c = make_codebook(table);
    block_nf4 *b = dst;
    for (int64_t i = 0; i < n / QUANT_QK_NF4; i++, b++) {
        const float *x = src + 64 * i;
        float amax = 0.0f;
        for (int j = 0; j < 64; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        const float inv = 1.0f / fmaxf(amax, 1e-38f);
        uint8_t q[64];
        for (int j = 0; j < 64; j++)
            q[j] = nearest(&c, fminf(fmaxf(x[j] * inv, -1.0f), 1.0f));
        b->d = hr_f32_to_f16(amax);
        for (int j = 0; j < 32; j++)
            b->qs[j] = (uint8_t)(q[j] | q[32 + j] << 4);
    }
}

void quant_quantize_nf4(const float *src, void *dst, int64_t n) {
    quantize(quant_nf4_values, src, dst, n);
}

void quant_quantize_fp4(const float *src, void *dst, int64_t n) {
    quantize(quant_fp4_values, src, dst, n);
}
