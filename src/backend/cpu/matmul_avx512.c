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
 * History (one thread, Q4_0 FAST from L2, K=2048): first version (16 block
 * scales by vpgatherdd: 40% of the time) 21 GB/s; scales packed by scalar
 * loads 23; nibbles from two 64-byte loads + one dword permute instead of
 * four 16-byte inserts 25; scales by two word permutes 29. Two weight rows
 * interleaved (to share per-row work) gained 5% from L2 but lost 60% from
 * DRAM (the prefetcher lost the stream): rejected. K-quants: scales
 * shuffled into lane order in registers instead of via memory, 19 -> 22.
 *
 * Shape legend: B activation rows, K inner dimension, N weight rows;
 * nw/nx = weight/activation rows in a register tile.
 */
#include "backend/cpu/matmul.h"

#include "quant/blocks.h"
#include "util/dtype.h"
#include "util/error.h"

#include <immintrin.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

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

AI float f16s(uint16_t h) {
    return _cvtsh_ss(h);
}

AI bool is_kquant(hr_dtype dt) {
    return dt == HR_DTYPE_Q2_K || dt == HR_DTYPE_Q3_K || dt == HR_DTYPE_Q4_K ||
           dt == HR_DTYPE_Q5_K || dt == HR_DTYPE_Q6_K;
}

/* Q4_K/Q5_K: the 8 six-bit scales and mins of a super-block (blocks.h), as
 * bytes 0..7 of *sc and *mn, unpacked with 32-bit operations (byte-register
 * arithmetic creates false dependencies on AMD cores). */
AI void k4_scales(const uint8_t *s, uint64_t *sc, uint64_t *mn) {
    uint32_t u[3];
    memcpy(u, s, 12);
    *sc = (uint64_t)(u[0] & 0x3f3f3f3fu) |
          (uint64_t)((u[2] & 0x0f0f0f0fu) | ((u[0] >> 2) & 0x30303030u)) << 32;
    *mn = (uint64_t)(u[1] & 0x3f3f3f3fu) |
          (uint64_t)(((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 2) & 0x30303030u)) << 32;
}

/* Q3_K: the 16 six-bit scales (biased by 32) as 16 bytes (blocks.h). */
AI __m128i q3_scales(const uint8_t *s) {
    uint64_t a;
    uint32_t h;
    memcpy(&a, s, 8);
    memcpy(&h, s + 8, 4);
    const uint64_t m4 = 0x0f0f0f0f0f0f0f0full;
    const uint64_t lo = (a & m4) | ((uint64_t)(h & 0x03030303u) |
                                    (uint64_t)((h >> 2) & 0x03030303u) << 32) << 4;
    const uint64_t hi = ((a >> 4) & m4) | ((uint64_t)((h >> 4) & 0x03030303u) |
                                           (uint64_t)((h >> 6) & 0x03030303u) << 32) << 4;
    return _mm_set_epi64x((long long)hi, (long long)lo);
}

/* K-quant super-block sb of a row: per 16-element sixteenth l, the f32 scale
 * h[l] and the negated min h[16 + l] exactly as the reference forms them
 * (d * sc, dmin * mn: exact products). */
AI void khdr(hr_dtype dt, const uint8_t *row, int64_t sb, float h[32]) {
    __m512 d, m = _mm512_setzero_ps();
    switch (dt) {
    case HR_DTYPE_Q2_K: {
        const block_q2_K *b = (const block_q2_K *)(const void *)row + sb;
        const __m512i s = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)b->scales));
        d = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(s, _mm512_set1_epi32(15))),
                          _mm512_set1_ps(f16s(b->d)));
        m = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(s, 4)), _mm512_set1_ps(f16s(b->dmin)));
        break;
    }
    case HR_DTYPE_Q3_K: {
        const block_q3_K *b = (const block_q3_K *)(const void *)row + sb;
        const __m512i s = _mm512_sub_epi32(_mm512_cvtepu8_epi32(q3_scales(b->scales)),
                                           _mm512_set1_epi32(32));
        d = _mm512_mul_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(f16s(b->d)));
        break;
    }
    case HR_DTYPE_Q4_K:
    case HR_DTYPE_Q5_K: {
        const uint8_t *blk =
            row + (size_t)sb * (dt == HR_DTYPE_Q5_K ? sizeof(block_q5_K) : sizeof(block_q4_K));
        uint16_t hd, hm;
        memcpy(&hd, blk, 2);
        memcpy(&hm, blk + 2, 2);
        uint64_t sc, mn;
        k4_scales(blk + 4, &sc, &mn);
        const __m128i vs = _mm_cvtsi64_si128((long long)sc), vm = _mm_cvtsi64_si128((long long)mn);
        /* sub-block j of 32 covers sixteenths 2j and 2j+1 */
        d = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(vs, vs))),
                          _mm512_set1_ps(f16s(hd)));
        m = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(vm, vm))),
                          _mm512_set1_ps(f16s(hm)));
        break;
    }
    case HR_DTYPE_Q6_K: {
        const block_q6_K *b = (const block_q6_K *)(const void *)row + sb;
        d = _mm512_mul_ps(cvt_i8(_mm_loadu_si128((const __m128i *)b->scales)),
                          _mm512_set1_ps(f16s(b->d)));
        break;
    }
    default:
        return;
    }
    _mm512_storeu_ps(h, d);
    _mm512_storeu_ps(h + 16, _mm512_sub_ps(_mm512_setzero_ps(), m));
}

/* Quantized dtypes: the signed integer codes of elements [32j, 32j + 32) of
 * a row (lo: the first 16, hi: the last 16) and, per 16-element half, the
 * scale and min that make w = sc * code + mn exactly as the reference
 * dequantizer computes it (mn = 0: w = sc * code). h: khdr() of the
 * super-block for K-quants. */
typedef struct {
    __m128i lo, hi;
    float sc[2], mn[2];
} codes32;

AI codes32 get_codes32(hr_dtype dt, const uint8_t *row, int64_t j, const float *h) {
    const __m128i m4 = _mm_set1_epi8(15);
    const int s = (int)(j % 8); /* K-quants: step within the super-block */
    codes32 c = {.mn = {0.0f, 0.0f}};
    switch (dt) {
    case HR_DTYPE_Q8_0: {
        const block_q8_0 *b = (const block_q8_0 *)(const void *)row + j;
        c.lo = _mm_loadu_si128((const __m128i *)b->qs);
        c.hi = _mm_loadu_si128((const __m128i *)(b->qs + 16));
        c.sc[0] = c.sc[1] = f16s(b->d);
        break;
    }
    case HR_DTYPE_Q4_0: {
        const block_q4_0 *b = (const block_q4_0 *)(const void *)row + j;
        const __m128i q = _mm_loadu_si128((const __m128i *)b->qs);
        c.lo = _mm_sub_epi8(_mm_and_si128(q, m4), _mm_set1_epi8(8));
        c.hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_set1_epi8(8));
        c.sc[0] = c.sc[1] = f16s(b->d);
        break;
    }
    case HR_DTYPE_Q4_1: {
        const block_q4_1 *b = (const block_q4_1 *)(const void *)row + j;
        const __m128i q = _mm_loadu_si128((const __m128i *)b->qs);
        c.lo = _mm_and_si128(q, m4);
        c.hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
        c.sc[0] = c.sc[1] = f16s(b->d);
        c.mn[0] = c.mn[1] = f16s(b->m);
        break;
    }
    case HR_DTYPE_Q5_0:
    case HR_DTYPE_Q5_1: {
        /* Q5_0 and Q5_1 differ in the header and the offset of the codes */
        const bool one = dt == HR_DTYPE_Q5_1;
        const uint8_t *blk = row + (size_t)j * (one ? sizeof(block_q5_1) : sizeof(block_q5_0));
        const uint8_t *qh = blk + (one ? 4 : 2), *qs = qh + 4;
        uint16_t hd, hm = 0;
        uint32_t hb;
        memcpy(&hd, blk, 2);
        if (one)
            memcpy(&hm, blk + 2, 2);
        memcpy(&hb, qh, 4);
        const __m128i q = _mm_loadu_si128((const __m128i *)qs);
        const __m128i off = _mm_set1_epi8(one ? 0 : 16), b16 = _mm_set1_epi8(16);
        c.lo = _mm_sub_epi8(_mm_and_si128(q, m4), off);
        c.hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), m4), off);
        c.lo = _mm_mask_add_epi8(c.lo, (__mmask16)(hb & 0xffff), c.lo, b16);
        c.hi = _mm_mask_add_epi8(c.hi, (__mmask16)(hb >> 16), c.hi, b16);
        c.sc[0] = c.sc[1] = f16s(hd);
        if (one)
            c.mn[0] = c.mn[1] = f16s(hm);
        break;
    }
    case HR_DTYPE_Q2_K: {
        const block_q2_K *b = (const block_q2_K *)(const void *)row + j / 8;
        const __m128i sh = _mm_cvtsi32_si128(2 * (s % 4)), m2 = _mm_set1_epi8(3);
        const uint8_t *q = b->qs + 32 * (s / 4);
        c.lo = _mm_and_si128(_mm_srl_epi16(_mm_loadu_si128((const __m128i *)q), sh), m2);
        c.hi = _mm_and_si128(_mm_srl_epi16(_mm_loadu_si128((const __m128i *)(q + 16)), sh), m2);
        c.sc[0] = h[2 * s], c.sc[1] = h[2 * s + 1];
        c.mn[0] = h[16 + 2 * s], c.mn[1] = h[17 + 2 * s];
        break;
    }
    case HR_DTYPE_Q3_K: {
        const block_q3_K *b = (const block_q3_K *)(const void *)row + j / 8;
        const __m128i sh = _mm_cvtsi32_si128(2 * (s % 4)), m2 = _mm_set1_epi8(3);
        const uint8_t *q = b->qs + 32 * (s / 4);
        const __m128i bit = _mm_set1_epi8((char)(1 << s)), b4 = _mm_set1_epi8(4);
        c.lo = _mm_and_si128(_mm_srl_epi16(_mm_loadu_si128((const __m128i *)q), sh), m2);
        c.hi = _mm_and_si128(_mm_srl_epi16(_mm_loadu_si128((const __m128i *)(q + 16)), sh), m2);
        /* q = low - 4 unless the hmask bit is set */
        c.lo = _mm_mask_sub_epi8(
            c.lo, _mm_testn_epi8_mask(_mm_loadu_si128((const __m128i *)b->hmask), bit), c.lo, b4);
        c.hi = _mm_mask_sub_epi8(
            c.hi, _mm_testn_epi8_mask(_mm_loadu_si128((const __m128i *)(b->hmask + 16)), bit), c.hi, b4);
        c.sc[0] = h[2 * s], c.sc[1] = h[2 * s + 1];
        break;
    }
    case HR_DTYPE_Q4_K:
    case HR_DTYPE_Q5_K: {
        const bool five = dt == HR_DTYPE_Q5_K;
        const uint8_t *blk = row + (size_t)(j / 8) * (five ? sizeof(block_q5_K) : sizeof(block_q4_K));
        const uint8_t *qh = blk + 4 + QUANT_K_SCALE_BYTES;
        const uint8_t *qs = five ? qh + 32 : qh;
        const __m128i sh = _mm_cvtsi32_si128(4 * (s % 2));
        const uint8_t *q = qs + 32 * (s / 2);
        c.lo = _mm_and_si128(_mm_srl_epi16(_mm_loadu_si128((const __m128i *)q), sh), m4);
        c.hi = _mm_and_si128(_mm_srl_epi16(_mm_loadu_si128((const __m128i *)(q + 16)), sh), m4);
        if (five) {
            const __m128i bit = _mm_set1_epi8((char)(1 << s)), b16 = _mm_set1_epi8(16);
            c.lo = _mm_mask_add_epi8(
                c.lo, _mm_test_epi8_mask(_mm_loadu_si128((const __m128i *)qh), bit), c.lo, b16);
            c.hi = _mm_mask_add_epi8(
                c.hi, _mm_test_epi8_mask(_mm_loadu_si128((const __m128i *)(qh + 16)), bit), c.hi, b16);
        }
        c.sc[0] = c.sc[1] = h[2 * s];
        c.mn[0] = c.mn[1] = h[16 + 2 * s];
        break;
    }
    case HR_DTYPE_Q6_K: {
        const block_q6_K *b = (const block_q6_K *)(const void *)row + j / 8;
        const int half = s / 4, quarter = s % 4;
        const uint8_t *ql = b->ql + 64 * half + 32 * (quarter & 1);
        const uint8_t *qh = b->qh + 32 * half;
        const __m128i shl = _mm_cvtsi32_si128(4 * (quarter >> 1));
        const __m128i shh = _mm_cvtsi32_si128(2 * quarter);
        const __m128i m2 = _mm_set1_epi8(3), b32 = _mm_set1_epi8(32);
        __m128i lo = _mm_and_si128(_mm_srl_epi16(_mm_loadu_si128((const __m128i *)ql), shl), m4);
        __m128i hi = _mm_and_si128(_mm_srl_epi16(_mm_loadu_si128((const __m128i *)(ql + 16)), shl), m4);
        const __m128i hl = _mm_and_si128(_mm_srl_epi16(_mm_loadu_si128((const __m128i *)qh), shh), m2);
        const __m128i hh =
            _mm_and_si128(_mm_srl_epi16(_mm_loadu_si128((const __m128i *)(qh + 16)), shh), m2);
        c.lo = _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hl, 4)), b32);
        c.hi = _mm_sub_epi8(_mm_or_si128(hi, _mm_slli_epi16(hh, 4)), b32);
        c.sc[0] = h[2 * s], c.sc[1] = h[2 * s + 1];
        break;
    }
    default:
        HR_ASSERT(0 && "codes32: not a quantized weight dtype");
    }
    return c;
}

/* Formats whose weights carry a min (w = sc * code + mn). */
AI bool has_min(hr_dtype dt) {
    return dt == HR_DTYPE_Q4_1 || dt == HR_DTYPE_Q5_1 || dt == HR_DTYPE_Q2_K || dt == HR_DTYPE_Q4_K ||
           dt == HR_DTYPE_Q5_K;
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

AI void gemv_exact(hr_dtype dt, const cpu_mm_args *a, const cpu_mat *m, int64_t r0, int64_t r1,
                   float *y, int64_t ldy) {
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

/* ====================================================================== */
/* FAST: activation quantization                                          */
/* ====================================================================== */

/* The reference quantizer's arithmetic (matmul.c) in 16 lanes: max |x| is
 * exact in any order, 127 / amax and x * id are the same single roundings,
 * and vcvtps2dq rounds to nearest even like rintf. */
static void quantize(const float *x, int64_t K, int64_t k0, int64_t k1,
                     void *const out[CPU_XQ_LAYOUT_COUNT], float *xh) {
    HR_ASSERT(k0 % CPU_XQ_PAD == 0 && k1 % CPU_XQ_PAD == 0 && k1 <= cpu_xq_kp(K));
    int pos32[CPU_XQ_LAYOUT_COUNT][16], pos16[CPU_XQ_LAYOUT_COUNT][16];
    for (int l = 0; l < CPU_XQ_LAYOUT_COUNT; l++) {
        for (int lane = 0; lane < 16; lane++) {
            pos32[l][lane] = pos16[l][lane] = lane;
        }
        for (int lane = 0; lane < 16; lane++) {
            if (l == CPU_XQ_QUAD)
                pos32[l][cpu_xq_lane((cpu_xq_layout)l, lane)] = lane;
            if (l == CPU_XQ_NATURAL || l == CPU_XQ_K4)
                pos16[l][cpu_xq_lane((cpu_xq_layout)l, lane)] = lane;
        }
    }
    static const int k4_slot[4] = {0, 2, 1, 3};
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int64_t ib = k0 / 32; ib < k1 / 32; ib++) {
        __m512i q0 = _mm512_setzero_si512(), q1 = q0;
        float dv = 0.0f;
        if (ib * 32 < K) {
            const __m512 a = _mm512_loadu_ps(x + 32 * ib), b = _mm512_loadu_ps(x + 32 * ib + 16);
            const float amax =
                _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, a), _mm512_andnot_ps(sign, b)));
            const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
            q0 = _mm512_cvtps_epi32(_mm512_mul_ps(a, id));
            q1 = _mm512_cvtps_epi32(_mm512_mul_ps(b, id));
            dv = amax / 127.0f;
            if (xh != NULL) {
                const __m512 vd = _mm512_set1_ps(dv);
                _mm512_storeu_ps(xh + 32 * ib, _mm512_mul_ps(vd, _mm512_cvtepi32_ps(q0)));
                _mm512_storeu_ps(xh + 32 * ib + 16, _mm512_mul_ps(vd, _mm512_cvtepi32_ps(q1)));
            }
        }
        const int32_t s_lo = _mm512_reduce_add_epi32(q0), s_hi = _mm512_reduce_add_epi32(q1);
        const __m128i c0 = _mm512_cvtepi32_epi8(q0), c1 = _mm512_cvtepi32_epi8(q1);
        for (int l = 0; l < CPU_XQ_LAYOUT_COUNT; l++) {
            if (out[l] == NULL)
                continue;
            int8_t *codes = out[l];
            switch (l) {
            case CPU_XQ_NATURAL:
            case CPU_XQ_PLAIN:
                _mm_storeu_si128((__m128i *)(codes + 32 * ib), c0);
                _mm_storeu_si128((__m128i *)(codes + 32 * ib + 16), c1);
                break;
            case CPU_XQ_QUAD: {
                int8_t *q = codes + 128 * (ib / 4) + 16 * (ib % 4);
                _mm_storeu_si128((__m128i *)q, c0);
                _mm_storeu_si128((__m128i *)(q + 64), c1);
                break;
            }
            case CPU_XQ_K4: {
                int8_t *q = codes + 128 * (ib / 4) + 32 * k4_slot[ib % 4];
                _mm_storeu_si128((__m128i *)q, c0);
                _mm_storeu_si128((__m128i *)(q + 16), c1);
                break;
            }
            case CPU_XQ_T32: {
                /* dword t of the block goes to lane ib % 16 of vector t */
                const __m128i f = _mm_set1_epi8((char)0x80);
                uint32_t w[8];
                _mm_storeu_si128((__m128i *)w, _mm_xor_si128(c0, f));
                _mm_storeu_si128((__m128i *)(w + 4), _mm_xor_si128(c1, f));
                int8_t *q = codes + 512 * (ib / 16) + 4 * (ib % 16);
                for (int t = 0; t < 8; t++)
                    memcpy(q + 64 * t, &w[t], 4);
                break;
            }
            case CPU_XQ_T16: {
                const __m128i f = _mm_set1_epi8((char)0x80);
                uint32_t w[8];
                _mm_storeu_si128((__m128i *)w, _mm_xor_si128(c0, f));
                _mm_storeu_si128((__m128i *)(w + 4), _mm_xor_si128(c1, f));
                for (int h = 0; h < 2; h++) {
                    const int64_t ih = 2 * ib + h;
                    int8_t *q = codes + 256 * (ih / 16) + 4 * (ih % 16);
                    for (int t = 0; t < 4; t++)
                        memcpy(q + 64 * t, &w[4 * h + t], 4);
                }
                break;
            }
            default:
                break;
            }
            float *d = (float *)(void *)cpu_xq_d(codes, K);
            int32_t *s32 = (int32_t *)(void *)cpu_xq_s32(codes, K);
            float *d16 = (float *)(void *)cpu_xq_d16(codes, K);
            int32_t *s16 = (int32_t *)(void *)cpu_xq_s16(codes, K);
            const int64_t at32 = ib - ib % 16 + pos32[l][ib % 16];
            d[at32] = dv;
            s32[at32] = s_lo + s_hi;
            const int64_t ih = 2 * ib;
            d16[ih - ih % 16 + pos16[l][ih % 16]] = dv;
            s16[ih - ih % 16 + pos16[l][ih % 16]] = s_lo;
            d16[ih + 1 - (ih + 1) % 16 + pos16[l][(ih + 1) % 16]] = dv;
            s16[ih + 1 - (ih + 1) % 16 + pos16[l][(ih + 1) % 16]] = s_hi;
        }
    }
}

/* ====================================================================== */
/* FAST decode: integer dot products                                      */
/* ====================================================================== */
/*
 * Weights are unpacked to unsigned 8-bit codes and multiplied with the signed
 * activation codes by vpdpbusd (4 products per 32-bit lane). Four 512-bit
 * code registers cover 16 blocks (legacy: a block per 128-bit lane, low and
 * high nibbles in two registers; K-quants: a 16-element half block per 128-bit
 * lane); after the dot products a 4x4 transpose-add (reduce4) leaves one
 * 32-bit sum per block in one register, lane 4L+v holding register v's lane L.
 * Then, per 16 blocks and per activation row, one subtract (the codes'
 * offset times the activation block sums), one convert and two or three
 * f32 operations apply the weight scale, the activation scale and the min.
 * The activation scales and sums arrive already in that lane order (the
 * xq layouts, matmul.h); the weight scales are put in it by a gather (legacy:
 * 16 f16 at a fixed stride) or a permute (K-quants: khdr()).
 *
 * Per 16 blocks of Q4_0 and one activation row this is ~50 vector ops for
 * 288 bytes, which keeps up with memory on one Zen 4 core (ggml's AVX2
 * kernel scales every block separately: ~8 ops per 18 bytes).
 */


/* sums of the 4 dwords of each 128-bit lane of a_v -> lane 4L+v */
AI __m512i reduce4(__m512i a0, __m512i a1, __m512i a2, __m512i a3) {
    const __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(a0, a1), _mm512_unpackhi_epi32(a0, a1));
    const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(a2, a3), _mm512_unpackhi_epi32(a2, a3));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
}

AI __m512i ins4(__m128i a, __m128i b, __m128i c, __m128i d) {
    __m512i z = _mm512_castsi128_si512(a);
    z = _mm512_inserti32x4(z, b, 1);
    z = _mm512_inserti32x4(z, c, 2);
    return _mm512_inserti32x4(z, d, 3);
}

AI __m128i ld128_or0(const uint8_t *p, bool valid) {
    return valid ? _mm_loadu_si128((const __m128i *)p) : _mm_setzero_si128();
}

typedef struct {
    int bs;      /* block bytes */
    int qs;      /* offset of the 16 nibble bytes (or 32 code bytes) */
    int qh;      /* offset of the 32 fifth bits, -1 if none */
    int off_sh;  /* log2 of the code offset (8, 16, 128), -1 for none */
    bool min;    /* f16 min after the f16 scale */
} leg_info;

AI leg_info leg(hr_dtype dt) {
    switch (dt) {
    case HR_DTYPE_Q8_0: return (leg_info){34, 2, -1, 7, false};
    case HR_DTYPE_Q4_0: return (leg_info){18, 2, -1, 3, false};
    case HR_DTYPE_Q4_1: return (leg_info){20, 4, -1, -1, true};
    case HR_DTYPE_Q5_0: return (leg_info){22, 6, 2, 4, false};
    default: return (leg_info){24, 8, 4, -1, true}; /* Q5_1 */
    }
}

/* The 16 nibble bytes of four consecutive 4-bit blocks, one block per 128-bit
 * lane, from two overlapping 64-byte loads and one dword permute (cheaper
 * than four 16-byte loads and three inserts): for every legacy 4-bit type the
 * blocks' nibbles start at dword-aligned offsets of one of the two loads. */
AI __m512i nib4(hr_dtype dt, const uint8_t *p) {
    /* a, c: offsets of the loads; lane L takes dwords ia[L].. of load a (< 16)
     * or of load c (16 + dword) */
    int a, c;
    __m512i idx;
    switch (dt) {
    case HR_DTYPE_Q4_0: /* nibbles at 2, 20, 38, 56 */
        a = 2, c = 8;
        idx = _mm512_setr_epi32(0, 1, 2, 3, 19, 20, 21, 22, 9, 10, 11, 12, 28, 29, 30, 31);
        break;
    case HR_DTYPE_Q4_1: /* 4, 24, 44, 64 */
        a = 4, c = 16;
        idx = _mm512_setr_epi32(0, 1, 2, 3, 5, 6, 7, 8, 10, 11, 12, 13, 28, 29, 30, 31);
        break;
    case HR_DTYPE_Q5_0: /* 6, 28, 50, 72 */
        a = 6, c = 24;
        idx = _mm512_setr_epi32(0, 1, 2, 3, 17, 18, 19, 20, 11, 12, 13, 14, 28, 29, 30, 31);
        break;
    default: /* Q5_1: 8, 32, 56, 80 */
        a = 8, c = 32;
        idx = _mm512_setr_epi32(0, 1, 2, 3, 6, 7, 8, 9, 12, 13, 14, 15, 28, 29, 30, 31);
        break;
    }
    return _mm512_permutex2var_epi32(_mm512_loadu_si512(p + a), idx, _mm512_loadu_si512(p + c));
}

/* Unsigned codes of blocks p[0..nv) (nv <= 4) as the QUAD layout expects. */
AI void leg_quad(hr_dtype dt, const uint8_t *p, int nv, __m512i *lo, __m512i *hi) {
    const leg_info li = leg(dt);
    if (dt == HR_DTYPE_Q8_0) {
        const __m512i f = _mm512_set1_epi8((char)0x80); /* signed -> unsigned: +128 */
        *lo = _mm512_xor_si512(f, ins4(ld128_or0(p + li.qs, nv > 0), ld128_or0(p + li.bs + li.qs, nv > 1),
                                       ld128_or0(p + 2 * li.bs + li.qs, nv > 2),
                                       ld128_or0(p + 3 * li.bs + li.qs, nv > 3)));
        *hi = _mm512_xor_si512(
            f, ins4(ld128_or0(p + li.qs + 16, nv > 0), ld128_or0(p + li.bs + li.qs + 16, nv > 1),
                    ld128_or0(p + 2 * li.bs + li.qs + 16, nv > 2),
                    ld128_or0(p + 3 * li.bs + li.qs + 16, nv > 3)));
        if (nv < 4) { /* keep missing blocks' codes zero */
            const __mmask64 keep = nv >= 4 ? ~0ull : (1ull << (16 * nv)) - 1;
            *lo = _mm512_maskz_mov_epi8(keep, *lo);
            *hi = _mm512_maskz_mov_epi8(keep, *hi);
        }
        return;
    }
    const __m512i m4 = _mm512_set1_epi8(15);
    const __m512i z = nv == 4 ? nib4(dt, p)
                              : ins4(ld128_or0(p + li.qs, nv > 0), ld128_or0(p + li.bs + li.qs, nv > 1),
                                     ld128_or0(p + 2 * li.bs + li.qs, nv > 2),
                                     ld128_or0(p + 3 * li.bs + li.qs, nv > 3));
    *lo = _mm512_and_si512(z, m4);
    *hi = _mm512_and_si512(_mm512_srli_epi16(z, 4), m4);
    if (li.qh >= 0) {
        uint64_t mlo = 0, mhi = 0;
        for (int L = 0; L < 4; L++) {
            if (L >= nv)
                break;
            uint32_t h;
            memcpy(&h, p + L * li.bs + li.qh, 4);
            mlo |= (uint64_t)(h & 0xffffu) << (16 * L);
            mhi |= (uint64_t)(h >> 16) << (16 * L);
        }
        const __m512i b16 = _mm512_set1_epi8(16);
        *lo = _mm512_mask_add_epi8(*lo, mlo, *lo, b16);
        *hi = _mm512_mask_add_epi8(*hi, mhi, *hi, b16);
    }
}

/* f16 scale (and min) of blocks p[0..nb) (nb <= 16) in reduced lane order
 * (lane 4L+v: block 4v+L).
 * Scalar loads packed four to a 64-bit word: a vpgatherdd of the 16 scales
 * took ~40% of the Q4_0 kernel's time on Zen 4; these run on the otherwise
 * idle integer ports. */
AI uint64_t leg_pack4(const uint8_t *p, int bs, int nb, int L, int shift) {
    uint64_t r = 0;
#pragma GCC unroll 4
    for (int v = 0; v < 4; v++) {
        const int j = 4 * v + L; /* lane 4L+v */
        if (j < nb) {
            uint32_t hm;
            memcpy(&hm, p + (size_t)j * (size_t)bs, 4);
            r |= (uint64_t)((hm >> shift) & 0xffffu) << (16 * v);
        }
    }
    return r;
}

/* Q4_0/Q4_1, a full group: the 16 f16 scales (mins: word 1 of each block)
 * picked out of four 64-byte loads by two word permutes and a blend; each
 * load holds the headers of four blocks (18 or 20 bytes apart). */
/* Word permutes for leg_scales16: output word 4L+v <- word bw*L + w of load v
 * (the second source of a permute is indexed from 32). [Q4_1][w][v >= 2] */
#define P01(bw, w)                                                                             \
    {(w), 32 + (w), 0, 0, (bw) + (w), 32 + (bw) + (w), 0, 0, 2 * (bw) + (w), 32 + 2 * (bw) + (w), \
     0, 0, 3 * (bw) + (w), 32 + 3 * (bw) + (w), 0, 0}
#define P23(bw, w)                                                                             \
    {0, 0, (w), 32 + (w), 0, 0, (bw) + (w), 32 + (bw) + (w), 0, 0, 2 * (bw) + (w),               \
     32 + 2 * (bw) + (w), 0, 0, 3 * (bw) + (w), 32 + 3 * (bw) + (w)}
static const short scale_perm[2][2][2][32] = {
    {{P01(9, 0), P23(9, 0)}, {P01(9, 1), P23(9, 1)}},
    {{P01(10, 0), P23(10, 0)}, {P01(10, 1), P23(10, 1)}},
};
#undef P01
#undef P23

AI __m512 leg_scales16(hr_dtype dt, const uint8_t *p, int word) {
    const int q41 = dt == HR_DTYPE_Q4_1, bw = q41 ? 10 : 9; /* words per block */
    const __m512i a0 = _mm512_loadu_si512(p), a1 = _mm512_loadu_si512(p + 8 * bw);
    const __m512i a2 = _mm512_loadu_si512(p + 16 * bw), a3 = _mm512_loadu_si512(p + 24 * bw);
    const __m512i t01 = _mm512_permutex2var_epi16(a0, _mm512_loadu_si512(scale_perm[q41][word][0]), a1);
    const __m512i t23 = _mm512_permutex2var_epi16(a2, _mm512_loadu_si512(scale_perm[q41][word][1]), a3);
    return _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_mask_mov_epi16(t01, 0xcccccccc, t23)));
}

AI void leg_scales(const uint8_t *p, int bs, int nb, bool min, __m512 *d, __m512 *m) {
    *d = _mm512_cvtph_ps(_mm256_set_epi64x(
        (long long)leg_pack4(p, bs, nb, 3, 0), (long long)leg_pack4(p, bs, nb, 2, 0),
        (long long)leg_pack4(p, bs, nb, 1, 0), (long long)leg_pack4(p, bs, nb, 0, 0)));
    if (min)
        *m = _mm512_cvtph_ps(_mm256_set_epi64x(
            (long long)leg_pack4(p, bs, nb, 3, 16), (long long)leg_pack4(p, bs, nb, 2, 16),
            (long long)leg_pack4(p, bs, nb, 1, 16), (long long)leg_pack4(p, bs, nb, 0, 16)));
}

/* nw weight rows (wrb bytes apart) against nx activation rows:
 * y[b * ldy + i] = dot. Always called with nw = 1: decode must read the
 * weights as one sequential stream. Interleaving two rows (to share the
 * per-row overhead) ran 5% faster from L2 but dropped DRAM streaming from 24
 * to 10 GB/s on one Zen 4 core: the prefetcher lost the stream. */
AI void fast_leg_rows(hr_dtype dt, int nw, const uint8_t *w, size_t wrb, const cpu_mm_args *a,
                      int64_t b0, int nx, float *y, int64_t ldy) {
    const leg_info li = leg(dt);
    const int64_t nb = a->K / 32;
    __m512 acc[2][4];
#pragma GCC unroll 2
    for (int i = 0; i < nw; i++)
#pragma GCC unroll 4
        for (int b = 0; b < nx; b++)
            acc[i][b] = _mm512_setzero_ps();
    const uint8_t *xq = (const uint8_t *)a->xq[CPU_XQ_QUAD] + (size_t)b0 * a->xq_row_bytes;
    for (int64_t g = 0; g * 16 < nb; g++) {
        const int nvb = nb - 16 * g >= 16 ? 16 : (int)(nb - 16 * g);
#pragma GCC unroll 2
        for (int i = 0; i < nw; i++) {
            const uint8_t *p = w + (size_t)i * wrb + (size_t)(16 * g) * (size_t)li.bs;
            __m512i lo[4], hi[4];
            if (nvb == 16) {
#pragma GCC unroll 4
                for (int v = 0; v < 4; v++)
                    leg_quad(dt, p + (size_t)(4 * v) * (size_t)li.bs, 4, &lo[v], &hi[v]);
            } else {
                for (int v = 0; v < 4; v++) {
                    int nv = nvb - 4 * v;
                    nv = nv < 0 ? 0 : nv > 4 ? 4 : nv;
                    leg_quad(dt, p + (size_t)(4 * v) * (size_t)li.bs, nv, &lo[v], &hi[v]);
                }
            }
            __m512 dw, mw = _mm512_setzero_ps();
            if (nvb == 16 && (dt == HR_DTYPE_Q4_0 || dt == HR_DTYPE_Q4_1)) {
                dw = leg_scales16(dt, p, 0);
                if (li.min)
                    mw = leg_scales16(dt, p, 1);
            } else if (nvb == 16) {
                leg_scales(p, li.bs, 16, li.min, &dw, &mw);
            } else {
                leg_scales(p, li.bs, nvb, li.min, &dw, &mw);
            }
#pragma GCC unroll 4
            for (int b = 0; b < nx; b++) {
                const uint8_t *xr = xq + (size_t)b * a->xq_row_bytes;
                const int8_t *xc = (const int8_t *)xr + 512 * g;
                __m512i acc4[4];
#pragma GCC unroll 4
                for (int v = 0; v < 4; v++) {
                    __m512i t = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[v],
                                                    _mm512_loadu_si512(xc + 128 * v));
                    acc4[v] = _mm512_dpbusd_epi32(t, hi[v], _mm512_loadu_si512(xc + 128 * v + 64));
                }
                __m512i u = reduce4(acc4[0], acc4[1], acc4[2], acc4[3]);
                const __m512 dx = _mm512_loadu_ps(cpu_xq_d(xr, a->K) + 16 * g);
                const __m512i sx = _mm512_loadu_si512(cpu_xq_s32(xr, a->K) + 16 * g);
                if (li.off_sh >= 0)
                    u = _mm512_sub_epi32(u, _mm512_sll_epi32(sx, _mm_cvtsi32_si128(li.off_sh)));
                acc[i][b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(u), _mm512_mul_ps(dw, dx), acc[i][b]);
                if (li.min)
                    acc[i][b] = _mm512_fmadd_ps(mw, _mm512_mul_ps(dx, _mm512_cvtepi32_ps(sx)), acc[i][b]);
            }
        }
    }
#pragma GCC unroll 2
    for (int i = 0; i < nw; i++)
#pragma GCC unroll 4
        for (int b = 0; b < nx; b++)
            y[b * ldy + i] = _mm512_reduce_add_ps(acc[i][b]);
}

AI void gemv_fast_leg(hr_dtype dt, const cpu_mm_args *a, const cpu_mat *m, int64_t r0, int64_t r1,
                      float *y, int64_t ldy) {
    const size_t wrb = cpu_mm_row_bytes(dt, a->K);
    for (int64_t r = r0; r < r1;) {
        const uint8_t *w = (const uint8_t *)m->data + (size_t)r * wrb;
        for (int64_t b = 0; b < a->B; b += 4) {
            float *yb = y + b * ldy + (r - r0);
            switch (a->B - b >= 4 ? 4 : (int)(a->B - b)) {
            case 1: fast_leg_rows(dt, 1, w, wrb, a, b, 1, yb, ldy); break;
            case 2: fast_leg_rows(dt, 1, w, wrb, a, b, 2, yb, ldy); break;
            case 3: fast_leg_rows(dt, 1, w, wrb, a, b, 3, yb, ldy); break;
            default: fast_leg_rows(dt, 1, w, wrb, a, b, 4, yb, ldy); break;
            }
        }
        r++;
    }
}

/* ---- K-quants: a super-block gives four code registers, one half block
 * (16 elements) per 128-bit lane. */


AI void kq_codes(hr_dtype dt, const uint8_t *blk, __m512i c[4]) {
    const __m512i m4 = _mm512_set1_epi8(15);
    switch (dt) {
    case HR_DTYPE_Q4_K:
    case HR_DTYPE_Q5_K: {
        const bool five = dt == HR_DTYPE_Q5_K;
        const uint8_t *qs = blk + 4 + QUANT_K_SCALE_BYTES + (five ? 32 : 0);
        for (int t = 0; t < 2; t++) {
            const __m512i z = _mm512_loadu_si512(qs + 64 * t);
            c[2 * t] = _mm512_and_si512(z, m4);
            c[2 * t + 1] = _mm512_and_si512(_mm512_srli_epi16(z, 4), m4);
        }
        if (five) {
            /* fifth bit of sub-block j: bit j of qh[0..32); register c[i] holds
             * sub-blocks {0,2}, {1,3}, {4,6}, {5,7}: shift bits j and j+2 down
             * to bit 0 of each byte, then up to bit 4 */
            const __m512i qh = _mm512_broadcast_i64x4(
                _mm256_loadu_si256((const __m256i *)(blk + 4 + QUANT_K_SCALE_BYTES)));
            const __m512i b16 = _mm512_set1_epi8(16);
            static const uint8_t sb_lo[4] = {0, 1, 4, 5};
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                const __m512i sh = _mm512_inserti64x4(_mm512_set1_epi16((short)sb_lo[i]),
                                                      _mm256_set1_epi16((short)(sb_lo[i] + 2)), 1);
                c[i] = _mm512_or_si512(
                    c[i], _mm512_and_si512(_mm512_slli_epi16(_mm512_srlv_epi16(qh, sh), 4), b16));
            }
        }
        break;
    }
    case HR_DTYPE_Q6_K: {
        const block_q6_K *b = (const block_q6_K *)(const void *)blk;
        const __m512i m30 = _mm512_set1_epi8(0x30);
        const __m512i shl = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
        const __m512i shr = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
        for (int h = 0; h < 2; h++) {
            const __m512i zl = _mm512_loadu_si512(b->ql + 64 * h);
            const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qh + 32 * h)));
            c[2 * h] = _mm512_or_si512(_mm512_and_si512(zl, m4),
                                       _mm512_and_si512(_mm512_sllv_epi16(qh, shl), m30));
            c[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(zl, 4), m4),
                                           _mm512_and_si512(_mm512_srlv_epi16(qh, shr), m30));
        }
        break;
    }
    case HR_DTYPE_Q2_K:
    case HR_DTYPE_Q3_K: {
        const bool three = dt == HR_DTYPE_Q3_K;
        const uint8_t *qs = three ? ((const block_q3_K *)(const void *)blk)->qs
                                  : ((const block_q2_K *)(const void *)blk)->qs;
        const __m512i m2 = _mm512_set1_epi8(3);
        const __m512i sh0 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
        const __m512i sh1 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
        __m512i hm = _mm512_setzero_si512();
        if (three)
            hm = _mm512_broadcast_i64x4(
                _mm256_loadu_si256((const __m256i *)((const block_q3_K *)(const void *)blk)->hmask));
        for (int h = 0; h < 2; h++) {
            const __m512i z = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * h)));
            c[2 * h] = _mm512_and_si512(_mm512_srlv_epi16(z, sh0), m2);
            c[2 * h + 1] = _mm512_and_si512(_mm512_srlv_epi16(z, sh1), m2);
            if (three) {
                /* elements 128h + 32q + n: high bit is bit 4h + q of hmask[n] */
                const __m512i b4 = _mm512_set1_epi8(4);
                for (int i = 0; i < 2; i++) {
                    const int q = 2 * i;
                    const __m512i bits = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (4 * h + q))),
                                                            _mm256_set1_epi8((char)(1 << (4 * h + q + 1))), 1);
                    c[2 * h + i] = _mm512_mask_add_epi8(c[2 * h + i], _mm512_test_epi8_mask(hm, bits),
                                                        c[2 * h + i], b4);
                }
            }
        }
        break;
    }
    default:
        break;
    }
}

/* A K-quant super-block's per-half-block scales (d * sc) and negated mins
 * (-(dmin * mn)), already in the lane order of the reduced sums: byte
 * shuffles of the decoded 6/4-bit scales, then one conversion each. Same
 * products as khdr(), without its round trip through memory. */
static const int8_t shuf_nat[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};
/* K4: lane l holds half block cpu_xq_lane(CPU_XQ_K4, l), of sub-block half that */
static const int8_t shuf_k4[16] = {0, 1, 4, 5, 0, 1, 4, 5, 2, 3, 6, 7, 2, 3, 6, 7};

AI void kq_scales(hr_dtype dt, const uint8_t *blk, __m512 *sc, __m512 *mn) {
    *mn = _mm512_setzero_ps();
    const __m128i nat = _mm_loadu_si128((const __m128i *)shuf_nat);
    switch (dt) {
    case HR_DTYPE_Q2_K: {
        const block_q2_K *b = (const block_q2_K *)(const void *)blk;
        const __m128i v = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)b->scales), nat);
        const __m128i m4 = _mm_set1_epi8(15);
        *sc = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(v, m4))),
                            _mm512_set1_ps(f16s(b->d)));
        *mn = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(v, 4), m4))),
                            _mm512_set1_ps(-f16s(b->dmin)));
        break;
    }
    case HR_DTYPE_Q3_K: {
        const block_q3_K *b = (const block_q3_K *)(const void *)blk;
        const __m128i v = _mm_shuffle_epi8(q3_scales(b->scales), nat);
        *sc = _mm512_mul_ps(
            _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(v), _mm512_set1_epi32(32))),
            _mm512_set1_ps(f16s(b->d)));
        break;
    }
    case HR_DTYPE_Q4_K:
    case HR_DTYPE_Q5_K: {
        uint16_t hd, hm;
        memcpy(&hd, blk, 2);
        memcpy(&hm, blk + 2, 2);
        uint64_t s8, m8;
        k4_scales(blk + 4, &s8, &m8);
        const __m128i idx = _mm_loadu_si128((const __m128i *)shuf_k4);
        const __m128i vs = _mm_shuffle_epi8(_mm_cvtsi64_si128((long long)s8), idx);
        const __m128i vm = _mm_shuffle_epi8(_mm_cvtsi64_si128((long long)m8), idx);
        *sc = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(vs)), _mm512_set1_ps(f16s(hd)));
        *mn = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(vm)), _mm512_set1_ps(-f16s(hm)));
        break;
    }
    default: { /* Q6_K */
        const block_q6_K *b = (const block_q6_K *)(const void *)blk;
        const __m128i v = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)b->scales), nat);
        *sc = _mm512_mul_ps(cvt_i8(v), _mm512_set1_ps(f16s(b->d)));
        break;
    }
    }
}

AI void fast_kq_rows(hr_dtype dt, int nw, const uint8_t *w, size_t wrb, const cpu_mm_args *a,
                     int64_t b0, int nx, float *y, int64_t ldy) {
    const int64_t n_sb = a->K / QUANT_QK_K;
    const size_t bs = (size_t)hr_dtype_table[dt].block_bytes;
    const bool k4 = dt == HR_DTYPE_Q4_K || dt == HR_DTYPE_Q5_K;
    const cpu_xq_layout lay = k4 ? CPU_XQ_K4 : CPU_XQ_NATURAL;
    /* unsigned codes = signed code + offset: Q6_K 32, Q3_K 4 */
    const int off_sh = dt == HR_DTYPE_Q6_K ? 5 : dt == HR_DTYPE_Q3_K ? 2 : -1;
    const bool min = dt == HR_DTYPE_Q2_K || k4;
    __m512 acc[2][4];
#pragma GCC unroll 2
    for (int i = 0; i < nw; i++)
#pragma GCC unroll 4
        for (int b = 0; b < nx; b++)
            acc[i][b] = _mm512_setzero_ps();
    const uint8_t *xq = (const uint8_t *)a->xq[lay] + (size_t)b0 * a->xq_row_bytes;
    for (int64_t sb = 0; sb < n_sb; sb++) {
#pragma GCC unroll 2
        for (int i = 0; i < nw; i++) {
            const uint8_t *wi = w + (size_t)i * wrb;
            __m512 sc, mn;
            kq_scales(dt, wi + (size_t)sb * bs, &sc, &mn);
            __m512i c[4];
            kq_codes(dt, wi + (size_t)sb * bs, c);
#pragma GCC unroll 4
            for (int b = 0; b < nx; b++) {
                const uint8_t *xr = xq + (size_t)b * a->xq_row_bytes;
                const int8_t *xc = (const int8_t *)xr + 256 * sb;
                __m512i p[4];
#pragma GCC unroll 4
                for (int v = 0; v < 4; v++)
                    p[v] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c[v], _mm512_loadu_si512(xc + 64 * v));
                __m512i u = reduce4(p[0], p[1], p[2], p[3]);
                const __m512 dx = _mm512_loadu_ps(cpu_xq_d16(xr, a->K) + 16 * sb);
                const __m512i sx = _mm512_loadu_si512(cpu_xq_s16(xr, a->K) + 16 * sb);
                if (off_sh >= 0)
                    u = _mm512_sub_epi32(u, _mm512_sll_epi32(sx, _mm_cvtsi32_si128(off_sh)));
                acc[i][b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(u), _mm512_mul_ps(sc, dx), acc[i][b]);
                if (min)
                    acc[i][b] = _mm512_fmadd_ps(mn, _mm512_mul_ps(dx, _mm512_cvtepi32_ps(sx)), acc[i][b]);
            }
        }
    }
#pragma GCC unroll 2
    for (int i = 0; i < nw; i++)
#pragma GCC unroll 4
        for (int b = 0; b < nx; b++)
            y[b * ldy + i] = _mm512_reduce_add_ps(acc[i][b]);
}

AI void gemv_fast_kq(hr_dtype dt, const cpu_mm_args *a, const cpu_mat *m, int64_t r0, int64_t r1,
                     float *y, int64_t ldy) {
    const size_t wrb = cpu_mm_row_bytes(dt, a->K);
    for (int64_t r = r0; r < r1;) {
        const uint8_t *w = (const uint8_t *)m->data + (size_t)r * wrb;
        for (int64_t b = 0; b < a->B; b += 4) {
            float *yb = y + b * ldy + (r - r0);
            switch (a->B - b >= 4 ? 4 : (int)(a->B - b)) {
            case 1: fast_kq_rows(dt, 1, w, wrb, a, b, 1, yb, ldy); break;
            case 2: fast_kq_rows(dt, 1, w, wrb, a, b, 2, yb, ldy); break;
            case 3: fast_kq_rows(dt, 1, w, wrb, a, b, 3, yb, ldy); break;
            default: fast_kq_rows(dt, 1, w, wrb, a, b, 4, yb, ldy); break;
            }
        }
        r++;
    }
}

#define DEF_GEMV_FAST(name, fam, dt)                                                 \
    static void name(const cpu_mm_args *a, const cpu_mat *m, int64_t r0, int64_t r1, \
                     float *y, int64_t ldy, void *ts) {                              \
        (void)ts;                                                                    \
        fam(dt, a, m, r0, r1, y, ldy);                                               \
    }
DEF_GEMV_FAST(gemv_fast_q8_0, gemv_fast_leg, HR_DTYPE_Q8_0)
DEF_GEMV_FAST(gemv_fast_q4_0, gemv_fast_leg, HR_DTYPE_Q4_0)
DEF_GEMV_FAST(gemv_fast_q4_1, gemv_fast_leg, HR_DTYPE_Q4_1)
DEF_GEMV_FAST(gemv_fast_q5_0, gemv_fast_leg, HR_DTYPE_Q5_0)
DEF_GEMV_FAST(gemv_fast_q5_1, gemv_fast_leg, HR_DTYPE_Q5_1)
DEF_GEMV_FAST(gemv_fast_q2_K, gemv_fast_kq, HR_DTYPE_Q2_K)
DEF_GEMV_FAST(gemv_fast_q3_K, gemv_fast_kq, HR_DTYPE_Q3_K)
DEF_GEMV_FAST(gemv_fast_q4_K, gemv_fast_kq, HR_DTYPE_Q4_K)
DEF_GEMV_FAST(gemv_fast_q5_K, gemv_fast_kq, HR_DTYPE_Q5_K)
DEF_GEMV_FAST(gemv_fast_q6_K, gemv_fast_kq, HR_DTYPE_Q6_K)

/* ====================================================================== */
/* EXACT prefill: blocked f32 GEMM                                        */
/* ====================================================================== */
/*
 * A thread owns a tile of at most GEMM_NC weight rows. For each KC-slice of
 * K it converts the tile's rows to f32 once (to_f32, bit-exact) and packs
 * them as panels of 32 rows, [k][32] (256 KB: stays in L2); then for every
 * MR=12 activation rows it packs their KC-slice as [k][12] (12 KB, L1) and
 * runs the 12x32 register microkernel over each panel: 24 zmm accumulators,
 * per k two weight loads, 12 broadcasts from the packed activations, 24
 * FMAs. Partial sums of earlier KC-slices are read back from y and added.
 * Both packings transpose 16x16 blocks in registers.
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

/* y[i][0..nr) (+)= sum_k xp[k][i] * wp[k][0..nr) for i < mr. */
AI void ukernel(int mr, int64_t kp, const float *xp, const float *wp, float *y, int64_t ldy, int nr,
                bool first) {
    __m512 acc[GEMM_MR][2];
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++)
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kp; k++) {
        const __m512 w0 = _mm512_load_ps(wp + GEMM_NR * k), w1 = _mm512_load_ps(wp + GEMM_NR * k + 16);
#pragma GCC unroll 12
        for (int i = 0; i < mr; i++) {
            const __m512 a = _mm512_set1_ps(xp[GEMM_MR * k + i]);
            acc[i][0] = _mm512_fmadd_ps(a, w0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(a, w1, acc[i][1]);
        }
    }
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

static void ukernel_mr(int mr, int64_t kp, const float *xp, const float *wp, float *y, int64_t ldy,
                       int nr, bool first) {
    switch (mr) {
    case 1: ukernel(1, kp, xp, wp, y, ldy, nr, first); break;
    case 2: ukernel(2, kp, xp, wp, y, ldy, nr, first); break;
    case 3: ukernel(3, kp, xp, wp, y, ldy, nr, first); break;
    case 4: ukernel(4, kp, xp, wp, y, ldy, nr, first); break;
    case 5: ukernel(5, kp, xp, wp, y, ldy, nr, first); break;
    case 6: ukernel(6, kp, xp, wp, y, ldy, nr, first); break;
    case 7: ukernel(7, kp, xp, wp, y, ldy, nr, first); break;
    case 8: ukernel(8, kp, xp, wp, y, ldy, nr, first); break;
    case 9: ukernel(9, kp, xp, wp, y, ldy, nr, first); break;
    case 10: ukernel(10, kp, xp, wp, y, ldy, nr, first); break;
    case 11: ukernel(11, kp, xp, wp, y, ldy, nr, first); break;
    default: ukernel(12, kp, xp, wp, y, ldy, nr, first); break;
    }
}

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

static size_t gemm_tscratch(void) {
    return (size_t)GEMM_NC * GEMM_KC * 4 /* panels */ + (size_t)GEMM_NR * GEMM_KC * 4 /* rows */ + 64;
}

static void gemm_exact(const cpu_mm_args *a, const cpu_mat *m, int64_t r0, int64_t r1, float *y,
                       int64_t ldy, void *ts) {
    const int64_t K = a->K, n_rows = r1 - r0;
    HR_ASSERT(n_rows <= GEMM_NC);
    const hr_dtype dt = m->dtype;
    const size_t wrb = cpu_mm_row_bytes(dt, K);
    float *wp = (float *)(((uintptr_t)ts + 63) & ~(uintptr_t)63);
    float *rows = wp + GEMM_NC * GEMM_KC;
    const size_t xpanel = (size_t)GEMM_MR * (size_t)cpu_mm_kpad(K);
    const int64_t n_panels = (n_rows + GEMM_NR - 1) / GEMM_NR;
    for (int64_t kc = 0; kc < K; kc += GEMM_KC) {
        const int64_t kl = K - kc < GEMM_KC ? K - kc : GEMM_KC;
        const int64_t kp = (kl + 15) / 16 * 16;
        /* convert and pack this K-slice of the tile */
        for (int64_t p = 0; p < n_panels; p++) {
            for (int i = 0; i < GEMM_NR; i++) {
                const int64_t r = r0 + GEMM_NR * p + i;
                float *dst = rows + (int64_t)i * GEMM_KC;
                if (r < r1) {
                    to_f32(dt, (const uint8_t *)m->data + (size_t)r * wrb, kc, kl, dst);
                    memset(dst + kl, 0, sizeof(float) * (size_t)(kp - kl));
                } else {
                    memset(dst, 0, sizeof(float) * (size_t)kp);
                }
            }
            pack_w(rows, GEMM_KC, kp, wp + p * GEMM_NR * GEMM_KC);
        }
        for (int64_t b = 0; b < a->B; b += GEMM_MR) {
            const int mr = a->B - b >= GEMM_MR ? GEMM_MR : (int)(a->B - b);
            const float *xp = a->xpack + (size_t)(b / GEMM_MR) * xpanel + (size_t)kc * GEMM_MR;
            for (int64_t p = 0; p < n_panels; p++) {
                const int nr = n_rows - GEMM_NR * p >= GEMM_NR ? GEMM_NR : (int)(n_rows - GEMM_NR * p);
                ukernel_mr(mr, kp, xp, wp + p * GEMM_NR * GEMM_KC, y + b * ldy + GEMM_NR * p, ldy, nr,
                           kc == 0);
            }
        }
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
    size_t a = gemm_tscratch(), b = gemm_fast_tscratch(max_K);
    return a > b ? a : b;
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
            [HR_DTYPE_Q6_K] = gemv_exact_q6_K,
        },
    .to_f32 =
        {
            [HR_DTYPE_F32] = to_f32_f32,   [HR_DTYPE_F16] = to_f32_f16,
            [HR_DTYPE_BF16] = to_f32_bf16, [HR_DTYPE_Q8_0] = to_f32_q8_0,
            [HR_DTYPE_Q4_0] = to_f32_q4_0, [HR_DTYPE_Q4_1] = to_f32_q4_1,
            [HR_DTYPE_Q5_0] = to_f32_q5_0, [HR_DTYPE_Q5_1] = to_f32_q5_1,
            [HR_DTYPE_Q2_K] = to_f32_q2_K, [HR_DTYPE_Q3_K] = to_f32_q3_K,
            [HR_DTYPE_Q4_K] = to_f32_q4_K, [HR_DTYPE_Q5_K] = to_f32_q5_K,
            [HR_DTYPE_Q6_K] = to_f32_q6_K,
        },
    .gemv_fast =
        {
            [HR_DTYPE_Q8_0] = gemv_fast_q8_0, [HR_DTYPE_Q4_0] = gemv_fast_q4_0,
            [HR_DTYPE_Q4_1] = gemv_fast_q4_1, [HR_DTYPE_Q5_0] = gemv_fast_q5_0,
            [HR_DTYPE_Q5_1] = gemv_fast_q5_1, [HR_DTYPE_Q2_K] = gemv_fast_q2_K,
            [HR_DTYPE_Q3_K] = gemv_fast_q3_K, [HR_DTYPE_Q4_K] = gemv_fast_q4_K,
            [HR_DTYPE_Q5_K] = gemv_fast_q5_K, [HR_DTYPE_Q6_K] = gemv_fast_q6_K,
        },
    .gemv_fast_layout =
        {
            [HR_DTYPE_Q8_0] = CPU_XQ_QUAD, [HR_DTYPE_Q4_0] = CPU_XQ_QUAD,
            [HR_DTYPE_Q4_1] = CPU_XQ_QUAD, [HR_DTYPE_Q5_0] = CPU_XQ_QUAD,
            [HR_DTYPE_Q5_1] = CPU_XQ_QUAD, [HR_DTYPE_Q2_K] = CPU_XQ_NATURAL,
            [HR_DTYPE_Q3_K] = CPU_XQ_NATURAL, [HR_DTYPE_Q4_K] = CPU_XQ_K4,
            [HR_DTYPE_Q5_K] = CPU_XQ_K4, [HR_DTYPE_Q6_K] = CPU_XQ_NATURAL,
        },
    .quantize = quantize,
    .gemm_exact = gemm_exact,
    .gemm_fast =
        {
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
     * pay a 16-block reduction per pair, the integer GEMM does not */
    .gemm_min_B_exact = 256,
    .gemm_min_B_fast = 32,
    .gemm_max_rows = GEMM_NC,
    .gemm_row_align = GEMM_NR,
    .gemm_mr = GEMM_MR,
    .gemm_pack_x = pack_x,
    .tscratch_bytes = tscratch_bytes,
};
