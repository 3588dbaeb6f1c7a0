/*
 * rmsnorm.cu — the residual add fused with the next RMSNorm:
 * x += dx (x f32, in place; dx f32 or, narrow, ck), then
 * y = x / sqrt(mean(x^2) + eps) * w in ck.
 * One block of 256 threads per row, 4 consecutive elements per thread and
 * 16-byte loads (D % 4 == 0 and rows 16-byte aligned, which the backend's
 * multiple-of-8 rows guarantee): one pass adds and sums squares (kept in
 * registers when D <= 256 * 4 * NORM_CACHE), a block reduction, one pass
 * scales and stores. Fusing saves a full read and write of the residual per
 * norm; the 16-byte loads took a 512-row norm from 14.8 to 10.5 us (H200);
 * all of a thread's loads before its first store, 30.0 to 28.1 us at 2048
 * rows of Llama-2-7B (H200, 2026-11-30, HEADROOM_CUDA_PROFILE).
 */
#include "backend/cuda/common.cuh"

#define NORM_THREADS 256
#define NORM_CACHE 8 /* float4s per thread kept in registers: D <= 8192 */

__device__ __forceinline__ float4 add4(float4 a, float4 b) {
    return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

__device__ __forceinline__ float4 scaled4(float4 w, float4 x, float scale) {
    return make_float4(w.x * (x.x * scale), w.y * (x.y * scale), w.z * (x.z * scale),
                       w.w * (x.w * scale));
}

/* DX: the type of dx (f32, or T when the projection output is kept narrow) */
template <typename T, typename DX>
__global__ void __launch_bounds__(NORM_THREADS)
    add_rmsnorm_kernel(float *x, int64_t ldx, const DX *dx, int64_t lddx, T *y, int64_t ldy,
                       const float *w, float eps, int D) {
    __shared__ float scratch[32];
    pdl_wait();
    pdl_release();
    const int64_t r = blockIdx.x;
    float4 *xr = reinterpret_cast<float4 *>(x + r * ldx);
    const DX *dr = dx ? dx + r * lddx : nullptr;
    const float4 *wr = reinterpret_cast<const float4 *>(w);
    const int D4 = D / 4;
    /* every load of the cached part before the first store: x's stores
     * could alias dx as far as the compiler knows, so loads and stores in
     * one loop would wait out a load latency per float4 */
    float4 cache[NORM_CACHE], dv[NORM_CACHE];
#pragma unroll
    for (int k = 0; k < NORM_CACHE; k++) {
        const int i = threadIdx.x + k * NORM_THREADS;
        cache[k] = dv[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (i < D4) {
            cache[k] = xr[i];
            if (dr)
                dv[k] = ck_load4(dr + 4 * i);
        }
    }
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < NORM_CACHE; k++) {
        const int i = threadIdx.x + k * NORM_THREADS;
        float4 v = cache[k];
        if (dr && i < D4) {
            v = add4(v, dv[k]);
            xr[i] = v;
        }
        cache[k] = v;
        ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    for (int i = threadIdx.x + NORM_CACHE * NORM_THREADS; i < D4; i += NORM_THREADS) {
        float4 v = xr[i];
        if (dr) {
            v = add4(v, ck_load4(dr + 4 * i));
            xr[i] = v;
        }
        ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    ss = block_sum(ss, scratch);
    const float scale = rsqrtf(ss / (float)D + eps);
    T *yr = y + r * ldy;
#pragma unroll
    for (int k = 0; k < NORM_CACHE; k++) {
        const int i = threadIdx.x + k * NORM_THREADS;
        if (i < D4)
            ck_store4(yr + 4 * i, scaled4(wr[i], cache[k], scale));
    }
    for (int i = threadIdx.x + NORM_CACHE * NORM_THREADS; i < D4; i += NORM_THREADS)
        ck_store4(yr + 4 * i, scaled4(wr[i], xr[i], scale));
}

extern "C" void ck_add_rmsnorm(cudaStream_t s, float *x, int64_t ldx, const void *dx,
                               bool dx_ck, int64_t lddx, void *y, int64_t ldy, ck_dtype dt,
                               const float *w, float eps, int n, int D) {
    if (n <= 0)
        return;
    if (dx_ck)
        CK_DISPATCH(dt, ck_launch(s, (unsigned)n, NORM_THREADS, 0, add_rmsnorm_kernel<T, T>, x,
                                  ldx, (const T *)dx, lddx, (T *)y, ldy, w, eps, D));
    else
        CK_DISPATCH(dt, ck_launch(s, (unsigned)n, NORM_THREADS, 0, add_rmsnorm_kernel<T, float>,
                                  x, ldx, (const float *)dx, lddx, (T *)y, ldy, w, eps, D));
}
