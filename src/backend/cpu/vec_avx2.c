/* vec_avx2.c — vec.h at the AVX2 + FMA level: 8 floats a step, up to four
 * rows of a against one load of x (one accumulator each, so consecutive FMAs
 * do not wait on each other). f16 elements are widened by F16C (vcvtph2ps),
 * bf16 ones by moving their bits to the top half of an f32, both exact; the
 * scalar tails use util/fp16.h, which agrees with both bit for bit. A q8_0 or
 * q4_0 row is walked block by block: the f16 scale broadcast once, each 8
 * codes sign- or zero-extended to int32, converted (exact) and multiplied by
 * it: the reference's (float)code * scale, in registers. */
#include "backend/cpu/vec.h"

#include "quant/blocks.h"
#include "util/fp16.h"

#include <immintrin.h>

#define VEC_INLINE static inline __attribute__((always_inline))

/* What x's elements are: each primitive below is one body, specialised by a
 * constant of this type (and one of the tile height) once inlined. */
typedef enum { ELEM_F32, ELEM_F16, ELEM_BF16, ELEM_Q8_0, ELEM_Q4_0 } vec_elem;

enum { TILE = 4 }; /* rows of a per pass over x: 4 accumulators + x + a row: 6 of 16 registers */

static float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

VEC_INLINE bool is_block(vec_elem e) { return e == ELEM_Q8_0 || e == ELEM_Q4_0; }

/* x[i .. i+8) widened to f32 */
VEC_INLINE __m256 load8(const void *x, int64_t i, vec_elem e) {
    if (e == ELEM_F32)
        return _mm256_loadu_ps((const float *)x + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)x + i));
    if (e == ELEM_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

VEC_INLINE float load1(const void *x, int64_t i, vec_elem e) {
    if (e == ELEM_F32)
        return ((const float *)x)[i];
    uint16_t h = ((const uint16_t *)x)[i];
    return e == ELEM_F16 ? hr_f16_to_f32(h) : hr_bf16_to_f32(h);
}

/* x[i] times row a, plus the sum of accumulator s: a row's dot product */
VEC_INLINE float finish(__m256 s, const float *a, const void *x, int64_t i, int64_t n,
                        vec_elem e) {
    float r = hsum256(s);
    for (; i < n && !is_block(e); i++) /* a block row has no tail */
        r += a[i] * load1(x, i, e);
    return r;
}

/* Bytes of one block of a block type. */
VEC_INLINE int64_t block_bytes(vec_elem e) {
    return e == ELEM_Q8_0 ? (int64_t)sizeof(block_q8_0) : (int64_t)sizeof(block_q4_0);
}

/* The block's f16 scale (the first field of both structs), broadcast */
VEC_INLINE __m256 block_scale(const uint8_t *blk) {
    return _mm256_set1_ps(_cvtsh_ss(((const block_q8_0 *)blk)->d));
}

/* Values 8 sub .. 8 sub + 7 of a block (sub 0 .. 3), times its scale d. */
VEC_INLINE __m256 block8(const uint8_t *blk, int sub, __m256 d, vec_elem e) {
    __m256i c;
    if (e == ELEM_Q8_0) {
        const int8_t *qs = ((const block_q8_0 *)blk)->qs + 8 * sub;
        c = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)qs));
    } else { /* q4_0: low nibbles are values 0 .. 15, high nibbles 16 .. 31 */
        const uint8_t *qs = ((const block_q4_0 *)blk)->qs + 8 * (sub & 1);
        c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)qs));
        if (sub >= 2)
            c = _mm256_srli_epi32(c, 4);
        c = _mm256_sub_epi32(_mm256_and_si256(c, _mm256_set1_epi32(15)), _mm256_set1_epi32(8));
    }
    return _mm256_mul_ps(_mm256_cvtepi32_ps(c), d);
}

/* dot_rows for exactly M (1 .. TILE) rows; the accumulators are named, not
 * an array, so that they stay in registers (GCC kept an array on the stack) */
VEC_INLINE void dot_tile(float *y, int64_t ldy, const float *a, int64_t lda, const void *x,
                         int64_t n, int M, vec_elem e) {
    const float *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
#define DOT_STEP(xv, i)                                                                      \
    do {                                                                                     \
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a0 + (i)), xv, s0);                             \
        if (M > 1)                                                                           \
            s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a1 + (i)), xv, s1);                         \
        if (M > 2)                                                                           \
            s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a2 + (i)), xv, s2);                         \
        if (M > 3)                                                                           \
            s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a3 + (i)), xv, s3);                         \
    } while (0)
    if (is_block(e)) { /* n is a multiple of 32: no tail */
        for (; i < n; i += QUANT_QK) {
            const uint8_t *blk = (const uint8_t *)x + i / QUANT_QK * block_bytes(e);
            const __m256 d = block_scale(blk);
            for (int sub = 0; sub < 4; sub++) {
                const __m256 xv = block8(blk, sub, d, e);
                DOT_STEP(xv, i + 8 * sub);
            }
        }
    } else {
        for (; i + 8 <= n; i += 8) {
            __m256 xv = load8(x, i, e);
            DOT_STEP(xv, i);
        }
    }
#undef DOT_STEP
    y[0] = finish(s0, a0, x, i, n, e);
    if (M > 1)
        y[ldy] = finish(s1, a1, x, i, n, e);
    if (M > 2)
        y[2 * ldy] = finish(s2, a2, x, i, n, e);
    if (M > 3)
        y[3 * ldy] = finish(s3, a3, x, i, n, e);
}

/* axpy_rows for exactly M (1 .. TILE) rows */
VEC_INLINE void axpy_tile(float *y, int64_t ldy, const float *a, int64_t lda, const void *x,
                          int64_t n, int M, vec_elem e) {
    float *y0 = y, *y1 = y + ldy, *y2 = y + 2 * ldy, *y3 = y + 3 * ldy;
    const __m256 a0 = _mm256_set1_ps(a[0]);
    const __m256 a1 = M > 1 ? _mm256_set1_ps(a[lda]) : a0;
    const __m256 a2 = M > 2 ? _mm256_set1_ps(a[2 * lda]) : a0;
    const __m256 a3 = M > 3 ? _mm256_set1_ps(a[3 * lda]) : a0;
    int64_t i = 0;
#define AXPY_STEP(xv, i)                                                                     \
    do {                                                                                     \
        _mm256_storeu_ps(y0 + (i), _mm256_fmadd_ps(a0, xv, _mm256_loadu_ps(y0 + (i))));     \
        if (M > 1)                                                                           \
            _mm256_storeu_ps(y1 + (i), _mm256_fmadd_ps(a1, xv, _mm256_loadu_ps(y1 + (i)))); \
        if (M > 2)                                                                           \
            _mm256_storeu_ps(y2 + (i), _mm256_fmadd_ps(a2, xv, _mm256_loadu_ps(y2 + (i)))); \
        if (M > 3)                                                                           \
            _mm256_storeu_ps(y3 + (i), _mm256_fmadd_ps(a3, xv, _mm256_loadu_ps(y3 + (i)))); \
    } while (0)
    if (is_block(e)) { /* n is a multiple of 32: no tail */
        for (; i < n; i += QUANT_QK) {
            const uint8_t *blk = (const uint8_t *)x + i / QUANT_QK * block_bytes(e);
            const __m256 d = block_scale(blk);
            for (int sub = 0; sub < 4; sub++) {
                const __m256 xv = block8(blk, sub, d, e);
                AXPY_STEP(xv, i + 8 * sub);
            }
        }
    } else {
        for (; i + 8 <= n; i += 8) {
            __m256 xv = load8(x, i, e);
            AXPY_STEP(xv, i);
        }
    }
#undef AXPY_STEP
    for (; i < n && !is_block(e); i++) {
        float xi = load1(x, i, e);
        for (int j = 0; j < M; j++)
            y[j * ldy + i] += a[j * lda] * xi;
    }
}

VEC_INLINE void dot_rows(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                         const void *x, int64_t n, vec_elem e) {
    int32_t j = 0;
    for (; j + TILE <= m; j += TILE)
        dot_tile(y + j * ldy, ldy, a + j * lda, lda, x, n, TILE, e);
    y += j * ldy, a += j * lda;
    switch (m - j) {
    case 3: dot_tile(y, ldy, a, lda, x, n, 3, e); break;
    case 2: dot_tile(y, ldy, a, lda, x, n, 2, e); break;
    case 1: dot_tile(y, ldy, a, lda, x, n, 1, e); break;
    default: break;
    }
}

VEC_INLINE void axpy_rows(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                          const void *x, int64_t n, vec_elem e) {
    int32_t j = 0;
    for (; j + TILE <= m; j += TILE)
        axpy_tile(y + j * ldy, ldy, a + j * lda, lda, x, n, TILE, e);
    y += j * ldy, a += j * lda;
    switch (m - j) {
    case 3: axpy_tile(y, ldy, a, lda, x, n, 3, e); break;
    case 2: axpy_tile(y, ldy, a, lda, x, n, 2, e); break;
    case 1: axpy_tile(y, ldy, a, lda, x, n, 1, e); break;
    default: break;
    }
}

void cpu_dot_rows_avx2(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                       const void *x, int64_t n) {
    dot_rows(y, ldy, a, lda, m, x, n, ELEM_F32);
}

void cpu_dot_rows_f16_avx2(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                           const void *x, int64_t n) {
    dot_rows(y, ldy, a, lda, m, x, n, ELEM_F16);
}

void cpu_dot_rows_bf16_avx2(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                            const void *x, int64_t n) {
    dot_rows(y, ldy, a, lda, m, x, n, ELEM_BF16);
}

void cpu_axpy_rows_avx2(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                        const void *x, int64_t n) {
    axpy_rows(y, ldy, a, lda, m, x, n, ELEM_F32);
}

void cpu_axpy_rows_f16_avx2(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                            const void *x, int64_t n) {
    axpy_rows(y, ldy, a, lda, m, x, n, ELEM_F16);
}

void cpu_axpy_rows_bf16_avx2(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                             const void *x, int64_t n) {
    axpy_rows(y, ldy, a, lda, m, x, n, ELEM_BF16);
}

void cpu_dot_rows_q8_0_avx2(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                            const void *x, int64_t n) {
    dot_rows(y, ldy, a, lda, m, x, n, ELEM_Q8_0);
}

void cpu_dot_rows_q4_0_avx2(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                            const void *x, int64_t n) {
    dot_rows(y, ldy, a, lda, m, x, n, ELEM_Q4_0);
}

void cpu_axpy_rows_q8_0_avx2(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                             const void *x, int64_t n) {
    axpy_rows(y, ldy, a, lda, m, x, n, ELEM_Q8_0);
}

void cpu_axpy_rows_q4_0_avx2(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                             const void *x, int64_t n) {
    axpy_rows(y, ldy, a, lda, m, x, n, ELEM_Q4_0);
}
