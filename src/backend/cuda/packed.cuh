/*
 * packed.cuh — what the kernels of packed weights share (gemv_packed.cu,
 * dequant_packed.cu): the loads, the 8-bit activations' layout, and the
 * decoding of 8 consecutive elements of a packed row exactly as quant/
 * computes them.
 *
 * The helpers are __host__ __device__ with a host path for the device-only
 * intrinsics, so a host program can run the kernels' arithmetic lane by lane
 * (how their indexing was checked without a GPU).
 */
#ifndef HR_BACKEND_CUDA_PACKED_CUH
#define HR_BACKEND_CUDA_PACKED_CUH

#include "backend/cuda/kernels_packed.h"
#include "quant/blocks.h" /* QUANT_NF4_VALUES, QUANT_FP4_VALUES */

#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

#ifndef __CUDA_ARCH__
#include "util/fp16.h" /* the host path of pk_f16 */
#endif

#define PK_HD __host__ __device__ __forceinline__
/* #pragma unroll for the device pass only (the host compiler warns on it) */
#ifdef __CUDA_ARCH__
#define PK_UNROLL _Pragma("unroll")
#else
#define PK_UNROLL
#endif

/* ---- loads. Weights are read once per launch: skip L1 and let L2 fetch
 * whole 256-byte sectors (neighbouring lanes use them), as gemv.cu. */
PK_HD uint4 pk_ld_stream16(const void *p) {
#ifdef __CUDA_ARCH__
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
#else
    uint4 v;
    memcpy(&v, p, 16);
    return v;
#endif
}

/* the small side planes (scales, high bits): read once too */
PK_HD uint2 pk_ld_stream8(const void *p) {
#ifdef __CUDA_ARCH__
    uint2 v;
    asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
#else
    uint2 v;
    memcpy(&v, p, 8);
    return v;
#endif
}

PK_HD uint32_t pk_ld_stream4(const void *p) {
#ifdef __CUDA_ARCH__
    uint32_t v;
    asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
#else
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
#endif
}

PK_HD uint32_t pk_ld_stream2(const void *p) {
#ifdef __CUDA_ARCH__
    unsigned short v;
    asm("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
#else
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
#endif
}

/* activations: reused by every warp of an SM, so through L1 */
PK_HD uint4 pk_ld_cached16(const void *p) {
#ifdef __CUDA_ARCH__
    return __ldg(reinterpret_cast<const uint4 *>(p));
#else
    uint4 v;
    memcpy(&v, p, 16);
    return v;
#endif
}

PK_HD float pk_ld_cached_f32(const float *p) {
#ifdef __CUDA_ARCH__
    return __ldg(p);
#else
    return *p;
#endif
}

/* ---- arithmetic */

PK_HD float pk_f16(uint32_t h) {
#ifdef __CUDA_ARCH__
    return __half2float(__ushort_as_half((unsigned short)(h & 0xffffu)));
#else
    return hr_f16_to_f32((uint16_t)(h & 0xffffu));
#endif
}

/* sum of the four int8 products of a and b, plus c */
PK_HD int pk_dp4a(int a, int b, int c) {
#ifdef __CUDA_ARCH__
    return __dp4a(a, b, c);
#else
    for (int i = 0; i < 4; i++)
        c += (int)(int8_t)(uint8_t)((uint32_t)a >> (8 * i)) *
             (int)(int8_t)(uint8_t)((uint32_t)b >> (8 * i));
    return c;
#endif
}

/* each byte of v minus the matching byte of k, modulo 256 */
PK_HD uint32_t pk_vsub4(uint32_t v, uint32_t k) {
#ifdef __CUDA_ARCH__
    return __vsub4(v, k);
#else
    uint32_t r = 0;
    for (int i = 0; i < 4; i++)
        r |= (uint32_t)(uint8_t)((v >> (8 * i)) - (k >> (8 * i))) << (8 * i);
    return r;
#endif
}

/* byte n of the result = byte (s >> 4n) & 7 of the pair (x: bytes 0..3,
 * y: 4..7), n = 0..3 */
PK_HD uint32_t pk_byte_perm(uint32_t x, uint32_t y, uint32_t s) {
#ifdef __CUDA_ARCH__
    return __byte_perm(x, y, s);
#else
    const uint64_t v = (uint64_t)x | (uint64_t)y << 32;
    uint32_t r = 0;
    for (int n = 0; n < 4; n++)
        r |= (uint32_t)(uint8_t)(v >> (8 * ((s >> (4 * n)) & 7u))) << (8 * n);
    return r;
#endif
}

/* c + the two products of the int16 halves of a with int8 bytes 0, 1 (lo)
 * or 2, 3 (hi) of b */
PK_HD int pk_dp2a_lo(uint32_t a, uint32_t b, int c) {
#ifdef __CUDA_ARCH__
    return __dp2a_lo((int)a, (int)b, c);
#else
    return c + (int)(int16_t)(a & 0xffffu) * (int)(int8_t)(uint8_t)b +
           (int)(int16_t)(a >> 16) * (int)(int8_t)(uint8_t)(b >> 8);
#endif
}
PK_HD int pk_dp2a_hi(uint32_t a, uint32_t b, int c) {
#ifdef __CUDA_ARCH__
    return __dp2a_hi((int)a, (int)b, c);
#else
    return c + (int)(int16_t)(a & 0xffffu) * (int)(int8_t)(uint8_t)(b >> 16) +
           (int)(int16_t)(a >> 16) * (int)(int8_t)(uint8_t)(b >> 24);
#endif
}

/* The reference's float products, never contracted into an FMA (nvcc
 * contracts a * b + c by default; quant/ is compiled with
 * -ffp-contract=off). */
PK_HD float pk_mul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
PK_HD float pk_add(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
PK_HD float pk_sub(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

/* Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7) from the 12
 * scale bytes as three little-endian words (quant/blocks.h's rule, done a
 * word at a time) */
PK_HD void pk_k4_scale_min(uint32_t s0, uint32_t s1, uint32_t s2, int j, int &sc, int &mn) {
    const uint32_t scw = j < 4 ? s0 & 0x3f3f3f3fu : (s2 & 0x0f0f0f0fu) | ((s0 >> 2) & 0x30303030u);
    const uint32_t mnw =
        j < 4 ? s1 & 0x3f3f3f3fu : ((s2 >> 4) & 0x0f0f0f0fu) | ((s1 >> 2) & 0x30303030u);
    const int sh = 8 * (j & 3);
    sc = (int)((scw >> sh) & 0xffu);
    mn = (int)((mnw >> sh) & 0xffu);
}

/* ---- NF4 and FP4: bitsandbytes' codebooks (quant/blocks.h)
 *
 * Exact decoding (pk_decode8) looks the f32 value up in a table the kernel
 * keeps in shared memory (pk_codebook_to_shared): 8 lanes asking constant
 * memory for 8 different codes would be served one after another. The
 * GEMV multiplies integers instead, as the CPU's FAST kernel does
 * (cpu/matmul_nf4_avx512.c): the table rounded once to multiples of 2^-14
 * (each weight within 2^-15 of its block's absmax of the exact one), as
 * 16-bit values against the 8-bit activations (__dp2a). The 16 values'
 * low and high bytes sit in 8 words, and __byte_perm looks up four codes
 * at once. */
__host__ __device__ constexpr bool pk_is_codebook(int ty) { return ty == PACKED_NF4 || ty == PACKED_FP4; }

constexpr float kPkCodebook[2][16] = {QUANT_NF4_VALUES, QUANT_FP4_VALUES};
#define PK_CB_ONE 16384.0f /* 2^14: the 16-bit table's 1.0 */

/* round to nearest, halves away from zero (no value of either table is a
 * half: packed_check compares with lrintf) */
constexpr int pk_cb16(float v) {
    return v >= 0.0f ? (int)(v * PK_CB_ONE + 0.5f) : -(int)(-v * PK_CB_ONE + 0.5f);
}

struct PkCbWords {
    uint32_t w[8]; /* 0..3: low bytes of values 4i..4i+3; 4..7: their high bytes */
};
constexpr PkCbWords pk_cb_words(int tab) {
    PkCbWords r{};
    for (int i = 0; i < 16; i++) {
        const uint32_t v = (uint32_t)pk_cb16(kPkCodebook[tab][i]) & 0xffffu;
        r.w[i / 4] |= (v & 0xffu) << (8 * (i % 4));
        r.w[4 + i / 4] |= (v >> 8) << (8 * (i % 4));
    }
    return r;
}
static __constant__ PkCbWords pk_cb_words_dev[2] = {pk_cb_words(0), pk_cb_words(1)};
static __constant__ float pk_codebook_dev[2][16] = {QUANT_NF4_VALUES, QUANT_FP4_VALUES};

PK_HD uint32_t pk_cb_word(int tab, int i) {
#ifdef __CUDA_ARCH__
    return pk_cb_words_dev[tab].w[i];
#else
    static constexpr PkCbWords host[2] = {pk_cb_words(0), pk_cb_words(1)};
    return host[tab].w[i];
#endif
}

/* The 16-bit values of four codes (one a byte of c, each < 16) of table
 * tab, paired for __dp2a: w01 = (v0, v1), w23 = (v2, v3). */
PK_HD void pk_cb_lookup4(int tab, uint32_t c, uint32_t &w01, uint32_t &w23) {
    /* selector nibbles c0..c3 with bit 3 cleared, and a byte mask of the
     * codes >= 8, which take the table's upper half */
    const uint32_t sel = pk_byte_perm(c | c >> 4, 0u, 0x0020u) & 0x7777u;
    const uint32_t up = ((c >> 3) & 0x01010101u) * 0xffu;
    const uint32_t lo = (pk_byte_perm(pk_cb_word(tab, 0), pk_cb_word(tab, 1), sel) & ~up) |
                        (pk_byte_perm(pk_cb_word(tab, 2), pk_cb_word(tab, 3), sel) & up);
    const uint32_t hi = (pk_byte_perm(pk_cb_word(tab, 4), pk_cb_word(tab, 5), sel) & ~up) |
                        (pk_byte_perm(pk_cb_word(tab, 6), pk_cb_word(tab, 7), sel) & up);
    w01 = pk_byte_perm(lo, hi, 0x5140u);
    w23 = pk_byte_perm(lo, hi, 0x7362u);
}

/* ---- the 8-bit activations (kernels_packed.h): section offsets */
PK_HD size_t pk_align16(size_t b) { return (b + 15) / 16 * 16; }

struct PkXq {
    const int8_t *codes; /* (n, K) */
    const float *d, *sd; /* (n, K/32) */
};

PK_HD size_t pk_xq_d_off(int n, int K) { return pk_align16((size_t)n * (size_t)K); }
PK_HD size_t pk_xq_sd_off(int n, int K) {
    return pk_xq_d_off(n, K) + pk_align16((size_t)n * (size_t)(K / 32) * 4);
}

PK_HD PkXq pk_xq_view(const void *xq, int n, int K) {
    const char *b = static_cast<const char *>(xq);
    PkXq v;
    v.codes = reinterpret_cast<const int8_t *>(b);
    v.d = reinterpret_cast<const float *>(b + pk_xq_d_off(n, K));
    v.sd = reinterpret_cast<const float *>(b + pk_xq_sd_off(n, K));
    return v;
}

/* ---- plane rows: the kernels' view of a packed_matrix */
struct PkPlanes {
    const uint8_t *q, *h, *s, *d;
    int64_t rq, rh, rs, rd; /* row bytes of each plane */
    int N, K;
    /* NF4/FP4: the f32 codebook pk_decode8 reads (the host's table; a
     * kernel points it at its shared copy: pk_codebook_to_shared) */
    const float *tab;
};

static inline PkPlanes pk_planes(const packed_matrix *W) {
    PkPlanes p;
    p.q = W->plane[PACKED_PLANE_Q];
    p.h = W->plane[PACKED_PLANE_H];
    p.s = W->plane[PACKED_PLANE_S];
    p.d = W->plane[PACKED_PLANE_D];
    p.rq = W->row_bytes[PACKED_PLANE_Q];
    p.rh = W->row_bytes[PACKED_PLANE_H];
    p.rs = W->row_bytes[PACKED_PLANE_S];
    p.rd = W->row_bytes[PACKED_PLANE_D];
    p.N = (int)W->N;
    p.K = (int)W->K;
    p.tab = pk_is_codebook(W->type) ? kPkCodebook[W->type == PACKED_FP4] : nullptr;
    return p;
}

#ifdef __CUDACC__
/* For a kernel that decodes NF4/FP4 with pk_decode8: the block's shared
 * copy of the f32 codebook, p.tab pointed at it. Every thread of the block
 * calls it (a barrier), before any returns. */
template <int TY> __device__ __forceinline__ void pk_codebook_to_shared(PkPlanes &p) {
    if constexpr (pk_is_codebook(TY)) {
        __shared__ float tab[16];
        if (threadIdx.x < 16)
            tab[threadIdx.x] = pk_codebook_dev[TY == PACKED_FP4][threadIdx.x];
        __syncthreads();
        p.tab = tab;
    }
}
#endif

/* Elements e0 .. e0 + 7 (e0 % 8 == 0) of row `row`, in f32, evaluated as
 * quant/q_legacy.c, q_kquants.c and q_codebook.c do (the same products in the same
 * order, so bit for bit). Bytes come from 8-byte loads: every group of 8
 * lies in one block and, within it, in 8 consecutive code bytes. */
template <int TY>
PK_HD void pk_decode8(const PkPlanes &p, int64_t row, int e0, float out[8]) {
    const uint8_t *q = p.q + row * p.rq;
    const uint8_t *s = p.s + row * p.rs;
    if (TY == PACKED_Q8_0) {
        const int b = e0 / 32;
        const uint2 c = pk_ld_stream8(q + e0);
        const float d = pk_f16(pk_ld_stream2(s + 2 * b));
PK_UNROLL
        for (int i = 0; i < 8; i++) {
            const uint32_t w = i < 4 ? c.x : c.y;
            out[i] = pk_mul((float)(int8_t)(uint8_t)(w >> (8 * (i & 3))), d);
        }
    } else if (TY == PACKED_Q4_0 || TY == PACKED_Q4_1 || TY == PACKED_Q5_0 ||
               TY == PACKED_Q5_1) {
        /* element j < 16: low nibble of byte j; j >= 16: high nibble of byte j - 16 */
        const int b = e0 / 32, j0 = e0 % 32;
        const uint2 c = pk_ld_stream8(q + 16 * b + (j0 & 15));
        const int shift = j0 >= 16 ? 4 : 0;
        uint32_t hb = 0; /* fifth bits of the 8 elements */
        if (TY == PACKED_Q5_0 || TY == PACKED_Q5_1)
            hb = pk_ld_stream4(p.h + row * p.rh + 4 * b) >> j0;
        float d, m = 0.0f;
        if (TY == PACKED_Q4_1 || TY == PACKED_Q5_1) {
            const uint32_t dm = pk_ld_stream4(s + 4 * b);
            d = pk_f16(dm);
            m = pk_f16(dm >> 16);
        } else {
            d = pk_f16(pk_ld_stream2(s + 2 * b));
        }
PK_UNROLL
        for (int i = 0; i < 8; i++) {
            const uint32_t w = i < 4 ? c.x : c.y;
            int code = (int)((w >> (8 * (i & 3) + shift)) & 15u);
            if (TY == PACKED_Q5_0 || TY == PACKED_Q5_1)
                code |= (int)((hb >> i) & 1u) << 4;
            if (TY == PACKED_Q4_0)
                out[i] = pk_mul((float)(code - 8), d);
            else if (TY == PACKED_Q5_0)
                out[i] = pk_mul((float)(code - 16), d);
            else /* y = code * d; out = y + m */
                out[i] = pk_add(pk_mul((float)code, d), m);
        }
    } else if (TY == PACKED_Q4_K || TY == PACKED_Q5_K) {
        /* sub-block j = e / 32 lies in qs[32 (j / 2) + n], low nibble for
         * even j, high for odd */
        const int sb = e0 / 256, e = e0 % 256, j = e / 32, n0 = e % 32;
        const uint2 c = pk_ld_stream8(q + 128 * sb + 32 * (j / 2) + n0);
        const int shift = 4 * (j & 1);
        const uint4 sc4 = pk_ld_stream16(s + 16 * sb); /* d | dmin, scales[12] */
        int sc, mn;
        pk_k4_scale_min(sc4.y, sc4.z, sc4.w, j, sc, mn);
        const float d1 = pk_mul(pk_f16(sc4.x), (float)sc);
        const float m1 = pk_mul(pk_f16(sc4.x >> 16), (float)mn);
        uint2 hq = make_uint2(0u, 0u);
        if (TY == PACKED_Q5_K)
            hq = pk_ld_stream8(p.h + row * p.rh + 32 * sb + n0); /* qh[n] bit j */
PK_UNROLL
        for (int i = 0; i < 8; i++) {
            const uint32_t w = i < 4 ? c.x : c.y;
            int code = (int)((w >> (8 * (i & 3) + shift)) & 15u);
            if (TY == PACKED_Q5_K) {
                const uint32_t hw = i < 4 ? hq.x : hq.y;
                code += (int)((hw >> (8 * (i & 3) + j)) & 1u) << 4;
            }
            out[i] = pk_sub(pk_mul(d1, (float)code), m1);
        }
    } else if (pk_is_codebook(TY)) {
        /* element j < 32: low nibble of byte j; j >= 32: high nibble of byte j - 32 */
        const int b = e0 / 64, j0 = e0 % 64;
        const uint2 c = pk_ld_stream8(q + 32 * b + (j0 & 31));
        const int shift = j0 >= 32 ? 4 : 0;
        const float d = pk_f16(pk_ld_stream2(s + 2 * b));
PK_UNROLL
        for (int i = 0; i < 8; i++) {
            const uint32_t w = i < 4 ? c.x : c.y;
            out[i] = pk_mul(p.tab[(w >> (8 * (i & 3) + shift)) & 15u], d);
        }
    } else { /* PACKED_Q6_K */
        const int sb = e0 / 256, e = e0 % 256, hf = e / 128, quarter = (e % 128) / 32,
                  n0 = e % 32;
        const uint2 lo = pk_ld_stream8(q + 128 * sb + 64 * hf + 32 * (quarter & 1) + n0);
        const uint2 hi = pk_ld_stream8(p.h + row * p.rh + 64 * sb + 32 * hf + n0);
        const int lshift = 4 * (quarter >> 1), hshift = 2 * quarter;
        const int8_t scale = (int8_t)(uint8_t)(pk_ld_stream2(s + 16 * sb + 2 * (e / 32)) >>
                                                (8 * ((e / 16) & 1)));
        const float d = pk_f16(pk_ld_stream2(p.d + row * p.rd + 2 * sb));
        const float ds = pk_mul(d, (float)scale);
PK_UNROLL
        for (int i = 0; i < 8; i++) {
            const uint32_t lw = i < 4 ? lo.x : lo.y, hw = i < 4 ? hi.x : hi.y;
            const int low = (int)((lw >> (8 * (i & 3) + lshift)) & 15u);
            const int high = (int)((hw >> (8 * (i & 3) + hshift)) & 3u);
            out[i] = pk_mul(ds, (float)((low | high << 4) - 32));
        }
    }
}

/* Calls f.template operator()<TY>() with TY the packed type t. */
#define PK_DISPATCH(t, ...)                                                                    \
    do {                                                                                       \
        switch (t) {                                                                           \
        case PACKED_Q8_0: { constexpr int TY = PACKED_Q8_0; __VA_ARGS__; } break;             \
        case PACKED_Q4_0: { constexpr int TY = PACKED_Q4_0; __VA_ARGS__; } break;             \
        case PACKED_Q4_1: { constexpr int TY = PACKED_Q4_1; __VA_ARGS__; } break;             \
        case PACKED_Q5_0: { constexpr int TY = PACKED_Q5_0; __VA_ARGS__; } break;             \
        case PACKED_Q5_1: { constexpr int TY = PACKED_Q5_1; __VA_ARGS__; } break;             \
        case PACKED_Q4_K: { constexpr int TY = PACKED_Q4_K; __VA_ARGS__; } break;             \
        case PACKED_Q5_K: { constexpr int TY = PACKED_Q5_K; __VA_ARGS__; } break;             \
        case PACKED_Q6_K: { constexpr int TY = PACKED_Q6_K; __VA_ARGS__; } break;             \
        case PACKED_NF4: { constexpr int TY = PACKED_NF4; __VA_ARGS__; } break;               \
        case PACKED_FP4: { constexpr int TY = PACKED_FP4; __VA_ARGS__; } break;               \
        default: break;                                                                        \
        }                                                                                      \
    } while (0)

#endif
