/*
 * gemv.cu — y (n, N) f32 or ck = x (n, K) ck . W^T (+ bias) for decode, n <= 8.
 *
 * Shapes: n = activation rows of the step (1..CK_GEMV_MAX_ROWS), N = weight
 * rows (outputs), K = weight columns. W (N, K) ck row-major, bias (N) f32.
 *
 * At small n the product is a stream over W: 2 N K bytes read once, a few
 * FLOPs per byte, so the kernel is built to keep HBM busy. Each warp owns RPW
 * consecutive weight rows; lane l reads 16-byte chunks l, l + 32, ... of
 * every one of them, U chunks per row in flight before the first FMA
 * (RPW * U loads of 16 bytes per lane), with an L1-bypassing load that asks
 * L2 for 256-byte sectors. Every weight chunk is used for all n activation
 * rows while it sits in registers, so W is read exactly once for any n <= 8.
 * x is tiny (n K ck) and read through L1 with ordinary cached loads, once per
 * chunk and reused for the RPW rows. Accumulation is f32 (products of two
 * 16-bit floats are exact in f32); lanes combine with a butterfly of shuffles.
 * Rows past N are clamped to N - 1 for loading and not stored, so any N works.
 *
 * Before waiting for the previous kernel (programmatic dependent launch,
 * common.cuh) each warp asks L2 for the first rounds of its rows: weights
 * depend on no kernel, so their first bytes arrive during the previous
 * kernel's tail.
 *
 * Rejected (each with its figures in docs/journal/gemv.md): x staged in
 * shared memory (n K f32 reaches 352 KB at n = 8, K = 11008, beyond the
 * 48 KB a launch gets without an attribute call that graph capture may not
 * allow); split-K across warps, for any weight (a second reduction and a
 * barrier per row; more warps in flight do not shorten a launch whose cost
 * is its ramp and drain); one launch per activation row (reads W n times);
 * a block-contiguous order (slower at every shape: DRAM locality is not
 * what holds this kernel at ~3.5 TB/s); more bytes in flight through
 * cp.async rings in shared memory (deeper rings slower everywhere); a TMA
 * producer warp feeding consumer warps (tall shapes faster, the decode step
 * slower: a fixed split of rows over the SMs turns any SM's late start into
 * the kernel's tail); asking L2 ahead for the next weight's first bytes
 * between GEMVs (slower: the lines most likely leave L2 before use).
 *
 * The aligned path needs K % 8 == 0, W, x 16-byte aligned and ldx % 8 == 0;
 * otherwise the same kernel runs with 2-byte loads (slow, but correct for any
 * K and alignment). n > 8 is split into launches of 8 rows.
 *
 * tests/cuda/gemv_sample_check.cu times the variants on the device (2 rows
 * x 2 loads: 2.45-3.75 TB/s in a single launch on the H200, by shape,
 * against its 4.57 TB/s streaming read).
 */
#include "backend/cuda/common.cuh"

#include <cuda_fp16.h>
#include <stdint.h>

namespace {

constexpr int kGemvThreads = 256; /* 8 warps: small blocks keep the last wave short */
constexpr int kGemvWarps = kGemvThreads / 32;
/* rounds of each row asked into L2 before pdl_wait: 2 rounds of the
 * production shape are 2 KB a row, ~8 MB over a resident grid, about what
 * HBM delivers during the previous kernel's tail */
constexpr int kPrefetchRounds = 2;

struct Bf16Tag {
    using type = __nv_bfloat16; /* a narrow output's element */
};
struct F16Tag {
    using type = __half;
};

/* Two 16-bit floats packed in a 32-bit word (element 0 in the low half) to f32. */
__device__ __forceinline__ void unpack2(Bf16Tag, uint32_t w, float &lo, float &hi) {
    lo = __uint_as_float(w << 16);
    hi = __uint_as_float(w & 0xffff0000u);
}

__device__ __forceinline__ void unpack2(F16Tag, uint32_t w, float &lo, float &hi) {
    lo = __half2float(__ushort_as_half((unsigned short)(w & 0xffffu)));
    hi = __half2float(__ushort_as_half((unsigned short)(w >> 16)));
}

template <class T>
__device__ __forceinline__ void unpack8(uint4 v, float f[8]) {
    unpack2(T(), v.x, f[0], f[1]);
    unpack2(T(), v.y, f[2], f[3]);
    unpack2(T(), v.z, f[4], f[5]);
    unpack2(T(), v.w, f[6], f[7]);
}

/* Weights: read once, never again in this launch, so skip L1 and let L2
 * fetch whole 256-byte sectors (consecutive lanes use all of them). */
__device__ __forceinline__ uint4 load_stream16(const uint16_t *p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

__device__ __forceinline__ void prefetch_l2(const uint16_t *p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

/* Activations: reused by every warp of the SM, keep them in L1. */
__device__ __forceinline__ uint4 load_cached16(const uint16_t *p) {
    return __ldg(reinterpret_cast<const uint4 *>(p));
}

/* 8 elements p[0 .. n_valid-1] (n_valid in 1..8) with 2-byte loads, zeros
 * after: the path for unaligned pointers or K % 8 != 0. */
__device__ __forceinline__ uint4 load_scalar8(const uint16_t *p, int n_valid) {
    uint32_t w[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        uint32_t lo = 2 * j < n_valid ? (uint32_t)p[2 * j] : 0u;
        uint32_t hi = 2 * j + 1 < n_valid ? (uint32_t)p[2 * j + 1] : 0u;
        w[j] = lo | (hi << 16);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

/* NX activation rows, RPW weight rows per warp, U chunks per row in flight.
 * VEC: 16-byte loads (K % 8 == 0, aligned); else 2-byte loads, any K. */
template <class T, int NX, int RPW, int U, bool VEC>
__global__ void __launch_bounds__(kGemvThreads)
    gemv_kernel(void *__restrict__ y, bool y_ck, int64_t ldy, const uint16_t *__restrict__ x,
                int64_t ldx, const uint16_t *__restrict__ W, const float *__restrict__ bias, int N,
                int K) {
    static_assert(RPW * NX <= 32, "one output per lane in the final store");
    const int lane = threadIdx.x & 31;
    const int64_t warp = (int64_t)blockIdx.x * kGemvWarps + (threadIdx.x >> 5);
    const int64_t row0 = warp * RPW;
    if (row0 >= N)
        return; /* whole warp: row0 is warp-uniform */

    const uint16_t *wrow[RPW];
#pragma unroll
    for (int r = 0; r < RPW; r++) {
        int64_t row = row0 + r < N ? row0 + r : (int64_t)N - 1;
        wrow[r] = W + row * (int64_t)K;
    }
    const int n_chunk = (K + 7) / 8; /* 16-byte chunks per row */
    /* the weights are written by no kernel: fetch the first rounds while
     * the kernel before (which writes x) finishes */
    if (VEC) {
#pragma unroll
        for (int u = 0; u < kPrefetchRounds * U; u++) {
            const int c = u * 32 + lane;
#pragma unroll
            for (int r = 0; r < RPW; r++)
                if (c < n_chunk)
                    prefetch_l2(wrow[r] + (int64_t)c * 8);
        }
    }
    pdl_wait();
    pdl_release();

    float acc[RPW][NX];
#pragma unroll
    for (int r = 0; r < RPW; r++)
#pragma unroll
        for (int q = 0; q < NX; q++)
            acc[r][q] = 0.0f;

    for (int base = 0; base < n_chunk; base += 32 * U) {
        /* issue every weight load of this round before using any. The
         * per-chunk branch below is load-bearing: with a branch-free
         * (zero-padded) round ptxas if-converts it and sinks each load next
         * to its FMAs, leaving 2 of 8 in flight (seen in the SASS, CUDA 13) */
        uint4 wv[U][RPW];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = base + u * 32 + lane;
#pragma unroll
            for (int r = 0; r < RPW; r++) {
                if (c < n_chunk)
                    wv[u][r] = VEC ? load_stream16(wrow[r] + (int64_t)c * 8)
                                   : load_scalar8(wrow[r] + (int64_t)c * 8, min(8, K - c * 8));
                else
                    wv[u][r] = make_uint4(0u, 0u, 0u, 0u);
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = base + u * 32 + lane;
            if (c >= n_chunk)
                continue;
            float wf[RPW][8];
#pragma unroll
            for (int r = 0; r < RPW; r++)
                unpack8<T>(wv[u][r], wf[r]);
#pragma unroll
            for (int q = 0; q < NX; q++) {
                const uint16_t *xp = x + q * ldx + (int64_t)c * 8;
                uint4 xv = VEC ? load_cached16(xp) : load_scalar8(xp, min(8, K - c * 8));
                float xf[8];
                unpack8<T>(xv, xf);
#pragma unroll
                for (int r = 0; r < RPW; r++)
#pragma unroll
                    for (int e = 0; e < 8; e++)
                        acc[r][q] = fmaf(wf[r][e], xf[e], acc[r][q]);
            }
        }
    }

    /* butterfly: every lane ends with every sum */
#pragma unroll
    for (int r = 0; r < RPW; r++)
#pragma unroll
        for (int q = 0; q < NX; q++)
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
                acc[r][q] += __shfl_xor_sync(0xffffffffu, acc[r][q], o);

    /* lane r * NX + q stores output (q, row0 + r); indices stay compile-time
     * so acc stays in registers */
#pragma unroll
    for (int r = 0; r < RPW; r++) {
        const int64_t row = row0 + r;
#pragma unroll
        for (int q = 0; q < NX; q++)
            if (lane == r * NX + q && row < N) {
                const float v = bias ? acc[r][q] + bias[row] : acc[r][q];
                if (y_ck)
                    ck_from_f32(static_cast<typename T::type *>(y) + q * ldy + row, v);
                else
                    static_cast<float *>(y)[q * ldy + row] = v;
            }
    }
}

struct GemvArgs {
    void *y;
    bool y_ck;
    int64_t ldy;
    const uint16_t *x;
    int64_t ldx;
    const uint16_t *W;
    const float *bias;
    int N, K;
};

template <class T, int NX, int RPW, int U, bool VEC>
void gemv_launch_cfg(cudaStream_t s, const GemvArgs &a) {
    const int64_t rows_per_block = (int64_t)RPW * kGemvWarps;
    const int64_t n_block = ((int64_t)a.N + rows_per_block - 1) / rows_per_block;
    ck_launch(s, (unsigned)n_block, kGemvThreads, 0, gemv_kernel<T, NX, RPW, U, VEC>, a.y, a.y_ck,
              a.ldy, a.x, a.ldx, a.W, a.bias, a.N, a.K);
}

/* Production choice: 2 rows per warp, 2 chunks per row in flight: fewer
 * loads in flight per lane but more warps resident won at every shape of
 * the gemv_sample_check sweep (figures: docs/journal/gemv.md). */
template <class T, int NX, bool VEC>
void gemv_launch_n(cudaStream_t s, const GemvArgs &a) {
    gemv_launch_cfg<T, NX, 2, 2, VEC>(s, a);
}

template <class T, bool VEC>
void gemv_launch_t(cudaStream_t s, const GemvArgs &a, int n) {
    switch (n) {
    case 1: gemv_launch_n<T, 1, VEC>(s, a); break;
    case 2: gemv_launch_n<T, 2, VEC>(s, a); break;
    case 3: gemv_launch_n<T, 3, VEC>(s, a); break;
    case 4: gemv_launch_n<T, 4, VEC>(s, a); break;
    case 5: gemv_launch_n<T, 5, VEC>(s, a); break;
    case 6: gemv_launch_n<T, 6, VEC>(s, a); break;
    case 7: gemv_launch_n<T, 7, VEC>(s, a); break;
    default: gemv_launch_n<T, 8, VEC>(s, a); break;
    }
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

} // namespace

extern "C" void ck_gemv(cudaStream_t s, void *y, bool y_ck, int64_t ldy, const void *x,
                        int64_t ldx, const void *W, const float *bias, ck_dtype dt, int n, int N,
                        int K) {
    if (n <= 0 || N <= 0 || K < 0)
        return;
    const bool vec = K % 8 == 0 && aligned16(W) && aligned16(x) && (n == 1 || ldx % 8 == 0);
    for (int r0 = 0; r0 < n; r0 += CK_GEMV_MAX_ROWS) {
        const int nr = n - r0 < CK_GEMV_MAX_ROWS ? n - r0 : CK_GEMV_MAX_ROWS;
        const size_t y_elem = y_ck ? 2 : 4;
        GemvArgs a = {static_cast<char *>(y) + (size_t)r0 * (size_t)ldy * y_elem,
                      y_ck,
                      ldy,
                      (const uint16_t *)x + (int64_t)r0 * ldx,
                      ldx,
                      (const uint16_t *)W,
                      bias,
                      N,
                      K};
        if (dt == CK_F16)
            vec ? gemv_launch_t<F16Tag, true>(s, a, nr) : gemv_launch_t<F16Tag, false>(s, a, nr);
        else
            vec ? gemv_launch_t<Bf16Tag, true>(s, a, nr) : gemv_launch_t<Bf16Tag, false>(s, a, nr);
    }
}
