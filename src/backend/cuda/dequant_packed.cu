/*
 * dequant_packed.cu — packed quantized rows (backend/packed.h) back to
 * numbers: rows [r0, r1) of a matrix into the 16-bit compute type (prefill
 * dequantizes a chunk of rows into a scratch that cuBLASLt reads), and the
 * embedding lookup from a packed table (f32 rows).
 *
 * Each thread makes 8 consecutive elements of one row (packed.cuh's
 * pk_decode8: the reference's products in its order, so the f32 values are
 * quant_dequantize_row's bit for bit), then rounds them once to ck and
 * stores 16 bytes: the output (2 bytes an element against 0.5-1.06 read)
 * is most of the traffic, so the stores are what must coalesce. Blocks of
 * 256 threads cover 2048 elements of a row (grid x), rows on grid y.
 */
#include "backend/cuda/common.cuh"
#include "backend/cuda/packed.cuh"

#include <stdint.h>

namespace {

constexpr int kDqThreads = 256;
constexpr unsigned kDqMaxGridY = 65535; /* rows beyond it loop */

template <int TY, typename T, bool VEC>
__global__ void __launch_bounds__(kDqThreads)
    dequant_kernel(T *dst, int64_t ld, PkPlanes w, int64_t r0, int64_t n_rows) {
    pk_codebook_to_shared<TY>(w);
    const int g = blockIdx.x * kDqThreads + threadIdx.x;
    if (g >= w.K / 8)
        return;
    /* the first row's loads before the wait: the weights depend on no
     * kernel, while dst may still be read by the one before (the previous
     * chunk's GEMM) */
    int64_t i = blockIdx.y;
    float v[8];
    pk_decode8<TY>(w, r0 + i, 8 * g, v);
    pdl_wait();
    pdl_release();
    for (;;) {
        T *o = dst + i * ld + 8 * (int64_t)g;
        if (VEC) {
            ck_store_n<T, 8>(o, v);
        } else {
#pragma unroll
            for (int e = 0; e < 8; e++)
                ck_from_f32(o + e, v[e]);
        }
        i += gridDim.y;
        if (i >= n_rows)
            break;
        pk_decode8<TY>(w, r0 + i, 8 * g, v);
    }
}

template <int TY>
__global__ void __launch_bounds__(kDqThreads)
    embed_packed_kernel(float *x, int64_t ldx, PkPlanes w, const int32_t *tokens, int n) {
    pk_codebook_to_shared<TY>(w);
    pdl_wait(); /* the ids come from the previous kernel (the sampler) */
    pdl_release();
    const int g = blockIdx.x * kDqThreads + threadIdx.x;
    if (g >= w.K / 8)
        return;
    for (int i = blockIdx.y; i < n; i += gridDim.y) {
        int64_t tok = tokens[i];
        tok = tok < 0 ? 0 : tok >= w.N ? w.N - 1 : tok;
        float v[8];
        pk_decode8<TY>(w, tok, 8 * g, v);
        float *o = x + i * ldx + 8 * (int64_t)g;
#pragma unroll
        for (int e = 0; e < 8; e++)
            o[e] = v[e];
    }
}

unsigned dq_grid_y(int64_t rows) { return (unsigned)(rows < kDqMaxGridY ? rows : kDqMaxGridY); }

} // namespace

extern "C" void ck_dequant_packed(cudaStream_t s, void *dst, int64_t ld, ck_dtype dt,
                                  const packed_matrix *W, int64_t r0, int64_t r1) {
    if (r1 <= r0 || W->K <= 0)
        return;
    const PkPlanes w = pk_planes(W);
    const dim3 grid((unsigned)((w.K / 8 + kDqThreads - 1) / kDqThreads), dq_grid_y(r1 - r0));
    const bool vec = ((uintptr_t)dst & 15u) == 0 && ld % 8 == 0;
    PK_DISPATCH(W->type, CK_DISPATCH(dt, vec ? ck_launch(s, grid, kDqThreads, 0,
                                                         dequant_kernel<TY, T, true>, (T *)dst,
                                                         ld, w, r0, r1 - r0)
                                             : ck_launch(s, grid, kDqThreads, 0,
                                                         dequant_kernel<TY, T, false>, (T *)dst,
                                                         ld, w, r0, r1 - r0)));
}

extern "C" void ck_embed_packed(cudaStream_t s, float *x, int64_t ldx, const packed_matrix *W,
                                const int32_t *tokens, int n) {
    if (n <= 0 || W->K <= 0)
        return;
    const PkPlanes w = pk_planes(W);
    const dim3 grid((unsigned)((w.K / 8 + kDqThreads - 1) / kDqThreads), dq_grid_y(n));
    PK_DISPATCH(W->type, ck_launch(s, grid, kDqThreads, 0, embed_packed_kernel<TY>, x, ldx, w,
                                   tokens, n));
}
