/*
 * kv_store.cu — the step's K and V (f32 in qkv) into the paged pools (ck) at
 * each row's slot. Pool layout per layer (NB, Hkv, BS, Dh): the page of
 * (block, kv head) is BS * Dh contiguous elements, so position offset o of
 * kv head g in block b is at ((b * Hkv + g) * BS + o) * Dh.
 */
#include "backend/cuda/common.cuh"

template <typename T>
__global__ void kv_store_kernel(const float *qkv, int64_t ld, T *k_pool, T *v_pool,
                                const int32_t *slot, int n, int H, int Hkv, int Dh, int BS) {
    pdl_wait();
    pdl_release();
    const int64_t per_row = (int64_t)Hkv * Dh;
    const int64_t total = (int64_t)n * per_row;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = t / per_row, e = t % per_row;
        int g = (int)(e / Dh), d = (int)(e % Dh);
        int64_t sl = slot[r];
        int64_t block = sl / BS, off = sl % BS;
        int64_t at = ((block * Hkv + g) * BS + off) * Dh + d;
        const float *row = qkv + r * ld + (int64_t)H * Dh;
        ck_from_f32(&k_pool[at], row[e]);
        ck_from_f32(&v_pool[at], row[per_row + e]);
    }
}

extern "C" void ck_kv_store(cudaStream_t s, const float *qkv, int64_t ld, void *k_pool,
                            void *v_pool, ck_dtype dt, const int32_t *slot, int n, int H, int Hkv,
                            int Dh, int BS) {
    int64_t total = (int64_t)n * Hkv * Dh;
    if (total <= 0)
        return;
    unsigned blocks = ck_blocks(total, 256);
    blocks = blocks > 8192 ? 8192 : blocks;
    CK_DISPATCH(dt, ck_launch(s, blocks, 256, 0, kv_store_kernel<T>, qkv, ld, (T *)k_pool,
                              (T *)v_pool, slot, n, H, Hkv, Dh, BS));
}
