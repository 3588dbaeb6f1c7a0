/*
 * matmul_simd.h — small helpers every SIMD level of the matmul shares
 * (matmul_avx2.c, matmul_avx512.c, matmul_gemv_avx512.c): scalar f16, the
 * K-quant test and the unpacking of K-quant sub-block scales. Only for files
 * compiled with F16C (CMake gives it to every *_avx2.c and *_avx512.c).
 */
#ifndef HR_BACKEND_CPU_MATMUL_SIMD_H
#define HR_BACKEND_CPU_MATMUL_SIMD_H

#include "util/dtype.h"

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static inline __attribute__((always_inline)) float f16s(uint16_t h) { return _cvtsh_ss(h); }

static inline __attribute__((always_inline)) bool is_kquant(hr_dtype dt) {
    return dt == HR_DTYPE_Q2_K || dt == HR_DTYPE_Q3_K || dt == HR_DTYPE_Q4_K ||
           dt == HR_DTYPE_Q5_K || dt == HR_DTYPE_Q6_K;
}

/* Q4_K/Q5_K: the 8 six-bit scales and mins of a super-block (blocks.h), as
 * bytes 0..7 of *sc and *mn, unpacked with 32-bit operations (byte-register
 * arithmetic creates false dependencies on AMD cores). */
static inline __attribute__((always_inline)) void k4_scales(const uint8_t *s, uint64_t *sc,
                                                            uint64_t *mn) {
    uint32_t u[3];
    memcpy(u, s, 12);
    *sc = (uint64_t)(u[0] & 0x3f3f3f3fu) |
          (uint64_t)((u[2] & 0x0f0f0f0fu) | ((u[0] >> 2) & 0x30303030u)) << 32;
    *mn = (uint64_t)(u[1] & 0x3f3f3f3fu) |
          (uint64_t)(((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 2) & 0x30303030u)) << 32;
}

/* Q3_K: the 16 six-bit scales (biased by 32) as 16 bytes (blocks.h). */
static inline __attribute__((always_inline)) __m128i q3_scales(const uint8_t *s) {
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

#endif
