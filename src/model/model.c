/*
 * model.c — what every model has, whatever file it came from: the tensor
 * table, shape validation against the hyper-parameters, RoPE frequencies,
 * the public accessors, and hr_model_load's dispatch on the path.
 *
 * Shapes use ne[] (innermost first). A linear layer y = W x with W stored
 * as PyTorch's (out, in) has ne = {in, out}: every row of W is contiguous,
 * which is what the matmul kernels stream.
 */
#include "model/model.h"

#include "model/model_load.h"
#include "tokenizer/tokenizer.h"
#include "util/alloc.h"
#include "util/dtype.h"
#include "util/file.h"
#include "util/log.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

hr_model_params hr_model_params_default(void) {
    hr_model_params p = {0};
    return p;
}

void hr_model_free(hr_model *m) {
    if (!m)
        return;
    for (int32_t i = 0; i < m->n_tensors; i++)
        hr_free(m->tensors[i].name);
    hr_free(m->tensors);
    hr_free(m->layers);
    hr_free(m->rope_inv_freq);
    gguf_free(m->gguf);
    st_free(m->st);
    hr_tokenizer_free(m->tok);
    hr_free(m->chat_template);
    hr_free(m->path);
    hr_free_pages(m->synthetic_data, m->synthetic_bytes);
    hr_free_pages(m->converted_data, m->converted_bytes);
    hr_free(m);
}

void hr_model_get_info(const hr_model *m, hr_model_info *out) { *out = m->info; }

hr_status hr_model_tensor(const hr_model *m, int32_t i, hr_tensor_desc *out) {
    if (i < 0 || i >= m->n_tensors)
        return HR_ERR_INVALID;
    const model_tensor *t = &m->tensors[i];
    out->name = t->name;
    out->dtype = t->dtype;
    out->n_dim = t->n_dims;
    memcpy(out->ne, t->ne, sizeof out->ne);
    out->n_bytes = t->n_bytes;
    return HR_OK;
}

const hr_tokenizer *hr_model_tokenizer(const hr_model *m) { return m->tok; }

const char *hr_model_chat_template(const hr_model *m) { return m->chat_template; }

const model_tensor *model_find_tensor(const hr_model *m, const char *name) {
    for (int32_t i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0)
            return &m->tensors[i];
    return NULL;
}

/* ---------------------------------------------------------------- validation */

static bool dtype_is_weight(hr_dtype t) {
    return t == HR_DTYPE_F32 || t == HR_DTYPE_F16 || t == HR_DTYPE_BF16 ||
           hr_dtype_table[t].is_quant;
}

static bool dtype_is_norm(hr_dtype t) {
    return t == HR_DTYPE_F32 || t == HR_DTYPE_F16 || t == HR_DTYPE_BF16;
}

static hr_status need_tensor(const hr_model *m, const char *name, int32_t n_dims, int64_t ne0,
                             int64_t ne1, bool is_norm, const model_tensor **out, hr_error *err) {
    const model_tensor *t = model_find_tensor(m, name);
    if (!t)
        return hr_err_set(err, HR_ERR_FORMAT, "%s: missing tensor '%s'", m->path, name);
    int64_t want[4] = {ne0, ne1, 1, 1};
    int32_t t_dims = t->n_dims;
    /* a trailing dimension of 1 is the same shape (GGUF writes [D] or [D,1]) */
    while (t_dims > n_dims && t->ne[t_dims - 1] == 1)
        t_dims--;
    if (t_dims != n_dims || t->ne[0] != want[0] || (n_dims > 1 && t->ne[1] != want[1]))
        return hr_err_set(err, HR_ERR_FORMAT,
                          "%s: tensor '%s' has shape [%lld, %lld] (innermost first) but the "
                          "hyper-parameters need [%lld, %lld]",
                          m->path, name, (long long)t->ne[0], (long long)t->ne[1],
                          (long long)want[0], (long long)(n_dims > 1 ? want[1] : 1));
    if (is_norm ? !dtype_is_norm(t->dtype) : !dtype_is_weight(t->dtype))
        return hr_err_set(err, HR_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s, not usable %s",
                          m->path, name, hr_dtype_name(t->dtype),
                          is_norm ? "for a norm (f32/f16/bf16)" : "for a weight");
    *out = t;
    return HR_OK;
}

static hr_status opt_tensor(const hr_model *m, const char *name, int64_t ne0,
                            const model_tensor **out, hr_error *err) {
    if (!model_find_tensor(m, name)) {
        *out = NULL;
        return HR_OK;
    }
    return need_tensor(m, name, 1, ne0, 1, true, out, err);
}

/* inv_freq[i] = theta^(-2i/Dh), computed in float32 as transformers does, then
 * scaled: linear divides by the factor; llama3 divides low frequencies by the
 * factor and blends the band between (transformers' _compute_llama3_parameters). */
static hr_status compute_rope(hr_model *m, hr_error *err) {
    const hr_model_info *in = &m->info;
    int32_t half = in->head_dim / 2;
    m->rope_inv_freq = hr_calloc((size_t)half, sizeof(float));
    if (!m->rope_inv_freq)
        return hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory", m->path);
    const model_tensor *ff = model_find_tensor(m, "rope_freqs.weight");
    if (ff && (ff->dtype != HR_DTYPE_F32 || ff->ne[0] != half))
        return hr_err_set(err, HR_ERR_FORMAT,
                          "%s: rope_freqs.weight must be f32 [%d], found %s [%lld]", m->path,
                          half, hr_dtype_name(ff->dtype), (long long)ff->ne[0]);
    for (int32_t i = 0; i < half; i++) {
        float inv = 1.0f / powf(in->rope_theta, (float)(2 * i) / (float)in->head_dim);
        if (ff) {
            float f;
            memcpy(&f, ff->data + 4 * (size_t)i, 4);
            if (!(f > 0.0f) || !isfinite(f))
                return hr_err_set(err, HR_ERR_FORMAT, "%s: rope_freqs.weight[%d] = %g",
                                  m->path, i, (double)f);
            inv /= f;
        } else if (in->rope_scaling == HR_ROPE_SCALING_LINEAR) {
            inv /= in->rope_factor;
        } else if (in->rope_scaling == HR_ROPE_SCALING_LLAMA3) {
            float old_ctx = (float)in->rope_orig_ctx;
            float low_wavelen = old_ctx / in->rope_low_freq_factor;
            float high_wavelen = old_ctx / in->rope_high_freq_factor;
            float wavelen = 2.0f * 3.14159265358979323846f / inv; /* 2 pi / inv_freq */
            if (wavelen > low_wavelen) {
                inv /= in->rope_factor;
            } else if (wavelen >= high_wavelen) {
                float smooth = (old_ctx / wavelen - in->rope_low_freq_factor) /
                               (in->rope_high_freq_factor - in->rope_low_freq_factor);
                inv = (1.0f - smooth) * inv / in->rope_factor + smooth * inv;
            }
        }
        m->rope_inv_freq[i] = inv;
    }
    return HR_OK;
}

hr_status model_bind_tensors(hr_model *m, hr_error *err) {
    hr_model_info *in = &m->info;
    const int64_t D = in->n_embd, V = in->n_vocab, F = in->n_ff;
    const int64_t q_dim = (int64_t)in->n_head * in->head_dim;
    const int64_t kv_dim = (int64_t)in->n_head_kv * in->head_dim;
    if (in->head_dim % 2 != 0)
        return hr_err_set(err, HR_ERR_FORMAT, "%s: head_dim %d is odd; RoPE needs pairs",
                          m->path, in->head_dim);

    HR_TRY(need_tensor(m, "token_embd.weight", 2, D, V, false, &m->tok_embd, err));
    HR_TRY(need_tensor(m, "output_norm.weight", 1, D, 1, true, &m->output_norm, err));
    if (model_find_tensor(m, "output.weight")) {
        HR_TRY(need_tensor(m, "output.weight", 2, D, V, false, &m->output, err));
        in->tie_embeddings = false;
    } else {
        m->output = m->tok_embd;
        in->tie_embeddings = true;
    }
    m->layers = hr_calloc((size_t)in->n_layer, sizeof *m->layers);
    if (!m->layers)
        return hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory", m->path);
    char name[96];
#define LAYER_TENSOR(field, suffix, nd, a, b, norm)                                   \
    do {                                                                             \
        snprintf(name, sizeof name, "blk.%d.%s", l, suffix);                         \
        HR_TRY(need_tensor(m, name, nd, a, b, norm, &L->field, err));                \
    } while (0)
    in->qkv_bias = model_find_tensor(m, "blk.0.attn_q.bias") != NULL;
    for (int l = 0; l < in->n_layer; l++) {
        model_layer *L = &m->layers[l];
        LAYER_TENSOR(attn_norm, "attn_norm.weight", 1, D, 1, true);
        LAYER_TENSOR(wq, "attn_q.weight", 2, D, q_dim, false);
        LAYER_TENSOR(wk, "attn_k.weight", 2, D, kv_dim, false);
        LAYER_TENSOR(wv, "attn_v.weight", 2, D, kv_dim, false);
        LAYER_TENSOR(wo, "attn_output.weight", 2, q_dim, D, false);
        LAYER_TENSOR(ffn_norm, "ffn_norm.weight", 1, D, 1, true);
        LAYER_TENSOR(w_gate, "ffn_gate.weight", 2, D, F, false);
        LAYER_TENSOR(w_up, "ffn_up.weight", 2, D, F, false);
        LAYER_TENSOR(w_down, "ffn_down.weight", 2, F, D, false);
        if (in->qkv_bias) {
            snprintf(name, sizeof name, "blk.%d.attn_q.bias", l);
            HR_TRY(opt_tensor(m, name, q_dim, &L->bq, err));
            snprintf(name, sizeof name, "blk.%d.attn_k.bias", l);
            HR_TRY(opt_tensor(m, name, kv_dim, &L->bk, err));
            snprintf(name, sizeof name, "blk.%d.attn_v.bias", l);
            HR_TRY(opt_tensor(m, name, kv_dim, &L->bv, err));
            if (!L->bq || !L->bk || !L->bv)
                return hr_err_set(err, HR_ERR_FORMAT,
                                  "%s: layer %d lacks a q/k/v bias that layer 0 has", m->path, l);
        }
    }
#undef LAYER_TENSOR

    int64_t n_params = 0;
    uint64_t n_bytes = 0;
    for (int32_t i = 0; i < m->n_tensors; i++) {
        const model_tensor *t = &m->tensors[i];
        int64_t n = 1;
        for (int d = 0; d < t->n_dims; d++)
            n *= t->ne[d];
        n_params += n;
        n_bytes += t->n_bytes;
    }
    in->n_params = n_params;
    in->weight_bytes = n_bytes;
    in->n_tensors = m->n_tensors;
    return compute_rope(m, err);
}

bool hr_model_weight_bytes_as(const hr_model *m, hr_dtype t, uint64_t *out) {
    uint64_t total = 0;
    for (int32_t i = 0; i < m->n_tensors; i++) {
        const model_tensor *x = &m->tensors[i];
        int64_t n = 1;
        for (int d = 0; d < x->n_dims; d++)
            n *= x->ne[d];
        uint64_t b;
        hr_dtype as = (x->n_dims >= 2) ? t : HR_DTYPE_F32; /* norms and biases stay f32 */
        if (!hr_dtype_bytes_checked(as, n, &b) || x->ne[0] % hr_dtype_block_elems(as) != 0)
            return false;
        total += b;
    }
    *out = total;
    return true;
}

/* ---------------------------------------------------------------- load */

hr_status hr_model_load(const char *path, const hr_model_params *params, hr_model **out,
                        hr_error *err) {
    hr_model_params defaults = hr_model_params_default();
    if (!params)
        params = &defaults;
    hr_model *m = hr_calloc(1, sizeof *m);
    if (!m)
        return hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory", path);
    hr_status s;
    m->path = hr_strdup(path);
    if (!m->path) {
        s = hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    if (hr_path_is_dir(path))
        s = model_load_hf_dir(m, path, params, err);
    else if (hr_path_exists(path))
        s = model_load_gguf(m, path, params, err);
    else
        s = hr_err_set(err, HR_ERR_IO,
                       "%s: no such file or folder (expected a .gguf file or a Hugging Face "
                       "model folder)",
                       path);
    if (s != HR_OK)
        goto fail;
    if (params->tokenizer_path) {
        hr_tokenizer_free(m->tok);
        m->tok = NULL;
        s = hr_tokenizer_load(params->tokenizer_path, &m->tok, err);
        if (s != HR_OK)
            goto fail;
    }
    if (!params->vocab_only && params->quantize) {
        s = model_quantize_matrices(m, params->quantize, err);
        if (s != HR_OK)
            goto fail;
    }
    if (!params->vocab_only) {
        s = model_bind_tensors(m, err);
        if (s != HR_OK)
            goto fail;
    }
    *out = m;
    return HR_OK;
fail:
    hr_model_free(m);
    return s;
}

/* ---------------------------------------------------------------- hparams */

void model_add_eos(hr_model_info *in, int32_t id) {
    if (id < 0)
        return;
    for (int32_t i = 0; i < in->n_eos; i++)
        if (in->eos_ids[i] == id)
            return;
    if (in->n_eos < (int32_t)(sizeof in->eos_ids / sizeof in->eos_ids[0]))
        in->eos_ids[in->n_eos++] = id;
}

hr_status model_check_hparams(const hr_model_info *in, const char *path, hr_error *err) {
    /* Upper bounds far beyond any real model, so an absurd value is caught
     * before it sizes an allocation. */
    struct {
        const char *name;
        int64_t v, lo, hi;
    } checks[] = {
        {"hidden size", in->n_embd, 1, 1 << 20},
        {"layers", in->n_layer, 1, 4096},
        {"heads", in->n_head, 1, 4096},
        {"kv heads", in->n_head_kv, 1, 4096},
        {"head_dim", in->head_dim, 2, 4096},
        {"intermediate size", in->n_ff, 1, 1 << 22},
        {"vocabulary", in->n_vocab, 1, 1 << 24},
        {"context length", in->n_ctx_train, 1, 1 << 24},
    };
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++)
        if (checks[i].v < checks[i].lo || checks[i].v > checks[i].hi)
            return hr_err_set(err, HR_ERR_FORMAT, "%s: %s = %lld is outside [%lld, %lld]", path,
                              checks[i].name, (long long)checks[i].v, (long long)checks[i].lo,
                              (long long)checks[i].hi);
    if (in->n_head % in->n_head_kv != 0)
        return hr_err_set(err, HR_ERR_FORMAT,
                          "%s: %d attention heads are not a multiple of %d kv heads", path,
                          in->n_head, in->n_head_kv);
    if (!(in->rms_eps > 0.0f) || !isfinite(in->rms_eps) || !(in->rope_theta > 0.0f) ||
        !isfinite(in->rope_theta))
        return hr_err_set(err, HR_ERR_FORMAT, "%s: rms eps %g or rope theta %g is not positive",
                          path, (double)in->rms_eps, (double)in->rope_theta);
    if (in->rope_scaling != HR_ROPE_SCALING_NONE &&
        !(in->rope_factor > 0.0f && isfinite(in->rope_factor)) &&
        !(in->rope_scaling == HR_ROPE_SCALING_LLAMA3 && in->rope_factor == 0.0f))
        return hr_err_set(err, HR_ERR_FORMAT, "%s: rope scaling factor %g is not positive", path,
                          (double)in->rope_factor);
    if (in->rope_scaling == HR_ROPE_SCALING_LLAMA3 && in->rope_factor > 0.0f &&
        !(in->rope_high_freq_factor > in->rope_low_freq_factor && in->rope_orig_ctx > 0))
        return hr_err_set(err, HR_ERR_FORMAT,
                          "%s: llama3 rope scaling needs high_freq_factor > low_freq_factor and "
                          "original_max_position_embeddings > 0",
                          path);
    return HR_OK;
}
