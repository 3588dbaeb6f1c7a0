/*
 * sizes.h — the bytes every allocation of a backend takes, as functions of
 * the model's shapes and the engine's configuration, computable without a
 * device and without weights. The backends allocate exactly these sizes
 * (they call these functions), and the planner adds them up: the plan
 * cannot drift from what is allocated.
 *
 * Layout facts behind the numbers (the backends' comments give the why):
 *   cpu:  activations f32, rows padded to 16 floats, every block 64-byte
 *         aligned; weights stay in the file mapping (counted as the model's);
 *         biases and norms copied to f32.
 *   cuda: one arena of device memory, every piece 256-byte aligned; weights
 *         16-bit, or packed as the file holds them (backend/packed.h; biases
 *         and norms f32), matmul inputs 16-bit and the rest f32, rows padded
 *         to 64 elements; the KV pool in the compute type.
 *   KV:   a cached row is head_dim elements, or for q8_0 / q4_0 head_dim / 32
 *         GGUF blocks (34 / 18 bytes each); K and V may differ in type.
 */
#ifndef HR_MEMORY_SIZES_H
#define HR_MEMORY_SIZES_H

#include "backend/backend.h"
#include "backend/packed.h"

#include <stdint.h>

typedef enum { SIZES_CPU = 0, SIZES_CUDA = 1 } sizes_device;

#define SIZES_CPU_ALIGN 64u
#define SIZES_CUDA_ALIGN 256u

static inline uint64_t sizes_align(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

/* Row stride (elements) of an activation tensor of cols columns. */
int64_t sizes_ld(sizes_device d, int64_t cols);
/* One activation tensor. */
uint64_t sizes_tensor(sizes_device d, int64_t rows, int64_t cols, bool narrow);
/* A weight made of n_parts stacked matrices (biases optional, per part). */
uint64_t sizes_weight(sizes_device d, const be_params *p, const model_tensor *const *parts,
                      const model_tensor *const *biases, int n_parts);

/* How the GPU stores a weight: runs of consecutive parts of one packed type,
 * each run one packed matrix. A weight is packed when every part's type has
 * GPU kernels (packed_type_of) and be_params.expand_weights is off; else
 * it is one 16-bit matrix (0 runs). A Q4_K_M file's q, k (Q4_K) and v
 * (Q6_K) make two runs. */
typedef struct {
    packed_type type;
    int first, n_parts;
    int64_t rows;
} sizes_run;
int sizes_cuda_runs(const be_params *p, const model_tensor *const *parts, int n_parts,
                    sizes_run runs[3]);
/* A weight's matrices as the CPU backend copies them (be_params
 * weight_copy_bytes): each part at a 64-byte boundary. */
uint64_t sizes_weight_copy(const model_tensor *const *parts, int n_parts);
/* A norm vector. */
uint64_t sizes_vector(sizes_device d, const model_tensor *t);
/* Whether device d can hold a KV cache of type t: f32, f16 and bf16
 * everywhere (cuda: only its compute type, which the backend checks), q8_0
 * everywhere, q4_0 on the cpu only (no GPU kernel reads it yet). */
bool sizes_kv_type_ok(sizes_device d, hr_dtype t);
/* Bytes of one cached row (one token, one kv head: head_dim values) of type
 * t: head_dim elements, or head_dim / 32 blocks of a block type (head_dim a
 * multiple of 32, which the engine checks). */
uint64_t sizes_kv_row_bytes(const hr_model_info *in, hr_dtype t);
/* The K and V pools together (each in its own type, each aligned). */
uint64_t sizes_kv(sizes_device d, const hr_model_info *in, const be_config *cfg);
/* KV bytes of one token (all layers, K in k_dtype and V in v_dtype). */
uint64_t sizes_kv_per_token(sizes_device d, const hr_model_info *in, hr_dtype k_dtype,
                            hr_dtype v_dtype);
/* Everything kv_alloc and the backend's creation allocate besides the KV
 * pool: attention, matmul and sampling workspaces, step metadata, and with
 * packed weights (be_params.packed) their activations and scratch. max_k is
 * the largest input width of any weight. */
uint64_t sizes_workspace(sizes_device d, const be_params *p, const hr_model_info *in,
                         const be_config *cfg, int64_t max_k);

/* ---- cuda specifics shared with the backend */

/* Packed weights: a step of at most SIZES_CUDA_PACKED_GEMV_ROWS rows reads
 * them with the packed GEMV, on the activations quantized to 8 bits
 * (sizes_cuda_xq_bytes: codes, then the f32 scales, then the f32 scaled code
 * sums, each section 256-byte aligned); up to SIZES_CUDA_PACKED_MMA_ROWS
 * rows with the tensor-core kernel on the 16-bit activations (no workspace);
 * a longer step expands a chunk of rows at a time into a 16-bit scratch of
 * SIZES_CUDA_DEQUANT_SCRATCH bytes for cuBLASLt. */
#define SIZES_CUDA_PACKED_GEMV_ROWS 8
#define SIZES_CUDA_PACKED_MMA_ROWS 64
#define SIZES_CUDA_DEQUANT_SCRATCH ((uint64_t)64 << 20)
uint64_t sizes_cuda_xq_bytes(int64_t rows, int64_t K);

/* cuBLASLt's workspace (its recommendation for Hopper). */
#define SIZES_CUDA_GEMM_WORKSPACE ((uint64_t)32 << 20)
/* The CUDA context, the stream and cuBLASLt's handle, measured on the H200
 * (2026-11-29: 528.81 MiB after cudaFree(0), a stream and cublasLtCreate),
 * rounded up to the 2 MiB the driver allocates in. */
#define SIZES_CUDA_RUNTIME ((uint64_t)530 << 20)
/* Captured decode graphs: at most SIZES_CUDA_MAX_GRAPHS, each measured at
 * 2 MiB (the driver's granularity) on the H200. */
#define SIZES_CUDA_MAX_GRAPHS 8
#define SIZES_CUDA_GRAPH ((uint64_t)2 << 20)

/* The persistent decode step (backend/cuda/persistent.cu): its program of
 * at most sizes_cuda_pstep_ops ops of at most SIZES_CUDA_PSTEP_OP bytes, a
 * GEMV cut into pieces of at most SIZES_CUDA_PSTEP_ROWS rows a block. */
#define SIZES_CUDA_PSTEP_OP 128u
#define SIZES_CUDA_PSTEP_ROWS 256
/* its counters: the grid barrier, the blocks done, the greedy rank (64 bits) */
#define SIZES_CUDA_PSTEP_SYNC 4
uint64_t sizes_cuda_pstep_ops(const hr_model_info *in);
/* the same with GEMVs cut every R rows (the backend's R: the rows a block
 * takes times its blocks) */
uint64_t sizes_cuda_pstep_ops_cut(const hr_model_info *in, int64_t R);
/* its attention splits' partials: (n_head, splits, head_dim + 1) 8-byte words */
uint64_t sizes_cuda_pstep_parts_bytes(const hr_model_info *in, int splits);
/* Flash-decoding splits for this configuration. */
int sizes_cuda_splits(const hr_model_info *in, const be_config *cfg);
/* Whether the flash attention kernels take this head size (else the naive one). */
bool sizes_cuda_flash_dh(int head_dim);
/* Step metadata ints: tokens, positions, slots, sequences, outputs, decode
 * rows, tiles (two arrays), block tables, the chain count. */
uint64_t sizes_cuda_meta_ints(const be_config *cfg);

/* Host-side overhead the planner adds on the cpu: thread stacks and the
 * library's own tables (tokenizer, model description), a documented bound. */
#define SIZES_CPU_RUNTIME ((uint64_t)64 << 20)

#endif
