/*
 * matmul_nf4_avx512.c — FAST decode for bitsandbytes' NF4 and FP4 weights
 * (AVX-512 with VNNI): the codes look up a 16-bit copy of the table, and
 * vpdpwssd multiplies them with the 8-bit activations.
 *
 * The table values (f32 in [-1, 1], no common step) cannot be integer codes
 * exactly, so here they are rounded once to multiples of 2^-14: each weight
 * then differs from the EXACT one by at most 2^-15 of its block's absmax,
 * against an NF4 rounding step of 0.08-0.28 of the absmax (about 1/3000 of
 * the format's own error). Everything else is the FAST contract of matmul.h:
 * integer sums per 32 activations, scaled in f32 by the weight block's
 * absmax and the activation block's scale.
 * The f32 path (EXACT kernels on x^, one vpermps per 16 weights) ran
 * TinyLlama NF4 decode at 18 tok/s on the 2-core Zen 4 against Q4_0's 55.
 */
#include "backend/cpu/matmul.h"
#include "backend/cpu/matmul_simd.h"

#include "quant/blocks.h"
#include "util/error.h"

#include <immintrin.h>
#include <math.h>

#define TABLE_ONE 16384.0f /* 2^14: the 16-bit table's 1.0 */

/* The table as 32 int16 (twice over: vpermw indexes 32 words). */
static __m512i table16(hr_dtype dt) {
    const float *t = dt == HR_DTYPE_NF4 ? quant_nf4_values : quant_fp4_values;
    int16_t v[32];
    for (int i = 0; i < 32; i++)
        v[i] = (int16_t)lrintf(t[i % 16] * TABLE_ONE);
    return _mm512_loadu_si512(v);
}

/* y[b * ldy] = dot(W_row, x_b) for b < nx; xc: the activation codes widened
 * to 16 bits, xd: their scales per 32. */
AI void row_dot(int nx, const block_nf4 *w, int64_t n_blocks, __m512i table,
                const int16_t *const xc[4], const float *const xd[4], float *y, int64_t ldy) {
    __m512 acc[4];
#pragma GCC unroll 4
    for (int b = 0; b < 4; b++)
        acc[b] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi16(15);
    for (int64_t i = 0; i < n_blocks; i++) {
        if (i % 2 == 0) /* one prefetch a cache line (68 bytes: two blocks) */
            _mm_prefetch((const char *)(w + i) + 1024, _MM_HINT_T0);
        const __m512i q = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)w[i].qs));
        const __m512i lo = _mm512_permutexvar_epi16(_mm512_and_si512(q, m4), table);
        const __m512i hi = _mm512_permutexvar_epi16(_mm512_srli_epi16(q, 4), table);
        const __m512 d = _mm512_set1_ps(f16s(w[i].d));
#pragma GCC unroll 4
        for (int b = 0; b < nx; b++) {
            const __m512i s0 =
                _mm512_dpwssd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(xc[b] + 64 * i));
            const __m512i s1 = _mm512_dpwssd_epi32(_mm512_setzero_si512(), hi,
                                                   _mm512_loadu_si512(xc[b] + 64 * i + 32));
            const __m512 t = _mm512_fmadd_ps(
                _mm512_cvtepi32_ps(s1), _mm512_set1_ps(xd[b][2 * i + 1]),
                _mm512_mul_ps(_mm512_cvtepi32_ps(s0), _mm512_set1_ps(xd[b][2 * i])));
            acc[b] = _mm512_fmadd_ps(t, d, acc[b]);
        }
    }
#pragma GCC unroll 4
    for (int b = 0; b < nx; b++)
        y[b * ldy] = _mm512_reduce_add_ps(acc[b]) * (1.0f / TABLE_ONE);
}

void cpu_mm_avx512_gemv_nf4(const cpu_mm_args *a, const cpu_mat *m, int64_t r0, int64_t r1,
                            float *y, int64_t ldy, void *ts) {
    HR_ASSERT(m->dtype == HR_DTYPE_NF4 || m->dtype == HR_DTYPE_FP4);
    const __m512i table = table16(m->dtype);
    const int64_t n_blocks = a->K / QUANT_QK_NF4;
    for (int64_t b = 0; b < a->B; b += 4) {
        const int nx = a->B - b >= 4 ? 4 : (int)(a->B - b);
        const int16_t *xc[4];
        const float *xd[4];
        for (int i = 0; i < nx; i++) {
            const void *row = (const char *)a->xq[CPU_XQ_NATURAL] + (size_t)(b + i) * a->xq_row_bytes;
            /* widened once per call and row group, then read by every weight row */
            int16_t *x16 = (int16_t *)ts + i * a->K;
            const int8_t *codes = cpu_xq_codes(row);
            for (int64_t k = 0; k < a->K; k += 32)
                _mm512_storeu_si512(x16 + k, _mm512_cvtepi8_epi16(
                                                 _mm256_loadu_si256((const __m256i *)(codes + k))));
            xc[i] = x16;
            xd[i] = cpu_xq_d(row, a->K);
        }
        float *yb = y + b * ldy;
        const block_nf4 *w = (const block_nf4 *)m->data + r0 * n_blocks;
        for (int64_t r = r0; r < r1; r++, w += n_blocks) {
            switch (nx) {
            case 1: row_dot(1, w, n_blocks, table, xc, xd, yb + (r - r0), ldy); break;
            case 2: row_dot(2, w, n_blocks, table, xc, xd, yb + (r - r0), ldy); break;
            case 3: row_dot(3, w, n_blocks, table, xc, xd, yb + (r - r0), ldy); break;
            default: row_dot(4, w, n_blocks, table, xc, xd, yb + (r - r0), ldy); break;
            }
        }
    }
}

size_t cpu_mm_avx512_gemv_nf4_tscratch(int64_t max_K) {
    return (size_t)(4 * max_K) * sizeof(int16_t);
}
