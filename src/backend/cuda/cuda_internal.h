/*
 * cuda_internal.h — what the CUDA backend's host-side files share: the
 * backend's struct, its weights and norm vectors, and the functions one
 * file calls in another. cuda_backend.c says which file does what. Only the
 * .c files of src/backend/cuda/ include this header (it brings in CUDA's
 * runtime through kernels.h); the library sees cuda_backend.h.
 */
#ifndef HR_BACKEND_CUDA_CUDA_INTERNAL_H
#define HR_BACKEND_CUDA_CUDA_INTERNAL_H

#include "backend/cuda/cuda_backend.h"

#include "backend/cuda/cuda_gemm.h"
#include "backend/cuda/cuda_profile.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels_packed.h"
#include "backend/packed.h"

#define HR_CUDA_TRY(expr)                                                                  \
    do {                                                                                   \
        cudaError_t e_ = (expr);                                                           \
        if (e_ != cudaSuccess)                                                             \
            return hr_err_set(err, HR_ERR_DEVICE, "cuda: %s: %s (%s:%d)", #expr,           \
                              cudaGetErrorString(e_), __FILE__, __LINE__);                  \
    } while (0)

#define STAGE_BYTES ((size_t)64 << 20)  /* two pinned buffers of 64 MiB: copy one, fill the other */

typedef enum { MEM_WEIGHTS, MEM_KV, MEM_ACT, MEM_WORK, MEM_PARTS } mem_part;

struct be_weight {
    void *w;       /* (n_rows, k) ck, the parts stacked; NULL when packed */
    float *bias;   /* (n_rows) f32 or NULL */
    int64_t n_rows, k;
    /* packed (backend/packed.h): runs of parts of one type (sizes_cuda_runs),
     * run i holding rows [run_row0[i], run_row0[i] + run[i].N) */
    int n_runs;
    packed_matrix run[3];
    int64_t run_row0[3];
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
    size_t kv_layer_bytes; /* a layer's K pool (its V pool alike) */
    bool kv_q8;            /* q8_0 pools: codes, then at kv_scale_at their f16 scales */
    size_t kv_scale_at;    /* bytes from a layer's pool start to its scales */
    float *inv_freq;
    int n_splits;         /* flash-decoding splits the workspace holds */
    int dec_fill;         /* decode blocks a step aims at (dec_splits) */
    float *att_work;
    /* packed weights (n_packed of them): the activations quantized for the
     * packed GEMV, and the 16-bit scratch a longer step expands them into */
    int n_packed;
    int packed_mma_rows; /* steps of 9 to this many rows: the tensor-core kernel */
    int64_t max_k; /* the widest weight's K (the quantized activations' width) */
    void *xq;
    void *dequant;
    /* step metadata: pinned host mirror and device copy, fixed offsets */
    int32_t *h_meta, *d_meta;
    size_t meta_ints;
    size_t o_tok, o_pos, o_slot, o_seq, o_out, o_dec, o_trow, o_tn, o_bt, o_chain;
    /* sampling parameters and ids: pinned host memory mapped into the
     * device's address space (d_: the device's pointer to the same bytes) */
    be_sample *h_sp, *d_sp;
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

/* cuda_memory.c: device memory from the arena (or cudaMalloc without one),
 * host structs the backend frees, and the ops table's allocation entries */
hr_status cuda_dev_alloc(cuda_backend *c, size_t n_bytes, mem_part part, const char *what,
                         void **out, hr_error *err);
hr_status cuda_own_host(cuda_backend *c, void *p, hr_error *err);
hr_status cuda_tensor_alloc(hr_backend *b, int64_t rows, int64_t cols, bool narrow,
                            be_tensor *out, hr_error *err);
hr_status cuda_kv_alloc(hr_backend *b, const be_config *cfg, hr_error *err);
void cuda_held(const hr_backend *b, be_memory *out);
hr_status cuda_write_tensor(hr_backend *b, be_tensor *t, int64_t rows, const float *host,
                            hr_error *err);
hr_status cuda_read_tensor(hr_backend *b, const be_tensor *t, int64_t rows, float *host,
                           hr_error *err);

/* cuda_upload.c: the weights to the device */
void cuda_progress(cuda_backend *c, bool done);
hr_status cuda_weight_create(hr_backend *b, const model_tensor *const *parts,
                             const model_tensor *const *biases, int n_parts, be_vector *fold,
                             be_weight **out, hr_error *err);
hr_status cuda_vector_create(hr_backend *b, const model_tensor *t, be_vector **out,
                             hr_error *err);

/* cuda_graph.c: a step's metadata in, its graph captured or replayed, its
 * results out */
hr_status cuda_begin_step(hr_backend *b, const hr_step *s, hr_error *err);
hr_status cuda_end_step(hr_backend *b, const be_tensor *logits, float *host_logits,
                        const be_sample *samples, int32_t *host_tokens, hr_error *err);
hr_status cuda_wait_step(hr_backend *b, int32_t *host_tokens, hr_error *err);

/* cuda_ops.c: each op, enqueued (or recorded, or nothing while a graph
 * replays), and what the ops share */
void cuda_mark(cuda_backend *c, const char *op, int64_t n_rows, int64_t k);
void cuda_op_error(cuda_backend *c, const char *op);
const int32_t *cuda_meta(const cuda_backend *c, size_t off);
void cuda_embed(hr_backend *b, be_tensor *x, const be_weight *tok_embd);
void cuda_rmsnorm(hr_backend *b, be_tensor *y, const be_tensor *x, const be_vector *w, float eps,
                  int64_t n);
void cuda_add_rmsnorm(hr_backend *b, be_tensor *x, const be_tensor *dx, be_tensor *y,
                      const be_vector *w, float eps);
void cuda_matmul(hr_backend *b, be_tensor *y, const be_tensor *x, const be_weight *w, int64_t n);
void cuda_rope_kv_store(hr_backend *b, int32_t layer, be_tensor *qkv, const float *inv_freq,
                        rope_style style, int32_t n_head, int32_t n_head_kv, int32_t head_dim);
void cuda_attention(hr_backend *b, int32_t layer, be_tensor *out, const be_tensor *qkv);
void cuda_swiglu(hr_backend *b, be_tensor *h, const be_tensor *gu);
void cuda_gather_rows(hr_backend *b, be_tensor *y, const be_tensor *x);

/* cuda_pstep.c: the persistent decode step's program, recorded and run */
hr_status cuda_pstep_alloc(cuda_backend *c, hr_error *err);
ck_pstep_op *cuda_pstep_add(cuda_backend *c, ckp_kind kind);
void cuda_pstep_norm(cuda_backend *c, const be_tensor *x, const be_tensor *dx, be_tensor *y,
                     const be_vector *w, float eps);
void cuda_pstep_gemv(cuda_backend *c, be_tensor *y, const be_tensor *x, const be_weight *w);
void cuda_pstep_run(cuda_backend *c, const ck_chain *greedy);
void cuda_pstep_trace_collect(cuda_backend *c);
void cuda_pstep_trace_report(const cuda_backend *c);

#endif
