/*
 * attention.cu — causal grouped-query attention over the paged KV cache:
 * flash-decoding for decode rows, flash attention for prefill tiles, and the
 * naive kernel (--attn naive, and the fallback for head sizes without a
 * flash instance).
 *
 * Shape legend: B = rows of the step, H / Hkv = query / kv heads, G = H / Hkv,
 * Dh = head_dim, BS = tokens per KV block, NB = blocks, S = n_splits.
 * Pools: per layer (NB, Hkv, BS, Dh) ck, so one (block, kv head) page holds
 * BS consecutive positions, Dh contiguous elements each. Row r (sequence s,
 * position p), head h (kv head h / G) attends to positions 0 .. p of s:
 * out = softmax_t(scale q.k_t) . v_t, softmax in f32 after max subtraction.
 * The flash kernels keep scores in log2 units (q pre-scaled by scale*log2 e,
 * exp2f), which is the same softmax.
 *
 * Decode: grid (S * n_dec, Hkv * head batches), 4 warps. A block takes up to
 * GB = 8 query heads of one kv head (each K/V element is read once per
 * group) over the positions of its split, and each warp walks 32-token
 * chunks: cp.async copies the chunk's K and V rows (16-byte pieces, whole
 * pages contiguous) into the warp's shared buffers, then lane i scores token
 * i for every head against q in shared memory (a broadcast read; K rows are
 * padded by 16 bytes so the 32 lanes' rows fall in different banks), an
 * online softmax per head updates (m, l), and lanes switch to owning output
 * dimension pairs for O += P V. No shuffles in the inner loops. The block
 * merges its warps and writes (o[Dh], m, l) per head and split to work; the
 * combine kernel merges the splits per (row, head). With one split (a step
 * of many rows, whose blocks fill the GPU without splitting) the block
 * writes the output itself and no combine runs. The grid does not depend
 * on the contexts (graph capture): each block reads row_pos, sizes the
 * splits from it (context / n_splits, at least split_len, so every split of
 * a long context is busy) and exits when its split is empty; empty splits
 * write nothing, and the combine skips them by the same rule. Both start
 * as programmatic dependents (common.cuh) like the GEMVs around them.
 * Rejected: merging the splits in the decode kernel's last block instead
 * (one launch less a layer, but one 4-warp block then merges what 8-warp
 * blocks per head did in parallel: slower at every shape measured,
 * docs/journal/attention.md).
 *
 * Prefill: one block per (query tile, query head), 4 warps, 2 blocks per
 * SM; one template, two kernels, picked per step by its tile rows
 * (ck_attention_tile_rows): narrow tiles of 64 rows (16 per warp) and wide
 * tiles of 128 (32 per warp, two m16 row blocks). Keys come in 64-key
 * chunks, gathered through the block table by cp.async into a ring of K/V
 * stages (3; 2 for the wide kernel at Dh 128, where 3 would leave one block
 * per SM): while chunk j is computed, the next ones are in flight and the
 * table lookups of chunk j + stages are loaded (stored after the compute),
 * so neither the copies nor the lookups sit on the critical path; two
 * barriers per chunk. S = Q K^T and O += P V run on mma.sync m16n8k16 (ck
 * inputs, f32 accumulation): K's fragments from ldmatrix, V's from
 * ldmatrix.trans; S, P and O stay in registers, the accumulator layout of S
 * being the A-operand layout of P. Narrow: Q's fragments are made once and
 * stay in registers (Dh 128: 203 registers, 104 KB of shared memory). Its
 * limit is shared-memory reads: each warp reads the whole K and V chunk (32
 * KB at Dh 128) for 16 rows, about twice the tensor time at 128 B/clk. Wide:
 * each K and V fragment feeds both row blocks of the warp, so a row costs
 * 5/8 of the reads (Q's included), 3/4 at Dh 128. O takes 128 registers
 * at Dh 128, so Q's fragments are read from a Q tile in shared memory per k
 * step by ldmatrix, and S is taken 32 keys at a time (Dh 128 only; with 64,
 * ptxas spilled 24-80 bytes whatever the unrolling, for no gain), which
 * reads Q twice per chunk and rescales O twice (Dh 128: 245 registers, 103
 * KB). The wide grid has half the blocks and a heaviest tile twice as long,
 * so a step takes wide tiles only when its longest segment fills about two
 * rounds of the H200's SMs (CK_ATT_WIDE_MIN_BLOCKS). The causal mask runs only on
 * passes that reach past a warp's first position; passes above its last row
 * are skipped. One block per query head rather than per kv head: the G
 * heads' tiles would not fit one block, and K/V are read from L2 by the G
 * blocks anyway. Rejected: wmma (its accumulator layout is opaque, so the
 * per-row rescale of O would go through shared memory every chunk); 3
 * narrow blocks per SM (its 168-register cap spills with Q in registers,
 * and with Q in shared memory double-buffered K/V no longer fit 3 blocks);
 * wide tiles only (a 512-row prompt of 32 heads would make 128 blocks for
 * 132 SMs).
 *
 * A q8_0 cache (kv_q8; ck_kv_pools): each pool holds int8 codes in the
 * layout above and, after a layer's codes, one f16 scale per 32 (the
 * cpu's q8_0 blocks taken apart), read once at about half the bytes, with
 * no pass and no 16-bit copy in global memory. Decode copies the codes by
 * cp.async as they are (rows of Dh + 16 bytes) and each lane its own
 * row's scales (K into registers: lane = token when scoring; V into
 * shared): a score is, per 32 codes, the integer-valued dot with q times
 * that block's scale; P V reads two codes and their scale. Prefill loads a
 * pass's codes and scales into registers and stores code times scale,
 * rounded once to ck, into the shared tiles that cp.async fills from a ck
 * cache, so its mma path runs unchanged (synchronous copies: the ring
 * overlaps them with other warps' compute only). The wgmma prefill and
 * the persistent step read ck caches only, so a q8_0 cache takes the
 * mma.sync prefill and op-by-op decode. The naive kernel dequantizes each
 * value in f32. Figures: docs/journal/attention.md.
 *
 * Naive: one block per (row, head): scores of all positions into work
 * (row stride max_blocks * BS floats), block max, exp and sum, weighted V.
 *
 * Work: decode partials at ((dec index * H + h) * S + split) * (Dh + 2):
 * o[Dh] (unnormalised), m (log2 units), l; splits past splits_used are not
 * written. Naive scores at (row * H + h) * max_blocks * BS, so work must
 * hold ck_attention_work_floats(max decode rows, H, Dh, S, 0) and, when the
 * naive kernel can run (--attn naive, or Dh outside the flash set),
 * ck_attention_work_floats(max rows, H, Dh, 0, max_blocks * BS).
 * Preconditions (the backend's to assert): H % Hkv == 0, Dh <= 256, pools
 * 16-byte aligned, tile_rows CK_ATT_TILE or CK_ATT_TILE_WIDE, tile_n <=
 * tile_rows, pos < max_blocks * BS.
 *
 * Wide tiles of Dh 128 on a compute capability 9.0 device go to the wgmma
 * kernel of attention_wgmma.cu instead (2048 rows of Llama-2-7B in 106 us
 * against 161 here), and the backend then takes wide tiles at every length
 * (ck_attention_tile_rows); HEADROOM_CUDA_WGMMA=0 keeps the kernels here.
 *
 * The prefill kernel's four versions (86 -> 213 causal TFLOP/s at 2048 rows
 * of Llama-2-7B on the H200), the two wgmma attempts that lost to it, and
 * the figures behind every choice above: docs/journal/attention.md.
 */
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#define ATT_LOG2E 1.4426950408889634f

/* ------------------------------------------------------------ small helpers */

/* 16 bytes global -> shared without passing through registers (sm_80+), so a
 * warp keeps a whole chunk of K and V in flight. */
__device__ __forceinline__ void cp_async16(void *dst_smem, const void *src) {
    unsigned d = (unsigned)__cvta_generic_to_shared(dst_smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
}

/* Four 8x8 b16 matrices: lanes 8i .. 8i+7 give the row addresses of matrix
 * i, and lane l receives M_i[l/4][2(l%4)], M_i[l/4][2(l%4)+1] in register
 * i: the B operand of m16n8k16 from a row-major [n][k] array. */
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *p) {
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
}

/* Four 8x8 b16 matrices, transposed: lanes 8i .. 8i+7 give the row addresses
 * of matrix i, and lane l receives M_i[2(l%4)][l/4], M_i[2(l%4)+1][l/4] in
 * register i: the B operand of m16n8k16 from a row-major [k][n] array. */
__device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], const void *p) {
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
}

__device__ __forceinline__ uint32_t lds32(const void *p) {
    return *reinterpret_cast<const uint32_t *>(p);
}

__device__ __forceinline__ int warp_max_int(int v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* A q8_0 cache (kv_q8): pools of int8 codes with one f16 scale per 32
 * (ck_kv_pools). Eight values at element offset o (a multiple of 8, inside
 * one block of 32), as ck: code times scale in f32, rounded once, so the
 * kernels below go on from shared memory exactly as from a ck cache. */
__device__ __forceinline__ void q8_unpack8(uint2 codes, float f[8]) {
#pragma unroll
    for (int e = 0; e < 4; e++) {
        f[e] = (float)(int8_t)(codes.x >> (8 * e));
        f[4 + e] = (float)(int8_t)(codes.y >> (8 * e));
    }
}

template <typename T>
__device__ __forceinline__ uint4 q8_to_ck(uint2 codes, float d) {
    float f[8];
    q8_unpack8(codes, f);
#pragma unroll
    for (int e = 0; e < 8; e++)
        f[e] *= d;
    return make_uint4(ck_pair<T>::pack(f[0], f[1]), ck_pair<T>::pack(f[2], f[3]),
                      ck_pair<T>::pack(f[4], f[5]), ck_pair<T>::pack(f[6], f[7]));
}

__device__ __forceinline__ uint2 q8_codes(const void *pool, int64_t o) {
    return __ldg(reinterpret_cast<const uint2 *>(static_cast<const int8_t *>(pool) + o));
}

__device__ __forceinline__ float q8_scale(const void *scales, int64_t o) {
    return __half2float(__ldg(static_cast<const __half *>(scales) + o / 32));
}

/* one cached value, f32 (the naive kernel) */
template <typename T, bool Q8>
__device__ __forceinline__ float kv_value(const void *pool, const void *scales, int64_t o) {
    if constexpr (Q8)
        return (float)static_cast<const int8_t *>(pool)[o] * q8_scale(scales, o);
    else
        return ck_to_f32(static_cast<const T *>(pool)[o]);
}

/* ------------------------------------------------------------ decode */

#define DEC_WARPS 4
#define DEC_CHUNK 32 /* tokens per warp step: one per lane when scoring */
#define DEC_GB_MAX 8 /* query heads per block; larger groups take several blocks */

/* The row's context is spread over all n_splits splits, each at least
 * split_len positions long (rounded up to whole warp chunks): long contexts
 * keep every block of the fixed grid busy, short ones use few splits, and no
 * position is left out whatever n_splits * split_len is. Split sp holds
 * positions [sp len, min((sp + 1) len, pos + 1)); the first splits_used are
 * non-empty. Decode and combine both use these definitions. */
__device__ __forceinline__ int64_t split_len_of(const ck_attn_args &a, int pos) {
    const int64_t n_ctx = (int64_t)pos + 1;
    int64_t len = max((int64_t)max(a.split_len, 1), (n_ctx + a.n_splits - 1) / a.n_splits);
    return (len + DEC_CHUNK - 1) / DEC_CHUNK * DEC_CHUNK;
}

__device__ __forceinline__ int splits_used(const ck_attn_args &a, int pos) {
    const int64_t len = split_len_of(a, pos);
    return (int)min((int64_t)a.n_splits, ((int64_t)pos + len) / len); /* ceil((pos+1) / len) */
}

/* the last position is pos */
__device__ __forceinline__ int2 split_range(const ck_attn_args &a, int sp, int pos) {
    const int64_t n_ctx = (int64_t)pos + 1, len = split_len_of(a, pos);
    const int64_t s0 = min((int64_t)sp * len, n_ctx);
    return make_int2((int)s0, (int)min(s0 + len, n_ctx));
}

template <typename T, int DH, int GB>
static constexpr size_t decode_smem_bytes() {
    return (size_t)DEC_WARPS * 2 * DEC_CHUNK * (DH + 8) * sizeof(T) /* K, V chunks */
           + (size_t)GB * DH * sizeof(float)                        /* q */
           + (size_t)DEC_WARPS * GB * DEC_CHUNK * sizeof(float)     /* p */
           + (size_t)DEC_WARPS * DEC_CHUNK * sizeof(int64_t);       /* row offsets */
}

/* 3 blocks per SM: what shared memory allows at Dh 128 with GB <= 4 (2 at
 * GB 8); the register cap that follows (168) holds every instance (165 at
 * most, no spills), while without the hint ptxas spilled a few bytes in some */
template <typename T, int DH, int GB, bool Q8>
__global__ void __launch_bounds__(DEC_WARPS * 32, 3) attn_decode_kernel(const ck_attn_args a) {
    constexpr int NV = DH / 8;          /* 16-byte pieces per K/V row */
    constexpr int LDS = DH + 8;         /* padded shared row: lane rows in distinct banks */
    constexpr int NQ = DH / 16;         /* q8_0: 16-byte pieces of codes per row */
    constexpr int LQ = DH + 16;         /* q8_0: a row of codes in shared, 16-byte aligned */
    static_assert(!Q8 || (DH % 32 == 0 && DEC_CHUNK * (LQ + DH / 8) <= DEC_CHUNK * LDS * 2),
                  "q8_0 rows and V scales fit a ck chunk buffer");
    constexpr int NP = (DH + 63) / 64;  /* dimension pairs per lane in P V */
    constexpr int PART = DH + 2;        /* o[Dh], m, l */
    extern __shared__ __align__(16) unsigned char smem[];
    T *kv_s = reinterpret_cast<T *>(smem);                    /* [W][K|V][32][LDS] */
    float *q_s = reinterpret_cast<float *>(kv_s + DEC_WARPS * 2 * DEC_CHUNK * LDS); /* [GB][DH] */
    float *p_s = q_s + GB * DH;                               /* [W][GB][32] */
    int64_t *off_s = reinterpret_cast<int64_t *>(p_s + DEC_WARPS * GB * DEC_CHUNK); /* [W][32] */

    pdl_wait(); /* q and this step's k, v come from the kernel before */
    pdl_release();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int G = a.H / a.Hkv, n_hb = (G + GB - 1) / GB;
    const int sp = blockIdx.x % a.n_splits, di = blockIdx.x / a.n_splits;
    const int g = blockIdx.y / n_hb, hb = blockIdx.y % n_hb;
    const int h0 = g * G + hb * GB, nh = min(GB, G - hb * GB);
    const int r = a.dec_rows[di], seq = a.row_seq[r], pos = a.row_pos[r];
    const int2 range = split_range(a, sp, pos);
    if (range.x >= range.y)
        return; /* empty split: writes nothing, the combine reads splits_used only */
    const int s0 = range.x, s1 = range.y;

    /* q of the batch's heads, f32, in log2 units; padding heads are 0 */
    const float qscale = a.scale * ATT_LOG2E;
    for (int i = tid; i < GB * DH; i += blockDim.x) {
        int j = i / DH, d = i % DH;
        q_s[i] = j < nh ? ck_to_f32(static_cast<const T *>(
                              a.qkv)[(int64_t)r * a.ld_qkv + (int64_t)(h0 + j) * DH + d]) *
                              qscale
                        : 0.0f;
    }
    __syncthreads();

    T *k_w = kv_s + warp * 2 * DEC_CHUNK * LDS, *v_w = k_w + DEC_CHUNK * LDS;
    float *p_w = p_s + warp * GB * DEC_CHUNK;
    int64_t *off_w = off_s + warp * DEC_CHUNK;
    const int32_t *bt = a.block_tables + (int64_t)seq * a.max_blocks;
    const T *kp = static_cast<const T *>(a.k_pool), *vp = static_cast<const T *>(a.v_pool);

    float m[GB], l[GB];
    float2 acc[GB][NP];
#pragma unroll
    for (int j = 0; j < GB; j++) {
        m[j] = -INFINITY;
        l[j] = 0.0f;
#pragma unroll
        for (int ip = 0; ip < NP; ip++)
            acc[j][ip] = make_float2(0.0f, 0.0f);
    }

    for (int c0 = s0 + warp * DEC_CHUNK; c0 < s1; c0 += DEC_WARPS * DEC_CHUNK) {
        const int n_valid = min(DEC_CHUNK, s1 - c0); /* >= 1 */
        off_w[lane] = lane < n_valid ? kv_row(a, bt, g, c0 + lane) : -1;
        __syncwarp();
        /* chunk rows -> shared; rows past the split are zeros (never NaN
         * garbage, which 0 * NaN would spread into O). A q8_0 cache: the
         * codes by cp.async as they are, each lane's own row's scales into
         * registers (K: lane = token when scoring) and shared (V); rows
         * past the split get scale 0, so their codes (finite integers,
         * whatever the buffer held) weigh nothing */
        float ksc[Q8 ? DH / 32 : 1];
        if constexpr (Q8) {
            int8_t *kq = reinterpret_cast<int8_t *>(k_w), *vq = reinterpret_cast<int8_t *>(v_w);
            float *vsc = reinterpret_cast<float *>(vq + DEC_CHUNK * LQ);
            for (int k = lane; k < DEC_CHUNK * NQ; k += 32) {
                const int i = k / NQ, c = k % NQ;
                const int64_t o = off_w[i];
                if (o >= 0) {
                    cp_async16(kq + i * LQ + 16 * c, static_cast<const int8_t *>(a.k_pool) + o + 16 * c);
                    cp_async16(vq + i * LQ + 16 * c, static_cast<const int8_t *>(a.v_pool) + o + 16 * c);
                }
            }
            const int64_t o = off_w[lane];
#pragma unroll
            for (int b = 0; b < DH / 32; b++) {
                ksc[b] = o >= 0 ? q8_scale(a.k_scale, o + 32 * b) : 0.0f;
                vsc[lane * (DH / 32) + b] = o >= 0 ? q8_scale(a.v_scale, o + 32 * b) : 0.0f;
            }
        } else {
        for (int k = lane; k < DEC_CHUNK * NV; k += 32) {
            int i = k / NV, c = k % NV;
            int64_t o = off_w[i];
            T *dk = k_w + i * LDS + c * 8, *dv = v_w + i * LDS + c * 8;
            if (o >= 0) {
                cp_async16(dk, kp + o + c * 8);
                cp_async16(dv, vp + o + c * 8);
            } else {
                *reinterpret_cast<uint4 *>(dk) = make_uint4(0, 0, 0, 0);
                *reinterpret_cast<uint4 *>(dv) = make_uint4(0, 0, 0, 0);
            }
        }
        }
        cp_async_commit();
        cp_async_wait<0>();
        __syncwarp();

        /* scores: lane = token */
        float sc[GB];
#pragma unroll
        for (int j = 0; j < GB; j++)
            sc[j] = 0.0f;
        if constexpr (Q8) { /* per 32 codes: the integer-valued sum, then its scale */
            const int8_t *krow = reinterpret_cast<const int8_t *>(k_w) + lane * LQ;
#pragma unroll
            for (int b = 0; b < DH / 32; b++) {
                float part[GB];
#pragma unroll
                for (int j = 0; j < GB; j++)
                    part[j] = 0.0f;
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    float kf[8];
                    q8_unpack8(*reinterpret_cast<const uint2 *>(krow + 32 * b + 8 * c), kf);
#pragma unroll
                    for (int j = 0; j < GB; j++) {
                        const float *qj = q_s + j * DH + 32 * b + 8 * c;
                        float4 qa = *reinterpret_cast<const float4 *>(qj);
                        float4 qb = *reinterpret_cast<const float4 *>(qj + 4);
                        part[j] += qa.x * kf[0] + qa.y * kf[1] + qa.z * kf[2] + qa.w * kf[3] +
                                   qb.x * kf[4] + qb.y * kf[5] + qb.z * kf[6] + qb.w * kf[7];
                    }
                }
#pragma unroll
                for (int j = 0; j < GB; j++)
                    sc[j] += part[j] * ksc[b];
            }
        } else {
        const T *krow = k_w + lane * LDS;
#pragma unroll
        for (int c = 0; c < NV; c++) {
            uint4 raw = *reinterpret_cast<const uint4 *>(krow + c * 8);
            float2 k0 = ck_pair<T>::to_f32(raw.x), k1 = ck_pair<T>::to_f32(raw.y);
            float2 k2 = ck_pair<T>::to_f32(raw.z), k3 = ck_pair<T>::to_f32(raw.w);
#pragma unroll
            for (int j = 0; j < GB; j++) {
                float4 qa = *reinterpret_cast<const float4 *>(q_s + j * DH + c * 8);
                float4 qb = *reinterpret_cast<const float4 *>(q_s + j * DH + c * 8 + 4);
                sc[j] += qa.x * k0.x + qa.y * k0.y + qa.z * k1.x + qa.w * k1.y + qb.x * k2.x +
                         qb.y * k2.y + qb.z * k3.x + qb.w * k3.y;
            }
        }
        }

        /* online softmax per head; lane 0 always holds a valid token, so the
         * chunk max is finite and alpha = exp2(-inf) = 0 on the first chunk */
        const bool valid = lane < n_valid;
#pragma unroll
        for (int j = 0; j < GB; j++) {
            float s = valid ? sc[j] : -INFINITY;
            float mn = fmaxf(m[j], warp_max(s));
            float alpha = exp2f(m[j] - mn);
            float p = exp2f(s - mn);
            m[j] = mn;
            l[j] = l[j] * alpha + p; /* per-lane partial sum, reduced at the end */
#pragma unroll
            for (int ip = 0; ip < NP; ip++) {
                acc[j][ip].x *= alpha;
                acc[j][ip].y *= alpha;
            }
            p_w[j * DEC_CHUNK + lane] = p;
        }
        __syncwarp();

        /* O += P V: lane owns dimensions 2 lane + 64 ip (+1); tokens past
         * n_valid (up to the next multiple of 4) have p = 0 and zero rows */
        for (int t = 0; t < n_valid; t += 4) {
            float2 v[4][NP];
#pragma unroll
            for (int u = 0; u < 4; u++)
#pragma unroll
                for (int ip = 0; ip < NP; ip++) {
                    int d = 2 * lane + 64 * ip;
                    if (d >= DH) {
                        v[u][ip] = make_float2(0.0f, 0.0f);
                    } else if constexpr (Q8) {
                        const int8_t *vq = reinterpret_cast<const int8_t *>(v_w);
                        const float *vsc = reinterpret_cast<const float *>(vq + DEC_CHUNK * LQ);
                        const uint16_t w =
                            *reinterpret_cast<const uint16_t *>(vq + (t + u) * LQ + d);
                        const float sv = vsc[(t + u) * (DH / 32) + d / 32];
                        v[u][ip] = make_float2((float)(int8_t)(w & 0xff) * sv,
                                               (float)(int8_t)(w >> 8) * sv);
                    } else {
                        v[u][ip] = ck_pair<T>::to_f32(lds32(v_w + (t + u) * LDS + d));
                    }
                }
#pragma unroll
            for (int j = 0; j < GB; j++) {
                float4 p4 = *reinterpret_cast<const float4 *>(p_w + j * DEC_CHUNK + t);
                float pu[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
                for (int u = 0; u < 4; u++)
#pragma unroll
                    for (int ip = 0; ip < NP; ip++) {
                        acc[j][ip].x += pu[u] * v[u][ip].x;
                        acc[j][ip].y += pu[u] * v[u][ip].y;
                    }
            }
        }
        __syncwarp(); /* buffers are rewritten by the next chunk */
    }

    /* each warp's (o, m, l) into its own K buffer (only this warp used it),
     * then the block merges its warps into one partial per head */
    auto warp_part = [&](int w) { /* [GB][PART] */
        return reinterpret_cast<float *>(kv_s + w * 2 * DEC_CHUNK * LDS);
    };
    float *wpart = warp_part(warp);
#pragma unroll
    for (int j = 0; j < GB; j++) {
        float lj = warp_sum(l[j]);
#pragma unroll
        for (int ip = 0; ip < NP; ip++) {
            int d = 2 * lane + 64 * ip;
            if (d < DH) {
                wpart[j * PART + d] = acc[j][ip].x;
                wpart[j * PART + d + 1] = acc[j][ip].y;
            }
        }
        if (lane == 0) {
            wpart[j * PART + DH] = m[j];
            wpart[j * PART + DH + 1] = lj;
        }
    }
    __syncthreads();
    if (a.n_splits == 1) { /* the block saw the whole context: write the output */
        T *out = static_cast<T *>(a.out) + (int64_t)a.dec_rows[blockIdx.x] * a.ld_out +
                 (int64_t)h0 * DH;
        for (int i = tid; i < nh * DH; i += blockDim.x) {
            const int j = i / DH, d = i % DH;
            float M = -INFINITY;
#pragma unroll
            for (int w = 0; w < DEC_WARPS; w++)
                M = fmaxf(M, warp_part(w)[j * PART + DH]);
            float o = 0.0f, L = 0.0f;
#pragma unroll
            for (int w = 0; w < DEC_WARPS; w++) {
                const float *pw = warp_part(w);
                const float mw = pw[j * PART + DH];
                if (mw != -INFINITY) { /* a warp without chunks */
                    const float f = exp2f(mw - M);
                    o += f * pw[j * PART + d];
                    L += f * pw[j * PART + DH + 1];
                }
            }
            ck_from_f32(&out[(int64_t)j * DH + d], L > 0.0f ? o / L : 0.0f);
        }
        return;
    }
    /* (row, split) recomputed from blockIdx rather than kept live across the
     * chunk loop, where ptxas spilled them */
    float *wout = a.work + ((int64_t)(blockIdx.x / a.n_splits) * a.H + h0) * a.n_splits * PART +
                  (int64_t)(blockIdx.x % a.n_splits) * PART; /* head j at + j S PART */
    for (int i = tid; i < nh * PART; i += blockDim.x) {
        int j = i / PART, e = i % PART;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++)
            M = fmaxf(M, warp_part(w)[j * PART + DH]);
        float val;
        if (M == -INFINITY) { /* cannot happen (warp 0 had a chunk); kept neutral */
            val = e == DH ? -INFINITY : 0.0f;
        } else if (e == DH) {
            val = M;
        } else { /* o[e] or l: the same weighted sum */
            val = 0.0f;
#pragma unroll
            for (int w = 0; w < DEC_WARPS; w++) {
                const float *pw = warp_part(w);
                float mw = pw[j * PART + DH];
                if (mw != -INFINITY) /* a warp without chunks */
                    val += exp2f(mw - M) * pw[j * PART + e];
            }
        }
        wout[(int64_t)j * a.n_splits * PART + e] = val;
    }
}

/* out row dec_rows[di], head h = merge of the non-empty splits' partials:
 * M = max m_s, then o = sum exp2(m_s - M) o_s / sum exp2(m_s - M) l_s.
 * Warps take splits in turn (several loads in flight per lane rather than
 * one dependent load per split), lanes take dimensions d = lane + 32 i. */
#define COMB_WARPS 8

template <typename T>
__global__ void __launch_bounds__(COMB_WARPS * 32) attn_combine_kernel(const ck_attn_args a) {
    __shared__ float red_s[32];
    __shared__ float o_s[COMB_WARPS][128]; /* flash head sizes: Dh <= 128 */
    __shared__ float l_s[COMB_WARPS];
    pdl_wait();
    pdl_release();
    const int di = blockIdx.x, h = blockIdx.y, Dh = a.Dh, part = Dh + 2;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int r = a.dec_rows[di], pos = a.row_pos[r];
    const int n_used = splits_used(a, pos); /* >= 1 */
    const float *w = a.work + ((int64_t)di * a.H + h) * a.n_splits * part;

    float M = -INFINITY;
    for (int sp = tid; sp < n_used; sp += blockDim.x)
        M = fmaxf(M, w[(int64_t)sp * part + Dh]);
    M = block_max(M, red_s);

    float o[4] = {0.0f, 0.0f, 0.0f, 0.0f}, L = 0.0f;
#pragma unroll 4
    for (int sp = warp; sp < n_used; sp += COMB_WARPS) {
        const float *ws = w + (int64_t)sp * part;
        const float f = exp2f(ws[Dh] - M); /* the same in every lane */
        L += f * ws[Dh + 1];
#pragma unroll
        for (int i = 0; i < 4; i++)
            if (lane + 32 * i < Dh)
                o[i] += f * ws[lane + 32 * i];
    }
#pragma unroll
    for (int i = 0; i < 4; i++)
        if (lane + 32 * i < Dh)
            o_s[warp][lane + 32 * i] = o[i];
    if (lane == 0)
        l_s[warp] = L;
    __syncthreads();

    T *out = static_cast<T *>(a.out) + (int64_t)r * a.ld_out + (int64_t)h * Dh;
    for (int d = tid; d < Dh; d += blockDim.x) {
        float od = 0.0f, Lt = 0.0f;
#pragma unroll
        for (int k = 0; k < COMB_WARPS; k++) {
            od += o_s[k][d];
            Lt += l_s[k];
        }
        ck_from_f32(&out[d], Lt > 0.0f ? od / Lt : 0.0f);
    }
}

template <typename T, int DH, int GB, bool Q8>
static void decode_launch(cudaStream_t s, const ck_attn_args *a) {
    const int G = a->H / a->Hkv, n_hb = (G + GB - 1) / GB;
    constexpr size_t smem = decode_smem_bytes<T, DH, GB>();
    static_assert(smem <= CK_SMEM_BLOCK_MIN, "one variant for every device");
    /* above 48 KB a kernel must opt in; not a stream operation, so legal
     * during graph capture; a failure shows in the caller's cudaGetLastError */
    (void)cudaFuncSetAttribute(attn_decode_kernel<T, DH, GB, Q8>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    dim3 grid((unsigned)(a->n_splits * a->n_dec), (unsigned)(a->Hkv * n_hb));
    ck_launch(s, grid, DEC_WARPS * 32, smem, attn_decode_kernel<T, DH, GB, Q8>, *a);
    if (a->n_splits > 1) /* one split: the decode kernel wrote the output */
        ck_launch(s, dim3((unsigned)a->n_dec, (unsigned)a->H), COMB_WARPS * 32, 0,
                  attn_combine_kernel<T>, *a);
}

/* GB: the group size rounded up to 1, 2, 4 or 8 (padding heads have q = 0
 * and are not written); groups above 8 take several blocks */
template <typename T, int DH, bool Q8>
static void decode_gb(cudaStream_t s, const ck_attn_args *a) {
    const int G = a->H / a->Hkv;
    if (G == 1)
        decode_launch<T, DH, 1, Q8>(s, a);
    else if (G == 2)
        decode_launch<T, DH, 2, Q8>(s, a);
    else if (G <= 4)
        decode_launch<T, DH, 4, Q8>(s, a);
    else
        decode_launch<T, DH, DEC_GB_MAX, Q8>(s, a);
}

/* q8_0 caches: head sizes of whole blocks of 32 (the engine refuses others) */
template <typename T, int DH>
static void decode_dh(cudaStream_t s, const ck_attn_args *a) {
    if constexpr (DH % 32 == 0)
        if (a->kv_q8) {
            decode_gb<T, DH, true>(s, a);
            return;
        }
    decode_gb<T, DH, false>(s, a);
}

/* ------------------------------------------------------------ prefill */

#define PRE_WARPS 4
#define PRE_KC 64 /* keys per chunk */
/* blocks per SM: registers allow 2 whatever an instance needs (65536 per
 * SM / 256 threads = 256, above ptxas's 255), so shared memory decides:
 * each instance takes as many stages (up to 3) as let 2 blocks share an
 * SM. Hopper: 228 KB per SM, 1 KB of it reserved per block. */
#define PRE_MIN_BLOCKS 2
#define PRE_SMEM_MAX (228 * 1024 / PRE_MIN_BLOCKS - 1024)

static_assert(CK_ATT_TILE == PRE_WARPS * 16 && CK_ATT_TILE_WIDE == PRE_WARPS * 32,
              "a tile is one (narrow) or two (wide) m16 row blocks per warp");

/* Shared memory of a prefill block with MB row blocks per warp: the K/V
 * stages, the Q tile (MB > 1 only), the stages' row offsets, the warps'
 * last positions. */
__host__ __device__ constexpr size_t prefill_smem_bytes(int dh, int mb, size_t elem, int stages) {
    return (size_t)stages * 2 * PRE_KC * (dh + 8) * elem +
           (mb > 1 ? (size_t)PRE_WARPS * 16 * mb * (dh + 8) * elem : 0) +
           (size_t)stages * PRE_KC * sizeof(int64_t) + (size_t)PRE_WARPS * sizeof(int);
}

/* K/V chunk buffers: 3 (chunks j + 1, j + 2 land while j is used) where two
 * blocks still fit an SM; else 2 (the wide tile at Dh 128: 137 KB with 3) */
__host__ __device__ constexpr int prefill_stages(int dh, int mb, size_t elem) {
    return prefill_smem_bytes(dh, mb, elem, 3) <= PRE_SMEM_MAX ? 3 : 2;
}


/* One chunk's K and V rows -> a stage (cp.async; the caller commits). Four
 * threads per row, 16 bytes each per step, in two passes of 32 rows: one
 * load instruction reads 64 contiguous bytes of 8 rows (8 cache lines a
 * warp), and lands conflict-free in the padded rows. The earlier mapping,
 * two threads per row on alternate pieces (32 bytes of 16 rows: 16 lines a
 * warp), held the whole kernel at the copy rate (2048 rows of Llama-2-7B,
 * wide tiles: 184.8 us before, 161.7 after; docs/journal/attention.md).
 * Rows with offset -1 (past the block's last key) become zeros: their p is
 * 0, and 0 * NaN garbage would spread into O. */
template <typename T, int DH, bool Q8>
__device__ __forceinline__ void prefill_copy(T *k_dst, T *v_dst, const ck_attn_args &a,
                                             const int64_t *off) {
    constexpr int NV = DH / 8; /* 16-byte pieces per row */
    static_assert(PRE_WARPS * 32 == 2 * PRE_KC, "four threads per row, two passes");
    const int q = (int)threadIdx.x & 3;
    if constexpr (Q8) {
        /* a q8_0 cache: the same pieces through registers, a pass's loads
         * all issued before its first conversion (both passes' at once
         * spilled at Dh 128) */
        constexpr int NI = (NV + 3) / 4;
#pragma unroll
        for (int pass = 0; pass < 2; pass++) {
            const int row = pass * (PRE_KC / 2) + ((int)threadIdx.x >> 2);
            const int64_t o = off[row];
            uint2 kc[NI], vc[NI];
            float dk[NI], dv[NI];
#pragma unroll
            for (int i = 0; i < NI; i++) {
                const int c = 4 * i + q;
                kc[i] = vc[i] = make_uint2(0, 0);
                dk[i] = dv[i] = 0.0f;
                if (c < NV && o >= 0) {
                    kc[i] = q8_codes(a.k_pool, o + 8 * c);
                    vc[i] = q8_codes(a.v_pool, o + 8 * c);
                    dk[i] = q8_scale(a.k_scale, o + 8 * c);
                    dv[i] = q8_scale(a.v_scale, o + 8 * c);
                }
            }
#pragma unroll
            for (int i = 0; i < NI; i++) {
                const int c = 4 * i + q;
                if (c < NV) {
                    *reinterpret_cast<uint4 *>(k_dst + row * (DH + 8) + 8 * c) =
                        q8_to_ck<T>(kc[i], dk[i]);
                    *reinterpret_cast<uint4 *>(v_dst + row * (DH + 8) + 8 * c) =
                        q8_to_ck<T>(vc[i], dv[i]);
                }
            }
        }
        return;
    }
    const T *kp = static_cast<const T *>(a.k_pool), *vp = static_cast<const T *>(a.v_pool);
#pragma unroll
    for (int pass = 0; pass < 2; pass++) {
        const int row = pass * (PRE_KC / 2) + ((int)threadIdx.x >> 2);
        const int64_t o = off[row];
        T *dk = k_dst + row * (DH + 8), *dv = v_dst + row * (DH + 8);
#pragma unroll
        for (int i = 0; i < (NV + 3) / 4; i++) {
            const int c = 4 * i + q;
            if (c < NV) {
                if (o >= 0) {
                    cp_async16(dk + 8 * c, kp + o + 8 * c);
                    cp_async16(dv + 8 * c, vp + o + 8 * c);
                } else {
                    *reinterpret_cast<uint4 *>(dk + 8 * c) = make_uint4(0, 0, 0, 0);
                    *reinterpret_cast<uint4 *>(dv + 8 * c) = make_uint4(0, 0, 0, 0);
                }
            }
        }
    }
}

/* Q's A fragments (ck, unscaled) of k step ks, row block mb: a0..a3 = (row
 * gid, k 2tig..+1), (gid + 8, same), (gid, k + 8..), (gid + 8, k + 8..).
 * Wide (MB > 1): ldmatrix from the block's Q tile in shared memory at each
 * k step; matrix i (register i) = rows 8 (i & 1) .. + 7, k 8 (i >> 1) .. + 7
 * of the 16 x 16 block, so lane_row (this lane's row address at ks = mb =
 * 0) is row 8 (mat & 1) + mrow, column 8 (mat >> 1). */
template <typename T, int DH, int MB> struct prefill_q {
    const T *lane_row;
    __device__ __forceinline__ void get(uint32_t r[4], int ks, int mb) const {
        ldsm_x4(r, lane_row + mb * 16 * (DH + 8) + ks * 16);
    }
};

/* Narrow (MB = 1): made once and held in registers for the whole kernel. */
template <typename T, int DH> struct prefill_q<T, DH, 1> {
    uint32_t f[DH / 16][4];
    __device__ __forceinline__ void get(uint32_t r[4], int ks, int) const {
#pragma unroll
        for (int i = 0; i < 4; i++)
            r[i] = f[ks][i];
    }
};

/* MB row blocks of 16 per warp: the narrow tile (MB 1, CK_ATT_TILE rows)
 * or the wide one (MB 2, CK_ATT_TILE_WIDE rows) */
template <typename T, int DH, int MB, int NS, bool Q8>
__global__ void __launch_bounds__(PRE_WARPS * 32, PRE_MIN_BLOCKS)
    attn_prefill_kernel(const ck_attn_args a) {
    constexpr int LDS = DH + 8;       /* padded rows: ldmatrix conflict-free */
    constexpr int KS = DH / 16;       /* k steps of Q K^T */
    constexpr int NT = DH / 8;        /* n tiles of O */
    /* keys per pass over S, P: the whole chunk, or half of it where 64
     * keys of S would spill (the wide tile at Dh 128: O alone takes 128
     * registers) */
    constexpr int SK = MB > 1 && DH > 96 ? 32 : PRE_KC;
    constexpr int ST = SK / 8; /* n tiles of S */
    constexpr int BUF = PRE_KC * LDS; /* elements of one K or V chunk */
    constexpr int RW = 16 * MB;       /* query rows per warp */
    static_assert(DH % 16 == 0 && NT % 2 == 0, "head size must be a multiple of 16");
    static_assert(MB == 1 || MB == 2, "one or two row blocks per warp");
    extern __shared__ __align__(16) unsigned char smem[];
    T *kv_s = reinterpret_cast<T *>(smem); /* [stage][K | V][64][LDS] */
    T *q_s = kv_s + NS * 2 * BUF;          /* [PRE_WARPS RW][LDS], wide only */
    int64_t *off_s = reinterpret_cast<int64_t *>(q_s + (MB > 1 ? PRE_WARPS * RW * LDS : 0));
    int *wlast_s = reinterpret_cast<int *>(off_s + NS * PRE_KC); /* [W] */

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int gid = lane >> 2, tig = lane & 3; /* mma fragment coordinates */
    /* heaviest (last) tiles first; the heads of one tile run together, so
     * the G heads of a kv head share its K/V in L2 */
    const int h = blockIdx.x % a.H, t = a.n_tiles - 1 - (int)(blockIdx.x / a.H);
    const int g = h / (a.H / a.Hkv);
    const int r0 = a.tile_row0[t], n = a.tile_n[t];
    const int seq = a.row_seq[r0];
    const int32_t *bt = a.block_tables + (int64_t)seq * a.max_blocks;

    /* this lane's rows: gid and gid + 8 of each of the warp's row blocks,
     * and their positions. wlast (-1: no row < n) bounds the warp's chunks.
     * Rows past n attend to key 0 only (qa, qb = 0): every row of an active
     * warp then has a visible key in chunk 0, so m is finite from there on
     * and no -inf - -inf can arise; their output is not stored. */
    const int ra0 = warp * RW + gid; /* row block mb: ra0 + 16 mb, + 8 */
    int qa[MB], qb[MB], plast = -1, qfirst = INT_MAX;
#pragma unroll
    for (int mb = 0; mb < MB; mb++) {
        const int ra = ra0 + 16 * mb, rb = ra + 8;
        const int pa = ra < n ? a.row_pos[r0 + ra] : -1;
        const int pb = rb < n ? a.row_pos[r0 + rb] : -1;
        plast = max(plast, max(pa, pb));
        qa[mb] = max(pa, 0);
        qb[mb] = max(pb, 0);
        qfirst = min(qfirst, min(qa[mb], qb[mb]));
    }
    const int wlast = warp_max_int(plast);
    const int wfirst = -warp_max_int(-qfirst); /* chunks reaching past it need the mask */
    if (lane == 0)
        wlast_s[warp] = wlast;

    const int mat = lane >> 3, mrow = lane & 7; /* ldmatrix: this lane's matrix and row */
    prefill_q<T, DH, MB> q;
    if constexpr (MB == 1) {
        /* a0..a3 from the lane's two rows; rows past n are 0 */
        const T *qra = static_cast<const T *>(a.qkv) + (int64_t)(r0 + ra0) * a.ld_qkv +
                       (int64_t)h * DH + 2 * tig;
        const T *qrb = qra + 8 * a.ld_qkv;
        const bool va = ra0 < n, vb = ra0 + 8 < n;
#pragma unroll
        for (int ks = 0; ks < KS; ks++)
#pragma unroll
            for (int hk = 0; hk < 2; hk++) {
                const int d = ks * 16 + hk * 8;
                q.f[ks][2 * hk] = va ? *reinterpret_cast<const uint32_t *>(qra + d) : 0u;
                q.f[ks][2 * hk + 1] = vb ? *reinterpret_cast<const uint32_t *>(qrb + d) : 0u;
            }
    } else {
        /* the Q tile in ck (rows past n are 0), published by the barrier
         * below; consecutive threads take consecutive pairs of a row, and
         * 16 iterations at a time keep 32 loads in flight per thread */
        constexpr int NQ = RW * DH / 64; /* pairs per thread: RW DH / 2 / 128 */
        const T *q0 = static_cast<const T *>(a.qkv) + (int64_t)r0 * a.ld_qkv + (int64_t)h * DH;
#pragma unroll 16
        for (int k = 0; k < NQ; k++) {
            const int i = tid + k * PRE_WARPS * 32;
            const int row = i / (DH / 2), d = 2 * (i % (DH / 2));
            uint32_t w = 0; /* two zeros, in bf16 and f16 alike */
            if (row < n)
                w = *reinterpret_cast<const uint32_t *>(q0 + (int64_t)row * a.ld_qkv + d);
            *reinterpret_cast<uint32_t *>(q_s + row * LDS + d) = w;
        }
        q.lane_row = q_s + (warp * RW + (mat & 1) * 8 + mrow) * LDS + (mat >> 1) * 8;
    }
    __syncthreads();
    int kv_end = 0;
#pragma unroll
    for (int w = 0; w < PRE_WARPS; w++)
        kv_end = max(kv_end, wlast_s[w] + 1);

    /* prologue: offsets of chunks 0 .. S-1, then chunks 0 .. S-2 in flight,
     * one cp.async group each (committed even when empty) */
    if (tid < PRE_KC) {
#pragma unroll
        for (int sg = 0; sg < NS; sg++) {
            const int key = sg * PRE_KC + tid;
            off_s[sg * PRE_KC + tid] = key < kv_end ? kv_row(a, bt, g, key) : -1;
        }
    }
    __syncthreads();
#pragma unroll
    for (int sg = 0; sg < NS - 1; sg++) {
        if (sg * PRE_KC < kv_end)
            prefill_copy<T, DH, Q8>(kv_s + sg * 2 * BUF, kv_s + sg * 2 * BUF + BUF, a,
                                    off_s + sg * PRE_KC);
        cp_async_commit();
    }

    const float sscale = a.scale * ATT_LOG2E;
    float o[MB][NT][4];
    float m[MB][2], l[MB][2]; /* m in log2 units */
#pragma unroll
    for (int mb = 0; mb < MB; mb++) {
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
            o[mb][nt][0] = o[mb][nt][1] = o[mb][nt][2] = o[mb][nt][3] = 0.0f;
        m[mb][0] = m[mb][1] = -INFINITY;
        l[mb][0] = l[mb][1] = 0.0f;
    }

    /* Chunk j lives in stage j % S, its offsets in slot j % S. Per step:
     * put chunk j + S-1 in flight (its stage, that of chunk j - 1, was
     * released by the barrier ending step j - 1; its offsets were stored
     * before that barrier), load chunk j + S's offsets (slot j % S: chunk
     * j's copy read it long ago), wait for chunk j, barrier, compute,
     * store the offsets (the block-table latency hides behind the
     * compute), barrier. S + j groups are committed by then, so
     * wait_group S-1 means exactly "chunk j has landed". */
    for (int j = 0, c0 = 0; c0 < kv_end; j++, c0 += PRE_KC) {
        const int st = j % NS, sn = (j + NS - 1) % NS;
        if (c0 + (NS - 1) * PRE_KC < kv_end) /* block-uniform */
            prefill_copy<T, DH, Q8>(kv_s + sn * 2 * BUF, kv_s + sn * 2 * BUF + BUF, a,
                                    off_s + sn * PRE_KC);
        cp_async_commit();
        const int key_ahead = c0 + NS * PRE_KC + tid;
        const int64_t off_ahead =
            tid < PRE_KC && key_ahead < kv_end ? kv_row(a, bt, g, key_ahead) : -1;
        cp_async_wait<NS - 1>(); /* this thread's copies of chunk j */
        __syncthreads();         /* everyone's */

        const T *k_s = kv_s + st * 2 * BUF, *v_s = k_s + BUF;
        /* SK keys at a time (one pass when SK = 64); a pass above the
         * warp's last row is skipped (warp-uniform) */
#pragma unroll 1
        for (int kc = 0; kc < PRE_KC && c0 + kc <= wlast; kc += SK) {
            const T *k_p = k_s + kc * LDS, *v_p = v_s + kc * LDS;
            /* S (RW x SK) = Q K^T; one ldmatrix gives the B fragments of
             * two n tiles, matrices (keys 0-7 | 8-15) x (k 0-7 | 8-15),
             * used by every row block of the warp */
            float sacc[MB][ST][4];
#pragma unroll
            for (int mb = 0; mb < MB; mb++)
#pragma unroll
                for (int nt = 0; nt < ST; nt++)
                    sacc[mb][nt][0] = sacc[mb][nt][1] = sacc[mb][nt][2] = sacc[mb][nt][3] = 0.0f;
#pragma unroll
            for (int ks = 0; ks < KS; ks++) {
                uint32_t qk[MB][4];
#pragma unroll
                for (int mb = 0; mb < MB; mb++)
                    q.get(qk[mb], ks, mb);
#pragma unroll
                for (int np = 0; np < ST / 2; np++) {
                    uint32_t b[4];
                    ldsm_x4(b, k_p + (np * 16 + (mat >> 1) * 8 + mrow) * LDS + ks * 16 +
                                   (mat & 1) * 8);
#pragma unroll
                    for (int mb = 0; mb < MB; mb++) {
                        ck_pair<T>::mma(sacc[mb][2 * np], qk[mb], b[0], b[1]);
                        ck_pair<T>::mma(sacc[mb][2 * np + 1], qk[mb], b[2], b[3]);
                    }
                }
            }
            /* causal mask (only when a key of the pass can pass a row's
             * position), then the row max of the raw scores over the 4
             * lanes of a row */
            const int k0 = c0 + kc;
            if (k0 + SK - 1 > wfirst) {
#pragma unroll
                for (int mb = 0; mb < MB; mb++)
#pragma unroll
                    for (int nt = 0; nt < ST; nt++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const int key = k0 + nt * 8 + 2 * tig + (e & 1);
                            if (key > (e < 2 ? qa[mb] : qb[mb]))
                                sacc[mb][nt][e] = -INFINITY;
                        }
            }
            /* accumulator (row g / g+8, cols 2t, 2t+1 of n tile nt) -> A
             * operand (k step kk = n tiles 2kk and 2kk+1) */
            uint32_t pf[MB][SK / 16][4];
#pragma unroll
            for (int mb = 0; mb < MB; mb++) {
                float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
                for (int nt = 0; nt < ST; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        mx[e >> 1] = fmaxf(mx[e >> 1], sacc[mb][nt][e]);
#pragma unroll
                for (int hr = 0; hr < 2; hr++) {
                    mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
                    mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
                    /* mn is finite (see qa): every row sees key 0 in the
                     * first pass, where alpha = exp2(-inf) = 0 */
                    const float mn = fmaxf(m[mb][hr], mx[hr] * sscale);
                    const float alpha = ex2_ftz(m[mb][hr] - mn);
                    m[mb][hr] = mn;
                    l[mb][hr] *= alpha;
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) {
                        o[mb][nt][2 * hr] *= alpha;
                        o[mb][nt][2 * hr + 1] *= alpha;
                    }
                }
                /* p = exp2(s scale - m) in one FMA; masked scores give 0 */
#pragma unroll
                for (int nt = 0; nt < ST; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int hr = e >> 1;
                        const float p = ex2_ftz(fmaf(sacc[mb][nt][e], sscale, -m[mb][hr]));
                        l[mb][hr] += p; /* lane partial; a row's 4 lanes are summed at the end */
                        sacc[mb][nt][e] = p;
                    }
#pragma unroll
                for (int kk = 0; kk < SK / 16; kk++) {
                    pf[mb][kk][0] = ck_pair<T>::pack(sacc[mb][2 * kk][0], sacc[mb][2 * kk][1]);
                    pf[mb][kk][1] = ck_pair<T>::pack(sacc[mb][2 * kk][2], sacc[mb][2 * kk][3]);
                    pf[mb][kk][2] =
                        ck_pair<T>::pack(sacc[mb][2 * kk + 1][0], sacc[mb][2 * kk + 1][1]);
                    pf[mb][kk][3] =
                        ck_pair<T>::pack(sacc[mb][2 * kk + 1][2], sacc[mb][2 * kk + 1][3]);
                }
            }
            /* O (RW x DH) += P (RW x SK) V (SK x DH); ldmatrix.trans gives
             * the B fragments of two n tiles, matrices (k 0-7 | 8-15) x
             * (n 0-7 | 8-15) of the 16 x 16 block, used by every row block */
#pragma unroll
            for (int kk = 0; kk < SK / 16; kk++)
#pragma unroll
                for (int np = 0; np < NT / 2; np++) {
                    uint32_t b[4];
                    ldsm_x4_trans(b, v_p + (kk * 16 + (mat & 1) * 8 + mrow) * LDS + np * 16 +
                                         (mat >> 1) * 8);
#pragma unroll
                    for (int mb = 0; mb < MB; mb++) {
                        ck_pair<T>::mma(o[mb][2 * np], pf[mb][kk], b[0], b[1]);
                        ck_pair<T>::mma(o[mb][2 * np + 1], pf[mb][kk], b[2], b[3]);
                    }
                }
        }
        if (tid < PRE_KC)
            off_s[st * PRE_KC + tid] = off_ahead;
        __syncthreads(); /* stage st consumed; chunk j + S's offsets stored */
    }

    /* normalise and store rows < n */
#pragma unroll
    for (int mb = 0; mb < MB; mb++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            float L = l[mb][hr] + __shfl_xor_sync(0xffffffffu, l[mb][hr], 1);
            L += __shfl_xor_sync(0xffffffffu, L, 2);
            const float inv = L > 0.0f ? 1.0f / L : 0.0f;
            const int row = ra0 + 16 * mb + 8 * hr;
            if (row < n) {
                T *orow =
                    static_cast<T *>(a.out) + (int64_t)(r0 + row) * a.ld_out + (int64_t)h * DH;
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    const int col = nt * 8 + 2 * tig;
                    ck_from_f32(&orow[col], o[mb][nt][2 * hr] * inv);
                    ck_from_f32(&orow[col + 1], o[mb][nt][2 * hr + 1] * inv);
                }
            }
        }
}

template <typename T, int DH, int MB, int NS, bool Q8>
static void prefill_launch_ns(cudaStream_t s, const ck_attn_args *a) {
    constexpr size_t smem = prefill_smem_bytes(DH, MB, sizeof(T), NS);
    static_assert(smem <= PRE_SMEM_MAX, "two blocks per SM");
    /* above 48 KB a kernel must opt in; the carveout asks for the largest
     * shared memory share of L1 so PRE_MIN_BLOCKS blocks fit an SM (the
     * kernel does not rely on L1). Not stream operations: legal during
     * graph capture; a failure shows in the caller's cudaGetLastError */
    (void)cudaFuncSetAttribute(attn_prefill_kernel<T, DH, MB, NS, Q8>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    (void)cudaFuncSetAttribute(attn_prefill_kernel<T, DH, MB, NS, Q8>,
                               cudaFuncAttributePreferredSharedMemoryCarveout,
                               (int)cudaSharedmemCarveoutMaxShared);
    attn_prefill_kernel<T, DH, MB, NS, Q8>
        <<<(unsigned)(a->n_tiles * a->H), PRE_WARPS * 32, smem, s>>>(*a);
}

/* The stages prefill_stages gives, or 2 on a device that grants a block
 * less shared memory than those take (Dh 128 narrow, Dh 96 wide: 104-106
 * KB with 3, against 99 KB on an RTX 30xx/40xx); the 2-stage instance is
 * built only where some device needs it. */
template <typename T, int DH, int MB, bool Q8>
static void prefill_launch(cudaStream_t s, const ck_attn_args *a) {
    constexpr int NS = prefill_stages(DH, MB, sizeof(T));
    if constexpr (NS > 2 && prefill_smem_bytes(DH, MB, sizeof(T), NS) > CK_SMEM_BLOCK_MIN) {
        if (prefill_smem_bytes(DH, MB, sizeof(T), NS) > (size_t)ck_device_caps()->smem_block) {
            prefill_launch_ns<T, DH, MB, 2, Q8>(s, a);
            return;
        }
    }
    prefill_launch_ns<T, DH, MB, NS, Q8>(s, a);
}

/* the tile list's row count picks the kernel */
template <typename T, int DH, bool Q8>
static void prefill_mb(cudaStream_t s, const ck_attn_args *a) {
    if (a->tile_rows == CK_ATT_TILE_WIDE)
        prefill_launch<T, DH, 2, Q8>(s, a);
    else
        prefill_launch<T, DH, 1, Q8>(s, a);
}

template <typename T, int DH>
static void prefill_dh(cudaStream_t s, const ck_attn_args *a) {
    if constexpr (DH % 32 == 0)
        if (a->kv_q8) {
            prefill_mb<T, DH, true>(s, a);
            return;
        }
    prefill_mb<T, DH, false>(s, a);
}

/* ------------------------------------------------------------ naive */

#define NAIVE_THREADS 256
#define NAIVE_DH_MAX 256

enum { NAIVE_ALL = 0, NAIVE_DEC = 1, NAIVE_TILES = 2 }; /* which rows the blocks take */

template <typename T, bool Q8>
__global__ void __launch_bounds__(NAIVE_THREADS) attn_naive_kernel(const ck_attn_args a, int mode) {
    __shared__ float q_s[NAIVE_DH_MAX];
    __shared__ float red_s[32];
    const int item = blockIdx.x, h = blockIdx.y;
    int r;
    if (mode == NAIVE_TILES) {
        int t = item / a.tile_rows, i = item % a.tile_rows;
        if (i >= a.tile_n[t])
            return; /* whole block: before any barrier */
        r = a.tile_row0[t] + i;
    } else if (mode == NAIVE_DEC) {
        r = a.dec_rows[item];
    } else {
        r = item;
    }
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, n_warp = blockDim.x >> 5;
    const int Dh = a.Dh, g = h / (a.H / a.Hkv);
    const int n_ctx = a.row_pos[r] + 1;
    const int32_t *bt = a.block_tables + (int64_t)a.row_seq[r] * a.max_blocks;
    float *sc = a.work + ((int64_t)r * a.H + h) * ((int64_t)a.max_blocks * a.BS);

    const T *q = static_cast<const T *>(a.qkv) + (int64_t)r * a.ld_qkv + (int64_t)h * Dh;
    for (int d = tid; d < Dh; d += blockDim.x)
        q_s[d] = ck_to_f32(q[d]);
    __syncthreads();

    /* scores: one warp per position */
    float mx = -INFINITY;
    for (int t = warp; t < n_ctx; t += n_warp) {
        const int64_t k = kv_row(a, bt, g, t);
        float dot = 0.0f;
        for (int d = lane; d < Dh; d += 32)
            dot += q_s[d] * kv_value<T, Q8>(a.k_pool, a.k_scale, k + d);
        dot = warp_sum(dot) * a.scale;
        if (lane == 0)
            sc[t] = dot;
        mx = fmaxf(mx, dot);
    }
    mx = block_max(mx, red_s); /* its barriers also publish sc[] */

    float sum = 0.0f;
    for (int t = tid; t < n_ctx; t += blockDim.x) {
        float e = expf(sc[t] - mx);
        sc[t] = e;
        sum += e;
    }
    sum = block_sum(sum, red_s); /* its barriers also publish the exp'd sc[] */

    const float inv = 1.0f / sum; /* sum >= 1: the max term is exp(0) */
    T *out = static_cast<T *>(a.out) + (int64_t)r * a.ld_out + (int64_t)h * Dh;
    for (int d = tid; d < Dh; d += blockDim.x) {
        float acc = 0.0f;
        for (int t = 0; t < n_ctx; t++)
            acc += sc[t] * kv_value<T, Q8>(a.v_pool, a.v_scale, kv_row(a, bt, g, t) + d);
        ck_from_f32(&out[d], acc * inv);
    }
}

template <typename T>
static void naive_launch(cudaStream_t s, const ck_attn_args *a, int mode, int n_items) {
    if (n_items <= 0)
        return;
    dim3 grid((unsigned)n_items, (unsigned)a->H);
    if (a->kv_q8)
        attn_naive_kernel<T, true><<<grid, NAIVE_THREADS, 0, s>>>(*a, mode);
    else
        attn_naive_kernel<T, false><<<grid, NAIVE_THREADS, 0, s>>>(*a, mode);
}

/* ------------------------------------------------------------ launchers */

template <typename T>
static void decode_t(cudaStream_t s, const ck_attn_args *a) {
    switch (a->Dh) {
    case 64: decode_dh<T, 64>(s, a); break;
    case 80: decode_dh<T, 80>(s, a); break;
    case 96: decode_dh<T, 96>(s, a); break;
    case 128: decode_dh<T, 128>(s, a); break;
    default: naive_launch<T>(s, a, NAIVE_DEC, a->n_dec); break;
    }
}

template <typename T>
static void prefill_t(cudaStream_t s, const ck_attn_args *a) {
    switch (a->Dh) {
    case 64: prefill_dh<T, 64>(s, a); break;
    case 80: prefill_dh<T, 80>(s, a); break;
    case 96: prefill_dh<T, 96>(s, a); break;
    case 128: prefill_dh<T, 128>(s, a); break;
    default: naive_launch<T>(s, a, NAIVE_TILES, a->n_tiles * a->tile_rows); break;
    }
}

void ck_attention_decode(cudaStream_t s, const ck_attn_args *a) {
    if (a->n_dec <= 0 || a->n_splits <= 0)
        return;
    CK_DISPATCH(a->dt, decode_t<T>(s, a));
}

/* the wgmma kernel: on compute capability 9.0 (its sm_90a code runs there
 * only) on the Hopper path, unless HEADROOM_CUDA_WGMMA=0 (caps.cu) */
void ck_attention_prefill(cudaStream_t s, const ck_attn_args *a) {
    if (a->n_tiles <= 0)
        return;
    if (!a->kv_q8 && ck_device_caps()->wgmma && ck_attention_prefill_wgmma(s, a))
        return;
    CK_DISPATCH(a->dt, prefill_t<T>(s, a));
}

void ck_attention_naive(cudaStream_t s, const ck_attn_args *a) {
    CK_DISPATCH(a->dt, naive_launch<T>(s, a, NAIVE_ALL, a->n_rows));
}

/* the wide tile fits when the wgmma kernel takes it or the mma.sync one
 * fits at its fewest stages, 2 (at Dh 128 that is 103 KB, more than an
 * RTX 30xx/40xx grants a block) */
/* the mma.sync kernel's wide tile, at its fewest stages */
static bool mma_wide_fits(int Dh) {
    return prefill_smem_bytes(Dh, 2, 2, 2) <= (size_t)ck_device_caps()->smem_block;
}

int ck_attention_tile_fits(int tile_rows, int Dh) {
    return tile_rows != CK_ATT_TILE_WIDE || (Dh == 128 && ck_device_caps()->wgmma) ||
           mma_wide_fits(Dh);
}

int ck_attention_tile_rows(int longest, int H, int Dh, int kv_q8) {
    if (Dh == 128 && ck_device_caps()->wgmma && !kv_q8)
        return CK_ATT_TILE_WIDE; /* the wgmma kernel's tiles */
    const int64_t wide_blocks = (int64_t)(longest + CK_ATT_TILE_WIDE - 1) / CK_ATT_TILE_WIDE * H;
    return wide_blocks >= CK_ATT_WIDE_MIN_BLOCKS && mma_wide_fits(Dh) ? CK_ATT_TILE_WIDE
                                                                      : CK_ATT_TILE;
}
