/*
 * gguf_vocab.c — a tokenizer from a GGUF file's tokenizer.ggml.* keys.
 *
 * Keys: model ("llama": SentencePiece, "gpt2": byte-level BPE), pre,
 * tokens, scores (float32 or int32), token_type, merges ("a b"), the special
 * ids (bos/eos/eot/eom/unknown/seperator/padding_token_id), add_bos_token,
 * add_eos_token, add_space_prefix. Defaults and quirks follow llama.cpp's
 * vocabulary loader, whose behaviour the test vectors pin down: default ids
 * 1/2/0 (llama) and 11/11 (gpt2) when in range, an empty token text becomes
 * "[EMPTY_<id>]", duplicate texts are an error, a special id out of range
 * keeps the default, and Phi-3 files (general.name) get rstrip on their
 * special tokens. Merges whose parts are not tokens are skipped (no word can
 * reach them).
 */
#include "tokenizer/tok_impl.h"

#include "util/log.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

static bool str_eq(gguf_str s, const char *c) {
    return s.len == strlen(c) && memcmp(s.ptr, c, s.len) == 0;
}

static const gguf_kv *find_array(const gguf_file *g, const char *key, gguf_type elem, hr_error *err,
                                 hr_status *st) {
    const gguf_kv *kv = gguf_find(g, key);
    *st = HR_OK;
    if (!kv)
        return NULL;
    if (kv->type != GGUF_TYPE_ARRAY || kv->arr_type != elem ||
        (elem == GGUF_TYPE_STRING ? !kv->arr_str : !kv->arr_data)) {
        *st = hr_err_set(err, HR_ERR_FORMAT, "%s: %s is %s, expected an array of %s", g->name, key,
                         kv->type == GGUF_TYPE_ARRAY ? "an array of another type"
                                                     : gguf_type_name(kv->type),
                         gguf_type_name(elem));
        return NULL;
    }
    return kv;
}

static void read_special(const gguf_file *g, const char *key, int32_t n_tokens, int32_t *id) {
    uint32_t v;
    if (!gguf_get_u32(g, key, &v))
        return;
    if (v >= (uint32_t)n_tokens) {
        HR_LOG_W("%s: %s = %u is out of the vocabulary (%d tokens); keeping %d", g->name, key, v,
                 n_tokens, *id);
        return;
    }
    *id = (int32_t)v;
}

static void set_rstrip(tok_vocab *v, const char *text, bool on) {
    int32_t id = vocab_find(v, text, strlen(text));
    if (id < 0)
        return;
    if (on)
        v->tokens[id].attr |= TOK_ATTR_RSTRIP;
    else
        v->tokens[id].attr &= (uint8_t)~TOK_ATTR_RSTRIP;
}

/* llama.cpp gives Phi-3's special tokens rstrip (its tokenizer.json does), by
 * the model name since GGUF does not store token attributes. */
static void phi3_rstrip(const gguf_file *g, tok_vocab *v) {
    gguf_str name;
    if (!gguf_get_str(g, "general.name", &name))
        return;
    char low[128];
    size_t n = name.len < sizeof low - 1 ? (size_t)name.len : sizeof low - 1;
    for (size_t i = 0; i < n; i++)
        low[i] = (char)tolower((unsigned char)name.ptr[i]);
    low[n] = '\0';
    if (!strstr(low, "phi-3") && !strstr(low, "phi3"))
        return;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        uint8_t ty = v->tokens[i].type;
        if (ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_USER_DEFINED || ty == TOK_TYPE_UNKNOWN)
            v->tokens[i].attr |= TOK_ATTR_RSTRIP;
    }
    set_rstrip(v, "</s>", true);
    set_rstrip(v, "<unk>", false);
    set_rstrip(v, "<s>", false);
    set_rstrip(v, "<|endoftext|>", false);
}

static hr_status load(hr_tokenizer *t, const gguf_file *g, hr_error *err) {
    const char *name = g->name ? g->name : "gguf";
    gguf_str model;
    if (!gguf_get_str(g, "tokenizer.ggml.model", &model))
        return hr_err_set(err, HR_ERR_FORMAT,
                          "%s: no tokenizer.ggml.model (the file carries no vocabulary)", name);
    bool spm = str_eq(model, "llama"), bpe = str_eq(model, "gpt2");
    if (!spm && !bpe)
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "%s: tokenizer model '%.*s' is not supported (headroom handles 'llama' "
                          "and 'gpt2')",
                          name, (int)(model.len > 32 ? 32 : model.len), model.ptr);

    hr_status st;
    const gguf_kv *ktok = find_array(g, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, err, &st);
    HR_TRY(st);
    if (!ktok)
        return hr_err_set(err, HR_ERR_FORMAT, "%s: no tokenizer.ggml.tokens", name);
    if (ktok->arr_n == 0 || ktok->arr_n > INT32_MAX / 2)
        return hr_err_set(err, HR_ERR_FORMAT, "%s: tokenizer.ggml.tokens has %llu entries", name,
                          (unsigned long long)ktok->arr_n);
    int32_t n = (int32_t)ktok->arr_n;

    const gguf_kv *kscore = gguf_find(g, "tokenizer.ggml.scores");
    if (kscore && (kscore->type != GGUF_TYPE_ARRAY || !kscore->arr_data ||
                   (kscore->arr_type != GGUF_TYPE_FLOAT32 && kscore->arr_type != GGUF_TYPE_INT32)))
        return hr_err_set(err, HR_ERR_FORMAT,
                          "%s: tokenizer.ggml.scores must be an array of float32 or int32", name);
    if (kscore && kscore->arr_n < (uint64_t)n)
        return hr_err_set(err, HR_ERR_FORMAT, "%s: %llu scores for %d tokens", name,
                          (unsigned long long)kscore->arr_n, n);
    const gguf_kv *ktype = find_array(g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, err, &st);
    HR_TRY(st);
    if (ktype && ktype->arr_n < (uint64_t)n)
        return hr_err_set(err, HR_ERR_FORMAT, "%s: %llu token types for %d tokens", name,
                          (unsigned long long)ktype->arr_n, n);

    HR_TRY(vocab_alloc(&t->v, n, err));
    tok_vocab *v = &t->v;
    for (int32_t i = 0; i < n; i++) {
        gguf_str s = ktok->arr_str[i];
        char empty[32];
        const char *text = s.ptr;
        size_t len = (size_t)s.len;
        if (len == 0) {
            len = (size_t)snprintf(empty, sizeof empty, "[EMPTY_%d]", i);
            text = empty;
        }
        double score = 0.0;
        int64_t type = TOK_TYPE_NORMAL;
        if (kscore)
            gguf_arr_f64(kscore, (uint64_t)i, &score);
        if (ktype)
            gguf_arr_i64(ktype, (uint64_t)i, &type);
        if (type < TOK_TYPE_UNDEFINED || type > TOK_TYPE_BYTE)
            type = TOK_TYPE_UNDEFINED;
        HR_TRY(vocab_set(v, i, text, len, (float)score, (tok_type)type, err));
    }
    HR_TRY(vocab_index(v, name, err));

    gguf_str pre = {"default", 7};
    gguf_get_str(g, "tokenizer.ggml.pre", &pre);
    size_t pl = pre.len < sizeof v->pre - 1 ? (size_t)pre.len : sizeof v->pre - 1;
    memcpy(v->pre, pre.ptr, pl);
    v->pre[pl] = '\0';

    bool add_bos = false;
    if (spm) {
        strcpy(v->model, "llama");
        strcpy(v->pre, "default");
        t->algo = TOK_ALGO_SPM;
        t->byte_fallback = true;
        t->spm_legacy = true;
        t->spm_escape_ws = true;
        v->add_space_prefix = true;
        add_bos = true;
        v->bos_id = 1, v->eos_id = 2, v->unk_id = 0;
    } else {
        strcpy(v->model, "gpt2");
        t->algo = TOK_ALGO_BPE;
        t->gguf_bpe = true;
        t->dec_byte_level = true;
        v->add_space_prefix = false;
        const gguf_kv *km = find_array(g, "tokenizer.ggml.merges", GGUF_TYPE_STRING, err, &st);
        HR_TRY(st);
        if (!km)
            return hr_err_set(err, HR_ERR_FORMAT, "%s: no tokenizer.ggml.merges", name);
        for (uint64_t i = 0; i < km->arr_n; i++) {
            gguf_str m = km->arr_str[i];
            const char *sp = m.len > 1 ? memchr(m.ptr + 1, ' ', (size_t)m.len - 1) : NULL;
            if (!sp)
                continue;
            size_t na = (size_t)(sp - m.ptr);
            HR_TRY(vocab_add_merge(v, m.ptr, na, sp + 1, (size_t)m.len - na - 1, false, name, err));
        }
        HR_TRY(vocab_index_merges(v, err));
        v->bos_id = 11, v->eos_id = 11; /* llama.cpp's defaults for gpt2 vocabularies */
        if (v->bos_id >= n)
            v->bos_id = v->eos_id = -1;
        HR_TRY(pretok_from_gguf_name(t, pre.len ? v->pre : "default", &add_bos, err));
    }
    int32_t *ids[] = {&v->bos_id, &v->eos_id, &v->unk_id};
    for (int k = 0; k < 3; k++)
        if (*ids[k] >= n)
            *ids[k] = -1;
    read_special(g, "tokenizer.ggml.bos_token_id", n, &v->bos_id);
    read_special(g, "tokenizer.ggml.eos_token_id", n, &v->eos_id);
    read_special(g, "tokenizer.ggml.eot_token_id", n, &v->eot_id);
    read_special(g, "tokenizer.ggml.eom_token_id", n, &v->eom_id);
    read_special(g, "tokenizer.ggml.unknown_token_id", n, &v->unk_id);
    read_special(g, "tokenizer.ggml.seperator_token_id", n, &v->sep_id);
    read_special(g, "tokenizer.ggml.padding_token_id", n, &v->pad_id);

    bool b;
    v->add_bos = gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b) ? b : add_bos;
    v->add_eos = gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b) ? b : false;
    if (gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b))
        v->add_space_prefix = b;
    if (v->add_bos && v->bos_id < 0)
        return hr_err_set(err, HR_ERR_FORMAT,
                          "%s: tokenizer.ggml.add_bos_token is true but there is no BOS token",
                          name);
    if (v->add_eos && v->eos_id < 0)
        return hr_err_set(err, HR_ERR_FORMAT,
                          "%s: tokenizer.ggml.add_eos_token is true but there is no EOS token",
                          name);
    HR_TRY(tokenizer_finish(t, NULL, 0, err));
    phi3_rstrip(g, v);
    return HR_OK;
}

hr_status tokenizer_from_gguf(const gguf_file *g, hr_tokenizer **out, hr_error *err) {
    if (!g || !out)
        return hr_err_set(err, HR_ERR_INVALID, "tokenizer_from_gguf: NULL argument");
    hr_tokenizer *t = tokenizer_new(g->name);
    if (!t)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory for a tokenizer");
    hr_status st = load(t, g, err);
    if (st != HR_OK) {
        hr_tokenizer_free(t);
        return st;
    }
    *out = t;
    return HR_OK;
}
