/*
 * convert.c — write a loaded model as a GGUF file that llama.cpp-compatible
 * readers load: hyper-parameters under "<arch>.*" (llama.cpp's key names),
 * the tokenizer under "tokenizer.ggml.*", every matrix in the asked type,
 * norms and biases in f32.
 *
 * Llama-architecture GGUF files keep Q and K rows permuted so that RoPE
 * rotates adjacent pairs (llama.cpp's "norm" rope); a Hugging Face model
 * rotates halves, so its Q and K rows are permuted on the way out — exactly
 * the permutation llama.cpp's converter applies: within each head, row
 * t * Dh/2 + j moves to row 2j + t. Qwen2 GGUF files keep HF's order.
 * Llama 3 rope scaling is written as llama.cpp does, as a rope_freqs.weight
 * tensor of per-frequency divisors.
 *
 * All converted bytes are held in memory until the file is written (the
 * writer streams from pointers); tensors that need no change point straight
 * into the source mapping.
 */
#include "model/model.h"

#include "format/gguf.h"
#include "quant/quant.h"
#include "tokenizer/tokenizer.h"
#include "util/alloc.h"
#include "util/dtype.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* llama.cpp's llama_ftype numbers for general.file_type */
static int32_t file_type(hr_dtype t) {
    switch (t) {
    case HR_DTYPE_F32: return 0;
    case HR_DTYPE_F16: return 1;
    case HR_DTYPE_Q4_0: return 2;
    case HR_DTYPE_Q4_1: return 3;
    case HR_DTYPE_Q8_0: return 7;
    case HR_DTYPE_Q5_0: return 8;
    case HR_DTYPE_Q5_1: return 9;
    case HR_DTYPE_BF16: return 32;
    default: return -1;
    }
}

typedef struct {
    gguf_writer *w;
    void **bufs; /* converted tensors, freed after the write */
    int32_t n_bufs;
} conv;

static void keep(conv *c, void *p) { c->bufs[c->n_bufs++] = p; }

/* Row r of a tensor with rows of ne0 elements, as f32. */
static void row_f32(const model_tensor *t, int64_t r, float *dst) {
    size_t rb = hr_dtype_row_bytes(t->dtype, t->ne[0]);
    quant_dequantize_row(t->dtype, t->data + (size_t)r * rb, dst, t->ne[0]);
}

/* Writes tensor t as type `to`, its rows in order perm (NULL: unchanged). */
static hr_status add(conv *c, const model_tensor *t, hr_dtype to, const int64_t *perm,
                     hr_error *err) {
    int64_t rows = t->n_dims > 1 ? t->ne[1] : 1;
    for (int d = 2; d < t->n_dims; d++)
        rows *= t->ne[d];
    /* the writer keeps its first error and reports it from gguf_writer_write */
    if (to == t->dtype && !perm) {
        gguf_writer_add_tensor(c->w, t->name, to, t->n_dims, t->ne, t->data);
        return HR_OK;
    }
    if (t->ne[0] % hr_dtype_block_elems(to) != 0)
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "convert: tensor '%s' has rows of %lld, not a multiple of the %lld "
                          "of a %s block",
                          t->name, (long long)t->ne[0], (long long)hr_dtype_block_elems(to),
                          hr_dtype_name(to));
    size_t rb = hr_dtype_row_bytes(to, t->ne[0]);
    uint8_t *out = hr_malloc(rb * (size_t)rows);
    float *tmp = hr_malloc((size_t)t->ne[0] * sizeof(float));
    if (!out || !tmp) {
        hr_free(out);
        hr_free(tmp);
        return hr_err_set(err, HR_ERR_NOMEM, "convert: out of memory for '%s'", t->name);
    }
    for (int64_t r = 0; r < rows; r++) {
        row_f32(t, perm ? perm[r] : r, tmp);
        quant_quantize_row(to, tmp, out + (size_t)r * rb, t->ne[0]);
    }
    hr_free(tmp);
    keep(c, out);
    gguf_writer_add_tensor(c->w, t->name, to, t->n_dims, t->ne, out);
    return HR_OK;
}

/* HF (rotate-half) rows -> GGUF llama (adjacent-pair) rows, per head. */
static int64_t *rope_perm(int32_t n_heads, int32_t head_dim) {
    int64_t *p = hr_malloc((size_t)n_heads * (size_t)head_dim * sizeof(int64_t));
    if (!p)
        return NULL;
    int32_t half = head_dim / 2;
    for (int32_t h = 0; h < n_heads; h++)
        for (int32_t j = 0; j < half; j++)
            for (int32_t t = 0; t < 2; t++)
                p[(int64_t)h * head_dim + 2 * j + t] = (int64_t)h * head_dim + t * half + j;
    return p;
}

static hr_status write_tokenizer(gguf_writer *w, const hr_model *m, hr_error *err) {
    const tok_vocab *v = tokenizer_vocab(m->tok);
    int32_t n = v->n_tokens;
    const char **texts = hr_calloc((size_t)n, sizeof *texts);
    uint64_t *lens = hr_calloc((size_t)n, sizeof *lens);
    float *scores = hr_calloc((size_t)n, sizeof *scores);
    int32_t *types = hr_calloc((size_t)n, sizeof *types);
    hr_status s = HR_OK;
    if (!texts || !lens || !scores || !types) {
        s = hr_err_set(err, HR_ERR_NOMEM, "convert: out of memory for the vocabulary");
        goto done;
    }
    for (int32_t i = 0; i < n; i++) {
        texts[i] = v->tokens[i].text;
        lens[i] = v->tokens[i].len;
        scores[i] = v->tokens[i].score;
        types[i] = v->tokens[i].type;
    }
    gguf_writer_set_str(w, "tokenizer.ggml.model", v->model);
    gguf_writer_set_str(w, "tokenizer.ggml.pre", v->pre);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", texts, lens, (uint64_t)n);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, (uint64_t)n);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (uint64_t)n);
    if (v->merges)
        gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", v->merges, NULL,
                                (uint64_t)v->n_merges);
    static const struct {
        const char *key;
        size_t off;
    } ids[] = {
        {"tokenizer.ggml.bos_token_id", offsetof(tok_vocab, bos_id)},
        {"tokenizer.ggml.eos_token_id", offsetof(tok_vocab, eos_id)},
        {"tokenizer.ggml.unknown_token_id", offsetof(tok_vocab, unk_id)},
        {"tokenizer.ggml.padding_token_id", offsetof(tok_vocab, pad_id)},
        {"tokenizer.ggml.eot_token_id", offsetof(tok_vocab, eot_id)},
        {"tokenizer.ggml.eom_token_id", offsetof(tok_vocab, eom_id)},
    };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        int32_t id;
        memcpy(&id, (const char *)v + ids[i].off, sizeof id);
        if (id >= 0)
            gguf_writer_set_u32(w, ids[i].key, (uint32_t)id);
    }
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", v->add_bos);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", v->add_eos);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", v->add_space_prefix);
    if (m->chat_template)
        gguf_writer_set_str(w, "tokenizer.chat_template", m->chat_template);
done:
    /* the writer copied the metadata */
    hr_free(texts);
    hr_free(lens);
    hr_free(scores);
    hr_free(types);
    return s;
}

static void write_hparams(gguf_writer *w, const hr_model *m, const char *arch, hr_dtype type) {
    const hr_model_info *in = &m->info;
    char key[96];
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", arch, suffix), key)
    gguf_writer_set_str(w, "general.architecture", arch);
    gguf_writer_set_str(w, "general.name", in->name[0] ? in->name : "model");
    if (file_type(type) >= 0)
        gguf_writer_set_u32(w, "general.file_type", (uint32_t)file_type(type));
    if (hr_dtype_table[type].is_quant)
        gguf_writer_set_u32(w, "general.quantization_version", 2);
    gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)in->n_ctx_train);
    gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)in->n_embd);
    gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)in->n_layer);
    gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)in->n_ff);
    gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)in->n_head);
    gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)in->n_head_kv);
    gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), in->rms_eps);
    gguf_writer_set_f32(w, KEY("rope.freq_base"), in->rope_theta);
    gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)in->head_dim);
    gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)in->head_dim);
    gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)in->head_dim);
    gguf_writer_set_u32(w, KEY("vocab_size"), (uint32_t)in->n_vocab);
    if (in->rope_scaling == HR_ROPE_SCALING_LINEAR) {
        gguf_writer_set_str(w, KEY("rope.scaling.type"), "linear");
        gguf_writer_set_f32(w, KEY("rope.scaling.factor"), in->rope_factor);
    }
#undef KEY
}

hr_status hr_model_convert(const hr_model *m, const char *path, hr_dtype type, hr_error *err) {
    const hr_model_info *in = &m->info;
    if (type == HR_DTYPE_NF4 || type == HR_DTYPE_FP4)
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "convert: GGUF has no %s type (llama.cpp could not read the file); "
                          "keep the 16-bit model and load it with --weights %s, or use a "
                          "bitsandbytes checkpoint as it is",
                          hr_dtype_name(type), hr_dtype_name(type));
    if (type != HR_DTYPE_F32 && type != HR_DTYPE_F16 && type != HR_DTYPE_BF16 &&
        !(hr_dtype_table[type].is_quant && quant_can_quantize(type) && type != HR_DTYPE_Q8_K))
        return hr_err_set(err, HR_ERR_UNSUPPORTED, "convert: cannot write weights as %s",
                          hr_dtype_name(type));
    if (!m->tok)
        return hr_err_set(err, HR_ERR_INVALID, "convert: %s has no tokenizer to write",
                          m->path);
    if (!m->layers)
        return hr_err_set(err, HR_ERR_INVALID, "convert: %s was loaded without weights",
                          m->path);
    /* the model is read from its mapping while the new file is written: the
     * writer's rename would keep the old one readable, but a user who names
     * the input as output would lose it (stat follows links: a link to the
     * model, or a hard link, is the same file) */
    struct stat st_out, st_in;
    if (m->path && stat(path, &st_out) == 0 && stat(m->path, &st_in) == 0 &&
        st_out.st_dev == st_in.st_dev && st_out.st_ino == st_in.st_ino)
        return hr_err_set(err, HR_ERR_INVALID,
                          "convert: %s is the model being converted (%s); write to another "
                          "file, then rename it if you want it in its place",
                          path, m->path);
    const char *arch = strcmp(in->arch, "qwen2") == 0 ? "qwen2" : "llama";
    bool permute = strcmp(arch, "llama") == 0 && m->rope == ROPE_STYLE_NEOX;

    conv c = {0};
    hr_status s = gguf_writer_create(&c.w, err);
    if (s != HR_OK)
        return s;
    c.bufs = hr_calloc((size_t)m->n_tensors + 1, sizeof *c.bufs);
    int64_t *perm_q = permute ? rope_perm(in->n_head, in->head_dim) : NULL;
    int64_t *perm_k = permute ? rope_perm(in->n_head_kv, in->head_dim) : NULL;
    if (!c.bufs || (permute && (!perm_q || !perm_k))) {
        s = hr_err_set(err, HR_ERR_NOMEM, "convert: out of memory");
        goto done;
    }
    write_hparams(c.w, m, arch, type);
    if ((s = write_tokenizer(c.w, m, err)) != HR_OK)
        goto done;

    /* Llama 3 scaling as llama.cpp stores it: divisors of the plain frequencies */
    if (in->rope_scaling == HR_ROPE_SCALING_LLAMA3) {
        int32_t half = in->head_dim / 2;
        float *f = hr_malloc((size_t)half * sizeof(float));
        if (!f) {
            s = hr_err_set(err, HR_ERR_NOMEM, "convert: out of memory");
            goto done;
        }
        for (int32_t i = 0; i < half; i++)
            f[i] = (1.0f / powf(in->rope_theta, (float)(2 * i) / (float)in->head_dim)) /
                   m->rope_inv_freq[i];
        keep(&c, f);
        int64_t ne[1] = {half};
        gguf_writer_add_tensor(c.w, "rope_freqs.weight", HR_DTYPE_F32, 1, ne, f);
    }
    for (int32_t i = 0; i < m->n_tensors && s == HR_OK; i++) {
        const model_tensor *t = &m->tensors[i];
        if (strcmp(t->name, "rope_freqs.weight") == 0)
            continue; /* rewritten above from the model's frequencies */
        bool matrix = t->n_dims >= 2 && t->ne[1] > 1;
        hr_dtype to = matrix ? type : HR_DTYPE_F32;
        const int64_t *perm = NULL;
        size_t nl = strlen(t->name);
        if (permute && nl > 14 && strcmp(t->name + nl - 14, ".attn_q.weight") == 0)
            perm = perm_q;
        else if (permute && nl > 14 && strcmp(t->name + nl - 14, ".attn_k.weight") == 0)
            perm = perm_k;
        s = add(&c, t, to, perm, err);
    }
    if (s == HR_OK)
        s = gguf_writer_write(c.w, path, err);
done:
    for (int32_t i = 0; i < c.n_bufs; i++)
        hr_free(c.bufs[i]);
    hr_free(c.bufs);
    hr_free(perm_q);
    hr_free(perm_k);
    gguf_writer_free(c.w);
    return s;
}
