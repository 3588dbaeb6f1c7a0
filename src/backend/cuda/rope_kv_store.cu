/*
 * rope_kv_store.cu — rotary embedding of q and k inside the fused qkv rows
 * (ck, in place: the narrow projection output, rounded once more after the
 * rotation as transformers' bf16 rotation does), and the rotated k with v
 * into the paged pools (ck) at each row's slot, in one pass over the row.
 *
 * The angle pos * inv_freq[i] is computed in f32 like transformers, and
 * sincosf (not the fast __sinf) keeps it accurate at 32k positions, where
 * the angle reaches ~3e4 radians. NEOX pairs (i, i + Dh/2) (Hugging Face
 * layout); otherwise (2i, 2i + 1) (GGUF llama layout). Pool layout per
 * layer (NB, Hkv, BS, Dh): the page of (block, kv head) is BS * Dh
 * contiguous elements, so position offset o of kv head g in block b is at
 * ((b * Hkv + g) * BS + o) * Dh.
 *
 * A thread owns pair i of one row in every G-th head (q heads, then k heads
 * whose v it stores too): the sine and cosine are computed once per (row,
 * pair), not per head, and index arithmetic is 32-bit inside the row.
 * Blocks split a row's heads only when rows are too few to fill the GPU
 * (decode). One fused kernel replaces rope and the store as two (19 + 20
 * us a layer at 512 rows of Llama-2-7B on the H200, 15.8 fused); a thread
 * takes P pairs (4 when the head size allows) with 8- or 16-byte loads and
 * stores, and ROPE_ILP heads' loads are issued before any store. Two heads
 * a round under a 4-block bound (64 registers) beat four heads at 2 blocks
 * an SM: a 2048-row step 37.9 against 50.9 us. Figures:
 * docs/journal/prefill.md.
 *
 * A q8_0 cache: the rotation here without the store, then a kernel with a
 * warp per (row, kv head, K or V) quantizes the row's k (as rotated and
 * rounded) and v per 32 values, quant_quantize_q8_0's arithmetic, into
 * the codes and scales (ck_kv_pools).
 */
#include "backend/cuda/common.cuh"

/* Pairs P t .. P t + P - 1 of a head: NEOX, elements [P t, + P) and
 * [half + P t, + P) (two loads of P); else elements [2 P t, + 2 P) (one
 * load of 2 P), pair e at (2e, 2e + 1). */
template <typename T, int P, bool NEOX>
__device__ __forceinline__ void load_pairs(const T *x, int t, int half, float x0[P],
                                           float x1[P]) {
    if (NEOX) {
        ck_load_n<T, P>(x + P * t, x0);
        ck_load_n<T, P>(x + half + P * t, x1);
    } else {
        float f[2 * P];
        ck_load_n<T, 2 * P>(x + 2 * P * t, f);
#pragma unroll
        for (int e = 0; e < P; e++) {
            x0[e] = f[2 * e];
            x1[e] = f[2 * e + 1];
        }
    }
}

template <typename T, int P, bool NEOX>
__device__ __forceinline__ void store_pairs(T *x, int t, int half, const float y0[P],
                                            const float y1[P]) {
    if (NEOX) {
        ck_store_n<T, P>(x + P * t, y0);
        ck_store_n<T, P>(x + half + P * t, y1);
    } else {
        float f[2 * P];
#pragma unroll
        for (int e = 0; e < P; e++) {
            f[2 * e] = y0[e];
            f[2 * e + 1] = y1[e];
        }
        ck_store_n<T, 2 * P>(x + 2 * P * t, f);
    }
}

/* ILP heads per round of loads. At P = 4 a round of 4 heads held ~128
 * registers (2 blocks an SM); 2 heads in at most 64 registers give 4 (the
 * gptj pairing needs a few more: 3 blocks, 80 registers, without spills;
 * so does NEOX in code for sm_8x, which spilled 28-32 bytes at 64) */
template <int P, bool NEOX> struct rope_cfg {
    static constexpr int ilp = P == 4 ? 2 : 4;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    static constexpr int min_blocks = P == 4 ? 3 : 1;
#else
    static constexpr int min_blocks = P == 4 ? (NEOX ? 4 : 3) : 1;
#endif
};

/* STORE: k and v into ck pools (a q8_0 cache: kv_q8_store_kernel does) */
template <typename T, int P, bool NEOX, bool STORE>
__global__ void __launch_bounds__(256, rope_cfg<P, NEOX>::min_blocks)
    rope_kv_store_kernel(T *qkv, int64_t ld, T *k_pool, T *v_pool, const int32_t *pos,
                         const int32_t *slot, const float *inv_freq, int H, int Hkv, int Dh,
                         int BS, int head_blocks) {
    constexpr int ROPE_ILP = rope_cfg<P, NEOX>::ilp;
    pdl_wait();
    pdl_release();
    const int half = Dh / 2, per_head = half / P; /* threads of one head */
    const int t = (int)threadIdx.x % per_head, group = (int)threadIdx.x / per_head;
    const int groups = (int)blockDim.x / per_head;
    const int64_t r = blockIdx.x / head_blocks;
    const int hb = (int)(blockIdx.x % head_blocks);
    float sn[P], cs[P];
#pragma unroll
    for (int e = 0; e < P; e++)
        sincosf((float)pos[r] * inv_freq[P * t + e], &sn[e], &cs[e]);
    T *row = qkv + r * ld;
    const int64_t sl = slot[r];
    const int64_t page0 = (sl / BS * Hkv) * BS + sl % BS; /* (block, kv head 0, offset) */
    const int stride = groups * head_blocks;
    /* ROPE_ILP heads at a time, all their loads before any store: the
     * stores to the row could alias the next head's loads as far as the
     * compiler knows, so a plain loop waits out one load latency per head */
    for (int h0 = hb * groups + group; h0 < H + Hkv; h0 += ROPE_ILP * stride) {
        float x0[ROPE_ILP][P], x1[ROPE_ILP][P], v0[ROPE_ILP][P], v1[ROPE_ILP][P];
#pragma unroll
        for (int u = 0; u < ROPE_ILP; u++) {
            const int h = h0 + u * stride;
            if (h < H + Hkv) {
                load_pairs<T, P, NEOX>(row + h * Dh, t, half, x0[u], x1[u]);
                if (h >= H) /* a k head: its v goes to the pool with it */
                    load_pairs<T, P, NEOX>(row + (h + Hkv) * Dh, t, half, v0[u], v1[u]);
            }
        }
#pragma unroll
        for (int u = 0; u < ROPE_ILP; u++) {
            const int h = h0 + u * stride;
            if (h >= H + Hkv)
                break;
            float y0[P], y1[P];
#pragma unroll
            for (int e = 0; e < P; e++) {
                y0[e] = x0[u][e] * cs[e] - x1[u][e] * sn[e];
                y1[e] = x1[u][e] * cs[e] + x0[u][e] * sn[e];
            }
            store_pairs<T, P, NEOX>(row + h * Dh, t, half, y0, y1);
            if (STORE && h >= H) {
                const int64_t at = (page0 + (int64_t)(h - H) * BS) * Dh;
                store_pairs<T, P, NEOX>(k_pool + at, t, half, y0, y1);
                store_pairs<T, P, NEOX>(v_pool + at, t, half, v0[u], v1[u]);
            }
        }
    }
}

/* q8_0 pools: one warp per (row, kv head, K or V), lane i quantizing value
 * i of each 32: amax over the warp, then quant_quantize_q8_0's arithmetic
 * (d = amax / 127, code = roundf(x / d) by the f32 inverse, the scale
 * stored as f16) on the row's k (rotated, rounded to ck) and v. */
template <typename T>
__global__ void __launch_bounds__(256)
    kv_q8_store_kernel(const T *qkv, int64_t ld, ck_kv_pools kv, const int32_t *slot, int n,
                       int H, int Hkv, int Dh, int BS) {
    pdl_wait();
    pdl_release();
    const int lane = (int)threadIdx.x & 31;
    const int64_t item = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (item >= (int64_t)n * Hkv * 2)
        return;
    const int64_t r = item / (2 * Hkv);
    const int g = (int)(item % (2 * Hkv)) / 2, is_v = (int)(item % 2);
    const T *x = qkv + r * ld + (int64_t)(H + g + (is_v ? Hkv : 0)) * Dh;
    const int64_t sl = slot[r];
    const int64_t at = (((sl / BS) * Hkv + g) * BS + sl % BS) * Dh; /* element offset */
    int8_t *codes = static_cast<int8_t *>(is_v ? kv.v : kv.k) + at;
    __half *scales = static_cast<__half *>(is_v ? kv.v_scale : kv.k_scale) + at / 32;
    for (int b = 0; b < Dh / 32; b++) {
        const float v = ck_to_f32(x[32 * b + lane]);
        float amax = fabsf(v);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        const float q = roundf(__fmul_rn(v, id));
        codes[32 * b + lane] = isfinite(q) ? (int8_t)fmaxf(fminf(q, 127.0f), -127.0f) : 0;
        if (lane == 0)
            scales[b] = __float2half_rn(d);
    }
}

template <typename T, int P>
static void rope_launch(cudaStream_t s, T *qkv, int64_t ld, T *k_pool, T *v_pool,
                        const int32_t *pos, const int32_t *slot, const float *inv_freq, int neox,
                        int n, int H, int Hkv, int Dh, int BS) {
    const int per_head = Dh / 2 / P;
    const int groups = per_head >= 256 ? 1 : 256 / per_head; /* threads <= 256 */
    const int max_hb = (H + Hkv + groups - 1) / groups;
    int head_blocks = (264 + n - 1) / n; /* about two blocks per SM of an H100/H200 */
    head_blocks = head_blocks > max_hb ? max_hb : head_blocks;
    const unsigned grid = (unsigned)((int64_t)n * head_blocks);
    const unsigned threads = (unsigned)(per_head * groups);
    if (neox && k_pool)
        ck_launch(s, grid, threads, 0, rope_kv_store_kernel<T, P, true, true>, qkv, ld, k_pool,
                  v_pool, pos, slot, inv_freq, H, Hkv, Dh, BS, head_blocks);
    else if (neox)
        ck_launch(s, grid, threads, 0, rope_kv_store_kernel<T, P, true, false>, qkv, ld, k_pool,
                  v_pool, pos, slot, inv_freq, H, Hkv, Dh, BS, head_blocks);
    else if (k_pool)
        ck_launch(s, grid, threads, 0, rope_kv_store_kernel<T, P, false, true>, qkv, ld, k_pool,
                  v_pool, pos, slot, inv_freq, H, Hkv, Dh, BS, head_blocks);
    else
        ck_launch(s, grid, threads, 0, rope_kv_store_kernel<T, P, false, false>, qkv, ld,
                  k_pool, v_pool, pos, slot, inv_freq, H, Hkv, Dh, BS, head_blocks);
}

/* P = 4 pairs a thread when every access stays aligned for it (a gptj
 * thread loads 2 P elements, a neox thread P twice), else 2, else 1 */
extern "C" void ck_rope_kv_store(cudaStream_t s, void *qkv, int64_t ld, ck_kv_pools kv,
                                 ck_dtype dt, const int32_t *pos, const int32_t *slot,
                                 const float *inv_freq, int neox, int n, int H, int Hkv, int Dh,
                                 int BS) {
    const int half = Dh / 2;
    if (n <= 0 || half <= 0)
        return;
    /* a q8_0 cache: the rotation alone here, the store after it */
    void *k_pool = kv.q8 ? NULL : kv.k, *v_pool = kv.q8 ? NULL : kv.v;
    const uintptr_t base = (uintptr_t)qkv | (uintptr_t)k_pool | (uintptr_t)v_pool;
    auto fits = [&](int P) { /* element offsets and bases multiples of the widest access */
        const int w = neox ? P : 2 * P;
        return half % P == 0 && Dh % w == 0 && ld % w == 0 && base % (2 * (uintptr_t)w) == 0;
    };
    const int P = fits(4) ? 4 : fits(2) ? 2 : 1;
    CK_DISPATCH(dt, {
        T *q = (T *)qkv, *kp = (T *)k_pool, *vp = (T *)v_pool;
        if (P == 4)
            rope_launch<T, 4>(s, q, ld, kp, vp, pos, slot, inv_freq, neox, n, H, Hkv, Dh, BS);
        else if (P == 2)
            rope_launch<T, 2>(s, q, ld, kp, vp, pos, slot, inv_freq, neox, n, H, Hkv, Dh, BS);
        else
            rope_launch<T, 1>(s, q, ld, kp, vp, pos, slot, inv_freq, neox, n, H, Hkv, Dh, BS);
        if (kv.q8) {
            const int64_t warps = (int64_t)n * Hkv * 2;
            ck_launch(s, (unsigned)((warps + 7) / 8), 256, 0, kv_q8_store_kernel<T>,
                      (const T *)q, ld, kv, slot, n, H, Hkv, Dh, BS);
        }
    });
}
