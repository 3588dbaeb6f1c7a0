/*
 * synthetic.c — models of well-known shapes with random weights, made in
 * memory: `headroom bench --synthetic llama2-7b` measures speed without a
 * 13 GB download, and the planner reasons about shapes no one has on disk.
 *
 * Weights are random but never degenerate: 16-bit values with random sign
 * and mantissa around 0.01 (about the spread of trained 7B weights), f32
 * uniform in +-0.05; quantized blocks get
 * random codes and a fixed, finite scale written where each format keeps its
 * f16 scales. Norm weights are 1. Values do not affect speed, but NaNs or
 * zeros could, so neither is produced. A tokenizer can be attached
 * (params->tokenizer_path) so the model can be written as a GGUF file that
 * other engines load, for side-by-side benchmarks.
 */
#include "model/model_load.h"

#include "util/alloc.h"
#include "util/dtype.h"
#include "util/fp16.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

typedef struct {
    const char *name;
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx;
    float rope_theta, rms_eps;
    bool tied;
} synthetic_shape;

/* Published configs of the models these names stand for. */
static const synthetic_shape shapes[] = {
    {"tinyllama-1.1b", 32000, 2048, 22, 32, 4, 5632, 2048, 10000.0f, 1e-5f, false},
    {"llama2-7b", 32000, 4096, 32, 32, 32, 11008, 4096, 10000.0f, 1e-5f, false},
    {"llama2-13b", 32000, 5120, 40, 40, 40, 13824, 4096, 10000.0f, 1e-5f, false},
    {"llama3-8b", 128256, 4096, 32, 32, 8, 14336, 8192, 500000.0f, 1e-5f, false},
    {"llama2-70b", 32000, 8192, 80, 64, 8, 28672, 4096, 10000.0f, 1e-5f, false},
    {"smollm2-135m", 49152, 576, 30, 9, 3, 1536, 8192, 100000.0f, 1e-5f, true},
};

static const char *const shape_names[] = {"tinyllama-1.1b", "llama2-7b", "llama2-13b",
                                          "llama3-8b", "llama2-70b", "smollm2-135m", NULL};

const char *const *hr_model_synthetic_shapes(void) { return shape_names; }

/* Byte offsets of the f16 scales inside one block of each quantized type. */
static int scale_offsets(hr_dtype t, int off[2]) {
    switch (t) {
    case HR_DTYPE_Q8_0:
    case HR_DTYPE_Q4_0:
    case HR_DTYPE_Q5_0:
    case HR_DTYPE_NF4:
    case HR_DTYPE_FP4: off[0] = 0; return 1;
    case HR_DTYPE_Q4_1:
    case HR_DTYPE_Q5_1:
    case HR_DTYPE_Q4_K:
    case HR_DTYPE_Q5_K: off[0] = 0; off[1] = 2; return 2;
    case HR_DTYPE_Q2_K: off[0] = 80; off[1] = 82; return 2;
    case HR_DTYPE_Q3_K: off[0] = 108; return 1;
    case HR_DTYPE_Q6_K: off[0] = 208; return 1;
    default: return 0;
    }
}

static uint64_t next_rand(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void fill(uint8_t *dst, hr_dtype t, int64_t n_elem, uint64_t *rng) {
    if (t == HR_DTYPE_F16 || t == HR_DTYPE_BF16) {
        /* four values per random word: random sign and mantissa, exponent
         * fixed at 2^-7 (magnitudes 0.008 to 0.016): never zero, never a NaN,
         * and 7 billion of them in seconds */
        uint16_t keep = t == HR_DTYPE_BF16 ? 0x807f : 0x83ff;
        uint16_t exp = t == HR_DTYPE_BF16 ? 0x3c00 : 0x2000;
        int64_t i = 0;
        for (; i + 4 <= n_elem; i += 4) {
            uint64_t r = next_rand(rng);
            for (int k = 0; k < 4; k++) {
                uint16_t h = (uint16_t)((uint16_t)(r >> (16 * k)) & keep) | exp;
                memcpy(dst + 2 * (i + k), &h, 2);
            }
        }
        for (; i < n_elem; i++) {
            uint16_t h = (uint16_t)((uint16_t)next_rand(rng) & keep) | exp;
            memcpy(dst + 2 * i, &h, 2);
        }
        return;
    }
    if (t == HR_DTYPE_F32) {
        for (int64_t i = 0; i < n_elem; i++) {
            float v = ((float)(next_rand(rng) >> 40) / 16777216.0f - 0.5f) * 0.1f;
            memcpy(dst + 4 * i, &v, 4);
        }
        return;
    }
    const hr_dtype_info *d = &hr_dtype_table[t];
    int64_t n_block = n_elem / d->block_elems;
    size_t n_bytes = (size_t)n_block * (size_t)d->block_bytes;
    for (size_t i = 0; i + 8 <= n_bytes; i += 8) {
        uint64_t r = next_rand(rng);
        memcpy(dst + i, &r, 8);
    }
    int off[2];
    int n_off = scale_offsets(t, off);
    uint16_t scale = hr_f32_to_f16(0.002f);
    for (int64_t b = 0; b < n_block; b++)
        for (int k = 0; k < n_off; k++)
            memcpy(dst + (size_t)b * (size_t)d->block_bytes + (size_t)off[k], &scale, 2);
}

static hr_status add_tensor(hr_model *m, const char *name, hr_dtype t, int64_t ne0, int64_t ne1,
                            hr_error *err) {
    model_tensor *x = &m->tensors[m->n_tensors];
    x->name = hr_strdup(name);
    if (!x->name)
        return hr_err_set(err, HR_ERR_NOMEM, "synthetic model: out of memory");
    m->n_tensors++;
    x->src_name = x->name;
    x->dtype = t;
    x->n_dims = ne1 > 1 ? 2 : 1;
    x->ne[0] = ne0;
    x->ne[1] = ne1;
    x->ne[2] = x->ne[3] = 1;
    uint64_t b;
    if (!hr_dtype_bytes_checked(t, ne0 * ne1, &b) || ne0 % hr_dtype_block_elems(t) != 0)
        return hr_err_set(err, HR_ERR_INVALID,
                          "synthetic model: tensor '%s' rows of %lld do not divide into %s "
                          "blocks of %lld",
                          name, (long long)ne0, hr_dtype_name(t),
                          (long long)hr_dtype_block_elems(t));
    x->n_bytes = b;
    return HR_OK;
}

hr_status hr_model_synthetic(const char *shape, hr_dtype weights, const hr_model_params *params,
                             hr_model **out, hr_error *err) {
    const synthetic_shape *sh = NULL;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (strcasecmp(shape, shapes[i].name) == 0)
            sh = &shapes[i];
    if (!sh)
        return hr_err_set(err, HR_ERR_INVALID,
                          "unknown synthetic shape '%s' (tinyllama-1.1b, llama2-7b, llama2-13b, "
                          "llama3-8b, llama2-70b, smollm2-135m)",
                          shape);
    if ((unsigned)weights >= HR_DTYPE_COUNT ||
        !(weights == HR_DTYPE_F32 || weights == HR_DTYPE_F16 || weights == HR_DTYPE_BF16 ||
          hr_dtype_table[weights].is_quant) ||
        weights == HR_DTYPE_Q8_K)
        return hr_err_set(err, HR_ERR_INVALID, "synthetic model: weights of type %s",
                          hr_dtype_name(weights));
    hr_model *m = hr_calloc(1, sizeof *m);
    if (!m)
        return hr_err_set(err, HR_ERR_NOMEM, "synthetic model: out of memory");
    hr_status s = HR_ERR_NOMEM;
    hr_model_info *in = &m->info;
    snprintf(in->arch, sizeof in->arch, "llama");
    snprintf(in->name, sizeof in->name, "%s (synthetic, %s)", sh->name, hr_dtype_name(weights));
    snprintf(in->format, sizeof in->format, "synthetic");
    in->n_vocab = sh->n_vocab;
    in->n_embd = sh->n_embd;
    in->n_layer = sh->n_layer;
    in->n_head = sh->n_head;
    in->n_head_kv = sh->n_head_kv;
    in->head_dim = sh->n_embd / sh->n_head;
    in->n_ff = sh->n_ff;
    in->n_ctx_train = sh->n_ctx;
    in->rms_eps = sh->rms_eps;
    in->rope_theta = sh->rope_theta;
    in->bos_id = 1;
    in->n_eos = 0; /* random weights: generate until told to stop */
    m->rope = ROPE_STYLE_NEOX;
    m->path = hr_strdup(sh->name);
    int32_t n_max = 3 + 9 * sh->n_layer;
    m->tensors = hr_calloc((size_t)n_max, sizeof *m->tensors);
    if (!m->path || !m->tensors)
        goto fail;

    const int64_t D = sh->n_embd, F = sh->n_ff, V = sh->n_vocab;
    const int64_t kv = (int64_t)sh->n_head_kv * in->head_dim;
    char name[64];
    if ((s = add_tensor(m, "token_embd.weight", weights, D, V, err)) != HR_OK ||
        (s = add_tensor(m, "output_norm.weight", HR_DTYPE_F32, D, 1, err)) != HR_OK)
        goto fail;
    if (!sh->tied && (s = add_tensor(m, "output.weight", weights, D, V, err)) != HR_OK)
        goto fail;
    static const struct {
        const char *suffix;
        int rows; /* 0: D, 1: kv, 2: F, 3: 1 (norm) */
        int cols; /* 0: D, 2: F */
    } layer[] = {{"attn_norm.weight", 3, 0}, {"attn_q.weight", 0, 0}, {"attn_k.weight", 1, 0},
                 {"attn_v.weight", 1, 0},    {"attn_output.weight", 0, 0},
                 {"ffn_norm.weight", 3, 0},  {"ffn_gate.weight", 2, 0},
                 {"ffn_up.weight", 2, 0},    {"ffn_down.weight", 0, 2}};
    for (int32_t l = 0; l < sh->n_layer; l++)
        for (size_t i = 0; i < sizeof layer / sizeof layer[0]; i++) {
            int64_t rows = layer[i].rows == 0 ? D : layer[i].rows == 1 ? kv
                           : layer[i].rows == 2 ? F : 1;
            int64_t cols = layer[i].cols == 2 ? F : D;
            snprintf(name, sizeof name, "blk.%d.%s", l, layer[i].suffix);
            if ((s = add_tensor(m, name, rows == 1 ? HR_DTYPE_F32 : weights, cols, rows, err)) !=
                HR_OK)
                goto fail;
        }

    if (!params || !params->vocab_only) {
        uint64_t total = 0;
        for (int32_t i = 0; i < m->n_tensors; i++)
            total += (m->tensors[i].n_bytes + 63) / 64 * 64;
        m->synthetic_data = hr_alloc_pages((size_t)total);
        m->synthetic_bytes = (size_t)total;
        if (!m->synthetic_data) {
            s = hr_err_set(err, HR_ERR_NOMEM,
                           "synthetic model: cannot allocate %llu bytes of weights",
                           (unsigned long long)total);
            goto fail;
        }
        uint64_t at = 0, rng = 0x9e3779b97f4a7c15ull;
        for (int32_t i = 0; i < m->n_tensors; i++) {
            model_tensor *t = &m->tensors[i];
            t->data = m->synthetic_data + at;
            if (t->n_dims == 1) {
                float one = 1.0f;
                for (int64_t k = 0; k < t->ne[0]; k++)
                    memcpy(m->synthetic_data + at + 4 * (uint64_t)k, &one, 4);
            } else {
                fill(m->synthetic_data + at, t->dtype, t->ne[0] * t->ne[1], &rng);
            }
            at += (t->n_bytes + 63) / 64 * 64;
        }
        if ((s = model_bind_tensors(m, err)) != HR_OK)
            goto fail;
    } else if ((s = model_bind_tensors(m, err)) != HR_OK) {
        goto fail; /* shapes only: bound for planning, no data behind the tensors */
    }
    if (params && params->tokenizer_path) {
        if ((s = hr_tokenizer_load(params->tokenizer_path, &m->tok, err)) != HR_OK)
            goto fail;
        if (hr_tokenizer_n_vocab(m->tok) > in->n_vocab) {
            s = hr_err_set(err, HR_ERR_INVALID,
                           "synthetic model: the tokenizer has %d tokens, the shape %d",
                           hr_tokenizer_n_vocab(m->tok), in->n_vocab);
            goto fail;
        }
        in->bos_id = hr_tokenizer_bos(m->tok);
    }
    *out = m;
    return HR_OK;
fail:
    hr_model_free(m);
    return s;
}
