/*
 * elementwise.cu — the small row ops: embedding lookup, SwiGLU, gathering
 * the rows that want logits, bias add; and a norm weight folded into the
 * matrix after it, at upload. SwiGLU reads a prefill's largest activation
 * (n x 2F ck, 90 MB at 2048 rows of Llama-2-7B), so it runs at the
 * bandwidth: 8 elements per thread with 16-byte accesses where rows allow
 * (4 with 8-byte ones took a 2048-row step from 41.7 to 37.1 us, H200,
 * 2026-11-30), else 4, no 64-bit division per element (as a grid-stride
 * loop it reached 2.1 TB/s).
 * The others are grid-stride loops over elements that move little data.
 */
#include "backend/cuda/common.cuh"

static int pdl_enabled = -1; /* -1: not yet read from the device */

extern "C" void ck_set_pdl(int on) { pdl_enabled = on != 0 && ck_device_caps()->hopper; }
extern "C" int ck_pdl_on(void) {
    if (pdl_enabled < 0)
        pdl_enabled = ck_device_caps()->hopper;
    return pdl_enabled;
}

template <typename T>
__global__ void embed_kernel(float *x, int64_t ldx, const T *table, const int32_t *tokens, int n,
                             int D) {
    pdl_wait();
    pdl_release();
    int64_t total = (int64_t)n * D;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / D, c = i % D;
        x[r * ldx + c] = ck_to_f32(table[(int64_t)tokens[r] * D + c]);
    }
}

extern "C" void ck_embed(cudaStream_t s, float *x, int64_t ldx, const void *table, ck_dtype dt,
                         const int32_t *tokens, int n, int D) {
    unsigned blocks = ck_blocks((int64_t)n * D, 256);
    blocks = blocks > 4096 ? 4096 : blocks;
    CK_DISPATCH(dt, ck_launch(s, blocks, 256, 0, embed_kernel<T>, x, ldx, (const T *)table, tokens,
                              n, D));
}

/* Blocks of 256 threads cover one row's F outputs, W consecutive per
 * thread: W = 8 with 16-byte loads of gate and up and one 16-byte store
 * (ck gu, F % 8 == 0, rows 16-byte aligned), else W = 4 (F % 4 == 0, as the
 * backend's multiple-of-8 rows guarantee); 32-bit indices inside the row.
 * G: the type of gu (float, or T when the gate/up product is kept narrow). */
template <typename T, typename G, int W>
__global__ void swiglu_kernel(T *h, int64_t ldh, const G *gu, int64_t ldgu, int F,
                              int row_blocks) {
    pdl_wait();
    pdl_release();
    const int64_t r = blockIdx.x / row_blocks;
    const int c = ((int)(blockIdx.x % row_blocks) * 256 + (int)threadIdx.x) * W;
    if (c >= F)
        return;
    const G *gr = gu + r * ldgu;
    float g[W], u[W], o[W];
    ck_load_n<G, W>(gr + c, g);
    ck_load_n<G, W>(gr + F + c, u);
#pragma unroll
    for (int e = 0; e < W; e++)
        o[e] = g[e] / (1.0f + __expf(-g[e])) * u[e];
    ck_store_n<T, W>(h + r * ldh + c, o);
}

extern "C" void ck_swiglu(cudaStream_t s, void *h, int64_t ldh, ck_dtype dt, const void *gu,
                          bool gu_ck, int64_t ldgu, int n, int F) {
    if (n <= 0 || F <= 0)
        return;
    if (gu_ck && F % 8 == 0 && ldgu % 8 == 0 && ldh % 8 == 0 && ((uintptr_t)gu & 15) == 0 &&
        ((uintptr_t)h & 15) == 0) {
        const int rb = (F / 8 + 255) / 256;
        CK_DISPATCH(dt, ck_launch(s, (unsigned)((int64_t)n * rb), 256, 0,
                                  swiglu_kernel<T, T, 8>, (T *)h, ldh, (const T *)gu, ldgu, F,
                                  rb));
        return;
    }
    const int rb = (F / 4 + 255) / 256;
    const unsigned grid = (unsigned)((int64_t)n * rb);
    if (gu_ck)
        CK_DISPATCH(dt, ck_launch(s, grid, 256, 0, swiglu_kernel<T, T, 4>, (T *)h, ldh,
                                  (const T *)gu, ldgu, F, rb));
    else
        CK_DISPATCH(dt, ck_launch(s, grid, 256, 0, swiglu_kernel<T, float, 4>, (T *)h, ldh,
                                  (const float *)gu, ldgu, F, rb));
}

template <typename T>
__global__ void gather_kernel(T *y, int64_t ldy, const T *x, int64_t ldx, const int32_t *rows,
                              int n, int D) {
    pdl_wait();
    pdl_release();
    int64_t total = (int64_t)n * D;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / D, c = i % D;
        y[r * ldy + c] = x[(int64_t)rows[r] * ldx + c];
    }
}

extern "C" void ck_gather(cudaStream_t s, void *y, int64_t ldy, const void *x, int64_t ldx,
                          ck_dtype dt, const int32_t *rows, int n_out, int D) {
    unsigned blocks = ck_blocks((int64_t)n_out * D, 256);
    blocks = blocks > 4096 ? 4096 : blocks;
    CK_DISPATCH(dt, ck_launch(s, blocks, 256, 0, gather_kernel<T>, (T *)y, ldy, (const T *)x, ldx,
                              rows, n_out, D));
}

/* Y: f32, or T for a narrow output */
template <typename Y>
__global__ void add_bias_kernel(Y *y, int64_t ldy, const float *bias, int n, int N) {
    int64_t total = (int64_t)n * N;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        Y *p = &y[(i / N) * ldy + i % N];
        ck_from_f32(p, ck_to_f32(*p) + bias[i % N]);
    }
}

extern "C" void ck_add_bias(cudaStream_t s, void *y, bool y_ck, int64_t ldy, const float *bias,
                            int n, int N, ck_dtype dt) {
    unsigned blocks = ck_blocks((int64_t)n * N, 256);
    blocks = blocks > 4096 ? 4096 : blocks;
    if (y_ck)
        CK_DISPATCH(dt, (add_bias_kernel<T><<<blocks, 256, 0, s>>>((T *)y, ldy, bias, n, N)));
    else
        add_bias_kernel<float><<<blocks, 256, 0, s>>>((float *)y, ldy, bias, n, N);
}

/* W[r][k] = ck(W[r][k] * w[k]): a norm weight folded into the columns of the
 * matrix after the norm, once at upload (one rounding, as a host conversion
 * of the product would make) */
template <typename T>
__global__ void scale_cols_kernel(T *W, const float *w, int64_t n, int K) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        ck_from_f32(&W[i], ck_to_f32(W[i]) * w[i % K]);
}

__global__ void ones_kernel(float *w, int K) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < K; i += gridDim.x * blockDim.x)
        w[i] = 1.0f;
}

extern "C" void ck_fold_norm(cudaStream_t s, void *W, int64_t rows, int K, float *w, bool scale,
                             ck_dtype dt) {
    const int64_t n = rows * K;
    unsigned blocks = ck_blocks(n, 256);
    blocks = blocks > 8192 ? 8192 : blocks;
    if (scale)
        CK_DISPATCH(dt, scale_cols_kernel<T><<<blocks, 256, 0, s>>>((T *)W, w, n, K));
    ones_kernel<<<ck_blocks(K, 256), 256, 0, s>>>(w, K);
}
