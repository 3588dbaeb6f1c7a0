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
 * Rejected: staging x in shared memory (n K f32 reaches 352 KB at n = 8,
 * K = 11008, beyond the 48 KB a launch gets without an attribute call that
 * graph capture may not allow); split-K across warps (a second reduction and
 * a barrier per row for nothing at these sizes); one launch per activation
 * row (reads W n times); a block-contiguous order (a block owns 16 rows and
 * its 8 warps walk that one stretch in 512-byte pieces, 4 KB of consecutive
 * addresses at a time instead of 16 row streams): slower at every shape on
 * the H200 (2026-11-29, single launch, n = 1: 4096x4096 2.15 vs 2.45 TB/s,
 * 11008x4096 2.82 vs 3.52, 4096x11008 2.82 vs 3.31), so DRAM locality is
 * not what holds the row-per-warp order at ~3.5 TB/s; nor is a lack of bytes
 * in flight: the same order with each lane's chunks landing in a private
 * ring of S shared-memory stages by cp.async (no register cost, output
 * bit-identical) measured, single launch, n = 1, TB/s (prod / S=4 / S=8 /
 * S=12): 4096x4096 2.42 / 2.47 / 2.32 / 2.20, 11008x4096 3.50 / 3.57 /
 * 2.92 / 2.80, 4096x11008 3.30 / 3.07 / 2.97 / 2.85, 32000x4096 3.73 /
 * 4.00 / 3.84 / 3.76 — deeper rings are slower everywhere, and S=4 wins
 * only on the tall shapes (H200, 2026-11-29).
 *
 * The aligned path needs K % 8 == 0, W, x 16-byte aligned and ldx % 8 == 0;
 * otherwise the same kernel runs with 2-byte loads (slow, but correct for any
 * K and alignment). n > 8 is split into launches of 8 rows.
 *
 * History: v1, (RPW, U) = (2, 2) for every n; v2 (this) adds the L2
 * prefetch before pdl_wait. tests/cuda/gemv_sample_check.cu times the
 * variants on the device (H200 targets: 4.3 TB/s copy, 4.57 TB/s streaming
 * read; 2 rows x 2 loads: 2.45-3.75 TB/s single launch, by shape).
 */
#include "backend/cuda/common.cuh"

#include <cuda_fp16.h>
#include <stdint.h>

namespace {

int gemv_tma_enabled = 1; /* ck_set_gemv_tma */

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

/* ---- the bulk-copy path: weights stream into shared memory by TMA.
 *
 * One block per SM, each owning consecutive groups of kTmaRows weight rows.
 * A producer warp copies the block's weights, a stage at a time (the group's
 * kTmaRows rows x one segment of up to SEG columns, one cp.async.bulk per
 * row), into a ring of STAGES stages; each of kTmaRows consumer warps takes
 * its row of a stage from shared memory, multiplies it with x (read through
 * L1) and hands the stage back. One thread keeps up to STAGES x 32 KB in
 * flight per SM, where the row-per-warp kernel above needs every lane's
 * registers for its 64 bytes. The producer never waits for the previous
 * kernel (weights depend on none): with programmatic dependent launch the
 * first STAGES stages arrive while that kernel (a norm, the attention)
 * still runs, so HBM stays busy across the kernel boundary.
 * Weights are copied with an L2 evict-first hint: read once per step, they
 * should not push the KV cache and activations out of L2. */
constexpr int kTmaRows = 8;                      /* rows of a stage, one per consumer warp */
constexpr int kTmaThreads = (kTmaRows + 1) * 32; /* + the producer warp */

__device__ __forceinline__ uint32_t smem_u32(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void mbar_init(uint64_t *bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count)
                 : "memory");
}

/* one arrival that also announces the bytes the stage's copies will bring */
__device__ __forceinline__ void mbar_arrive_expect(uint64_t *bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)),
                 "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}

/* until the barrier's phase of this parity has completed */
__device__ __forceinline__ void mbar_wait(uint64_t *bar, unsigned parity) {
    uint32_t done;
    do {
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done)
                     : "r"(smem_u32(bar)), "r"(parity)
                     : "memory");
    } while (!done);
}

__device__ __forceinline__ void bulk_copy(void *dst, const void *src, unsigned bytes,
                                          uint64_t *bar, uint64_t policy) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                 ".L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar)), "l"(policy)
                 : "memory");
}

/* Rows of W are cut into n_seg segments of seg_len columns (the last one
 * shorter; seg_len <= SEG, a multiple of 8). Unit i of a block = (group
 * g0 + i / n_seg, segment i % n_seg) lands in stage i % STAGES. */
template <class T, int NX, int STAGES, int SEG, int BPS>
__global__ void __launch_bounds__(kTmaThreads, BPS)
    gemv_tma_kernel(void *__restrict__ y, bool y_ck, int64_t ldy, const uint16_t *__restrict__ x,
                    int64_t ldx, const uint16_t *__restrict__ W, const float *__restrict__ bias,
                    int N, int K, int seg_len, int n_seg) {
    static_assert(SEG % 256 == 0, "a lane takes whole 16-byte chunks, 32 lanes a round");
    static_assert(NX <= 32, "lane q stores output q");
    extern __shared__ __align__(128) uint16_t stage_buf[]; /* STAGES x kTmaRows x SEG */
    __shared__ uint64_t full[STAGES], empty[STAGES];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int n_group = (N + kTmaRows - 1) / kTmaRows;
    const int g0 = (int)((int64_t)blockIdx.x * n_group / gridDim.x);
    const int g1 = (int)((int64_t)(blockIdx.x + 1) * n_group / gridDim.x);
    const int n_unit = (g1 - g0) * n_seg;

    if (threadIdx.x == 0) {
        for (int st = 0; st < STAGES; st++) {
            mbar_init(&full[st], 1);
            mbar_init(&empty[st], kTmaRows);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (warp == kTmaRows) { /* the producer */
        if (lane == 0) {
            uint64_t policy;
            asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
            for (int i = 0; i < n_unit; i++) {
                const int st = i % STAGES;
                if (i >= STAGES) /* its previous unit consumed by all 8 warps */
                    mbar_wait(&empty[st], (unsigned)(i / STAGES - 1) & 1u);
                const int g = g0 + i / n_seg, c0 = (i % n_seg) * seg_len;
                const int len = min(seg_len, K - c0);
                const int rows = min(kTmaRows, N - g * kTmaRows);
                const uint16_t *src = W + (int64_t)g * kTmaRows * K + c0;
                uint16_t *dst = stage_buf + (size_t)st * kTmaRows * SEG;
                mbar_arrive_expect(&full[st], (unsigned)(rows * len * 2));
                if (n_seg == 1) /* whole rows: one contiguous stretch of W */
                    bulk_copy(dst, src, (unsigned)(rows * K) * 2u, &full[st], policy);
                else
                    for (int r = 0; r < rows; r++)
                        bulk_copy(dst + (size_t)r * SEG, src + (int64_t)r * K,
                                  (unsigned)len * 2u, &full[st], policy);
            }
        }
        return;
    }

    pdl_wait(); /* x is the previous kernel's output */
    pdl_release();
    float acc[NX];
#pragma unroll
    for (int q = 0; q < NX; q++)
        acc[q] = 0.0f;
    for (int i = 0; i < n_unit; i++) {
        const int st = i % STAGES, s = i % n_seg;
        const int g = g0 + i / n_seg, c0 = s * seg_len;
        const int n_chunk = min(seg_len, K - c0) / 8;
        const int64_t row = (int64_t)g * kTmaRows + warp;
        mbar_wait(&full[st], (unsigned)(i / STAGES) & 1u);
        if (row < N) {
            const int ld_stage = n_seg == 1 ? K : SEG; /* as the producer laid it out */
            const uint4 *w4 = reinterpret_cast<const uint4 *>(
                stage_buf + (size_t)st * kTmaRows * SEG + (size_t)warp * ld_stage);
#pragma unroll
            for (int j = 0; j < SEG / 256; j++) {
                const int c = j * 32 + lane;
                if (c < n_chunk) {
                    float wf[8];
                    unpack8<T>(w4[c], wf);
#pragma unroll
                    for (int q = 0; q < NX; q++) {
                        float xf[8];
                        unpack8<T>(load_cached16(x + q * ldx + c0 + c * 8), xf);
#pragma unroll
                        for (int e = 0; e < 8; e++)
                            acc[q] = fmaf(wf[e], xf[e], acc[q]);
                    }
                }
            }
        }
        __syncwarp();
        if (lane == 0)
            mbar_arrive(&empty[st]); /* the producer may refill the stage */
        if (s == n_seg - 1) {       /* the row is complete */
#pragma unroll
            for (int q = 0; q < NX; q++) {
                const float v = warp_sum(acc[q]);
                if (lane == q && row < N) {
                    const float out = bias ? v + bias[row] : v;
                    if (y_ck)
                        ck_from_f32(static_cast<typename T::type *>(y) + q * ldy + row, out);
                    else
                        static_cast<float *>(y)[q * ldy + row] = out;
                }
                acc[q] = 0.0f;
            }
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

/* One block per SM (fewer when N has fewer groups); segments as long as SEG
 * allows, of equal length but the last. */
template <class T, int NX, int STAGES, int SEG, int BPS>
void gemv_tma_launch_cfg(cudaStream_t s, const GemvArgs &a) {
    auto kernel = gemv_tma_kernel<T, NX, STAGES, SEG, BPS>;
    const int smem = STAGES * kTmaRows * SEG * 2;
    /* above 48 KB a kernel must ask; set before every launch: it is per
     * device, and allowed during graph capture */
    (void)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    int dev = 0, n_sm = 0;
    (void)cudaGetDevice(&dev);
    (void)cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev);
    const int n_group = (a.N + kTmaRows - 1) / kTmaRows;
    /* segments start at multiples of 128 bytes from the row's start */
    const int n_seg = (a.K + SEG - 1) / SEG;
    const int seg_len = ((a.K + n_seg - 1) / n_seg + 63) / 64 * 64;
    const int grid = n_group < n_sm * BPS ? n_group : n_sm * BPS;
    ck_launch(s, (unsigned)grid, kTmaThreads, (size_t)smem, kernel, a.y, a.y_ck, a.ldy, a.x, a.ldx,
              a.W, a.bias, a.N, a.K, seg_len, n_seg);
}

/* Production choice: 2 rows per warp, 2 chunks per row in flight. Measured
 * on the H200 (2026-11-29, tests/cuda/gemv_sample_check.cu sweep, n = 1,
 * single launch): 11008x4096 3.45 TB/s (U=4: 3.05), 4096x11008 3.22 (U=4:
 * 2.91), 32000x4096 3.80 (U=4: 3.79): fewer loads in flight per lane but
 * more warps resident wins at every shape. */
template <class T, int NX, bool VEC>
void gemv_launch_n(cudaStream_t s, const GemvArgs &a) {
    if constexpr (VEC) {
        if (a.K > 0 && gemv_tma_enabled == 1)
            return gemv_tma_launch_cfg<T, NX, 4, 2048, 1>(s, a);
        if (a.K > 0 && gemv_tma_enabled == 2)
            return gemv_tma_launch_cfg<T, NX, 3, 2048, 2>(s, a);
        if (a.K > 0 && gemv_tma_enabled == 3)
            return gemv_tma_launch_cfg<T, NX, 2, 4096, 1>(s, a);
        if (a.K > 0 && gemv_tma_enabled == 4)
            return gemv_tma_launch_cfg<T, NX, 3, 4096, 1>(s, a);
        if (a.K > 0 && gemv_tma_enabled == 5 && a.N >= 12288 && NX == 1)
            return gemv_tma_launch_cfg<T, NX, 6, 1024, 2>(s, a);
        if (a.K > 0 && gemv_tma_enabled == 6 && a.N >= 12288 && NX == 1)
            return gemv_tma_launch_cfg<T, NX, 4, 2048, 1>(s, a);
    }
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

extern "C" void ck_set_gemv_tma(int on) { gemv_tma_enabled = on; }

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
