/*
 * backend.h — the ops table: the only thing model/llama.c sees of a device.
 *
 * One forward pass (model/llama.c) drives every backend through this table.
 * The CPU backend is the reference; every CUDA op is tested against it.
 *
 * Shape legend (used in comments here and in every backend):
 *   B  = rows in the step (tokens of all sequences together)
 *   D  = n_embd, H = n_head, Hkv = n_head_kv, Dh = head_dim, F = n_ff,
 *   V  = n_vocab, BS = tokens per KV block, NB = KV blocks in the pool.
 *
 * Activations are backend tensors (be_tensor): rows of `cols` elements with
 * a row stride, in memory the backend owns (host for cpu, device for cuda).
 * Everything a step needs — tokens, positions, KV slots, block tables — is
 * handed over once in begin_step, so the ops themselves take only tensors;
 * that is what lets CUDA capture a decode step as one graph.
 *
 * The step is a list of segments: each segment is consecutive positions of
 * one sequence occupying consecutive rows (a prefill chunk, or one decode
 * token). Before attention runs, rope_kv_store has written the step's own K
 * and V into the pool, so every row attends to positions [0, pos] of its sequence
 * straight from the paged cache: prefill and decode rows mix freely.
 *
 * Fused projections: q/k/v are one weight whose parts stack along the output
 * (QKV row = [q (H*Dh) | k (Hkv*Dh) | v (Hkv*Dh)]), and gate/up likewise
 * ([gate (F) | up (F)]); the parts need not share a dtype.
 */
#ifndef HR_BACKEND_BACKEND_H
#define HR_BACKEND_BACKEND_H

#include "headroom.h"
#include "backend/sample_params.h" /* be_sample */
#include "model/tensor.h" /* model_tensor, rope_style: the weights as the file holds them */
#include "util/env.h"     /* hr_tuning */

#include <stdbool.h>
#include <stdint.h>

typedef struct hr_backend hr_backend;
struct be_memory;
typedef struct be_weight be_weight; /* a (possibly fused) matrix, backend-owned */
typedef struct be_vector be_vector; /* a norm weight, f32 on the backend */

typedef struct {
    void *data;   /* backend memory */
    int64_t cols; /* elements per row */
    int64_t ld;   /* row stride in elements */
    bool narrow;  /* stored in the 16-bit compute type (cuda), not f32 */
} be_tensor;

typedef struct {
    int32_t seq;  /* sequence slot, indexes the block tables */
    int32_t pos0; /* position of the segment's first token */
    int32_t n;    /* tokens: positions pos0 .. pos0 + n - 1 */
    int32_t row0; /* first row of the step */
} step_segment;

typedef struct {
    int32_t n_rows;              /* B */
    const int32_t *tokens;       /* (B) */
    const int32_t *pos;          /* (B) position of each row */
    const int32_t *slot;         /* (B) KV slot: block * BS + pos % BS */
    int32_t n_seg;
    const step_segment *segs;    /* (n_seg) */
    const int32_t *block_tables; /* (n_seq_max, max_blocks_per_seq) physical block ids */
    int32_t n_out;               /* rows whose logits are wanted */
    const int32_t *out_rows;     /* (n_out) */
    bool device_sample;          /* end_step will get samples (known before the step, so a
                                    backend can capture the sampling with the step) */
    /* Overlap (backends with chains set): with defer, end_step queues the
     * step and returns at once, and wait_step later gives its tokens. A
     * chained step is one decode row that follows the step queued just
     * before it, of the same sequence with the same sampling parameters: its
     * token is the one that step samples, its position one more, so it can
     * be queued before that token is known (tokens[0] is not read). */
    bool defer, chained;
    bool greedy; /* with device_sample: every row's sampling is greedy (known before the
                    step, so a backend can fold the argmax into it) */
} hr_step;

/* What the backend must size for, fixed when the engine starts. */
typedef struct {
    int32_t max_rows;            /* B at most */
    int32_t max_out;             /* logits rows at most */
    int32_t n_seq_max;
    int32_t max_blocks_per_seq;
    int32_t n_block;             /* NB */
    int32_t block_size;          /* BS */
    hr_dtype kv_dtype;           /* the K pool's type (f32, f16, bf16, q8_0, q4_0) */
    hr_dtype kv_dtype_v;         /* the V pool's type; set it (zero is f32): the engine
                                    always does. cuda stores V as K */
    const float *rope_inv_freq;  /* (Dh/2) the model's RoPE frequencies: a device keeps a
                                    copy (the rope op's own argument is the host table) */
} be_config;

typedef struct {
    const char *name; /* "cpu", "cuda" */
    void (*free)(hr_backend *b);

    /* Setup, before the first step: weights (parts stacked along the output
     * dimension; biases optional, one per part or NULL), norm vectors, then
     * activations, KV pool and workspaces for cfg.
     * fold: the norm whose output is this matrix's only input (created
     * before it), or NULL. A backend may fold the norm's weight into the
     * matrix's columns (W[:, k] * w[k], rounded once) and then apply that
     * norm without its weight: the same product, with the rounding in W
     * rather than in the norm's output. A norm feeds one matrix at most. */
    hr_status (*weight_create)(hr_backend *b, const model_tensor *const *parts,
                               const model_tensor *const *biases, int n_parts, be_vector *fold,
                               be_weight **out, hr_error *err);
    hr_status (*vector_create)(hr_backend *b, const model_tensor *t, be_vector **out,
                               hr_error *err);
    /* narrow: the tensor may be kept in the 16-bit compute type: it feeds a
     * matmul, or it is a projection output (qkv, rotated in place and read
     * by attention; the gate/up product, read by SwiGLU; the o and down
     * outputs, added to the f32 residual): half the bytes written and read
     * again, and what transformers keeps. The
     * GPU keeps those narrow and everything else in f32; the CPU keeps all
     * f32. The backend records its choice in be_tensor.narrow. */
    hr_status (*tensor_alloc)(hr_backend *b, int64_t rows, int64_t cols, bool narrow,
                              be_tensor *out, hr_error *err);
    hr_status (*kv_alloc)(hr_backend *b, const be_config *cfg, hr_error *err);

    /* One step. begin_step copies the step's metadata to the backend. */
    hr_status (*begin_step)(hr_backend *b, const hr_step *s, hr_error *err);
    /* x (B, D) = tok_embd rows of the step's tokens */
    void (*embed)(hr_backend *b, be_tensor *x, const be_weight *tok_embd);
    /* y = x / rms(x) * w, per row; first n rows */
    void (*rmsnorm)(hr_backend *b, be_tensor *y, const be_tensor *x, const be_vector *w,
                    float eps, int64_t n);
    /* x += dx, then y = rmsnorm(x) * w: the residual add fused with the next norm */
    void (*add_rmsnorm)(hr_backend *b, be_tensor *x, const be_tensor *dx, be_tensor *y,
                        const be_vector *w, float eps);
    /* y (n, N) = x (n, K) . W^T (+ bias) */
    void (*matmul)(hr_backend *b, be_tensor *y, const be_tensor *x, const be_weight *w,
                   int64_t n);
    /* rotate q and k inside qkv (B, (H + 2 Hkv) Dh) at each row's position,
     * then write the (rotated) k and the v parts into layer's pages at the
     * step's slots: one op, so a backend may do both in one pass over qkv */
    void (*rope_kv_store)(hr_backend *b, int32_t layer, be_tensor *qkv, const float *inv_freq,
                          rope_style style, int32_t n_head, int32_t n_head_kv,
                          int32_t head_dim);
    /* out (B, H*Dh) = softmax(q k^T / sqrt(Dh)) v over each row's [0, pos] */
    void (*attention)(hr_backend *b, int32_t layer, be_tensor *out, const be_tensor *qkv);
    /* h (B, F) = silu(gate) * up from gu (B, 2F) */
    void (*swiglu)(hr_backend *b, be_tensor *h, const be_tensor *gu);
    /* y (n_out, D) = x rows listed in the step's out_rows */
    void (*gather_rows)(hr_backend *b, be_tensor *y, const be_tensor *x);
    /* Waits for the step. With samples (n_out entries) and a backend that
     * samples on the device (can_sample), writes the chosen token of each
     * output row to host_tokens and only those ids cross the bus; otherwise
     * copies the logits (n_out, V) to host_logits (when not NULL). */
    hr_status (*end_step)(hr_backend *b, const be_tensor *logits, float *host_logits,
                          const be_sample *samples, int32_t *host_tokens, hr_error *err);
    bool can_sample;
    /* Waits for the oldest deferred step and writes its sampled tokens (NULL
     * where no step is ever deferred). */
    hr_status (*wait_step)(hr_backend *b, int32_t *host_tokens, hr_error *err);

    /* What the backend holds, by part (bytes). */
    void (*memory)(const hr_backend *b, struct be_memory *out);

    /* Tests and tools: copy rows of a tensor from / to f32 host memory (a
     * narrow tensor is 16-bit on the GPU, so a write rounds and a read
     * widens). */
    hr_status (*write_tensor)(hr_backend *b, be_tensor *t, int64_t rows, const float *host,
                              hr_error *err);
    hr_status (*read_tensor)(hr_backend *b, const be_tensor *t, int64_t rows,
                             float *host, hr_error *err);
} hr_backend_ops;

/* Bytes held by a backend, by part (device memory for cuda, host for cpu). */
typedef struct be_memory {
    uint64_t weights;   /* weights as the backend stores them */
    uint64_t kv;        /* the KV pool */
    uint64_t activations; /* step tensors */
    uint64_t workspace; /* matmul / attention / sampling workspaces, step metadata */
    uint64_t graphs;    /* captured CUDA graphs */
    uint64_t runtime;   /* the runtime's own overhead (CUDA context, cuBLAS) */
    uint64_t device_total, device_free; /* cudaMemGetInfo, 0 on the cpu */
    double upload_seconds; /* weight upload time (cuda) */
} be_memory;

struct hr_backend {
    const hr_backend_ops *ops;
    const hr_model_info *info;
    bool chains; /* takes deferred and chained steps (hr_step), at most 2 queued */
};

typedef struct {
    int32_t n_threads;    /* cpu: worker threads (0 = all cores) */
    bool adapt_threads;   /* cpu: decode steps use the count that runs fastest
                             (cpu/thread_tuner.h) */
    bool exact_matmul;    /* cpu: f32 activations for quantized, F16 and BF16 weights (none
                             rounded to 8 or 16 bits; matmul.h's EXACT) */
    int32_t device_index; /* cuda */
    hr_dtype compute;     /* cuda: bf16 or f16, weights and matmul inputs */
    hr_tuning tuning;     /* benchmark and diagnostic switches (util/env.h) */
    bool expand_weights;  /* cuda: quantized weights expanded to the compute type at upload */
    bool packed;          /* cuda: some weight is stored packed (sizes_cuda_runs): the
                             workspace for them is allocated */
    bool progress;        /* show weight upload progress on stderr */
    uint64_t arena_bytes; /* cuda: the planned device bytes, taken in one allocation (0:
                             one cudaMalloc per piece, for tests) */
    uint64_t host_cap;    /* cpu: refuse allocations past this many bytes (0: no cap) */
    uint64_t weight_copy_bytes; /* cpu: copy the weight matrices into this much huge-page
                                   memory (hr_alloc_pages), dropping the file pages they
                                   came from (0: read them where the model keeps them) */
    bool weights_in_huge_pages; /* cpu: where the model keeps them is hr_alloc_pages memory */
} be_params;

hr_status backend_cpu_create(const hr_model_info *info, const be_params *p, hr_backend **out,
                             hr_error *err);

#endif
