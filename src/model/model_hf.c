/*
 * model_hf.c — a model description from a Hugging Face folder:
 * config.json (+ generation_config.json), safetensors (single or sharded),
 * tokenizer files, and the chat template from tokenizer_config.json.
 *
 * HF tensor names are mapped onto the canonical GGUF-style names; Q and K
 * keep HF's row order, so such a model uses rotate_half ("neox") RoPE.
 */
#include "model/model_load.h"

#include "format/hf_config.h"
#include "tokenizer/tokenizer.h"
#include "util/alloc.h"
#include "util/dtype.h"
#include "util/file.h"
#include "util/log.h"

#include "util/json.h"
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONFIG_MAX_BYTES (16u << 20)

/* HF per-layer suffix -> canonical suffix. */
static const struct {
    const char *hf, *canon;
} layer_names[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};

/* Canonical name for an HF tensor name into buf; false for tensors the
 * forward pass does not use (e.g. rotary_emb.inv_freq of old checkpoints). */
static bool canonical_name(const char *hf, char *buf, size_t cap) {
    if (strcmp(hf, "model.embed_tokens.weight") == 0)
        return snprintf(buf, cap, "token_embd.weight") > 0;
    if (strcmp(hf, "model.norm.weight") == 0)
        return snprintf(buf, cap, "output_norm.weight") > 0;
    if (strcmp(hf, "lm_head.weight") == 0)
        return snprintf(buf, cap, "output.weight") > 0;
    const char *prefix = "model.layers.";
    size_t pl = strlen(prefix);
    if (strncmp(hf, prefix, pl) != 0)
        return false;
    char *end;
    long layer = strtol(hf + pl, &end, 10);
    if (end == hf + pl || *end != '.' || layer < 0 || layer > INT_MAX)
        return false;
    for (size_t i = 0; i < sizeof layer_names / sizeof layer_names[0]; i++)
        if (strcmp(end + 1, layer_names[i].hf) == 0) {
            int n = snprintf(buf, cap, "blk.%ld.%s", layer, layer_names[i].canon);
            return n > 0 && (size_t)n < cap;
        }
    return false;
}

static hr_status read_json_file(const char *dir, const char *name, bool required, char **text,
                                size_t *len, char *path, size_t path_cap, hr_error *err) {
    *text = NULL;
    if (!hr_path_join(path, path_cap, dir, name))
        return hr_err_set(err, HR_ERR_INVALID, "%s: path too long", dir);
    if (!hr_path_exists(path)) {
        if (required)
            return hr_err_set(err, HR_ERR_IO, "%s: missing (a Hugging Face model folder needs "
                                              "config.json)",
                              path);
        return HR_OK;
    }
    return hr_file_read_all(path, CONFIG_MAX_BYTES, text, len, err);
}

/* t's description of the file's tensor s (its name is set by the caller). */
static void describe(model_tensor *t, const st_tensor *s) {
    t->src_name = s->name;
    t->dtype = s->dtype;
    t->n_dims = s->n_dims;
    for (int d = 0; d < 4; d++)
        t->ne[d] = d < s->n_dims ? s->shape[s->n_dims - 1 - d] : 1;
    t->n_bytes = s->n_bytes;
    t->data = s->data;
}

static hr_status copy_tensors(hr_model *m, hr_error *err) {
    const st_set *st = m->st;
    m->tensors = hr_calloc((size_t)st->n_tensors, sizeof *m->tensors);
    if (!m->tensors && st->n_tensors)
        return hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory", m->path);
    char name[128];
    for (int32_t i = 0; i < st->n_tensors; i++) {
        const st_tensor *s = &st->tensors[i];
        if (!canonical_name(s->name, name, sizeof name)) {
            HR_LOG_D("%s: ignoring tensor '%s'", m->path, s->name);
            continue;
        }
        if (s->n_dims < 1 || s->n_dims > 4)
            return hr_err_set(err, HR_ERR_FORMAT, "%s: tensor '%s' has %d dimensions", m->path,
                              s->name, s->n_dims);
        /* kernels read elements in place; safetensors does not promise alignment */
        if ((uintptr_t)s->data % (uintptr_t)hr_dtype_table[s->dtype].block_bytes != 0)
            return hr_err_set(err, HR_ERR_UNSUPPORTED,
                              "%s: tensor '%s' starts at a byte offset that is not a multiple "
                              "of its %d-byte elements (re-save the checkpoint with the "
                              "safetensors library)",
                              m->path, s->name, hr_dtype_table[s->dtype].block_bytes);
        if (model_find_tensor(m, name))
            return hr_err_set(err, HR_ERR_FORMAT, "%s: tensor '%s' appears twice", m->path,
                              s->name);
        model_tensor *t = &m->tensors[m->n_tensors];
        t->name = hr_strdup(name);
        if (!t->name)
            return hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory", m->path);
        m->n_tensors++;
        describe(t, s);
    }
    return HR_OK;
}

hr_status model_wrap_st(st_set *st, hr_model **out, hr_error *err) {
    hr_model *m = hr_calloc(1, sizeof *m);
    if (!m) {
        st_free(st);
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory");
    }
    m->st = st;
    m->tensors = hr_calloc((size_t)st->n_tensors + 1, sizeof *m->tensors);
    if (!m->tensors) {
        hr_model_free(m);
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory");
    }
    for (int32_t i = 0; i < st->n_tensors; i++) {
        const st_tensor *s = &st->tensors[i];
        model_tensor *t = &m->tensors[m->n_tensors];
        if (s->n_dims > 4)
            continue;
        t->name = hr_strdup(s->name);
        if (!t->name) {
            hr_model_free(m);
            return hr_err_set(err, HR_ERR_NOMEM, "out of memory");
        }
        m->n_tensors++;
        describe(t, s);
    }
    *out = m;
    return HR_OK;
}

static hr_status read_chat_template(hr_model *m, const char *dir, hr_error *err) {
    char path[4096];
    char *text;
    size_t len;
    HR_TRY(read_json_file(dir, "tokenizer_config.json", false, &text, &len, path, sizeof path,
                          err));
    if (!text)
        return HR_OK;
    hr_status s = HR_OK;
    bool nomem;
    cJSON *root = hr_json_parse(text, len, NULL, &nomem);
    if (!root) {
        s = nomem ? hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory parsing JSON", path)
                  : hr_err_set(err, HR_ERR_FORMAT, "%s: not valid JSON", path);
        goto done;
    }
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(root, "chat_template");
    if (cJSON_IsString(ct)) {
        m->chat_template = hr_strdup(ct->valuestring);
        if (!m->chat_template)
            s = hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory", path);
    } else if (cJSON_IsArray(ct)) {
        /* a list of named templates: take "default" */
        const cJSON *it;
        cJSON_ArrayForEach(it, ct) {
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
            const cJSON *tp = cJSON_GetObjectItemCaseSensitive(it, "template");
            if (cJSON_IsString(nm) && strcmp(nm->valuestring, "default") == 0 &&
                cJSON_IsString(tp)) {
                m->chat_template = hr_strdup(tp->valuestring);
                if (!m->chat_template)
                    s = hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory", path);
            }
        }
    }
done:
    cJSON_Delete(root);
    hr_free(text);
    return s;
}

static hr_status load_rest(hr_model *m, const char *dir, const hr_model_params *p,
                           const char *config, size_t config_len, const char *config_path,
                           hr_error *err);

hr_status model_load_hf_dir(hr_model *m, const char *dir, const hr_model_params *p,
                            hr_error *err) {
    char path[4096];
    char *text;
    size_t len;
    hr_model_info *in = &m->info;
    char *config;
    size_t config_len;
    char config_path[4096];
    HR_TRY(read_json_file(dir, "config.json", true, &config, &config_len, config_path,
                          sizeof config_path, err));
    hr_status s = hf_config_parse(config, config_len, config_path, in, err);
    if (s == HR_OK)
        s = read_json_file(dir, "generation_config.json", false, &text, &len, path, sizeof path,
                           err);
    if (s == HR_OK && text) {
        s = hf_generation_config_parse(text, len, path, in, err);
        hr_free(text);
    }
    if (s == HR_OK)
        s = load_rest(m, dir, p, config, config_len, config_path, err);
    hr_free(config);
    return s;
}

/* Everything after config.json: tokenizer, chat template, tensors (and
 * bitsandbytes' repacking, which reads config.json again). */
static hr_status load_rest(hr_model *m, const char *dir, const hr_model_params *p,
                           const char *config, size_t config_len, const char *config_path,
                           hr_error *err) {
    hr_model_info *in = &m->info;
    snprintf(in->format, sizeof in->format, "safetensors");
    if (!in->name[0]) {
        const char *base = strrchr(dir, '/');
        snprintf(in->name, sizeof in->name, "%s", base && base[1] ? base + 1 : dir);
    }
    m->rope = ROPE_STYLE_NEOX;
    HR_TRY(model_check_hparams(in, dir, err));

    char tj[4096], tm[4096];
    bool has_tok = (hr_path_join(tj, sizeof tj, dir, "tokenizer.json") && hr_path_exists(tj)) ||
                   (hr_path_join(tm, sizeof tm, dir, "tokenizer.model") && hr_path_exists(tm));
    if (has_tok)
        HR_TRY(tokenizer_from_dir(dir, &m->tok, err));
    else if (!p->tokenizer_path)
        HR_LOG_W("%s: no tokenizer.json or tokenizer.model in the folder", dir);
    HR_TRY(read_chat_template(m, dir, err));
    if (p->vocab_only)
        return HR_OK;
    HR_TRY(st_open_dir(dir, &m->st, err));
    HR_TRY(copy_tensors(m, err));
    return model_bnb_repack(m, config, config_len, config_path, err);
}
