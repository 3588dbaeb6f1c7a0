/*
 * matmul_avx2.c — the AVX2 level (AVX2 + FMA + F16C: Haswell, Zen 1 and later),
 * for x86-64 CPUs without AVX-512. Compiled with those flags; only reached
 * after cpu_features.c has confirmed them.
 *
 * Same structure as matmul_avx512.c with 8-lane vectors and 16 registers:
 * ld32() turns 32 weights of any dtype into four ymm of f32 bit-identical to
 * quant_dequantize_row; decode tiles are up to 4 weight rows x 2 activation
 * rows (or 2 x 4), one accumulator per pair; FAST decode uses vpmaddubsw (u8 x
 * s8 pairs to s16) and vpmaddwd (to s32) on 32-element blocks; prefill runs a
 * 6x16 f32 microkernel on packed panels. There is no integer prefill kernel
 * here: FAST prefill runs the f32 one on x^ (matmul.c's generic path), which
 * keeps the FAST contract at f32 speed.
 * Measured on Zen 4 with HEADROOM_CPU=avx2 (one thread, L2-resident): F16
 * decode 26 GB/s, FAST Q8_0 23, Q4_0 10, Q4_K 6 GB/s; f32 GEMM 81 GFLOP/s.
 * The 4-bit FAST kernels are the ones to improve next (llama.cpp's AVX2
 * Q4_0 kernel needs about half the operations per block).
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
/* 32 weights -> four ymm of f32                                          */
/* ====================================================================== */

/* 16 signed bytes -> two ymm of f32 (bytes 0..7, 8..15). */
AI void cvt_i8x16(__m128i v, __m256 *a, __m256 *b) {
    *a = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
    *b = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(v, v)));
}

/* 8 unsigned bytes (low half of v) -> 8 floats. */
AI __m256 cvt_u8x8(__m128i v) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
}

/* K-quant super-block sb of a row: per 16-element sixteenth l, the f32 scale
 * h[l] and the negated min h[16 + l] (k_scales). The products come before
 * the stores: interleaved, the K-quant decode lost 2-3%. */
AI void khdr(hr_dtype dt, const uint8_t *row, int64_t sb, float h[32]) {
    const kscales k = k_scales(dt, row, sb);
    const __m256 vd = _mm256_set1_ps(k.d), vm = _mm256_set1_ps(k.dmin);
    __m256 d0, d1;
    if (k.sgn) {
        cvt_i8x16(k.sc, &d0, &d1);
    } else {
        d0 = cvt_u8x8(k.sc);
        d1 = cvt_u8x8(_mm_unpackhi_epi64(k.sc, k.sc));
    }
    d0 = _mm256_mul_ps(d0, vd);
    d1 = _mm256_mul_ps(d1, vd);
    const __m256 m0 = _mm256_mul_ps(cvt_u8x8(k.mn), vm);
    const __m256 m1 = _mm256_mul_ps(cvt_u8x8(_mm_unpackhi_epi64(k.mn, k.mn)), vm);
    const __m256 z = _mm256_setzero_ps();
    _mm256_storeu_ps(h, d0);
    _mm256_storeu_ps(h + 8, d1);
    _mm256_storeu_ps(h + 16, _mm256_sub_ps(z, m0));
    _mm256_storeu_ps(h + 24, _mm256_sub_ps(z, m1));
}

/* Elements [32j, 32j + 32) of a weight row of dtype dt as f32, bit-identical
 * to the reference; h as for get_codes32. */
AI void ld32(hr_dtype dt, const uint8_t *row, int64_t j, const float *h, __m256 w[4]) {
    switch (dt) {
    case HR_DTYPE_F32: {
        const float *p = (const float *)(const void *)row + 32 * j;
        for (int i = 0; i < 4; i++)
            w[i] = _mm256_loadu_ps(p + 8 * i);
        return;
    }
    case HR_DTYPE_F16: {
        const uint16_t *p = (const uint16_t *)(const void *)row + 32 * j;
        for (int i = 0; i < 4; i++)
            w[i] = _mm256_cvtph_ps(ldu128(p + 8 * i));
        return;
    }
    case HR_DTYPE_BF16: {
        const uint16_t *p = (const uint16_t *)(const void *)row + 32 * j;
        for (int i = 0; i < 4; i++)
            w[i] = _mm256_castsi256_ps(
                _mm256_slli_epi32(_mm256_cvtepu16_epi32(ldu128(p + 8 * i)), 16));
        return;
    }
    case HR_DTYPE_NF4:
    case HR_DTYPE_FP4: {
        /* codes index the f32 table: vpermps within each half of 8 values,
         * the code's bit 3 (moved to the sign bit) picks the half */
        const float *t = dt == HR_DTYPE_NF4 ? quant_nf4_values : quant_fp4_values;
        const __m256 t0 = _mm256_loadu_ps(t), t1 = _mm256_loadu_ps(t + 8);
        const block_nf4 *b = (const block_nf4 *)(const void *)row + j / 2;
        const __m256i q = _mm256_loadu_si256((const __m256i *)b->qs);
        const __m256i n =
            _mm256_and_si256(j % 2 ? _mm256_srli_epi16(q, 4) : q, _mm256_set1_epi8(15));
        const __m256 d = _mm256_set1_ps(f16s(b->d));
        const __m128i n16[2] = {_mm256_castsi256_si128(n), _mm256_extracti128_si256(n, 1)};
        for (int i = 0; i < 4; i++) {
            const __m128i c = n16[i / 2];
            const __m256i idx = _mm256_cvtepu8_epi32(i % 2 ? _mm_unpackhi_epi64(c, c) : c);
            const __m256 v = _mm256_blendv_ps(_mm256_permutevar8x32_ps(t0, idx),
                                              _mm256_permutevar8x32_ps(t1, idx),
                                              _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
            w[i] = _mm256_mul_ps(v, d);
        }
        return;
    }
    default:
        break;
    }
    const codes32 c = get_codes32(dt, row, j, h);
    __m256 a, b, e, f;
    cvt_i8x16(c.lo, &a, &b);
    cvt_i8x16(c.hi, &e, &f);
    const __m256 sl = _mm256_set1_ps(c.sc[0]), sh = _mm256_set1_ps(c.sc[1]);
    if (has_min(dt)) {
        const __m256 ml = _mm256_set1_ps(c.mn[0]), mh = _mm256_set1_ps(c.mn[1]);
        w[0] = _mm256_fmadd_ps(a, sl, ml);
        w[1] = _mm256_fmadd_ps(b, sl, ml);
        w[2] = _mm256_fmadd_ps(e, sh, mh);
        w[3] = _mm256_fmadd_ps(f, sh, mh);
    } else {
        w[0] = _mm256_mul_ps(a, sl);
        w[1] = _mm256_mul_ps(b, sl);
        w[2] = _mm256_mul_ps(e, sh);
        w[3] = _mm256_mul_ps(f, sh);
    }
}

/* Lanes of the first `n` (0..8) elements set. */
AI __m256i lane_mask(int n) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

/* Float rows whose K is not a multiple of 32: elements [k, k + rem), zero after. */
AI void ld_tail(hr_dtype dt, const uint8_t *row, int64_t k, int rem, __m256 w[4]) {
    for (int i = 0; i < 4; i++) {
        int n = rem - 8 * i;
        n = n < 0 ? 0 : n > 8 ? 8 : n;
        if (dt == HR_DTYPE_F32) {
            w[i] = _mm256_maskload_ps((const float *)(const void *)row + k + 8 * i, lane_mask(n));
        } else {
            uint16_t tmp[8] = {0};
            memcpy(tmp, (const uint16_t *)(const void *)row + k + 8 * i, (size_t)n * 2);
            __m128i v = _mm_loadu_si128((const __m128i *)tmp);
            w[i] = dt == HR_DTYPE_F16
                       ? _mm256_cvtph_ps(v)
                       : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
        }
    }
}

static void to_f32(hr_dtype dt, const void *row, int64_t k0, int64_t n, float *dst) {
    if (!hr_dtype_table[dt].is_quant) { /* k0 may be any element: move the row instead */
        row = (const char *)row + (size_t)k0 * (size_t)hr_dtype_table[dt].block_bytes;
        k0 = 0;
    }
    int64_t k = 0;
    __m256 w[4];
    float h[32];
    for (; k + 32 <= n; k += 32) {
        const int64_t j = (k0 + k) / 32;
        if (is_kquant(dt) && (k == 0 || j % 8 == 0))
            khdr(dt, row, j / 8, h);
        ld32(dt, row, j, h, w);
        for (int i = 0; i < 4; i++)
            _mm256_storeu_ps(dst + k + 8 * i, w[i]);
    }
    if (k < n) { /* float dtypes only */
        const int rem = (int)(n - k);
        ld_tail(dt, row, k0 + k, rem, w);
        for (int i = 0; i < 4; i++) {
            int c = rem - 8 * i;
            c = c < 0 ? 0 : c > 8 ? 8 : c;
            _mm256_maskstore_ps(dst + k + 8 * i, lane_mask(c), w[i]);
        }
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

/* Sum of the 8 lanes in a fixed order. */
AI float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* y[b * ldy + i] = dot(W_i, x_b) for i < nw, b < nx (nw * nx <= 8). */
AI void gemv_tile(hr_dtype dt, int nw, int nx, const uint8_t *w, size_t wrb, const float *x,
                  int64_t ldx, int64_t K, float *y, int64_t ldy) {
    __m256 acc[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < nw; i++)
#pragma GCC unroll 4
        for (int b = 0; b < nx; b++)
            acc[i][b] = _mm256_setzero_ps();
    const int64_t n32 = K / 32;
    float h[4][32]; /* K-quants: the current super-block's scales per row */
    for (int64_t j = 0; j < n32; j++) {
        if (is_kquant(dt) && j % 8 == 0)
#pragma GCC unroll 4
            for (int i = 0; i < nw; i++)
                khdr(dt, w + i * wrb, j / 8, h[i]);
#pragma GCC unroll 4
        for (int i = 0; i < nw; i++) {
            __m256 wv[4];
            ld32(dt, w + i * wrb, j, h[i], wv);
#pragma GCC unroll 4
            for (int b = 0; b < nx; b++)
#pragma GCC unroll 4
                for (int q = 0; q < 4; q++)
                    acc[i][b] = _mm256_fmadd_ps(wv[q], _mm256_loadu_ps(x + b * ldx + 32 * j + 8 * q),
                                                acc[i][b]);
        }
    }
    if (K % 32 != 0) {
        const int64_t k = n32 * 32;
        const int rem = (int)(K - k);
#pragma GCC unroll 4
        for (int i = 0; i < nw; i++) {
            __m256 wv[4];
            ld_tail(dt, w + i * wrb, k, rem, wv);
#pragma GCC unroll 4
            for (int b = 0; b < nx; b++)
#pragma GCC unroll 4
                for (int q = 0; q < 4; q++) {
                    int c = rem - 8 * q;
                    c = c < 0 ? 0 : c > 8 ? 8 : c;
                    __m256 xv = _mm256_maskload_ps(x + b * ldx + k + 8 * q, lane_mask(c));
                    acc[i][b] = _mm256_fmadd_ps(wv[q], xv, acc[i][b]);
                }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < nw; i++)
#pragma GCC unroll 4
        for (int b = 0; b < nx; b++)
            y[b * ldy + i] = hsum8(acc[i][b]);
}

AI void gemv_exact(hr_dtype dt, const cpu_mm_args *a, const cpu_mat *m, int64_t r0, int64_t r1,
                   float *y, int64_t ldy) {
    const size_t wrb = cpu_mm_row_bytes(dt, a->K);
    const uint8_t *w = (const uint8_t *)m->data + (size_t)r0 * wrb;
    for (int64_t r = r0; r < r1;) {
        const int64_t left = r1 - r;
        /* tiles: 4 rows x 1-2 activations, 2 rows x 3-4, single rows at the end */
        const int nw_big = a->B <= 2 ? 4 : 2;
        const int nw = left >= nw_big ? nw_big : 1;
        for (int64_t b = 0; b < a->B;) {
            const int64_t bl = a->B - b;
            const float *xb = a->x + b * a->ldx;
            float *yb = y + b * ldy + (r - r0);
            int nx;
            if (nw == 4) {
                nx = bl >= 2 ? 2 : 1;
                if (nx == 2)
                    gemv_tile(dt, 4, 2, w, wrb, xb, a->ldx, a->K, yb, ldy);
                else
                    gemv_tile(dt, 4, 1, w, wrb, xb, a->ldx, a->K, yb, ldy);
            } else {
                nx = bl >= 4 ? 4 : (int)bl;
                switch (nx + (nw == 2 ? 4 : 0)) {
                case 1: gemv_tile(dt, 1, 1, w, wrb, xb, a->ldx, a->K, yb, ldy); break;
                case 2: gemv_tile(dt, 1, 2, w, wrb, xb, a->ldx, a->K, yb, ldy); break;
                case 3: gemv_tile(dt, 1, 3, w, wrb, xb, a->ldx, a->K, yb, ldy); break;
                case 4: gemv_tile(dt, 1, 4, w, wrb, xb, a->ldx, a->K, yb, ldy); break;
                case 5: gemv_tile(dt, 2, 1, w, wrb, xb, a->ldx, a->K, yb, ldy); break;
                case 6: gemv_tile(dt, 2, 2, w, wrb, xb, a->ldx, a->K, yb, ldy); break;
                case 7: gemv_tile(dt, 2, 3, w, wrb, xb, a->ldx, a->K, yb, ldy); break;
                default: gemv_tile(dt, 2, 4, w, wrb, xb, a->ldx, a->K, yb, ldy); break;
                }
            }
            b += nx;
        }
        w += (size_t)nw * wrb;
        r += nw;
    }
}

#define DEF_GEMV_EXACT(name, dt)                                                     \
    static void name(const cpu_mm_args *a, const cpu_mat *m, int64_t r0, int64_t r1, \
                     float *y, int64_t ldy, void *ts) {                              \
        (void)ts;                                                                    \
        gemv_exact(dt, a, m, r0, r1, y, ldy);                                        \
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
/* FAST: activation quantization                                          */
/* ====================================================================== */

/* The reference quantizer's arithmetic (matmul.c) in 8 lanes; see the
 * AVX-512 version. */
static void quantize(const float *x, int64_t K, int64_t k0, int64_t k1,
                     void *const out[CPU_XQ_LAYOUT_COUNT], float *xh) {
    HR_ASSERT(k0 % CPU_XQ_PAD == 0 && k1 % CPU_XQ_PAD == 0 && k1 <= cpu_xq_kp(K));
    int pos32[CPU_XQ_LAYOUT_COUNT][16], pos16[CPU_XQ_LAYOUT_COUNT][16];
    xq_positions(pos32, pos16);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t ib = k0 / 32; ib < k1 / 32; ib++) {
        int32_t q[32] = {0};
        float dv = 0.0f;
        if (ib * 32 < K) {
            __m256 v[4], mx = _mm256_setzero_ps();
            for (int i = 0; i < 4; i++) {
                v[i] = _mm256_loadu_ps(x + 32 * ib + 8 * i);
                mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v[i]));
            }
            __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
            m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
            const float amax = _mm_cvtss_f32(m4);
            const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
            dv = amax / 127.0f;
            for (int i = 0; i < 4; i++) {
                const __m256i qi = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));
                _mm256_storeu_si256((__m256i *)(q + 8 * i), qi);
                if (xh != NULL)
                    _mm256_storeu_ps(xh + 32 * ib + 8 * i,
                                     _mm256_mul_ps(_mm256_set1_ps(dv), _mm256_cvtepi32_ps(qi)));
            }
        }
        int32_t s_lo = 0, s_hi = 0;
        int8_t c[32];
        for (int i = 0; i < 32; i++) {
            c[i] = (int8_t)q[i];
            if (i < 16)
                s_lo += q[i];
            else
                s_hi += q[i];
        }
        for (int l = 0; l < CPU_XQ_LAYOUT_COUNT; l++) {
            if (out[l] == NULL)
                continue;
            int8_t *codes = out[l];
            const bool biased = l == CPU_XQ_T32 || l == CPU_XQ_T16;
            for (int i = 0; i < 32; i++)
                codes[cpu_xq_pos((cpu_xq_layout)l, 32 * ib + i)] =
                    biased ? (int8_t)(uint8_t)(c[i] + 128) : c[i];
            xq_put_sums(codes, K, pos32[l], pos16[l], ib, dv, s_lo, s_hi);
        }
    }
}

/* ====================================================================== */
/* FAST decode: integer dot products                                      */
/* ====================================================================== */
/*
 * One 32-element block per step: the weight codes (signed) and the
 * activation codes (NATURAL layout) meet in vpmaddubsw, which needs one
 * unsigned operand: |c| and sign(x, c) give sum c x exactly (|c| <= 128, |x| <=
 * 127: no 16-bit saturation). vpmaddwd with ones widens to 8 int32 lanes, 4
 * per 16-element half, so a vector [sc_lo*dx x4, sc_hi*dx x4] applies the
 * per-half weight scales. Mins add mn * dx * (sum of the half's codes): a
 * scalar per legacy block, two FMAs per K-quant super-block. Activations in
 * the PLAIN layout.
 */

AI void fast_row(hr_dtype dt, const uint8_t *w, const cpu_mm_args *a, int64_t b0, int nx, float *y,
                 int64_t ldy) {
    const int64_t K = a->K;
    const bool min = has_min(dt), kq = is_kquant(dt);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[4], macc[4];
    float lacc[4] = {0, 0, 0, 0};
    const int8_t *xc[4];
    const float *xd[4], *xd16[4];
    const int32_t *xs[4], *xs16[4];
#pragma GCC unroll 4
    for (int b = 0; b < nx; b++) {
        acc[b] = macc[b] = _mm256_setzero_ps();
        const uint8_t *xr = (const uint8_t *)a->xq[CPU_XQ_PLAIN] + (size_t)(b0 + b) * a->xq_row_bytes;
        xc[b] = cpu_xq_codes(xr);
        xd[b] = cpu_xq_d(xr, K);
        xs[b] = cpu_xq_s32(xr, K);
        xd16[b] = cpu_xq_d16(xr, K);
        xs16[b] = cpu_xq_s16(xr, K);
    }
    float h[32];
    for (int64_t j = 0; j < K / 32; j++) {
        if (kq && j % 8 == 0) {
            khdr(dt, w, j / 8, h);
            if (min) { /* the super-block's mins: sum over halves of mn * dx * sum(codes) */
                const __m256 m0 = _mm256_loadu_ps(h + 16), m1 = _mm256_loadu_ps(h + 24);
#pragma GCC unroll 4
                for (int b = 0; b < nx; b++) {
                    const int64_t o = 2 * j;
                    const __m256 t0 = _mm256_mul_ps(_mm256_loadu_ps(xd16[b] + o),
                        _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(xs16[b] + o))));
                    const __m256 t1 = _mm256_mul_ps(_mm256_loadu_ps(xd16[b] + o + 8),
                        _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(xs16[b] + o + 8))));
                    macc[b] = _mm256_fmadd_ps(m0, t0, _mm256_fmadd_ps(m1, t1, macc[b]));
                }
            }
        }
        const codes32 c = get_codes32(dt, w, j, h);
        const __m256i cw = _mm256_set_m128i(c.hi, c.lo);
        const __m256i aw = _mm256_abs_epi8(cw);
        const __m256 sc = _mm256_set_m128(_mm_set1_ps(c.sc[1]), _mm_set1_ps(c.sc[0]));
#pragma GCC unroll 4
        for (int b = 0; b < nx; b++) {
            const __m256i xv = _mm256_loadu_si256((const __m256i *)(xc[b] + 32 * j));
            const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, cw)), ones);
            const float dx = xd[b][j];
            acc[b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(sc, _mm256_set1_ps(dx)), acc[b]);
            if (min && !kq) /* legacy: one min per block */
                lacc[b] += c.mn[0] * (dx * (float)xs[b][j]);
        }
    }
#pragma GCC unroll 4
    for (int b = 0; b < nx; b++)
        y[b * ldy] = (hsum8(acc[b]) + hsum8(macc[b])) + lacc[b];
}

AI void gemv_fast(hr_dtype dt, const cpu_mm_args *a, const cpu_mat *m, int64_t r0, int64_t r1,
                  float *y, int64_t ldy) {
    const size_t wrb = cpu_mm_row_bytes(dt, a->K);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *w = (const uint8_t *)m->data + (size_t)r * wrb;
        for (int64_t b = 0; b < a->B; b += 4) {
            float *yb = y + b * ldy + (r - r0);
            switch (a->B - b >= 4 ? 4 : (int)(a->B - b)) {
            case 1: fast_row(dt, w, a, b, 1, yb, ldy); break;
            case 2: fast_row(dt, w, a, b, 2, yb, ldy); break;
            case 3: fast_row(dt, w, a, b, 3, yb, ldy); break;
            default: fast_row(dt, w, a, b, 4, yb, ldy); break;
            }
        }
    }
}

#define DEF_GEMV_FAST(name, dt)                                                      \
    static void name(const cpu_mm_args *a, const cpu_mat *m, int64_t r0, int64_t r1, \
                     float *y, int64_t ldy, void *ts) {                              \
        (void)ts;                                                                    \
        gemv_fast(dt, a, m, r0, r1, y, ldy);                                         \
    }
DEF_GEMV_FAST(gemv_fast_q8_0, HR_DTYPE_Q8_0)
DEF_GEMV_FAST(gemv_fast_q4_0, HR_DTYPE_Q4_0)
DEF_GEMV_FAST(gemv_fast_q4_1, HR_DTYPE_Q4_1)
DEF_GEMV_FAST(gemv_fast_q5_0, HR_DTYPE_Q5_0)
DEF_GEMV_FAST(gemv_fast_q5_1, HR_DTYPE_Q5_1)
DEF_GEMV_FAST(gemv_fast_q2_K, HR_DTYPE_Q2_K)
DEF_GEMV_FAST(gemv_fast_q3_K, HR_DTYPE_Q3_K)
DEF_GEMV_FAST(gemv_fast_q4_K, HR_DTYPE_Q4_K)
DEF_GEMV_FAST(gemv_fast_q5_K, HR_DTYPE_Q5_K)
DEF_GEMV_FAST(gemv_fast_q6_K, HR_DTYPE_Q6_K)

/* ====================================================================== */
/* EXACT prefill: blocked f32 GEMM                                        */
/* ====================================================================== */
/*
 * matmul_simd.h's driver (gemm_f32_run) with a 6x16 microkernel (12 ymm
 * accumulators; per k two weight loads, 6 broadcasts, 12 FMAs): weight
 * panels [k][16], activation panels [k][6].
 */

#define GEMM_MR 6
#define GEMM_NR 16
#define GEMM_KC 256
#define GEMM_NC 256

/* y[i][0..nr) (+)= sum_k xp[k][i] * wp[k][0..nr) for i < mr. */
AI void ukernel(int mr, int64_t kp, const float *xp, const float *wp, float *y, int64_t ldy, int nr,
                bool first) {
    __m256 acc[GEMM_MR][2];
#pragma GCC unroll 6
    for (int i = 0; i < mr; i++)
        acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int64_t k = 0; k < kp; k++) {
        const __m256 w0 = _mm256_load_ps(wp + GEMM_NR * k), w1 = _mm256_load_ps(wp + GEMM_NR * k + 8);
#pragma GCC unroll 6
        for (int i = 0; i < mr; i++) {
            const __m256 v = _mm256_broadcast_ss(xp + GEMM_MR * k + i);
            acc[i][0] = _mm256_fmadd_ps(v, w0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(v, w1, acc[i][1]);
        }
    }
    const __m256i m0 = lane_mask(nr >= 8 ? 8 : nr), m1 = lane_mask(nr >= 16 ? 8 : nr > 8 ? nr - 8 : 0);
#pragma GCC unroll 6
    for (int i = 0; i < mr; i++) {
        float *yi = y + i * ldy;
        __m256 v0 = acc[i][0], v1 = acc[i][1];
        if (!first) {
            v0 = _mm256_add_ps(v0, _mm256_maskload_ps(yi, m0));
            v1 = _mm256_add_ps(v1, _mm256_maskload_ps(yi + 8, m1));
        }
        _mm256_maskstore_ps(yi, m0, v0);
        _mm256_maskstore_ps(yi + 8, m1, v1);
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
    default: ukernel(6, kp, xp, wp, y, ldy, nr, first); break;
    }
}

/* gemm_pack_x: rows [0, mr) of x (stride ldx) -> xp [kpad(K)][GEMM_MR], zero padded. */
static void pack_x(const float *x, int64_t ldx, int mr, int64_t K, float *xp) {
    const int64_t kp = cpu_mm_kpad(K);
    for (int64_t k = 0; k < kp; k++)
        for (int i = 0; i < GEMM_MR; i++)
            xp[GEMM_MR * k + i] = i < mr && k < K ? x[i * ldx + k] : 0.0f;
}

/* 8x8 transpose of r[0..8). */
AI void tr8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int j = 0; j < 2; j++) {
        u[4 * j + 0] = _mm256_shuffle_ps(t[4 * j], t[4 * j + 2], 0x44);
        u[4 * j + 1] = _mm256_shuffle_ps(t[4 * j], t[4 * j + 2], 0xee);
        u[4 * j + 2] = _mm256_shuffle_ps(t[4 * j + 1], t[4 * j + 3], 0x44);
        u[4 * j + 3] = _mm256_shuffle_ps(t[4 * j + 1], t[4 * j + 3], 0xee);
    }
    for (int q = 0; q < 4; q++) {
        r[q] = _mm256_permute2f128_ps(u[q], u[4 + q], 0x20);
        r[4 + q] = _mm256_permute2f128_ps(u[q], u[4 + q], 0x31);
    }
}

/* 16 rows of f32 (row stride ld), columns [0, kp) -> panel [kp][GEMM_NR]. */
static void pack_w(const float *t, int64_t ld, int64_t kp, float *wp) {
    for (int64_t k = 0; k < kp; k += 8) {
        for (int h = 0; h < 2; h++) {
            __m256 r[8];
            for (int i = 0; i < 8; i++)
                r[i] = _mm256_loadu_ps(t + (8 * h + i) * ld + k);
            tr8(r);
            for (int i = 0; i < 8; i++)
                _mm256_store_ps(wp + GEMM_NR * (k + i) + 8 * h, r[i]);
        }
    }
}

static const gemm_f32 gemm_f32_avx2 = {
    .mr = GEMM_MR, .nr = GEMM_NR, .kc = GEMM_KC, .nc = GEMM_NC,
    .to_f32 = to_f32, .pack_w = pack_w, .ukernel = ukernel_mr,
};

static void gemm_exact(const cpu_mm_args *a, const cpu_mat *m, int64_t r0, int64_t r1, float *y,
                       int64_t ldy, void *ts) {
    gemm_f32_run(gemm_f32_avx2, a, m, r0, r1, y, ldy, ts);
}

/* ====================================================================== */
/* the table                                                              */
/* ====================================================================== */

static size_t tscratch_bytes(int64_t max_K) {
    (void)max_K;
    return gemm_f32_tscratch(gemm_f32_avx2);
}

/* FAST with F16 weights: F16C rounds to nearest even, the reference's rule. */
static void round_f16(const float *x, int64_t n, uint16_t *x16, float *xh) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(void *)(x16 + i), h);
        _mm256_storeu_ps(xh + i, _mm256_cvtph_ps(h));
    }
    cpu_mm_round_f16_ref(x + i, n - i, x16 + i, xh + i);
}

const cpu_mm_isa cpu_mm_isa_avx2 = {
    .name = "avx2",
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
            [HR_DTYPE_Q8_0] = gemv_fast_q8_0, [HR_DTYPE_Q4_0] = gemv_fast_q4_0,
            [HR_DTYPE_Q4_1] = gemv_fast_q4_1, [HR_DTYPE_Q5_0] = gemv_fast_q5_0,
            [HR_DTYPE_Q5_1] = gemv_fast_q5_1, [HR_DTYPE_Q2_K] = gemv_fast_q2_K,
            [HR_DTYPE_Q3_K] = gemv_fast_q3_K, [HR_DTYPE_Q4_K] = gemv_fast_q4_K,
            [HR_DTYPE_Q5_K] = gemv_fast_q5_K, [HR_DTYPE_Q6_K] = gemv_fast_q6_K,
        },
    .gemv_fast_layout =
        {
            [HR_DTYPE_Q8_0] = CPU_XQ_PLAIN, [HR_DTYPE_Q4_0] = CPU_XQ_PLAIN,
            [HR_DTYPE_Q4_1] = CPU_XQ_PLAIN, [HR_DTYPE_Q5_0] = CPU_XQ_PLAIN,
            [HR_DTYPE_Q5_1] = CPU_XQ_PLAIN, [HR_DTYPE_Q2_K] = CPU_XQ_PLAIN,
            [HR_DTYPE_Q3_K] = CPU_XQ_PLAIN, [HR_DTYPE_Q4_K] = CPU_XQ_PLAIN,
            [HR_DTYPE_Q5_K] = CPU_XQ_PLAIN, [HR_DTYPE_Q6_K] = CPU_XQ_PLAIN,
        },
    .quantize = quantize,
    .round_f16 = round_f16,
    .round_bf16 = cpu_mm_round_bf16_ref, /* a small share of a call; no AVX2 bf16 kernels */
    .gemm_exact = gemm_exact,
    .gemm_min_B_exact = 64,
    .gemm_min_B_xh = 64,
    .gemm_min_B_fast = INT64_MAX, /* no integer GEMM: FAST prefill is gemm_exact on x^ */
    .gemm_min_B_bf16 = INT64_MAX,
    .gemm_max_rows = GEMM_NC,
    .gemm_row_align = GEMM_NR,
    .gemm_mr = GEMM_MR,
    .gemm_pack_x = pack_x,
    .tscratch_bytes = tscratch_bytes,
};
