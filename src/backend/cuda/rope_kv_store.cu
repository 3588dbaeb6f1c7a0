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
 * (decode). H200, Llama-2-7B, 2026-11-30: as two kernels, a thread per
 * (row, head, pair) and one per element with 64-bit division, rope and the
 * store took 19 + 20 us a layer at 512 rows; the per-pair rope alone 14;
 * the fused kernel 19.9, and 15.8 with four heads' loads issued before any
 * store (ROPE_ILP), f32 qkv.
 */
#include "backend/cuda/common.cuh"

#define ROPE_ILP 4

template <typename T>
__global__ void rope_kv_store_kernel(T *qkv, int64_t ld, T *k_pool, T *v_pool,
                                     const int32_t *pos, const int32_t *slot,
                                     const float *inv_freq, int neox, int H, int Hkv, int Dh,
                                     int BS, int head_blocks) {
    pdl_wait();
    pdl_release();
    const int half = Dh / 2;
    const int i = (int)threadIdx.x % half, group = (int)threadIdx.x / half;
    const int groups = (int)blockDim.x / half;
    const int64_t r = blockIdx.x / head_blocks;
    const int hb = (int)(blockIdx.x % head_blocks);
    float s, c;
    sincosf((float)pos[r] * inv_freq[i], &s, &c);
    T *row = qkv + r * ld;
    const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    const int64_t sl = slot[r];
    const int64_t page0 = (sl / BS * Hkv) * BS + sl % BS; /* (block, kv head 0, offset) */
    const int stride = groups * head_blocks;
    /* ROPE_ILP heads at a time, all their loads before any store: the
     * stores to the row could alias the next head's loads as far as the
     * compiler knows, so a plain loop waits out one load latency per head */
    for (int h0 = hb * groups + group; h0 < H + Hkv; h0 += ROPE_ILP * stride) {
        float x0[ROPE_ILP], x1[ROPE_ILP], v0[ROPE_ILP], v1[ROPE_ILP];
#pragma unroll
        for (int u = 0; u < ROPE_ILP; u++) {
            const int h = h0 + u * stride;
            x0[u] = x1[u] = v0[u] = v1[u] = 0.0f;
            if (h < H + Hkv) {
                const T *x = row + h * Dh;
                x0[u] = ck_to_f32(x[a]);
                x1[u] = ck_to_f32(x[b]);
                if (h >= H) { /* a k head: its v goes to the pool with it */
                    v0[u] = ck_to_f32(x[Hkv * Dh + a]);
                    v1[u] = ck_to_f32(x[Hkv * Dh + b]);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < ROPE_ILP; u++) {
            const int h = h0 + u * stride;
            if (h >= H + Hkv)
                break;
            T *x = row + h * Dh;
            const float y0 = x0[u] * c - x1[u] * s, y1 = x1[u] * c + x0[u] * s;
            ck_from_f32(&x[a], y0);
            ck_from_f32(&x[b], y1);
            if (h >= H) {
                const int64_t at = (page0 + (int64_t)(h - H) * BS) * Dh;
                ck_from_f32(&k_pool[at + a], y0);
                ck_from_f32(&k_pool[at + b], y1);
                ck_from_f32(&v_pool[at + a], v0[u]);
                ck_from_f32(&v_pool[at + b], v1[u]);
            }
        }
    }
}

extern "C" void ck_rope_kv_store(cudaStream_t s, void *qkv, int64_t ld, void *k_pool,
                                 void *v_pool, ck_dtype dt, const int32_t *pos,
                                 const int32_t *slot, const float *inv_freq, int neox, int n,
                                 int H, int Hkv, int Dh, int BS) {
    const int half = Dh / 2;
    if (n <= 0 || half <= 0)
        return;
    const int groups = half >= 256 ? 1 : 256 / half; /* threads: half * groups <= 256 */
    const int max_hb = (H + Hkv + groups - 1) / groups;
    int head_blocks = (264 + n - 1) / n; /* about two blocks per SM of an H100/H200 */
    head_blocks = head_blocks > max_hb ? max_hb : head_blocks;
    const unsigned grid = (unsigned)((int64_t)n * head_blocks);
    CK_DISPATCH(dt, ck_launch(s, grid, (unsigned)(half * groups), 0, rope_kv_store_kernel<T>,
                              (T *)qkv,                              ld, (T *)k_pool, (T *)v_pool, pos, slot, inv_freq, neox, H, Hkv,
                              Dh, BS, head_blocks));
}
