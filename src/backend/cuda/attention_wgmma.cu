/*
 * attention_wgmma.cu — causal prefill attention for head size 128 on the
 * Hopper warpgroup MMA (wgmma, sm_90a only: this file is compiled for that
 * target alone, see CMakeLists.txt), for wide tiles (CK_ATT_TILE_WIDE rows).
 *
 * Why: the mma.sync kernel of attention.cu issues its tensor-core work a
 * warp at a time, 16 x 8 x 16 per instruction, with its operands through
 * registers (ldmatrix); at 2048 rows of Llama-2-7B it reaches ~210 causal
 * TFLOP/s. wgmma lets four warps issue 64 x N x 16 products that read K, V
 * and Q straight from shared memory, asynchronously.
 *
 * How: one block per (query tile of 128 rows, query head), like the wide
 * kernel of attention.cu; two consumer warpgroups of 64 rows each and one
 * producer warpgroup. The producer gathers the tile's keys, 64 a chunk,
 * through the block table into a ring of kStages stages (cp.async, 16
 * bytes a thread, zero-filled past the last key) in the 128-byte swizzled
 * layout wgmma reads: a chunk of K or V is two panels (head elements 0-63
 * and 64-127) of 64 rows of 128 bytes, the 16-byte pieces of row r at
 * (piece ^ r % 8). It looks up the next chunk's pages while it issues this
 * one's copies, and marks a stage full (mbarrier) once its copies have
 * landed and a proxy fence has made them visible to wgmma; each consumer
 * warp marks it empty after use. Each consumer warpgroup, per chunk: S (64
 * x 64) = Q K^T by eight m64n64k16 (Q and K from shared memory, K-major),
 * the causal mask where a key can pass a row's position, the online
 * softmax in registers (log2 units, as attention.cu), P rounded to the
 * compute type in the A-fragment layout, then O (64 x 128) += P V by four
 * m64n128k16 with A from registers and V from shared memory (MN-major:
 * V's rows are keys, head elements contiguous). The two warpgroups' MMAs
 * and softmaxes interleave on the SM; a warpgroup does not overlap its own
 * (FlashAttention-3's ping-pong and intra-warpgroup pipelining are not
 * done here). Rows past the tile's end use position 0 (key 0 only) and are
 * not stored.
 *
 * One layer of Llama-2-7B at 2048 rows takes 106 us (324 causal TFLOP/s)
 * against 161 for the mma.sync wide kernel, and it is faster at every
 * length from 512 rows up, so the backend takes wide tiles at every length
 * where this kernel runs (ck_attention_tile_rows). The producer is a whole
 * warpgroup that looks up the next chunk's pages while it issues this
 * one's copies: with one producer warp doing both in turn, the copies, not
 * the MMAs, were the limit. Rejected: leaving a chunk's P V in flight while
 * the next chunk's Q K^T is issued (slower). Figures, and the two wgmma
 * designs that lost to mma.sync before this one: docs/journal/attention.md.
 */
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"

#include <stdint.h>
#include <type_traits>

namespace {

constexpr int kDh = 128;
constexpr int kRows = CK_ATT_TILE_WIDE;            /* a tile: two warpgroups of 64 */
constexpr int kKeys = 64;                          /* keys a chunk */
constexpr int kStages = 4;
constexpr int kLag = 2;                            /* chunks the producer keeps in flight
                                                      before it signals the oldest */
constexpr int kConsumers = 256;
constexpr int kProducers = 128;                    /* a warpgroup of copying threads */
constexpr int kThreads = kConsumers + kProducers;
constexpr int kQBytes = kRows * kDh * 2;           /* 32 KB */
constexpr int kChunkBytes = kKeys * kDh * 2;       /* 16 KB: K or V of a chunk */
constexpr int kSmem = kQBytes + kStages * 2 * kChunkBytes + 1024; /* + alignment */
static_assert(kRows == 128, "two warpgroups of 64 rows");
static_assert(kLag < kStages, "the producer's lag fits the ring");

/* byte offset of 16-byte piece c (0..15) of row r in a tile of `rows` rows
 * of 128 head elements: panel c / 8, 128 bytes a row, 128-byte swizzle */
__device__ __forceinline__ uint32_t sw128(int r, int c, int rows) {
    return (uint32_t)((c >> 3) * rows * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

/* wgmma shared-memory matrix descriptor, 128-byte swizzle: start address,
 * leading and stride byte offsets (16-byte units) */
__device__ __forceinline__ uint64_t wg_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | (uint64_t)(lbo >> 4) << 16 |
           (uint64_t)(sbo >> 4) << 32 | 1ull << 62;
}

/* 16 bytes global -> shared, or 16 zero bytes when !valid */
__device__ __forceinline__ void cp_async16_zfill(uint32_t dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
                 "r"(valid ? 16 : 0)
                 : "memory");
}

/* shared-memory writes of the generic proxy (st.shared, cp.async) made
 * visible to the async proxy that wgmma reads through */
__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

__device__ __forceinline__ void wg_fence() {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wg_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wg_wait_all() {
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}

#define WG_MMA_S(TY, d, da, db, acc)                                                           \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                    \
    "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {" \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31" \
    "}, %32, %33, p, 1, 1, 0, 0;\n}\n"                                                          \
    :       "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), \
      "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), \
      "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), \
      "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), \
      "+f"(d[31]) \
    : "l"(da), "l"(db), "r"(acc))

#define WG_MMA_O(TY, d, a, db, acc)                                                            \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                    \
    "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {" \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31," \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47," \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63" \
    "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                               \
    :       "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), \
      "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), \
      "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), \
      "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), \
      "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), \
      "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
      "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), \
      "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), \
      "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
    : "r"((a)[0]), "r"((a)[1]), "r"((a)[2]), "r"((a)[3]), "l"(db), "r"(acc))

/* S (64 x 64, 32 f32 a thread) (+)= Q K^T for one k step (acc = 0: S = Q
 * K^T); O (64 x 128, 64 f32 a thread) += P V for one k step, P from
 * registers */
template <class T>
__device__ __forceinline__ void wg_mma_s(float *d, uint64_t da, uint64_t db, int acc) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>)
        WG_MMA_S("bf16", d, da, db, acc);
    else
        WG_MMA_S("f16", d, da, db, acc);
}

template <class T>
__device__ __forceinline__ void wg_mma_o(float *d, const uint32_t *a, uint64_t db) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>)
        WG_MMA_O("bf16", d, a, db, 1);
    else
        WG_MMA_O("f16", d, a, db, 1);
}

/* ---- the producer warpgroup: the tile's chunks of K and V into the ring */

template <class T>
__device__ void produce(const ck_attn_args &a, const int32_t *bt, int g, int kv_end,
                        uint8_t *kv_s, int64_t (*off_s)[kKeys], uint64_t *full,
                        uint64_t *empty) {
    const int t = (int)threadIdx.x - kConsumers, lane = t & 31;
    const T *kp = static_cast<const T *>(a.k_pool), *vp = static_cast<const T *>(a.v_pool);
    const int n_chunks = (kv_end + kKeys - 1) / kKeys;
    /* thread t < kKeys looks up key t of the next chunk while this one is
     * issued (the block table's latency stays off the copies' path): its
     * row's offset, -1 past the last key */
    int64_t next = t < kKeys && t < kv_end ? kv_row(a, bt, g, t) : -1;
    for (int j = 0; j < n_chunks + kLag; j++) {
        if (j < n_chunks) {
            const int st = j % kStages;
            if (j >= kStages) /* its previous chunk used by every consumer warp */
                mbar_wait(&empty[st], (unsigned)(j / kStages - 1) & 1u);
            if (t < kKeys) {
                off_s[st][t] = next;
                const int key = (j + 1) * kKeys + t;
                if (j + 1 < n_chunks)
                    next = key < kv_end ? kv_row(a, bt, g, key) : -1;
            }
            asm volatile("bar.sync 3, %0;" ::"n"(kProducers) : "memory");
            const uint32_t ks = smem_u32(kv_s + st * 2 * kChunkBytes), vs = ks + kChunkBytes;
            /* piece i * kProducers + t: key (i * kProducers + t) / 16, piece t % 16 */
#pragma unroll
            for (int i = 0; i < kKeys * 16 / kProducers; i++) {
                const int key = (i * kProducers + t) >> 4, c = t & 15;
                const int64_t o = off_s[st][key];
                const uint32_t at = sw128(key, c, kKeys);
                const int64_t src = o < 0 ? 0 : o + 8 * c;
                cp_async16_zfill(ks + at, kp + src, o >= 0);
                cp_async16_zfill(vs + at, vp + src, o >= 0);
            }
        }
        cp_async_commit();
        if (j >= kLag) { /* chunk j - kLag has landed: publish it */
            cp_async_wait<kLag>();
            fence_proxy_async();
            __syncwarp();
            if (lane == 0)
                mbar_arrive(&full[(j - kLag) % kStages]);
        }
    }
}

template <class T>
__global__ void __launch_bounds__(kThreads, 1) prefill_wgmma_kernel(const ck_attn_args a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ uint8_t smem_raw[];
    __shared__ uint64_t full[kStages], empty[kStages];
    __shared__ int64_t off_s[kStages][kKeys];
    uint8_t *smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
    uint8_t *q_s = smem, *kv_s = smem + kQBytes;

    const int tid = (int)threadIdx.x, warp = tid >> 5, lane = tid & 31;
    /* heaviest (last) tiles first, the heads of a tile together (as attention.cu) */
    const int h = (int)blockIdx.x % a.H, t = a.n_tiles - 1 - (int)blockIdx.x / a.H;
    const int g = h / (a.H / a.Hkv);
    const int r0 = a.tile_row0[t], n = a.tile_n[t];
    const int32_t *bt = a.block_tables + (int64_t)a.row_seq[r0] * a.max_blocks;
    const int p0 = a.row_pos[r0];    /* the tile's rows: positions p0 .. p0 + n - 1 */
    const int kv_end = p0 + n;       /* keys 0 .. kv_end - 1 */
    const int n_chunks = (kv_end + kKeys - 1) / kKeys;

    if (tid == 0) {
        for (int st = 0; st < kStages; st++) {
            mbar_init(&full[st], kProducers / 32);
            mbar_init(&empty[st], kConsumers / 32);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (tid >= kConsumers) {
        produce<T>(a, bt, g, kv_end, kv_s, off_s, full, empty);
        return;
    }

    const int wg = warp >> 2, wt = tid & 127; /* warpgroup, thread within it */
    /* this thread's rows of the warpgroup's 64: ra and ra + 8 */
    const int ra = 64 * wg + 16 * (warp & 3) + (lane >> 2), rb = ra + 8;
    const int qa = ra < n ? p0 + ra : 0, qb = rb < n ? p0 + rb : 0;
    const int wg_rows = min(max(n - 64 * wg, 0), 64);
    const int wlast = wg_rows > 0 ? p0 + 64 * wg + wg_rows - 1 : -1; /* its last position */
    const int wfirst = p0 + 64 * wg;

    /* Q: the warpgroup's 64 rows into the swizzled tile (rows past n: 0),
     * element pairs (qkv rows need only be 4-byte aligned), consecutive
     * threads on consecutive pairs, 16 loads in flight a thread */
    {
        const T *q0 = static_cast<const T *>(a.qkv) + (int64_t)h * kDh;
#pragma unroll
        for (int half = 0; half < 2; half++) {
            uint32_t v[16];
#pragma unroll
            for (int i = 0; i < 16; i++) {
                const int idx = (half * 16 + i) * 128 + wt, row = 64 * wg + (idx >> 6);
                v[i] = row < n ? *reinterpret_cast<const uint32_t *>(
                                     q0 + (int64_t)(r0 + row) * a.ld_qkv + 2 * (idx & 63))
                               : 0u;
            }
#pragma unroll
            for (int i = 0; i < 16; i++) {
                const int idx = (half * 16 + i) * 128 + wt, row = 64 * wg + (idx >> 6);
                const int pair = idx & 63;
                *reinterpret_cast<uint32_t *>(q_s + sw128(row, pair >> 2, kRows) +
                                              (pair & 3) * 4) = v[i];
            }
        }
        fence_proxy_async();
        asm volatile("bar.sync %0, 128;" ::"r"(1 + wg) : "memory");
    }

    const float sscale = a.scale * 1.4426950408889634f;
    const uint32_t q_base = smem_u32(q_s) + 64 * wg * 128;
    float o[64], s[32];
#pragma unroll
    for (int i = 0; i < 64; i++)
        o[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; i++)
        s[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const int tig = lane & 3;

    for (int j = 0; j < n_chunks; j++) {
        const int st = j % kStages, c0 = j * kKeys;
        mbar_wait(&full[st], (unsigned)(j / kStages) & 1u);
        if (c0 <= wlast) { /* warpgroup-uniform */
            const uint32_t k_base = smem_u32(kv_s + st * 2 * kChunkBytes);
            const uint32_t v_base = k_base + kChunkBytes;
            wg_fence();
#pragma unroll
            for (int ks = 0; ks < kDh / 16; ks++) /* panel ks / 4, 32 bytes a step */
                wg_mma_s<T>(s,
                            wg_desc(q_base + (ks >> 2) * (kRows * 128) + (ks & 3) * 32, 16, 1024),
                            wg_desc(k_base + (ks >> 2) * (kKeys * 128) + (ks & 3) * 32, 16, 1024),
                            ks > 0);
            wg_commit();
            wg_wait_all();
            /* s[4 n + e]: row ra (e < 2) or rb, key c0 + 8 n + 2 tig + (e & 1) */
            if (c0 + kKeys - 1 > wfirst) {
#pragma unroll
                for (int nt = 0; nt < 8; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        if (c0 + 8 * nt + 2 * tig + (e & 1) > (e < 2 ? qa : qb))
                            s[4 * nt + e] = -INFINITY;
            }
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int i = 0; i < 32; i++)
                mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], s[i]);
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
                mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
                /* finite: every row sees key 0 in chunk 0 */
                const float mn = fmaxf(m[hr], mx[hr] * sscale);
                const float alpha = ex2_ftz(m[hr] - mn);
                m[hr] = mn;
                l[hr] *= alpha;
#pragma unroll
                for (int nt = 0; nt < 16; nt++) {
                    o[4 * nt + 2 * hr] *= alpha;
                    o[4 * nt + 2 * hr + 1] *= alpha;
                }
            }
#pragma unroll
            for (int i = 0; i < 32; i++) {
                const int hr = (i >> 1) & 1;
                const float p = ex2_ftz(fmaf(s[i], sscale, -m[hr]));
                l[hr] += p;
                s[i] = p;
            }
            /* k step kk of P V: keys 16 kk .. + 15 = S's n tiles 2 kk, 2 kk + 1 */
            uint32_t pf[4][4];
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                pf[kk][0] = ck_pair<T>::pack(s[8 * kk + 0], s[8 * kk + 1]);
                pf[kk][1] = ck_pair<T>::pack(s[8 * kk + 2], s[8 * kk + 3]);
                pf[kk][2] = ck_pair<T>::pack(s[8 * kk + 4], s[8 * kk + 5]);
                pf[kk][3] = ck_pair<T>::pack(s[8 * kk + 6], s[8 * kk + 7]);
            }
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
                wg_mma_o<T>(o, pf[kk], wg_desc(v_base + kk * 16 * 128, kKeys * 128, 1024));
            wg_commit();
            wg_wait_all();
        }
        __syncwarp();
        if (lane == 0)
            mbar_arrive(&empty[st]);
    }

    /* normalise and store rows < n: o[4 nt + e] is row ra / rb, column 8 nt + 2 tig + (e & 1) */
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        float L = l[hr] + __shfl_xor_sync(0xffffffffu, l[hr], 1);
        L += __shfl_xor_sync(0xffffffffu, L, 2);
        const float inv = L > 0.0f ? 1.0f / L : 0.0f;
        const int row = hr ? rb : ra;
        if (row < n) {
            T *orow = static_cast<T *>(a.out) + (int64_t)(r0 + row) * a.ld_out + (int64_t)h * kDh;
#pragma unroll
            for (int nt = 0; nt < 16; nt++)
                *reinterpret_cast<uint32_t *>(orow + 8 * nt + 2 * tig) =
                    ck_pair<T>::pack(o[4 * nt + 2 * hr] * inv, o[4 * nt + 2 * hr + 1] * inv);
        }
    }
#endif
}

template <class T> void launch(cudaStream_t s, const ck_attn_args *a) {
    (void)cudaFuncSetAttribute(prefill_wgmma_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               kSmem);
    prefill_wgmma_kernel<T><<<(unsigned)(a->n_tiles * a->H), kThreads, kSmem, s>>>(*a);
}

} // namespace

extern "C" int ck_attention_prefill_wgmma(cudaStream_t s, const ck_attn_args *a) {
    if (a->Dh != kDh || a->tile_rows != kRows || a->n_tiles <= 0)
        return 0;
    CK_DISPATCH(a->dt, launch<T>(s, a));
    return 1;
}
