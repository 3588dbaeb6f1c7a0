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
 * token). Before attention runs, kv_store has written the step's own K and V
 * into the pool, so every row attends to positions [0, pos] of its sequence
 * straight from the paged cache: prefill and decode rows mix freely.
 *
 * Fused projections: q/k/v are one weight whose parts stack along the output
 * (QKV row = [q (H*Dh) | k (Hkv*Dh) | v (Hkv*Dh)]), and gate/up likewise
 * ([gate (F) | up (F)]); the parts need not share a dtype.
 */
#ifndef HR_BACKEND_BACKEND_H
#define HR_BACKEND_BACKEND_H

#include "headroom.h"
#include "model/model.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct hr_backend hr_backend;
typedef struct be_weight be_weight; /* a (possibly fused) matrix, backend-owned */
typedef struct be_vector be_vector; /* a norm weight, f32 on the backend */

typedef struct {
    void *data;   /* backend memory */
    int64_t cols; /* elements per row */
    int64_t ld;   /* row stride in elements */
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
} hr_step;

/* What the backend must size for, fixed when the engine starts. */
typedef struct {
    int32_t max_rows;            /* B at most */
    int32_t max_out;             /* logits rows at most */
    int32_t n_seq_max;
    int32_t max_blocks_per_seq;
    int32_t n_block;             /* NB */
    int32_t block_size;          /* BS */
    hr_dtype kv_dtype;
} be_config;

typedef struct {
    const char *name; /* "cpu", "cuda" */
    void (*free)(hr_backend *b);

    /* Setup, before the first step: weights (parts stacked along the output
     * dimension; biases optional, one per part or NULL), norm vectors, then
     * activations, KV pool and workspaces for cfg. */
    hr_status (*weight_create)(hr_backend *b, const model_tensor *const *parts,
                               const model_tensor *const *biases, int n_parts, be_weight **out,
                               hr_error *err);
    hr_status (*vector_create)(hr_backend *b, const model_tensor *t, be_vector **out,
                               hr_error *err);
    hr_status (*tensor_alloc)(hr_backend *b, int64_t rows, int64_t cols, be_tensor *out,
                              hr_error *err);
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
    /* rotate q and k inside qkv (B, (H + 2 Hkv) Dh) at each row's position */
    void (*rope)(hr_backend *b, be_tensor *qkv, const float *inv_freq, rope_style style,
                 int32_t n_head, int32_t n_head_kv, int32_t head_dim);
    /* write the k and v parts of qkv into layer's pages at the step's slots */
    void (*kv_store)(hr_backend *b, int32_t layer, const be_tensor *qkv);
    /* out (B, H*Dh) = softmax(q k^T / sqrt(Dh)) v over each row's [0, pos] */
    void (*attention)(hr_backend *b, int32_t layer, be_tensor *out, const be_tensor *qkv);
    /* h (B, F) = silu(gate) * up from gu (B, 2F) */
    void (*swiglu)(hr_backend *b, be_tensor *h, const be_tensor *gu);
    /* y (n_out, D) = x rows listed in the step's out_rows */
    void (*gather_rows)(hr_backend *b, be_tensor *y, const be_tensor *x);
    /* wait for the step; copy logits (n_out, V) to host memory when asked */
    hr_status (*end_step)(hr_backend *b, const be_tensor *logits, float *host_logits,
                          hr_error *err);
} hr_backend_ops;

struct hr_backend {
    const hr_backend_ops *ops;
    const hr_model_info *info;
};

typedef struct {
    int32_t n_threads;    /* cpu: worker threads (0 = all cores) */
    bool exact_matmul;    /* cpu: f32 math for quantized weights (no 8-bit activations) */
    int32_t device_index; /* cuda */
} be_params;

hr_status backend_cpu_create(const hr_model_info *info, const be_params *p, hr_backend **out,
                             hr_error *err);

#endif
