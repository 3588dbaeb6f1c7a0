/*
 * hf_config.c — Hugging Face config.json and generation_config.json.
 *
 * config.json is a flat object of hyper-parameters written by transformers'
 * config classes. We read the fields LlamaForCausalLM, MistralForCausalLM and
 * Qwen2ForCausalLM use, apply the defaults those classes apply when a field
 * is absent (num_key_value_heads = heads, head_dim = hidden / heads,
 * rms_norm_eps 1e-6, rope_theta 10000, max_position_embeddings per class),
 * and range-check everything, since these numbers size every allocation
 * that follows. Both RoPE spellings are accepted: transformers 4.x writes
 * rope_theta + rope_scaling {"type"|"rope_type", ...}; 5.x writes
 * rope_parameters {"rope_type", "rope_theta", ...}.
 *
 * Options that change the math without a place in hr_model_info (other
 * activations, o_proj/MLP biases, sliding-window layers, quantized HF
 * checkpoints, yarn/dynamic RoPE) are refused with HR_ERR_UNSUPPORTED rather
 * than run wrongly. One exception: Mistral's sliding_window caps n_ctx_train,
 * since full attention equals windowed attention up to the window.
 *
 * Lookups scan for the key and refuse duplicates: Python's json keeps the
 * last of two equal keys and cJSON the first, so a file with both would
 * mean different models to transformers and to us.
 */
#include "format/hf_config.h"

#include "util/alloc.h"
#include "util/error.h"

#include "util/json.h"
#include <float.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* Config files are a few KB; 4 MB leaves room for odd extras (a long
 * layer_types list, embedded chat templates). */
#define HF_MAX_CONFIG_BYTES ((size_t)4 * 1024 * 1024)

/* Upper bounds well above any published Llama-family model (largest today:
 * hidden 16384, 126 layers, 128 heads, head_dim 256, ffn 53248, vocab
 * ~256k, context 10M) that keep later products such as hidden * vocab and
 * layers * ctx * head_dim inside int64 and reject garbage early. */
#define HF_MAX_EMBD (1 << 18)
#define HF_MAX_LAYER 1024
#define HF_MAX_HEAD 4096
#define HF_MAX_HEAD_DIM 1024
#define HF_MAX_FF (1 << 20)
#define HF_MAX_VOCAB (1 << 24)
#define HF_MAX_CTX (1 << 26)
#define HF_MAX_EOS ((int)(sizeof(((hr_model_info *)0)->eos_ids) / sizeof(int32_t)))

typedef struct {
    const char *hf_class;   /* architectures[0] */
    const char *model_type; /* used when architectures is absent */
    bool qkv_bias;
    int32_t default_ctx; /* the config class's max_position_embeddings default */
} hf_arch;

static const hf_arch hf_archs[] = {
    {"LlamaForCausalLM", "llama", false, 2048},
    {"MistralForCausalLM", "mistral", false, 131072},
    /* Qwen2 attention has biases on q, k and v (not o) */
    {"Qwen2ForCausalLM", "qwen2", true, 32768},
};

/* ---------------------------------------------------------------- JSON */

/* text need not be NUL-terminated: parse a terminated copy so that cJSON
 * cannot run past len. */
static hr_status parse_object(const char *text, size_t len, const char *file, cJSON **out,
                              hr_error *err) {
    if (len > HF_MAX_CONFIG_BYTES)
        return hr_err_set(err, HR_ERR_FORMAT, "%s: %zu bytes, more than the %zu allowed", file,
                          len, HF_MAX_CONFIG_BYTES);
    char *copy = hr_strndup(text, len);
    if (!copy)
        return hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory", file);
    hr_status st = HR_OK;
    const char *end = NULL;
    bool nomem;
    cJSON *root = hr_json_parse(copy, len, &end, &nomem);
    if (!root && nomem) {
        st = hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory parsing JSON", file);
        goto done;
    }
    if (!root) {
        size_t at = end && end >= copy && end <= copy + len ? (size_t)(end - copy) : 0;
        int line = 1, col = 1;
        for (size_t i = 0; i < at; i++) {
            if (copy[i] == '\n') {
                line++;
                col = 1;
            } else {
                col++;
            }
        }
        st = hr_err_set(err, HR_ERR_FORMAT, "%s: not valid JSON (line %d, column %d)", file,
                        line, col);
        goto done;
    }
    for (const char *p = end; p < copy + len; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            st = hr_err_set(err, HR_ERR_FORMAT, "%s: unexpected text after the JSON object",
                            file);
            goto done;
        }
    }
    if (!cJSON_IsObject(root)) {
        st = hr_err_set(err, HR_ERR_FORMAT, "%s: the top level is not a JSON object", file);
        goto done;
    }
    *out = root;
    root = NULL;
done:
    cJSON_Delete(root);
    hr_free(copy);
    return st;
}

/* The member key of o, or NULL when absent or null (transformers treats an
 * explicit null as "use the default"). what prefixes nested keys in
 * messages ("rope_scaling."). */
static hr_status field(const cJSON *o, const char *key, const char *file, const char *what,
                       const cJSON **out, hr_error *err) {
    const cJSON *found = NULL;
    for (const cJSON *e = o->child; e; e = e->next) {
        if (strcmp(e->string, key) != 0)
            continue;
        if (found)
            return hr_err_set(err, HR_ERR_FORMAT, "%s: '%s%s' appears twice", file, what, key);
        found = e;
    }
    *out = found && !cJSON_IsNull(found) ? found : NULL;
    return HR_OK;
}

/* An integer field in [lo, hi]; *out untouched when absent. */
static hr_status get_int(const cJSON *o, const char *key, const char *file, const char *what,
                         bool required, int64_t lo, int64_t hi, int32_t *out, hr_error *err) {
    const cJSON *v;
    HR_TRY(field(o, key, file, what, &v, err));
    if (!v) {
        if (required)
            return hr_err_set(err, HR_ERR_FORMAT, "%s: required field '%s%s' is missing", file,
                              what, key);
        return HR_OK;
    }
    if (!cJSON_IsNumber(v))
        return hr_err_set(err, HR_ERR_FORMAT, "%s: '%s%s' must be an integer; found a %s", file,
                          what, key, cJSON_IsString(v) ? "string" : "non-number");
    double d = v->valuedouble;
    /* range first: the cast below is only defined for values in range */
    if (!(d >= (double)lo && d <= (double)hi) || d != (double)(int64_t)d)
        return hr_err_set(err, HR_ERR_FORMAT,
                          "%s: '%s%s' is %.17g; expected an integer in [%lld, %lld]", file, what,
                          key, d, (long long)lo, (long long)hi);
    *out = (int32_t)d;
    return HR_OK;
}

/* A finite number > lo_excl and <= hi; *out untouched when absent. */
static hr_status get_float(const cJSON *o, const char *key, const char *file, const char *what,
                           bool required, double lo_excl, double hi, float *out,
                           hr_error *err) {
    const cJSON *v;
    HR_TRY(field(o, key, file, what, &v, err));
    if (!v) {
        if (required)
            return hr_err_set(err, HR_ERR_FORMAT, "%s: required field '%s%s' is missing", file,
                              what, key);
        return HR_OK;
    }
    if (!cJSON_IsNumber(v))
        return hr_err_set(err, HR_ERR_FORMAT, "%s: '%s%s' must be a number; found a %s", file,
                          what, key, cJSON_IsString(v) ? "string" : "non-number");
    /* the float must still be in range: 1e-55 is > 0 as a double but 0 as a float */
    double d = v->valuedouble;
    if (!(d > lo_excl && d <= hi) || !((float)d > lo_excl))
        return hr_err_set(err, HR_ERR_FORMAT, "%s: '%s%s' is %g; expected a number in (%g, %g]",
                          file, what, key, d, lo_excl, hi);
    *out = (float)d;
    return HR_OK;
}

static hr_status get_bool(const cJSON *o, const char *key, const char *file, bool *out,
                          hr_error *err) {
    const cJSON *v;
    HR_TRY(field(o, key, file, "", &v, err));
    if (!v)
        return HR_OK;
    if (!cJSON_IsBool(v))
        return hr_err_set(err, HR_ERR_FORMAT, "%s: '%s' must be true or false", file, key);
    *out = cJSON_IsTrue(v);
    return HR_OK;
}

/* A string field; NULL when absent. */
static hr_status get_str(const cJSON *o, const char *key, const char *file, const char *what,
                         const char **out, hr_error *err) {
    const cJSON *v;
    HR_TRY(field(o, key, file, what, &v, err));
    if (v && !cJSON_IsString(v))
        return hr_err_set(err, HR_ERR_FORMAT, "%s: '%s%s' must be a string", file, what, key);
    *out = v ? v->valuestring : NULL;
    return HR_OK;
}

/* ---------------------------------------------------------------- token ids */

/* A token id must index the vocabulary when its size is known. */
static hr_status check_id(double d, const char *key, const char *file, int32_t n_vocab,
                          int32_t *out, hr_error *err) {
    double hi = n_vocab > 0 ? (double)n_vocab - 1 : (double)INT32_MAX;
    if (!(d >= 0 && d <= hi) || d != (double)(int64_t)d)
        return hr_err_set(err, HR_ERR_FORMAT,
                          "%s: '%s' has id %.17g; expected an integer in [0, %.0f]", file, key,
                          d, hi);
    *out = (int32_t)d;
    return HR_OK;
}

/* Adds id to ids[*n] unless present. */
static hr_status add_eos(int32_t id, int32_t *ids, int32_t *n, const char *file,
                         hr_error *err) {
    for (int32_t i = 0; i < *n; i++)
        if (ids[i] == id)
            return HR_OK;
    if (*n >= HF_MAX_EOS)
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "%s: more than %d distinct 'eos_token_id' values", file, HF_MAX_EOS);
    ids[(*n)++] = id;
    return HR_OK;
}

/* eos_token_id: an int, a list of ints, or null; merged into ids. */
static hr_status read_eos(const cJSON *o, const char *file, int32_t n_vocab, int32_t *ids,
                          int32_t *n, hr_error *err) {
    const cJSON *v;
    HR_TRY(field(o, "eos_token_id", file, "", &v, err));
    if (!v)
        return HR_OK;
    int32_t id = 0;
    if (cJSON_IsNumber(v)) {
        HR_TRY(check_id(v->valuedouble, "eos_token_id", file, n_vocab, &id, err));
        return add_eos(id, ids, n, file, err);
    }
    if (!cJSON_IsArray(v))
        return hr_err_set(err, HR_ERR_FORMAT,
                          "%s: 'eos_token_id' must be an integer or a list of integers", file);
    for (const cJSON *e = v->child; e; e = e->next) {
        if (!cJSON_IsNumber(e))
            return hr_err_set(err, HR_ERR_FORMAT, "%s: 'eos_token_id' list holds a non-number",
                              file);
        HR_TRY(check_id(e->valuedouble, "eos_token_id", file, n_vocab, &id, err));
        HR_TRY(add_eos(id, ids, n, file, err));
    }
    return HR_OK;
}

/* bos_token_id: an int or null (*bos untouched). */
static hr_status read_bos(const cJSON *o, const char *file, int32_t n_vocab, int32_t *bos,
                          hr_error *err) {
    const cJSON *v;
    HR_TRY(field(o, "bos_token_id", file, "", &v, err));
    if (!v)
        return HR_OK;
    if (!cJSON_IsNumber(v))
        return hr_err_set(err, HR_ERR_FORMAT, "%s: 'bos_token_id' must be an integer", file);
    return check_id(v->valuedouble, "bos_token_id", file, n_vocab, bos, err);
}

/* ---------------------------------------------------------------- config.json */

static hr_status read_arch(const cJSON *root, const char *file, const hf_arch **out,
                           hr_error *err) {
    const cJSON *archs = NULL;
    const char *mt;
    HR_TRY(field(root, "architectures", file, "", &archs, err));
    HR_TRY(get_str(root, "model_type", file, "", &mt, err));
    if (archs && !cJSON_IsArray(archs))
        return hr_err_set(err, HR_ERR_FORMAT, "%s: 'architectures' must be a list of strings",
                          file);
    if (archs && archs->child) {
        const cJSON *a0 = archs->child;
        if (!cJSON_IsString(a0))
            return hr_err_set(err, HR_ERR_FORMAT, "%s: 'architectures[0]' must be a string",
                              file);
        for (size_t i = 0; i < sizeof hf_archs / sizeof hf_archs[0]; i++) {
            if (strcmp(a0->valuestring, hf_archs[i].hf_class) == 0) {
                *out = &hf_archs[i];
                return HR_OK;
            }
        }
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "%s: architecture '%.64s' is not supported (headroom runs "
                          "LlamaForCausalLM, MistralForCausalLM and Qwen2ForCausalLM)",
                          file, a0->valuestring);
    }
    if (!mt)
        return hr_err_set(err, HR_ERR_FORMAT,
                          "%s: neither 'architectures' nor 'model_type' is given", file);
    for (size_t i = 0; i < sizeof hf_archs / sizeof hf_archs[0]; i++) {
        if (strcmp(mt, hf_archs[i].model_type) == 0) {
            *out = &hf_archs[i];
            return HR_OK;
        }
    }
    return hr_err_set(err, HR_ERR_UNSUPPORTED,
                      "%s: model_type '%.64s' is not supported (headroom runs llama, mistral "
                      "and qwen2)",
                      file, mt);
}

/* rope_scaling (4.x) or rope_parameters (5.x): spec is that object, what
 * its key plus "." for messages. */
static hr_status read_rope_spec(const cJSON *spec, const char *file, const char *what,
                                hr_model_info *m, hr_error *err) {
    const char *type = NULL, *type_old = NULL;
    HR_TRY(get_str(spec, "rope_type", file, what, &type, err));
    HR_TRY(get_str(spec, "type", file, what, &type_old, err));
    if (!type)
        type = type_old;
    if (!type)
        return hr_err_set(err, HR_ERR_FORMAT, "%s: '%srope_type' is missing", file, what);
    if (strcmp(type, "default") == 0) {
        m->rope_scaling = HR_ROPE_SCALING_NONE;
        return HR_OK;
    }
    if (strcmp(type, "linear") == 0) {
        m->rope_scaling = HR_ROPE_SCALING_LINEAR;
        return get_float(spec, "factor", file, what, true, 0.0, 1e6, &m->rope_factor, err);
    }
    if (strcmp(type, "llama3") == 0) {
        m->rope_scaling = HR_ROPE_SCALING_LLAMA3;
        HR_TRY(get_float(spec, "factor", file, what, true, 0.0, 1e6, &m->rope_factor, err));
        HR_TRY(get_float(spec, "low_freq_factor", file, what, true, 0.0, 1e6,
                         &m->rope_low_freq_factor, err));
        HR_TRY(get_float(spec, "high_freq_factor", file, what, true, 0.0, 1e6,
                         &m->rope_high_freq_factor, err));
        HR_TRY(get_int(spec, "original_max_position_embeddings", file, what, true, 1, HF_MAX_CTX,
                       &m->rope_orig_ctx, err));
        /* the smoothing divides by high - low */
        if (!(m->rope_high_freq_factor > m->rope_low_freq_factor))
            return hr_err_set(err, HR_ERR_FORMAT,
                              "%s: '%shigh_freq_factor' (%g) must be greater than "
                              "'%slow_freq_factor' (%g)",
                              file, what, (double)m->rope_high_freq_factor, what,
                              (double)m->rope_low_freq_factor);
        return HR_OK;
    }
    return hr_err_set(err, HR_ERR_UNSUPPORTED,
                      "%s: RoPE scaling type '%.32s' ('%srope_type') is not supported "
                      "(headroom implements linear and llama3)",
                      file, type, what);
}

static hr_status read_rope(const cJSON *root, const char *file, hr_model_info *m,
                           hr_error *err) {
    const cJSON *params = NULL, *scaling = NULL;
    HR_TRY(field(root, "rope_parameters", file, "", &params, err));
    HR_TRY(field(root, "rope_scaling", file, "", &scaling, err));
    m->rope_theta = 10000.0f;
    m->rope_scaling = HR_ROPE_SCALING_NONE;
    HR_TRY(get_float(root, "rope_theta", file, "", false, 0.0, FLT_MAX, &m->rope_theta, err));
    if (params) {
        if (!cJSON_IsObject(params))
            return hr_err_set(err, HR_ERR_FORMAT, "%s: 'rope_parameters' must be an object",
                              file);
        HR_TRY(get_float(params, "rope_theta", file, "rope_parameters.", false, 0.0, FLT_MAX,
                         &m->rope_theta, err));
        return read_rope_spec(params, file, "rope_parameters.", m, err);
    }
    if (scaling) {
        if (!cJSON_IsObject(scaling))
            return hr_err_set(err, HR_ERR_FORMAT, "%s: 'rope_scaling' must be an object or null",
                              file);
        return read_rope_spec(scaling, file, "rope_scaling.", m, err);
    }
    return HR_OK;
}

/* Options that would change the forward pass in ways hr_model_info cannot
 * express. */
static hr_status check_unsupported(const cJSON *root, const char *file, const hf_arch *a,
                                   hr_error *err) {
    const char *act;
    HR_TRY(get_str(root, "hidden_act", file, "", &act, err));
    if (act && strcmp(act, "silu") != 0)
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "%s: 'hidden_act' is '%.32s'; headroom implements silu (SwiGLU)", file,
                          act);
    bool attn_bias = false, mlp_bias = false, swa = false;
    HR_TRY(get_bool(root, "attention_bias", file, &attn_bias, err));
    HR_TRY(get_bool(root, "mlp_bias", file, &mlp_bias, err));
    HR_TRY(get_bool(root, "use_sliding_window", file, &swa, err));
    if (attn_bias && !a->qkv_bias)
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "%s: 'attention_bias' is true (biases on q/k/v/o); not supported",
                          file);
    if (mlp_bias)
        return hr_err_set(err, HR_ERR_UNSUPPORTED, "%s: 'mlp_bias' is true; not supported",
                          file);
    if (swa)
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "%s: 'use_sliding_window' is true; sliding-window layers are not "
                          "supported",
                          file);
    const cJSON *lt = NULL;
    HR_TRY(field(root, "layer_types", file, "", &lt, err));
    if (lt) {
        if (!cJSON_IsArray(lt))
            return hr_err_set(err, HR_ERR_FORMAT, "%s: 'layer_types' must be a list", file);
        int i = 0;
        for (const cJSON *e = lt->child; e; e = e->next, i++) {
            if (!cJSON_IsString(e))
                return hr_err_set(err, HR_ERR_FORMAT, "%s: 'layer_types[%d]' is not a string",
                                  file, i);
            if (strcmp(e->valuestring, "full_attention") != 0)
                return hr_err_set(err, HR_ERR_UNSUPPORTED,
                                  "%s: 'layer_types[%d]' is '%.32s'; only full_attention "
                                  "layers are supported",
                                  file, i, e->valuestring);
        }
    }
    const cJSON *q = NULL;
    HR_TRY(field(root, "quantization_config", file, "", &q, err));
    if (q) {
        const cJSON *qm = cJSON_IsObject(q) ? cJSON_GetObjectItemCaseSensitive(q, "quant_method")
                                            : NULL;
        /* bitsandbytes' tensors are read by model_bnb.c */
        if (cJSON_IsString(qm) && strcmp(qm->valuestring, "bitsandbytes") == 0)
            return HR_OK;
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "%s: quantized Hugging Face checkpoints ('quantization_config', "
                          "method '%.32s') are not supported (bitsandbytes ones are); use the "
                          "unquantized model or a GGUF file",
                          file, cJSON_IsString(qm) ? qm->valuestring : "?");
    }
    return HR_OK;
}

static hr_status read_config(const cJSON *root, const char *file, hr_model_info *m,
                             hr_error *err) {
    const hf_arch *a = NULL;
    HR_TRY(read_arch(root, file, &a, err));
    snprintf(m->arch, sizeof m->arch, "%s", a->model_type);
    m->qkv_bias = a->qkv_bias;
    const char *name;
    HR_TRY(get_str(root, "_name_or_path", file, "", &name, err));
    if (name)
        snprintf(m->name, sizeof m->name, "%s", name);
    HR_TRY(check_unsupported(root, file, a, err));

    /* sizes */
    HR_TRY(get_int(root, "hidden_size", file, "", true, 1, HF_MAX_EMBD, &m->n_embd, err));
    HR_TRY(get_int(root, "num_hidden_layers", file, "", true, 1, HF_MAX_LAYER, &m->n_layer, err));
    HR_TRY(get_int(root, "num_attention_heads", file, "", true, 1, HF_MAX_HEAD, &m->n_head, err));
    m->n_head_kv = m->n_head;
    HR_TRY(get_int(root, "num_key_value_heads", file, "", false, 1, HF_MAX_HEAD, &m->n_head_kv,
                   err));
    HR_TRY(get_int(root, "intermediate_size", file, "", true, 1, HF_MAX_FF, &m->n_ff, err));
    HR_TRY(get_int(root, "vocab_size", file, "", true, 1, HF_MAX_VOCAB, &m->n_vocab, err));
    m->n_ctx_train = a->default_ctx;
    HR_TRY(get_int(root, "max_position_embeddings", file, "", false, 1, HF_MAX_CTX,
                   &m->n_ctx_train, err));
    if (m->n_head % m->n_head_kv != 0)
        return hr_err_set(err, HR_ERR_FORMAT,
                          "%s: 'num_attention_heads' (%d) is not a multiple of "
                          "'num_key_value_heads' (%d)",
                          file, m->n_head, m->n_head_kv);
    m->head_dim = 0;
    HR_TRY(get_int(root, "head_dim", file, "", false, 1, HF_MAX_HEAD_DIM, &m->head_dim, err));
    if (m->head_dim == 0) {
        if (m->n_embd % m->n_head != 0)
            return hr_err_set(err, HR_ERR_FORMAT,
                              "%s: 'hidden_size' (%d) is not a multiple of "
                              "'num_attention_heads' (%d) and no 'head_dim' is given",
                              file, m->n_embd, m->n_head);
        m->head_dim = m->n_embd / m->n_head;
        if (m->head_dim > HF_MAX_HEAD_DIM)
            return hr_err_set(err, HR_ERR_FORMAT,
                              "%s: 'hidden_size' / 'num_attention_heads' = %d is over the "
                              "head_dim limit %d",
                              file, m->head_dim, HF_MAX_HEAD_DIM);
    }
    /* RoPE rotates pairs of dimensions */
    if (m->head_dim % 2 != 0)
        return hr_err_set(err, HR_ERR_FORMAT, "%s: head_dim %d is odd; RoPE needs pairs", file,
                          m->head_dim);

    /* numerics */
    m->rms_eps = 1e-6f;
    HR_TRY(get_float(root, "rms_norm_eps", file, "", false, 0.0, 1.0, &m->rms_eps, err));
    HR_TRY(read_rope(root, file, m, err));
    if (m->rope_scaling == HR_ROPE_SCALING_LLAMA3 && m->rope_orig_ctx > m->n_ctx_train)
        return hr_err_set(err, HR_ERR_FORMAT,
                          "%s: rope original_max_position_embeddings (%d) exceeds "
                          "max_position_embeddings (%d)",
                          file, m->rope_orig_ctx, m->n_ctx_train);
    HR_TRY(get_bool(root, "tie_word_embeddings", file, &m->tie_embeddings, err));

    /* Mistral: attention looks back sliding_window tokens at most. */
    if (strcmp(a->model_type, "mistral") == 0) {
        int32_t window = 0;
        HR_TRY(get_int(root, "sliding_window", file, "", false, 1, HF_MAX_CTX, &window, err));
        if (window > 0 && window < m->n_ctx_train)
            m->n_ctx_train = window;
    }

    /* special tokens */
    m->bos_id = -1;
    HR_TRY(read_bos(root, file, m->n_vocab, &m->bos_id, err));
    return read_eos(root, file, m->n_vocab, m->eos_ids, &m->n_eos, err);
}

hr_status hf_config_parse(const char *text, size_t len, const char *name, hr_model_info *info,
                          hr_error *err) {
    cJSON *root = NULL;
    HR_TRY(parse_object(text, len, name, &root, err));
    hr_model_info m;
    memset(&m, 0, sizeof m);
    hr_status st = read_config(root, name, &m, err);
    cJSON_Delete(root);
    if (st == HR_OK)
        *info = m;
    return st;
}

hr_status hf_generation_config_parse(const char *text, size_t len, const char *name,
                                     hr_model_info *info, hr_error *err) {
    cJSON *root = NULL;
    HR_TRY(parse_object(text, len, name, &root, err));
    hr_model_info m = *info;
    if (m.n_eos < 0 || m.n_eos > HF_MAX_EOS) {
        cJSON_Delete(root);
        return hr_err_set(err, HR_ERR_INVALID, "%s: info.n_eos is %d; parse config.json first",
                          name, m.n_eos);
    }
    hr_status st = read_bos(root, name, m.n_vocab, &m.bos_id, err);
    if (st == HR_OK)
        st = read_eos(root, name, m.n_vocab, m.eos_ids, &m.n_eos, err);
    cJSON_Delete(root);
    if (st == HR_OK)
        *info = m;
    return st;
}
