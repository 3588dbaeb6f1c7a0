/*
 * matmul_nf4_avx512.c — FAST decode for bitsandbytes' NF4 and FP4 weights
 * (AVX-512 BW + VNNI): the codes look up a 16-bit copy of the table
 * (vpshufb on its low and high bytes), and vpdpwssd multiplies them with the
 * 8-bit activations widened to 16 bits.
 *
 * The table values (f32 in [-1, 1], no common step) cannot be integer codes
 * exactly, so here they are rounded once to multiples of 2^-14: each weight
 * then differs from the EXACT one by at most 2^-15 of its block's absmax,
 * against an NF4 rounding step of 0.08-0.28 of the absmax (about 1/3000 of
 * the format's own error). Everything else is the FAST contract of matmul.h:
 * integer sums per 32 activations, scaled in f32 by the weight block's
 * absmax and the activation block's scale.
 * Measured (2-core Zen 4, bench_cpu_matmul hot): 26-29 GB/s of NF4 weights,
 * compute-bound (Q4_0's kernel reaches 56); TinyLlama decode 42-43 tok/s
 * against Q4_0's 47-50. The variants tried are in docs/journal/cpu.md.
 */
#include "backend/cpu/matmul.h"
#include "backend/cpu/matmul_simd.h"

#include "quant/blocks.h"
#include "util/error.h"

#include <immintrin.h>
#include <math.h>

#define TABLE_ONE 16384.0f /* 2^14: the 16-bit table's 1.0 */

/* The table's 16-bit values split into low and high bytes, each table
 * repeated in the four 128-bit lanes (vpshufb looks up within a lane). */
typedef struct {
    __m512i lo, hi;
} table16;

static table16 table_of(hr_dtype dt) {
    const float *t = dt == HR_DTYPE_NF4 ? quant_nf4_values : quant_fp4_values;
    uint8_t lo[64], hi[64];
    for (int i = 0; i < 64; i++) {
        const uint16_t v = (uint16_t)(int16_t)lrintf(t[i % 16] * TABLE_ONE);
        lo[i] = (uint8_t)(v & 255);
        hi[i] = (uint8_t)(v >> 8);
    }
    return (table16){_mm512_loadu_si512(lo), _mm512_loadu_si512(hi)};
}

/*
 * Lookup order. A block's 32 code bytes give 64 nibble indices, low nibbles
 * (elements 0..31) in 128-bit lanes 0-1 and high nibbles (32..63) in lanes
 * 2-3; vpshufb looks up the low and the high bytes of the 16-bit values,
 * and unpacklo/unpackhi_epi8 pair them into words, within each lane:
 *   w0 = elements 0-7, 16-23, 32-39, 48-55;  w1 = 8-15, 24-31, 40-47, 56-63.
 * The activations are widened into the same order (pos below), so that
 * vpdpwssd's 32-bit lane j sums elements of one 32-block: lanes 0-7 the
 * block's first half (activation block 2i), lanes 8-15 its second (2i+1).
 * w0 and w1 then accumulate into one integer vector, converted and scaled
 * once per block by [d * dx(2i) x 8, d * dx(2i+1) x 8].
 */
static int pos(int e) { /* where element e (0..63) of a block goes among the 64 words */
    const int half = e / 32, r = e % 32, lane = 2 * half + r / 16, k = r % 16;
    return (k < 8 ? 0 : 32) + lane * 8 + k % 8;
}

/* y[b * ldy] = dot(W_row, x_b) for b < nx; xc: the activation codes widened
 * to 16 bits in lookup order, xs: per block the 16 lane scales. */
AI void row_dot(int nx, const block_nf4 *w, int64_t n_blocks, table16 table,
                const int16_t *const xc[4], const float *const xs[4], float *y, int64_t ldy) {
    __m512 acc[4];
#pragma GCC unroll 4
    for (int b = 0; b < 4; b++)
        acc[b] = _mm512_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int64_t i = 0; i < n_blocks; i++) {
        if (i % 2 == 0) /* one prefetch a cache line (68 bytes: two blocks) */
            _mm_prefetch((const char *)(w + i) + 1024, _MM_HINT_T0);
        const __m256i q = _mm256_loadu_si256((const __m256i *)w[i].qs);
        const __m512i idx = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_and_si256(q, m4)),
            _mm256_and_si256(_mm256_srli_epi16(q, 4), m4), 1);
        const __m512i lb = _mm512_shuffle_epi8(table.lo, idx);
        const __m512i hb = _mm512_shuffle_epi8(table.hi, idx);
        const __m512i w0 = _mm512_unpacklo_epi8(lb, hb), w1 = _mm512_unpackhi_epi8(lb, hb);
        const __m512 d = _mm512_set1_ps(f16s(w[i].d));
#pragma GCC unroll 4
        for (int b = 0; b < nx; b++) {
            __m512i s = _mm512_dpwssd_epi32(_mm512_setzero_si512(), w0,
                                            _mm512_loadu_si512(xc[b] + 64 * i));
            s = _mm512_dpwssd_epi32(s, w1, _mm512_loadu_si512(xc[b] + 64 * i + 32));
            acc[b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s),
                                     _mm512_mul_ps(_mm512_loadu_ps(xs[b] + 16 * i), d), acc[b]);
        }
    }
#pragma GCC unroll 4
    for (int b = 0; b < nx; b++)
        y[b * ldy] = _mm512_reduce_add_ps(acc[b]) * (1.0f / TABLE_ONE);
}

void cpu_mm_avx512_gemv_nf4(const cpu_mm_args *a, const cpu_mat *m, int64_t r0, int64_t r1,
                            float *y, int64_t ldy, void *ts) {
    HR_ASSERT(m->dtype == HR_DTYPE_NF4 || m->dtype == HR_DTYPE_FP4);
    const table16 table = table_of(m->dtype);
    const int64_t K = a->K, n_blocks = K / QUANT_QK_NF4;
    /* word t of the reordered block holds element inv[t] (pos's inverse) */
    int16_t inv[64];
    for (int e = 0; e < 64; e++)
        inv[pos(e)] = (int16_t)e;
    const __m512i i0 = _mm512_loadu_si512(inv), i1 = _mm512_loadu_si512(inv + 32);
    for (int64_t b = 0; b < a->B; b += 4) {
        const int nx = a->B - b >= 4 ? 4 : (int)(a->B - b);
        const int16_t *xc[4];
        const float *xs[4];
        for (int i = 0; i < nx; i++) {
            const void *row = (const char *)a->xq[CPU_XQ_NATURAL] + (size_t)(b + i) * a->xq_row_bytes;
            /* widened and reordered once per call and row group, then read
             * by every weight row of the chunk */
            int16_t *x16 = (int16_t *)ts + i * K;
            float *sc = (float *)((int16_t *)ts + 4 * K) + i * K / 4;
            const int8_t *codes = cpu_xq_codes(row);
            const float *d = cpu_xq_d(row, K);
            for (int64_t j = 0; j < n_blocks; j++) {
                const __m512i lo = _mm512_cvtepi8_epi16(
                    _mm256_loadu_si256((const __m256i *)(codes + 64 * j)));
                const __m512i hi = _mm512_cvtepi8_epi16(
                    _mm256_loadu_si256((const __m256i *)(codes + 64 * j + 32)));
                _mm512_storeu_si512(x16 + 64 * j, _mm512_permutex2var_epi16(lo, i0, hi));
                _mm512_storeu_si512(x16 + 64 * j + 32, _mm512_permutex2var_epi16(lo, i1, hi));
                _mm512_storeu_ps(sc + 16 * j,
                                 _mm512_insertf32x8(_mm512_set1_ps(d[2 * j]),
                                                    _mm256_set1_ps(d[2 * j + 1]), 1));
            }
            xc[i] = x16;
            xs[i] = sc;
        }
        float *yb = y + b * ldy;
        const block_nf4 *w = (const block_nf4 *)m->data + r0 * n_blocks;
        for (int64_t r = r0; r < r1; r++, w += n_blocks) {
            switch (nx) {
            case 1: row_dot(1, w, n_blocks, table, xc, xs, yb + (r - r0), ldy); break;
            case 2: row_dot(2, w, n_blocks, table, xc, xs, yb + (r - r0), ldy); break;
            case 3: row_dot(3, w, n_blocks, table, xc, xs, yb + (r - r0), ldy); break;
            default: row_dot(4, w, n_blocks, table, xc, xs, yb + (r - r0), ldy); break;
            }
        }
    }
}

size_t cpu_mm_avx512_gemv_nf4_tscratch(int64_t max_K) {
    /* 4 rows of widened codes, 4 rows of lane scales (16 floats a block of 64) */
    return (size_t)(4 * max_K) * sizeof(int16_t) + (size_t)(4 * max_K / 4) * sizeof(float);
}
