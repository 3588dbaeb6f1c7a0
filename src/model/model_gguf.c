/*
 * model_gguf.c — a model description from a GGUF file.
 *
 * Hyper-parameters come from "<arch>.*" keys (llama.cpp's names); tensor
 * names are already canonical. GGUF "llama" files (Llama 2/3, Mistral) hold
 * Q and K permuted for interleaved-pair RoPE; "qwen2" files are not permuted.
 */
#include "model/model_load.h"

#include "tokenizer/tokenizer.h"
#include "util/alloc.h"
#include "util/log.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static bool get_u32_arch(const gguf_file *g, const char *arch, const char *suffix,
                         uint32_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_get_u32(g, key, out);
}

static bool get_f32_arch(const gguf_file *g, const char *arch, const char *suffix, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_get_f32(g, key, out);
}

static hr_status need_u32(const gguf_file *g, const char *arch, const char *suffix,
                          const char *path, int32_t *out, hr_error *err) {
    uint32_t v;
    if (!get_u32_arch(g, arch, suffix, &v))
        return hr_err_set(err, HR_ERR_FORMAT, "%s: missing or non-integer metadata '%s.%s'",
                          path, arch, suffix);
    if (v > INT32_MAX)
        return hr_err_set(err, HR_ERR_FORMAT, "%s: metadata '%s.%s' = %u is out of range", path,
                          arch, suffix, v);
    *out = (int32_t)v;
    return HR_OK;
}

static void copy_gguf_str(char *dst, size_t cap, gguf_str s) {
    size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
    memcpy(dst, s.ptr, n);
    dst[n] = '\0';
}

static hr_status read_hparams(hr_model *m, const char *path, hr_error *err) {
    const gguf_file *g = m->gguf;
    hr_model_info *in = &m->info;
    gguf_str s;
    if (!gguf_get_str(g, "general.architecture", &s))
        return hr_err_set(err, HR_ERR_FORMAT, "%s: missing metadata 'general.architecture'",
                          path);
    char arch[32];
    copy_gguf_str(arch, sizeof arch, s);
    if (strcmp(arch, "llama") == 0) {
        m->rope = ROPE_STYLE_NORM;
    } else if (strcmp(arch, "qwen2") == 0) {
        m->rope = ROPE_STYLE_NEOX;
    } else {
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "%s: architecture '%s' is not supported (llama, qwen2 are)", path,
                          arch);
    }
    snprintf(in->arch, sizeof in->arch, "%s", arch);
    snprintf(in->format, sizeof in->format, "gguf");
    if (gguf_get_str(g, "general.name", &s))
        copy_gguf_str(in->name, sizeof in->name, s);

    HR_TRY(need_u32(g, arch, "embedding_length", path, &in->n_embd, err));
    HR_TRY(need_u32(g, arch, "block_count", path, &in->n_layer, err));
    HR_TRY(need_u32(g, arch, "feed_forward_length", path, &in->n_ff, err));
    HR_TRY(need_u32(g, arch, "attention.head_count", path, &in->n_head, err));
    uint32_t v;
    in->n_head_kv = get_u32_arch(g, arch, "attention.head_count_kv", &v) ? (int32_t)v
                                                                          : in->n_head;
    if (in->n_head <= 0)
        return hr_err_set(err, HR_ERR_FORMAT, "%s: %s.attention.head_count is 0", path, arch);
    in->head_dim = get_u32_arch(g, arch, "attention.key_length", &v) ? (int32_t)v
                                                                     : in->n_embd / in->n_head;
    in->n_ctx_train = get_u32_arch(g, arch, "context_length", &v) ? (int32_t)v : 2048;
    if (!get_f32_arch(g, arch, "attention.layer_norm_rms_epsilon", &in->rms_eps))
        in->rms_eps = 1e-5f;
    if (!get_f32_arch(g, arch, "rope.freq_base", &in->rope_theta))
        in->rope_theta = 10000.0f;
    if (get_u32_arch(g, arch, "rope.dimension_count", &v) && (int32_t)v != in->head_dim)
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "%s: partial rotary embedding (rope.dimension_count %u, head_dim %d) "
                          "is not supported",
                          path, v, in->head_dim);

    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    float factor = 0.0f;
    if (gguf_get_str(g, key, &s)) {
        char type[32];
        copy_gguf_str(type, sizeof type, s);
        if (strcmp(type, "linear") == 0) {
            in->rope_scaling = HR_ROPE_SCALING_LINEAR;
            if (!get_f32_arch(g, arch, "rope.scaling.factor", &factor))
                return hr_err_set(err, HR_ERR_FORMAT,
                                  "%s: linear rope scaling without %s.rope.scaling.factor", path,
                                  arch);
        } else if (strcmp(type, "none") != 0) {
            return hr_err_set(err, HR_ERR_UNSUPPORTED,
                              "%s: rope scaling type '%s' is not supported (none, linear are)",
                              path, type);
        }
    } else if (get_f32_arch(g, arch, "rope.scale_linear", &factor) && factor != 1.0f) {
        in->rope_scaling = HR_ROPE_SCALING_LINEAR; /* the older key for the same thing */
    }
    in->rope_factor = in->rope_scaling == HR_ROPE_SCALING_LINEAR ? factor : 1.0f;
    if (gguf_find_tensor(g, "rope_freqs.weight")) {
        /* Llama 3 scaling stored as per-frequency divisors: no factor to report */
        in->rope_scaling = HR_ROPE_SCALING_LLAMA3;
        in->rope_factor = 0.0f;
    }
    return HR_OK;
}

static hr_status copy_tensors(hr_model *m, const char *path, hr_error *err) {
    const gguf_file *g = m->gguf;
    if (g->n_tensors > INT32_MAX)
        return hr_err_set(err, HR_ERR_FORMAT, "%s: too many tensors", path);
    m->tensors = hr_calloc(g->n_tensors, sizeof *m->tensors);
    if (!m->tensors && g->n_tensors)
        return hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory", path);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *gt = &g->tensors[i];
        model_tensor *t = &m->tensors[i];
        t->name = hr_strdup(gt->name);
        if (!t->name)
            return hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory", path);
        m->n_tensors = (int32_t)i + 1;
        t->src_name = gt->name;
        t->dtype = gt->dtype;
        t->n_dims = gt->n_dims;
        memcpy(t->ne, gt->ne, sizeof t->ne);
        t->n_bytes = gt->n_bytes;
        t->data = gt->data;
    }
    return HR_OK;
}

hr_status model_load_gguf(hr_model *m, const char *path, const hr_model_params *p,
                          hr_error *err) {
    HR_TRY(gguf_open(path, &m->gguf, err));
    const gguf_file *g = m->gguf;
    HR_TRY(read_hparams(m, path, err));

    gguf_str s;
    if (gguf_get_str(g, "tokenizer.ggml.model", &s)) {
        HR_TRY(tokenizer_from_gguf(g, &m->tok, err));
    } else if (!p->tokenizer_path) {
        HR_LOG_W("%s: the file has no tokenizer (tokenizer.ggml.model)", path);
    }
    if (gguf_get_str(g, "tokenizer.chat_template", &s)) {
        m->chat_template = hr_strndup(s.ptr, (size_t)s.len);
        if (!m->chat_template)
            return hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory", path);
    }
    HR_TRY(copy_tensors(m, path, err));

    hr_model_info *in = &m->info;
    uint32_t v;
    const model_tensor *emb = model_find_tensor(m, "token_embd.weight");
    if (m->tok)
        in->n_vocab = hr_tokenizer_n_vocab(m->tok);
    else if (get_u32_arch(g, in->arch, "vocab_size", &v))
        in->n_vocab = (int32_t)v;
    else if (emb && emb->ne[1] <= INT32_MAX)
        in->n_vocab = (int32_t)emb->ne[1];
    /* Some converters pad the embedding past the tokenizer's vocabulary. */
    if (emb && emb->ne[1] > in->n_vocab && emb->ne[1] <= INT32_MAX)
        in->n_vocab = (int32_t)emb->ne[1];
    in->bos_id = m->tok ? hr_tokenizer_bos(m->tok) : -1;
    in->n_eos = 0;
    if (m->tok && hr_tokenizer_eos(m->tok) >= 0)
        model_add_eos(in, hr_tokenizer_eos(m->tok));
    if (gguf_get_u32(g, "tokenizer.ggml.eot_token_id", &v))
        model_add_eos(in, (int32_t)v);
    if (gguf_get_u32(g, "tokenizer.ggml.eom_token_id", &v))
        model_add_eos(in, (int32_t)v);
    return model_check_hparams(in, path, err);
}
