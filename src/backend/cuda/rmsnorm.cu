/*
 * rmsnorm.cu — the residual add fused with the next RMSNorm:
 * x += dx (f32, in place), then y = x / sqrt(mean(x^2) + eps) * w in ck.
 * One block of 256 threads per row: one pass adds and sums squares (kept in
 * registers when D <= 256 * 8), a block reduction, one pass scales and
 * stores. Fusing saves a full read and write of the residual per norm.
 */
#include "backend/cuda/common.cuh"

#define NORM_THREADS 256
#define NORM_CACHE 8 /* elements per thread kept in registers: D <= 2048 */

template <typename T>
__global__ void __launch_bounds__(NORM_THREADS)
    add_rmsnorm_kernel(float *x, int64_t ldx, const float *dx, int64_t lddx, T *y, int64_t ldy,
                       const float *w, float eps, int D) {
    __shared__ float scratch[32];
    pdl_wait();
    pdl_release();
    const int64_t r = blockIdx.x;
    float *xr = x + r * ldx;
    const float *dr = dx ? dx + r * lddx : nullptr;
    float cache[NORM_CACHE];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < NORM_CACHE; k++) {
        int i = threadIdx.x + k * NORM_THREADS;
        float v = 0.0f;
        if (i < D) {
            v = xr[i];
            if (dr) {
                v += dr[i];
                xr[i] = v;
            }
        }
        cache[k] = v;
        ss += v * v;
    }
    for (int i = threadIdx.x + NORM_CACHE * NORM_THREADS; i < D; i += NORM_THREADS) {
        float v = xr[i];
        if (dr) {
            v += dr[i];
            xr[i] = v;
        }
        ss += v * v;
    }
    ss = block_sum(ss, scratch);
    const float scale = rsqrtf(ss / (float)D + eps);
    T *yr = y + r * ldy;
#pragma unroll
    for (int k = 0; k < NORM_CACHE; k++) {
        int i = threadIdx.x + k * NORM_THREADS;
        if (i < D)
            ck_from_f32(&yr[i], w[i] * (cache[k] * scale));
    }
    for (int i = threadIdx.x + NORM_CACHE * NORM_THREADS; i < D; i += NORM_THREADS)
        ck_from_f32(&yr[i], w[i] * (xr[i] * scale));
}

extern "C" void ck_add_rmsnorm(cudaStream_t s, float *x, int64_t ldx, const float *dx,
                               int64_t lddx, void *y, int64_t ldy, ck_dtype dt, const float *w,
                               float eps, int n, int D) {
    if (n <= 0)
        return;
    CK_DISPATCH(dt, ck_launch(s, (unsigned)n, NORM_THREADS, 0, add_rmsnorm_kernel<T>, x, ldx, dx,
                              lddx, (T *)y, ldy, w, eps, D));
}
