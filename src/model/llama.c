/*
 * llama.c — the forward pass of the Llama family (Llama 2/3, Mistral, Qwen2),
 * written once against the backend ops table.
 *
 * One step takes B rows of (token, position, sequence) and produces logits
 * for the rows that ask for them. Follow one row through it:
 *
 *   x    = embed(token)                                  (B, D)
 *   for each layer:
 *     xb   = rmsnorm(x) * attn_norm                      (fused with the add below)
 *     qkv  = xb . [Wq | Wk | Wv]^T (+ bias, Qwen2)        (B, (H + 2 Hkv) Dh)
 *     rope(q, k) at the row's position
 *     store k, v in the sequence's KV pages
 *     att  = softmax(q k^T / sqrt(Dh)) v over [0, pos]   (B, H Dh)
 *     x   += att . Wo^T ;  xb = rmsnorm(x) * ffn_norm
 *     gu   = xb . [Wgate | Wup]^T                         (B, 2F)
 *     h    = silu(gate) * up                              (B, F)
 *     x   += h . Wdown^T ;  xb = rmsnorm(x) * (next attn_norm | output_norm)
 *   logits = gather(xb, wanted rows) . Wout^T             (n_out, V)
 *
 * A backend may fold each norm's weight into the matrix after it at load
 * (weight_create's fold: the CUDA backend does for bf16), the norm then
 * applying none.
 *
 * This mirrors transformers' LlamaDecoderLayer: residual = h;
 * h = input_layernorm(h); h = self_attn(h); h = residual + h; residual = h;
 * h = post_attention_layernorm(h); h = mlp(h); h = residual + h.
 */
#include "model/llama.h"

#include "backend/sizes.h"
#include "util/alloc.h"

#include <string.h>

typedef struct {
    be_vector *attn_norm, *ffn_norm;
    be_weight *wqkv, *wo, *w_gate_up, *w_down;
} llama_layer;

struct llama {
    const hr_model *model;
    hr_backend *be;
    be_config cfg;
    be_weight *tok_embd, *output;
    be_vector *output_norm;
    llama_layer *layers;
    be_tensor x;      /* (B, D) residual stream */
    be_tensor xb;     /* (B, D) normalised input of the next matmul */
    be_tensor xp;     /* (B, D) output of the o and down projections */
    be_tensor qkv;    /* (B, (H + 2 Hkv) Dh) */
    be_tensor att;    /* (B, H Dh) */
    be_tensor gu;     /* (B, 2F) */
    be_tensor h;      /* (B, F) */
    be_tensor xo;     /* (n_out, D) rows whose logits are wanted */
    be_tensor logits; /* (n_out, V) */
};

void llama_free(llama *lm) {
    if (!lm)
        return;
    hr_free(lm->layers);
    hr_free(lm);
}

/* ---- what the forward pass needs from a backend, listed once: llama_create
 * allocates these, llama_plan adds up their sizes (backend/sizes.h) */

typedef struct {
    const model_tensor *parts[3];
    const model_tensor *biases[3]; /* NULL entries: no bias */
    int n_parts;
    be_vector *const *fold;        /* the norm that feeds it (weight_create's fold), or NULL */
    be_weight **slot;              /* where llama_create keeps it (NULL in a plan) */
} weight_spec;

typedef struct {
    const model_tensor *t;
    be_vector **slot;
} vector_spec;

typedef struct {
    int64_t rows, cols;
    bool narrow;
    be_tensor *slot;
} tensor_spec;

/* Calls fw for each weight and fv for each norm vector, in creation order. */
static hr_status each_weight(const hr_model *m, llama *lm,
                             hr_status (*fw)(void *ctx, const weight_spec *w),
                             hr_status (*fv)(void *ctx, const vector_spec *v), void *ctx) {
    const hr_model_info *in = &m->info;
    weight_spec w = {.parts = {m->tok_embd}, .n_parts = 1, .slot = lm ? &lm->tok_embd : NULL};
    HR_TRY(fw(ctx, &w));
    vector_spec v = {.t = m->output_norm, .slot = lm ? &lm->output_norm : NULL};
    HR_TRY(fv(ctx, &v));
    /* tied: the embedding serves as the head (and takes no norm's weight:
     * the embedding reads it too) */
    if (m->output != m->tok_embd) {
        w = (weight_spec){.parts = {m->output},
                          .n_parts = 1,
                          .fold = lm ? &lm->output_norm : NULL,
                          .slot = lm ? &lm->output : NULL};
        HR_TRY(fw(ctx, &w));
    }
    for (int32_t l = 0; l < in->n_layer; l++) {
        const model_layer *L = &m->layers[l];
        llama_layer *W = lm ? &lm->layers[l] : NULL;
        vector_spec vs[2] = {{L->attn_norm, W ? &W->attn_norm : NULL},
                             {L->ffn_norm, W ? &W->ffn_norm : NULL}};
        weight_spec ws[4] = {
            {.parts = {L->wq, L->wk, L->wv},
             .n_parts = 3,
             .fold = W ? &W->attn_norm : NULL,
             .slot = W ? &W->wqkv : NULL},
            {.parts = {L->wo}, .n_parts = 1, .slot = W ? &W->wo : NULL},
            {.parts = {L->w_gate, L->w_up},
             .n_parts = 2,
             .fold = W ? &W->ffn_norm : NULL,
             .slot = W ? &W->w_gate_up : NULL},
            {.parts = {L->w_down}, .n_parts = 1, .slot = W ? &W->w_down : NULL}};
        if (in->qkv_bias) {
            ws[0].biases[0] = L->bq;
            ws[0].biases[1] = L->bk;
            ws[0].biases[2] = L->bv;
        }
        for (int i = 0; i < 2; i++)
            HR_TRY(fv(ctx, &vs[i]));
        for (int i = 0; i < 4; i++)
            HR_TRY(fw(ctx, &ws[i]));
    }
    return HR_OK;
}

/* The activations, sized for the largest step (B rows, n_out outputs). */
static int tensor_specs(const hr_model_info *in, const be_config *cfg, llama *lm,
                        tensor_spec out[9]) {
    const int64_t B = cfg->max_rows, D = in->n_embd, Dh = in->head_dim;
    const int64_t qkv_cols = ((int64_t)in->n_head + 2 * (int64_t)in->n_head_kv) * Dh;
    tensor_spec t[9] = {
        {B, D, false, lm ? &lm->x : NULL},
        {B, D, true, lm ? &lm->xb : NULL},
        {B, D, true, lm ? &lm->xp : NULL},
        {B, qkv_cols, true, lm ? &lm->qkv : NULL},
        {B, (int64_t)in->n_head * Dh, true, lm ? &lm->att : NULL},
        {B, 2 * (int64_t)in->n_ff, true, lm ? &lm->gu : NULL},
        {B, in->n_ff, true, lm ? &lm->h : NULL},
        {cfg->max_out, D, true, lm ? &lm->xo : NULL},
        {cfg->max_out, in->n_vocab, false, lm ? &lm->logits : NULL},
    };
    memcpy(out, t, sizeof t);
    return 9;
}

typedef struct {
    hr_backend *be;
    hr_error *err;
} create_ctx;

static hr_status create_weight(void *ctx, const weight_spec *w) {
    create_ctx *c = ctx;
    const model_tensor *const *biases = w->biases[0] || w->biases[1] || w->biases[2]
                                            ? w->biases
                                            : NULL;
    return c->be->ops->weight_create(c->be, w->parts, biases, w->n_parts,
                                     w->fold ? *w->fold : NULL, w->slot, c->err);
}

static hr_status create_vector(void *ctx, const vector_spec *v) {
    create_ctx *c = ctx;
    return c->be->ops->vector_create(c->be, v->t, v->slot, c->err);
}

hr_status llama_create(const hr_model *m, hr_backend *be, const be_config *cfg, llama **out,
                       hr_error *err) {
    const hr_model_info *in = &m->info;
    const hr_backend_ops *ops = be->ops;
    llama *lm = hr_calloc(1, sizeof *lm);
    if (!lm)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory creating the model");
    lm->layers = hr_calloc((size_t)in->n_layer, sizeof *lm->layers);
    hr_status s = HR_ERR_NOMEM;
    if (!lm->layers) {
        hr_err_set(err, s, "out of memory creating the model");
        goto fail;
    }
    lm->model = m;
    lm->be = be;
    lm->cfg = *cfg;
    lm->cfg.rope_inv_freq = m->rope_inv_freq;

    /* weights first: the backend sizes its matmul workspace from them */
    create_ctx cc = {be, err};
    if ((s = each_weight(m, lm, create_weight, create_vector, &cc)) != HR_OK)
        goto fail;
    if (m->output == m->tok_embd)
        lm->output = lm->tok_embd;
    tensor_spec ts[9];
    int n_ts = tensor_specs(in, cfg, lm, ts);
    for (int i = 0; i < n_ts; i++)
        if ((s = ops->tensor_alloc(be, ts[i].rows, ts[i].cols, ts[i].narrow, ts[i].slot,
                                   err)) != HR_OK)
            goto fail;
    if ((s = ops->kv_alloc(be, &lm->cfg, err)) != HR_OK)
        goto fail;
    *out = lm;
    return HR_OK;
fail:
    llama_free(lm);
    return s;
}

typedef struct {
    sizes_device d;
    const be_params *bp;
    uint64_t weights;
    int64_t max_k;
    bool packed; /* some weight stored packed (cuda) */
} plan_ctx;

static hr_status plan_weight(void *ctx, const weight_spec *w) {
    plan_ctx *p = ctx;
    const model_tensor *const *biases = w->biases[0] || w->biases[1] || w->biases[2]
                                            ? w->biases
                                            : NULL;
    p->weights += sizes_weight(p->d, p->bp, w->parts, biases, w->n_parts);
    sizes_run runs[3];
    p->packed |= p->d == SIZES_CUDA && sizes_cuda_runs(p->bp, w->parts, w->n_parts, runs) > 0;
    p->max_k = w->parts[0]->ne[0] > p->max_k ? w->parts[0]->ne[0] : p->max_k;
    return HR_OK;
}

static hr_status plan_vector(void *ctx, const vector_spec *v) {
    plan_ctx *p = ctx;
    p->weights += sizes_vector(p->d, v->t);
    return HR_OK;
}

static hr_status copy_bytes_weight(void *ctx, const weight_spec *w) {
    *(uint64_t *)ctx += sizes_weight_copy(w->parts, w->n_parts);
    return HR_OK;
}

static hr_status copy_bytes_vector(void *ctx, const vector_spec *v) {
    (void)ctx, (void)v;
    return HR_OK;
}

bool llama_packed_weights(const hr_model *m, const be_params *bp) {
    plan_ctx pc = {.d = SIZES_CUDA, .bp = bp};
    each_weight(m, NULL, plan_weight, plan_vector, &pc); /* never fail */
    return pc.packed;
}

uint64_t llama_weight_copy_bytes(const hr_model *m) {
    uint64_t n = 0;
    each_weight(m, NULL, copy_bytes_weight, copy_bytes_vector, &n); /* never fail */
    return n;
}

void llama_plan(const hr_model *m, sizes_device d, const be_params *bp, const be_config *cfg,
                be_memory *out) {
    const hr_model_info *in = &m->info;
    plan_ctx pc = {.d = d, .bp = bp};
    each_weight(m, NULL, plan_weight, plan_vector, &pc); /* the callbacks never fail */
    tensor_spec ts[9];
    int n_ts = tensor_specs(in, cfg, NULL, ts);
    uint64_t act = 0;
    for (int i = 0; i < n_ts; i++)
        act += sizes_tensor(d, ts[i].rows, ts[i].cols, ts[i].narrow);
    /* cpu: the weight copy, sized by llama_weight_copy_bytes (engine_config) */
    const uint64_t copy = d == SIZES_CPU ? bp->weight_copy_bytes : 0;
    *out = (be_memory){.weights = pc.weights + copy,
                       .kv = sizes_kv(d, in, cfg),
                       .activations = act,
                       .workspace = sizes_workspace(d, bp, in, cfg, pc.max_k)};
}

hr_status llama_forward(llama *lm, const hr_step *step, float *logits, const be_sample *samples,
                        int32_t *tokens, hr_error *err) {
    const hr_model *m = lm->model;
    const hr_model_info *in = &m->info;
    hr_backend *be = lm->be;
    const hr_backend_ops *ops = be->ops;
    const int64_t B = step->n_rows;
    const float eps = in->rms_eps;

    HR_TRY(ops->begin_step(be, step, err));
    ops->embed(be, &lm->x, lm->tok_embd);
    ops->rmsnorm(be, &lm->xb, &lm->x, lm->layers[0].attn_norm, eps, B);
    for (int32_t l = 0; l < in->n_layer; l++) {
        const llama_layer *W = &lm->layers[l];
        /* attention block */
        ops->matmul(be, &lm->qkv, &lm->xb, W->wqkv, B);
        ops->rope_kv_store(be, l, &lm->qkv, m->rope_inv_freq, m->rope, in->n_head,
                           in->n_head_kv, in->head_dim);
        ops->attention(be, l, &lm->att, &lm->qkv);
        ops->matmul(be, &lm->xp, &lm->att, W->wo, B);
        ops->add_rmsnorm(be, &lm->x, &lm->xp, &lm->xb, W->ffn_norm, eps);
        /* MLP block */
        ops->matmul(be, &lm->gu, &lm->xb, W->w_gate_up, B);
        ops->swiglu(be, &lm->h, &lm->gu);
        ops->matmul(be, &lm->xp, &lm->h, W->w_down, B);
        const be_vector *next =
            l + 1 < in->n_layer ? lm->layers[l + 1].attn_norm : lm->output_norm;
        ops->add_rmsnorm(be, &lm->x, &lm->xp, &lm->xb, next, eps);
    }
    /* logits only for the rows that want them (the last of each prompt chunk) */
    if (step->n_out > 0) {
        ops->gather_rows(be, &lm->xo, &lm->xb);
        ops->matmul(be, &lm->logits, &lm->xo, lm->output, step->n_out);
    }
    return ops->end_step(be, &lm->logits, step->n_out > 0 ? logits : NULL, samples, tokens, err);
}
