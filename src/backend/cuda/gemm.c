/*
 * gemm.c — matrix products through cuBLASLt for steps of more than a few
 * rows (prefill, large decode batches): y (n, N) f32 = x (n, K) ck . W^T with
 * W (N, K) ck row-major, f32 accumulation on the tensor cores.
 *
 * cuBLAS is column-major, so the row-major product is computed as its
 * transpose: Y' (N x n) = W' ^T (N x K) . X' (K x n), where W' (K x N, ld K)
 * and X' (K x n, ld ldx) are the same bytes read column-major. The
 * algorithm for each shape is cached with its descriptors: the first step of
 * a shape pays for the choice, and a decode step captured in a CUDA graph
 * makes no host-side cuBLAS decision at replay.
 *
 * The choice: products of at least GEMM_TIMED_ROWS rows are compute-bound,
 * and there the heuristic's first pick is not always the fastest (wave
 * quantization at 512 rows: the q/k/v product ran at 700 TFLOP/s and the
 * output projection at 610 where gate/up reached 760, H200), so the first
 * product of such a shape times the heuristic's top GEMM_ALGOS on its own
 * operands and keeps the fastest, for every step of that weight shape whose
 * rows round up to the same power of two (prefill chunks vary in length:
 * each (weight, bucket) is timed once, ~10-50 ms, never again even when the
 * descriptor cache evicts it). Skinnier products keep the heuristic's
 * pick: timed runs find their weights in L2, which favours the wrong
 * algorithm for products that stream them from HBM (64-sequence decode -8%
 * when all shapes were timed, H200, 2026-11-29).
 * Rejected too: a tensor-core kernel of our own for steps of 9..64 rows
 * (mma.sync m16n8k16 with W as the A operand, 16 weight rows per warp, K
 * split across a thread block cluster and the partials added through
 * distributed shared memory). cuBLASLt already streams the weights of those
 * skinny products at 2.5-3.8 TB/s (tests/cuda/gemv_sample_check.cu); the
 * kernel reached 0.8-2.7 TB/s, bounded by its reads of x through L1, and
 * 64-sequence decode fell from 6922 to 3999 tok/s (H200, 2026-11-30).
 */
#include "backend/cuda/cuda_gemm.h"

#include "util/alloc.h"

#include <string.h>

#define GEMM_CACHE 64
#define GEMM_ALGOS 8         /* heuristic candidates timed */
#define GEMM_TIMED_ROWS 256  /* products this tall are timed (see above) */
#define GEMM_TIMED_RUNS 3
#define GEMM_TIMED_MAX 64    /* (weight shape, row bucket) choices kept */

typedef struct {
    int n, N, K;
    ck_dtype dt;
    int64_t ldx, ldy;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
} gemm_entry;

/* the timed choice for rows in (bucket / 2, bucket] of one weight shape */
typedef struct {
    int bucket, N, K;
    ck_dtype dt;
    cublasLtMatmulAlgo_t algo;
} gemm_timed;

struct cuda_gemm {
    cublasLtHandle_t handle;
    void *workspace;
    size_t workspace_bytes;
    gemm_entry cache[GEMM_CACHE];
    int n_cache, next_evict;
    gemm_timed timed[GEMM_TIMED_MAX];
    int n_timed;
};

static int row_bucket(int n) {
    int b = GEMM_TIMED_ROWS;
    while (b < n && b < (1 << 30))
        b *= 2;
    return b;
}

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

/* Runs algorithm `algo` of entry e GEMM_TIMED_RUNS times after a warm-up
 * run; the milliseconds, or a negative value if it cannot run. */
static float time_algo(cuda_gemm *g, const gemm_entry *e, const cublasLtMatmulAlgo_t *algo,
                       cudaStream_t s, float *y, const void *x, const void *W) {
    const float alpha = 1.0f, beta = 0.0f;
    cudaEvent_t t0 = NULL, t1 = NULL;
    float ms = -1.0f;
    if (cudaEventCreate(&t0) != cudaSuccess || cudaEventCreate(&t1) != cudaSuccess)
        goto done;
    for (int i = 0; i <= GEMM_TIMED_RUNS; i++) {
        if (i == 1)
            cudaEventRecord(t0, s);
        if (cublasLtMatmul(g->handle, e->op, &alpha, W, e->a, x, e->b, &beta, y, e->c, y, e->c,
                           algo, g->workspace, g->workspace_bytes, s) != CUBLAS_STATUS_SUCCESS)
            goto done;
    }
    cudaEventRecord(t1, s);
    if (cudaEventSynchronize(t1) != cudaSuccess || cudaEventElapsedTime(&ms, t0, t1) != cudaSuccess)
        ms = -1.0f;
done:
    cudaGetLastError(); /* a candidate that failed leaves no error behind */
    if (t0)
        cudaEventDestroy(t0);
    if (t1)
        cudaEventDestroy(t1);
    return ms;
}

/* The algorithm for entry e: the heuristic's first, or for a tall product
 * the one timed for its (shape, bucket), timing the heuristic's top
 * GEMM_ALGOS on the operands at hand (y is overwritten) the first time, if
 * the stream is not being captured into a graph. */
static hr_status entry_make(cuda_gemm *g, gemm_entry *e, int n, int N, int K, ck_dtype dt,
                            int64_t ldx, int64_t ldy, cudaStream_t s, float *y, const void *x,
                            const void *W, hr_error *err) {
    memset(e, 0, sizeof *e);
    e->n = n, e->N = N, e->K = K, e->dt = dt, e->ldx = ldx, e->ldy = ldy;
    cudaDataType_t in = dt == CK_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LT_TRY(cublasLtMatmulDescCreate(&e->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
    LT_TRY(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
           "transa");
    LT_TRY(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
           "transb");
    LT_TRY(cublasLtMatrixLayoutCreate(&e->a, in, (uint64_t)K, (uint64_t)N, K), "layout W");
    LT_TRY(cublasLtMatrixLayoutCreate(&e->b, in, (uint64_t)K, (uint64_t)n, ldx), "layout x");
    LT_TRY(cublasLtMatrixLayoutCreate(&e->c, CUDA_R_32F, (uint64_t)N, (uint64_t)n, ldy),
           "layout y");
    cublasLtMatmulPreference_t pref;
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref), "preference");
    uint64_t ws = g->workspace_bytes;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    gemm_timed *known = NULL;
    const int bucket = row_bucket(n);
    for (int i = 0; n >= GEMM_TIMED_ROWS && i < g->n_timed && !known; i++) {
        gemm_timed *t = &g->timed[i];
        if (t->bucket == bucket && t->N == N && t->K == K && t->dt == dt)
            known = t;
    }
    cublasLtMatmulHeuristicResult_t check;
    if (known &&
        cublasLtMatmulAlgoCheck(g->handle, e->op, e->a, e->b, e->c, e->c, &known->algo, &check) ==
            CUBLAS_STATUS_SUCCESS &&
        check.workspaceSize <= g->workspace_bytes) {
        cublasLtMatmulPreferenceDestroy(pref);
        e->algo = known->algo;
        return HR_OK;
    }
    enum cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    const bool timed = n >= GEMM_TIMED_ROWS && !known && g->n_timed < GEMM_TIMED_MAX &&
                       cudaStreamIsCapturing(s, &capture) == cudaSuccess &&
                       capture == cudaStreamCaptureStatusNone;
    cublasLtMatmulHeuristicResult_t res[GEMM_ALGOS];
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(g->handle, e->op, e->a, e->b, e->c, e->c, pref,
                                            timed ? GEMM_ALGOS : 1, res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0)
        return hr_err_set(err, HR_ERR_DEVICE,
                          "cuBLASLt: no algorithm for %d x %d x %d (status %d)", n, N, K,
                          (int)st);
    e->algo = res[0].algo;
    float best = -1.0f;
    for (int i = 0; timed && found > 1 && i < found; i++) {
        float ms = time_algo(g, e, &res[i].algo, s, y, x, W);
        if (ms >= 0.0f && (best < 0.0f || ms < best)) {
            best = ms;
            e->algo = res[i].algo;
        }
    }
    if (timed)
        g->timed[g->n_timed++] = (gemm_timed){bucket, N, K, dt, e->algo};
    return HR_OK;
}

hr_status cuda_gemm_run(cuda_gemm *g, cudaStream_t s, float *y, int64_t ldy, const void *x,
                        int64_t ldx, const void *W, ck_dtype dt, int n, int N, int K,
                        hr_error *err) {
    gemm_entry *e = NULL;
    for (int i = 0; i < g->n_cache && !e; i++) {
        gemm_entry *c = &g->cache[i];
        if (c->n == n && c->N == N && c->K == K && c->dt == dt && c->ldx == ldx && c->ldy == ldy)
            e = c;
    }
    if (!e) {
        /* a full cache evicts round-robin: shapes are few (one per weight x step size) */
        int slot = g->n_cache < GEMM_CACHE ? g->n_cache++ : g->next_evict++ % GEMM_CACHE;
        e = &g->cache[slot];
        entry_free(e);
        hr_status st = entry_make(g, e, n, N, K, dt, ldx, ldy, s, y, x, W, err);
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
