/*
 * q_legacy.c — reference Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (blocks of 32).
 *
 * Layouts and decoding formulas: blocks.h. The quantizers are ggml's
 * reference ones (quantize_row_*_ref), which is also what gguf-py implements:
 *   Q8_0  d = amax / 127, q = roundf(x / d)          (ties away from zero)
 *   Q4_0  d = max / -8 where max is the first value of largest magnitude,
 *         q = min(15, trunc(x / d + 8.5)) - 8        (max maps to -8)
 *   Q5_0  as Q4_0 with -16, 16.5 and 31
 *   Q4_1  d = (max - min) / 15, m = min, q = min(15, trunc((x - m) / d + 0.5))
 *   Q5_1  as Q4_1 with 31
 * where "x / d" is x * (1 / d) in float: the codes come from the unrounded
 * scale, and only then is d stored as f16 — exactly ggml's order, so the bytes
 * match ggml and gguf-py bit for bit (test_quant checks them against gguf-py).
 *
 * Bit-exactness needs each float operation evaluated as written: every
 * multiply-add that must not become an FMA is split over two statements (GCC
 * in ISO mode never contracts; clang's default contracts only within one
 * expression). Float-to-code conversion clamps in float before the cast, which
 * gives ggml's result for every finite input and a defined one otherwise.
 */
#include "quant/blocks.h"

#include "util/fp16.h"

#include <math.h>
#include <string.h>

/* trunc(v) limited to [0, hi]; ggml writes MIN(hi, (int8_t)v) with v >= 0.
 * A non-finite v (the scale's reciprocal overflowed: a block of subnormals)
 * gives 0, which is what ggml and numpy compute on x86, where an invalid
 * float-to-int conversion yields INT_MIN, whose low byte is 0. */
static uint8_t trunc_code(float v, float hi) {
    if (!isfinite(v))
        return 0;
    return (uint8_t)fminf(fmaxf(v, 0.0f), hi);
}

/* Value of largest magnitude, the first one on ties (ggml's scan order). */
static float block_absmax_signed(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void block_min_max(const float *x, int n, float *min_out, float *max_out) {
    float min = x[0], max = x[0];
    for (int j = 1; j < n; j++) {
        if (x[j] < min)
            min = x[j];
        if (x[j] > max)
            max = x[j];
    }
    *min_out = min;
    *max_out = max;
}

/* ------------------------------------------------------------------ Q8_0 */

void quant_dequantize_q8_0(const void *src, float *dst, int64_t n) {
    const block_q8_0 *b = src;
    for (int64_t ib = 0; ib < n / QUANT_QK; ib++, b++, dst += QUANT_QK) {
        const float d = hr_f16_to_f32(b->d);
        for (int j = 0; j < QUANT_QK; j++)
            dst[j] = (float)b->qs[j] * d;
    }
}

void quant_quantize_q8_0(const float *src, void *dst, int64_t n) {
    block_q8_0 *b = dst;
    for (int64_t ib = 0; ib < n / QUANT_QK; ib++, b++, src += QUANT_QK) {
        float amax = 0.0f;
        for (int j = 0; j < QUANT_QK; j++)
            amax = fmaxf(amax, fabsf(src[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = hr_f32_to_f16(d);
        for (int j = 0; j < QUANT_QK; j++) {
            const float v = roundf(src[j] * id); /* |v| <= 127 when id is finite */
            b->qs[j] = isfinite(v) ? (int8_t)fmaxf(fminf(v, 127.0f), -127.0f) : 0; /* see trunc_code */
        }
    }
}

/* ------------------------------------------------------------------ Q4_0 */

void quant_dequantize_q4_0(const void *src, float *dst, int64_t n) {
    const block_q4_0 *b = src;
    for (int64_t ib = 0; ib < n / QUANT_QK; ib++, b++, dst += QUANT_QK) {
        const float d = hr_f16_to_f32(b->d);
        for (int j = 0; j < QUANT_QK / 2; j++) {
            dst[j] = (float)((b->qs[j] & 15) - 8) * d;
            dst[j + QUANT_QK / 2] = (float)((b->qs[j] >> 4) - 8) * d;
        }
    }
}

void quant_quantize_q4_0(const float *src, void *dst, int64_t n) {
    block_q4_0 *b = dst;
    for (int64_t ib = 0; ib < n / QUANT_QK; ib++, b++, src += QUANT_QK) {
        const float max = block_absmax_signed(src, QUANT_QK);
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = hr_f32_to_f16(d);
        for (int j = 0; j < QUANT_QK / 2; j++) {
            const float v0 = src[j] * id;
            const float v1 = src[j + QUANT_QK / 2] * id;
            const uint8_t q0 = trunc_code(v0 + 8.5f, 15.0f);
            const uint8_t q1 = trunc_code(v1 + 8.5f, 15.0f);
            b->qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

/* ------------------------------------------------------------------ Q4_1 */

void quant_dequantize_q4_1(const void *src, float *dst, int64_t n) {
    const block_q4_1 *b = src;
    for (int64_t ib = 0; ib < n / QUANT_QK; ib++, b++, dst += QUANT_QK) {
        const float d = hr_f16_to_f32(b->d);
        const float m = hr_f16_to_f32(b->m);
        for (int j = 0; j < QUANT_QK / 2; j++) {
            const float y0 = (float)(b->qs[j] & 15) * d;
            const float y1 = (float)(b->qs[j] >> 4) * d;
            dst[j] = y0 + m;
            dst[j + QUANT_QK / 2] = y1 + m;
        }
    }
}

void quant_quantize_q4_1(const float *src, void *dst, int64_t n) {
    block_q4_1 *b = dst;
    for (int64_t ib = 0; ib < n / QUANT_QK; ib++, b++, src += QUANT_QK) {
        float min, max;
        block_min_max(src, QUANT_QK, &min, &max);
        const float d = (max - min) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = hr_f32_to_f16(d);
        b->m = hr_f32_to_f16(min);
        for (int j = 0; j < QUANT_QK / 2; j++) {
            const float v0 = (src[j] - min) * id;
            const float v1 = (src[j + QUANT_QK / 2] - min) * id;
            const uint8_t q0 = trunc_code(v0 + 0.5f, 15.0f);
            const uint8_t q1 = trunc_code(v1 + 0.5f, 15.0f);
            b->qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

/* ------------------------------------------------------------------ Q5_0 */

/* 5-bit code of element j from the nibbles and the 32 high bits. */
static int q5_code(const uint8_t *qs, uint32_t qh, int j) {
    const int lo = j < QUANT_QK / 2 ? qs[j] & 15 : qs[j - QUANT_QK / 2] >> 4;
    return lo | (int)((qh >> j) & 1u) << 4;
}

/* Packs 32 five-bit codes: low nibbles as Q4_0, bit 4 of code j in qh bit j. */
static void q5_pack(const uint8_t *code, uint8_t *qs, uint8_t qh_bytes[4]) {
    uint32_t qh = 0;
    for (int j = 0; j < QUANT_QK / 2; j++) {
        qs[j] = (uint8_t)((code[j] & 15) | (code[j + QUANT_QK / 2] & 15) << 4);
        qh |= (uint32_t)(code[j] >> 4) << j;
        qh |= (uint32_t)(code[j + QUANT_QK / 2] >> 4) << (j + QUANT_QK / 2);
    }
    for (int k = 0; k < 4; k++) /* little-endian, as ggml's memcpy on x86/ARM */
        qh_bytes[k] = (uint8_t)(qh >> (8 * k));
}

static uint32_t q5_load_qh(const uint8_t qh_bytes[4]) {
    return (uint32_t)qh_bytes[0] | (uint32_t)qh_bytes[1] << 8 | (uint32_t)qh_bytes[2] << 16 |
           (uint32_t)qh_bytes[3] << 24;
}

void quant_dequantize_q5_0(const void *src, float *dst, int64_t n) {
    const block_q5_0 *b = src;
    for (int64_t ib = 0; ib < n / QUANT_QK; ib++, b++, dst += QUANT_QK) {
        const float d = hr_f16_to_f32(b->d);
        const uint32_t qh = q5_load_qh(b->qh);
        for (int j = 0; j < QUANT_QK; j++)
            dst[j] = (float)(q5_code(b->qs, qh, j) - 16) * d;
    }
}

void quant_quantize_q5_0(const float *src, void *dst, int64_t n) {
    block_q5_0 *b = dst;
    uint8_t code[QUANT_QK];
    for (int64_t ib = 0; ib < n / QUANT_QK; ib++, b++, src += QUANT_QK) {
        const float max = block_absmax_signed(src, QUANT_QK);
        const float d = max / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = hr_f32_to_f16(d);
        for (int j = 0; j < QUANT_QK; j++) {
            const float v = src[j] * id;
            code[j] = trunc_code(v + 16.5f, 31.0f);
        }
        q5_pack(code, b->qs, b->qh);
    }
}

/* ------------------------------------------------------------------ Q5_1 */

void quant_dequantize_q5_1(const void *src, float *dst, int64_t n) {
    const block_q5_1 *b = src;
    for (int64_t ib = 0; ib < n / QUANT_QK; ib++, b++, dst += QUANT_QK) {
        const float d = hr_f16_to_f32(b->d);
        const float m = hr_f16_to_f32(b->m);
        const uint32_t qh = q5_load_qh(b->qh);
        for (int j = 0; j < QUANT_QK; j++) {
            const float y = (float)q5_code(b->qs, qh, j) * d;
            dst[j] = y + m;
        }
    }
}

void quant_quantize_q5_1(const float *src, void *dst, int64_t n) {
    block_q5_1 *b = dst;
    uint8_t code[QUANT_QK];
    for (int64_t ib = 0; ib < n / QUANT_QK; ib++, b++, src += QUANT_QK) {
        float min, max;
        block_min_max(src, QUANT_QK, &min, &max);
        const float d = (max - min) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = hr_f32_to_f16(d);
        b->m = hr_f32_to_f16(min);
        for (int j = 0; j < QUANT_QK; j++) {
            const float v = (src[j] - min) * id;
            /* ggml has no clamp here ((max - min) * id + 0.5 < 32); ours is
             * a no-op on finite input and keeps NaN defined */
            code[j] = trunc_code(v + 0.5f, 31.0f);
        }
        q5_pack(code, b->qs, b->qh);
    }
}
