/*
 * matmul_gemv_avx512.c — the AVX-512 level's FAST decode: the 8-bit
 * activation quantizer and the integer dot-product kernels for quantized
 * weights at small B (matmul.h: CPU_MATMUL_FAST). matmul_avx512.c holds the
 * rest of the level and its table, which points here through
 * cpu_mm_avx512_quantize and cpu_mm_avx512_gemv_fast.
 *
 * One weight row is read once, front to back, for up to 4 activation rows.
 * Weights are unpacked to unsigned 8-bit codes and multiplied with the signed
 * activation codes by vpdpbusd (4 products per 32-bit lane). A group of 16
 * legacy blocks (K-quants: one super-block) fills four 512-bit code registers
 * (legacy 4/5-bit: a block per 128-bit lane, low and high nibbles in two
 * registers; K-quants: a 16-element half block per 128-bit lane); after the
 * dot products a 4x4 transpose-add (reduce4) leaves one 32-bit sum per block
 * in one register, lane 4L+v holding register v's lane L. Then, per group and
 * activation row, one subtract (the codes' offset times the activation block
 * sums), one convert and two or three f32 operations apply the weight scale,
 * the activation scale and the min. The activation scales and sums arrive in
 * that lane order (the xq layouts, matmul.h); the weight scales are put in it
 * by word permutes (Q4_0, Q4_1), scalar loads packed four to a 64-bit word
 * (other legacy formats) or byte shuffles (K-quants).
 *   Q8_0 keeps its 32 codes per block contiguous: two 256-bit loads fill a
 * register with two blocks (eight 128-bit inserts per four blocks before),
 * the NATURAL activation layout matches it, and a lane permute after reduce4
 * restores block order.
 *
 * Decode streams the weights once and does little arithmetic per byte, so
 * what matters is keeping the loads flowing: one sequential stream per
 * thread, every register of a group explicit (no arrays indexed by run-time
 * counts, which the compiler kept on the stack), the rare partial group
 * copied to a zero-padded buffer so the main loop has no bounds checks.
 * Rejected: tiles of 2, 4 or 8 interleaved weight rows to share the
 * activation loads (0.45-0.7x from DRAM: rows of 1-3 KB are too short for
 * the prefetchers to follow eight streams).
 *
 * Measured (2-core Zen 4 VM, 2 threads, bench_cpu_matmul; the VM's streaming
 * read drifts between ~31 and ~60 GB/s with its neighbours): with weights in
 * L3 (the compute ceiling) Q4_0 rose from 48-55 to ~60 GB/s; from DRAM all
 * formats stay within 10% of the streaming read at ~31 GB/s, the software
 * prefetch below taking back part of what the hardware prefetchers leave.
 *
 * Shape legend: B activation rows, K inner dimension, N weight rows;
 * nx = activation rows sharing one pass over a weight row.
 */
#include "backend/cpu/matmul.h"
#include "backend/cpu/matmul_simd.h"

#include "quant/blocks.h"
#include "util/dtype.h"
#include "util/error.h"

#include <immintrin.h>
#include <string.h>

/* ====================================================================== */
/* Activation quantization                                                */
/* ====================================================================== */

/* The reference quantizer's arithmetic (matmul.c) in 16 lanes: max |x| is
 * exact in any order, 127 / amax and x * id are the same single roundings,
 * and vcvtps2dq rounds to nearest even like rintf. */
void cpu_mm_avx512_quantize(const float *x, int64_t K, int64_t k0, int64_t k1,
                            void *const out[CPU_XQ_LAYOUT_COUNT], float *xh) {
    HR_ASSERT(k0 % CPU_XQ_PAD == 0 && k1 % CPU_XQ_PAD == 0 && k1 <= cpu_xq_kp(K));
    int pos32[CPU_XQ_LAYOUT_COUNT][16], pos16[CPU_XQ_LAYOUT_COUNT][16];
    xq_positions(pos32, pos16);
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
            xq_put_sums(codes, K, pos32[l], pos16[l], ib, dv, s_lo, s_hi);
        }
    }
}

/* ====================================================================== */
/* Shared pieces                                                          */
/* ====================================================================== */

/* Up to 4 activation rows in one layout: codes, block (or half-block) scales
 * and code sums, each from its row's start. */
typedef struct {
    const int8_t *c[4];
    const float *d[4];
    const int32_t *s[4];
} xrows;

AI xrows xrows_at(const cpu_mm_args *a, cpu_xq_layout lay, int64_t b0, int nx, bool half) {
    xrows x;
    for (int b = 0; b < 4; b++) {
        const uint8_t *r = (const uint8_t *)a->xq[lay] + (size_t)(b0 + (b < nx ? b : 0)) * a->xq_row_bytes;
        x.c[b] = cpu_xq_codes(r);
        x.d[b] = half ? cpu_xq_d16(r, a->K) : cpu_xq_d(r, a->K);
        x.s[b] = half ? cpu_xq_s16(r, a->K) : cpu_xq_s32(r, a->K);
    }
    return x;
}

/* sums of the 4 dwords of each 128-bit lane of a_v -> lane 4L+v */
AI __m512i reduce4(__m512i a0, __m512i a1, __m512i a2, __m512i a3) {
    const __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(a0, a1), _mm512_unpackhi_epi32(a0, a1));
    const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(a2, a3), _mm512_unpackhi_epi32(a2, a3));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
}

/* 16 f16 at p + stride * j (j < 16) -> f32 lane l holding j = order[l]
 * (order: 0 natural, 1 the reduced order 4L+v <- 4v+L). Scalar loads packed
 * four to a 64-bit word: a vpgatherdd of the 16 scales took ~40% of the Q4_0
 * kernel's time on Zen 4; these run on the otherwise idle integer ports. */
AI __m512 f16x16(const uint8_t *p, int stride, int shift, bool reduced) {
    uint64_t w[4];
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) {
        uint64_t r = 0;
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const int j = reduced ? 4 * k + q : 4 * q + k; /* lane 4q+k */
            uint32_t h;
            memcpy(&h, p + j * stride, 4);
            r |= (uint64_t)((h >> shift) & 0xffffu) << (16 * k);
        }
        /* keep it scalar: vectorized (vmovd/vpinsrd chains) the loads were
         * issued late and Q8_0 read DRAM 10-25% slower */
        __asm__("" : "+r"(r));
        w[q] = r;
    }
    return _mm512_cvtph_ps(_mm256_set_epi64x((long long)w[3], (long long)w[2], (long long)w[1],
                                             (long long)w[0]));
}

/* ====================================================================== */
/* Legacy 4/5-bit formats: QUAD activations                               */
/* ====================================================================== */

typedef struct {
    int bs;     /* block bytes */
    int qh;     /* offset of the 32 fifth bits, -1 if none */
    int off_sh; /* log2 of the code offset (8 or 16), -1 for none */
    bool min;   /* f16 min after the f16 scale */
} leg_info;

AI leg_info leg(hr_dtype dt) {
    switch (dt) {
    case HR_DTYPE_Q4_0: return (leg_info){18, -1, 3, false};
    case HR_DTYPE_Q4_1: return (leg_info){20, -1, -1, true};
    case HR_DTYPE_Q5_0: return (leg_info){22, 2, 4, false};
    default: return (leg_info){24, 4, -1, true}; /* Q5_1 */
    }
}

/* The 16 nibble bytes of four consecutive blocks, one block per 128-bit
 * lane, from two overlapping 64-byte loads and one dword permute (cheaper
 * than four 16-byte loads and three inserts): for every legacy 4/5-bit type
 * the blocks' nibbles start at dword-aligned offsets of one of the two loads. */
AI __m512i nib4(hr_dtype dt, const uint8_t *p) {
    /* a, c: offsets of the loads; lane L takes dwords idx[4L..] of load a (< 16)
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

/* Q4_0/Q4_1: the 16 f16 scales (mins: word 1 of each block) in reduced lane
 * order, picked out of four 64-byte loads by two word permutes and a blend;
 * each load holds the headers of four blocks (18 or 20 bytes apart). Output
 * word 4L+v <- word bw*L + w of load v (the second source of a permute is
 * indexed from 32). [Q4_1][w][v >= 2] */
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

/* One group of 16 blocks at p (all inside the row) against nx activation
 * rows: acc[b] += the group's share of the dot product. */
AI void leg_group(hr_dtype dt, int nx, const uint8_t *p, const xrows *x, int64_t g, __m512 acc[4]) {
    const leg_info li = leg(dt);
    const __m512i m4 = _mm512_set1_epi8(15);
    __m512i lo[4], hi[4];
#pragma GCC unroll 4
    for (int v = 0; v < 4; v++) {
        const uint8_t *q = p + 4 * v * li.bs;
        const __m512i z = nib4(dt, q);
        lo[v] = _mm512_and_si512(z, m4);
        hi[v] = _mm512_and_si512(_mm512_srli_epi16(z, 4), m4);
        if (li.qh >= 0) { /* fifth bits: element i of block L is bit i of its qh */
            uint64_t mlo = 0, mhi = 0;
#pragma GCC unroll 4
            for (int L = 0; L < 4; L++) {
                uint32_t h;
                memcpy(&h, q + L * li.bs + li.qh, 4);
                mlo |= (uint64_t)(h & 0xffffu) << (16 * L);
                mhi |= (uint64_t)(h >> 16) << (16 * L);
            }
            const __m512i b16 = _mm512_set1_epi8(16);
            lo[v] = _mm512_mask_add_epi8(lo[v], mlo, lo[v], b16);
            hi[v] = _mm512_mask_add_epi8(hi[v], mhi, hi[v], b16);
        }
    }
    __m512 dw, mw = _mm512_setzero_ps();
    if (dt == HR_DTYPE_Q4_0 || dt == HR_DTYPE_Q4_1) {
        dw = leg_scales16(dt, p, 0);
        if (li.min)
            mw = leg_scales16(dt, p, 1);
    } else {
        dw = f16x16(p, li.bs, 0, true);
        if (li.min)
            mw = f16x16(p, li.bs, 16, true);
    }
#pragma GCC unroll 4
    for (int b = 0; b < nx; b++) {
        const int8_t *xc = x->c[b] + 512 * g;
        __m512i a4[4];
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) {
            const __m512i t = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[v], _mm512_loadu_si512(xc + 128 * v));
            a4[v] = _mm512_dpbusd_epi32(t, hi[v], _mm512_loadu_si512(xc + 128 * v + 64));
        }
        __m512i u = reduce4(a4[0], a4[1], a4[2], a4[3]);
        const __m512 dx = _mm512_loadu_ps(x->d[b] + 16 * g);
        const __m512i sx = _mm512_loadu_si512(x->s[b] + 16 * g);
        if (li.off_sh >= 0)
            u = _mm512_sub_epi32(u, _mm512_slli_epi32(sx, (unsigned)li.off_sh));
        acc[b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(u), _mm512_mul_ps(dw, dx), acc[b]);
        if (li.min)
            acc[b] = _mm512_fmadd_ps(mw, _mm512_mul_ps(dx, _mm512_cvtepi32_ps(sx)), acc[b]);
    }
}

/* ====================================================================== */
/* Q8_0: NATURAL activations                                              */
/* ====================================================================== */

AI void q8_group(int nx, const uint8_t *p, const xrows *x, int64_t g, __m512 acc[4]) {
    const __m512i f = _mm512_set1_epi8((char)0x80); /* signed -> unsigned: +128 */
    /* register i: the codes of blocks 2i and 2i+1 (34 bytes each, codes at +2) */
    __m512i r[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        const __m256i lo = _mm256_loadu_si256((const __m256i *)(p + 68 * i + 2));
        const __m256i hi = _mm256_loadu_si256((const __m256i *)(p + 68 * i + 36));
        r[i] = _mm512_xor_si512(f, _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
    }
    const __m512 dw = f16x16(p, 34, 0, false);
    /* reduce4 leaves block 4v+L in lane 4L+v: back to lane = block */
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
#pragma GCC unroll 4
    for (int b = 0; b < nx; b++) {
        const int8_t *xc = x->c[b] + 512 * g;
        __m512i t[8], s[4];
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++)
            t[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), r[i], _mm512_loadu_si512(xc + 64 * i));
        /* s[v]: blocks 4v..4v+3, one per 128-bit lane, 4 partial sums each */
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++)
            s[v] = _mm512_add_epi32(_mm512_shuffle_i32x4(t[2 * v], t[2 * v + 1], 0x88),
                                    _mm512_shuffle_i32x4(t[2 * v], t[2 * v + 1], 0xdd));
        __m512i u = _mm512_permutexvar_epi32(order, reduce4(s[0], s[1], s[2], s[3]));
        const __m512 dx = _mm512_loadu_ps(x->d[b] + 16 * g);
        u = _mm512_sub_epi32(u, _mm512_slli_epi32(_mm512_loadu_si512(x->s[b] + 16 * g), 7));
        acc[b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(u), _mm512_mul_ps(dw, dx), acc[b]);
    }
}

/* ====================================================================== */
/* K-quants: a super-block per group, a half block per 128-bit lane       */
/* ====================================================================== */

/* The unsigned codes of a super-block: register i, 128-bit lane L holds half
 * block cpu_xq_lane(layout, 4L + i) (layout K4 for Q4_K/Q5_K, NATURAL else). */
AI void kq_codes(hr_dtype dt, const uint8_t *blk, __m512i c[4]) {
    const __m512i m4 = _mm512_set1_epi8(15);
    switch (dt) {
    case HR_DTYPE_Q4_K:
    case HR_DTYPE_Q5_K: {
        const bool five = dt == HR_DTYPE_Q5_K;
        const uint8_t *qs = blk + 4 + QUANT_K_SCALE_BYTES + (five ? 32 : 0);
#pragma GCC unroll 2
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
#pragma GCC unroll 2
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
    default: { /* Q2_K, Q3_K */
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
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m512i z = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * h)));
            c[2 * h] = _mm512_and_si512(_mm512_srlv_epi16(z, sh0), m2);
            c[2 * h + 1] = _mm512_and_si512(_mm512_srlv_epi16(z, sh1), m2);
            if (three) {
                /* elements 128h + 32q + n: high bit is bit 4h + q of hmask[n] */
                const __m512i b4 = _mm512_set1_epi8(4);
#pragma GCC unroll 2
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
    }
}

/* A K-quant super-block's per-half-block scales (d * sc) and negated mins
 * (-(dmin * mn)), in the lane order of the reduced sums: byte shuffles of the
 * decoded 6/4-bit scales, then one conversion each; the products are the
 * reference dequantizer's (exact: small integers times an f16). */
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
        *sc = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)), _mm512_set1_ps(f16s(b->d)));
        break;
    }
    }
}

AI void kq_group(hr_dtype dt, int nx, const uint8_t *blk, const xrows *x, int64_t sb, __m512 acc[4]) {
    const bool min = dt == HR_DTYPE_Q2_K || dt == HR_DTYPE_Q4_K || dt == HR_DTYPE_Q5_K;
    /* unsigned codes = signed code + offset: Q6_K 32, Q3_K 4 */
    const int off_sh = dt == HR_DTYPE_Q6_K ? 5 : dt == HR_DTYPE_Q3_K ? 2 : -1;
    __m512 sc, mn;
    kq_scales(dt, blk, &sc, &mn);
    __m512i c[4];
    kq_codes(dt, blk, c);
#pragma GCC unroll 4
    for (int b = 0; b < nx; b++) {
        const int8_t *xc = x->c[b] + 256 * sb;
        __m512i p[4];
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++)
            p[v] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c[v], _mm512_loadu_si512(xc + 64 * v));
        __m512i u = reduce4(p[0], p[1], p[2], p[3]);
        const __m512 dx = _mm512_loadu_ps(x->d[b] + 16 * sb);
        const __m512i sx = _mm512_loadu_si512(x->s[b] + 16 * sb);
        if (off_sh >= 0)
            u = _mm512_sub_epi32(u, _mm512_slli_epi32(sx, (unsigned)off_sh));
        acc[b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(u), _mm512_mul_ps(sc, dx), acc[b]);
        if (min)
            acc[b] = _mm512_fmadd_ps(mn, _mm512_mul_ps(dx, _mm512_cvtepi32_ps(sx)), acc[b]);
    }
}

/* ====================================================================== */
/* Rows                                                                   */
/* ====================================================================== */

AI cpu_xq_layout layout_of(hr_dtype dt) {
    switch (dt) {
    case HR_DTYPE_Q8_0:
    case HR_DTYPE_Q2_K:
    case HR_DTYPE_Q3_K:
    case HR_DTYPE_Q6_K:
        return CPU_XQ_NATURAL;
    case HR_DTYPE_Q4_K:
    case HR_DTYPE_Q5_K:
        return CPU_XQ_K4;
    default:
        return CPU_XQ_QUAD;
    }
}

/* One group (16 blocks or a super-block) of any format. */
AI void group(hr_dtype dt, int nx, const uint8_t *p, const xrows *x, int64_t g, __m512 acc[4]) {
    if (dt == HR_DTYPE_Q8_0)
        q8_group(nx, p, x, g, acc);
    else if (is_kquant(dt))
        kq_group(dt, nx, p, x, g, acc);
    else
        leg_group(dt, nx, p, x, g, acc);
}

/* How far ahead of the group being read a thread prefetches its weights
 * (bytes; measured best of 256..16384 per format). The hardware prefetchers
 * alone leave 2-12% of the streaming rate unused when the VM's memory is fast,
 * more for formats with more arithmetic per byte (Q4_K, Q6_K). In huge pages
 * (cpu_mat.huge_pages) the legacy 4- and 5-bit formats gained from 1024 to
 * 4096: Q4_0 88-91% -> 93-95% of the streaming read, TinyLlama's matmuls
 * 54.4-59.9 -> 56.3-62.9 tok/s (8192 and 16384 no better); in 4 KiB pages
 * 4096 lost ~15% of the model's decode (a page walk per prefetched page).
 * Q8_0 and Q6_K stay at 95%+ with their distances, Q4_K showed no
 * difference. */
AI int prefetch_ahead(hr_dtype dt, bool huge_pages) {
    switch (dt) {
    case HR_DTYPE_Q8_0: return 256;
    case HR_DTYPE_Q2_K:
    case HR_DTYPE_Q3_K:
    case HR_DTYPE_Q6_K: return 512;
    case HR_DTYPE_Q4_K:
    case HR_DTYPE_Q5_K: return 1024;
    default: return huge_pages ? 4096 : 1024;
    }
}

/* y[b * ldy] = dot(W_row, x_b) for b < nx. */
AI void row_dot(hr_dtype dt, int nx, const uint8_t *w, int64_t ahead, const cpu_mm_args *a,
                const xrows *x, float *y, int64_t ldy) {
    const int64_t gb = hr_dtype_table[dt].block_bytes * (is_kquant(dt) ? 1 : 16); /* bytes per group */
    const int64_t ge = is_kquant(dt) ? QUANT_QK_K : 512;                        /* elements per group */
    const int64_t n_full = a->K / ge;
    __m512 acc[4];
#pragma GCC unroll 4
    for (int b = 0; b < 4; b++)
        acc[b] = _mm512_setzero_ps();
    for (int64_t g = 0; g < n_full; g++) {
        /* past the row's end this touches the next row, or harmlessly
         * nothing: a prefetch never faults */
        for (int64_t o = 0; o < gb; o += 64)
            _mm_prefetch((const char *)(w + g * gb + ahead + o), _MM_HINT_T0);
        group(dt, nx, w + g * gb, x, g, acc);
    }
    if (n_full * ge < a->K) { /* legacy only: fewer than 16 blocks left, zero-padded */
        _Alignas(64) uint8_t tail[16 * 34];
        const size_t bytes = (size_t)((a->K - n_full * ge) / 32 * hr_dtype_table[dt].block_bytes);
        memcpy(tail, w + n_full * gb, bytes);
        memset(tail + bytes, 0, sizeof tail - bytes);
        group(dt, nx, tail, x, n_full, acc);
    }
#pragma GCC unroll 4
    for (int b = 0; b < nx; b++)
        y[b * ldy] = _mm512_reduce_add_ps(acc[b]);
}

AI void rows_fast(hr_dtype dt, const cpu_mm_args *a, const cpu_mat *m, int64_t r0, int64_t r1,
                  float *y, int64_t ldy) {
    const size_t wrb = cpu_mm_row_bytes(dt, a->K);
    const bool half = is_kquant(dt);
    const int64_t ahead = prefetch_ahead(dt, m->huge_pages);
    for (int64_t b = 0; b < a->B; b += 4) {
        const int nx = a->B - b >= 4 ? 4 : (int)(a->B - b);
        const xrows x = xrows_at(a, layout_of(dt), b, nx, half);
        float *yb = y + b * ldy;
        const uint8_t *w = (const uint8_t *)m->data + (size_t)r0 * wrb;
        for (int64_t r = r0; r < r1; r++, w += wrb) {
            switch (nx) {
            case 1: row_dot(dt, 1, w, ahead, a, &x, yb + (r - r0), ldy); break;
            case 2: row_dot(dt, 2, w, ahead, a, &x, yb + (r - r0), ldy); break;
            case 3: row_dot(dt, 3, w, ahead, a, &x, yb + (r - r0), ldy); break;
            default: row_dot(dt, 4, w, ahead, a, &x, yb + (r - r0), ldy); break;
            }
        }
    }
}

#define DEF_ROWS(name, dt)                                                                   \
    static void name(const cpu_mm_args *a, const cpu_mat *m, int64_t r0, int64_t r1, float *y, \
                     int64_t ldy) {                                                          \
        rows_fast(dt, a, m, r0, r1, y, ldy);                                                 \
    }
DEF_ROWS(rows_q8_0, HR_DTYPE_Q8_0)
DEF_ROWS(rows_q4_0, HR_DTYPE_Q4_0)
DEF_ROWS(rows_q4_1, HR_DTYPE_Q4_1)
DEF_ROWS(rows_q5_0, HR_DTYPE_Q5_0)
DEF_ROWS(rows_q5_1, HR_DTYPE_Q5_1)
DEF_ROWS(rows_q2_K, HR_DTYPE_Q2_K)
DEF_ROWS(rows_q3_K, HR_DTYPE_Q3_K)
DEF_ROWS(rows_q4_K, HR_DTYPE_Q4_K)
DEF_ROWS(rows_q5_K, HR_DTYPE_Q5_K)
DEF_ROWS(rows_q6_K, HR_DTYPE_Q6_K)
#undef DEF_ROWS

void cpu_mm_avx512_gemv_fast(const cpu_mm_args *a, const cpu_mat *m, int64_t r0, int64_t r1,
                             float *y, int64_t ldy, void *ts) {
    (void)ts;
    switch (m->dtype) {
    case HR_DTYPE_Q8_0: rows_q8_0(a, m, r0, r1, y, ldy); break;
    case HR_DTYPE_Q4_0: rows_q4_0(a, m, r0, r1, y, ldy); break;
    case HR_DTYPE_Q4_1: rows_q4_1(a, m, r0, r1, y, ldy); break;
    case HR_DTYPE_Q5_0: rows_q5_0(a, m, r0, r1, y, ldy); break;
    case HR_DTYPE_Q5_1: rows_q5_1(a, m, r0, r1, y, ldy); break;
    case HR_DTYPE_Q2_K: rows_q2_K(a, m, r0, r1, y, ldy); break;
    case HR_DTYPE_Q3_K: rows_q3_K(a, m, r0, r1, y, ldy); break;
    case HR_DTYPE_Q4_K: rows_q4_K(a, m, r0, r1, y, ldy); break;
    case HR_DTYPE_Q5_K: rows_q5_K(a, m, r0, r1, y, ldy); break;
    case HR_DTYPE_Q6_K: rows_q6_K(a, m, r0, r1, y, ldy); break;
    default: HR_ASSERT(0 && "cpu_mm_avx512_gemv_fast: not a quantized weight dtype");
    }
}
