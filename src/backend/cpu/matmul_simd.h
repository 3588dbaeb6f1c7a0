/*
 * matmul_simd.h — what every SIMD level of the matmul shares (matmul_avx2.c,
 * matmul_avx512.c, matmul_gemv_avx512.c): scalar f16, the unpacking of
 * K-quant scales and of the integer codes of any quantized 32-element block
 * (128-bit operations, the same at both levels), the activation quantizer's
 * scale bookkeeping and the blocked f32 GEMM's driver. What depends on the
 * vector width (conversion to f32 vectors, microkernels, the FAST kernels)
 * stays in the level's file.
 *
 * Only for files compiled with AVX2, FMA and F16C (CMake gives them to every
 * *_avx2.c and *_avx512.c). Where AVX-512BW/VL are on as well, the byte
 * selections in get_codes32 use mask registers instead of compare-and-and
 * (one instruction instead of two or three).
 */
#ifndef HR_BACKEND_CPU_MATMUL_SIMD_H
#define HR_BACKEND_CPU_MATMUL_SIMD_H

#include "backend/cpu/matmul.h"
#include "quant/blocks.h"
#include "util/dtype.h"
#include "util/error.h"

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* Every helper of the kernels: inlined, so constant dtypes and shapes fold. */
#define AI static inline __attribute__((always_inline))

AI float f16s(uint16_t h) { return _cvtsh_ss(h); }

AI __m128i ldu128(const void *p) { return _mm_loadu_si128((const __m128i *)p); }

AI bool is_kquant(hr_dtype dt) {
    return dt == HR_DTYPE_Q2_K || dt == HR_DTYPE_Q3_K || dt == HR_DTYPE_Q4_K ||
           dt == HR_DTYPE_Q5_K || dt == HR_DTYPE_Q6_K;
}

/* Formats whose weights carry a min (w = sc * code + mn). */
AI bool has_min(hr_dtype dt) {
    return dt == HR_DTYPE_Q4_1 || dt == HR_DTYPE_Q5_1 || dt == HR_DTYPE_Q2_K || dt == HR_DTYPE_Q4_K ||
           dt == HR_DTYPE_Q5_K;
}

/* ====================================================================== */
/* K-quant scales                                                         */
/* ====================================================================== */

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

/* K-quant super-block sb of a row, per 16-element sixteenth l: the integer
 * scale in byte l of sc (signed for Q3_K and Q6_K, unsigned else) and the
 * integer min in byte l of mn (zero without a min), with the f16 factors
 * that make the reference's d * sc and dmin * mn (exact products). The
 * levels widen these to f32 (khdr). */
typedef struct {
    __m128i sc, mn;
    float d, dmin;
    bool sgn;
} kscales;

AI kscales k_scales(hr_dtype dt, const uint8_t *row, int64_t sb) {
    kscales k = {.mn = _mm_setzero_si128(), .dmin = 0.0f, .sgn = false};
    switch (dt) {
    case HR_DTYPE_Q2_K: {
        const block_q2_K *b = (const block_q2_K *)(const void *)row + sb;
        const __m128i s = ldu128(b->scales), m4 = _mm_set1_epi8(15);
        k.sc = _mm_and_si128(s, m4);
        k.mn = _mm_and_si128(_mm_srli_epi16(s, 4), m4);
        k.d = f16s(b->d), k.dmin = f16s(b->dmin);
        break;
    }
    case HR_DTYPE_Q3_K: {
        const block_q3_K *b = (const block_q3_K *)(const void *)row + sb;
        k.sc = _mm_sub_epi8(q3_scales(b->scales), _mm_set1_epi8(32));
        k.d = f16s(b->d), k.sgn = true;
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
        /* sub-block j of 32 covers sixteenths 2j and 2j+1 */
        const __m128i vs = _mm_cvtsi64_si128((long long)sc), vm = _mm_cvtsi64_si128((long long)mn);
        k.sc = _mm_unpacklo_epi8(vs, vs);
        k.mn = _mm_unpacklo_epi8(vm, vm);
        k.d = f16s(hd), k.dmin = f16s(hm);
        break;
    }
    case HR_DTYPE_Q6_K: {
        const block_q6_K *b = (const block_q6_K *)(const void *)row + sb;
        k.sc = ldu128(b->scales);
        k.d = f16s(b->d), k.sgn = true;
        break;
    }
    default:
        k.sc = _mm_setzero_si128(), k.d = 0.0f;
        break;
    }
    return k;
}

/* ====================================================================== */
/* The integer codes of 32 weights                                        */
/* ====================================================================== */

/* Byte selections: v + a where bit i of bits (16 bits) is set; v + a where
 * (m & bit) != 0; v - a where (m & bit) == 0. */
#if defined(__AVX512BW__) && defined(__AVX512VL__)
AI __m128i add_at_bits(__m128i v, uint32_t bits, __m128i a) {
    return _mm_mask_add_epi8(v, (__mmask16)bits, v, a);
}
AI __m128i add_if_set(__m128i v, __m128i m, __m128i bit, __m128i a) {
    return _mm_mask_add_epi8(v, _mm_test_epi8_mask(m, bit), v, a);
}
AI __m128i sub_if_clear(__m128i v, __m128i m, __m128i bit, __m128i a) {
    return _mm_mask_sub_epi8(v, _mm_testn_epi8_mask(m, bit), v, a);
}
#else
AI __m128i add_at_bits(__m128i v, uint32_t bits, __m128i a) {
    const __m128i sel = _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m128i bit = _mm_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
    const __m128i b = _mm_shuffle_epi8(_mm_cvtsi32_si128((int)(bits & 0xffff)), sel);
    return _mm_add_epi8(v, _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(b, bit), bit), a));
}
AI __m128i add_if_set(__m128i v, __m128i m, __m128i bit, __m128i a) {
    const __m128i clear = _mm_cmpeq_epi8(_mm_and_si128(m, bit), _mm_setzero_si128());
    return _mm_add_epi8(v, _mm_andnot_si128(clear, a));
}
AI __m128i sub_if_clear(__m128i v, __m128i m, __m128i bit, __m128i a) {
    const __m128i clear = _mm_cmpeq_epi8(_mm_and_si128(m, bit), _mm_setzero_si128());
    return _mm_sub_epi8(v, _mm_and_si128(clear, a));
}
#endif

/* Quantized dtypes: the signed integer codes of elements [32j, 32j + 32) of
 * a row (lo: the first 16, hi: the last 16) and, per 16-element half, the
 * scale and min that make w = sc * code + mn exactly as the reference
 * dequantizer computes it (mn = 0: w = sc * code). h: for K-quants, the
 * super-block's f32 scales (h[l]) and negated mins (h[16 + l]) per sixteenth
 * l, from the level's khdr(). */
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
        c.lo = ldu128(b->qs);
        c.hi = ldu128(b->qs + 16);
        c.sc[0] = c.sc[1] = f16s(b->d);
        break;
    }
    case HR_DTYPE_Q4_0: {
        const block_q4_0 *b = (const block_q4_0 *)(const void *)row + j;
        const __m128i q = ldu128(b->qs), b8 = _mm_set1_epi8(8);
        c.lo = _mm_sub_epi8(_mm_and_si128(q, m4), b8);
        c.hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), m4), b8);
        c.sc[0] = c.sc[1] = f16s(b->d);
        break;
    }
    case HR_DTYPE_Q4_1: {
        const block_q4_1 *b = (const block_q4_1 *)(const void *)row + j;
        const __m128i q = ldu128(b->qs);
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
        const __m128i q = ldu128(qs);
        const __m128i off = _mm_set1_epi8(one ? 0 : 16), b16 = _mm_set1_epi8(16);
        /* written in this order, both levels schedule it as fast as their
         * own copies did (other orders cost 2-3% in Q5_0 decode) */
        const __m128i lo = _mm_and_si128(q, m4), hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
        c.lo = add_at_bits(_mm_sub_epi8(lo, off), hb, b16);
        c.hi = add_at_bits(_mm_sub_epi8(hi, off), hb >> 16, b16);
        c.sc[0] = c.sc[1] = f16s(hd);
        if (one)
            c.mn[0] = c.mn[1] = f16s(hm);
        break;
    }
    case HR_DTYPE_Q2_K: {
        const block_q2_K *b = (const block_q2_K *)(const void *)row + j / 8;
        const __m128i sh = _mm_cvtsi32_si128(2 * (s % 4)), m2 = _mm_set1_epi8(3);
        const uint8_t *q = b->qs + 32 * (s / 4);
        c.lo = _mm_and_si128(_mm_srl_epi16(ldu128(q), sh), m2);
        c.hi = _mm_and_si128(_mm_srl_epi16(ldu128(q + 16), sh), m2);
        c.sc[0] = h[2 * s], c.sc[1] = h[2 * s + 1];
        c.mn[0] = h[16 + 2 * s], c.mn[1] = h[17 + 2 * s];
        break;
    }
    case HR_DTYPE_Q3_K: {
        const block_q3_K *b = (const block_q3_K *)(const void *)row + j / 8;
        const __m128i sh = _mm_cvtsi32_si128(2 * (s % 4)), m2 = _mm_set1_epi8(3);
        const uint8_t *q = b->qs + 32 * (s / 4);
        const __m128i bit = _mm_set1_epi8((char)(1 << s)), b4 = _mm_set1_epi8(4);
        const __m128i lo = _mm_and_si128(_mm_srl_epi16(ldu128(q), sh), m2);
        const __m128i hi = _mm_and_si128(_mm_srl_epi16(ldu128(q + 16), sh), m2);
        /* q = low - 4 unless the hmask bit is set */
        c.lo = sub_if_clear(lo, ldu128(b->hmask), bit, b4);
        c.hi = sub_if_clear(hi, ldu128(b->hmask + 16), bit, b4);
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
        c.lo = _mm_and_si128(_mm_srl_epi16(ldu128(q), sh), m4);
        c.hi = _mm_and_si128(_mm_srl_epi16(ldu128(q + 16), sh), m4);
        if (five) {
            const __m128i bit = _mm_set1_epi8((char)(1 << s)), b16 = _mm_set1_epi8(16);
            c.lo = add_if_set(c.lo, ldu128(qh), bit, b16);
            c.hi = add_if_set(c.hi, ldu128(qh + 16), bit, b16);
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
        const __m128i lo = _mm_and_si128(_mm_srl_epi16(ldu128(ql), shl), m4);
        const __m128i hi = _mm_and_si128(_mm_srl_epi16(ldu128(ql + 16), shl), m4);
        const __m128i hl = _mm_and_si128(_mm_srl_epi16(ldu128(qh), shh), m2);
        const __m128i hh = _mm_and_si128(_mm_srl_epi16(ldu128(qh + 16), shh), m2);
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

/* ====================================================================== */
/* Activation quantization: block scales and code sums                    */
/* ====================================================================== */

/* Per layout, the position within a group of 16 of the scale and sum of
 * block lane (pos32) and of half block lane (pos16): the inverse of
 * cpu_xq_lane where the layout reorders them. */
AI void xq_positions(int pos32[CPU_XQ_LAYOUT_COUNT][16], int pos16[CPU_XQ_LAYOUT_COUNT][16]) {
    for (int l = 0; l < CPU_XQ_LAYOUT_COUNT; l++) {
        for (int lane = 0; lane < 16; lane++)
            pos32[l][lane] = pos16[l][lane] = lane;
        for (int lane = 0; lane < 16; lane++) {
            if (l == CPU_XQ_QUAD)
                pos32[l][cpu_xq_lane((cpu_xq_layout)l, lane)] = lane;
            if (l == CPU_XQ_NATURAL || l == CPU_XQ_K4)
                pos16[l][cpu_xq_lane((cpu_xq_layout)l, lane)] = lane;
        }
    }
}

/* Block ib of an xq row (codes: its start): the scale dv and the code sums
 * of the block (s_lo + s_hi) and of its halves, where layout l puts them. */
AI void xq_put_sums(int8_t *codes, int64_t K, const int pos32[16], const int pos16[16], int64_t ib,
                    float dv, int32_t s_lo, int32_t s_hi) {
    float *d = (float *)(void *)cpu_xq_d(codes, K);
    int32_t *s32 = (int32_t *)(void *)cpu_xq_s32(codes, K);
    float *d16 = (float *)(void *)cpu_xq_d16(codes, K);
    int32_t *s16 = (int32_t *)(void *)cpu_xq_s16(codes, K);
    const int64_t at32 = ib - ib % 16 + pos32[ib % 16];
    d[at32] = dv;
    s32[at32] = s_lo + s_hi;
    for (int h = 0; h < 2; h++) {
        const int64_t ih = 2 * ib + h;
        const int64_t at16 = ih - ih % 16 + pos16[ih % 16];
        d16[at16] = dv;
        s16[at16] = h ? s_hi : s_lo;
    }
}

/* ====================================================================== */
/* EXACT prefill: the blocked f32 GEMM's driver                           */
/* ====================================================================== */
/*
 * A thread owns a tile of at most nc weight rows. For each kc-slice of K it
 * converts the tile's rows to f32 once (to_f32, bit-exact) and packs them as
 * panels of nr rows, [k][nr] (pack_w; nc * kc floats stay in L2); then it
 * runs every mr-row activation panel (packed once per call by the level's
 * gemm_pack_x, [k][mr]) against each weight panel with the level's register
 * microkernel (ukernel). Partial sums of earlier kc-slices are read back from
 * y and added. The level passes its shape and functions as constants into
 * this always-inlined driver: the calls stay direct.
 */
typedef struct {
    int mr, nr;     /* microkernel: activation rows, weight rows (a multiple of 16) */
    int64_t kc, nc; /* slice of K (a multiple of the K-quant super-block), rows per tile */
    void (*to_f32)(hr_dtype dt, const void *row, int64_t k0, int64_t n, float *dst);
    /* nr rows of f32 (row stride ld), columns [0, kp) -> panel [kp][nr] */
    void (*pack_w)(const float *t, int64_t ld, int64_t kp, float *wp);
    /* y[i][0..n) (+)= sum_k xp[k][i] * wp[k][0..n) for i < m; first: y not yet written */
    void (*ukernel)(int m, int64_t kp, const float *xp, const float *wp, float *y, int64_t ldy,
                    int n, bool first);
} gemm_f32;

/* Per-thread scratch: the panels (nc x kc) and the converted rows (nr x kc). */
AI size_t gemm_f32_tscratch(gemm_f32 g) {
    return (size_t)g.nc * (size_t)g.kc * 4 + (size_t)g.nr * (size_t)g.kc * 4 + 64;
}

AI void gemm_f32_run(gemm_f32 g, const cpu_mm_args *a, const cpu_mat *m, int64_t r0, int64_t r1,
                     float *y, int64_t ldy, void *ts) {
    const int64_t K = a->K, n_rows = r1 - r0;
    HR_ASSERT(n_rows <= g.nc);
    const hr_dtype dt = m->dtype;
    const size_t wrb = cpu_mm_row_bytes(dt, K);
    float *wp = (float *)(((uintptr_t)ts + 63) & ~(uintptr_t)63);
    float *rows = wp + g.nc * g.kc;
    const size_t xpanel = (size_t)g.mr * (size_t)cpu_mm_kpad(K);
    const int64_t n_panels = (n_rows + g.nr - 1) / g.nr;
    for (int64_t kc = 0; kc < K; kc += g.kc) {
        const int64_t kl = K - kc < g.kc ? K - kc : g.kc;
        const int64_t kp = (kl + 15) / 16 * 16;
        /* convert and pack this K-slice of the tile */
        for (int64_t p = 0; p < n_panels; p++) {
            for (int i = 0; i < g.nr; i++) {
                const int64_t r = r0 + g.nr * p + i;
                float *dst = rows + (int64_t)i * g.kc;
                if (r < r1) {
                    g.to_f32(dt, (const uint8_t *)m->data + (size_t)r * wrb, kc, kl, dst);
                    memset(dst + kl, 0, sizeof(float) * (size_t)(kp - kl));
                } else {
                    memset(dst, 0, sizeof(float) * (size_t)kp);
                }
            }
            g.pack_w(rows, g.kc, kp, wp + p * g.nr * g.kc);
        }
        for (int64_t b = 0; b < a->B; b += g.mr) {
            const int mr = a->B - b >= g.mr ? g.mr : (int)(a->B - b);
            const float *xp = a->xpack + (size_t)(b / g.mr) * xpanel + (size_t)kc * (size_t)g.mr;
            for (int64_t p = 0; p < n_panels; p++) {
                const int nr = n_rows - g.nr * p >= g.nr ? g.nr : (int)(n_rows - g.nr * p);
                g.ukernel(mr, kp, xp, wp + p * g.nr * g.kc, y + b * ldy + g.nr * p, ldy, nr, kc == 0);
            }
        }
    }
}

#endif
