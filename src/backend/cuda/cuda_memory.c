/*
 * cuda_memory.c — the device and its memory: device queries (count, name,
 * free memory, bandwidth), device memory from the one arena the engine
 * planned (every byte counted by part; cudaMalloc per piece without a plan),
 * the activations, the KV pool with the attention workspace and the step's
 * metadata at fixed device addresses (a captured graph reads them there),
 * the memory report, and the tests' tensor reads and writes.
 */
#include "backend/cuda/cuda_internal.h"

#include "backend/sizes.h"
#include "util/alloc.h"
#include "util/fp16.h"
#include "util/log.h"

#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------- devices */

static char why_not[256] = "no CUDA device found";
static char dev_name[256] = "unknown GPU";

/* Without a driver the runtime says "CUDA driver version is insufficient"
 * (cudaErrorInsufficientDriver, with a driver version of 0): that reads as
 * an old driver, so the reasons are told apart here. */
int cuda_device_count(void) {
    int n = 0, driver = 0, runtime = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess && n > 0)
        return n;
    (void)cudaDriverGetVersion(&driver);
    (void)cudaRuntimeGetVersion(&runtime);
    if (e == cudaErrorInsufficientDriver && driver == 0)
        snprintf(why_not, sizeof why_not,
                 "no CUDA device: the NVIDIA driver is not loaded or no GPU is present");
    else if (e == cudaErrorInsufficientDriver)
        snprintf(why_not, sizeof why_not,
                 "the NVIDIA driver supports CUDA %d.%d, older than the CUDA %d.%d this "
                 "binary was built with: update the driver",
                 driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
    else if (e == cudaSuccess || e == cudaErrorNoDevice)
        snprintf(why_not, sizeof why_not, "no CUDA device: the NVIDIA driver found no GPU");
    else
        snprintf(why_not, sizeof why_not, "no usable CUDA device (%s)", cudaGetErrorString(e));
    cudaGetLastError(); /* clear it */
    return 0;
}

const char *cuda_why_not(void) { return why_not; }

const char *cuda_path(void) { return ck_device_caps()->path; }

const char *cuda_device_name(void) {
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        snprintf(dev_name, sizeof dev_name, "%s", prop.name);
    return dev_name;
}

hr_status cuda_memory(uint64_t *free_bytes, uint64_t *total_bytes, hr_error *err) {
    if (cuda_device_count() == 0)
        return hr_err_set(err, HR_ERR_DEVICE, "cuda: %s", why_not);
    size_t f = 0, t = 0;
    cudaError_t e = cudaMemGetInfo(&f, &t);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return hr_err_set(err, HR_ERR_DEVICE, "cuda: cannot read the device's memory: %s",
                          cudaGetErrorString(e));
    }
    *free_bytes = f;
    *total_bytes = t;
    return HR_OK;
}

/* Buffers of n bytes (n = free / 8, at most 1 GiB, at least 256 MiB: four
 * times an H200's L2, so every pass streams from HBM): 10 device-to-device
 * copies, each counting its bytes twice (read and written, as copy-bandwidth
 * figures do), then 10 passes of ck_read_stream over one buffer, each timed
 * with events after an untimed one of its kind. */
hr_status cuda_bandwidth(double *copy_bytes_per_s, double *read_bytes_per_s, hr_error *err) {
    uint64_t free_b, total_b;
    HR_TRY(cuda_memory(&free_b, &total_b, err));
    uint64_t n = free_b / 8 > ((uint64_t)1 << 30) ? (uint64_t)1 << 30 : free_b / 8 / 4096 * 4096;
    if (n < ((uint64_t)256 << 20))
        return hr_err_set(err, HR_ERR_NOMEM,
                          "cuda: %.0f MiB free, too little to time passes larger than L2",
                          (double)free_b / (1 << 20));
    enum { n_passes = 10 };
    void *src = NULL, *dst = NULL;
    cudaEvent_t ev[4] = {NULL, NULL, NULL, NULL};
    hr_status s = HR_OK;
    float copy_ms = 0.0f, read_ms = 0.0f;
    cudaError_t e = cudaMalloc(&src, n);
    if (e == cudaSuccess)
        e = cudaMalloc(&dst, n);
    for (int i = 0; i < 4 && e == cudaSuccess; i++)
        e = cudaEventCreate(&ev[i]);
    if (e == cudaSuccess)
        e = cudaMemset(src, 0x5a, n);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, 0);
    if (e == cudaSuccess)
        e = cudaEventRecord(ev[0], 0);
    for (int i = 0; i < n_passes && e == cudaSuccess; i++)
        e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, 0);
    if (e == cudaSuccess)
        e = cudaEventRecord(ev[1], 0);
    /* the reads' sink: the destination's first word (the copies are done) */
    for (int i = 0; i <= n_passes && e == cudaSuccess; i++) {
        if (i == 1 && (e = cudaEventRecord(ev[2], 0)) != cudaSuccess)
            break;
        ck_read_stream(0, src, (int64_t)n, (unsigned *)dst);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess)
        e = cudaEventRecord(ev[3], 0);
    if (e == cudaSuccess)
        e = cudaEventSynchronize(ev[3]);
    if (e == cudaSuccess)
        e = cudaEventElapsedTime(&copy_ms, ev[0], ev[1]);
    if (e == cudaSuccess)
        e = cudaEventElapsedTime(&read_ms, ev[2], ev[3]);
    if (e != cudaSuccess) {
        s = hr_err_set(err, HR_ERR_DEVICE, "cuda: timing copies and reads: %s",
                       cudaGetErrorString(e));
        cudaGetLastError();
    } else {
        *copy_bytes_per_s = 2.0 * (double)n * n_passes / ((double)copy_ms * 1e-3);
        *read_bytes_per_s = (double)n * n_passes / ((double)read_ms * 1e-3);
    }
    for (int i = 0; i < 4; i++)
        if (ev[i])
            cudaEventDestroy(ev[i]);
    cudaFree(src);
    cudaFree(dst);
    return s;
}

/* ---------------------------------------------------------------- memory */

/* Device memory: from the arena the engine planned (256-byte aligned
 * pieces, sizes from backend/sizes.h), or cudaMalloc per piece when the
 * backend was created without a plan (tests). Running past the arena means
 * the plan and the code disagree: refused, never extended. */
hr_status cuda_dev_alloc(cuda_backend *c, size_t n_bytes, mem_part part, const char *what,
                         void **out, hr_error *err) {
    static const char *const parts[MEM_PARTS] = {"weights", "KV cache", "activations",
                                                 "workspace"};
    uint64_t n = sizes_align(n_bytes ? n_bytes : 1, SIZES_CUDA_ALIGN);
    if (c->arena) {
        if (c->arena_used + n > c->arena_bytes)
            return hr_err_set(err, HR_ERR_NO_FIT,
                              "cuda: %s (%s) needs %llu bytes beyond the %llu planned",
                              what, parts[part], (unsigned long long)n,
                              (unsigned long long)c->arena_bytes);
        *out = c->arena + c->arena_used;
        c->arena_used += n;
        c->bytes[part] += n;
        return HR_OK;
    }
    if (c->n_allocs == c->cap_allocs) {
        int32_t cap = c->cap_allocs ? 2 * c->cap_allocs : 256;
        void **a = hr_realloc(c->allocs, (size_t)cap * sizeof *a);
        if (!a)
            return hr_err_set(err, HR_ERR_NOMEM, "cuda backend: out of host memory");
        c->allocs = a;
        c->cap_allocs = cap;
    }
    void *p = NULL;
    if (hr_alloc_should_fail()) /* the fault-injection hook covers device memory too */
        return hr_err_set(err, HR_ERR_NOMEM, "cuda: cannot allocate %zu bytes for %s", n_bytes,
                          what);
    cudaError_t e = cudaMalloc(&p, n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return hr_err_set(err, HR_ERR_NOMEM, "cuda: cannot allocate %llu bytes for %s (%s): %s",
                          (unsigned long long)n, what, parts[part], cudaGetErrorString(e));
    }
    c->allocs[c->n_allocs++] = p;
    c->bytes[part] += n;
    *out = p;
    return HR_OK;
}

/* Records a host allocation the backend frees; frees p and fails if the
 * list cannot grow. */
hr_status cuda_own_host(cuda_backend *c, void *p, hr_error *err) {
    if (c->n_host == c->cap_host) {
        int32_t cap = c->cap_host ? 2 * c->cap_host : 256;
        void **a = hr_realloc(c->host, (size_t)cap * sizeof *a);
        if (!a) {
            hr_free(p);
            return hr_err_set(err, HR_ERR_NOMEM, "cuda backend: out of host memory");
        }
        c->host = a;
        c->cap_host = cap;
    }
    c->host[c->n_host++] = p;
    return HR_OK;
}

hr_status cuda_tensor_alloc(hr_backend *b, int64_t rows, int64_t cols, bool narrow,
                            be_tensor *out, hr_error *err) {
    cuda_backend *c = (cuda_backend *)b;
    /* rows padded to 64 elements: every row starts 128-byte aligned, as the
     * 16-byte vector loads and cuBLASLt prefer */
    HR_TRY(cuda_dev_alloc(c, sizes_tensor(SIZES_CUDA, rows, cols, narrow), MEM_ACT,
                          "activations", &out->data, err));
    int64_t ld = sizes_ld(SIZES_CUDA, cols);
    out->cols = cols;
    out->ld = ld;
    out->narrow = narrow;
    return HR_OK;
}

hr_status cuda_kv_alloc(hr_backend *b, const be_config *cfg, hr_error *err) {
    cuda_backend *c = (cuda_backend *)b;
    const hr_model_info *in = b->info;
    /* K and V in kv_dtype (the engine refuses them apart on cuda): the
     * compute type, or q8_0 (int8 codes, then one f16 scale a 32 after a
     * layer's codes; attention.cu dequantizes) */
    if (cfg->kv_dtype != c->p.compute && cfg->kv_dtype != HR_DTYPE_Q8_0)
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "cuda: the KV cache is kept in the compute type (%s) or q8_0, not %s",
                          hr_dtype_name(c->p.compute), hr_dtype_name(cfg->kv_dtype));
    if (cfg->kv_dtype == HR_DTYPE_Q8_0 && in->head_dim % 32 != 0)
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "cuda: a q8_0 KV cache needs a head size that is a multiple of 32");
    if (cfg->max_rows > 4096 || cfg->max_out > 4096)
        return hr_err_set(err, HR_ERR_UNSUPPORTED, "cuda: steps of more than 4096 rows");
    c->kv = *cfg;
    const int64_t max_ctx = (int64_t)cfg->max_blocks_per_seq * cfg->block_size;
    const size_t layer_rows = (size_t)cfg->n_block * (size_t)in->n_head_kv *
                              (size_t)cfg->block_size; /* sizes_kv's count */
    c->kv_q8 = cfg->kv_dtype == HR_DTYPE_Q8_0;
    c->kv_layer_bytes = layer_rows * (size_t)sizes_kv_row_bytes(in, cfg->kv_dtype);
    c->kv_scale_at = c->kv_q8 ? layer_rows * (size_t)in->head_dim : 0;
    size_t pool = c->kv_layer_bytes * (size_t)in->n_layer;
    HR_TRY(cuda_dev_alloc(c, pool, MEM_KV, "the K cache", (void **)&c->k_pool, err));
    HR_TRY(cuda_dev_alloc(c, pool, MEM_KV, "the V cache", (void **)&c->v_pool, err));

    /* Attention workspace: flash-decoding partials, and the naive kernel's
     * scores when it can run (--attn naive, or a head size the flash kernels
     * lack); a decode row is one sequence's single-token segment, so at most
     * n_seq_max of them. The kernel spreads each row's context over the
     * splits at run time (backend/sizes.c chooses their number). */
    c->n_splits = sizes_cuda_splits(in, cfg);
    int64_t att = ck_attention_work_floats(cfg->n_seq_max, in->n_head, in->head_dim,
                                           c->n_splits, 0);
    if (c->p.tuning.attn_naive || !sizes_cuda_flash_dh(in->head_dim)) {
        int64_t naive =
            ck_attention_work_floats(cfg->max_rows, in->n_head, in->head_dim, 0, (int)max_ctx);
        att = naive > att ? naive : att;
    }
    HR_TRY(cuda_dev_alloc(c, (size_t)att * sizeof(float), MEM_WORK, "attention workspace",
                          (void **)&c->att_work, err));
    HR_TRY(cuda_dev_alloc(c, (size_t)(in->head_dim / 2) * sizeof(float), MEM_WORK, "rope",
                          (void **)&c->inv_freq, err));
    if (c->p.packed) { /* sizes_workspace's packed part */
        const int64_t xq_rows = cfg->max_rows < SIZES_CUDA_PACKED_GEMV_ROWS
                                    ? cfg->max_rows
                                    : SIZES_CUDA_PACKED_GEMV_ROWS;
        HR_TRY(cuda_dev_alloc(c, sizes_cuda_xq_bytes(xq_rows, c->max_k), MEM_WORK,
                              "packed GEMV activations", &c->xq, err));
        HR_TRY(cuda_dev_alloc(c, SIZES_CUDA_DEQUANT_SCRATCH, MEM_WORK, "packed GEMM scratch",
                              &c->dequant, err));
    }
    HR_TRY(cuda_pstep_alloc(c, err));
    HR_CUDA_TRY(cudaMemcpy(c->inv_freq, cfg->rope_inv_freq,
                           (size_t)(in->head_dim / 2) * sizeof(float), cudaMemcpyHostToDevice));

    /* the step's metadata, at fixed addresses (a captured graph reads them) */
    const size_t B = (size_t)cfg->max_rows;
    c->o_tok = 0;
    c->o_pos = c->o_tok + B;
    c->o_slot = c->o_pos + B;
    c->o_seq = c->o_slot + B;
    c->o_out = c->o_seq + B;
    c->o_dec = c->o_out + (size_t)cfg->max_out;
    c->o_trow = c->o_dec + B;
    c->o_tn = c->o_trow + B;
    c->o_bt = c->o_tn + B;
    c->o_chain = c->o_bt + (size_t)cfg->n_seq_max * (size_t)cfg->max_blocks_per_seq;
    c->meta_ints = c->o_chain + 1;
    HR_ASSERT(c->meta_ints == sizes_cuda_meta_ints(cfg));
    HR_CUDA_TRY(cudaMallocHost((void **)&c->h_meta, c->meta_ints * sizeof(int32_t)));
    HR_TRY(cuda_dev_alloc(c, c->meta_ints * sizeof(int32_t), MEM_WORK, "step metadata",
                          (void **)&c->d_meta, err));
    /* the sampler reads its parameters from host memory and writes the ids
     * there (mapped, pinned): a step's graph needs no copies around it (the
     * sampling 16.6 -> 10.1 us a token with graphs off, H200, 2026-12-01) */
    HR_CUDA_TRY(cudaHostAlloc((void **)&c->h_sp, (size_t)cfg->max_out * sizeof *c->h_sp,
                              cudaHostAllocMapped));
    HR_CUDA_TRY(cudaHostAlloc((void **)&c->h_tok, (size_t)(cfg->max_out + 2) * sizeof(int32_t),
                              cudaHostAllocMapped));
    HR_CUDA_TRY(cudaHostGetDevicePointer((void **)&c->d_sp, c->h_sp, 0));
    HR_CUDA_TRY(cudaHostGetDevicePointer((void **)&c->d_tok, c->h_tok, 0));
    size_t sample_work = ck_sample_work_bytes(cfg->max_out, in->n_vocab);
    if (sample_work > 0)
        HR_TRY(cuda_dev_alloc(c, sample_work, MEM_WORK, "sampling", &c->sample_work, err));
    /* deferred and chained steps, except while the steps' ops are timed */
    c->base.chains = !c->prof && !c->d_trace;
    /* keys (cuda_begin_step): 3 B + mode, 3 (max_rows + 1) + mode the persistent step */
    size_t n_graphs = 3 * ((size_t)cfg->max_rows + 2);
    c->graphs = hr_calloc(n_graphs, sizeof *c->graphs);
    c->graph_state = hr_calloc(n_graphs, 1);
    if (!c->graphs || !c->graph_state)
        return hr_err_set(err, HR_ERR_NOMEM, "cuda backend: out of host memory");

    /* the weights are all up: wait for the last copies and report */
    HR_CUDA_TRY(cudaStreamSynchronize(c->stream));
    cuda_progress(c, true);
    HR_LOG_I("weights: %.2f GB to the device in %.2f s (%.2f GB/s)", (double)c->uploaded / 1e9,
             c->upload_s, c->upload_s > 0 ? (double)c->uploaded / 1e9 / c->upload_s : 0.0);
    return HR_OK;
}

void cuda_held(const hr_backend *b, be_memory *out) {
    const cuda_backend *c = (const cuda_backend *)b;
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    *out = (be_memory){.weights = c->bytes[MEM_WEIGHTS],
                       .kv = c->bytes[MEM_KV],
                       .activations = c->bytes[MEM_ACT],
                       .workspace = c->bytes[MEM_WORK],
                       .graphs = c->graph_bytes,
                       .runtime = c->runtime_bytes,
                       .device_total = total_b,
                       .device_free = free_b,
                       .upload_seconds = c->upload_s};
}

/* Tests: rows of a tensor to / from f32 host memory, converting the 16-bit
 * matmul inputs on the host. */
hr_status cuda_write_tensor(hr_backend *b, be_tensor *t, int64_t rows, const float *host,
                            hr_error *err) {
    cuda_backend *c = (cuda_backend *)b;
    const bool narrow = t->narrow;
    size_t elem = narrow ? 2 : 4, n = (size_t)rows * (size_t)t->cols;
    void *tmp = hr_malloc(n * elem);
    if (!tmp)
        return hr_err_set(err, HR_ERR_NOMEM, "cuda: out of host memory");
    if (narrow)
        for (size_t i = 0; i < n; i++)
            ((uint16_t *)tmp)[i] =
                c->dt == CK_BF16 ? hr_f32_to_bf16(host[i]) : hr_f32_to_f16(host[i]);
    else
        memcpy(tmp, host, n * elem);
    /* on the backend's stream, which does not synchronise with the default
     * one: ordered after the work already queued, and done on return */
    cudaError_t e = cudaMemcpy2DAsync(t->data, (size_t)t->ld * elem, tmp,
                                      (size_t)t->cols * elem, (size_t)t->cols * elem,
                                      (size_t)rows, cudaMemcpyHostToDevice, c->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->stream);
    hr_free(tmp);
    if (e != cudaSuccess)
        return hr_err_set(err, HR_ERR_DEVICE, "cuda: write_tensor: %s", cudaGetErrorString(e));
    return HR_OK;
}

hr_status cuda_read_tensor(hr_backend *b, const be_tensor *t, int64_t rows, float *host,
                           hr_error *err) {
    cuda_backend *c = (cuda_backend *)b;
    const bool narrow = t->narrow;
    size_t elem = narrow ? 2 : 4, n = (size_t)rows * (size_t)t->cols;
    void *tmp = hr_malloc(n * elem);
    if (!tmp)
        return hr_err_set(err, HR_ERR_NOMEM, "cuda: out of host memory");
    cudaError_t e = cudaMemcpy2DAsync(tmp, (size_t)t->cols * elem, t->data,
                                      (size_t)t->ld * elem, (size_t)t->cols * elem,
                                      (size_t)rows, cudaMemcpyDeviceToHost, c->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->stream);
    if (e == cudaSuccess && narrow) {
        for (size_t i = 0; i < n; i++) {
            uint16_t h = ((uint16_t *)tmp)[i];
            host[i] = c->dt == CK_BF16 ? hr_bf16_to_f32(h) : hr_f16_to_f32(h);
        }
    } else if (e == cudaSuccess) {
        memcpy(host, tmp, n * elem);
    }
    hr_free(tmp);
    if (e != cudaSuccess)
        return hr_err_set(err, HR_ERR_DEVICE, "cuda: read_tensor: %s", cudaGetErrorString(e));
    return HR_OK;
}
