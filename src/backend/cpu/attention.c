/*
 * attention.c — causal grouped-query attention over the paged KV cache.
 *
 * For row r (sequence s, position p) and query head h, with kv head
 * g = h / (H / Hkv):  out_h = softmax_t(q_h . k_t / sqrt(Dh)) . v_t  over
 * t = 0 .. p, reading k_t and v_t through s's block table. The step's own
 * K/V are already in the pool (kv_store ran first), so prefill chunks and
 * decode rows are the same computation. Work items are (row, kv head): the
 * H/Hkv query heads sharing a kv head are done together, walking the pages
 * of the sequence, so each cached K and V row is loaded (and widened) once
 * per item for up to 4 heads of the group (vec.h's _rows primitives).
 *
 * The cache may hold f32, f16 or bf16, or q8_0 / q4_0 blocks of 32 (K and V
 * each in its own type): the primitives read the page where it lies and
 * widen (or dequantize) in registers, so a 16-bit cache is no slower than an
 * f32 one. Arithmetic is f32 for every cache type (docs/journal/cpu.md has the
 * figures against the per-row conversion it replaced).
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
    const size_t k_row = c->k_row_bytes, v_row = c->v_row_bytes;
    const float scale = 1.0f / sqrtf((float)Dh);
    float *scores = c->att_scratch + (int64_t)ith * c->att_scratch_per_thread;
    const cpu_vec_ops *vec = cpu_vec_ops_get();
    const cpu_dot_rows_fn dot_rows = cpu_vec_dot_rows_for(vec, c->kv.kv_dtype);
    const cpu_axpy_rows_fn axpy_rows = cpu_vec_axpy_rows_for(vec, c->kv.kv_dtype_v);
    int64_t n_items = (int64_t)c->step->n_rows * Hkv;
    for (int64_t item = ith; item < n_items; item += nth) {
        int32_t r = (int32_t)(item / Hkv), g = (int32_t)(item % Hkv);
        int32_t s = c->row_seq[r], n_ctx = c->step->pos[r] + 1;
        const int32_t *bt = c->step->block_tables + (int64_t)s * c->kv.max_blocks_per_seq;
        const float *q = t->qkv + (int64_t)r * t->ld_qkv + (int64_t)g * grp * Dh; /* (grp, Dh) */
        float *o = t->out + (int64_t)r * t->ld_out + (int64_t)g * grp * Dh;       /* (grp, Dh) */
        /* scores (grp, n_ctx): q_j . k_i for the group's heads j, page by page */
        for (int32_t i0 = 0; i0 < n_ctx; i0 += BS) {
            const uint8_t *page = cpu_kv_page(c, c->k_pool, k_row, t->layer, bt[i0 / BS], g);
            int32_t n_in = n_ctx - i0 < BS ? n_ctx - i0 : BS;
            for (int32_t i = 0; i < n_in; i++)
                dot_rows(scores + i0 + i, n_ctx, q, Dh, grp, page + (size_t)i * k_row, Dh);
        }
        for (int32_t j = 0; j < grp; j++) {
            float *sc = scores + (int64_t)j * n_ctx;
            float mx = -INFINITY;
            for (int32_t i = 0; i < n_ctx; i++) {
                sc[i] *= scale;
                mx = sc[i] > mx ? sc[i] : mx;
            }
            float sum = 0.0f;
            for (int32_t i = 0; i < n_ctx; i++) {
                sc[i] = expf(sc[i] - mx);
                sum += sc[i];
            }
            float inv = 1.0f / sum;
            for (int32_t i = 0; i < n_ctx; i++)
                sc[i] *= inv;
            for (int32_t d = 0; d < Dh; d++)
                o[(int64_t)j * Dh + d] = 0.0f;
        }
        /* o_j += p_ji v_i, page by page */
        for (int32_t i0 = 0; i0 < n_ctx; i0 += BS) {
            const uint8_t *page = cpu_kv_page(c, c->v_pool, v_row, t->layer, bt[i0 / BS], g);
            int32_t n_in = n_ctx - i0 < BS ? n_ctx - i0 : BS;
            for (int32_t i = 0; i < n_in; i++)
                axpy_rows(o, Dh, scores + i0 + i, n_ctx, grp, page + (size_t)i * v_row, Dh);
        }
    }
}

void cpu_attention(hr_backend *b, int32_t layer, be_tensor *out, const be_tensor *qkv) {
    cpu_backend *c = (cpu_backend *)b;
    att_task t = {.c = c, .layer = layer, .out = out->data, .ld_out = out->ld,
                  .qkv = qkv->data, .ld_qkv = qkv->ld};
    cpu_pool_run(c->pool, att_items, &t);
}
