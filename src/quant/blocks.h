/*
 * blocks.h — the on-disk block structs of ggml/GGUF quantized types, and the
 * per-type reference row functions that quant.c dispatches to.
 *
 * Field order and sizes are ggml's (ggml-common.h), byte for byte: a block is
 * read straight out of a mapped GGUF file, so every struct has a static_assert
 * on its size (the literal is hr_dtype_table's block_bytes; test_quant checks
 * the two agree, since a table lookup is not a constant expression). Scales called "f16" are IEEE half
 * floats stored as uint16_t (decoded with util/fp16.h); multi-byte fields are
 * little-endian, as in GGUF. Each struct's comment gives the decoding formula
 * for element i of the block, in the order the reference dequantizer evaluates
 * it (that order makes the results bit-exact with ggml and gguf-py).
 *
 * K-quants group QK_K = 256 elements in a super-block of 8 sub-blocks of 32
 * (Q4_K, Q5_K) or 16 sub-blocks of 16 (Q2_K, Q3_K, Q6_K); a sub-block scale is
 * a small integer multiplied by the super-block's f16 scale.
 */
#ifndef HR_QUANT_BLOCKS_H
#define HR_QUANT_BLOCKS_H

#include <assert.h>
#include <stdint.h>

#define QUANT_QK 32   /* elements per legacy block (Q4_0 .. Q8_0) */
#define QUANT_QK_K 256 /* elements per K-quant super-block */
#define QUANT_K_SCALE_BYTES 12 /* Q4_K/Q5_K: 8 six-bit scales + 8 six-bit mins */

/* Q8_0: y[i] = (float)qs[i] * f16(d). */
typedef struct {
    uint16_t d;            /* f16 scale */
    int8_t qs[QUANT_QK];   /* signed codes */
} block_q8_0;
static_assert(sizeof(block_q8_0) == 34, "block_q8_0 must be 34 bytes (hr_dtype_table)");

/* Q4_0: nibble n(i) = i < 16 ? qs[i] & 15 : qs[i-16] >> 4;
 *       y[i] = (float)(n(i) - 8) * f16(d). */
typedef struct {
    uint16_t d;
    uint8_t qs[QUANT_QK / 2];
} block_q4_0;
static_assert(sizeof(block_q4_0) == 18, "block_q4_0 must be 18 bytes (hr_dtype_table)");

/* Q4_1: nibble n(i) as Q4_0; y[i] = (float)n(i) * f16(d) + f16(m). */
typedef struct {
    uint16_t d; /* f16 scale */
    uint16_t m; /* f16 minimum (offset) */
    uint8_t qs[QUANT_QK / 2];
} block_q4_1;
static_assert(sizeof(block_q4_1) == 20, "block_q4_1 must be 20 bytes (hr_dtype_table)");

/* Q5_0: h = little-endian uint32 of qh; code c(i) = n(i) | ((h >> i) & 1) << 4
 *       with n(i) as Q4_0; y[i] = (float)(c(i) - 16) * f16(d). */
typedef struct {
    uint16_t d;
    uint8_t qh[4]; /* bit i = fifth bit of element i */
    uint8_t qs[QUANT_QK / 2];
} block_q5_0;
static_assert(sizeof(block_q5_0) == 22, "block_q5_0 must be 22 bytes (hr_dtype_table)");

/* Q5_1: c(i) as Q5_0; y[i] = (float)c(i) * f16(d) + f16(m). */
typedef struct {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[QUANT_QK / 2];
} block_q5_1;
static_assert(sizeof(block_q5_1) == 24, "block_q5_1 must be 24 bytes (hr_dtype_table)");

/* Q2_K: 16 sub-blocks of 16. Element i: half = i / 128, r = i % 128,
 *       code q = (qs[32*half + r % 32] >> (2 * (r / 32))) & 3,
 *       s = scales[i / 16] (low nibble: scale, high nibble: min);
 *       y[i] = (f16(d) * (s & 15)) * q - f16(dmin) * (s >> 4). */
typedef struct {
    uint8_t scales[QUANT_QK_K / 16];
    uint8_t qs[QUANT_QK_K / 4];
    uint16_t d;    /* f16 super-scale of the 4-bit scales */
    uint16_t dmin; /* f16 super-scale of the 4-bit mins */
} block_q2_K;
static_assert(sizeof(block_q2_K) == 84, "block_q2_K must be 84 bytes (hr_dtype_table)");

/* Q3_K: 16 sub-blocks of 16. Element i: half = i / 128, r = i % 128,
 *       low = (qs[32*half + r % 32] >> (2 * (r / 32))) & 3,
 *       high bit set = hmask[i % 32] bit (i / 32),
 *       q = low - (high bit set ? 0 : 4)                       (-4..3),
 *       6-bit scale j = i / 16: low 4 bits from scales[j % 8] (nibble j / 8),
 *       high 2 bits from scales[8 + j % 4] bits 2*(j / 4);
 *       y[i] = (f16(d) * (scale - 32)) * q. */
typedef struct {
    uint8_t hmask[QUANT_QK_K / 8];
    uint8_t qs[QUANT_QK_K / 4];
    uint8_t scales[12];
    uint16_t d;
} block_q3_K;
static_assert(sizeof(block_q3_K) == 110, "block_q3_K must be 110 bytes (hr_dtype_table)");

/* Q4_K: 8 sub-blocks of 32. Sub-block j has 6-bit scale sc and min mn:
 *       j < 4: sc = scales[j] & 63, mn = scales[j+4] & 63;
 *       j >= 4: sc = (scales[j+4] & 15) | (scales[j-4] >> 6) << 4,
 *               mn = (scales[j+4] >> 4) | (scales[j] >> 6) << 4.
 *       Element i: j = i / 32, pair = i / 64, n = i % 32,
 *       q = j even ? qs[32*pair + n] & 15 : qs[32*pair + n] >> 4;
 *       y[i] = (f16(d) * sc) * q - f16(dmin) * mn. */
typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[QUANT_K_SCALE_BYTES];
    uint8_t qs[QUANT_QK_K / 2];
} block_q4_K;
static_assert(sizeof(block_q4_K) == 144, "block_q4_K must be 144 bytes (hr_dtype_table)");

/* Q5_K: as Q4_K plus a fifth bit: q += 16 when qh[i % 32] bit (i / 32) is set;
 *       y[i] = (f16(d) * sc) * q - f16(dmin) * mn. */
typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[QUANT_K_SCALE_BYTES];
    uint8_t qh[QUANT_QK_K / 8];
    uint8_t qs[QUANT_QK_K / 2];
} block_q5_K;
static_assert(sizeof(block_q5_K) == 176, "block_q5_K must be 176 bytes (hr_dtype_table)");

/* Q6_K: 16 sub-blocks of 16. Element i: half = i / 128, r = i % 128,
 *       quarter = r / 32, n = r % 32,
 *       low = (ql[64*half + 32*(quarter & 1) + n] >> (4 * (quarter >> 1))) & 15,
 *       high = (qh[32*half + n] >> (2 * quarter)) & 3,
 *       q = (low | high << 4) - 32                               (-32..31);
 *       y[i] = (f16(d) * scales[i / 16]) * q. */
typedef struct {
    uint8_t ql[QUANT_QK_K / 2];
    uint8_t qh[QUANT_QK_K / 4];
    int8_t scales[QUANT_QK_K / 16];
    uint16_t d;
} block_q6_K;
static_assert(sizeof(block_q6_K) == 210, "block_q6_K must be 210 bytes (hr_dtype_table)");

/* Q8_K (activation format of ggml's K-quant dot products): y[i] = d * qs[i]
 * with an f32 scale; bsums[j] = sum of qs[16j .. 16j+15], unused on decode. */
typedef struct {
    float d;
    int8_t qs[QUANT_QK_K];
    int16_t bsums[QUANT_QK_K / 16];
} block_q8_K;
static_assert(sizeof(block_q8_K) == 292, "block_q8_K must be 292 bytes (hr_dtype_table)");

/* NF4 and FP4 (bitsandbytes' 4-bit types, blocks of 64): a 4-bit code
 * indexes a table of 16 f32 values in [-1, 1] (quant_nf4_values,
 * quant_fp4_values: bitsandbytes' own code tables, bit for bit), scaled by
 * the block's absolute maximum.
 *       n(i) = i < 32 ? qs[i] & 15 : qs[i-32] >> 4;
 *       y[i] = table[n(i)] * f16(d).
 * bitsandbytes keeps the absmax in f32 (or double-quantized to 8 bits); here
 * it is rounded once to f16 (2 bytes a block: 4.25 bits a weight), so a
 * weight differs from bitsandbytes' dequantization by at most one f16
 * rounding of its absmax (relative 2^-11). The nibble order is not
 * bitsandbytes' (which packs element 2k in the high nibble of byte k): low
 * nibbles then high nibbles let a 32-byte load give 32 consecutive codes. */
typedef struct {
    uint16_t d; /* f16 absmax */
    uint8_t qs[32];
} block_nf4;
static_assert(sizeof(block_nf4) == 34, "block_nf4 must be 34 bytes (hr_dtype_table)");
#define QUANT_QK_NF4 64

/* The tables' values, as initializers: q_codebook.c's arrays and the CUDA
 * kernels' constants (backend/cuda/packed.cuh) come from these lines. */
#define QUANT_NF4_VALUES                                                       \
    {-0x1.000000p+0f, -0x1.647362p-1f, -0x1.0cd660p-1f, -0x1.946540p-2f,       \
     -0x1.23449ap-2f, -0x1.7a6a7ep-3f, -0x1.74f0e2p-4f, 0.0f,                  \
     0x1.45f5fep-4f,  0x1.4995c6p-3f,  0x1.f809bap-3f,  0x1.5a0674p-2f,        \
     0x1.c34970p-2f,  0x1.200f56p-1f,  0x1.722766p-1f,  0x1.000000p+0f}
/* FP4 (e2m1 with bitsandbytes' own exponent bias): sign bit 3 */
#define QUANT_FP4_VALUES                                                       \
    {0.0f,            0x1.555556p-8f,  0x1.555556p-1f,  1.0f,                  \
     0x1.555556p-2f,  0.5f,            0x1.555556p-3f,  0.25f,                 \
     0.0f,            -0x1.555556p-8f, -0x1.555556p-1f, -1.0f,                 \
     -0x1.555556p-2f, -0.5f,           -0x1.555556p-3f, -0.25f}

extern const float quant_nf4_values[16];
extern const float quant_fp4_values[16];

/* ---- per-type reference rows: n elements, a multiple of the block size.
 * quant.c checks n and dispatches; nothing else should call these directly. */
void quant_dequantize_q8_0(const void *src, float *dst, int64_t n);
void quant_dequantize_q4_0(const void *src, float *dst, int64_t n);
void quant_dequantize_q4_1(const void *src, float *dst, int64_t n);
void quant_dequantize_q5_0(const void *src, float *dst, int64_t n);
void quant_dequantize_q5_1(const void *src, float *dst, int64_t n);
void quant_dequantize_q2_K(const void *src, float *dst, int64_t n);
void quant_dequantize_q3_K(const void *src, float *dst, int64_t n);
void quant_dequantize_q4_K(const void *src, float *dst, int64_t n);
void quant_dequantize_q5_K(const void *src, float *dst, int64_t n);
void quant_dequantize_q6_K(const void *src, float *dst, int64_t n);
void quant_dequantize_q8_K(const void *src, float *dst, int64_t n);

void quant_quantize_q8_0(const float *src, void *dst, int64_t n);
void quant_quantize_q4_0(const float *src, void *dst, int64_t n);
void quant_quantize_q4_1(const float *src, void *dst, int64_t n);
void quant_quantize_q5_0(const float *src, void *dst, int64_t n);
void quant_quantize_q5_1(const float *src, void *dst, int64_t n);
void quant_quantize_q2_K(const float *src, void *dst, int64_t n);
void quant_quantize_q3_K(const float *src, void *dst, int64_t n);
void quant_quantize_q4_K(const float *src, void *dst, int64_t n);
void quant_quantize_q5_K(const float *src, void *dst, int64_t n);
void quant_quantize_q6_K(const float *src, void *dst, int64_t n);
void quant_quantize_q8_K(const float *src, void *dst, int64_t n);

void quant_dequantize_nf4(const void *src, float *dst, int64_t n);
void quant_dequantize_fp4(const void *src, float *dst, int64_t n);
void quant_quantize_nf4(const float *src, void *dst, int64_t n);
void quant_quantize_fp4(const float *src, void *dst, int64_t n);

#endif
