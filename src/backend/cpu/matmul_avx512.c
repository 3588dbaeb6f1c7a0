/*
 * matmul_avx512.c — the AVX-512 level (F/BW/VL/DQ/BF16/VNNI): Zen 4, Sapphire
 * Rapids. Compiled with those flags; only reached after cpu_features.c has
 * confirmed them. Four kernel families, one section each below:
 *   EXACT decode   up to 4 weight rows x 4 activation rows, one zmm
 *                  accumulator per pair; ld32() turns 32 weights of any dtype
 *                  into f32 bit-identical to quant_dequantize_row (integer
 *                  codes, then one multiply by the scale, or one FMA where the
 *                  reference adds a min: the product is exact, so the FMA
 *                  rounds like the reference's add).
 *   FAST decode    vpdpbusd on 16 blocks at a time, transpose-reduced to one
 *                  int32 sum per block, scaled in f32 per 16 blocks.
 *   EXACT prefill  weight tiles converted once to f32 panels, 12x32 microkernel.
 *   FAST prefill   weight tiles repacked to int8 lanes matching the T32/T16
 *                  activations, 4x3 vpdpbusd microkernel.
 *
 * Measured on the 2-core Zen 4 (EPYC, 3.6 GHz; 31-34 GB/s streaming read and
 * 231 GFLOP/s f32 FMA with 2 threads), TinyLlama shapes, bench_cpu_matmul:
 *   decode, B=1:   F32/F16/BF16 90-100% of the streaming read; FAST Q8_0,
 *                  Q4_0, Q4_K, Q5_K, Q6_K 80-105% (K=2048 rows are the lower
 *                  end: per-row overhead); EXACT quantized 10-19 GB/s
 *                  (conversion-bound, as expected of the reference path).
 *   prefill B=512: EXACT ~200 GFLOP/s (86% of FMA peak), FAST 390-580 GOP/s.
 * How the FAST decode kernel got there (scale gathers replaced by permutes,
 * wider nibble loads; interleaved weight rows rejected: they lost the
 * prefetcher's stream from DRAM): docs/journal/cpu.md.
 *
 * Shape legend: B activation rows, K inner dimension, N weight rows;
 * nw/nx = weight/activation rows in a register tile.
 */
#include "backend/cpu/matmul.h"
#include "backend/cpu/matmul_simd.h"

#include "quant/blocks.h"
#include "util/dtype.h"
#include "util/error.h"

#include <immintrin.h>
#include <string.h>

/* ====================================================================== */
/* 32 weights -> two zmm of f32                                           */
/* ====================================================================== */

AI __m512 cvt_i8(__m128i v) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v));
}

/* Mask of the first n (clamped to 0..16) lanes. */
AI __mmask16 lanes16(int n) {
    return (__mmask16)(n >= 16 ? 0xffffu : n <= 0 ? 0u : (1u << n) - 1u);
}

/* K-quant super-block sb of a row: per 16-element sixteenth l, the f32 scale
 * h[l] and the negated min h[16 + l] (k_scales). */
AI void khdr(hr_dtype dt, const uint8_t *row, int64_t sb, float h[32]) {
    const kscales k = k_scales(dt, row, sb);
    const __m512i sc = k.sgn ? _mm512_cvtepi8_epi32(k.sc) : _mm512_cvtepu8_epi32(k.sc);
    const __m512 m =
        _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(k.mn)), _mm512_set1_ps(k.dmin));
    _mm512_storeu_ps(h, _mm512_mul_ps(_mm512_cvtepi32_ps(sc), _mm512_set1_ps(k.d)));
    _mm512_storeu_ps(h + 16, _mm512_sub_ps(_mm512_setzero_ps(), m));
}

/* Elements [32j, 32j + 32) of a weight row of dtype dt as f32, bit-identical
 * to the reference; h as for get_codes32. */
AI void ld32(hr_dtype dt, const uint8_t *row, int64_t j, const float *h, __m512 *w0, __m512 *w1) {
    switch (dt) {
    case HR_DTYPE_F32: {
        const float *p = (const float *)(const void *)row + 32 * j;
        *w0 = _mm512_loadu_ps(p);
        *w1 = _mm512_loadu_ps(p + 16);
        return;
    }
    case HR_DTYPE_F16: {
        const uint16_t *p = (const uint16_t *)(const void *)row + 32 * j;
        *w0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
        *w1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 16)));
        return;
    }
    case HR_DTYPE_BF16: {
        const uint16_t *p = (const uint16_t *)(const void *)row + 32 * j;
        __m512i a = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
        __m512i b = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p + 16)));
        *w0 = _mm512_castsi512_ps(_mm512_slli_epi32(a, 16));
        *w1 = _mm512_castsi512_ps(_mm512_slli_epi32(b, 16));
        return;
    }
    case HR_DTYPE_NF4:
    case HR_DTYPE_FP4: {
        /* codes index the f32 table: one vpermps per 16 weights */
        const block_nf4 *b = (const block_nf4 *)(const void *)row + j / 2;
        const __m512 table =
            _mm512_loadu_ps(dt == HR_DTYPE_NF4 ? quant_nf4_values : quant_fp4_values);
        const __m256i q = _mm256_loadu_si256((const __m256i *)b->qs);
        const __m256i n =
            _mm256_and_si256(j % 2 ? _mm256_srli_epi16(q, 4) : q, _mm256_set1_epi8(15));
        const __m512 d = _mm512_set1_ps(f16s(b->d));
        *w0 = _mm512_mul_ps(
            _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(n)), table), d);
        *w1 = _mm512_mul_ps(
            _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(n, 1)), table),
            d);
        return;
    }
    default:
        break;
    }
    const codes32 c = get_codes32(dt, row, j, h);
    if (has_min(dt)) {
        *w0 = _mm512_fmadd_ps(cvt_i8(c.lo), _mm512_set1_ps(c.sc[0]), _mm512_set1_ps(c.mn[0]));
        *w1 = _mm512_fmadd_ps(cvt_i8(c.hi), _mm512_set1_ps(c.sc[1]), _mm512_set1_ps(c.mn[1]));
    } else {
        *w0 = _mm512_mul_ps(cvt_i8(c.lo), _mm512_set1_ps(c.sc[0]));
        *w1 = _mm512_mul_ps(cvt_i8(c.hi), _mm512_set1_ps(c.sc[1]));
    }
}

/* Float rows whose K is not a multiple of 32: elements [k, k + rem). */
AI void ld_tail(hr_dtype dt, const uint8_t *row, int64_t k, int rem, __m512 *w0, __m512 *w1) {
    const __mmask16 m0 = lanes16(rem);
    const __mmask16 m1 = lanes16(rem - 16);
    if (dt == HR_DTYPE_F32) {
        const float *p = (const float *)(const void *)row + k;
        *w0 = _mm512_maskz_loadu_ps(m0, p);
        *w1 = _mm512_maskz_loadu_ps(m1, p + 16);
        return;
    }
    const uint16_t *p = (const uint16_t *)(const void *)row + k;
    __m256i a = _mm256_maskz_loadu_epi16(m0, p), b = _mm256_maskz_loadu_epi16(m1, p + 16);
    if (dt == HR_DTYPE_F16) {
        *w0 = _mm512_cvtph_ps(a);
        *w1 = _mm512_cvtph_ps(b);
    } else {
        *w0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(a), 16));
        *w1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
    }
}

static void to_f32(hr_dtype dt, const void *row, int64_t k0, int64_t n, float *dst) {
    if (!hr_dtype_table[dt].is_quant) { /* k0 may be any element: move the row instead */
        row = (const char *)row + (size_t)k0 * (size_t)hr_dtype_table[dt].block_bytes;
        k0 = 0;
    }
    int64_t k = 0;
    float h[32];
    for (; k + 32 <= n; k += 32) {
        __m512 w0, w1;
        const int64_t j = (k0 + k) / 32;
        if (is_kquant(dt) && (k == 0 || j % 8 == 0))
            khdr(dt, row, j / 8, h);
        ld32(dt, row, j, h, &w0, &w1);
        _mm512_storeu_ps(dst + k, w0);
        _mm512_storeu_ps(dst + k + 16, w1);
    }
    if (k < n) { /* float dtypes only */
        const int rem = (int)(n - k);
        __m512 w0, w1;
        ld_tail(dt, row, k0 + k, rem, &w0, &w1);
        _mm512_mask_storeu_ps(dst + k, lanes16(rem), w0);
        if (rem > 16)
            _mm512_mask_storeu_ps(dst + k + 16, lanes16(rem - 16), w1);
    }
}

#define DEF_TO_F32(name, dt)                                                \
    static void name(const void *row, int64_t k0, int64_t n, float *dst) { \
        to_f32(dt, row, k0, n, dst);                                       \
    }
DEF_TO_F32(to_f32_f32, HR_DTYPE_F32)
DEF_TO_F32(to_f32_f16, HR_DTYPE_F16)
DEF_TO_F32(to_f32_bf16, HR_DTYPE_BF16)
DEF_TO_F32(to_f32_q8_0, HR_DTYPE_Q8_0)
DEF_TO_F32(to_f32_q4_0, HR_DTYPE_Q4_0)
DEF_TO_F32(to_f32_q4_1, HR_DTYPE_Q4_1)
DEF_TO_F32(to_f32_q5_0, HR_DTYPE_Q5_0)
DEF_TO_F32(to_f32_q5_1, HR_DTYPE_Q5_1)
DEF_TO_F32(to_f32_q2_K, HR_DTYPE_Q2_K)
DEF_TO_F32(to_f32_q3_K, HR_DTYPE_Q3_K)
DEF_TO_F32(to_f32_q4_K, HR_DTYPE_Q4_K)
DEF_TO_F32(to_f32_q5_K, HR_DTYPE_Q5_K)
DEF_TO_F32(to_f32_q6_K, HR_DTYPE_Q6_K)
DEF_TO_F32(to_f32_nf4, HR_DTYPE_NF4)
DEF_TO_F32(to_f32_fp4, HR_DTYPE_FP4)

/* ====================================================================== */
/* EXACT decode                                                           */
/* ====================================================================== */

/* y[b * ldy + i] = dot(W_i, x_b) for i < nw, b < nx. */
AI void gemv_tile(hr_dtype dt, int nw, int nx, const uint8_t *w, size_t wrb, const float *x,
                  int64_t ldx, int64_t K, float *y, int64_t ldy) {
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < nw; i++)
#pragma GCC unroll 4
        for (int b = 0; b < nx; b++)
            acc[i][b] = _mm512_setzero_ps();
    const int64_t n32 = K / 32;
    float h[4][32]; /* K-quants: the current super-block's scales per row */
    for (int64_t j = 0; j < n32; j++) {
        if (is_kquant(dt) && j % 8 == 0)
#pragma GCC unroll 4
            for (int i = 0; i < nw; i++)
                khdr(dt, w + i * wrb, j / 8, h[i]);
        __m512 x0[4], x1[4];
#pragma GCC unroll 4
        for (int b = 0; b < nx; b++) {
            x0[b] = _mm512_loadu_ps(x + b * ldx + 32 * j);
            x1[b] = _mm512_loadu_ps(x + b * ldx + 32 * j + 16);
        }
#pragma GCC unroll 4
        for (int i = 0; i < nw; i++) {
            __m512 w0, w1;
            ld32(dt, w + i * wrb, j, h[i], &w0, &w1);
#pragma GCC unroll 4
            for (int b = 0; b < nx; b++) {
                acc[i][b] = _mm512_fmadd_ps(w0, x0[b], acc[i][b]);
                acc[i][b] = _mm512_fmadd_ps(w1, x1[b], acc[i][b]);
            }
        }
    }
    if (K % 32 != 0) {
        const int64_t k = n32 * 32;
        const int rem = (int)(K - k);
        const __mmask16 m0 = lanes16(rem);
        const __mmask16 m1 = lanes16(rem - 16);
        __m512 x0[4], x1[4];
#pragma GCC unroll 4
        for (int b = 0; b < nx; b++) {
            x0[b] = _mm512_maskz_loadu_ps(m0, x + b * ldx + k);
            x1[b] = _mm512_maskz_loadu_ps(m1, x + b * ldx + k + 16);
        }
#pragma GCC unroll 4
        for (int i = 0; i < nw; i++) {
            __m512 w0, w1;
            ld_tail(dt, w + i * wrb, k, rem, &w0, &w1);
#pragma GCC unroll 4
            for (int b = 0; b < nx; b++) {
                acc[i][b] = _mm512_fmadd_ps(w0, x0[b], acc[i][b]);
                acc[i][b] = _mm512_fmadd_ps(w1, x1[b], acc[i][b]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < nw; i++)
#pragma GCC unroll 4
        for (int b = 0; b < nx; b++)
            y[b * ldy + i] = _mm512_reduce_add_ps(acc[i][b]);
}

/* Float weights, one activation row: dot(W_row, x) with two accumulators
 * (elements 32j..32j+15 and 32j+16..32j+31). Rows are taken one after
 * another, so a thread reads its chunk of the matrix as one sequential
 * stream: one stream per thread lets the prefetchers run ahead when the
 * memory is fast, where eight interleaved rows (which read x once per eight
 * rows, and won in an isolated benchmark) lost in the whole model. Four
 * accumulators and a software prefetch were slower too
 * (docs/journal/cpu.md). */
AI float gemv_row_b1(hr_dtype dt, const uint8_t *w, const float *x, int64_t K) {
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    const int64_t n32 = K / 32;
    for (int64_t j = 0; j < n32; j++) {
        __m512 w0, w1;
        ld32(dt, w, j, NULL, &w0, &w1);
        acc0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + 32 * j), acc0);
        acc1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + 32 * j + 16), acc1);
    }
    if (K % 32 != 0) {
        const int64_t k = n32 * 32;
        const int rem = (int)(K - k);
        __m512 w0, w1;
        ld_tail(dt, w, k, rem, &w0, &w1);
        acc0 = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(lanes16(rem), x + k), acc0);
        acc1 = _mm512_fmadd_ps(w1, _mm512_maskz_loadu_ps(lanes16(rem - 16), x + k + 16), acc1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

AI void gemv_exact(hr_dtype dt, const cpu_mm_args *a, const cpu_mat *m, int64_t r0, int64_t r1,
                   float *y, int64_t ldy) {
    if (a->B == 1 && !hr_dtype_table[dt].is_quant) {
        const size_t wrb = cpu_mm_row_bytes(dt, a->K);
        const uint8_t *w = (const uint8_t *)m->data + (size_t)r0 * wrb;
        for (int64_t r = r0; r < r1; r++, w += wrb)
            y[r - r0] = gemv_row_b1(dt, w, a->x, a->K);
        return;
    }
    const size_t wrb = cpu_mm_row_bytes(dt, a->K);
    const uint8_t *w = (const uint8_t *)m->data + (size_t)r0 * wrb;
    for (int64_t r = r0; r < r1;) {
        const int nw = r1 - r >= 4 ? 4 : 1;
        for (int64_t b = 0; b < a->B; b += 4) {
            const float *xb = a->x + b * a->ldx;
            float *yb = y + b * ldy + (r - r0);
            switch ((a->B - b >= 4 ? 4 : (int)(a->B - b)) + (nw == 4 ? 4 : 0)) {
            case 1: gemv_tile(dt, 1, 1, w, wrb, xb, a->ldx, a->K, yb, ldy); break;
            case 2: gemv_tile(dt, 1, 2, w, wrb, xb, a->ldx, a->K, yb, ldy); break;
            case 3: gemv_tile(dt, 1, 3, w, wrb, xb, a->ldx, a->K, yb, ldy); break;
            case 4: gemv_tile(dt, 1, 4, w, wrb, xb, a->ldx, a->K, yb, ldy); break;
            case 5: gemv_tile(dt, 4, 1, w, wrb, xb, a->ldx, a->K, yb, ldy); break;
            case 6: gemv_tile(dt, 4, 2, w, wrb, xb, a->ldx, a->K, yb, ldy); break;
            case 7: gemv_tile(dt, 4, 3, w, wrb, xb, a->ldx, a->K, yb, ldy); break;
            default: gemv_tile(dt, 4, 4, w, wrb, xb, a->ldx, a->K, yb, ldy); break;
            }
        }
        w += (size_t)nw * wrb;
        r += nw;
    }
}

#define DEF_GEMV_EXACT(name, dt)                                                          \
    static void name(const cpu_mm_args *a, const cpu_mat *m, int64_t r0, int64_t r1,      \
                     float *y, int64_t ldy, void *ts) {                                   \
        (void)ts;                                                                         \
        gemv_exact(dt, a, m, r0, r1, y, ldy);                                             \
    }
DEF_GEMV_EXACT(gemv_exact_f32, HR_DTYPE_F32)
DEF_GEMV_EXACT(gemv_exact_f16, HR_DTYPE_F16)
DEF_GEMV_EXACT(gemv_exact_bf16, HR_DTYPE_BF16)
DEF_GEMV_EXACT(gemv_exact_q8_0, HR_DTYPE_Q8_0)
DEF_GEMV_EXACT(gemv_exact_q4_0, HR_DTYPE_Q4_0)
DEF_GEMV_EXACT(gemv_exact_q4_1, HR_DTYPE_Q4_1)
DEF_GEMV_EXACT(gemv_exact_q5_0, HR_DTYPE_Q5_0)
DEF_GEMV_EXACT(gemv_exact_q5_1, HR_DTYPE_Q5_1)
DEF_GEMV_EXACT(gemv_exact_q2_K, HR_DTYPE_Q2_K)
DEF_GEMV_EXACT(gemv_exact_q3_K, HR_DTYPE_Q3_K)
DEF_GEMV_EXACT(gemv_exact_q4_K, HR_DTYPE_Q4_K)
DEF_GEMV_EXACT(gemv_exact_q5_K, HR_DTYPE_Q5_K)
DEF_GEMV_EXACT(gemv_exact_q6_K, HR_DTYPE_Q6_K)
DEF_GEMV_EXACT(gemv_exact_nf4, HR_DTYPE_NF4)
DEF_GEMV_EXACT(gemv_exact_fp4, HR_DTYPE_FP4)

/* ====================================================================== */
/* EXACT prefill: blocked f32 GEMM                                        */
/* ====================================================================== */
/*
 * matmul_simd.h's driver (gemm_f32_run) with a 12x32 register microkernel:
 * weight panels [k][32] (256 KB a tile: stays in L2), activation panels
 * [k][12] (12 KB a KC-slice: L1); 24 zmm accumulators, per k two weight
 * loads, 12 broadcasts from the packed activations, 24 FMAs. Both packings
 * transpose 16x16 blocks in registers.
 */

#define GEMM_MR 12
#define GEMM_NR 32
#define GEMM_KC 256 /* a multiple of the K-quant super-block */
#define GEMM_NC 256

/* In-place transpose of 16 rows of 16 floats. */
AI void tr16(__m512 r[16]) {
    __m512 t[16];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* t[4j+0..3]: rows 4j..4j+3 interleaved in pairs; pick 4-element runs */
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        const __m512 a = t[4 * j], b = t[4 * j + 1], c = t[4 * j + 2], d = t[4 * j + 3];
        r[4 * j + 0] = _mm512_shuffle_ps(a, c, 0x44);
        r[4 * j + 1] = _mm512_shuffle_ps(a, c, 0xee);
        r[4 * j + 2] = _mm512_shuffle_ps(b, d, 0x44);
        r[4 * j + 3] = _mm512_shuffle_ps(b, d, 0xee);
    }
    /* r[4j+q] holds, in 128-bit lane L, column 4L+q of rows 4j..4j+3 */
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) {
        const __m512 a = r[q], b = r[4 + q], c = r[8 + q], d = r[12 + q];
        const __m512 ab_lo = _mm512_shuffle_f32x4(a, b, 0x44); /* a.L0 a.L1 b.L0 b.L1 */
        const __m512 ab_hi = _mm512_shuffle_f32x4(a, b, 0xee); /* a.L2 a.L3 b.L2 b.L3 */
        const __m512 cd_lo = _mm512_shuffle_f32x4(c, d, 0x44);
        const __m512 cd_hi = _mm512_shuffle_f32x4(c, d, 0xee);
        t[q] = _mm512_shuffle_f32x4(ab_lo, cd_lo, 0x88);      /* column q */
        t[4 + q] = _mm512_shuffle_f32x4(ab_lo, cd_lo, 0xdd);  /* column 4 + q */
        t[8 + q] = _mm512_shuffle_f32x4(ab_hi, cd_hi, 0x88);  /* column 8 + q */
        t[12 + q] = _mm512_shuffle_f32x4(ab_hi, cd_hi, 0xdd); /* column 12 + q */
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        r[i] = t[i];
}

/* y[i][0..nr) (+)= sum_k xp[k][i] * wp[k][0..nr) for i < mr, one STEP per
 * (k, i, half): an FMA (ukernel) or, where each 32-bit entry of both panels
 * is a pair of bf16 (elements 2k and 2k + 1), a vdpbf16ps that adds both
 * products of a lane (ukernel_bf16: twice the f32 FMA's rate; AVX512-BF16
 * is not part of the level, so its functions carry their own target). */
#define STEP_FMA(acc, a, w) _mm512_fmadd_ps(a, w, acc)
#define STEP_DPBF16(acc, a, w) _mm512_dpbf16_ps(acc, (__m512bh)(a), (__m512bh)(w))
#define BF16_TARGET __attribute__((target("avx512bf16")))
#define DEF_UKERNEL(name, target, STEP)                                                            \
    AI target void name(int mr, int64_t kp, const float *xp, const float *wp, float *y,            \
                        int64_t ldy, int nr, bool first) {                                         \
        __m512 acc[GEMM_MR][2];                                                                    \
        _Pragma("GCC unroll 12") for (int i = 0; i < mr; i++) acc[i][0] = acc[i][1] =              \
            _mm512_setzero_ps();                                                                   \
        for (int64_t k = 0; k < kp; k++) {                                                         \
            const __m512 w0 = _mm512_load_ps(wp + GEMM_NR * k);                                    \
            const __m512 w1 = _mm512_load_ps(wp + GEMM_NR * k + 16);                               \
            _Pragma("GCC unroll 12") for (int i = 0; i < mr; i++) {                                \
                const __m512 a = _mm512_set1_ps(xp[GEMM_MR * k + i]);                              \
                acc[i][0] = STEP(acc[i][0], a, w0);                                                \
                acc[i][1] = STEP(acc[i][1], a, w1);                                                \
            }                                                                                      \
        }                                                                                          \
        ukernel_store(mr, acc, y, ldy, nr, first);                                                 \
    }

AI void ukernel_store(int mr, __m512 acc[GEMM_MR][2], float *y, int64_t ldy, int nr, bool first) {
    const __mmask16 m0 = lanes16(nr);
    const __mmask16 m1 = lanes16(nr - 16);
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++) {
        float *yi = y + i * ldy;
        __m512 v0 = acc[i][0], v1 = acc[i][1];
        if (!first) {
            v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, yi));
            v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, yi + 16));
        }
        _mm512_mask_storeu_ps(yi, m0, v0);
        _mm512_mask_storeu_ps(yi + 16, m1, v1);
    }
}

DEF_UKERNEL(ukernel, , STEP_FMA)
DEF_UKERNEL(ukernel_bf16, BF16_TARGET, STEP_DPBF16)
#undef DEF_UKERNEL

/* the microkernel for each row count */
#define UKERNEL_CASES(uk)                                        \
    switch (mr) {                                                \
    case 1: uk(1, kp, xp, wp, y, ldy, nr, first); break;         \
    case 2: uk(2, kp, xp, wp, y, ldy, nr, first); break;         \
    case 3: uk(3, kp, xp, wp, y, ldy, nr, first); break;         \
    case 4: uk(4, kp, xp, wp, y, ldy, nr, first); break;         \
    case 5: uk(5, kp, xp, wp, y, ldy, nr, first); break;         \
    case 6: uk(6, kp, xp, wp, y, ldy, nr, first); break;         \
    case 7: uk(7, kp, xp, wp, y, ldy, nr, first); break;         \
    case 8: uk(8, kp, xp, wp, y, ldy, nr, first); break;         \
    case 9: uk(9, kp, xp, wp, y, ldy, nr, first); break;         \
    case 10: uk(10, kp, xp, wp, y, ldy, nr, first); break;       \
    case 11: uk(11, kp, xp, wp, y, ldy, nr, first); break;       \
    default: uk(12, kp, xp, wp, y, ldy, nr, first); break;       \
    }

static void ukernel_mr(int mr, int64_t kp, const float *xp, const float *wp, float *y, int64_t ldy,
                       int nr, bool first) {
    UKERNEL_CASES(ukernel)
}

BF16_TARGET static void ukernel_bf16_mr(int mr, int64_t kp, const float *xp, const float *wp,
                                        float *y, int64_t ldy, int nr, bool first) {
    UKERNEL_CASES(ukernel_bf16)
}
#undef UKERNEL_CASES

/* gemm_pack_x: rows [0, mr) of x (stride ldx) -> xp [kpad(K)][GEMM_MR], zero padded. */
static void pack_x(const float *x, int64_t ldx, int mr, int64_t K, float *xp) {
    for (int64_t k = 0; k < cpu_mm_kpad(K); k += 16) {
        const int n = K - k >= 16 ? 16 : (int)(K - k);
        const __mmask16 m = lanes16(n);
        __m512 r[16];
        for (int i = 0; i < 16; i++)
            r[i] = i < mr ? _mm512_maskz_loadu_ps(m, x + i * ldx + k) : _mm512_setzero_ps();
        tr16(r);
        for (int i = 0; i < 16; i++)
            _mm512_mask_storeu_ps(xp + GEMM_MR * (k + i), (1u << GEMM_MR) - 1, r[i]);
    }
}

/* 32 rows of f32, row stride ld (rows >= nrows are zero), columns [0, kp) ->
 * panel [kp][GEMM_NR]. */
static void pack_w(const float *t, int64_t ld, int64_t kp, float *wp) {
    for (int64_t k = 0; k < kp; k += 16) {
        for (int h = 0; h < 2; h++) {
            __m512 r[16];
            for (int i = 0; i < 16; i++)
                r[i] = _mm512_loadu_ps(t + (16 * h + i) * ld + k);
            tr16(r);
            for (int i = 0; i < 16; i++)
                _mm512_store_ps(wp + GEMM_NR * (k + i) + 16 * h, r[i]);
        }
    }
}

static const gemm_f32 gemm_f32_avx512 = {
    .mr = GEMM_MR, .nr = GEMM_NR, .kc = GEMM_KC, .nc = GEMM_NC,
    .to_f32 = to_f32, .pack_w = pack_w, .ukernel = ukernel_mr,
};

static void gemm_exact(const cpu_mm_args *a, const cpu_mat *m, int64_t r0, int64_t r1, float *y,
                       int64_t ldy, void *ts) {
    gemm_f32_run(gemm_f32_avx512, a, m, r0, r1, y, ldy, ts);
}

/* ====================================================================== */
/* FAST with BF16 weights: bf16 pair dot products                         */
/* ====================================================================== */
/*
 * x^ = bf16(x) (matmul.h). Prefill: the blocked GEMM above with panels of
 * pairs: a 32-bit entry holds elements 2k and 2k + 1 of a row, so weight
 * rows are packed by transposing their 32-bit words (tr16, no conversion)
 * and the microkernel runs vdpbf16ps where it ran FMA, over half as many
 * steps. A slice of K is BGEMM_KC elements, the same bytes of panel as the
 * f32 GEMM's GEMM_KC (faster than slices of 256 elements: docs/journal/cpu.md).
 * Decode of one row reads x^ as bf16 beside the weights.
 */

#define BGEMM_KC (2 * GEMM_KC)

/* Mask of the first n (clamped to 0..32) 16-bit lanes. */
AI __mmask32 lanes32(int64_t n) {
    return (__mmask32)(n >= 32 ? 0xffffffffu : n <= 0 ? 0u : (1u << n) - 1u);
}

/* x16[i] = bf16(x[i]) by hr_f32_to_bf16's rule (nearest even, NaN kept
 * quiet), xh[i] = x16[i] as f32: integer arithmetic, so both agree bit for
 * bit (vcvtneps2bf16 would treat denormal inputs as zero). */
static void round_bf16(const float *x, int64_t n, uint16_t *x16, float *xh) {
    const __m512i one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x7fff);
    const __m512i abs = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    const __m512i quiet = _mm512_set1_epi32(0x40);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes16((int)(n - i < 16 ? n - i : 16));
        const __m512i u = _mm512_maskz_loadu_epi32(m, x + i);
        const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs), inf);
        const __m512i hi = _mm512_srli_epi32(u, 16);
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(half, _mm512_and_si512(hi, one))), 16);
        r = _mm512_mask_or_epi32(r, nan, hi, quiet);
        _mm256_mask_storeu_epi16(x16 + i, m, _mm512_cvtepi32_epi16(r));
        _mm512_mask_storeu_ps(xh + i, m, _mm512_castsi512_ps(_mm512_slli_epi32(r, 16)));
    }
}

/* 16 rows of 16-bit elements [k, k + 32), row stride ld (rows >= n_rows and
 * elements >= K are zero), as 16 x 16 pairs -> dst[i][0..16) (stride
 * dst_ld words) holds pair i of each row: one 16x16 transpose of 32-bit words. */
AI void pack_pairs16(const uint16_t *rows, int64_t ld, int n_rows, int64_t k, int64_t K, float *dst,
                     int64_t dst_ld, __mmask16 store) {
    const __mmask32 m = lanes32(K - k);
    __m512 r[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        r[i] = i < n_rows ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(m, rows + i * ld + k))
                          : _mm512_setzero_ps();
    tr16(r);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        _mm512_mask_storeu_ps(dst + i * dst_ld, store, r[i]);
}

static void pack_x16(const uint16_t *x16, int64_t K, int n_rows, uint32_t *dst) {
    for (int64_t k = 0; k < cpu_mm_kpad32(K); k += 32)
        pack_pairs16(x16, K, n_rows, k, K, (float *)(void *)dst + GEMM_MR * (k / 2), GEMM_MR,
                     (1u << GEMM_MR) - 1);
}

BF16_TARGET static void gemm_bf16(const cpu_mm_args *a, const cpu_mat *m, int64_t r0, int64_t r1, float *y,
                      int64_t ldy, void *ts) {
    const int64_t K = a->K, n_rows = r1 - r0;
    HR_ASSERT(n_rows <= GEMM_NC && a->xpack16 != NULL);
    const uint16_t *w = (const uint16_t *)m->data + (size_t)r0 * (size_t)K;
    float *wp = (float *)(((uintptr_t)ts + 63) & ~(uintptr_t)63);
    const size_t xpanel = (size_t)GEMM_MR * (size_t)cpu_mm_kpad32(K) / 2;
    const int64_t n_panels = (n_rows + GEMM_NR - 1) / GEMM_NR;
    const int64_t panel = GEMM_NR * BGEMM_KC / 2;
    for (int64_t kc = 0; kc < K; kc += BGEMM_KC) {
        const int64_t kl = K - kc < BGEMM_KC ? K - kc : BGEMM_KC;
        const int64_t kp2 = (kl + 31) / 32 * 16; /* pairs in this slice */
        for (int64_t p = 0; p < n_panels; p++)
            for (int h = 0; h < 2; h++) {
                const int64_t row = GEMM_NR * p + 16 * h;
                const int n = (int)(n_rows - row < 16 ? n_rows - row : 16);
                for (int64_t u = 0; u < kp2; u += 16)
                    pack_pairs16(w + row * K, K, n, kc + 2 * u, K, wp + p * panel + GEMM_NR * u + 16 * h,
                                 GEMM_NR, 0xffff);
            }
        for (int64_t b = 0; b < a->B; b += GEMM_MR) {
            const int mr = a->B - b >= GEMM_MR ? GEMM_MR : (int)(a->B - b);
            const float *xp = (const float *)(const void *)a->xpack16 + (size_t)(b / GEMM_MR) * xpanel +
                              (size_t)(kc / 2) * GEMM_MR;
            for (int64_t p = 0; p < n_panels; p++) {
                const int nr = n_rows - GEMM_NR * p >= GEMM_NR ? GEMM_NR : (int)(n_rows - GEMM_NR * p);
                ukernel_bf16_mr(mr, kp2, xp, wp + p * panel, y + b * ldy + GEMM_NR * p, ldy, nr, kc == 0);
            }
        }
    }
}

/* Decode of one row: 32 products an instruction, x^ read as bf16. */
BF16_TARGET static void gemv_fast_bf16(const cpu_mm_args *a, const cpu_mat *m, int64_t r0, int64_t r1,
                           float *y, int64_t ldy, void *ts) {
    (void)ldy, (void)ts;
    HR_ASSERT(a->B == 1 && a->x16 != NULL);
    const int64_t K = a->K, n64 = K / 64;
    const uint16_t *x = a->x16;
    const uint16_t *w = (const uint16_t *)m->data + (size_t)r0 * (size_t)K;
    for (int64_t r = r0; r < r1; r++, w += K) {
        __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
        for (int64_t j = 0; j < n64; j++) {
            acc0 = _mm512_dpbf16_ps(acc0, (__m512bh)_mm512_loadu_si512(w + 64 * j),
                                    (__m512bh)_mm512_loadu_si512(x + 64 * j));
            acc1 = _mm512_dpbf16_ps(acc1, (__m512bh)_mm512_loadu_si512(w + 64 * j + 32),
                                    (__m512bh)_mm512_loadu_si512(x + 64 * j + 32));
        }
        for (int64_t k = 64 * n64; k < K; k += 32) {
            const __mmask32 mk = lanes32(K - k);
            acc0 = _mm512_dpbf16_ps(acc0, (__m512bh)_mm512_maskz_loadu_epi16(mk, w + k),
                                    (__m512bh)_mm512_maskz_loadu_epi16(mk, x + k));
        }
        y[r - r0] = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    }
}

/* ====================================================================== */
/* FAST prefill: blocked int8 GEMM                                        */
/* ====================================================================== */
/*
 * Quantized weights are repacked, GEMM_RSUB rows at a time, into per-thread
 * scratch in the transposed layout of the CPU_XQ_T32/T16 activations: per
 * group of 16 blocks (of S = 32 elements; S = 16 for the K-quants with
 * 16-element scales) S/4 vectors whose 32-bit lane j holds 4 signed codes of
 * block j, then the blocks' -128 * sum(codes) (int32), scales and mins
 * (f32). With the activations stored as q + 128 (unsigned), vpdpbusd
 * computes sum (q + 128) c, and starting the accumulator at -128 * sum(c)
 * leaves exactly sum q c per block, one block per lane: no horizontal
 * reduction. The 4x3 microkernel keeps 12 int32 and 12 f32 accumulators; per
 * group it issues 12 * S/4 vpdpbusd and 12 * 3 f32 ops (convert, scale
 * product, FMA; one more FMA for formats with a min). Everything is computed
 * over the whole K, so y is written once.
 */

#define GEMM_RSUB 48 /* weight rows packed at a time: 3 * 16 */
#define FRM 4        /* activation rows per microkernel */
#define FRN 3        /* weight rows per microkernel */

AI int fast_S(hr_dtype dt) {
    return dt == HR_DTYPE_Q2_K || dt == HR_DTYPE_Q3_K || dt == HR_DTYPE_Q6_K ? 16 : 32;
}

AI size_t fast_gs(int S, bool min) { /* packed bytes per group of 16 blocks */
    return (size_t)S * 16 + (min ? 192 : 128);
}

static size_t fast_wrs(hr_dtype dt, int64_t K) { /* packed bytes per row */
    const int S = fast_S(dt);
    return (size_t)((K + 16 * S - 1) / (16 * S)) * fast_gs(S, has_min(dt));
}

/* Sum of 16 signed bytes. */
AI int32_t sum_i8x16(__m128i v) {
    const __m128i t = _mm_sad_epu8(_mm_xor_si128(v, _mm_set1_epi8((char)0x80)), _mm_setzero_si128());
    return (int32_t)(_mm_cvtsi128_si32(t) + _mm_extract_epi32(t, 2)) - 128 * 16;
}

AI void put_lane(uint8_t *g, int S, int lane, __m128i codes, int t0, int32_t sum, float sc, float mn,
                 bool min) {
    uint32_t w[4];
    _mm_storeu_si128((__m128i *)w, codes);
    for (int t = 0; t < 4; t++)
        memcpy(g + 64 * (t0 + t) + 4 * lane, &w[t], 4);
    const int32_t corr = -128 * sum;
    memcpy(g + S * 16 + 4 * lane, &corr, 4);
    memcpy(g + S * 16 + 64 + 4 * lane, &sc, 4);
    if (min)
        memcpy(g + S * 16 + 128 + 4 * lane, &mn, 4);
}

static void pack_fast_row(hr_dtype dt, const uint8_t *row, int64_t K, uint8_t *dst) {
    const int S = fast_S(dt);
    const bool min = has_min(dt);
    const size_t gs = fast_gs(S, min);
    memset(dst, 0, fast_wrs(dt, K));
    float h[32];
    for (int64_t j = 0; j < K / 32; j++) {
        if (is_kquant(dt) && j % 8 == 0)
            khdr(dt, row, j / 8, h);
        const codes32 c = get_codes32(dt, row, j, h);
        if (S == 32) {
            uint8_t *g = dst + (size_t)(j / 16) * gs;
            put_lane(g, S, (int)(j % 16), c.lo, 0, sum_i8x16(c.lo) + sum_i8x16(c.hi), c.sc[0], c.mn[0],
                     min);
            uint32_t w[4];
            _mm_storeu_si128((__m128i *)w, c.hi);
            for (int t = 0; t < 4; t++)
                memcpy(g + 64 * (4 + t) + 4 * (j % 16), &w[t], 4);
        } else {
            for (int half = 0; half < 2; half++) {
                const int64_t ih = 2 * j + half;
                uint8_t *g = dst + (size_t)(ih / 16) * gs;
                const __m128i v = half ? c.hi : c.lo;
                put_lane(g, S, (int)(ih % 16), v, 0, sum_i8x16(v), c.sc[half], c.mn[half], min);
            }
        }
    }
}

/* y[i * ldy + j] = dot(x_i, W_j) for i < rm, j < rn over n_groups groups;
 * xr: FRM activation xq rows (T layout; unused ones repeat a valid row),
 * wp: FRN packed weight rows, wrs bytes apart. */
AI void fast_ukernel(int S, bool min, int64_t n_groups, const uint8_t *const xr[FRM], int64_t K,
                     const uint8_t *wp, size_t wrs, float *y, int64_t ldy, int rm, int rn) {
    const size_t gs = fast_gs(S, min);
    const int nt = S / 4;
    __m512 facc[FRM][FRN];
#pragma GCC unroll 4
    for (int i = 0; i < FRM; i++)
#pragma GCC unroll 3
        for (int j = 0; j < FRN; j++)
            facc[i][j] = _mm512_setzero_ps();
    const float *xd[FRM];
    const int32_t *xs[FRM];
#pragma GCC unroll 4
    for (int i = 0; i < FRM; i++) {
        xd[i] = S == 32 ? cpu_xq_d(xr[i], K) : cpu_xq_d16(xr[i], K);
        xs[i] = S == 32 ? cpu_xq_s32(xr[i], K) : cpu_xq_s16(xr[i], K);
    }
    for (int64_t g = 0; g < n_groups; g++) {
        const uint8_t *wg = wp + (size_t)g * gs;
        __m512i ia[FRM][FRN];
#pragma GCC unroll 3
        for (int j = 0; j < FRN; j++) {
            const __m512i corr = _mm512_load_si512(wg + (size_t)j * wrs + S * 16);
#pragma GCC unroll 4
            for (int i = 0; i < FRM; i++)
                ia[i][j] = corr;
        }
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++) {
            __m512i xv[FRM];
#pragma GCC unroll 4
            for (int i = 0; i < FRM; i++)
                xv[i] = _mm512_loadu_si512(xr[i] + (size_t)g * (size_t)S * 16 + 64 * t);
#pragma GCC unroll 3
            for (int j = 0; j < FRN; j++) {
                const __m512i wv = _mm512_load_si512(wg + (size_t)j * wrs + 64 * t);
#pragma GCC unroll 4
                for (int i = 0; i < FRM; i++)
                    ia[i][j] = _mm512_dpbusd_epi32(ia[i][j], xv[i], wv);
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < FRM; i++) {
            const __m512 dx = _mm512_loadu_ps(xd[i] + 16 * g);
            __m512 xsum = _mm512_setzero_ps();
            if (min)
                xsum = _mm512_mul_ps(dx, _mm512_cvtepi32_ps(_mm512_loadu_si512(xs[i] + 16 * g)));
#pragma GCC unroll 3
            for (int j = 0; j < FRN; j++) {
                const uint8_t *wj = wg + (size_t)j * wrs + S * 16;
                const __m512 dw = _mm512_load_ps((const float *)(const void *)(wj + 64));
                facc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[i][j]), _mm512_mul_ps(dw, dx), facc[i][j]);
                if (min)
                    facc[i][j] = _mm512_fmadd_ps(_mm512_load_ps((const float *)(const void *)(wj + 128)),
                                                 xsum, facc[i][j]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < FRM; i++)
#pragma GCC unroll 3
        for (int j = 0; j < FRN; j++)
            if (i < rm && j < rn)
                y[i * ldy + j] = _mm512_reduce_add_ps(facc[i][j]);
}

static void fast_ukernel_any(int S, bool min, int64_t n_groups, const uint8_t *const xr[FRM],
                             int64_t K, const uint8_t *wp, size_t wrs, float *y, int64_t ldy, int rm,
                             int rn) {
    if (S == 32 && !min)
        fast_ukernel(32, false, n_groups, xr, K, wp, wrs, y, ldy, rm, rn);
    else if (S == 32)
        fast_ukernel(32, true, n_groups, xr, K, wp, wrs, y, ldy, rm, rn);
    else if (!min)
        fast_ukernel(16, false, n_groups, xr, K, wp, wrs, y, ldy, rm, rn);
    else
        fast_ukernel(16, true, n_groups, xr, K, wp, wrs, y, ldy, rm, rn);
}

static size_t gemm_fast_tscratch(int64_t max_K) {
    size_t a = fast_wrs(HR_DTYPE_Q4_1, max_K), b = fast_wrs(HR_DTYPE_Q2_K, max_K);
    return (size_t)GEMM_RSUB * (a > b ? a : b) + 64;
}

static void gemm_fast(const cpu_mm_args *a, const cpu_mat *m, int64_t r0, int64_t r1, float *y,
                      int64_t ldy, void *ts) {
    const hr_dtype dt = m->dtype;
    const int64_t K = a->K;
    const int S = fast_S(dt);
    const bool min = has_min(dt);
    const size_t wrb = cpu_mm_row_bytes(dt, K), wrs = fast_wrs(dt, K);
    const int64_t n_groups = (K + 16 * S - 1) / (16 * S);
    const uint8_t *xq = a->xq[S == 32 ? CPU_XQ_T32 : CPU_XQ_T16];
    uint8_t *wp = (uint8_t *)(((uintptr_t)ts + 63) & ~(uintptr_t)63);
    for (int64_t rs = r0; rs < r1; rs += GEMM_RSUB) {
        const int nr = r1 - rs >= GEMM_RSUB ? GEMM_RSUB : (int)(r1 - rs);
        for (int j = 0; j < nr; j++)
            pack_fast_row(dt, (const uint8_t *)m->data + (size_t)(rs + j) * wrb, K, wp + (size_t)j * wrs);
        const int npad = (nr + FRN - 1) / FRN * FRN;
        memset(wp + (size_t)nr * wrs, 0, (size_t)(npad - nr) * wrs);
        for (int64_t b = 0; b < a->B; b += FRM) {
            const int rm = a->B - b >= FRM ? FRM : (int)(a->B - b);
            const uint8_t *xr[FRM];
            for (int i = 0; i < FRM; i++)
                xr[i] = xq + (size_t)(b + (i < rm ? i : rm - 1)) * a->xq_row_bytes;
            for (int j = 0; j < npad; j += FRN) {
                const int rn = nr - j >= FRN ? FRN : nr - j;
                fast_ukernel_any(S, min, n_groups, xr, K, wp + (size_t)j * wrs, wrs,
                                 y + b * ldy + (rs - r0) + j, ldy, rm, rn);
            }
        }
    }
}

/* ====================================================================== */
/* the table                                                              */
/* ====================================================================== */

static size_t tscratch_bytes(int64_t max_K) {
    size_t a = gemm_f32_tscratch(gemm_f32_avx512), b = gemm_fast_tscratch(max_K);
    size_t c = (size_t)GEMM_NC * BGEMM_KC / 2 * 4 + 64; /* gemm_bf16's panels */
    size_t d = cpu_mm_avx512_gemv_nf4_tscratch(max_K);
    a = a > b ? a : b;
    a = a > c ? a : c;
    return a > d ? a : d;
}

/* FAST with F16 weights: vcvtps2ph rounds to nearest even, the reference's
 * rule. */
static void round_f16(const float *x, int64_t n, uint16_t *x16, float *xh) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes16((int)(n - i < 16 ? n - i : 16));
        const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i), _MM_FROUND_TO_NEAREST_INT);
        _mm256_mask_storeu_epi16(x16 + i, m, h);
        _mm512_mask_storeu_ps(xh + i, m, _mm512_cvtph_ps(h));
    }
}

/* FAST decode of F16 weights for one activation row, read as f16 (x16): the
 * sums of gemv_row_b1 on x^, with half its activation bytes. */
static void gemv_fast_f16(const cpu_mm_args *a, const cpu_mat *m, int64_t r0, int64_t r1,
                          float *y, int64_t ldy, void *ts) {
    (void)ldy, (void)ts;
    HR_ASSERT(a->B == 1 && a->x16 != NULL);
    const int64_t K = a->K, n32 = K / 32;
    const uint16_t *x = a->x16;
    const uint16_t *w = (const uint16_t *)m->data + (size_t)r0 * (size_t)K;
    for (int64_t r = r0; r < r1; r++, w += K) {
        __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
        for (int64_t j = 0; j < n32; j++) {
            const __m256i *wp = (const __m256i *)(const void *)(w + 32 * j);
            const __m256i *xp = (const __m256i *)(const void *)(x + 32 * j);
            acc0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256(wp)),
                                   _mm512_cvtph_ps(_mm256_loadu_si256(xp)), acc0);
            acc1 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256(wp + 1)),
                                   _mm512_cvtph_ps(_mm256_loadu_si256(xp + 1)), acc1);
        }
        if (K % 32 != 0) {
            const int64_t k = n32 * 32;
            const int rem = (int)(K - k);
            const __mmask16 m0 = lanes16(rem), m1 = lanes16(rem - 16);
            acc0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m0, w + k)),
                                   _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m0, x + k)), acc0);
            acc1 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m1, w + k + 16)),
                                   _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m1, x + k + 16)), acc1);
        }
        y[r - r0] = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    }
}






const cpu_mm_isa cpu_mm_isa_avx512 = {
    .name = "avx512",
    .gemv_exact =
        {
            [HR_DTYPE_F32] = gemv_exact_f32,   [HR_DTYPE_F16] = gemv_exact_f16,
            [HR_DTYPE_BF16] = gemv_exact_bf16, [HR_DTYPE_Q8_0] = gemv_exact_q8_0,
            [HR_DTYPE_Q4_0] = gemv_exact_q4_0, [HR_DTYPE_Q4_1] = gemv_exact_q4_1,
            [HR_DTYPE_Q5_0] = gemv_exact_q5_0, [HR_DTYPE_Q5_1] = gemv_exact_q5_1,
            [HR_DTYPE_Q2_K] = gemv_exact_q2_K, [HR_DTYPE_Q3_K] = gemv_exact_q3_K,
            [HR_DTYPE_Q4_K] = gemv_exact_q4_K, [HR_DTYPE_Q5_K] = gemv_exact_q5_K,
            [HR_DTYPE_Q6_K] = gemv_exact_q6_K, [HR_DTYPE_NF4] = gemv_exact_nf4,
            [HR_DTYPE_FP4] = gemv_exact_fp4,
        },
    .to_f32 =
        {
            [HR_DTYPE_F32] = to_f32_f32,   [HR_DTYPE_F16] = to_f32_f16,
            [HR_DTYPE_BF16] = to_f32_bf16, [HR_DTYPE_Q8_0] = to_f32_q8_0,
            [HR_DTYPE_Q4_0] = to_f32_q4_0, [HR_DTYPE_Q4_1] = to_f32_q4_1,
            [HR_DTYPE_Q5_0] = to_f32_q5_0, [HR_DTYPE_Q5_1] = to_f32_q5_1,
            [HR_DTYPE_Q2_K] = to_f32_q2_K, [HR_DTYPE_Q3_K] = to_f32_q3_K,
            [HR_DTYPE_Q4_K] = to_f32_q4_K, [HR_DTYPE_Q5_K] = to_f32_q5_K,
            [HR_DTYPE_Q6_K] = to_f32_q6_K, [HR_DTYPE_NF4] = to_f32_nf4,
            [HR_DTYPE_FP4] = to_f32_fp4,
        },
    .gemv_fast =
        {
            [HR_DTYPE_F16] = gemv_fast_f16, [HR_DTYPE_BF16] = gemv_fast_bf16,
            [HR_DTYPE_Q8_0] = cpu_mm_avx512_gemv_fast, [HR_DTYPE_Q4_0] = cpu_mm_avx512_gemv_fast,
            [HR_DTYPE_Q4_1] = cpu_mm_avx512_gemv_fast, [HR_DTYPE_Q5_0] = cpu_mm_avx512_gemv_fast,
            [HR_DTYPE_Q5_1] = cpu_mm_avx512_gemv_fast, [HR_DTYPE_Q2_K] = cpu_mm_avx512_gemv_fast,
            [HR_DTYPE_Q3_K] = cpu_mm_avx512_gemv_fast, [HR_DTYPE_Q4_K] = cpu_mm_avx512_gemv_fast,
            [HR_DTYPE_Q5_K] = cpu_mm_avx512_gemv_fast, [HR_DTYPE_Q6_K] = cpu_mm_avx512_gemv_fast,
            [HR_DTYPE_NF4] = cpu_mm_avx512_gemv_nf4, [HR_DTYPE_FP4] = cpu_mm_avx512_gemv_nf4,
        },
    .gemv_fast_layout =
        {
            [HR_DTYPE_Q8_0] = CPU_XQ_NATURAL, [HR_DTYPE_Q4_0] = CPU_XQ_QUAD,
            [HR_DTYPE_Q4_1] = CPU_XQ_QUAD, [HR_DTYPE_Q5_0] = CPU_XQ_QUAD,
            [HR_DTYPE_Q5_1] = CPU_XQ_QUAD, [HR_DTYPE_Q2_K] = CPU_XQ_NATURAL,
            [HR_DTYPE_Q3_K] = CPU_XQ_NATURAL, [HR_DTYPE_Q4_K] = CPU_XQ_K4,
            [HR_DTYPE_Q5_K] = CPU_XQ_K4, [HR_DTYPE_Q6_K] = CPU_XQ_NATURAL,
            [HR_DTYPE_NF4] = CPU_XQ_NATURAL, [HR_DTYPE_FP4] = CPU_XQ_NATURAL,
        },
    .quantize = cpu_mm_avx512_quantize,
    .round_f16 = round_f16,
    .round_bf16 = round_bf16,
    .gemm_exact = gemm_exact,
    .gemm_fast =
        {
            [HR_DTYPE_BF16] = gemm_bf16,
            [HR_DTYPE_Q8_0] = gemm_fast, [HR_DTYPE_Q4_0] = gemm_fast, [HR_DTYPE_Q4_1] = gemm_fast,
            [HR_DTYPE_Q5_0] = gemm_fast, [HR_DTYPE_Q5_1] = gemm_fast, [HR_DTYPE_Q2_K] = gemm_fast,
            [HR_DTYPE_Q3_K] = gemm_fast, [HR_DTYPE_Q4_K] = gemm_fast, [HR_DTYPE_Q5_K] = gemm_fast,
            [HR_DTYPE_Q6_K] = gemm_fast,
        },
    .gemm_fast_layout =
        {
            [HR_DTYPE_Q8_0] = CPU_XQ_T32, [HR_DTYPE_Q4_0] = CPU_XQ_T32, [HR_DTYPE_Q4_1] = CPU_XQ_T32,
            [HR_DTYPE_Q5_0] = CPU_XQ_T32, [HR_DTYPE_Q5_1] = CPU_XQ_T32, [HR_DTYPE_Q2_K] = CPU_XQ_T16,
            [HR_DTYPE_Q3_K] = CPU_XQ_T16, [HR_DTYPE_Q4_K] = CPU_XQ_T32, [HR_DTYPE_Q5_K] = CPU_XQ_T32,
            [HR_DTYPE_Q6_K] = CPU_XQ_T16,
        },
    /* measured crossovers (Zen 4, one thread, K=2048..5632): the 4x4 decode
     * tiles keep ~105 GFLOP/s in f32 while x stays in L2/L3, the f32 GEMM
     * pays its weight conversion per 256-column slice; integer decode tiles
     * pay a 16-block reduction per pair, the integer GEMM does not; the
     * bf16 GEMM passes the 4x4 f32 tiles on x^ at 10-12 rows (2 threads) */
    .gemm_min_B_exact = 256,
    .gemm_min_B_fast = 32,
    .gemm_min_B_bf16 = 12,
    /* NF4/FP4 prefill (TinyLlama, 2 threads): 80-86 tok/s at 8-64 rows
     * whether the switch to the f32 GEMM on x^ came at 8, 16 or 32 rows;
     * the f32 GEMM is the limit there (an integer NF4 GEMM would lift it) */
    .gemm_min_B_xh = 32,
    .gemm_max_rows = GEMM_NC,
    .gemm_row_align = GEMM_NR,
    .gemm_mr = GEMM_MR,
    .gemm_pack_x = pack_x,
    .gemm_pack_x16 = pack_x16,
    .tscratch_bytes = tscratch_bytes,
};
