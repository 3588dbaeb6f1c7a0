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
 * This mirrors transformers' LlamaDecoderLayer: residual = h;
 * h = input_layernorm(h); h = self_attn(h); h = residual + h; residual = h;
 * h = post_attention_layernorm(h); h = mlp(h); h = residual + h.
 */
#include "model/llama.h"

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
    be_tensor xb;     /* (B, D) normalised input of the next matmul, or a projection */
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

    /* weights first: the backend sizes its matmul workspace from them */
    const model_tensor *one[1];
    one[0] = m->tok_embd;
    if ((s = ops->weight_create(be, one, NULL, 1, &lm->tok_embd, err)) != HR_OK)
        goto fail;
    if (m->output == m->tok_embd) {
        lm->output = lm->tok_embd;
    } else {
        one[0] = m->output;
        if ((s = ops->weight_create(be, one, NULL, 1, &lm->output, err)) != HR_OK)
            goto fail;
    }
    if ((s = ops->vector_create(be, m->output_norm, &lm->output_norm, err)) != HR_OK)
        goto fail;
    for (int32_t l = 0; l < in->n_layer; l++) {
        const model_layer *L = &m->layers[l];
        llama_layer *W = &lm->layers[l];
        const model_tensor *qkv[3] = {L->wq, L->wk, L->wv};
        const model_tensor *qkv_bias[3] = {L->bq, L->bk, L->bv};
        const model_tensor *gate_up[2] = {L->w_gate, L->w_up};
        if ((s = ops->vector_create(be, L->attn_norm, &W->attn_norm, err)) != HR_OK ||
            (s = ops->vector_create(be, L->ffn_norm, &W->ffn_norm, err)) != HR_OK ||
            (s = ops->weight_create(be, qkv, in->qkv_bias ? qkv_bias : NULL, 3, &W->wqkv,
                                    err)) != HR_OK ||
            (s = ops->weight_create(be, &L->wo, NULL, 1, &W->wo, err)) != HR_OK ||
            (s = ops->weight_create(be, gate_up, NULL, 2, &W->w_gate_up, err)) != HR_OK ||
            (s = ops->weight_create(be, &L->w_down, NULL, 1, &W->w_down, err)) != HR_OK)
            goto fail;
    }

    /* activations, sized for the largest step */
    const int64_t B = cfg->max_rows, D = in->n_embd, Dh = in->head_dim;
    const int64_t qkv_cols = ((int64_t)in->n_head + 2 * (int64_t)in->n_head_kv) * Dh;
    if ((s = ops->tensor_alloc(be, B, D, &lm->x, err)) != HR_OK ||
        (s = ops->tensor_alloc(be, B, D, &lm->xb, err)) != HR_OK ||
        (s = ops->tensor_alloc(be, B, qkv_cols, &lm->qkv, err)) != HR_OK ||
        (s = ops->tensor_alloc(be, B, (int64_t)in->n_head * Dh, &lm->att, err)) != HR_OK ||
        (s = ops->tensor_alloc(be, B, 2 * (int64_t)in->n_ff, &lm->gu, err)) != HR_OK ||
        (s = ops->tensor_alloc(be, B, in->n_ff, &lm->h, err)) != HR_OK ||
        (s = ops->tensor_alloc(be, cfg->max_out, D, &lm->xo, err)) != HR_OK ||
        (s = ops->tensor_alloc(be, cfg->max_out, in->n_vocab, &lm->logits, err)) != HR_OK ||
        (s = ops->kv_alloc(be, cfg, err)) != HR_OK)
        goto fail;
    *out = lm;
    return HR_OK;
fail:
    llama_free(lm);
    return s;
}

hr_status llama_forward(llama *lm, const hr_step *step, float *logits, hr_error *err) {
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
        ops->rope(be, &lm->qkv, m->rope_inv_freq, m->rope, in->n_head, in->n_head_kv,
                  in->head_dim);
        ops->kv_store(be, l, &lm->qkv);
        ops->attention(be, l, &lm->att, &lm->qkv);
        ops->matmul(be, &lm->xb, &lm->att, W->wo, B);
        ops->add_rmsnorm(be, &lm->x, &lm->xb, &lm->xb, W->ffn_norm, eps);
        /* MLP block */
        ops->matmul(be, &lm->gu, &lm->xb, W->w_gate_up, B);
        ops->swiglu(be, &lm->h, &lm->gu);
        ops->matmul(be, &lm->xb, &lm->h, W->w_down, B);
        const be_vector *next =
            l + 1 < in->n_layer ? lm->layers[l + 1].attn_norm : lm->output_norm;
        ops->add_rmsnorm(be, &lm->x, &lm->xb, &lm->xb, next, eps);
    }
    /* logits only for the rows that want them (the last of each prompt chunk) */
    if (step->n_out > 0) {
        ops->gather_rows(be, &lm->xo, &lm->xb);
        ops->matmul(be, &lm->logits, &lm->xo, lm->output, step->n_out);
    }
    return ops->end_step(be, &lm->logits, step->n_out > 0 ? logits : NULL, err);
}
