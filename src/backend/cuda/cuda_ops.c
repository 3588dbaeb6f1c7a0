/*
 * cuda_ops.c — the ops table's ops: each enqueues its kernel (the .cu file
 * of the same name, behind kernels.h) on the backend's stream, records
 * itself into the persistent step's program instead when the step runs as
 * one kernel (cuda_pstep.c), and does nothing while a captured graph
 * replays (cuda_graph.c).
 *
 * Errors inside ops (which return void) are kept and reported by end_step.
 */
#include "backend/cuda/cuda_internal.h"

#include "backend/sizes.h"

#include <math.h>

/* The shortest flash-decoding split: one round of the decode kernel's 4
 * warps x 32 positions. At 64, a short context's blocks ran 2 of their 4
 * warps (docs/journal/attention.md). */
#define SPLIT_LEN 128

#define OP_PRELUDE(c)                   \
    if ((c)->replaying || (c)->step_status != HR_OK) \
        return

/* Where an op's work starts on the stream, for HEADROOM_CUDA_PROFILE (not
 * while capturing: a graph's ops are not timed one by one). */
void cuda_mark(cuda_backend *c, const char *op, int64_t n_rows, int64_t k) {
    if (c->prof && !c->capturing)
        cuda_profile_mark(c->prof, c->stream, op, c->n_rows, n_rows, k);
}

void cuda_op_error(cuda_backend *c, const char *op) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess && c->step_status == HR_OK)
        c->step_status = hr_err_set(&c->step_err, HR_ERR_DEVICE, "cuda: %s: %s", op,
                                    cudaGetErrorString(e));
}

const int32_t *cuda_meta(const cuda_backend *c, size_t off) { return c->d_meta + off; }

void cuda_embed(hr_backend *b, be_tensor *x, const be_weight *tok_embd) {
    cuda_backend *c = (cuda_backend *)b;
    OP_PRELUDE(c);
    if (c->pstep) {
        ck_pstep_op *op = cuda_pstep_add(c, CKP_EMBED);
        if (op) {
            op->embed.table = tok_embd->w;
            op->embed.token = cuda_meta(c, c->o_tok);
            op->embed.x = x->data;
            op->embed.D = (int32_t)tok_embd->k;
        }
        return;
    }
    cuda_mark(c, "embed", 0, 0);
    if (tok_embd->n_runs > 0)
        ck_embed_packed(c->stream, x->data, x->ld, &tok_embd->run[0], cuda_meta(c, c->o_tok),
                        c->n_rows);
    else
        ck_embed(c->stream, x->data, x->ld, tok_embd->w, c->dt, cuda_meta(c, c->o_tok),
                 c->n_rows, (int)tok_embd->k);
    cuda_op_error(c, "embed");
}

void cuda_rmsnorm(hr_backend *b, be_tensor *y, const be_tensor *x, const be_vector *w, float eps,
                  int64_t n) {
    cuda_backend *c = (cuda_backend *)b;
    OP_PRELUDE(c);
    if (c->pstep) {
        cuda_pstep_norm(c, x, NULL, y, w, eps);
        return;
    }
    cuda_mark(c, "rmsnorm", 0, 0);
    ck_add_rmsnorm(c->stream, x->data, x->ld, NULL, false, 0, y->data, y->ld, c->dt, w->data,
                   eps, (int)n, (int)x->cols);
    cuda_op_error(c, "rmsnorm");
}

void cuda_add_rmsnorm(hr_backend *b, be_tensor *x, const be_tensor *dx, be_tensor *y,
                      const be_vector *w, float eps) {
    cuda_backend *c = (cuda_backend *)b;
    OP_PRELUDE(c);
    if (c->pstep) {
        cuda_pstep_norm(c, x, dx, y, w, eps);
        return;
    }
    cuda_mark(c, "add_rmsnorm", 0, 0);
    ck_add_rmsnorm(c->stream, x->data, x->ld, dx->data, dx->narrow, dx->ld, y->data, y->ld,
                   c->dt, w->data, eps, c->n_rows, (int)x->cols);
    cuda_op_error(c, "add_rmsnorm");
}

/* y = x . W^T on a packed weight: steps of up to SIZES_CUDA_PACKED_GEMV_ROWS
 * rows through the packed GEMV (dp4a on 8-bit activations, W read once);
 * up to c->packed_mma_rows rows through the tensor-core kernel that
 * decodes W into its fragments (W read once, x as it is); longer steps
 * expand chunks of rows into the 16-bit scratch for cuBLASLt. */
static void matmul_packed(cuda_backend *c, be_tensor *y, const be_tensor *x, const be_weight *w,
                          int64_t n) {
    const size_t y_elem = y->narrow ? 2 : 4;
    cuda_mark(c,
              n <= SIZES_CUDA_PACKED_GEMV_ROWS ? "gemv_packed"
              : n <= c->packed_mma_rows        ? "mma_packed"
                                               : "gemm_packed",
              w->n_rows, w->k);
    if (!c->xq || !c->dequant) {
        c->step_status = hr_err_set(&c->step_err, HR_ERR_INVALID,
                                    "cuda: a packed weight without the planned workspace");
        return;
    }
    if (n <= SIZES_CUDA_PACKED_GEMV_ROWS) {
        ck_quantize_x(c->stream, c->xq, x->data, x->ld, c->dt, (int)n, (int)w->k);
        for (int i = 0; i < w->n_runs; i++)
            ck_gemv_packed(c->stream, (uint8_t *)y->data + (size_t)w->run_row0[i] * y_elem,
                           y->narrow, y->ld, c->xq, &w->run[i],
                           w->bias ? w->bias + w->run_row0[i] : NULL, c->dt, (int)n);
        return;
    }
    if (n <= c->packed_mma_rows) {
        for (int i = 0; i < w->n_runs; i++)
            ck_gemm_packed(c->stream, (uint8_t *)y->data + (size_t)w->run_row0[i] * y_elem,
                           y->narrow, y->ld, x->data, x->ld, &w->run[i],
                           w->bias ? w->bias + w->run_row0[i] : NULL, c->dt, (int)n);
        return;
    }
    const int64_t chunk = (int64_t)(SIZES_CUDA_DEQUANT_SCRATCH / ((uint64_t)w->k * 2));
    for (int i = 0; i < w->n_runs; i++)
        for (int64_t r0 = 0; r0 < w->run[i].N; r0 += chunk) {
            const int64_t r1 = r0 + chunk < w->run[i].N ? r0 + chunk : w->run[i].N;
            ck_dequant_packed(c->stream, c->dequant, w->k, c->dt, &w->run[i], r0, r1);
            hr_status s = cuda_gemm_run(
                c->gemm, c->stream, (uint8_t *)y->data + (size_t)(w->run_row0[i] + r0) * y_elem,
                y->narrow, y->ld, x->data, x->ld, c->dequant, c->dt, (int)n, (int)(r1 - r0),
                (int)w->k, &c->step_err);
            if (s != HR_OK) {
                c->step_status = s;
                return;
            }
        }
    if (w->bias)
        ck_add_bias(c->stream, y->data, y->narrow, y->ld, w->bias, (int)n, (int)w->n_rows, c->dt);
}

void cuda_matmul(hr_backend *b, be_tensor *y, const be_tensor *x, const be_weight *w, int64_t n) {
    cuda_backend *c = (cuda_backend *)b;
    OP_PRELUDE(c);
    if (n <= 0)
        return;
    if (c->pstep) {
        cuda_pstep_gemv(c, y, x, w);
        return;
    }
    if (w->n_runs > 0) {
        matmul_packed(c, y, x, w, n);
        cuda_op_error(c, "matmul");
        return;
    }
    cuda_mark(c, n <= CK_GEMV_MAX_ROWS ? "gemv" : "gemm", w->n_rows, w->k);
    if (n <= CK_GEMV_MAX_ROWS) {
        ck_gemv(c->stream, y->data, y->narrow, y->ld, x->data, x->ld, w->w, w->bias, c->dt,
                (int)n, (int)w->n_rows, (int)w->k);
    } else {
        hr_status s = cuda_gemm_run(c->gemm, c->stream, y->data, y->narrow, y->ld, x->data,
                                    x->ld, w->w, c->dt, (int)n, (int)w->n_rows, (int)w->k,
                                    &c->step_err);
        if (s != HR_OK) {
            c->step_status = s;
            return;
        }
        if (w->bias) /* narrow (qkv): a second rounding; the GEMV rounds once */
            ck_add_bias(c->stream, y->data, y->narrow, y->ld, w->bias, (int)n, (int)w->n_rows,
                        c->dt);
    }
    cuda_op_error(c, "matmul");
}

/* layer's pools as the kernels take them */
static ck_kv_pools cuda_kv_pools(const cuda_backend *c, int32_t layer) {
    const size_t off = (size_t)layer * c->kv_layer_bytes;
    ck_kv_pools kv = {.k = c->k_pool + off, .v = c->v_pool + off, .q8 = c->kv_q8};
    if (c->kv_q8) {
        kv.k_scale = c->k_pool + off + c->kv_scale_at;
        kv.v_scale = c->v_pool + off + c->kv_scale_at;
    }
    return kv;
}

void cuda_rope_kv_store(hr_backend *b, int32_t layer, be_tensor *qkv, const float *inv_freq,
                        rope_style style, int32_t n_head, int32_t n_head_kv, int32_t head_dim) {
    (void)inv_freq; /* the device copy made at setup */
    cuda_backend *c = (cuda_backend *)b;
    OP_PRELUDE(c);
    if (c->pstep) { /* the attention that follows rotates and stores */
        c->pending_rope.qkv = qkv->data;
        c->pending_rope.neox = style == ROPE_STYLE_NEOX;
        return;
    }
    cuda_mark(c, "rope_kv_store", 0, 0);
    ck_rope_kv_store(c->stream, qkv->data, qkv->ld, cuda_kv_pools(c, layer), c->dt,
                     cuda_meta(c, c->o_pos), cuda_meta(c, c->o_slot), c->inv_freq,
                     style == ROPE_STYLE_NEOX, c->n_rows, n_head, n_head_kv, head_dim,
                     c->kv.block_size);
    cuda_op_error(c, "rope_kv_store");
}

/* Flash-decoding splits of this step. The grid is n_splits x decode rows x
 * kv heads whatever the contexts (graph capture), and a split that a short
 * context leaves empty still costs its block a launch; a split also costs
 * its q loads, merge and partial. So a step takes only as many splits as
 * bring its blocks to c->dec_fill: with many rows, one split each (the
 * block walks the whole context). */
static int dec_splits(const cuda_backend *c, const hr_model_info *in) {
    const int per_split = c->n_dec * in->n_head_kv;
    if (c->dec_fill <= 0 || per_split <= 0)
        return c->n_splits;
    const int n = (c->dec_fill + per_split - 1) / per_split; /* >= 1 */
    return n < c->n_splits ? n : c->n_splits;
}

void cuda_attention(hr_backend *b, int32_t layer, be_tensor *out, const be_tensor *qkv) {
    cuda_backend *c = (cuda_backend *)b;
    OP_PRELUDE(c);
    const hr_model_info *in = b->info;
    size_t off = (size_t)layer * c->kv_layer_bytes;
    if (c->pstep) {
        if (c->pending_rope.qkv != qkv->data) {
            if (c->step_status == HR_OK)
                c->step_status = hr_err_set(&c->step_err, HR_ERR_INVALID,
                                            "cuda: persistent step: attention without rotations");
            return;
        }
        c->pending_rope.qkv = NULL;
        ck_pstep_op *op = cuda_pstep_add(c, CKP_ATTN);
        if (op) {
            op->attn.inv_freq = c->inv_freq;
            op->attn.neox = c->pending_rope.neox;
            op->attn.qkv = qkv->data;
            op->attn.out = out->data;
            op->attn.k_pool = c->k_pool + off;
            op->attn.v_pool = c->v_pool + off;
            op->attn.pos = cuda_meta(c, c->o_pos);
            op->attn.seq = cuda_meta(c, c->o_seq);
            op->attn.block_tables = cuda_meta(c, c->o_bt);
            op->attn.parts = c->d_parts;
            op->attn.scale = 1.0f / sqrtf((float)in->head_dim);
            op->attn.max_blocks = c->kv.max_blocks_per_seq;
            op->attn.max_splits = c->n_splits;
            op->attn.H = in->n_head;
            op->attn.Hkv = in->n_head_kv;
            op->attn.Dh = in->head_dim;
            op->attn.BS = c->kv.block_size;
        }
        return;
    }
    cuda_mark(c, c->n_tiles > 0 ? "attn prefill" : "attn decode", 0, 0);
    const ck_kv_pools kv = cuda_kv_pools(c, layer);
    ck_attn_args a = {.qkv = qkv->data,
                      .ld_qkv = qkv->ld,
                      .out = out->data,
                      .ld_out = out->ld,
                      .k_pool = kv.k,
                      .v_pool = kv.v,
                      .k_scale = kv.k_scale,
                      .v_scale = kv.v_scale,
                      .kv_q8 = kv.q8,
                      .dt = c->dt,
                      .row_seq = cuda_meta(c, c->o_seq),
                      .row_pos = cuda_meta(c, c->o_pos),
                      .block_tables = cuda_meta(c, c->o_bt),
                      .max_blocks = c->kv.max_blocks_per_seq,
                      .n_rows = c->n_rows,
                      .H = in->n_head,
                      .Hkv = in->n_head_kv,
                      .Dh = in->head_dim,
                      .BS = c->kv.block_size,
                      .scale = 1.0f / sqrtf((float)in->head_dim),
                      .dec_rows = cuda_meta(c, c->o_dec),
                      .n_dec = c->n_dec,
                      .n_splits = dec_splits(c, in),
                      .split_len = SPLIT_LEN,
                      .work = c->att_work,
                      .tile_row0 = cuda_meta(c, c->o_trow),
                      .tile_n = cuda_meta(c, c->o_tn),
                      .n_tiles = c->n_tiles,
                      .tile_rows = c->tile_rows};
    /* head sizes without a flash instance fall back to the plain kernel
     * inside ck_attention_decode/prefill (its workspace: kv_init) */
    if (c->p.tuning.attn_naive) {
        ck_attention_naive(c->stream, &a);
    } else {
        if (c->n_dec > 0)
            ck_attention_decode(c->stream, &a);
        if (c->n_tiles > 0)
            ck_attention_prefill(c->stream, &a);
    }
    cuda_op_error(c, "attention");
}

void cuda_swiglu(hr_backend *b, be_tensor *h, const be_tensor *gu) {
    cuda_backend *c = (cuda_backend *)b;
    OP_PRELUDE(c);
    if (c->pstep) {
        /* the gate/up GEMV just recorded, one op whose blocks hold at most
         * CK_PSTEP_ROWS rows when paired: it pairs gate row i with up row
         * F + i and writes h itself */
        ck_pstep_gemv *g = c->n_prog > 0 && c->prog[c->n_prog - 1].kind == CKP_GEMV
                               ? &c->prog[c->n_prog - 1].gemv
                               : NULL;
        const int64_t F = h->cols, per_block = (F + ck_pstep_blocks() - 1) / ck_pstep_blocks();
        if (g && g->y == gu->data && !g->resid && g->N == 2 * F &&
            2 * per_block <= CK_PSTEP_ROWS) {
            g->pair = (int32_t)F;
            g->y = h->data;
            return;
        }
        ck_pstep_op *op = cuda_pstep_add(c, CKP_SWIGLU);
        if (op) {
            op->swiglu.gu = gu->data;
            op->swiglu.h = h->data;
            op->swiglu.gu_ck = gu->narrow;
            op->swiglu.F = (int32_t)h->cols;
        }
        return;
    }
    cuda_mark(c, "swiglu", 0, 0);
    ck_swiglu(c->stream, h->data, h->ld, c->dt, gu->data, gu->narrow, gu->ld, c->n_rows,
              (int)h->cols);
    cuda_op_error(c, "swiglu");
}

void cuda_gather_rows(hr_backend *b, be_tensor *y, const be_tensor *x) {
    cuda_backend *c = (cuda_backend *)b;
    OP_PRELUDE(c);
    if (c->pstep) {
        /* one row, row 0: the gather of the pending norm's row is that row,
         * so the norm stays pending for the GEMV that reads y to take (its
         * block 0 stores the norm's row as well; pstep_flush_norm makes the
         * two ops if none takes it): two barriers and a one-block op less */
        if (c->pending_norm.on && c->pending_norm.y == x->data && !c->pending_norm.gather_y &&
            c->n_rows == 1 && x->narrow && y->narrow && x->cols == y->cols && x->ld == x->cols) {
            c->pending_norm.gather_y = y->data;
            return;
        }
        ck_pstep_op *op = cuda_pstep_add(c, CKP_GATHER);
        if (op) {
            op->gather.x = x->data;
            op->gather.row = cuda_meta(c, c->o_out);
            op->gather.y = y->data;
            op->gather.D = (int32_t)x->cols;
            op->gather.ldx = (int32_t)x->ld;
        }
        return;
    }
    cuda_mark(c, "gather_rows", 0, 0);
    ck_gather(c->stream, y->data, y->ld, x->data, x->ld, c->dt, cuda_meta(c, c->o_out),
              c->n_out, (int)x->cols);
    cuda_op_error(c, "gather_rows");
}
