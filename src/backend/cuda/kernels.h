/*
 * kernels.h — launchers of the CUDA kernels, one .cu file per op (same base
 * names as the CPU ops). Only src/backend/cuda/ includes this header (it
 * brings in cuda_runtime.h); the rest of the library sees cuda_backend.h.
 *
 * Shape legend: B = rows of the step, D = n_embd, H / Hkv = query / kv heads,
 * Dh = head_dim, F = n_ff, V = n_vocab, BS = tokens per KV block, NB = blocks.
 *
 * Data types on the device. "ck" is the 16-bit compute/storage type chosen
 * with --dtype (bf16 or f16): weights, the KV pool, every activation that is
 * a matmul input (normalised x, attention output, SwiGLU output) and the
 * projection outputs (q/k/v, gate/up, o and down: rounded once from the f32
 * sums, as transformers keeps them) are ck. The residual stream and the
 * logits are f32: the residual sum of 32+ layers keeps its precision.
 * Narrow projection outputs took a 512-row prefill of Llama-2-7B from
 * 44.4-45.0k to 46.1-46.4k tok/s and 2048 rows from 42.4-42.6k to
 * 44.2-45.8k (H200, 2026-11-30).
 *
 * Every launcher only enqueues on the stream; the caller checks
 * cudaGetLastError() (through HR_CUDA_TRY) after it. Preconditions are stated
 * per launcher; the backend guarantees them (asserted there, not here).
 */
#ifndef HR_BACKEND_CUDA_KERNELS_H
#define HR_BACKEND_CUDA_KERNELS_H

#include "backend/sample_params.h"

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { CK_BF16 = 0, CK_F16 = 1 } ck_dtype;

/* What the device can run (caps.cu, which says what each path holds and
 * the HEADROOM_CUDA_ARCH_FALLBACK override): read once, from the device
 * current at the first call (the backend sets its own before). */
typedef struct {
    int major, minor;  /* compute capability */
    int ptx;           /* the virtual architecture the loaded code was compiled
                          for (80, 90: its __CUDA_ARCH__ / 10) */
    int smem_block;    /* shared memory bytes a block may opt into */
    bool hopper;       /* the Hopper path: programmatic dependent launch, the
                          persistent decode step */
    bool wgmma;        /* attention_wgmma.cu's kernel (compute capability 9.0) */
    const char *path;  /* "hopper" or "generic" */
} ck_caps;
const ck_caps *ck_device_caps(void);

/* The shared memory any device built for grants a block (sm_86, sm_89: 99
 * KB): kernels that fit it run everywhere without a smaller variant. */
#define CK_SMEM_BLOCK_MIN (99 * 1024)

/* 1 (the default on the Hopper path): the decode-path kernels start as
 * programmatic dependents of the previous kernel (overlapping its tail, see
 * common.cuh); 0 (always on the generic path): ordinary launches
 * (HEADROOM_CUDA_PDL=0, to measure the difference). */
void ck_set_pdl(int on);
int ck_pdl_on(void);

/* ---- elementwise and row ops (elementwise.cu, rmsnorm.cu, rope_kv_store.cu) */

/* x (n, D) f32 = table rows tokens[i]; table (V, D) ck */
void ck_embed(cudaStream_t s, float *x, int64_t ldx, const void *table, ck_dtype dt,
              const int32_t *tokens, int n, int D);

/* if dx: x += dx (x f32; dx f32, or ck when dx_ck); then y (n, D) ck = x /
 * rms(x) * w. D % 4 == 0; x, dx, y, w 16-byte aligned, row strides
 * multiples of 4 */
void ck_add_rmsnorm(cudaStream_t s, float *x, int64_t ldx, const void *dx, bool dx_ck,
                    int64_t lddx, void *y, int64_t ldy, ck_dtype dt, const float *w, float eps,
                    int n, int D);

/* rotates the first H + Hkv heads of each qkv row (ck, in place) at pos[row];
 * neox: pairs (i, i + Dh/2), else (2i, 2i + 1); angle pos * inv_freq[i] (f32);
 * then k (rotated) and v of each row into the layer's pools at slot[row] =
 * block * BS + offset; pool layout (NB, Hkv, BS, Dh) ck. With kv.q8 the
 * pools hold q8_0 instead (ck_kv_pools): the rotated k and v, as the row
 * holds them, quantized per 32 values as quant_quantize_q8_0 does. */
typedef struct {
    void *k, *v;             /* this layer's pools: ck elements, or q8_0 codes (int8) */
    void *k_scale, *v_scale; /* q8_0: one f16 a 32 values, at element offset / 32 */
    int q8;
} ck_kv_pools;
void ck_rope_kv_store(cudaStream_t s, void *qkv, int64_t ld, ck_kv_pools kv, ck_dtype dt,
                      const int32_t *pos, const int32_t *slot, const float *inv_freq, int neox,
                      int n, int H, int Hkv, int Dh, int BS);

/* h (n, F) ck = silu(gu[:, :F]) * gu[:, F:2F], gu f32 or (gu_ck) ck.
 * F % 4 == 0; h, gu 16-byte aligned (8 for a ck gu), row strides multiples
 * of 4 */
void ck_swiglu(cudaStream_t s, void *h, int64_t ldh, ck_dtype dt, const void *gu, bool gu_ck,
               int64_t ldgu, int n, int F);

/* y (n_out, D) ck = rows[i] of x (ck) */
void ck_gather(cudaStream_t s, void *y, int64_t ldy, const void *x, int64_t ldx, ck_dtype dt,
               const int32_t *rows, int n_out, int D);

/* y (n, N) += bias (N); y f32, or ck when y_ck (then rounded a second time:
 * the GEMM rounded its output already) */
void ck_add_bias(cudaStream_t s, void *y, bool y_ck, int64_t ldy, const float *bias, int n,
                 int N, ck_dtype dt);

/* A norm's weight w (K, f32) folded into the matrix W (rows, K) ck that the
 * norm feeds: column k times w[k], rounded once (when scale: a measurement
 * without weight values skips it), then w all ones, so the norm kernels
 * apply it as a no-op and the persistent step may skip it */
void ck_fold_norm(cudaStream_t s, void *W, int64_t rows, int K, float *w, bool scale,
                  ck_dtype dt);

/* ---- matrix-vector products for decode (gemv.cu) */

/* y (n, N) = x (n, K) ck . W^T (+ bias), W (N, K) ck row-major, row stride K;
 * y f32, or ck when y_ck (rounded once from the f32 sum).
 * For small n (decode): each warp streams weight rows with 16-byte loads and
 * reuses them for all n rows. n <= CK_GEMV_MAX_ROWS, K % 8 == 0. */
#define CK_GEMV_MAX_ROWS 8
void ck_gemv(cudaStream_t s, void *y, bool y_ck, int64_t ldy, const void *x, int64_t ldx,
             const void *W, const float *bias, ck_dtype dt, int n, int N, int K);

/* ---- attention over the paged KV cache (attention.cu) */

typedef struct {
    const void *qkv;           /* (n_rows, (H + 2 Hkv) Dh) ck, q first, rope applied */
    int64_t ld_qkv;
    void *out;                 /* (n_rows, H Dh) ck */
    int64_t ld_out;
    const void *k_pool;        /* this layer: (NB, Hkv, BS, Dh) ck, or q8_0 codes */
    const void *v_pool;
    const void *k_scale;       /* q8_0 (kv_q8): the pools' f16 scales, one a 32 codes */
    const void *v_scale;
    int kv_q8;
    ck_dtype dt;
    const int32_t *row_seq;    /* (n_rows) sequence of each row */
    const int32_t *row_pos;    /* (n_rows) position: the row attends to [0, pos] */
    const int32_t *block_tables; /* (n_seq, max_blocks) physical block ids */
    int max_blocks;
    int n_rows, H, Hkv, Dh, BS;
    float scale;               /* 1 / sqrt(Dh) */
    /* decode (flash-decoding): rows listed in dec_rows, each split into
     * n_splits chunks of split_len positions, partials in work, then combined */
    const int32_t *dec_rows;   /* (n_dec) */
    int n_dec;
    int n_splits, split_len;   /* n_splits * split_len >= the longest context */
    float *work;               /* (n_dec, H, n_splits, Dh + 2) f32 */
    /* prefill (flash attention): query tiles of up to tile_rows rows of one
     * segment; tile t covers rows tile_row0[t] .. + tile_n[t] - 1, all of one
     * sequence, consecutive positions. tile_rows (CK_ATT_TILE or
     * CK_ATT_TILE_WIDE, from ck_attention_tile_rows) picks the kernel. */
    const int32_t *tile_row0, *tile_n;
    int n_tiles, tile_rows;
} ck_attn_args;

/* Prefill tile rows: narrow tiles (4 warps x 16 rows) and wide ones (4 warps
 * x 32 rows: 5/8 of the shared-memory reads per FLOP, 3/4 at Dh 128, but
 * half the blocks and a heaviest tile twice as long). Bounds that count
 * tiles hold with either: a tile has at least one row, so n_tiles <= the
 * step's rows. */
#define CK_ATT_TILE 64
#define CK_ATT_TILE_WIDE 128
/* Wide tiles once the step's longest prefill segment alone makes at least
 * this many wide blocks (tiles x heads): a causal grid lasts about as long
 * as its heaviest block (the last tile, all keys) or the average load of
 * its SM slots, whichever is longer; with 2 blocks on each of an H200's
 * 132 SMs, about two rounds of wide blocks keep the heaviest from
 * dominating (Llama-2-7B, 32 heads: from 1921 rows). An estimate from that
 * model; tests/cuda/attention_check.cu times both sizes. */
#define CK_ATT_WIDE_MIN_BLOCKS 512

/* CK_ATT_TILE_WIDE when the wgmma kernel takes the step (Dh 128 on a
 * compute capability 9.0 device), or when ceil(longest / CK_ATT_TILE_WIDE)
 * * H >= CK_ATT_WIDE_MIN_BLOCKS and the wide tile fits; else CK_ATT_TILE.
 * longest = the rows of the step's longest prefill segment; a q8_0 cache
 * (kv_q8) is read by the mma.sync kernels only */
int ck_attention_tile_rows(int longest, int H, int Dh, int kv_q8);
/* whether prefill tiles of tile_rows rows at head size Dh fit a block's
 * shared memory on this device (ck_device_caps) */
int ck_attention_tile_fits(int tile_rows, int Dh);

/* Flash kernels exist for Dh in {64, 80, 96, 128}; for any other Dh <= 256
 * decode and prefill run the naive kernel over their rows (its work must
 * then be sized as below). The naive kernel is the simple, obviously
 * correct one (--attn naive). */
void ck_attention_decode(cudaStream_t s, const ck_attn_args *a);  /* rows in dec_rows */
void ck_attention_prefill(cudaStream_t s, const ck_attn_args *a); /* rows in the tiles */
void ck_attention_naive(cudaStream_t s, const ck_attn_args *a);   /* every row 0 .. n_rows-1;
                                                                     work: (n_rows, H, ctx) */
/* The wide prefill tiles of head size 128 on wgmma (attention_wgmma.cu,
 * sm_90a): launches and returns 1 when a's shape is one it takes, else 0.
 * Only on a device of compute capability 9.0 (ck_attention_prefill asks). */
int ck_attention_prefill_wgmma(cudaStream_t s, const ck_attn_args *a);

/* floats of work the kernels need */
int64_t ck_attention_work_floats(int max_rows, int H, int Dh, int n_splits, int max_ctx);

/* ---- the persistent decode step (persistent.cu)
 *
 * A decode step of one row as one kernel: the ops of the step, recorded in
 * order as a program, run by one block per SM with a grid-wide barrier
 * between ops, while a producer warp of each block streams that block's
 * share of every matrix of the step into a ring of shared-memory stages,
 * running ahead across the barriers (weights depend on no activation).
 * A norm is folded into the GEMV that reads it (every block normalises the
 * row itself), its residual add into the GEMV that made the addend, and
 * the rotations and KV store into the attention. */

typedef enum {
    CKP_EMBED,  /* x f32 = table[token] */
    CKP_NORM,   /* y ck = x / rms(x) * w (block 0): a norm no GEMV takes */
    CKP_GEMV,   /* y = x ck . W^T (+ bias), y f32 or ck */
    CKP_ATTN,   /* out ck = attention of q (rotated) over the positions 0..pos;
                   this step's k (rotated) and v into the pools first */
    CKP_SWIGLU, /* h ck = silu(gu[:F]) * gu[F:] */
    CKP_GATHER  /* y ck = row rows[0] of x ck */
} ckp_kind;

/* y = x . W^T (+ bias) for one row, the block's share of W's rows */
typedef struct {
    const void *x;       /* ck; unused with norm_x */
    const void *W;       /* (N, K) ck */
    const float *bias;
    void *y;             /* unused with resid */
    const float *norm_x; /* if set, x = ck(norm_w * (norm_x / rms(norm_x))) */
    const float *norm_w;
    void *norm_y;        /* if set (with norm_x), block 0 also stores x (ck) there */
    float *resid;        /* if set, resid += y (rounded to ck first if y_ck) */
    float eps;
    int32_t y_ck, N, K;
    int32_t pair;        /* if set (F, N = 2F): y (F) ck = silu(row i) * row F + i,
                            the rows rounded to ck first if y_ck (SwiGLU) */
    int32_t logits;      /* 1 + the vocabulary id of row 0 when y (f32) is logits: a
                            greedy step ranks them (ck_pstep_run); 0 otherwise */
} ck_pstep_gemv;

/* One op; pointers are device addresses, fixed for the backend's life (the
 * step's metadata buffers included), so a program recorded once serves
 * every step of one row. */
typedef struct {
    int32_t kind; /* ckp_kind */
    union {
        struct {
            const void *table;
            const int32_t *token;
            float *x;
            int32_t D;
        } embed;
        struct {
            const float *x;
            const float *w;
            void *y;
            float eps;
            int32_t D;
        } norm;
        ck_pstep_gemv gemv;
        struct {
            const void *qkv;  /* as the GEMV left it: q, k not rotated */
            void *out;
            void *k_pool, *v_pool; /* this layer's */
            const int32_t *pos, *seq, *block_tables;
            const float *inv_freq;
            unsigned long long *parts; /* (H, max_splits, Dh + 1) words of the splits'
                                          partials (persistent.cu), zero between uses */
            float scale;
            int32_t neox, max_blocks, max_splits, H, Hkv, Dh, BS;
        } attn;
        struct {
            const void *gu;
            void *h;
            int32_t gu_ck, F;
        } swiglu;
        struct {
            const void *x;
            const int32_t *row;
            void *y;
            int32_t D, ldx;
        } gather;
    };
} ck_pstep_op;

/* What the kernel can run: matrices with K % 256 == 0 and K <= CK_PSTEP_MAX_K, at
 * most CK_PSTEP_ROWS rows a block (the backend cuts taller ones), Dh 64 or
 * 128, a row of at most CK_PSTEP_MAX_K elements for the row ops. */
#define CK_PSTEP_MAX_K 16384
#define CK_PSTEP_ROWS 256
/* ops a program may have: the producer keeps each ring stage's op index
 * in 10 bits (persistent.cu's produce) */
#define CK_PSTEP_MAX_OPS 1023
/* whether the kernel takes this head size and widest K (of any GEMV) and
 * fits on this device */
int ck_pstep_supported(ck_dtype dt, int dh, int max_k);
/* blocks of the kernel (one per SM) */
int ck_pstep_blocks(void);

/* A decode step of one row feeding the next on the device ("chained"
 * steps: the host queues step t + 1 before step t's id is known). Once the
 * id is drawn, the sampler (or a greedy persistent step, ck_pstep_run)
 * makes the step's metadata that of the next step (token = the id, pos + 1,
 * the slot of pos + 1 in the row's block table) and counts the step. The
 * count also offsets params[0].step (the host does not rewrite a chained
 * step's parameters while the step before may still read them) and picks
 * where the id lands for the host. */
typedef struct {
    int32_t *tok, *pos, *slot;          /* row 0's entries of the step's metadata */
    const int32_t *seq, *block_tables;  /* row 0's sequence; (n_seq_max, max_blocks) */
    int32_t *count;                     /* steps since the host last wrote the metadata */
    int32_t *host_tok;                  /* (2) mapped: a step counted c writes [c & 1] */
    int32_t max_blocks, block_size;
} ck_chain;

/* Runs ops[0 .. n_op) (device memory) as one kernel. sync: CK_PSTEP_SYNC
 * counters, zero before the first launch (each launch leaves them zero).
 * trace: NULL, or 3 n_op timestamps (ns) per op i, zeroed once by the
 * caller: block 0 done, the last block arrived at the barrier (a running
 * max), block 0 past it. greedy: NULL, or the step's one row samples
 * greedily: the logits GEMVs rank their rows as they write them and the
 * last block to finish emits the argmax as ck_sample would (tokens[0], and
 * the chain's advance when greedy->tok is set), so no sampling kernel runs.
 * folded: every norm of the program has its weight folded into the matrix
 * after it (its w all ones): a kernel that loads none (bf16 only: the
 * backend folds no f16 norm; for f16 the flag is ignored). */
#define CK_PSTEP_SYNC 4
void ck_pstep_run(cudaStream_t s, const ck_pstep_op *ops, int n_op, int max_k, unsigned *sync,
                  ck_dtype dt, int dh, bool folded, uint64_t *trace, int32_t *tokens,
                  const ck_chain *greedy);

/* ---- sampling (sample.cu) */

/* tokens[i] = a draw from row i of logits (n, V) f32 with params[i]
 * (temperature, then top-k, top-p, min-p, as the CPU sampler orders them).
 * work: ck_sample_work_bytes(n, V) bytes. Logits are not modified. tokens
 * and params may be mapped pinned host memory (the backend's: a block reads
 * its params once and writes one id). chain: NULL, or (n == 1) the step
 * advance above. */
void ck_sample(cudaStream_t s, int32_t *tokens, const float *logits, int64_t ld, int n, int V,
               const be_sample *params, void *work, const ck_chain *chain);
size_t ck_sample_work_bytes(int n, int V);

/* ---- the device's read bandwidth (bandwidth.cu) */

/* Reads bytes (a multiple of 16, 16-byte aligned) at p once; sink gets a
 * word only in the rare case that all of it folds to a constant. */
void ck_read_stream(cudaStream_t s, const void *p, int64_t bytes, unsigned *sink);

#ifdef __cplusplus
}
#endif

#endif
