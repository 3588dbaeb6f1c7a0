/*
 * rope.cu — rotary embedding of q and k inside the fused qkv rows (f32, in
 * place): one thread per (row, head, pair). The angle pos * inv_freq[i] is
 * computed in f32 like transformers, and sincosf (not the fast __sinf) keeps
 * it accurate at 32k positions, where the angle reaches ~3e4 radians.
 * NEOX pairs (i, i + Dh/2) (Hugging Face layout); otherwise (2i, 2i + 1)
 * (GGUF llama layout).
 */
#include "backend/cuda/common.cuh"

__global__ void rope_kernel(float *qkv, int64_t ld, const int32_t *pos, const float *inv_freq,
                            int neox, int n, int n_heads, int Dh) {
    pdl_wait();
    pdl_release();
    const int half = Dh / 2;
    const int64_t total = (int64_t)n * n_heads * half;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        int i = (int)(t % half);
        int64_t rh = t / half;
        int h = (int)(rh % n_heads);
        int64_t r = rh / n_heads;
        float s, c;
        sincosf((float)pos[r] * inv_freq[i], &s, &c);
        float *x = qkv + r * ld + (int64_t)h * Dh;
        int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        float x0 = x[a], x1 = x[b];
        x[a] = x0 * c - x1 * s;
        x[b] = x1 * c + x0 * s;
    }
}

extern "C" void ck_rope(cudaStream_t s, float *qkv, int64_t ld, const int32_t *pos,
                        const float *inv_freq, int neox, int n, int H, int Hkv, int Dh) {
    int64_t total = (int64_t)n * (H + Hkv) * (Dh / 2);
    if (total <= 0)
        return;
    unsigned blocks = ck_blocks(total, 256);
    blocks = blocks > 8192 ? 8192 : blocks;
    ck_launch(s, blocks, 256, 0, rope_kernel, qkv, ld, pos, inv_freq, neox, n, H + Hkv, Dh);
}
