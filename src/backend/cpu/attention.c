/*
 * attention.c — causal grouped-query attention over the paged KV cache.
 *
 * For row r (sequence s, position p) and query head h, with kv head
 * g = h / (H / Hkv):  out_h = softmax_t(q_h . k_t / sqrt(Dh)) . v_t  over
 * t = 0 .. p, reading k_t and v_t through s's block table. The step's own
 * K/V are already in the pool (kv_store ran first), so prefill chunks and
 * decode rows are the same computation. Work items are (row, kv head): the
 * H/Hkv query heads sharing a kv head are done together, so each K and V
 * element is converted once and used by the whole group.
 *
 * Softmax in f32 after subtracting the row maximum, as transformers' eager
 * attention does (softmax in float32).
 */
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/vec.h"

#include <math.h>

typedef struct {
    cpu_backend *c;
    int32_t layer;
    float *out;
    int64_t ld_out;
    const float *qkv;
    int64_t ld_qkv;
} att_task;

static void att_items(void *ctx, int ith, int nth) {
    const att_task *t = ctx;
    const cpu_backend *c = t->c;
    const hr_model_info *in = c->base.info;
    const int32_t H = in->n_head, Hkv = in->n_head_kv, Dh = in->head_dim;
    const int32_t grp = H / Hkv, BS = c->kv.block_size;
    const float scale = 1.0f / sqrtf((float)Dh);
    float *scores = c->att_scratch + (int64_t)ith * c->att_scratch_per_thread;
    float *kv = scores + (int64_t)grp * c->kv.max_blocks_per_seq * BS; /* one K or V row */
    const cpu_vec_ops *vec = cpu_vec_ops_get();
    int64_t n_items = (int64_t)c->step->n_rows * Hkv;
    for (int64_t item = ith; item < n_items; item += nth) {
        int32_t r = (int32_t)(item / Hkv), g = (int32_t)(item % Hkv);
        int32_t s = c->row_seq[r], n_ctx = c->step->pos[r] + 1;
        const int32_t *bt = c->step->block_tables + (int64_t)s * c->kv.max_blocks_per_seq;
        const float *q = t->qkv + (int64_t)r * t->ld_qkv + (int64_t)g * grp * Dh;
        /* scores[j][i] for the grp heads j, positions i */
        for (int32_t i = 0; i < n_ctx; i++) {
            const uint8_t *page = cpu_kv_page(c, c->k_pool, t->layer, bt[i / BS], g);
            cpu_kv_to_f32(c->kv.kv_dtype, page + (size_t)(i % BS) * Dh * c->kv_elem_bytes, kv,
                          Dh);
            for (int32_t j = 0; j < grp; j++)
                scores[(int64_t)j * n_ctx + i] = vec->dot(q + (int64_t)j * Dh, kv, Dh) * scale;
        }
        for (int32_t j = 0; j < grp; j++) {
            float *sc = scores + (int64_t)j * n_ctx;
            float mx = sc[0];
            for (int32_t i = 1; i < n_ctx; i++)
                mx = sc[i] > mx ? sc[i] : mx;
            float sum = 0.0f;
            for (int32_t i = 0; i < n_ctx; i++) {
                sc[i] = expf(sc[i] - mx);
                sum += sc[i];
            }
            float inv = 1.0f / sum;
            for (int32_t i = 0; i < n_ctx; i++)
                sc[i] *= inv;
            float *o = t->out + (int64_t)r * t->ld_out + ((int64_t)g * grp + j) * Dh;
            for (int32_t d = 0; d < Dh; d++)
                o[d] = 0.0f;
        }
        for (int32_t i = 0; i < n_ctx; i++) {
            const uint8_t *page = cpu_kv_page(c, c->v_pool, t->layer, bt[i / BS], g);
            cpu_kv_to_f32(c->kv.kv_dtype, page + (size_t)(i % BS) * Dh * c->kv_elem_bytes, kv,
                          Dh);
            for (int32_t j = 0; j < grp; j++)
                vec->axpy(t->out + (int64_t)r * t->ld_out + ((int64_t)g * grp + j) * Dh,
                          scores[(int64_t)j * n_ctx + i], kv, Dh);
        }
    }
}

void cpu_attention(hr_backend *b, int32_t layer, be_tensor *out, const be_tensor *qkv) {
    cpu_backend *c = (cpu_backend *)b;
    att_task t = {.c = c, .layer = layer, .out = out->data, .ld_out = out->ld,
                  .qkv = qkv->data, .ld_qkv = qkv->ld};
    cpu_pool_run(c->pool, att_items, &t);
}
