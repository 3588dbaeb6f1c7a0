/*
 * kernels_packed.h — launchers of the kernels that read packed quantized
 * weights (backend/packed.h: the planes q, h, s, d of a GGUF type): the
 * activations' 8-bit quantization, the GEMV of decode, the dequantization
 * of row ranges for prefill, and the embedding lookup. gemv_packed.cu and
 * dequant_packed.cu implement them.
 *
 * Shapes: n = activation rows, N = weight rows (outputs), K = weight
 * columns (a multiple of the type's block: 32, or 256 for K-quants).
 *
 * Every launcher only enqueues on the stream (the caller checks
 * cudaGetLastError()); the decode kernels start as programmatic dependents
 * of the previous kernel like gemv.cu's (common.cuh).
 */
#ifndef HR_BACKEND_CUDA_KERNELS_PACKED_H
#define HR_BACKEND_CUDA_KERNELS_PACKED_H

#include "backend/cuda/kernels.h" /* ck_dtype */
#include "backend/packed.h"

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- activations quantized to 8 bits (CPU_MATMUL_FAST's rule, cpu/matmul.h)
 *
 * Per row, per block of 32 along K: amax = max |x_k|, d = amax / 127,
 * q_k = rint(x_k * (127 / amax)) (0 when amax == 0), all f32, round to
 * nearest even; sd = d * (sum of the block's 32 q_k), f32. The scratch xq
 * for n rows holds three sections, each starting 16-byte aligned:
 *   codes int8 (n, K), row q at xq + q K
 *   d     f32  (n, K/32)
 *   sd    f32  (n, K/32)
 * K % 32 == 0. */
size_t ck_xq_bytes(int n, int K);
/* x (n, K) ck (dt), row stride ldx elements; xq 16-byte aligned,
 * ck_xq_bytes(n, K) bytes. Any alignment of x works (16-byte loads when x
 * is 16-byte aligned and ldx % 8 == 0). */
void ck_quantize_x(cudaStream_t s, void *xq, const void *x, int64_t ldx, ck_dtype dt, int n,
                   int K);

/* ---- GEMV on packed weights (gemv_packed.cu)
 *
 * y (n, N) = x^ (n, K) . W^T (+ bias), where x^ = d q is xq as made by
 * ck_quantize_x for the same n and K = W->K, and W is dequantized as
 * quant/ does: the CPU's FAST result up to f32 summation order. y f32, or
 * ck (dt) when y_ck (rounded once from the f32 sum); row stride ldy; bias
 * NULL or (N) f32. Integer dot products per block, scaled in f32. Each
 * launch covers up to CK_GEMV_MAX_ROWS (8) activation rows and reads W
 * once; larger n runs ceil(n / 8) launches (W read that many times).
 * W->type any packed type but PACKED_W16, its planes laid out as packed.h
 * says (16-byte aligned bases: PACKED_ALIGN); xq the whole scratch of
 * ck_quantize_x for these n rows; ldy >= N. */
void ck_gemv_packed(cudaStream_t s, void *y, bool y_ck, int64_t ldy, const void *xq,
                    const packed_matrix *W, const float *bias, ck_dtype dt, int n);

/* ---- tensor-core product on packed weights (gemm_packed.cu)
 *
 * y (n, N) = x (n, K) . W^T (+ bias) with x in ck (dt, row stride ldx
 * elements) as it is and each element of W decoded as quant/ does, rounded
 * once to dt: ck_dequant_packed + a GEMM's result up to f32 summation order,
 * deterministic. y f32, or ck when y_ck; row stride ldy >= N; bias NULL or
 * (N) f32. Each launch covers up to CK_GEMM_PACKED_MAX_ROWS rows and reads
 * W once (larger n: one launch per 64 rows). Any alignment of x works
 * (16-byte loads when x is 16-byte aligned and ldx % 8 == 0). */
#define CK_GEMM_PACKED_MAX_ROWS 64
void ck_gemm_packed(cudaStream_t s, void *y, bool y_ck, int64_t ldy, const void *x, int64_t ldx,
                    const packed_matrix *W, const float *bias, ck_dtype dt, int n);

/* ---- dequantization (dequant_packed.cu)
 *
 * dst row i (ck, row stride ld >= K elements) = W row r0 + i, for
 * 0 <= r0 <= r0 + i < r1 <= N: every element the f32 value of
 * quant_dequantize_row (bit for bit), rounded once to dt. 16-byte stores
 * when dst is 16-byte aligned and ld % 8 == 0 (else 2-byte ones). Starts
 * as a programmatic dependent: the first row's weight loads go out before
 * it waits for the previous kernel, which may still read dst. */
void ck_dequant_packed(cudaStream_t s, void *dst, int64_t ld, ck_dtype dt,
                       const packed_matrix *W, int64_t r0, int64_t r1);

/* x row i (f32, W->K elements, row stride ldx) = W row tokens[i] as
 * quant_dequantize_row gives it; tokens (n) on the device, read there (an
 * id outside [0, N) reads row 0 or N - 1 instead of faulting). */
void ck_embed_packed(cudaStream_t s, float *x, int64_t ldx, const packed_matrix *W,
                     const int32_t *tokens, int n);

#ifdef __cplusplus
}
#endif

#endif
