/*
 * common.cuh — device helpers shared by the kernels: the two 16-bit types
 * behind ck_dtype, conversions, warp and block reductions, and the dispatch
 * from the run-time ck_dtype to a template instance.
 */
#ifndef HR_BACKEND_CUDA_COMMON_CUH
#define HR_BACKEND_CUDA_COMMON_CUH

#include "backend/cuda/kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

__device__ __forceinline__ float ck_to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float ck_to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ void ck_from_f32(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void ck_from_f32(__half *p, float v) { *p = __float2half_rn(v); }
/* f32 through the same names, for kernels that take either */
__device__ __forceinline__ float ck_to_f32(float v) { return v; }
__device__ __forceinline__ void ck_from_f32(float *p, float v) { *p = v; }

/* N consecutive 16-bit elements (1, 2, 4 or 8) as one load or store of
 * 2N bytes (p aligned to it), as N floats */
template <int N> struct ck_vec;
template <> struct ck_vec<1> { typedef uint16_t type; };
template <> struct ck_vec<2> { typedef uint32_t type; };
template <> struct ck_vec<4> { typedef uint2 type; };
template <> struct ck_vec<8> { typedef uint4 type; };

template <typename T, int N> __device__ __forceinline__ void ck_load_n(const T *p, float f[N]) {
    const typename ck_vec<N>::type v = *reinterpret_cast<const typename ck_vec<N>::type *>(p);
    T h[N];
    memcpy(h, &v, sizeof v);
#pragma unroll
    for (int e = 0; e < N; e++)
        f[e] = ck_to_f32(h[e]);
}

template <typename T, int N> __device__ __forceinline__ void ck_store_n(T *p, const float f[N]) {
    T h[N];
#pragma unroll
    for (int e = 0; e < N; e++)
        ck_from_f32(&h[e], f[e]);
    typename ck_vec<N>::type v;
    memcpy(&v, h, sizeof v);
    *reinterpret_cast<typename ck_vec<N>::type *>(p) = v;
}

/* Four floats rounded to ck and stored with one 8-byte store (p 8-byte
 * aligned): the vectorised row kernels' output. */
template <typename T> __device__ __forceinline__ void ck_store4(T *p, float4 v) {
    T h[4];
    ck_from_f32(&h[0], v.x);
    ck_from_f32(&h[1], v.y);
    ck_from_f32(&h[2], v.z);
    ck_from_f32(&h[3], v.w);
    uint2 u;
    memcpy(&u, h, sizeof u);
    *reinterpret_cast<uint2 *>(p) = u;
}

/* Four consecutive elements as f32: one 16-byte load of f32 (p 16-byte
 * aligned), or one 8-byte load of ck (p 8-byte aligned; a narrow tensor). */
__device__ __forceinline__ float4 ck_load4(const float *p) {
    return *reinterpret_cast<const float4 *>(p);
}

template <typename T> __device__ __forceinline__ float4 ck_load4(const T *p) {
    const uint2 u = *reinterpret_cast<const uint2 *>(p);
    T h[4];
    memcpy(h, &u, sizeof u);
    return make_float4(ck_to_f32(h[0]), ck_to_f32(h[1]), ck_to_f32(h[2]), ck_to_f32(h[3]));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread
 * gets the result. scratch: 32 floats of shared memory. */
__device__ __forceinline__ float block_sum(float v, float *scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warp = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* scratch may still be read from a previous call */
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    v = lane < n_warp ? scratch[lane] : 0.0f;
    return warp_sum(v);
}

/* Max over the block, as block_sum. */
__device__ __forceinline__ float block_max(float v, float *scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warp = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    v = lane < n_warp ? scratch[lane] : -INFINITY;
    return warp_max(v);
}

/* Calls f.template operator()<T>() with T the element type of dt. */
#define CK_DISPATCH(dt, ...)                                                   \
    do {                                                                       \
        if ((dt) == CK_BF16) {                                                 \
            typedef __nv_bfloat16 T;                                           \
            __VA_ARGS__;                                                       \
        } else {                                                               \
            typedef __half T;                                                  \
            __VA_ARGS__;                                                       \
        }                                                                      \
    } while (0)

/* Programmatic dependent launch (sm_90). A kernel started with ck_launch
 * may begin while the previous kernel of the stream is still finishing:
 * until pdl_wait() returns it may only read what no earlier kernel writes
 * (the weights), and must write nothing. pdl_wait() returns once the
 * previous kernel has completed and its writes are visible; pdl_release()
 * then lets the next kernel start its own prologue. Chained this way, each
 * GEMV's first weight loads are in flight during the previous kernel's tail
 * instead of after it (the launch ramp was ~2-5 us of each decode kernel).
 * Both are no-ops in a kernel launched the ordinary way. */
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_release() {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

/* Launches kernel<<<grid, block, smem, s>>>(args...), as a programmatic
 * dependent of the previous kernel unless ck_set_pdl(0). The kernel must
 * call pdl_wait() before its first dependent access. */
template <typename... Params, typename... Args>
static inline void ck_launch(cudaStream_t s, dim3 grid, unsigned block, size_t smem,
                             void (*kernel)(Params...), Args... args) {
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = ck_pdl_on();
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(block);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    (void)cudaLaunchKernelEx(&cfg, kernel, ((Params)args)...);
}

static inline unsigned ck_blocks(int64_t n, int per_block) {
    return (unsigned)((n + per_block - 1) / per_block);
}

#endif
