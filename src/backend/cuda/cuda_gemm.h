/* cuda_gemm.h — cuBLASLt products for the CUDA backend (see gemm.c). */
#ifndef HR_BACKEND_CUDA_GEMM_H
#define HR_BACKEND_CUDA_GEMM_H

#include "backend/cuda/kernels.h"
#include "util/error.h"

#include <cublasLt.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cuda_gemm cuda_gemm;

/* workspace: device memory the caller owns (planned), workspace_bytes long */
hr_status cuda_gemm_create(void *workspace, size_t workspace_bytes, cuda_gemm **out,
                           hr_error *err);
void cuda_gemm_free(cuda_gemm *g);
/* y (n, N) = x (n, K) ck . W^T, W (N, K) ck row-major, f32 accumulation; y
 * f32, or ck when y_ck (rounded once, from the f32 sum); enqueued on s */
hr_status cuda_gemm_run(cuda_gemm *g, cudaStream_t s, void *y, bool y_ck, int64_t ldy,
                        const void *x, int64_t ldx, const void *W, ck_dtype dt, int n, int N,
                        int K, hr_error *err);

#ifdef __cplusplus
}
#endif

#endif
