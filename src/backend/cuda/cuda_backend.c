/*
 * cuda_backend.c — the CUDA backend's entry: creation (the device, the
 * stream, the pinned staging buffers, the planned arena, cuBLASLt), the ops
 * table, and free. The host side is split by job, sharing the struct of
 * cuda_internal.h:
 *
 *   cuda_memory.c   device queries, device memory (every byte counted by
 *                   part), the KV pool and the step's metadata at fixed
 *                   device addresses, the memory report
 *   cuda_upload.c   weight upload through pinned staging buffers, the norm
 *                   fold
 *   cuda_graph.c    begin_step / end_step / wait_step: the step's metadata,
 *                   one CUDA graph per decode step, deferred steps
 *   cuda_ops.c      each op, enqueued as kernels of the *.cu files
 *   cuda_pstep.c    the persistent decode step's program, recorded from the
 *                   same ops and run as one kernel (persistent.cu)
 */
#include "backend/cuda/cuda_internal.h"

#include "backend/sizes.h"
#include "util/alloc.h"

#include <stdlib.h>
#include <string.h>

/* Decode blocks a step aims at (dec_splits): a step of many sequences
 * needs fewer splits to fill the GPU (64 sequences of Llama-2-7B: 2048 rows
 * x kv heads), and more splits than that only add merging; one sequence
 * keeps up to 64 splits (32 kv heads). Measured in
 * docs/journal/attention.md. */
#define DEC_FILL_BLOCKS 2048

static void cuda_free_backend(hr_backend *b) {
    cuda_backend *c = (cuda_backend *)b;
    if (!c)
        return;
    if (c->stream)
        cudaStreamSynchronize(c->stream);
    cuda_profile_report(c->prof);
    cuda_profile_free(c->prof);
    cuda_pstep_trace_report(c);
    if (c->d_trace)
        cudaFree(c->d_trace);
    if (c->graphs)
        for (int32_t i = 0; i < 3 * (c->kv.max_rows + 2); i++)
            if (c->graphs[i])
                cudaGraphExecDestroy(c->graphs[i]);
    hr_free(c->graphs);
    hr_free(c->graph_state);
    for (int32_t i = 0; i < c->n_allocs; i++)
        cudaFree(c->allocs[i]);
    hr_free(c->allocs);
    if (c->arena)
        cudaFree(c->arena);
    for (int32_t i = 0; i < c->n_host; i++)
        hr_free(c->host[i]);
    hr_free(c->host);
    for (int i = 0; i < 2; i++) {
        if (c->stage[i])
            cudaFreeHost(c->stage[i]);
        if (c->stage_done[i])
            cudaEventDestroy(c->stage_done[i]);
        if (c->fly_ev[i])
            cudaEventDestroy(c->fly_ev[i]);
    }
    if (c->h_meta)
        cudaFreeHost(c->h_meta);
    if (c->h_sp)
        cudaFreeHost(c->h_sp);
    if (c->h_tok)
        cudaFreeHost(c->h_tok);
    cuda_gemm_free(c->gemm);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    hr_free(c);
}

static const hr_backend_ops cuda_ops = {
    .name = "cuda",
    .free = cuda_free_backend,
    .weight_create = cuda_weight_create,
    .vector_create = cuda_vector_create,
    .tensor_alloc = cuda_tensor_alloc,
    .kv_alloc = cuda_kv_alloc,
    .begin_step = cuda_begin_step,
    .embed = cuda_embed,
    .rmsnorm = cuda_rmsnorm,
    .add_rmsnorm = cuda_add_rmsnorm,
    .matmul = cuda_matmul,
    .rope_kv_store = cuda_rope_kv_store,
    .attention = cuda_attention,
    .swiglu = cuda_swiglu,
    .gather_rows = cuda_gather_rows,
    .end_step = cuda_end_step,
    .wait_step = cuda_wait_step,
    .can_sample = true,
    .memory = cuda_held,
    .write_tensor = cuda_write_tensor,
    .read_tensor = cuda_read_tensor,
};

hr_status backend_cuda_create(const hr_model_info *info, const be_params *p, hr_backend **out,
                              hr_error *err) {
    if (p->compute != HR_DTYPE_BF16 && p->compute != HR_DTYPE_F16)
        return hr_err_set(err, HR_ERR_INVALID, "cuda: compute type %s (bf16 or f16)",
                          hr_dtype_name(p->compute));
    cuda_backend *c = hr_calloc(1, sizeof *c);
    if (!c)
        return hr_err_set(err, HR_ERR_NOMEM, "cuda backend: out of host memory");
    c->base.ops = &cuda_ops;
    c->base.info = info;
    c->p = *p;
    c->dt = p->compute == HR_DTYPE_BF16 ? CK_BF16 : CK_F16;
    hr_status s = HR_OK;
    size_t free0 = 0, total = 0, free1 = 0;
    void *ws = NULL;
    cudaError_t e = cudaSetDevice(p->device_index);
    if (e == cudaSuccess)
        e = cudaFree(NULL); /* create the context now, to measure what it takes */
    if (e == cudaSuccess)
        e = cudaMemGetInfo(&free0, &total);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    for (int i = 0; i < 2 && e == cudaSuccess; i++) {
        e = cudaMallocHost(&c->stage[i], STAGE_BYTES);
        if (e == cudaSuccess)
            e = cudaEventCreateWithFlags(&c->stage_done[i], cudaEventDisableTiming);
        if (e == cudaSuccess)
            e = cudaEventCreateWithFlags(&c->fly_ev[i], cudaEventDisableTiming);
    }
    if (e != cudaSuccess) {
        s = hr_err_set(err, HR_ERR_DEVICE, "cuda: device %d: %s", p->device_index,
                       cudaGetErrorString(e));
        goto fail;
    }
    if ((s = cuda_profile_create(&c->prof, err)) != HR_OK)
        goto fail;
    /* HEADROOM_CUDA_PDL=0 turns programmatic dependent launch off, to
     * measure what it gains (a process-wide switch: kernels read it at
     * launch; the generic path has none: ck_set_pdl). The device is set, so
     * its capabilities are read now (caps.cu). */
    ck_set_pdl(!hr_env_get()->cuda_pdl_off);
    /* every split (-1) measures what fewer splits gain */
    const int32_t fill = p->tuning.dec_fill;
    c->dec_fill = fill == 0 ? DEC_FILL_BLOCKS : fill < 0 ? 0 : fill;
    /* HEADROOM_CUDA_PACKED_MMA_ROWS moves the tensor-core kernel's upper end
     * (to measure it against the scratch path) */
    const int32_t mma = hr_env_get()->cuda_packed_mma_rows;
    c->packed_mma_rows = mma < 0                            ? SIZES_CUDA_PACKED_MMA_ROWS
                         : mma < SIZES_CUDA_PACKED_GEMV_ROWS ? SIZES_CUDA_PACKED_GEMV_ROWS
                         : mma > SIZES_CUDA_PACKED_MMA_ROWS  ? SIZES_CUDA_PACKED_MMA_ROWS
                                                             : mma;
    if (p->arena_bytes > 0) {
        e = cudaMalloc((void **)&c->arena, p->arena_bytes);
        if (e != cudaSuccess) {
            cudaGetLastError();
            s = hr_err_set(err, HR_ERR_NO_FIT,
                           "cuda: the planned %llu bytes are not free on the device: %s",
                           (unsigned long long)p->arena_bytes, cudaGetErrorString(e));
            goto fail;
        }
        c->arena_bytes = p->arena_bytes;
    }
    if ((s = cuda_dev_alloc(c, SIZES_CUDA_GEMM_WORKSPACE, MEM_WORK, "cuBLASLt workspace",
                            &ws, err)) != HR_OK ||
        (s = cuda_gemm_create(ws, SIZES_CUDA_GEMM_WORKSPACE, &c->gemm, err)) != HR_OK)
        goto fail;
    cudaMemGetInfo(&free1, &total);
    /* the context, the stream and cuBLASLt's handle: what the device lost
     * before any tensor, less what we allocated ourselves */
    c->runtime_bytes = (uint64_t)(total - free1) -
                       (c->arena ? c->arena_bytes : c->bytes[MEM_WORK]);
    *out = &c->base;
    return HR_OK;
fail:
    cuda_free_backend(&c->base);
    return s;
}
