/*
 * kv_store.c — write the step's K and V rows into the paged KV pool, in the
 * pool's type: f32, f16 or bf16 (rounded to nearest even), or q8_0 / q4_0
 * (each row of Dh values quantized as Dh/32 GGUF blocks by the reference
 * quantizer, quant_quantize_row: the bytes llama.cpp's q8_0 / q4_0 cache
 * holds). Attention reads the pool back in that type itself (vec.h widens,
 * or dequantizes, in registers), so there is no conversion the other way.
 *
 * Quantizing here is per row and cheap next to the matmuls: Dh values per
 * (row, kv head), once per step.
 *
 * Row r of qkv holds [q (H*Dh) | k (Hkv*Dh) | v (Hkv*Dh)]; its slot
 * (block * BS + offset) was computed by the engine from the sequence's block
 * table. Each kv head's Dh values land in that head's page of the block.
 */
#include "backend/cpu/cpu_backend.h"
#include "quant/quant.h"
#include "util/fp16.h"

#include <string.h>

void cpu_kv_from_f32(hr_dtype t, const float *src, uint8_t *dst, int64_t n) {
    if (t == HR_DTYPE_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
    } else if (t == HR_DTYPE_F16) {
        uint16_t *d = (uint16_t *)dst;
        for (int64_t i = 0; i < n; i++)
            d[i] = hr_f32_to_f16(src[i]);
    } else if (t == HR_DTYPE_BF16) {
        uint16_t *d = (uint16_t *)dst;
        for (int64_t i = 0; i < n; i++)
            d[i] = hr_f32_to_bf16(src[i]);
    } else { /* q8_0, q4_0: kv_alloc took no other type */
        quant_quantize_row(t, src, dst, n);
    }
}

void cpu_kv_store(hr_backend *b, int32_t layer, const be_tensor *qkv) {
    cpu_backend *c = (cpu_backend *)b;
    const hr_model_info *in = b->info;
    const int32_t Dh = in->head_dim, BS = c->kv.block_size;
    const int64_t k_off = (int64_t)in->n_head * Dh, v_off = k_off + (int64_t)in->n_head_kv * Dh;
    for (int32_t r = 0; r < c->step->n_rows; r++) {
        int32_t slot = c->step->slot[r];
        int32_t block = slot / BS, off = slot % BS;
        const float *row = (const float *)qkv->data + (int64_t)r * qkv->ld;
        for (int32_t g = 0; g < in->n_head_kv; g++) {
            cpu_kv_from_f32(c->kv.kv_dtype, row + k_off + (int64_t)g * Dh,
                            cpu_kv_page(c, c->k_pool, c->k_row_bytes, layer, block, g) +
                                (size_t)off * c->k_row_bytes,
                            Dh);
            cpu_kv_from_f32(c->kv.kv_dtype_v, row + v_off + (int64_t)g * Dh,
                            cpu_kv_page(c, c->v_pool, c->v_row_bytes, layer, block, g) +
                                (size_t)off * c->v_row_bytes,
                            Dh);
        }
    }
}

void cpu_rope_kv_store(hr_backend *b, int32_t layer, be_tensor *qkv, const float *inv_freq,
                       rope_style style, int32_t n_head, int32_t n_head_kv, int32_t head_dim) {
    cpu_rope(b, qkv, inv_freq, style, n_head, n_head_kv, head_dim);
    cpu_kv_store(b, layer, qkv);
}
