/* vec_avx512.c — vec.h at the AVX-512 level: 16 floats a step, up to four
 * rows of a against one load of x (one accumulator each, so consecutive FMAs
 * do not wait on each other), masked loads for the tail so odd head sizes
 * need no scalar loop. f16 elements are widened by vcvtph2ps, bf16 ones by
 * moving their bits to the top half of an f32, both exact. A q8_0 or q4_0
 * row is walked block by block: the f16 scale broadcast once, each half's 16
 * codes extended to int32, converted (exact) and multiplied by it: the
 * reference's (float)code * scale, in registers. */
#include "backend/cpu/vec.h"

#include "quant/blocks.h"

#include <immintrin.h>

#define VEC_INLINE static inline __attribute__((always_inline))

/* What x's elements are: each primitive below is one body, specialised by a
 * constant of this type (and one of the tile height) once inlined. */
typedef enum { ELEM_F32, ELEM_F16, ELEM_BF16, ELEM_Q8_0, ELEM_Q4_0 } vec_elem;

enum { TILE = 4 }; /* rows of a per pass over x, as in vec_avx2.c */

/* The lanes of a 16-float step that lie before the end of the vector. */
VEC_INLINE __mmask16 tail_mask(int64_t left) {
    return (__mmask16)(left >= 16 ? 0xffffu : (1u << left) - 1u);
}

VEC_INLINE __m512 widen(__m256i h, vec_elem e) {
    if (e == ELEM_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* x[i .. i+16) widened to f32 */
VEC_INLINE __m512 load16(const void *x, int64_t i, vec_elem e) {
    if (e == ELEM_F32)
        return _mm512_loadu_ps((const float *)x + i);
    return widen(_mm256_loadu_si256((const __m256i *)((const uint16_t *)x + i)), e);
}

/* the lanes of mask k of x[i .. i+16), the others 0 */
VEC_INLINE __m512 load16_masked(const void *x, int64_t i, __mmask16 k, vec_elem e) {
    if (e == ELEM_F32)
        return _mm512_maskz_loadu_ps(k, (const float *)x + i);
    return widen(_mm256_maskz_loadu_epi16(k, (const uint16_t *)x + i), e);
}

VEC_INLINE bool is_block(vec_elem e) { return e == ELEM_Q8_0 || e == ELEM_Q4_0; }

/* Bytes of one block of a block type. */
VEC_INLINE int64_t block_bytes(vec_elem e) {
    return e == ELEM_Q8_0 ? (int64_t)sizeof(block_q8_0) : (int64_t)sizeof(block_q4_0);
}

/* The block's f16 scale (the first field of both structs), broadcast */
VEC_INLINE __m512 block_scale(const uint8_t *blk) {
    return _mm512_set1_ps(_cvtsh_ss(((const block_q8_0 *)blk)->d));
}

/* Values 16 half .. 16 half + 15 of a block (half 0 or 1), times its scale d. */
VEC_INLINE __m512 block16(const uint8_t *blk, int half, __m512 d, vec_elem e) {
    __m512i c;
    if (e == ELEM_Q8_0) {
        const int8_t *qs = ((const block_q8_0 *)blk)->qs + 16 * half;
        c = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)qs));
    } else { /* q4_0: low nibbles are values 0 .. 15, high nibbles 16 .. 31 */
        c = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)((const block_q4_0 *)blk)->qs));
        if (half)
            c = _mm512_srli_epi32(c, 4);
        c = _mm512_sub_epi32(_mm512_and_si512(c, _mm512_set1_epi32(15)), _mm512_set1_epi32(8));
    }
    return _mm512_mul_ps(_mm512_cvtepi32_ps(c), d);
}

/* dot_rows for exactly M (1 .. TILE) rows; the accumulators are named, not
 * an array, so that they stay in registers (GCC kept an array on the stack) */
VEC_INLINE void dot_tile(float *y, int64_t ldy, const float *a, int64_t lda, const void *x,
                         int64_t n, int M, vec_elem e) {
    const float *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
#define DOT_STEP(xv, i)                                                                      \
    do {                                                                                     \
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a0 + (i)), xv, s0);                             \
        if (M > 1)                                                                           \
            s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a1 + (i)), xv, s1);                         \
        if (M > 2)                                                                           \
            s2 = _mm512_fmadd_ps(_mm512_loadu_ps(a2 + (i)), xv, s2);                         \
        if (M > 3)                                                                           \
            s3 = _mm512_fmadd_ps(_mm512_loadu_ps(a3 + (i)), xv, s3);                         \
    } while (0)
    if (is_block(e)) { /* n is a multiple of 32: no tail */
        for (; i < n; i += QUANT_QK) {
            const uint8_t *blk = (const uint8_t *)x + i / QUANT_QK * block_bytes(e);
            const __m512 d = block_scale(blk);
            const __m512 x0 = block16(blk, 0, d, e), x1 = block16(blk, 1, d, e);
            DOT_STEP(x0, i);
            DOT_STEP(x1, i + 16);
        }
    } else {
        for (; i + 16 <= n; i += 16) {
            __m512 xv = load16(x, i, e);
            DOT_STEP(xv, i);
        }
    }
#undef DOT_STEP
    if (i < n && !is_block(e)) {
        __mmask16 k = tail_mask(n - i);
        __m512 xv = load16_masked(x, i, k, e);
        s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, a0 + i), xv, s0);
        if (M > 1)
            s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, a1 + i), xv, s1);
        if (M > 2)
            s2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, a2 + i), xv, s2);
        if (M > 3)
            s3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, a3 + i), xv, s3);
    }
    y[0] = _mm512_reduce_add_ps(s0);
    if (M > 1)
        y[ldy] = _mm512_reduce_add_ps(s1);
    if (M > 2)
        y[2 * ldy] = _mm512_reduce_add_ps(s2);
    if (M > 3)
        y[3 * ldy] = _mm512_reduce_add_ps(s3);
}

/* y_j[i .. i+16) += a_j x, under mask k */
VEC_INLINE void axpy16(float *yj, __m512 aj, __m512 xv, __mmask16 k) {
    _mm512_mask_storeu_ps(yj, k, _mm512_fmadd_ps(aj, xv, _mm512_maskz_loadu_ps(k, yj)));
}

/* axpy_rows for exactly M (1 .. TILE) rows */
VEC_INLINE void axpy_tile(float *y, int64_t ldy, const float *a, int64_t lda, const void *x,
                          int64_t n, int M, vec_elem e) {
    float *y0 = y, *y1 = y + ldy, *y2 = y + 2 * ldy, *y3 = y + 3 * ldy;
    const __m512 a0 = _mm512_set1_ps(a[0]);
    const __m512 a1 = M > 1 ? _mm512_set1_ps(a[lda]) : a0;
    const __m512 a2 = M > 2 ? _mm512_set1_ps(a[2 * lda]) : a0;
    const __m512 a3 = M > 3 ? _mm512_set1_ps(a[3 * lda]) : a0;
    int64_t i = 0;
#define AXPY_STEP(xv, i)                                                                     \
    do {                                                                                     \
        _mm512_storeu_ps(y0 + (i), _mm512_fmadd_ps(a0, xv, _mm512_loadu_ps(y0 + (i))));     \
        if (M > 1)                                                                           \
            _mm512_storeu_ps(y1 + (i), _mm512_fmadd_ps(a1, xv, _mm512_loadu_ps(y1 + (i)))); \
        if (M > 2)                                                                           \
            _mm512_storeu_ps(y2 + (i), _mm512_fmadd_ps(a2, xv, _mm512_loadu_ps(y2 + (i)))); \
        if (M > 3)                                                                           \
            _mm512_storeu_ps(y3 + (i), _mm512_fmadd_ps(a3, xv, _mm512_loadu_ps(y3 + (i)))); \
    } while (0)
    if (is_block(e)) { /* n is a multiple of 32: no tail */
        for (; i < n; i += QUANT_QK) {
            const uint8_t *blk = (const uint8_t *)x + i / QUANT_QK * block_bytes(e);
            const __m512 d = block_scale(blk);
            const __m512 x0 = block16(blk, 0, d, e), x1 = block16(blk, 1, d, e);
            AXPY_STEP(x0, i);
            AXPY_STEP(x1, i + 16);
        }
    } else {
        for (; i + 16 <= n; i += 16) {
            __m512 xv = load16(x, i, e);
            AXPY_STEP(xv, i);
        }
    }
#undef AXPY_STEP
    if (i < n && !is_block(e)) {
        __mmask16 k = tail_mask(n - i);
        __m512 xv = load16_masked(x, i, k, e);
        axpy16(y0 + i, a0, xv, k);
        if (M > 1)
            axpy16(y1 + i, a1, xv, k);
        if (M > 2)
            axpy16(y2 + i, a2, xv, k);
        if (M > 3)
            axpy16(y3 + i, a3, xv, k);
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

void cpu_dot_rows_avx512(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                         const void *x, int64_t n) {
    dot_rows(y, ldy, a, lda, m, x, n, ELEM_F32);
}

void cpu_dot_rows_f16_avx512(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                             const void *x, int64_t n) {
    dot_rows(y, ldy, a, lda, m, x, n, ELEM_F16);
}

void cpu_dot_rows_bf16_avx512(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                              const void *x, int64_t n) {
    dot_rows(y, ldy, a, lda, m, x, n, ELEM_BF16);
}

void cpu_axpy_rows_avx512(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                          const void *x, int64_t n) {
    axpy_rows(y, ldy, a, lda, m, x, n, ELEM_F32);
}

void cpu_axpy_rows_f16_avx512(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                              const void *x, int64_t n) {
    axpy_rows(y, ldy, a, lda, m, x, n, ELEM_F16);
}

void cpu_axpy_rows_bf16_avx512(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                               const void *x, int64_t n) {
    axpy_rows(y, ldy, a, lda, m, x, n, ELEM_BF16);
}

void cpu_dot_rows_q8_0_avx512(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                              const void *x, int64_t n) {
    dot_rows(y, ldy, a, lda, m, x, n, ELEM_Q8_0);
}

void cpu_dot_rows_q4_0_avx512(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                              const void *x, int64_t n) {
    dot_rows(y, ldy, a, lda, m, x, n, ELEM_Q4_0);
}

void cpu_axpy_rows_q8_0_avx512(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                               const void *x, int64_t n) {
    axpy_rows(y, ldy, a, lda, m, x, n, ELEM_Q8_0);
}

void cpu_axpy_rows_q4_0_avx512(float *y, int64_t ldy, const float *a, int64_t lda, int32_t m,
                               const void *x, int64_t n) {
    axpy_rows(y, ldy, a, lda, m, x, n, ELEM_Q4_0);
}
