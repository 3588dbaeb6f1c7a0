/*
 * cpu_backend.h — state shared by the CPU backend's op files.
 *
 * Weights are not copied: a be_weight is a list of cpu_mat parts pointing
 * into the model's memory mapping, in the stored dtype; the matmul converts
 * inside the kernel. Activations are f32. The KV pool is one allocation per
 * K and V: (n_layer, NB, Hkv, BS, row) with row = Dh elements of f32, f16 or
 * bf16, or Dh/32 GGUF blocks of q8_0 / q4_0 (34 / 18 bytes), K and V each in
 * its own type; one (block, kv head) page is BS contiguous rows — the layout
 * the CUDA backend uses for its 16-bit cache.
 */
#ifndef HR_BACKEND_CPU_CPU_BACKEND_H
#define HR_BACKEND_CPU_CPU_BACKEND_H

#include "backend/backend.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/thread_tuner.h"
#include "backend/cpu/threadpool.h"

struct be_weight {
    int32_t n_parts;
    cpu_mat parts[3];
    float *bias;      /* owned f32 copy of the parts' biases, or NULL */
    int64_t n_rows;   /* total output rows (N) */
    int64_t k;        /* input elements per row (K) */
};

struct be_vector {
    float *data; /* owned f32 copy */
    int64_t n;
};

typedef struct {
    hr_backend base;
    cpu_pool *pool;
    cpu_thread_tuner tuner; /* how many of the pool's threads a step uses */
    uint64_t step_start_ns; /* begin_step's clock, for the tuner */
    cpu_matmul_mode mode;
    void *matmul_scratch;
    size_t matmul_scratch_bytes;
    int64_t matmul_max_rows, matmul_max_k;
    const hr_step *step;   /* valid from begin_step to end_step */
    int32_t *row_seq;      /* (max_rows) sequence slot of each row of the step */
    be_config kv;
    size_t k_row_bytes;    /* one cached row (Dh values) in kv_dtype, and in kv_dtype_v */
    size_t v_row_bytes;
    uint8_t *k_pool;       /* (n_layer, NB, Hkv, BS, k_row_bytes) kv_dtype */
    uint8_t *v_pool;       /* (n_layer, NB, Hkv, BS, v_row_bytes) kv_dtype_v */
    float *rope_cos;       /* (max_rows, Dh/2) for the current step, built by the */
    float *rope_sin;       /*   first rope call and reused by every layer */
    bool rope_ready;
    float *att_scratch;    /* (n_threads, max context) scores */
    int64_t att_scratch_per_thread;
    size_t vector_bytes, activation_bytes, kv_bytes, workspace_bytes; /* for memory() */
    uint64_t host_cap, owned_bytes; /* the planned cap, and what own() has taken */
    uint8_t *weight_copy;             /* the matrices, copied (be_params.weight_copy_bytes) */
    size_t weight_copy_cap, weight_copy_used;
    bool weights_huge; /* the matrices lie in huge pages: the copy, or a synthetic model's */
    void **owned;          /* every other allocation of this backend */
    int32_t n_owned, cap_owned;
} cpu_backend;

/* Page of (layer, block, kv head) in a pool of rows of row_bytes: BS rows. */
static inline uint8_t *cpu_kv_page(const cpu_backend *c, uint8_t *pool, size_t row_bytes,
                                   int32_t layer, int32_t block, int32_t kv_head) {
    const hr_model_info *in = c->base.info;
    size_t page = (size_t)c->kv.block_size * row_bytes;
    size_t idx = ((size_t)layer * (size_t)c->kv.n_block + (size_t)block) * (size_t)in->n_head_kv +
                 (size_t)kv_head;
    return pool + idx * page;
}

/* f32 -> one cached row of type t: f16 / bf16 round to nearest even; q8_0 and
 * q4_0 are quant_quantize_row's reference rule (n a multiple of 32) */
void cpu_kv_from_f32(hr_dtype t, const float *src, uint8_t *dst, int64_t n);

void cpu_embed(hr_backend *b, be_tensor *x, const be_weight *tok_embd);
void cpu_rmsnorm(hr_backend *b, be_tensor *y, const be_tensor *x, const be_vector *w, float eps,
                 int64_t n);
void cpu_add_rmsnorm(hr_backend *b, be_tensor *x, const be_tensor *dx, be_tensor *y,
                     const be_vector *w, float eps);
void cpu_rope(hr_backend *b, be_tensor *qkv, const float *inv_freq, rope_style style,
              int32_t n_head, int32_t n_head_kv, int32_t head_dim);
void cpu_kv_store(hr_backend *b, int32_t layer, const be_tensor *qkv);
/* the ops-table entry: cpu_rope, then cpu_kv_store */
void cpu_rope_kv_store(hr_backend *b, int32_t layer, be_tensor *qkv, const float *inv_freq,
                       rope_style style, int32_t n_head, int32_t n_head_kv, int32_t head_dim);
void cpu_attention(hr_backend *b, int32_t layer, be_tensor *out, const be_tensor *qkv);
void cpu_swiglu(hr_backend *b, be_tensor *h, const be_tensor *gu);

#endif
