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
 * combine kernel merges the splits per (row, head). The grid does not depend
 * on the contexts (graph capture): each block reads row_pos, sizes the
 * splits from it (context / n_splits, at least split_len, so every split of
 * a long context is busy) and exits when its split is empty; empty splits
 * write nothing, and the combine skips them by the same rule.
 *
 * Prefill: one block per (query tile, query head), 4 warps of 16 query rows.
 * Per 64-key chunk (gathered through the block table by cp.async, V's copy
 * landing while S is computed) S = Q K^T and O += P V run on mma.sync
 * m16n8k16 (ck inputs, f32 accumulation); S, P and O stay in registers, the
 * accumulator layout of S being the A-operand layout of P. Causal mask per
 * element; chunks above a warp's last row are skipped. One block per query
 * head rather than per kv head: the G heads' tiles would not fit one block,
 * and K/V (a few MB per segment) are read from L2 by the G blocks anyway.
 * Rejected: wmma (its accumulator layout is opaque, so the per-row rescale
 * of O would go through shared memory every chunk).
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
 * 16-byte aligned, tile_n <= CK_ATT_TILE, pos < max_blocks * BS.
 *
 * Versions: v1 (this file), not yet measured on the H200.
 */
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"

#include <math.h>
#include <stdint.h>

#define ATT_LOG2E 1.4426950408889634f

/* ------------------------------------------------------------ small helpers */

/* The ck-type specific pieces: pairs of elements packed in 32 bits, and the
 * tensor-core product for that type. */
template <typename T> struct ck_pair;

template <> struct ck_pair<__nv_bfloat16> {
    /* low half = first element; bf16 is the top half of an f32 */
    static __device__ __forceinline__ float2 to_f32(uint32_t w) {
        return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
    }
    /* d (16x8 f32) += a (16x16, row) . b (16x8, col) */
    static __device__ __forceinline__ void mma(float d[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
            "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

template <> struct ck_pair<__half> {
    static __device__ __forceinline__ float2 to_f32(uint32_t w) {
        return __half22float2(*reinterpret_cast<const __half2 *>(&w));
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
    }
    static __device__ __forceinline__ void mma(float d[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
            "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

/* 16 bytes global -> shared without passing through registers (sm_80+), so a
 * warp keeps a whole chunk of K and V in flight. */
__device__ __forceinline__ void cp_async16(void *dst_smem, const void *src) {
    unsigned d = (unsigned)__cvta_generic_to_shared(dst_smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
/* wait until at most n of this thread's committed groups are still pending */
template <int n> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(n) : "memory");
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

/* Element offset of position t's row in a pool: page (block, kv head g). */
__device__ __forceinline__ int64_t kv_row(const ck_attn_args &a, const int32_t *bt, int g,
                                          int t) {
    return (((int64_t)bt[t / a.BS] * a.Hkv + g) * a.BS + t % a.BS) * a.Dh;
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
template <typename T, int DH, int GB>
__global__ void __launch_bounds__(DEC_WARPS * 32, 3) attn_decode_kernel(const ck_attn_args a) {
    constexpr int NV = DH / 8;          /* 16-byte pieces per K/V row */
    constexpr int LDS = DH + 8;         /* padded shared row: lane rows in distinct banks */
    constexpr int NP = (DH + 63) / 64;  /* dimension pairs per lane in P V */
    constexpr int PART = DH + 2;        /* o[Dh], m, l */
    extern __shared__ __align__(16) unsigned char smem[];
    T *kv_s = reinterpret_cast<T *>(smem);                    /* [W][K|V][32][LDS] */
    float *q_s = reinterpret_cast<float *>(kv_s + DEC_WARPS * 2 * DEC_CHUNK * LDS); /* [GB][DH] */
    float *p_s = q_s + GB * DH;                               /* [W][GB][32] */
    int64_t *off_s = reinterpret_cast<int64_t *>(p_s + DEC_WARPS * GB * DEC_CHUNK); /* [W][32] */

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
        q_s[i] = j < nh ? a.qkv[(int64_t)r * a.ld_qkv + (int64_t)(h0 + j) * DH + d] * qscale
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
         * garbage, which 0 * NaN would spread into O) */
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
        cp_async_commit();
        cp_async_wait<0>();
        __syncwarp();

        /* scores: lane = token */
        float sc[GB];
#pragma unroll
        for (int j = 0; j < GB; j++)
            sc[j] = 0.0f;
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
                    v[u][ip] = d < DH ? ck_pair<T>::to_f32(lds32(v_w + (t + u) * LDS + d))
                                      : make_float2(0.0f, 0.0f);
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

template <typename T, int DH, int GB>
static void decode_launch(cudaStream_t s, const ck_attn_args *a) {
    const int G = a->H / a->Hkv, n_hb = (G + GB - 1) / GB;
    const size_t smem = decode_smem_bytes<T, DH, GB>();
    /* above 48 KB a kernel must opt in; not a stream operation, so legal
     * during graph capture; a failure shows in the caller's cudaGetLastError */
    (void)cudaFuncSetAttribute(attn_decode_kernel<T, DH, GB>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    dim3 grid((unsigned)(a->n_splits * a->n_dec), (unsigned)(a->Hkv * n_hb));
    attn_decode_kernel<T, DH, GB><<<grid, DEC_WARPS * 32, smem, s>>>(*a);
    attn_combine_kernel<T><<<dim3((unsigned)a->n_dec, (unsigned)a->H), COMB_WARPS * 32, 0, s>>>(*a);
}

/* GB: the group size rounded up to 1, 2, 4 or 8 (padding heads have q = 0
 * and are not written); groups above 8 take several blocks */
template <typename T, int DH>
static void decode_dh(cudaStream_t s, const ck_attn_args *a) {
    const int G = a->H / a->Hkv;
    if (G == 1)
        decode_launch<T, DH, 1>(s, a);
    else if (G == 2)
        decode_launch<T, DH, 2>(s, a);
    else if (G <= 4)
        decode_launch<T, DH, 4>(s, a);
    else
        decode_launch<T, DH, DEC_GB_MAX>(s, a);
}

/* ------------------------------------------------------------ prefill */

#define PRE_WARPS 4
#define PRE_KC 64 /* keys per chunk */

static_assert(CK_ATT_TILE == PRE_WARPS * 16, "one m16 row block per warp");

template <typename T, int DH>
static constexpr size_t prefill_smem_bytes() {
    return (size_t)(CK_ATT_TILE + 2 * PRE_KC) * (DH + 8) * sizeof(T) /* Q, K, V */
           + (size_t)PRE_KC * sizeof(int64_t)                        /* row offsets */
           + (size_t)PRE_WARPS * sizeof(int);                        /* last position per warp */
}

template <typename T, int DH>
__global__ void __launch_bounds__(PRE_WARPS * 32) attn_prefill_kernel(const ck_attn_args a) {
    constexpr int LDS = DH + 8; /* padded rows: fragment loads conflict-free */
    constexpr int NV = DH / 8;  /* 16-byte pieces per row */
    constexpr int KS = DH / 16; /* k steps of Q K^T */
    constexpr int NT = DH / 8;  /* n tiles of O */
    constexpr int ST = PRE_KC / 8; /* n tiles of S */
    static_assert(DH % 16 == 0 && NT % 2 == 0, "head size must be a multiple of 16");
    extern __shared__ __align__(16) unsigned char smem[];
    T *q_s = reinterpret_cast<T *>(smem);      /* [64][LDS] */
    T *k_s = q_s + CK_ATT_TILE * LDS;          /* [64][LDS] */
    T *v_s = k_s + PRE_KC * LDS;               /* [64][LDS] */
    int64_t *off_s = reinterpret_cast<int64_t *>(v_s + PRE_KC * LDS); /* [64] */
    int *wlast_s = reinterpret_cast<int *>(off_s + PRE_KC);           /* [W] */

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int gid = lane >> 2, tig = lane & 3; /* mma fragment coordinates */
    /* heaviest (last) tiles first; the heads of one tile run together, so
     * the G heads of a kv head share its K/V in L2 */
    const int h = blockIdx.x % a.H, t = a.n_tiles - 1 - (int)(blockIdx.x / a.H);
    const int g = h / (a.H / a.Hkv);
    const int r0 = a.tile_row0[t], n = a.tile_n[t];
    const int seq = a.row_seq[r0];
    const int32_t *bt = a.block_tables + (int64_t)seq * a.max_blocks;
    const T *kp = static_cast<const T *>(a.k_pool), *vp = static_cast<const T *>(a.v_pool);

    /* Q tile as ck; rows past n are zeros */
    for (int i = tid; i < CK_ATT_TILE * DH; i += blockDim.x) {
        int row = i / DH, d = i % DH;
        float v = row < n ? a.qkv[(int64_t)(r0 + row) * a.ld_qkv + (int64_t)h * DH + d] : 0.0f;
        ck_from_f32(&q_s[row * LDS + d], v);
    }
    /* this lane's two rows (gid, gid + 8 of the warp's 16) and their
     * positions; -1 masks every key of a row past n */
    const int ra = warp * 16 + gid, rb = ra + 8;
    const int pa = ra < n ? a.row_pos[r0 + ra] : -1;
    const int pb = rb < n ? a.row_pos[r0 + rb] : -1;
    const int wlast = warp_max_int(max(pa, pb));
    if (lane == 0)
        wlast_s[warp] = wlast;
    __syncthreads();
    int kv_end = 0;
#pragma unroll
    for (int w = 0; w < PRE_WARPS; w++)
        kv_end = max(kv_end, wlast_s[w] + 1);

    const float sscale = a.scale * ATT_LOG2E;
    float o[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
        o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    for (int c0 = 0; c0 < kv_end; c0 += PRE_KC) {
        __syncthreads(); /* the previous chunk is consumed */
        if (tid < PRE_KC)
            off_s[tid] = c0 + tid < kv_end ? kv_row(a, bt, g, c0 + tid) : -1;
        __syncthreads();
        for (int i = tid; i < PRE_KC * NV; i += blockDim.x) {
            int row = i / NV, c = i % NV;
            int64_t off = off_s[row];
            T *dst = k_s + row * LDS + c * 8;
            if (off >= 0)
                cp_async16(dst, kp + off + c * 8);
            else
                *reinterpret_cast<uint4 *>(dst) = make_uint4(0, 0, 0, 0);
        }
        cp_async_commit();
        for (int i = tid; i < PRE_KC * NV; i += blockDim.x) {
            int row = i / NV, c = i % NV;
            int64_t off = off_s[row];
            T *dst = v_s + row * LDS + c * 8;
            if (off >= 0)
                cp_async16(dst, vp + off + c * 8);
            else
                *reinterpret_cast<uint4 *>(dst) = make_uint4(0, 0, 0, 0);
        }
        cp_async_commit();
        cp_async_wait<1>(); /* K has landed; V may still be in flight */
        __syncthreads();

        const bool active = c0 <= wlast; /* warp-uniform: a key this warp can see */
        uint32_t pf[PRE_KC / 16][4];     /* P as the A operand of P V */
        if (active) {
            /* S (16 x 64) = Q K^T */
            float sacc[ST][4];
#pragma unroll
            for (int nt = 0; nt < ST; nt++)
                sacc[nt][0] = sacc[nt][1] = sacc[nt][2] = sacc[nt][3] = 0.0f;
#pragma unroll
            for (int ks = 0; ks < KS; ks++) {
                const T *qr = q_s + ra * LDS + ks * 16 + 2 * tig;
                uint32_t af[4] = {lds32(qr), lds32(qr + 8 * LDS), lds32(qr + 8),
                                  lds32(qr + 8 * LDS + 8)};
#pragma unroll
                for (int nt = 0; nt < ST; nt++) {
                    const T *kr = k_s + (nt * 8 + gid) * LDS + ks * 16 + 2 * tig;
                    ck_pair<T>::mma(sacc[nt], af, lds32(kr), lds32(kr + 8));
                }
            }
            /* causal mask, log2 units, row max over the 4 lanes of a row */
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int nt = 0; nt < ST; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int key = c0 + nt * 8 + 2 * tig + (e & 1);
                    int qpos = e < 2 ? pa : pb;
                    float s = key <= qpos ? sacc[nt][e] * sscale : -INFINITY;
                    sacc[nt][e] = s;
                    mx[e >> 1] = fmaxf(mx[e >> 1], s);
                }
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
                mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
                float mn = fmaxf(m[hr], mx[hr]);
                /* a row with no visible key yet keeps m = -inf: scale 1, p 0 */
                float alpha = mn == -INFINITY ? 1.0f : exp2f(m[hr] - mn);
                m[hr] = mn;
                l[hr] *= alpha;
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    o[nt][2 * hr] *= alpha;
                    o[nt][2 * hr + 1] *= alpha;
                }
            }
#pragma unroll
            for (int nt = 0; nt < ST; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int hr = e >> 1;
                    float p = m[hr] == -INFINITY ? 0.0f : exp2f(sacc[nt][e] - m[hr]);
                    l[hr] += p; /* lane partial; the 4 lanes of a row are summed at the end */
                    sacc[nt][e] = p;
                }
            /* accumulator (row g / g+8, cols 2t, 2t+1 of n tile nt) -> A
             * operand (k step kk = n tiles 2kk and 2kk+1) */
#pragma unroll
            for (int kk = 0; kk < PRE_KC / 16; kk++) {
                pf[kk][0] = ck_pair<T>::pack(sacc[2 * kk][0], sacc[2 * kk][1]);
                pf[kk][1] = ck_pair<T>::pack(sacc[2 * kk][2], sacc[2 * kk][3]);
                pf[kk][2] = ck_pair<T>::pack(sacc[2 * kk + 1][0], sacc[2 * kk + 1][1]);
                pf[kk][3] = ck_pair<T>::pack(sacc[2 * kk + 1][2], sacc[2 * kk + 1][3]);
            }
        }
        cp_async_wait<0>();
        __syncthreads();
        if (active) {
            /* O (16 x DH) += P (16 x 64) V (64 x DH); ldmatrix.trans gives
             * the B fragments of two n tiles: matrices (k 0-7 | 8-15) x
             * (n 0-7 | 8-15) of the 16 x 16 block */
            const int mat = lane >> 3, mrow = lane & 7;
#pragma unroll
            for (int kk = 0; kk < PRE_KC / 16; kk++)
#pragma unroll
                for (int np = 0; np < NT / 2; np++) {
                    uint32_t b[4];
                    ldsm_x4_trans(b, v_s + (kk * 16 + (mat & 1) * 8 + mrow) * LDS + np * 16 +
                                         (mat >> 1) * 8);
                    ck_pair<T>::mma(o[2 * np], pf[kk], b[0], b[1]);
                    ck_pair<T>::mma(o[2 * np + 1], pf[kk], b[2], b[3]);
                }
        }
    }

    /* normalise and store rows < n */
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        float L = l[hr] + __shfl_xor_sync(0xffffffffu, l[hr], 1);
        L += __shfl_xor_sync(0xffffffffu, L, 2);
        float inv = L > 0.0f ? 1.0f / L : 0.0f;
        int row = hr ? rb : ra;
        if (row < n) {
            T *orow = static_cast<T *>(a.out) + (int64_t)(r0 + row) * a.ld_out + (int64_t)h * DH;
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                int col = nt * 8 + 2 * tig;
                ck_from_f32(&orow[col], o[nt][2 * hr] * inv);
                ck_from_f32(&orow[col + 1], o[nt][2 * hr + 1] * inv);
            }
        }
    }
}

template <typename T, int DH>
static void prefill_launch(cudaStream_t s, const ck_attn_args *a) {
    const size_t smem = prefill_smem_bytes<T, DH>();
    (void)cudaFuncSetAttribute(attn_prefill_kernel<T, DH>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    attn_prefill_kernel<T, DH><<<(unsigned)(a->n_tiles * a->H), PRE_WARPS * 32, smem, s>>>(*a);
}

/* ------------------------------------------------------------ naive */

#define NAIVE_THREADS 256
#define NAIVE_DH_MAX 256

enum { NAIVE_ALL = 0, NAIVE_DEC = 1, NAIVE_TILES = 2 }; /* which rows the blocks take */

template <typename T>
__global__ void __launch_bounds__(NAIVE_THREADS) attn_naive_kernel(const ck_attn_args a, int mode) {
    __shared__ float q_s[NAIVE_DH_MAX];
    __shared__ float red_s[32];
    const int item = blockIdx.x, h = blockIdx.y;
    int r;
    if (mode == NAIVE_TILES) {
        int t = item / CK_ATT_TILE, i = item % CK_ATT_TILE;
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
    const T *kp = static_cast<const T *>(a.k_pool), *vp = static_cast<const T *>(a.v_pool);
    float *sc = a.work + ((int64_t)r * a.H + h) * ((int64_t)a.max_blocks * a.BS);

    for (int d = tid; d < Dh; d += blockDim.x)
        q_s[d] = a.qkv[(int64_t)r * a.ld_qkv + (int64_t)h * Dh + d];
    __syncthreads();

    /* scores: one warp per position */
    float mx = -INFINITY;
    for (int t = warp; t < n_ctx; t += n_warp) {
        const T *k = kp + kv_row(a, bt, g, t);
        float dot = 0.0f;
        for (int d = lane; d < Dh; d += 32)
            dot += q_s[d] * ck_to_f32(k[d]);
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
            acc += sc[t] * ck_to_f32(vp[kv_row(a, bt, g, t) + d]);
        ck_from_f32(&out[d], acc * inv);
    }
}

template <typename T>
static void naive_launch(cudaStream_t s, const ck_attn_args *a, int mode, int n_items) {
    if (n_items <= 0)
        return;
    dim3 grid((unsigned)n_items, (unsigned)a->H);
    attn_naive_kernel<T><<<grid, NAIVE_THREADS, 0, s>>>(*a, mode);
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
    case 64: prefill_launch<T, 64>(s, a); break;
    case 80: prefill_launch<T, 80>(s, a); break;
    case 96: prefill_launch<T, 96>(s, a); break;
    case 128: prefill_launch<T, 128>(s, a); break;
    default: naive_launch<T>(s, a, NAIVE_TILES, a->n_tiles * CK_ATT_TILE); break;
    }
}

void ck_attention_decode(cudaStream_t s, const ck_attn_args *a) {
    if (a->n_dec <= 0 || a->n_splits <= 0)
        return;
    CK_DISPATCH(a->dt, decode_t<T>(s, a));
}

void ck_attention_prefill(cudaStream_t s, const ck_attn_args *a) {
    if (a->n_tiles <= 0)
        return;
    CK_DISPATCH(a->dt, prefill_t<T>(s, a));
}

void ck_attention_naive(cudaStream_t s, const ck_attn_args *a) {
    CK_DISPATCH(a->dt, naive_launch<T>(s, a, NAIVE_ALL, a->n_rows));
}

