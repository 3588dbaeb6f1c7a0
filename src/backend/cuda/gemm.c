/*
 * gemm.c — matrix products through cuBLASLt for steps of more than a few
 * rows (prefill, large decode batches): y (n, N) f32 = x (n, K) ck . W^T with
 * W (N, K) ck row-major, f32 accumulation on the tensor cores.
 *
 * cuBLAS is column-major, so the row-major product is computed as its
 * transpose: Y' (N x n) = W' ^T (N x K) . X' (K x n), where W' (K x N, ld K)
 * and X' (K x n, ld ldx) are the same bytes read column-major. The
 * heuristic's choice for each shape is cached with its descriptors: the
 * first step of a shape pays for the query, and a decode step captured in a
 * CUDA graph makes no host-side cuBLAS decision at replay.
 * Rejected (figures in docs/journal/gemv.md): timing the heuristic's top 8
 * on the first product of a shape and keeping the fastest (the timed runs
 * find the weights in L2, which favours the wrong algorithm for skinny
 * products that stream them from HBM; for 256 rows or more the heuristic's
 * first pick was as fast as any of its top 8); a tensor-core kernel of our
 * own for steps of 9..64 rows (cuBLASLt streams those skinny products at
 * 2.5-3.8 TB/s; the kernel, bounded by its reads of x through L1, at
 * 0.8-2.7).
 */
#include "backend/cuda/cuda_gemm.h"

#include "util/alloc.h"

#include <string.h>

#define GEMM_CACHE 64

typedef struct {
    int n, N, K;
    ck_dtype dt;
    bool y_ck;
    int64_t ldx, ldy;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
} gemm_entry;

struct cuda_gemm {
    cublasLtHandle_t handle;
    void *workspace;
    size_t workspace_bytes;
    gemm_entry cache[GEMM_CACHE];
    int n_cache, next_evict;
};

#define LT_TRY(expr, what)                                                                \
    do {                                                                                  \
        cublasStatus_t st_ = (expr);                                                      \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                 \
            return hr_err_set(err, HR_ERR_DEVICE, "cuBLASLt: %s failed (status %d)", what, \
                              (int)st_);                                                  \
    } while (0)

hr_status cuda_gemm_create(void *workspace, size_t workspace_bytes, cuda_gemm **out,
                           hr_error *err) {
    cuda_gemm *g = hr_calloc(1, sizeof *g);
    if (!g)
        return hr_err_set(err, HR_ERR_NOMEM, "cuBLASLt: out of memory");
    cublasStatus_t st = cublasLtCreate(&g->handle);
    if (st != CUBLAS_STATUS_SUCCESS) {
        hr_free(g);
        return hr_err_set(err, HR_ERR_DEVICE, "cuBLASLt: cublasLtCreate failed (status %d)",
                          (int)st);
    }
    g->workspace = workspace;
    g->workspace_bytes = workspace_bytes;
    *out = g;
    return HR_OK;
}

static void entry_free(gemm_entry *e) {
    if (e->op)
        cublasLtMatmulDescDestroy(e->op);
    if (e->a)
        cublasLtMatrixLayoutDestroy(e->a);
    if (e->b)
        cublasLtMatrixLayoutDestroy(e->b);
    if (e->c)
        cublasLtMatrixLayoutDestroy(e->c);
    memset(e, 0, sizeof *e);
}

void cuda_gemm_free(cuda_gemm *g) {
    if (!g)
        return;
    for (int i = 0; i < g->n_cache; i++)
        entry_free(&g->cache[i]);
    cublasLtDestroy(g->handle);
    hr_free(g);
}

static hr_status entry_make(cuda_gemm *g, gemm_entry *e, int n, int N, int K, ck_dtype dt,
                            bool y_ck, int64_t ldx, int64_t ldy, hr_error *err) {
    memset(e, 0, sizeof *e);
    e->n = n, e->N = N, e->K = K, e->dt = dt, e->y_ck = y_ck, e->ldx = ldx, e->ldy = ldy;
    cudaDataType_t in = dt == CK_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LT_TRY(cublasLtMatmulDescCreate(&e->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
    LT_TRY(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
           "transa");
    LT_TRY(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
           "transb");
    LT_TRY(cublasLtMatrixLayoutCreate(&e->a, in, (uint64_t)K, (uint64_t)N, K), "layout W");
    LT_TRY(cublasLtMatrixLayoutCreate(&e->b, in, (uint64_t)K, (uint64_t)n, ldx), "layout x");
    LT_TRY(cublasLtMatrixLayoutCreate(&e->c, y_ck ? in : CUDA_R_32F, (uint64_t)N, (uint64_t)n,
                                      ldy),
           "layout y");
    cublasLtMatmulPreference_t pref;
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref), "preference");
    uint64_t ws = g->workspace_bytes;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(g->handle, e->op, e->a, e->b, e->c, e->c, pref, 1,
                                            &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0)
        return hr_err_set(err, HR_ERR_DEVICE,
                          "cuBLASLt: no algorithm for %d x %d x %d (status %d)", n, N, K,
                          (int)st);
    e->algo = res.algo;
    return HR_OK;
}

hr_status cuda_gemm_run(cuda_gemm *g, cudaStream_t s, void *y, bool y_ck, int64_t ldy,
                        const void *x, int64_t ldx, const void *W, ck_dtype dt, int n, int N,
                        int K, hr_error *err) {
    gemm_entry *e = NULL;
    for (int i = 0; i < g->n_cache && !e; i++) {
        gemm_entry *c = &g->cache[i];
        if (c->n == n && c->N == N && c->K == K && c->dt == dt && c->y_ck == y_ck &&
            c->ldx == ldx && c->ldy == ldy)
            e = c;
    }
    if (!e) {
        /* a full cache evicts round-robin: shapes are few (one per weight x step size) */
        int slot = g->n_cache < GEMM_CACHE ? g->n_cache++ : g->next_evict++ % GEMM_CACHE;
        e = &g->cache[slot];
        entry_free(e);
        hr_status st = entry_make(g, e, n, N, K, dt, y_ck, ldx, ldy, err);
        if (st != HR_OK) {
            entry_free(e);
            return st;
        }
    }
    const float alpha = 1.0f, beta = 0.0f;
    LT_TRY(cublasLtMatmul(g->handle, e->op, &alpha, W, e->a, x, e->b, &beta, y, e->c, y, e->c,
                          &e->algo, g->workspace, g->workspace_bytes, s),
           "matmul");
    return HR_OK;
}
