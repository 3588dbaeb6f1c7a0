/*
 * matmul.h — y = x · Wᵀ (+ bias) on the CPU, for every stored weight format.
 *
 * Shapes: B = activation rows in the step (tokens), K = input features,
 * N = output features (weight rows). x (B, K) f32 with row stride ldx;
 * y (B, N) f32 with row stride ldy; W (N, K) in its stored dtype, rows
 * contiguous, exactly as in the GGUF file (never repacked in memory).
 * W may be a stack of parts along N (q/k/v, gate/up fused into one call without
 * copying weights); parts may have different dtypes, as in Q4_K_M files.
 *
 * Two modes:
 *   CPU_MATMUL_EXACT  each weight is converted to f32 inside the kernel (bit-
 *                     identical to quant_dequantize_row) and multiplied with x
 *                     in f32 with FMA; only the order of the f32 sums differs
 *                     from a naive loop. The reference-grade path.
 *   CPU_MATMUL_FAST   for quantized weights, each activation row is first
 *                     quantized to 8 bits in blocks of 32 along K:
 *                       amax = max |x_k| over the block,
 *                       d = amax / 127,  q_k = rint(x_k * (127 / amax))  (0 when amax = 0),
 *                     all in f32 (round to nearest even), and the kernels
 *                     compute sum_k w_k * (d * q_k) with integer dot products
 *                     (AVX512-VNNI vpdpbusd, AVX2 vpmaddubsw) and f32 scales
 *                     (the reference level and AVX2 prefill compute the same
 *                     sum in f32 on x^).
 *                     NF4/FP4 weights (table value * absmax): the AVX-512
 *                     decode kernel rounds the table to multiples of 2^-14
 *                     for its 16-bit dot products (at most 2^-15 of the
 *                     block's absmax a weight); elsewhere they run the
 *                     EXACT kernels on x^.
 *                     The result equals the EXACT result on the rounded
 *                     activations x^ = d*q up to f32 summation order; x^ differs
 *                     from x by at most d/2 per element.
 *                     F16 weights: x^ = x rounded to f16 (to nearest even),
 *                     as llama.cpp computes with F16 weights; a decode of one
 *                     row reads x^ as f16, half the bytes of f32 activations
 *                     next to the weight stream (TinyLlama F16 decode on a
 *                     2-core Zen 4 VM, 2026-11-30: +15-24% while its memory
 *                     ran fast, even while slow). A call whose parts mix F16
 *                     with quantized weights runs its F16 parts EXACT (one x^
 *                     per call).
 *                     BF16 weights: x^ = x rounded to bf16 (to nearest even),
 *                     llama.cpp's arithmetic for BF16 weights: products of two
 *                     bf16 are exact in f32, so AVX512-BF16's vdpbf16ps does
 *                     32 of them an instruction (twice the f32 FMA rate:
 *                     prefill) and a decode reads x^ as bf16. Its DAZ/FTZ
 *                     changes nothing above 2^-126. BF16 parts run EXACT in a
 *                     call with quantized or F16 parts. F32 ignores the mode.
 *   (ggml quantizes activations for K-quants per 256 elements (Q8_K); headroom
 *   uses blocks of 32 for every format: a finer scale, one activation format,
 *   and no extra cost in kernels that scale each block in f32 anyway.)
 *
 * Threads: decode (small B) splits the N rows among the pool's threads; prefill
 * (large B) runs a blocked matrix-matrix kernel (weight tiles converted once
 * into per-thread scratch, reused across all activation rows, register-blocked
 * microkernel) with tiles of N handed out to threads. The SIMD level is the
 * active one of cpu_features.h at the time of the call.
 */
#ifndef HR_BACKEND_CPU_MATMUL_H
#define HR_BACKEND_CPU_MATMUL_H

#include "backend/cpu/threadpool.h"
#include "headroom.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One part of the weight stack: n_rows rows of K elements in `dtype`, rows
 * contiguous (row r at data + r * row_bytes(dtype, K)). bias: NULL or n_rows
 * floats added to the part's outputs. All borrowed for the call.
 * huge_pages: data lies in 2 MiB pages (hr_alloc_pages), so the decode
 * kernels may prefetch further ahead without a TLB miss per 4 KiB. */
typedef struct {
    hr_dtype dtype;
    const void *data;
    int64_t n_rows;
    const float *bias;
    bool huge_pages;
} cpu_mat;

typedef enum { CPU_MATMUL_EXACT, CPU_MATMUL_FAST } cpu_matmul_mode;

/* Bytes of scratch cpu_matmul needs for any call with B <= max_rows_B,
 * K <= max_K, every supported dtype and mode, at any SIMD level, on a pool of
 * n_threads. Allocate once (it belongs in the planner's workspace) with at
 * least 64-byte alignment. */
size_t cpu_matmul_scratch_bytes(int64_t max_rows_B, int64_t max_K, int n_threads);

/* y[b][n] = sum_k x[b][k] * W[n][k] (+ bias[n]) for b < B and all N = sum of
 * the parts' n_rows. Preconditions (asserted; the loader guarantees them):
 * B >= 0, K > 0 and a multiple of every part's block size, ldx >= K,
 * ldy >= N, 1 <= n_parts <= 16, dtypes F32/F16/BF16/Q8_0/Q4_0/Q4_1/Q5_0/
 * Q5_1/Q2_K..Q6_K/NF4/FP4,
 * scratch from cpu_matmul_scratch_bytes with this pool's thread count and
 * bounds covering (B, K), 64-byte aligned. pool may be NULL (one thread).
 * Allocates nothing; y must not overlap x or the weights. Writes only
 * y[b][0..N) for b < B. Results do not depend on the number of threads. */
void cpu_matmul(cpu_pool *pool, void *scratch, cpu_matmul_mode mode, float *y, int64_t ldy,
                const float *x, int64_t ldx, int64_t B, int64_t K, const cpu_mat *parts,
                int n_parts);

/* ======================================================================
 * Internal: the kernel table each SIMD level fills (matmul_ref.c,
 * matmul_avx2.c, matmul_avx512.c) and matmul.c drives. Nothing outside
 * src/backend/cpu/matmul*.c uses what follows.
 * ====================================================================== */

/* Decode rows are processed in groups: at most CPU_MM_GEMV_NX activation rows
 * share each pass over a weight row. */
#define CPU_MM_GEMV_NX 4

/* FAST activations live in scratch as "xq rows", one per activation row:
 *   codes  int8  [kp]      in the layout the weight kernel reads (below)
 *   d      float [kp/32]   scale of each 32-block
 *   s32    int32 [kp/32]   sum of the codes of each 32-block
 *   d16    float [kp/16]   scale of each 16-element half block (= its block's d)
 *   s16    int32 [kp/16]   sum of the codes of each half block
 * where kp = K rounded up to CPU_XQ_PAD; padding blocks have codes 0, d 0.
 * d/s32 and d16/s16 are in natural order except where a layout says
 * otherwise: the decode kernels reduce 16 blocks (or 16 half blocks) into one
 * vector whose lanes come out permuted, and find these there ready to use. */
#define CPU_XQ_PAD 512
typedef enum {
    /* Codes in K order, d/s32 in natural order; d16/s16 permuted within
     * each 256 codes by cpu_xq_lane (lane 4L+v holds half block 4v+L).
     * Q6_K, Q3_K, Q2_K, Q8_0. */
    CPU_XQ_NATURAL = 0,
    /* Four 32-blocks (a "quad", 128 codes) as [b0[0:16] b1[0:16] b2[0:16]
     * b3[0:16] b0[16:32] b1[16:32] b2[16:32] b3[16:32]]: where four legacy
     * blocks' low and high nibbles land in two 512-bit registers. d/s32
     * permuted within each 16 blocks (lane 4L+v holds block 4v+L). Q4_0,
     * Q4_1, Q5_0, Q5_1. */
    CPU_XQ_QUAD,
    /* Each 128 codes as [0:32 64:96 32:64 96:128]: the order of the low then
     * high nibbles of a 64-byte load of Q4_K/Q5_K codes. d16/s16 permuted
     * within each 256 codes by cpu_xq_lane. */
    CPU_XQ_K4,
    /* Transposed for the prefill kernels, codes stored biased (q + 128, as
     * uint8): groups of 16 blocks of S codes; in each group, 64-byte vector t
     * (t < S/4) holds in 32-bit lane j the codes 4t..4t+3 of block j. T32:
     * S = 32 (512 codes per group), T16: S = 16 (256 codes per group). All
     * arrays in natural order. */
    CPU_XQ_T32,
    CPU_XQ_T16,
    /* Codes in K order, every array in natural order (the AVX2 kernels). */
    CPU_XQ_PLAIN,
    CPU_XQ_LAYOUT_COUNT
} cpu_xq_layout;

static inline int64_t cpu_xq_kp(int64_t K) {
    return (K + CPU_XQ_PAD - 1) / CPU_XQ_PAD * CPU_XQ_PAD;
}
static inline size_t cpu_xq_row_bytes(int64_t K) {
    int64_t kp = cpu_xq_kp(K);
    return (size_t)(kp + kp / 32 * 8 + kp / 16 * 8);
}
static inline const int8_t *cpu_xq_codes(const void *row) {
    return (const int8_t *)row;
}
static inline const float *cpu_xq_d(const void *row, int64_t K) {
    return (const float *)((const char *)row + cpu_xq_kp(K));
}
static inline const int32_t *cpu_xq_s32(const void *row, int64_t K) {
    int64_t kp = cpu_xq_kp(K);
    return (const int32_t *)((const char *)row + kp + kp / 32 * 4);
}
static inline const float *cpu_xq_d16(const void *row, int64_t K) {
    int64_t kp = cpu_xq_kp(K);
    return (const float *)((const char *)row + kp + kp / 32 * 8);
}
static inline const int32_t *cpu_xq_s16(const void *row, int64_t K) {
    int64_t kp = cpu_xq_kp(K);
    return (const int32_t *)((const char *)row + kp + kp / 32 * 8 + kp / 16 * 4);
}

/* What a rows kernel sees: the activations in every form the call prepared. */
typedef struct {
    int64_t B, K;
    const float *x; /* (B, K) f32, row stride ldx; in FAST mode on a generic
                       path this is x^ (the dequantized 8-bit activations) */
    int64_t ldx;
    const void *xq[CPU_XQ_LAYOUT_COUNT]; /* FAST: xq rows per layout (NULL: not made) */
    /* FAST with F16 or BF16 weights: x^ in that type, row stride K (NULL: not made) */
    const uint16_t *x16;
    size_t xq_row_bytes;
    /* prefill: x (as above) packed by gemm_pack_x, panel p of gemm_mr rows at
     * xpack + p * gemm_mr * cpu_mm_kpad(K) */
    const float *xpack;
    /* FAST BF16 prefill: x16 packed by gemm_pack_x16, panel p at
     * xpack16 + p * gemm_mr * cpu_mm_kpad32(K) / 2 */
    const uint32_t *xpack16;
    cpu_matmul_mode mode;
} cpu_mm_args;

/* K rounded up to 16: the packed activation panels' length. */
static inline int64_t cpu_mm_kpad(int64_t K) {
    return (K + 15) / 16 * 16;
}

/* K rounded up to 32: the length of the bf16 pair panels (16 pairs a step). */
static inline int64_t cpu_mm_kpad32(int64_t K) {
    return (K + 31) / 32 * 32;
}

/* Computes y[b][r - r0] = dot(x_b, W_r) for rows r0 <= r < r1 of one part and
 * every b < B (y has row stride ldy; no bias). tscratch: this thread's
 * scratch (cpu_mm_isa.tscratch_bytes). */
typedef void (*cpu_rows_fn)(const cpu_mm_args *a, const cpu_mat *m, int64_t r0, int64_t r1,
                            float *y, int64_t ldy, void *tscratch);

/* Converts elements [k0, k0 + n) of one weight row (whole blocks) to f32,
 * bit-identical to quant_dequantize_row. */
typedef void (*cpu_to_f32_fn)(const void *row, int64_t k0, int64_t n, float *dst);

/* Quantizes activation row x (K elements) by the FAST rule of the file
 * comment into xq rows, one per layout whose out[l] is not NULL, and, when
 * xh is not NULL, writes x^ = d*q. Only codes [k0, k1) of the padded row
 * (and of x^ below K) are produced: k0 and k1 are multiples of CPU_XQ_PAD,
 * k1 <= cpu_xq_kp(K), so threads can share one row. */
typedef void (*cpu_quantize_fn)(const float *x, int64_t K, int64_t k0, int64_t k1,
                                void *const out[CPU_XQ_LAYOUT_COUNT], float *xh);

/* FAST for F16 (BF16) weights: x16[i] = x[i] rounded to f16 (bf16), to
 * nearest even, and xh[i] = that value as f32, i < n. */
typedef void (*cpu_round16_fn)(const float *x, int64_t n, uint16_t *x16, float *xh);

typedef struct {
    const char *name;
    /* rows kernels; NULL entries fall back to matmul.c's generic paths */
    cpu_rows_fn gemv_exact[HR_DTYPE_COUNT];
    cpu_rows_fn gemv_fast[HR_DTYPE_COUNT];  /* [F16], [BF16]: B == 1 only, from a->x16 */
    cpu_rows_fn gemm_exact;                 /* any dtype, via to_f32; NULL: gemv */
    cpu_rows_fn gemm_fast[HR_DTYPE_COUNT];  /* NULL: gemm_exact on x^; [BF16]: a->xpack16 */
    cpu_xq_layout gemv_fast_layout[HR_DTYPE_COUNT]; /* xq layout gemv_fast[t] reads */
    cpu_xq_layout gemm_fast_layout[HR_DTYPE_COUNT]; /* xq layout gemm_fast[t] reads */
    cpu_to_f32_fn to_f32[HR_DTYPE_COUNT];   /* NULL: quant_dequantize_row */
    cpu_quantize_fn quantize;
    cpu_round16_fn round_f16, round_bf16;
    /* Smallest B for which a part goes to gemm_exact (f32 kernels), to
     * gemm_fast (integer kernels), to gemm_fast[BF16] (bf16 pair dot
     * products), or, for a FAST quantized part without gemm_fast, to
     * gemm_exact on x^ (min_B_xh), instead of the decode kernels, which
     * handle any B; and the most / the granularity of weight rows per gemm
     * call. */
    int64_t gemm_min_B_exact, gemm_min_B_fast, gemm_min_B_bf16, gemm_min_B_xh;
    int64_t gemm_max_rows, gemm_row_align;
    /* gemm_exact's activation panels: rows per panel (<= 16) and the packer,
     * which writes rows [0, n_rows) of x (row stride ldx, K columns) as
     * dst[k][gemm_mr] for k < cpu_mm_kpad(K), zero-padded. */
    int gemm_mr;
    void (*gemm_pack_x)(const float *x, int64_t ldx, int n_rows, int64_t K, float *dst);
    /* gemm_fast[BF16]'s: rows [0, n_rows) of x16 (row stride K) as pairs of
     * consecutive elements, dst[k / 2][gemm_mr] for k < cpu_mm_kpad32(K),
     * zero-padded (NULL where gemm_fast[BF16] is) */
    void (*gemm_pack_x16)(const uint16_t *x16, int64_t K, int n_rows, uint32_t *dst);
    /* Per-thread scratch its kernels need for K <= max_K. */
    size_t (*tscratch_bytes)(int64_t max_K);
} cpu_mm_isa;

extern const cpu_mm_isa cpu_mm_isa_ref;
extern const cpu_mm_isa cpu_mm_isa_avx2;
extern const cpu_mm_isa cpu_mm_isa_avx512;

/* matmul_gemv_avx512.c, for cpu_mm_isa_avx512: the FAST decode kernel of
 * every quantized dtype (it dispatches on m->dtype) and the quantizer. */
void cpu_mm_avx512_gemv_fast(const cpu_mm_args *a, const cpu_mat *m, int64_t r0, int64_t r1,
                             float *y, int64_t ldy, void *tscratch);
/* matmul_nf4_avx512.c: the FAST decode kernel of NF4 and FP4 (CPU_XQ_NATURAL)
 * and the thread scratch it needs. */
void cpu_mm_avx512_gemv_nf4(const cpu_mm_args *a, const cpu_mat *m, int64_t r0, int64_t r1,
                            float *y, int64_t ldy, void *tscratch);
size_t cpu_mm_avx512_gemv_nf4_tscratch(int64_t max_K);
void cpu_mm_avx512_quantize(const float *x, int64_t K, int64_t k0, int64_t k1,
                            void *const out[CPU_XQ_LAYOUT_COUNT], float *xh);

/* Shared helpers that matmul.c implements for the ISA files. */
size_t cpu_mm_row_bytes(hr_dtype t, int64_t K);
/* isa->to_f32[t], or the reference dequantizer when that is NULL. */
void cpu_mm_to_f32(const cpu_mm_isa *isa, hr_dtype t, const void *row, int64_t k0, int64_t n,
                   float *dst);
/* The reference f16 and bf16 roundings (scalar); the SIMD ones must match them. */
void cpu_mm_round_f16_ref(const float *x, int64_t n, uint16_t *x16, float *xh);
void cpu_mm_round_bf16_ref(const float *x, int64_t n, uint16_t *x16, float *xh);
/* The reference FAST quantizer (scalar); SIMD quantizers must match it. */
void cpu_mm_quantize_ref(const float *x, int64_t K, int64_t k0, int64_t k1,
                         void *const out[CPU_XQ_LAYOUT_COUNT], float *xh);
/* Position of natural code k (0 <= k < kp) inside a row of the given layout
 * (T layouts: position in the biased code array). */
int64_t cpu_xq_pos(cpu_xq_layout layout, int64_t k);
/* Which of 16 blocks (QUAD: d/s32) or half blocks (NATURAL, K4: d16/s16)
 * lane l (0..15) holds; the identity for other layouts. */
int cpu_xq_lane(cpu_xq_layout layout, int l);

#endif
