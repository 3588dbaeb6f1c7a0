/*
 * cuda_backend.c — the CUDA backend's host side: device memory (every byte
 * counted by part), weight upload through pinned staging buffers, the step's
 * metadata at fixed device addresses, the ops table, and one CUDA graph per
 * decode step.
 *
 * Graphs: a decode step (every segment one token, every row wanting its
 * next token) of B rows is run eagerly the first time (cuBLASLt chooses its
 * algorithms then), captured the second time, and replayed from then on:
 * begin_step copies the step's tokens, positions, slots and block tables to
 * the same device buffers, the ops become no-ops, and end_step fills the
 * sampling parameters (pinned, mapped: the sampler reads them and writes the
 * ids there) and launches the graph. Graphs are keyed by (B, sampling on the
 * device or not).
 *
 * Errors inside ops (which return void) are kept and reported by end_step.
 */
#include "backend/cuda/cuda_backend.h"

#include "backend/cuda/cuda_gemm.h"
#include "backend/cuda/cuda_profile.h"
#include "backend/cuda/kernels.h"
#include "backend/sizes.h"
#include "quant/quant.h"
#include "util/alloc.h"
#include "util/fp16.h"
#include "util/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define HR_CUDA_TRY(expr)                                                                  \
    do {                                                                                   \
        cudaError_t e_ = (expr);                                                           \
        if (e_ != cudaSuccess)                                                             \
            return hr_err_set(err, HR_ERR_DEVICE, "cuda: %s: %s (%s:%d)", #expr,           \
                              cudaGetErrorString(e_), __FILE__, __LINE__);                  \
    } while (0)

#define STAGE_BYTES ((size_t)64 << 20)  /* two pinned buffers of 64 MiB: copy one, fill the other */
/* The shortest flash-decoding split: one round of the decode kernel's 4
 * warps x 32 positions. At 64, a short context's blocks ran 2 of their 4
 * warps (docs/journal/attention.md). */
#define SPLIT_LEN 128
/* Decode blocks a step aims at (dec_splits): a step of many sequences
 * needs fewer splits to fill the GPU (64 sequences of Llama-2-7B: 2048 rows
 * x kv heads), and more splits than that only add merging; one sequence
 * keeps up to 64 splits (32 kv heads). Measured in
 * docs/journal/attention.md. */
#define DEC_FILL_BLOCKS 2048

_Static_assert(CK_PSTEP_SYNC == SIZES_CUDA_PSTEP_SYNC, "backend/sizes.h");
_Static_assert(sizeof(ck_pstep_op) <= SIZES_CUDA_PSTEP_OP && CK_PSTEP_ROWS == SIZES_CUDA_PSTEP_ROWS,
               "backend/sizes.h must know the persistent step's op size and rows");

typedef enum { MEM_WEIGHTS, MEM_KV, MEM_ACT, MEM_WORK, MEM_PARTS } mem_part;

struct be_weight {
    void *w;       /* (n_rows, k) ck, the parts stacked */
    float *bias;   /* (n_rows) f32 or NULL */
    int64_t n_rows, k;
};

struct be_vector {
    float *data; /* (n) f32 */
    int64_t n;
    bool folded; /* into the matrix it feeds (weight_create): data is all ones */
};

typedef struct {
    hr_backend base;
    be_params p;
    ck_dtype dt;
    cudaStream_t stream;
    cuda_gemm *gemm;
    uint8_t *arena;         /* one cudaMalloc of the planned bytes, or NULL */
    uint64_t arena_bytes, arena_used;
    void **allocs; /* device allocations (cudaFree) */
    int32_t n_allocs, cap_allocs;
    void **host;   /* host structs (hr_free) */
    int32_t n_host, cap_host;
    uint64_t bytes[MEM_PARTS];
    uint64_t runtime_bytes, graph_bytes;
    /* weight upload */
    void *stage[2];
    cudaEvent_t stage_done[2];
    int stage_next;
    double upload_s, t_progress;
    uint64_t uploaded;
    /* KV pool and attention */
    be_config kv;
    uint8_t *k_pool, *v_pool;
    size_t kv_layer_bytes;
    float *inv_freq;
    int n_splits;         /* flash-decoding splits the workspace holds */
    int dec_fill;         /* decode blocks a step aims at (dec_splits) */
    float *att_work;
    /* step metadata: pinned host mirror and device copy, fixed offsets */
    int32_t *h_meta, *d_meta;
    size_t meta_ints;
    size_t o_tok, o_pos, o_slot, o_seq, o_out, o_dec, o_trow, o_tn, o_bt, o_chain;
    /* sampling parameters and ids: pinned host memory mapped into the
     * device's address space (d_: the device's pointer to the same bytes) */
    ck_sample_params *h_sp, *d_sp;
    int32_t *h_tok, *d_tok; /* (max_out + 2): + the two ids of chained steps */
    void *sample_work;
    /* deferred steps (hr_step.defer), oldest first: the event after each
     * and its chain count (which of the two chained ids is its) */
    cudaEvent_t fly_ev[2];
    int32_t fly_count[2];
    int n_fly, fly_head;
    int32_t chain_count; /* the current step's: 0, or the chained step's before + 1 */
    bool defer, chained, greedy;
    /* the current step */
    int32_t n_rows, n_out, n_dec, n_tiles, tile_rows;
    bool decode_only, capturing, replaying;
    int graph_key;
    cudaGraphExec_t *graphs; /* (2 * (max_rows + 1)) */
    uint8_t *graph_state;    /* 0 never run, 1 run eagerly once, 2 captured */
    int n_graphs;
    /* the persistent decode step (persistent.cu): a step of one row at a
     * position below CUDA_PSTEP_MAX_CTX runs as one kernel; its ops are
     * recorded into prog and uploaded to d_prog when they differ from what
     * is there (prog_uploaded) */
    bool pstep_ok, pstep;
    ck_pstep_op *prog;          /* host: this step's ops */
    ck_pstep_op *prog_uploaded; /* host: what d_prog holds (n_uploaded ops) */
    ck_pstep_op *d_prog;
    int32_t n_prog, cap_prog, n_uploaded;
    struct { /* rotations recorded: the next attention does them */
        const void *qkv;
        bool neox;
    } pending_rope;
    struct { /* a norm recorded but not yet placed: the next GEMV may take it */
        bool on;
        const float *x;
        const float *w;
        void *y;
        float eps;
        int32_t D;
        void *gather_y; /* a gather of y's one row to here came after it */
    } pending_norm;
    int64_t n_pstep_steps;
    int pstep_max_k; /* the widest K of the step's GEMVs */
    int64_t pstep_logit_rows; /* logits rows the recorded program ranks (greedy steps) */
    bool pstep_norm_weights;  /* the recorded program has a norm whose weight is not folded */
    /* HEADROOM_CUDA_PSTEP_TRACE: per-op timestamps of every step (a
     * diagnostic allocation outside the plan), summed by op kind */
    uint64_t *d_trace, *h_trace;
    double trace_op_us[CKP_GATHER + 1], trace_bar_us[CKP_GATHER + 1];
    int64_t trace_n[CKP_GATHER + 1];
    unsigned *d_psync;
    unsigned long long *d_parts; /* the attention splits' partials */
    hr_error step_err;
    hr_status step_status;
    cuda_profile *prof; /* NULL unless HEADROOM_CUDA_PROFILE is set */
} cuda_backend;

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
static hr_status dev_alloc(cuda_backend *c, size_t n_bytes, mem_part part, const char *what,
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
static hr_status own_host(cuda_backend *c, void *p, hr_error *err) {
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

/* Adds a finished step's trace to the sums by op kind: an op lasts from
 * block 0 leaving the barrier before it to the last block's arrival after
 * it; the barrier from that arrival to block 0 leaving. */
static void pstep_trace_collect(cuda_backend *c) {
    const int32_t n = c->n_uploaded;
    if (!c->d_trace || n < 2 ||
        cudaMemcpy(c->h_trace, c->d_trace, (size_t)n * 3 * sizeof(uint64_t),
                   cudaMemcpyDeviceToHost) != cudaSuccess)
        return;
    for (int32_t i = 1; i + 1 < n; i++) {
        const uint64_t *t = c->h_trace + 3 * i, *prev = t - 3;
        const int k = c->prog_uploaded[i].kind;
        /* signed: two SMs' reads of the global timer can come out of
         * order by its granularity when a barrier is shorter */
        c->trace_op_us[k] += (double)(int64_t)(t[1] - prev[2]) / 1e3;
        c->trace_bar_us[k] += (double)(int64_t)(t[2] - t[1]) / 1e3;
        c->trace_n[k]++;
    }
}

static void pstep_trace_report(const cuda_backend *c) {
    static const char *const names[] = {"embed", "norm", "gemv", "attn", "swiglu", "gather"};
    for (int k = 0; c->d_trace && k <= CKP_GATHER; k++)
        if (c->trace_n[k] > 0)
            fprintf(stderr, "pstep trace: %-8s %8lld ops  %8.2f us an op  %6.2f us its barrier\n",
                    names[k], (long long)c->trace_n[k], c->trace_op_us[k] / (double)c->trace_n[k],
                    c->trace_bar_us[k] / (double)c->trace_n[k]);
}

static void cuda_free_backend(hr_backend *b) {
    cuda_backend *c = (cuda_backend *)b;
    if (!c)
        return;
    if (c->stream)
        cudaStreamSynchronize(c->stream);
    cuda_profile_report(c->prof);
    cuda_profile_free(c->prof);
    pstep_trace_report(c);
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

/* ---------------------------------------------------------------- upload */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void progress(cuda_backend *c, bool done) {
    if (!c->p.progress || !isatty(2))
        return;
    double t = now_s();
    if (!done && t - c->t_progress < 0.25)
        return;
    c->t_progress = t;
    double gb = (double)c->uploaded / 1e9;
    fprintf(stderr, "\rloading weights: %.2f GB, %.2f GB/s%s", gb,
            c->upload_s > 0 ? gb / c->upload_s : 0.0, done ? "\n" : "");
}

/* Copies rows [0, n_rows) of tensor t into dst (ck) through the pinned
 * staging buffers, converting on the host when t is not already ck. */
static hr_status upload(cuda_backend *c, void *dst, const model_tensor *t, hr_error *err) {
    if (c->p.skip_upload) /* memory and speed measurements only: weights left unset */
        return HR_OK;
    double t0 = now_s();
    const int64_t K = t->ne[0], rows = t->n_dims > 1 ? t->ne[1] : 1;
    const hr_dtype ck = c->p.compute;
    const size_t src_row = hr_dtype_row_bytes(t->dtype, K), dst_row = (size_t)K * 2;
    int64_t per_chunk = (int64_t)(STAGE_BYTES / (dst_row > src_row ? dst_row : src_row));
    if (per_chunk < 1)
        return hr_err_set(err, HR_ERR_UNSUPPORTED, "cuda: tensor '%s' rows are too long",
                          t->name);
    float *tmp = NULL;
    if (t->dtype != ck && !(tmp = hr_malloc((size_t)K * sizeof(float))))
        return hr_err_set(err, HR_ERR_NOMEM, "cuda: out of host memory");
    hr_status s = HR_OK;
    for (int64_t r0 = 0; r0 < rows && s == HR_OK; r0 += per_chunk) {
        int64_t n = rows - r0 < per_chunk ? rows - r0 : per_chunk;
        int i = c->stage_next;
        c->stage_next ^= 1;
        cudaError_t e = cudaEventSynchronize(c->stage_done[i]);
        uint8_t *stage = c->stage[i];
        if (t->dtype == ck) {
            memcpy(stage, t->data + (size_t)r0 * src_row, (size_t)n * dst_row);
        } else {
            uint16_t *out = (uint16_t *)stage;
            for (int64_t r = 0; r < n; r++) {
                quant_dequantize_row(t->dtype, t->data + (size_t)(r0 + r) * src_row, tmp, K);
                for (int64_t k = 0; k < K; k++)
                    out[r * K + k] =
                        ck == HR_DTYPE_BF16 ? hr_f32_to_bf16(tmp[k]) : hr_f32_to_f16(tmp[k]);
            }
        }
        if (e == cudaSuccess)
            e = cudaMemcpyAsync((uint8_t *)dst + (size_t)r0 * dst_row, stage, (size_t)n * dst_row,
                                cudaMemcpyHostToDevice, c->stream);
        if (e == cudaSuccess)
            e = cudaEventRecord(c->stage_done[i], c->stream);
        if (e != cudaSuccess)
            s = hr_err_set(err, HR_ERR_DEVICE, "cuda: uploading '%s': %s", t->name,
                           cudaGetErrorString(e));
        c->uploaded += (uint64_t)n * dst_row;
        c->upload_s += now_s() - t0;
        t0 = now_s();
        progress(c, false);
    }
    hr_free(tmp);
    return s;
}

/* Folds norm weight v into W's columns. Only for bf16: the products of
 * small weights and small norm weights can fall below f16's normal range
 * (6.1e-5), where it keeps fewer bits than the norm's output would have.
 * Why fold at all: the persistent decode step then loads no norm weights
 * after its barriers (+0.6% decode, docs/journal/decode-step.md). */
static hr_status fold_norm(cuda_backend *c, be_weight *w, be_vector *v, hr_error *err) {
    if (c->p.no_norm_fold || c->p.compute != HR_DTYPE_BF16)
        return HR_OK;
    if (v->folded || v->n != w->k)
        return hr_err_set(err, HR_ERR_INVALID,
                          "cuda: a norm of %lld elements folded into a matrix of %lld columns%s",
                          (long long)v->n, (long long)w->k,
                          v->folded ? " after it was folded into another" : "");
    ck_fold_norm(c->stream, w->w, w->n_rows, (int)w->k, v->data, !c->p.skip_upload, c->dt);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return hr_err_set(err, HR_ERR_DEVICE, "cuda: folding a norm weight: %s",
                          cudaGetErrorString(e));
    v->folded = true;
    return HR_OK;
}

static hr_status cuda_weight_create(hr_backend *b, const model_tensor *const *parts,
                                    const model_tensor *const *biases, int n_parts,
                                    be_vector *fold, be_weight **out, hr_error *err) {
    cuda_backend *c = (cuda_backend *)b;
    be_weight *w = hr_calloc(1, sizeof *w);
    if (!w)
        return hr_err_set(err, HR_ERR_NOMEM, "cuda backend: out of host memory");
    w->k = parts[0]->ne[0];
    bool any_bias = false;
    for (int i = 0; i < n_parts; i++) {
        w->n_rows += parts[i]->ne[1];
        any_bias |= biases && biases[i];
    }
    hr_status s = HR_OK;
    if (w->k % 8 != 0)
        s = hr_err_set(err, HR_ERR_UNSUPPORTED,
                       "cuda: tensor '%s' has rows of %lld elements; the GPU kernels need a "
                       "multiple of 8",
                       parts[0]->name, (long long)w->k);
    if (s == HR_OK)
        s = dev_alloc(c, (size_t)w->n_rows * (size_t)w->k * 2, MEM_WEIGHTS, parts[0]->name,
                      &w->w, err);
    int64_t at = 0;
    for (int i = 0; i < n_parts && s == HR_OK; i++) {
        s = upload(c, (uint8_t *)w->w + (size_t)at * (size_t)w->k * 2, parts[i], err);
        at += parts[i]->ne[1];
    }
    if (s == HR_OK && fold)
        s = fold_norm(c, w, fold, err);
    if (s == HR_OK && any_bias) {
        float *hb = hr_calloc((size_t)w->n_rows, sizeof(float));
        s = hb ? dev_alloc(c, (size_t)w->n_rows * sizeof(float), MEM_WEIGHTS, "bias",
                           (void **)&w->bias, err)
               : hr_err_set(err, HR_ERR_NOMEM, "cuda backend: out of host memory");
        at = 0;
        for (int i = 0; i < n_parts && s == HR_OK; i++) {
            if (biases[i] && biases[i]->data)
                quant_dequantize_row(biases[i]->dtype, biases[i]->data, hb + at,
                                     biases[i]->ne[0]);
            at += parts[i]->ne[1];
        }
        if (s == HR_OK) {
            cudaError_t e = cudaMemcpy(w->bias, hb, (size_t)w->n_rows * sizeof(float),
                                       cudaMemcpyHostToDevice);
            if (e != cudaSuccess)
                s = hr_err_set(err, HR_ERR_DEVICE, "cuda: bias upload: %s",
                               cudaGetErrorString(e));
        }
        hr_free(hb);
    }
    if (s != HR_OK) {
        hr_free(w);
        return s;
    }
    HR_TRY(own_host(c, w, err));
    *out = w;
    return HR_OK;
}

static hr_status cuda_vector_create(hr_backend *b, const model_tensor *t, be_vector **out,
                                    hr_error *err) {
    cuda_backend *c = (cuda_backend *)b;
    be_vector *v = hr_calloc(1, sizeof *v);
    float *h = hr_calloc((size_t)t->ne[0], sizeof(float));
    if (!v || !h) {
        hr_free(v);
        hr_free(h);
        return hr_err_set(err, HR_ERR_NOMEM, "cuda backend: out of host memory");
    }
    v->n = t->ne[0];
    if (t->data)
        quant_dequantize_row(t->dtype, t->data, h, v->n);
    hr_status s = dev_alloc(c, (size_t)v->n * sizeof(float), MEM_WEIGHTS, t->name,
                            (void **)&v->data, err);
    if (s == HR_OK) {
        cudaError_t e =
            cudaMemcpy(v->data, h, (size_t)v->n * sizeof(float), cudaMemcpyHostToDevice);
        if (e != cudaSuccess)
            s = hr_err_set(err, HR_ERR_DEVICE, "cuda: uploading '%s': %s", t->name,
                           cudaGetErrorString(e));
    }
    hr_free(h);
    if (s != HR_OK) {
        hr_free(v);
        return s;
    }
    HR_TRY(own_host(c, v, err));
    *out = v;
    return HR_OK;
}

static hr_status cuda_tensor_alloc(hr_backend *b, int64_t rows, int64_t cols, bool narrow,
                                   be_tensor *out, hr_error *err) {
    cuda_backend *c = (cuda_backend *)b;
    /* rows padded to 64 elements: every row starts 128-byte aligned, as the
     * 16-byte vector loads and cuBLASLt prefer */
    HR_TRY(dev_alloc(c, sizes_tensor(SIZES_CUDA, rows, cols, narrow), MEM_ACT,
                     "activations", &out->data, err));
    int64_t ld = sizes_ld(SIZES_CUDA, cols);
    out->cols = cols;
    out->ld = ld;
    out->narrow = narrow;
    return HR_OK;
}

/* ---------------------------------------------------------------- persistent step */

/* The widest K of a decode step's GEMVs (the persistent kernel's x) */
static int64_t pstep_widest_k(const hr_model_info *in) {
    const int64_t qo = (int64_t)in->n_head * in->head_dim;
    const int64_t k = in->n_ff > in->n_embd ? in->n_ff : in->n_embd;
    return qo > k ? qo : k;
}

/* Whether this model's decode steps of one row can run as one kernel (the
 * Hopper path, caps.cu; persistent.cu's limits); HEADROOM_CUDA_PSTEP=0
 * keeps them op by op. */
static bool pstep_eligible(const cuda_backend *c, const hr_model_info *in) {
    const char *env = getenv("HEADROOM_CUDA_PSTEP");
    if ((env && strcmp(env, "0") == 0) || !ck_device_caps()->hopper || c->p.attn_naive ||
        in->n_head % in->n_head_kv != 0)
        return false;
    const int64_t widths[] = {in->n_embd, (int64_t)in->n_head * in->head_dim, in->n_ff};
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++)
        if (widths[i] % 256 != 0 || widths[i] > CK_PSTEP_MAX_K)
            return false;
    const int blocks = ck_pstep_blocks();
    if (blocks <= 0 ||
        sizes_cuda_pstep_ops_cut(in, (int64_t)CK_PSTEP_ROWS * blocks) > CK_PSTEP_MAX_OPS)
        return false;
    return ck_pstep_supported(c->dt, in->head_dim, (int)pstep_widest_k(in));
}

/* The program buffers (backend/sizes.c counts them whether used or not) and
 * the kernel's counters and its attention splits' partials, zeroed (the
 * kernel leaves them zero). */
static hr_status pstep_alloc(cuda_backend *c, hr_error *err) {
    const hr_model_info *in = c->base.info;
    c->cap_prog = (int32_t)sizes_cuda_pstep_ops(in);
    const size_t counters = (size_t)CK_PSTEP_SYNC * sizeof(unsigned);
    const size_t parts = sizes_cuda_pstep_parts_bytes(in, c->n_splits);
    HR_TRY(dev_alloc(c, (size_t)c->cap_prog * SIZES_CUDA_PSTEP_OP, MEM_WORK, "persistent step",
                     (void **)&c->d_prog, err));
    HR_TRY(dev_alloc(c, counters, MEM_WORK, "persistent step", (void **)&c->d_psync, err));
    HR_CUDA_TRY(cudaMemset(c->d_psync, 0, counters));
    HR_TRY(dev_alloc(c, parts, MEM_WORK, "persistent step", (void **)&c->d_parts, err));
    HR_CUDA_TRY(cudaMemset(c->d_parts, 0, parts));
    c->prog = hr_calloc((size_t)c->cap_prog, sizeof *c->prog);
    HR_TRY(own_host(c, c->prog, err));
    c->prog_uploaded = hr_calloc((size_t)c->cap_prog, sizeof *c->prog_uploaded);
    HR_TRY(own_host(c, c->prog_uploaded, err));
    c->pstep_ok = pstep_eligible(c, in);
    c->pstep_max_k = (int)pstep_widest_k(in);
    if (c->pstep_ok && getenv("HEADROOM_CUDA_PSTEP_TRACE")) {
        const size_t n = (size_t)c->cap_prog * 3 * sizeof(uint64_t);
        HR_CUDA_TRY(cudaMalloc((void **)&c->d_trace, n));
        HR_CUDA_TRY(cudaMemset(c->d_trace, 0, n)); /* [1] is a running max */
        c->h_trace = hr_calloc(1, n);
        HR_TRY(own_host(c, c->h_trace, err));
    }
    return HR_OK;
}

static hr_status cuda_kv_alloc(hr_backend *b, const be_config *cfg, hr_error *err) {
    cuda_backend *c = (cuda_backend *)b;
    const hr_model_info *in = b->info;
    if (cfg->kv_dtype != c->p.compute)
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "cuda: the KV cache is kept in the compute type (%s), not %s",
                          hr_dtype_name(c->p.compute), hr_dtype_name(cfg->kv_dtype));
    if (cfg->max_rows > 4096 || cfg->max_out > 4096)
        return hr_err_set(err, HR_ERR_UNSUPPORTED, "cuda: steps of more than 4096 rows");
    c->kv = *cfg;
    const int64_t max_ctx = (int64_t)cfg->max_blocks_per_seq * cfg->block_size;
    c->kv_layer_bytes = (size_t)cfg->n_block * (size_t)in->n_head_kv *
                        (size_t)cfg->block_size * (size_t)in->head_dim * 2;
    size_t pool = c->kv_layer_bytes * (size_t)in->n_layer;
    HR_TRY(dev_alloc(c, pool, MEM_KV, "the K cache", (void **)&c->k_pool, err));
    HR_TRY(dev_alloc(c, pool, MEM_KV, "the V cache", (void **)&c->v_pool, err));

    /* Attention workspace: flash-decoding partials, and the naive kernel's
     * scores when it can run (--attn naive, or a head size the flash kernels
     * lack); a decode row is one sequence's single-token segment, so at most
     * n_seq_max of them. The kernel spreads each row's context over the
     * splits at run time (backend/sizes.c chooses their number). */
    c->n_splits = sizes_cuda_splits(in, cfg);
    int64_t att = ck_attention_work_floats(cfg->n_seq_max, in->n_head, in->head_dim,
                                           c->n_splits, 0);
    if (c->p.attn_naive || !sizes_cuda_flash_dh(in->head_dim)) {
        int64_t naive =
            ck_attention_work_floats(cfg->max_rows, in->n_head, in->head_dim, 0, (int)max_ctx);
        att = naive > att ? naive : att;
    }
    HR_TRY(dev_alloc(c, (size_t)att * sizeof(float), MEM_WORK, "attention workspace",
                     (void **)&c->att_work, err));
    HR_TRY(dev_alloc(c, (size_t)(in->head_dim / 2) * sizeof(float), MEM_WORK, "rope",
                     (void **)&c->inv_freq, err));
    HR_TRY(pstep_alloc(c, err));
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
    HR_TRY(dev_alloc(c, c->meta_ints * sizeof(int32_t), MEM_WORK, "step metadata",
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
        HR_TRY(dev_alloc(c, sample_work, MEM_WORK, "sampling", &c->sample_work, err));
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
    progress(c, true);
    HR_LOG_I("weights: %.2f GB to the device in %.2f s (%.2f GB/s)", (double)c->uploaded / 1e9,
             c->upload_s, c->upload_s > 0 ? (double)c->uploaded / 1e9 / c->upload_s : 0.0);
    return HR_OK;
}

/* ---------------------------------------------------------------- the step */

static hr_status cuda_begin_step(hr_backend *b, const hr_step *s, hr_error *err) {
    cuda_backend *c = (cuda_backend *)b;
    if (s->n_rows > c->kv.max_rows || s->n_out > c->kv.max_out)
        return hr_err_set(err, HR_ERR_INVALID, "cuda: step of %d rows (%d outputs) over the "
                                               "planned %d (%d)",
                          s->n_rows, s->n_out, c->kv.max_rows, c->kv.max_out);
    cuda_profile_collect(c->prof); /* drops the marks of a step that failed */
    c->step_status = HR_OK;
    c->n_rows = s->n_rows;
    c->n_out = s->n_out;
    if ((s->defer || s->chained) && !b->chains)
        return hr_err_set(err, HR_ERR_UNSUPPORTED, "cuda: deferred steps are off (profiling)");
    const bool one_row = s->n_rows == 1 && s->n_out == 1 && s->n_seg == 1 &&
                         s->segs[0].n == 1 && s->out_rows[0] == 0 && s->device_sample;
    if ((s->defer || s->chained) && !one_row)
        return hr_err_set(err, HR_ERR_INVALID, "cuda: a deferred or chained step must be one "
                                               "decode row sampled on the device");
    if (s->chained ? !s->defer || c->n_fly != 1 : c->n_fly > 0)
        return hr_err_set(err, HR_ERR_INVALID, "cuda: %s step with %d deferred steps queued",
                          s->chained ? "a chained" : "an unchained", c->n_fly);
    c->defer = s->defer;
    c->chained = s->chained;
    c->greedy = s->device_sample && s->greedy;
    /* a chained step's metadata is made on the device by the step before
     * (ck_chain): the host writes none, and the copy before may still be
     * queued */
    int32_t *m = c->chained ? NULL : c->h_meta;
    const size_t B = (size_t)s->n_rows;
    if (m) {
        memcpy(m + c->o_tok, s->tokens, B * sizeof(int32_t));
        memcpy(m + c->o_pos, s->pos, B * sizeof(int32_t));
        memcpy(m + c->o_slot, s->slot, B * sizeof(int32_t));
        memcpy(m + c->o_out, s->out_rows, (size_t)s->n_out * sizeof(int32_t));
    }
    c->n_dec = c->n_tiles = 0;
    c->decode_only = s->n_out == s->n_rows;
    /* one tile size for the step's prefill segments, from the longest (the
     * kernels' rule); n_tiles stays <= n_rows <= max_rows, the size of the
     * tile lists, whatever the size */
    int32_t longest = 0;
    for (int32_t i = 0; i < s->n_seg; i++)
        longest = s->segs[i].n > longest ? s->segs[i].n : longest;
    const int32_t tile = ck_attention_tile_rows(longest, b->info->n_head, b->info->head_dim);
    c->tile_rows = tile;
    for (int32_t i = 0; i < s->n_seg; i++) {
        const step_segment *g = &s->segs[i];
        for (int32_t r = 0; r < g->n && m; r++)
            m[c->o_seq + (size_t)(g->row0 + r)] = g->seq;
        if (g->n == 1) {
            if (m)
                m[c->o_dec + (size_t)c->n_dec] = g->row0;
            c->n_dec++;
        } else {
            c->decode_only = false;
            for (int32_t r = 0; r < g->n; r += tile) {
                if (m) {
                    m[c->o_trow + (size_t)c->n_tiles] = g->row0 + r;
                    m[c->o_tn + (size_t)c->n_tiles] = g->n - r < tile ? g->n - r : tile;
                }
                c->n_tiles++;
            }
        }
    }
    for (int32_t i = 0; i < s->n_out && c->decode_only; i++)
        c->decode_only = s->out_rows[i] == i;
    c->chain_count = c->chained ? c->chain_count + 1 : 0;
    if (m) {
        const size_t tables = (size_t)c->kv.n_seq_max * (size_t)c->kv.max_blocks_per_seq;
        memcpy(m + c->o_bt, s->block_tables, tables * sizeof(int32_t));
        m[c->o_chain] = 0;
        HR_CUDA_TRY(cudaMemcpyAsync(c->d_meta, c->h_meta, c->meta_ints * sizeof(int32_t),
                                    cudaMemcpyHostToDevice, c->stream));
    }

    /* a decode step of B rows: eager the first time, captured the second
     * (after the metadata copy above, which stays outside the graph),
     * replayed after that */
    c->pstep = c->pstep_ok && c->decode_only && s->n_rows == 1 && s->n_out == 1 &&
               s->pos[0] < CUDA_PSTEP_MAX_CTX;
    c->n_prog = 0;
    c->pstep_logit_rows = 0;
    c->pstep_norm_weights = false;
    c->pending_norm.on = false;
    c->pending_rope.qkv = NULL;
    c->capturing = c->replaying = false;
    c->graph_key = -1;
    /* keys 3 B + m: m 0 logits to the host, 1 sampled on the device, 2 a
     * greedy persistent step (its argmax folded in: no sampling kernel) */
    if (!c->p.no_graphs && c->decode_only && s->n_rows > 0)
        c->graph_key = 3 * (c->pstep ? c->kv.max_rows + 1 : s->n_rows) +
                       (s->device_sample && s->n_out > 0 ? (c->pstep && c->greedy ? 2 : 1) : 0);
    if (c->graph_key >= 0 && c->graph_state[c->graph_key] == 2) {
        c->replaying = true;
    } else if (c->graph_key >= 0 && c->graph_state[c->graph_key] == 1 &&
               c->n_graphs < SIZES_CUDA_MAX_GRAPHS) { /* the planner reserved that many */
        cudaError_t e = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal);
        if (e == cudaSuccess)
            c->capturing = true;
        else
            return hr_err_set(err, HR_ERR_DEVICE, "cuda: cannot capture a graph: %s",
                              cudaGetErrorString(e));
    }
    return HR_OK;
}

#define OP_PRELUDE(c)                   \
    if ((c)->replaying || (c)->step_status != HR_OK) \
        return

/* Where an op's work starts on the stream, for HEADROOM_CUDA_PROFILE (not
 * while capturing: a graph's ops are not timed one by one). */
static void mark(cuda_backend *c, const char *op, int64_t n_rows, int64_t k) {
    if (c->prof && !c->capturing)
        cuda_profile_mark(c->prof, c->stream, op, c->n_rows, n_rows, k);
}

static void op_error(cuda_backend *c, const char *op) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess && c->step_status == HR_OK)
        c->step_status = hr_err_set(&c->step_err, HR_ERR_DEVICE, "cuda: %s: %s", op,
                                    cudaGetErrorString(e));
}

static const int32_t *meta(const cuda_backend *c, size_t off) { return c->d_meta + off; }

/* ---------------------------------------------------------------- persistent step ops */

/* The next op of the program, zeroed (programs are compared bytewise). */
static ck_pstep_op *pstep_push(cuda_backend *c, ckp_kind kind) {
    if (c->n_prog >= c->cap_prog) {
        if (c->step_status == HR_OK)
            c->step_status = hr_err_set(&c->step_err, HR_ERR_INVALID,
                                        "cuda: persistent step of more than the planned %d ops",
                                        c->cap_prog);
        return NULL;
    }
    ck_pstep_op *op = &c->prog[c->n_prog++];
    memset(op, 0, sizeof *op);
    op->kind = kind;
    return op;
}

/* A pending norm no GEMV took becomes an op of its own (block 0). */
static void pstep_flush_norm(cuda_backend *c) {
    if (!c->pending_norm.on)
        return;
    c->pending_norm.on = false;
    ck_pstep_op *op = pstep_push(c, CKP_NORM);
    if (!op)
        return;
    op->norm.x = c->pending_norm.x;
    op->norm.w = c->pending_norm.w;
    op->norm.y = c->pending_norm.y;
    op->norm.eps = c->pending_norm.eps;
    op->norm.D = c->pending_norm.D;
    if (c->pending_norm.gather_y) {
        ck_pstep_op *g = pstep_push(c, CKP_GATHER);
        if (!g)
            return;
        g->gather.x = c->pending_norm.y;
        g->gather.row = meta(c, c->o_out);
        g->gather.y = c->pending_norm.gather_y;
        g->gather.D = c->pending_norm.D;
        g->gather.ldx = c->pending_norm.D;
    }
}

/* The next op, after any pending norm (the ops that are not GEMVs). */
static ck_pstep_op *pstep_add(cuda_backend *c, ckp_kind kind) {
    pstep_flush_norm(c);
    return pstep_push(c, kind);
}

/* The step metadata's row 0 as the next step's, once the row's token is
 * drawn (ck_chain: a chained step finds it there). */
static ck_chain chain_of(cuda_backend *c) {
    return (ck_chain){.tok = c->d_meta + c->o_tok,
                      .pos = c->d_meta + c->o_pos,
                      .slot = c->d_meta + c->o_slot,
                      .seq = c->d_meta + c->o_seq,
                      .block_tables = c->d_meta + c->o_bt,
                      .count = c->d_meta + c->o_chain,
                      .host_tok = c->d_tok + c->kv.max_out,
                      .max_blocks = c->kv.max_blocks_per_seq,
                      .block_size = c->kv.block_size};
}

/* Uploads the recorded program if it is not what the device holds (only
 * outside a capture: the eager run before it uploads; on the stream, after
 * the steps queued before), then runs it. greedy: the step's argmax folded
 * in (ck_pstep_run). */
static void pstep_run(cuda_backend *c, const ck_chain *greedy) {
    pstep_flush_norm(c);
    const size_t bytes = (size_t)c->n_prog * sizeof *c->prog;
    if (c->n_prog != c->n_uploaded || memcmp(c->prog, c->prog_uploaded, bytes) != 0) {
        if (c->capturing) {
            c->step_status = hr_err_set(&c->step_err, HR_ERR_INVALID,
                                        "cuda: the persistent step changed after its eager run");
            return;
        }
        /* from pageable memory: staged before the call returns */
        cudaError_t e = cudaMemcpyAsync(c->d_prog, c->prog, bytes, cudaMemcpyHostToDevice,
                                        c->stream);
        if (e != cudaSuccess) {
            c->step_status = hr_err_set(&c->step_err, HR_ERR_DEVICE, "cuda: persistent step: %s",
                                        cudaGetErrorString(e));
            return;
        }
        memcpy(c->prog_uploaded, c->prog, bytes);
        c->n_uploaded = c->n_prog;
    }
    mark(c, "persistent step", 0, 0);
    /* the kernel that loads no norm weights, when no norm needs one (a tied
     * lm head keeps the final norm's weight: weight_create) */
    ck_pstep_run(c->stream, c->d_prog, c->n_prog, c->pstep_max_k, c->d_psync, c->dt,
                 c->base.info->head_dim, !c->pstep_norm_weights, c->d_trace, c->d_tok, greedy);
    op_error(c, "persistent step");
}

/* if dx: x += dx; y = rmsnorm(x) * w. The add goes into the GEMVs that
 * just wrote dx (each adds its rows to x instead of writing them; the
 * forward pass always makes dx just before), and the norm waits for the
 * next GEMV: if it reads y, every block normalises x itself and y is never
 * written. */
static void pstep_norm(cuda_backend *c, const be_tensor *x, const be_tensor *dx, be_tensor *y,
                       const be_vector *w, float eps) {
    pstep_flush_norm(c);
    if (dx) {
        const size_t elem = dx->narrow ? 2 : 4;
        const uint8_t *lo = (const uint8_t *)dx->data, *hi = lo + (size_t)dx->cols * elem;
        int32_t first = c->n_prog;
        int64_t rows = 0;
        while (first > 0 && c->prog[first - 1].kind == CKP_GEMV &&
               !c->prog[first - 1].gemv.resid && (const uint8_t *)c->prog[first - 1].gemv.y >= lo &&
               (const uint8_t *)c->prog[first - 1].gemv.y < hi)
            rows += c->prog[--first].gemv.N;
        if (rows == dx->cols) {
            for (int32_t i = first; i < c->n_prog; i++) {
                ck_pstep_gemv *g = &c->prog[i].gemv;
                g->resid = (float *)x->data + ((const uint8_t *)g->y - lo) / (ptrdiff_t)elem;
                g->y = NULL;
            }
        } else {
            if (c->step_status == HR_OK)
                c->step_status = hr_err_set(&c->step_err, HR_ERR_INVALID,
                                            "cuda: persistent step: a residual add whose "
                                            "addend the GEMV before did not make");
            return;
        }
    }
    c->pending_norm.on = true;
    c->pending_norm.x = x->data;
    c->pending_norm.w = w->data;
    c->pstep_norm_weights |= !w->folded;
    c->pending_norm.y = y->data;
    c->pending_norm.eps = eps;
    c->pending_norm.D = (int32_t)x->cols;
    c->pending_norm.gather_y = NULL;
}

/* y = x . W^T, in pieces of at most CK_PSTEP_ROWS rows a block */
static void pstep_gemv(cuda_backend *c, be_tensor *y, const be_tensor *x, const be_weight *w) {
    const int64_t piece = (int64_t)CK_PSTEP_ROWS * ck_pstep_blocks();
    const size_t y_elem = y->narrow ? 2 : 4;
    /* the norm's output, or the gather of its one row (the lm head's x) */
    const bool via_gather = c->pending_norm.on && c->pending_norm.gather_y == x->data;
    const bool take_norm = c->pending_norm.on && (c->pending_norm.y == x->data || via_gather);
    if (!take_norm)
        pstep_flush_norm(c);
    c->pending_norm.on = false;
    for (int64_t r0 = 0; r0 < w->n_rows; r0 += piece) {
        ck_pstep_op *op = pstep_push(c, CKP_GEMV);
        if (!op)
            return;
        if (take_norm) {
            op->gemv.norm_x = c->pending_norm.x;
            op->gemv.norm_w = c->pending_norm.w;
            op->gemv.eps = c->pending_norm.eps;
            if (via_gather && r0 == 0)
                op->gemv.norm_y = c->pending_norm.y; /* block 0 stores the norm's row */
        }
        op->gemv.x = x->data;
        op->gemv.W = (const uint8_t *)w->w + (size_t)r0 * (size_t)w->k * 2;
        op->gemv.bias = w->bias ? w->bias + r0 : NULL;
        op->gemv.y = (uint8_t *)y->data + (size_t)r0 * y_elem;
        op->gemv.y_ck = y->narrow;
        op->gemv.N = (int32_t)(w->n_rows - r0 < piece ? w->n_rows - r0 : piece);
        op->gemv.K = (int32_t)w->k;
        /* the lm head (f32 rows, no bias): a greedy step ranks them */
        if (!y->narrow && !w->bias && w->n_rows == c->base.info->n_vocab &&
            y->cols == w->n_rows) {
            op->gemv.logits = (int32_t)(r0 + 1);
            c->pstep_logit_rows += op->gemv.N;
        }
    }
}

static void cuda_embed(hr_backend *b, be_tensor *x, const be_weight *tok_embd) {
    cuda_backend *c = (cuda_backend *)b;
    OP_PRELUDE(c);
    if (c->pstep) {
        ck_pstep_op *op = pstep_add(c, CKP_EMBED);
        if (op) {
            op->embed.table = tok_embd->w;
            op->embed.token = meta(c, c->o_tok);
            op->embed.x = x->data;
            op->embed.D = (int32_t)tok_embd->k;
        }
        return;
    }
    mark(c, "embed", 0, 0);
    ck_embed(c->stream, x->data, x->ld, tok_embd->w, c->dt, meta(c, c->o_tok), c->n_rows,
             (int)tok_embd->k);
    op_error(c, "embed");
}

static void cuda_rmsnorm(hr_backend *b, be_tensor *y, const be_tensor *x, const be_vector *w,
                         float eps, int64_t n) {
    cuda_backend *c = (cuda_backend *)b;
    OP_PRELUDE(c);
    if (c->pstep) {
        pstep_norm(c, x, NULL, y, w, eps);
        return;
    }
    mark(c, "rmsnorm", 0, 0);
    ck_add_rmsnorm(c->stream, x->data, x->ld, NULL, false, 0, y->data, y->ld, c->dt, w->data,
                   eps, (int)n, (int)x->cols);
    op_error(c, "rmsnorm");
}

static void cuda_add_rmsnorm(hr_backend *b, be_tensor *x, const be_tensor *dx, be_tensor *y,
                             const be_vector *w, float eps) {
    cuda_backend *c = (cuda_backend *)b;
    OP_PRELUDE(c);
    if (c->pstep) {
        pstep_norm(c, x, dx, y, w, eps);
        return;
    }
    mark(c, "add_rmsnorm", 0, 0);
    ck_add_rmsnorm(c->stream, x->data, x->ld, dx->data, dx->narrow, dx->ld, y->data, y->ld,
                   c->dt, w->data, eps, c->n_rows, (int)x->cols);
    op_error(c, "add_rmsnorm");
}

static void cuda_matmul(hr_backend *b, be_tensor *y, const be_tensor *x, const be_weight *w,
                        int64_t n) {
    cuda_backend *c = (cuda_backend *)b;
    OP_PRELUDE(c);
    if (n <= 0)
        return;
    if (c->pstep) {
        pstep_gemv(c, y, x, w);
        return;
    }
    mark(c, n <= CK_GEMV_MAX_ROWS ? "gemv" : "gemm", w->n_rows, w->k);
    if (n <= CK_GEMV_MAX_ROWS) {
        ck_gemv(c->stream, y->data, y->narrow, y->ld, x->data, x->ld, w->w, w->bias, c->dt,
                (int)n, (int)w->n_rows, (int)w->k);
    } else {
        hr_status s = cuda_gemm_run(c->gemm, c->stream, y->data, y->narrow, y->ld, x->data,
                                    x->ld, w->w, c->dt, (int)n, (int)w->n_rows, (int)w->k,
                                    &c->step_err);
        if (s != HR_OK) {
            c->step_status = s;
            return;
        }
        if (w->bias) /* narrow (qkv): a second rounding; the GEMV rounds once */
            ck_add_bias(c->stream, y->data, y->narrow, y->ld, w->bias, (int)n, (int)w->n_rows,
                        c->dt);
    }
    op_error(c, "matmul");
}

static void cuda_rope_kv_store(hr_backend *b, int32_t layer, be_tensor *qkv,
                               const float *inv_freq, rope_style style, int32_t n_head,
                               int32_t n_head_kv, int32_t head_dim) {
    (void)inv_freq; /* the device copy made at setup */
    cuda_backend *c = (cuda_backend *)b;
    OP_PRELUDE(c);
    if (c->pstep) { /* the attention that follows rotates and stores */
        c->pending_rope.qkv = qkv->data;
        c->pending_rope.neox = style == ROPE_STYLE_NEOX;
        return;
    }
    mark(c, "rope_kv_store", 0, 0);
    size_t off = (size_t)layer * c->kv_layer_bytes;
    ck_rope_kv_store(c->stream, qkv->data, qkv->ld, c->k_pool + off, c->v_pool + off, c->dt,
                     meta(c, c->o_pos), meta(c, c->o_slot), c->inv_freq,
                     style == ROPE_STYLE_NEOX, c->n_rows, n_head, n_head_kv, head_dim,
                     c->kv.block_size);
    op_error(c, "rope_kv_store");
}

/* Flash-decoding splits of this step. The grid is n_splits x decode rows x
 * kv heads whatever the contexts (graph capture), and a split that a short
 * context leaves empty still costs its block a launch; a split also costs
 * its q loads, merge and partial. So a step takes only as many splits as
 * bring its blocks to c->dec_fill: with many rows, one split each (the
 * block walks the whole context). */
static int dec_splits(const cuda_backend *c, const hr_model_info *in) {
    const int per_split = c->n_dec * in->n_head_kv;
    if (c->dec_fill <= 0 || per_split <= 0)
        return c->n_splits;
    const int n = (c->dec_fill + per_split - 1) / per_split; /* >= 1 */
    return n < c->n_splits ? n : c->n_splits;
}

static void cuda_attention(hr_backend *b, int32_t layer, be_tensor *out, const be_tensor *qkv) {
    cuda_backend *c = (cuda_backend *)b;
    OP_PRELUDE(c);
    const hr_model_info *in = b->info;
    size_t off = (size_t)layer * c->kv_layer_bytes;
    if (c->pstep) {
        if (c->pending_rope.qkv != qkv->data) {
            if (c->step_status == HR_OK)
                c->step_status = hr_err_set(&c->step_err, HR_ERR_INVALID,
                                            "cuda: persistent step: attention without rotations");
            return;
        }
        c->pending_rope.qkv = NULL;
        ck_pstep_op *op = pstep_add(c, CKP_ATTN);
        if (op) {
            op->attn.inv_freq = c->inv_freq;
            op->attn.neox = c->pending_rope.neox;
            op->attn.qkv = qkv->data;
            op->attn.out = out->data;
            op->attn.k_pool = c->k_pool + off;
            op->attn.v_pool = c->v_pool + off;
            op->attn.pos = meta(c, c->o_pos);
            op->attn.seq = meta(c, c->o_seq);
            op->attn.block_tables = meta(c, c->o_bt);
            op->attn.parts = c->d_parts;
            op->attn.scale = 1.0f / sqrtf((float)in->head_dim);
            op->attn.max_blocks = c->kv.max_blocks_per_seq;
            op->attn.max_splits = c->n_splits;
            op->attn.H = in->n_head;
            op->attn.Hkv = in->n_head_kv;
            op->attn.Dh = in->head_dim;
            op->attn.BS = c->kv.block_size;
        }
        return;
    }
    mark(c, c->n_tiles > 0 ? "attn prefill" : "attn decode", 0, 0);
    ck_attn_args a = {.qkv = qkv->data,
                      .ld_qkv = qkv->ld,
                      .out = out->data,
                      .ld_out = out->ld,
                      .k_pool = c->k_pool + off,
                      .v_pool = c->v_pool + off,
                      .dt = c->dt,
                      .row_seq = meta(c, c->o_seq),
                      .row_pos = meta(c, c->o_pos),
                      .block_tables = meta(c, c->o_bt),
                      .max_blocks = c->kv.max_blocks_per_seq,
                      .n_rows = c->n_rows,
                      .H = in->n_head,
                      .Hkv = in->n_head_kv,
                      .Dh = in->head_dim,
                      .BS = c->kv.block_size,
                      .scale = 1.0f / sqrtf((float)in->head_dim),
                      .dec_rows = meta(c, c->o_dec),
                      .n_dec = c->n_dec,
                      .n_splits = dec_splits(c, in),
                      .split_len = SPLIT_LEN,
                      .work = c->att_work,
                      .tile_row0 = meta(c, c->o_trow),
                      .tile_n = meta(c, c->o_tn),
                      .n_tiles = c->n_tiles,
                      .tile_rows = c->tile_rows};
    /* head sizes without a flash instance fall back to the plain kernel
     * inside ck_attention_decode/prefill (its workspace: kv_init) */
    if (c->p.attn_naive) {
        ck_attention_naive(c->stream, &a);
    } else {
        if (c->n_dec > 0)
            ck_attention_decode(c->stream, &a);
        if (c->n_tiles > 0)
            ck_attention_prefill(c->stream, &a);
    }
    op_error(c, "attention");
}

static void cuda_swiglu(hr_backend *b, be_tensor *h, const be_tensor *gu) {
    cuda_backend *c = (cuda_backend *)b;
    OP_PRELUDE(c);
    if (c->pstep) {
        /* the gate/up GEMV just recorded, one op whose blocks hold at most
         * CK_PSTEP_ROWS rows when paired: it pairs gate row i with up row
         * F + i and writes h itself */
        ck_pstep_gemv *g = c->n_prog > 0 && c->prog[c->n_prog - 1].kind == CKP_GEMV
                               ? &c->prog[c->n_prog - 1].gemv
                               : NULL;
        const int64_t F = h->cols, per_block = (F + ck_pstep_blocks() - 1) / ck_pstep_blocks();
        if (g && g->y == gu->data && !g->resid && g->N == 2 * F &&
            2 * per_block <= CK_PSTEP_ROWS) {
            g->pair = (int32_t)F;
            g->y = h->data;
            return;
        }
        ck_pstep_op *op = pstep_add(c, CKP_SWIGLU);
        if (op) {
            op->swiglu.gu = gu->data;
            op->swiglu.h = h->data;
            op->swiglu.gu_ck = gu->narrow;
            op->swiglu.F = (int32_t)h->cols;
        }
        return;
    }
    mark(c, "swiglu", 0, 0);
    ck_swiglu(c->stream, h->data, h->ld, c->dt, gu->data, gu->narrow, gu->ld, c->n_rows,
              (int)h->cols);
    op_error(c, "swiglu");
}

static void cuda_gather_rows(hr_backend *b, be_tensor *y, const be_tensor *x) {
    cuda_backend *c = (cuda_backend *)b;
    OP_PRELUDE(c);
    if (c->pstep) {
        /* one row, row 0: the gather of the pending norm's row is that row,
         * so the norm stays pending for the GEMV that reads y to take (its
         * block 0 stores the norm's row as well; pstep_flush_norm makes the
         * two ops if none takes it): two barriers and a one-block op less */
        if (c->pending_norm.on && c->pending_norm.y == x->data && !c->pending_norm.gather_y &&
            c->n_rows == 1 && x->narrow && y->narrow && x->cols == y->cols && x->ld == x->cols) {
            c->pending_norm.gather_y = y->data;
            return;
        }
        ck_pstep_op *op = pstep_add(c, CKP_GATHER);
        if (op) {
            op->gather.x = x->data;
            op->gather.row = meta(c, c->o_out);
            op->gather.y = y->data;
            op->gather.D = (int32_t)x->cols;
            op->gather.ldx = (int32_t)x->ld;
        }
        return;
    }
    mark(c, "gather_rows", 0, 0);
    ck_gather(c->stream, y->data, y->ld, x->data, x->ld, c->dt, meta(c, c->o_out), c->n_out,
              (int)x->cols);
    op_error(c, "gather_rows");
}

/* Enqueues the device sampling of the step's outputs (parameters read from
 * the mapped host buffer when the work runs, so a replayed graph sees new
 * ones; the ids land in host memory, seen once the stream is synchronised). */
static void enqueue_sampling(cuda_backend *c, const be_tensor *logits) {
    mark(c, "sample", 0, 0);
    /* a step of one row readies the next for a chained step (ck_chain) */
    const ck_chain chain = chain_of(c);
    ck_sample(c->stream, c->d_tok, logits->data, logits->ld, c->n_out, (int)logits->cols,
              c->d_sp, c->sample_work, c->n_rows == 1 && c->n_out == 1 ? &chain : NULL);
    op_error(c, "sample");
}

static hr_status cuda_end_step(hr_backend *b, const be_tensor *logits, float *host_logits,
                               const be_sample *samples, int32_t *host_tokens, hr_error *err) {
    cuda_backend *c = (cuda_backend *)b;
    bool sample = samples != NULL && c->n_out > 0;
    /* a chained step's parameters are the step before's, which may not have
     * read them yet (its draw is offset by the chain count instead) */
    for (int32_t i = 0; sample && !c->chained && i < c->n_out; i++)
        c->h_sp[i] = (ck_sample_params){.temperature = samples[i].temperature,
                                        .top_k = samples[i].top_k,
                                        .top_p = samples[i].top_p,
                                        .min_p = samples[i].min_p,
                                        .seed = samples[i].seed,
                                        .step = samples[i].step};
    if (c->graph_key >= 0 && sample != (c->graph_key % 3 != 0) && c->step_status == HR_OK)
        c->step_status = hr_err_set(&c->step_err, HR_ERR_INVALID,
                                    "cuda: end_step %s samples, begin_step said %s",
                                    sample ? "with" : "without", sample ? "no" : "yes");
    for (int32_t i = 0; sample && c->greedy && i < c->n_out && c->step_status == HR_OK; i++)
        if (samples[i].temperature > 0.0f && samples[i].top_k != 1)
            c->step_status = hr_err_set(&c->step_err, HR_ERR_INVALID,
                                        "cuda: a greedy step with temperature %g",
                                        (double)samples[i].temperature);
    /* a greedy persistent step draws its token itself when it ranks every
     * logit (an lm head with a bias is not ranked) */
    const bool fold = sample && c->greedy && c->pstep && c->n_out == 1 &&
                      c->pstep_logit_rows == c->base.info->n_vocab;
    const ck_chain chain = chain_of(c);
    if (c->step_status == HR_OK && !c->replaying && c->pstep)
        pstep_run(c, fold ? &chain : NULL);
    if (c->step_status == HR_OK && c->pstep)
        c->n_pstep_steps++;
    const bool traced = c->step_status == HR_OK && c->pstep;
    if (c->step_status == HR_OK && !c->replaying && sample && !fold)
        enqueue_sampling(c, logits);
    if (c->capturing && c->step_status != HR_OK) {
        cudaGraph_t g = NULL;
        cudaStreamEndCapture(c->stream, &g);
        if (g)
            cudaGraphDestroy(g);
        c->capturing = false;
    }
    if (c->capturing) {
        cudaGraph_t g = NULL;
        cudaGraphExec_t exec = NULL;
        HR_CUDA_TRY(cudaStreamEndCapture(c->stream, &g));
        size_t free0 = 0, free1 = 0, total = 0;
        cudaMemGetInfo(&free0, &total);
        cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
        cudaMemGetInfo(&free1, &total);
        cudaGraphDestroy(g);
        HR_CUDA_TRY(e);
        c->graph_bytes += free0 > free1 ? free0 - free1 : 0;
        c->graphs[c->graph_key] = exec;
        c->graph_state[c->graph_key] = 2;
        c->n_graphs++;
        c->capturing = false;
        c->replaying = true;
    }
    if (c->replaying) {
        HR_CUDA_TRY(cudaGraphLaunch(c->graphs[c->graph_key], c->stream));
    } else if (c->graph_key >= 0 && c->graph_state[c->graph_key] == 0) {
        c->graph_state[c->graph_key] = 1; /* eager once; captured next time */
    }
    if (c->defer) { /* queued: cuda_wait_step gives the id */
        c->replaying = false;
        if (c->step_status == HR_OK && !sample)
            c->step_status = hr_err_set(&c->step_err, HR_ERR_INVALID,
                                        "cuda: a deferred step without samples");
        if (c->step_status != HR_OK) {
            if (err)
                *err = c->step_err;
            return c->step_status;
        }
        const int i = (c->fly_head + c->n_fly) % 2;
        HR_CUDA_TRY(cudaEventRecord(c->fly_ev[i], c->stream));
        c->fly_count[i] = c->chain_count;
        c->n_fly++;
        return HR_OK;
    }
    if (c->step_status == HR_OK && !sample && host_logits && c->n_out > 0)
        HR_CUDA_TRY(cudaMemcpy2DAsync(host_logits, (size_t)logits->cols * sizeof(float),
                                      logits->data, (size_t)logits->ld * sizeof(float),
                                      (size_t)logits->cols * sizeof(float), (size_t)c->n_out,
                                      cudaMemcpyDeviceToHost, c->stream));
    cuda_profile_step_end(c->prof, c->stream);
    HR_CUDA_TRY(cudaStreamSynchronize(c->stream));
    cuda_profile_collect(c->prof);
    if (traced)
        pstep_trace_collect(c);
    c->replaying = false;
    if (c->step_status != HR_OK) {
        if (err)
            *err = c->step_err;
        return c->step_status;
    }
    HR_CUDA_TRY(cudaGetLastError());
    if (sample)
        memcpy(host_tokens, c->h_tok, (size_t)c->n_out * sizeof(int32_t));
    return HR_OK;
}

static hr_status cuda_wait_step(hr_backend *b, int32_t *host_tokens, hr_error *err) {
    cuda_backend *c = (cuda_backend *)b;
    if (c->n_fly == 0)
        return hr_err_set(err, HR_ERR_INVALID, "cuda: wait_step with no deferred step");
    const int i = c->fly_head;
    c->fly_head = (i + 1) % 2;
    c->n_fly--;
    HR_CUDA_TRY(cudaEventSynchronize(c->fly_ev[i]));
    HR_CUDA_TRY(cudaGetLastError());
    /* the chained ids alternate between two slots: the step after this one
     * writes the other, and the one after that is queued only once this
     * returns */
    host_tokens[0] = c->h_tok[c->kv.max_out + (c->fly_count[i] & 1)];
    return HR_OK;
}

int64_t cuda_pstep_steps(const hr_backend *b) {
    return ((const cuda_backend *)b)->n_pstep_steps;
}

static void cuda_held(const hr_backend *b, be_memory *out) {
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
static hr_status cuda_write_tensor(hr_backend *b, be_tensor *t, int64_t rows, const float *host,
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

static hr_status cuda_read_tensor(hr_backend *b, const be_tensor *t, int64_t rows,
                                  float *host, hr_error *err) {
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
    const char *pdl = getenv("HEADROOM_CUDA_PDL");
    ck_set_pdl(!(pdl && strcmp(pdl, "0") == 0));
    /* HEADROOM_CUDA_DEC_FILL=0 gives every decode step all n_splits splits
     * (to measure what fewer splits gain); a number sets the block target */
    const char *fill = getenv("HEADROOM_CUDA_DEC_FILL");
    c->dec_fill = fill ? atoi(fill) : DEC_FILL_BLOCKS;
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
    if ((s = dev_alloc(c, SIZES_CUDA_GEMM_WORKSPACE, MEM_WORK, "cuBLASLt workspace", &ws,
                       err)) != HR_OK ||
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
