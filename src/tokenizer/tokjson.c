/*
 * tokjson.c — Hugging Face tokenizer.json, plus the tokenizer_config.json,
 * config.json and generation_config.json that sit next to it in a model
 * folder.
 *
 * tokenizer.json: model (BPE only: vocab, merges as "a b" strings or [a, b]
 * pairs, unk_token, byte_fallback, fuse_unk, ignore_merges), added_tokens
 * (special -> CONTROL, else USER_DEFINED; lstrip/rstrip), normalizer,
 * pre_tokenizer, post_processor (which tokens go before and after the text)
 * and decoder. Components are translated into the ops of normalize.c and
 * pretok.c; a component headroom cannot run exactly (Unigram, WordPiece,
 * Lowercase, Precompiled charsmaps, ...) is HR_ERR_UNSUPPORTED naming it,
 * never silently approximated.
 *
 * The file is untrusted: ids must be integers in a range the number of
 * entries justifies, merges must name tokens of the vocabulary (as Hugging
 * Face requires), strings used as patterns must be valid UTF-8.
 *
 * Configs: tokenizer_config.json's add_bos_token/add_eos_token override the
 * post-processor (as LlamaTokenizerFast does), bos_token/eos_token name the
 * ids, legacy/add_prefix_space shape the SentencePiece front end when the
 * vocabulary came from tokenizer.model, and added_tokens_decoder marks added
 * tokens for it; config.json gives bos/eos ids when the tokenizer config
 * does not; generation_config.json's eos ids all end generation.
 */
#include "tokenizer/tok_impl.h"

#include "tokenizer/unicode.h"
#include "util/alloc.h"
#include "util/file.h"
#include "util/log.h"

#include "util/json.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CONFIG_FILE_MAX ((size_t)16 << 20) /* configs with a chat template: ~100 KB */

typedef struct {
    hr_tokenizer *t;
    const char *name;
    hr_error *err;
    int32_t tmpl_prefix, tmpl_suffix; /* post-processor ids, -1 none */
    bool has_post;
    bool pre_byte_level, pre_byte_level_regex;
    const char *first_split_regex;
    bool dec_seen, dec_byte_level, dec_strip;
} json_load;

static const cJSON *get(const cJSON *o, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

static const char *get_str(const cJSON *o, const char *key) {
    const cJSON *v = get(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool get_bool(const cJSON *o, const char *key, bool def) {
    const cJSON *v = get(o, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : def;
}

/* A JSON number that is an integer in [0, max]. */
static bool as_id(const cJSON *v, int64_t max, int64_t *out) {
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!(d >= 0.0) || d > (double)max || d != floor(d))
        return false;
    *out = (int64_t)d;
    return true;
}

static char *dup_str(const char *s, size_t *len) {
    *len = strlen(s);
    return hr_strndup(s, *len);
}

/* ---------------------------------------------------------------- normalizer */

static hr_status pattern_of(json_load *L, const cJSON *node, const char *what, char **lit,
                            size_t *lit_len, struct pcre2_real_code_8 **re) {
    const cJSON *pat = get(node, "pattern");
    const char *s;
    *lit = NULL;
    *re = NULL;
    if ((s = get_str(pat, "String"))) {
        if (!uni_valid(s, strlen(s)))
            return hr_err_set(L->err, HR_ERR_FORMAT, "%s: %s pattern is not valid UTF-8", L->name,
                              what);
        *lit = dup_str(s, lit_len);
        if (!*lit)
            return hr_err_set(L->err, HR_ERR_NOMEM, "out of memory");
        return HR_OK;
    }
    if ((s = get_str(pat, "Regex")))
        return tok_regex_compile(s, strlen(s), L->name, re, L->err);
    return hr_err_set(L->err, HR_ERR_FORMAT, "%s: %s has no String or Regex pattern", L->name,
                      what);
}

static hr_status parse_normalizer(json_load *L, const cJSON *n, int depth) {
    if (!n || cJSON_IsNull(n))
        return HR_OK;
    const char *type = get_str(n, "type");
    if (!type || depth > 16)
        return hr_err_set(L->err, HR_ERR_FORMAT, "%s: normalizer without a type", L->name);
    tok_norm_op op = {0};
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = get(n, "normalizers"), *it;
        if (!cJSON_IsArray(list))
            return hr_err_set(L->err, HR_ERR_FORMAT, "%s: Sequence normalizer without a list",
                              L->name);
        cJSON_ArrayForEach(it, list) HR_TRY(parse_normalizer(L, it, depth + 1));
        return HR_OK;
    }
    if (strcmp(type, "Prepend") == 0) {
        const char *s = get_str(n, "prepend");
        if (!s || !uni_valid(s, strlen(s)))
            return hr_err_set(L->err, HR_ERR_FORMAT, "%s: Prepend normalizer needs a string",
                              L->name);
        op.kind = TOK_NORM_PREPEND;
        if (!(op.text = dup_str(s, &op.text_len)))
            return hr_err_set(L->err, HR_ERR_NOMEM, "out of memory");
        return norm_add(L->t, &op, L->err);
    }
    if (strcmp(type, "Replace") == 0) {
        const char *content = get_str(n, "content");
        if (!content || !uni_valid(content, strlen(content)))
            return hr_err_set(L->err, HR_ERR_FORMAT, "%s: Replace normalizer needs a content",
                              L->name);
        op.kind = TOK_NORM_REPLACE;
        HR_TRY(pattern_of(L, n, "Replace normalizer", &op.text, &op.text_len, &op.re));
        if (!(op.content = dup_str(content, &op.content_len))) {
            hr_free(op.text);
            tok_regex_free(op.re);
            return hr_err_set(L->err, HR_ERR_NOMEM, "out of memory");
        }
        return norm_add(L->t, &op, L->err);
    }
    if (strcmp(type, "Strip") == 0) {
        op.kind = TOK_NORM_STRIP;
        op.left = get_bool(n, "strip_left", true);
        op.right = get_bool(n, "strip_right", true);
        return norm_add(L->t, &op, L->err);
    }
    static const struct {
        const char *name;
        tok_norm_kind kind;
    } uni[] = {{"NFC", TOK_NORM_NFC}, {"NFD", TOK_NORM_NFD}};
    for (size_t i = 0; i < sizeof uni / sizeof uni[0]; i++)
        if (strcmp(type, uni[i].name) == 0) {
            op.kind = uni[i].kind;
            return norm_add(L->t, &op, L->err);
        }
    if (strcmp(type, "Precompiled") == 0) {
        const char *map = get_str(n, "precompiled_charsmap");
        if (!map || !*map)
            return HR_OK; /* an empty map changes nothing */
    }
    return hr_err_set(L->err, HR_ERR_UNSUPPORTED, "%s: normalizer '%s' is not supported", L->name,
                      type);
}

/* ---------------------------------------------------------------- pre-tokenizer */

#define RUST_WORD "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}"

static hr_status add_regex_split(json_load *L, const char *pattern, tok_split_behavior b,
                                 bool invert) {
    tok_pre_op op = {.kind = TOK_PRE_SPLIT, .behavior = b, .invert = invert};
    HR_TRY(tok_regex_compile(pattern, strlen(pattern), L->name, &op.re, L->err));
    return pretok_add(L->t, &op, L->err);
}

static bool behavior_of(const char *s, tok_split_behavior *b) {
    static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious",
                                        "MergedWithNext", "Contiguous"};
    for (int i = 0; i < 5; i++)
        if (s && strcmp(s, names[i]) == 0) {
            *b = (tok_split_behavior)i;
            return true;
        }
    return false;
}

static hr_status parse_pre(json_load *L, const cJSON *n, int depth) {
    if (!n || cJSON_IsNull(n))
        return HR_OK;
    const char *type = get_str(n, "type");
    if (!type || depth > 16)
        return hr_err_set(L->err, HR_ERR_FORMAT, "%s: pre_tokenizer without a type", L->name);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = get(n, "pretokenizers"), *it;
        if (!cJSON_IsArray(list))
            return hr_err_set(L->err, HR_ERR_FORMAT, "%s: Sequence pre_tokenizer without a list",
                              L->name);
        cJSON_ArrayForEach(it, list) HR_TRY(parse_pre(L, it, depth + 1));
        return HR_OK;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        tok_pre_op op = {.kind = TOK_PRE_BYTE_LEVEL};
        op.add_prefix_space = get_bool(n, "add_prefix_space", true);
        if (get_bool(n, "use_regex", true)) {
            HR_TRY(tok_regex_compile(tok_gpt2_pattern, strlen(tok_gpt2_pattern), L->name, &op.re,
                                     L->err));
            L->pre_byte_level_regex = true;
        }
        L->pre_byte_level = true;
        return pretok_add(L->t, &op, L->err);
    }
    if (strcmp(type, "Split") == 0) {
        tok_pre_op op = {.kind = TOK_PRE_SPLIT};
        if (!behavior_of(get_str(n, "behavior"), &op.behavior))
            return hr_err_set(L->err, HR_ERR_FORMAT, "%s: Split pre_tokenizer has behavior '%s'",
                              L->name, get_str(n, "behavior") ? get_str(n, "behavior") : "(none)");
        op.invert = get_bool(n, "invert", false);
        HR_TRY(pattern_of(L, n, "Split pre_tokenizer", &op.lit, &op.lit_len, &op.re));
        if (!L->first_split_regex && op.re)
            L->first_split_regex = get_str(get(n, "pattern"), "Regex");
        return pretok_add(L->t, &op, L->err);
    }
    if (strcmp(type, "Digits") == 0)
        return add_regex_split(L, get_bool(n, "individual_digits", false) ? "\\p{N}" : "\\p{N}+",
                               TOK_SPLIT_ISOLATED, false);
    if (strcmp(type, "Metaspace") == 0) {
        tok_pre_op op = {.kind = TOK_PRE_METASPACE, .prepend = TOK_PREPEND_ALWAYS};
        const char *rep = get_str(n, "replacement");
        if (!rep)
            rep = "\xe2\x96\x81";
        size_t rl = strlen(rep);
        uint32_t cp;
        if (rl == 0 || rl > 4 || !uni_valid(rep, rl) || uni_next(rep, rl, &cp) != rl)
            return hr_err_set(L->err, HR_ERR_FORMAT,
                              "%s: Metaspace replacement must be one character", L->name);
        memcpy(op.repl, rep, rl);
        op.repl_len = rl;
        const char *scheme = get_str(n, "prepend_scheme");
        if (scheme) {
            if (strcmp(scheme, "first") == 0)
                op.prepend = TOK_PREPEND_FIRST;
            else if (strcmp(scheme, "never") == 0)
                op.prepend = TOK_PREPEND_NEVER;
            else if (strcmp(scheme, "always") != 0)
                return hr_err_set(L->err, HR_ERR_FORMAT, "%s: Metaspace prepend_scheme '%s'",
                                  L->name, scheme);
        } else if (!get_bool(n, "add_prefix_space", true)) {
            op.prepend = TOK_PREPEND_NEVER;
        }
        op.split = get_bool(n, "split", true);
        return pretok_add(L->t, &op, L->err);
    }
    if (strcmp(type, "Whitespace") == 0)
        /* \w+|[^\w\s]+ run by Rust's regex crate (not Oniguruma, as Split's
         * patterns are), whose \w is Unicode's word class (UTS #18):
         * Alphabetic, marks, Nd, Pc and the joiners U+200C/U+200D */
        return add_regex_split(L, "[" RUST_WORD "]+|[^" RUST_WORD "\\s]+", TOK_SPLIT_REMOVED,
                               true);
    if (strcmp(type, "WhitespaceSplit") == 0)
        return add_regex_split(L, "\\s+", TOK_SPLIT_REMOVED, false);
    if (strcmp(type, "Punctuation") == 0 || strcmp(type, "BertPreTokenizer") == 0) {
        tok_split_behavior b = TOK_SPLIT_ISOLATED;
        if (strcmp(type, "BertPreTokenizer") == 0)
            HR_TRY(add_regex_split(L, "\\s+", TOK_SPLIT_REMOVED, false));
        else if (get_str(n, "behavior") && !behavior_of(get_str(n, "behavior"), &b))
            return hr_err_set(L->err, HR_ERR_FORMAT, "%s: Punctuation behavior '%s'", L->name,
                              get_str(n, "behavior"));
        /* Rust's is_ascii_punctuation (which includes $+<=>^`|~) or category P */
        return add_regex_split(L, "[\\p{P}!-/:-@\\[-`{-~]", b, false);
    }
    if (strcmp(type, "CharDelimiterSplit") == 0) {
        const char *d = get_str(n, "delimiter");
        uint32_t cp;
        if (!d || !*d || !uni_valid(d, strlen(d)) || uni_next(d, strlen(d), &cp) != strlen(d))
            return hr_err_set(L->err, HR_ERR_FORMAT,
                              "%s: CharDelimiterSplit needs a one-character delimiter", L->name);
        tok_pre_op op = {.kind = TOK_PRE_SPLIT, .behavior = TOK_SPLIT_REMOVED};
        if (!(op.lit = dup_str(d, &op.lit_len)))
            return hr_err_set(L->err, HR_ERR_NOMEM, "out of memory");
        return pretok_add(L->t, &op, L->err);
    }
    if (strcmp(type, "FixedLength") == 0) {
        const cJSON *len = get(n, "length");
        int64_t v = 5; /* Hugging Face's default */
        /* Hugging Face panics on 0; past 2^31 code points every piece is whole anyway */
        if (len && (!as_id(len, INT32_MAX, &v) || v == 0))
            return hr_err_set(L->err, HR_ERR_FORMAT,
                              "%s: FixedLength pre_tokenizer needs a length in [1, %d]", L->name,
                              INT32_MAX);
        tok_pre_op op = {.kind = TOK_PRE_FIXED_LENGTH, .length = (uint32_t)v};
        return pretok_add(L->t, &op, L->err);
    }
    if (strcmp(type, "UnicodeScripts") == 0) {
        tok_pre_op op = {.kind = TOK_PRE_SCRIPTS};
        return pretok_add(L->t, &op, L->err);
    }
    return hr_err_set(L->err, HR_ERR_UNSUPPORTED, "%s: pre_tokenizer '%s' is not supported",
                      L->name, type);
}

/* ---------------------------------------------------------------- post-processor */

/* The id of a special token named in a template's special_tokens map. */
static hr_status template_id(json_load *L, const cJSON *specials, const char *name, int32_t *id) {
    const cJSON *e = get(specials, name), *ids = get(e, "ids");
    int64_t v;
    if (cJSON_IsArray(ids) && cJSON_GetArraySize(ids) == 1 &&
        as_id(cJSON_GetArrayItem(ids, 0), L->t->v.n_tokens - 1, &v)) {
        *id = (int32_t)v;
        return HR_OK;
    }
    int32_t f = vocab_find(&L->t->v, name, strlen(name));
    if (f >= 0 && !e) {
        *id = f;
        return HR_OK;
    }
    return hr_err_set(L->err, HR_ERR_UNSUPPORTED,
                      "%s: post-processor token '%s' must be exactly one known id", L->name, name);
}

static hr_status parse_post(json_load *L, const cJSON *n, int depth) {
    if (!n || cJSON_IsNull(n))
        return HR_OK;
    const char *type = get_str(n, "type");
    if (!type || depth > 8)
        return hr_err_set(L->err, HR_ERR_FORMAT, "%s: post_processor without a type", L->name);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = get(n, "processors"), *it;
        cJSON_ArrayForEach(it, list) HR_TRY(parse_post(L, it, depth + 1));
        return HR_OK;
    }
    if (strcmp(type, "ByteLevel") == 0)
        return HR_OK; /* offsets only */
    if (strcmp(type, "TemplateProcessing") == 0) {
        const cJSON *single = get(n, "single"), *specials = get(n, "special_tokens"), *it;
        bool after = false;
        int n_before = 0, n_after = 0;
        L->has_post = true;
        cJSON_ArrayForEach(it, single) {
            const cJSON *sp = get(it, "SpecialToken");
            if (get(it, "Sequence")) {
                after = true;
                continue;
            }
            const char *name = get_str(sp, "id");
            if (!name)
                return hr_err_set(L->err, HR_ERR_FORMAT, "%s: TemplateProcessing item", L->name);
            int32_t id = -1;
            HR_TRY(template_id(L, specials, name, &id));
            if (after) {
                L->tmpl_suffix = id;
                n_after++;
            } else {
                L->tmpl_prefix = id;
                n_before++;
            }
        }
        if (n_before > 1 || n_after > 1)
            return hr_err_set(L->err, HR_ERR_UNSUPPORTED,
                              "%s: the post-processor adds %d tokens before and %d after the "
                              "text; headroom supports at most one on each side",
                              L->name, n_before, n_after);
        return HR_OK;
    }
    if (strcmp(type, "RobertaProcessing") == 0 || strcmp(type, "BertProcessing") == 0) {
        const cJSON *cls = get(n, "cls"), *sep = get(n, "sep");
        int64_t a, b;
        if (!as_id(cJSON_GetArrayItem(cls, 1), L->t->v.n_tokens - 1, &a) ||
            !as_id(cJSON_GetArrayItem(sep, 1), L->t->v.n_tokens - 1, &b))
            return hr_err_set(L->err, HR_ERR_FORMAT, "%s: %s needs cls and sep ids", L->name, type);
        L->has_post = true;
        L->tmpl_prefix = (int32_t)a;
        L->tmpl_suffix = (int32_t)b;
        return HR_OK;
    }
    return hr_err_set(L->err, HR_ERR_UNSUPPORTED, "%s: post_processor '%s' is not supported",
                      L->name, type);
}

/* ---------------------------------------------------------------- decoder */

static void parse_decoder(json_load *L, const cJSON *n, int depth) {
    if (!n || cJSON_IsNull(n) || depth > 8)
        return;
    const char *type = get_str(n, "type");
    if (!type)
        return;
    L->dec_seen = true;
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *it;
        cJSON_ArrayForEach(it, get(n, "decoders")) parse_decoder(L, it, depth + 1);
    } else if (strcmp(type, "ByteLevel") == 0) {
        L->dec_byte_level = true;
    } else if (strcmp(type, "Strip") == 0) {
        const cJSON *start = get(n, "start");
        const char *content = get_str(n, "content");
        if (cJSON_IsNumber(start) && start->valuedouble >= 1 && content &&
            strcmp(content, " ") == 0)
            L->dec_strip = true;
    } else if (strcmp(type, "Metaspace") == 0) {
        const char *scheme = get_str(n, "prepend_scheme");
        if (scheme ? strcmp(scheme, "never") != 0 : get_bool(n, "add_prefix_space", true))
            L->dec_strip = true;
    }
}

/* ---------------------------------------------------------------- model */

static bool is_byte_piece(const char *s, size_t n) {
    static const char hex[] = "0123456789ABCDEF";
    return n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' && strchr(hex, s[3]) && s[3] &&
           strchr(hex, s[4]) && s[4];
}

static hr_status load_model(json_load *L, const cJSON *root) {
    hr_tokenizer *t = L->t;
    const cJSON *model = get(root, "model");
    if (!cJSON_IsObject(model))
        return hr_err_set(L->err, HR_ERR_FORMAT, "%s: no \"model\" object (not a tokenizer.json?)",
                          L->name);
    const char *type = get_str(model, "type");
    if (!type && get(model, "merges"))
        type = "BPE";
    if (!type || strcmp(type, "BPE") != 0)
        return hr_err_set(L->err, HR_ERR_UNSUPPORTED,
                          "%s: tokenizer model '%s' is not supported (headroom runs BPE models)",
                          L->name, type ? type : "(none)");
    const cJSON *vocab = get(model, "vocab"), *merges = get(model, "merges");
    const cJSON *added = get(root, "added_tokens"), *it;
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges))
        return hr_err_set(L->err, HR_ERR_FORMAT,
                          "%s: BPE model needs a vocab object and a merges list", L->name);
    if (added && !cJSON_IsArray(added) && !cJSON_IsNull(added))
        return hr_err_set(L->err, HR_ERR_FORMAT, "%s: added_tokens is not a list", L->name);
    const cJSON *dropout = get(model, "dropout");
    if (cJSON_IsNumber(dropout) && dropout->valuedouble > 0.0)
        return hr_err_set(L->err, HR_ERR_UNSUPPORTED, "%s: BPE dropout makes encoding random",
                          L->name);
    const char *cont = get_str(model, "continuing_subword_prefix");
    const char *eow = get_str(model, "end_of_word_suffix");
    if ((cont && *cont) || (eow && *eow))
        return hr_err_set(
            L->err, HR_ERR_UNSUPPORTED,
            "%s: BPE continuing_subword_prefix / end_of_word_suffix are not supported", L->name);

    /* size the table: ids must stay within what the entries can justify */
    int64_t n_entries = cJSON_GetArraySize(vocab) + (added ? cJSON_GetArraySize(added) : 0);
    int64_t id_max = n_entries * 4 + 1024;
    if (id_max > INT32_MAX / 2)
        id_max = INT32_MAX / 2;
    int64_t max_id = -1, v64;
    cJSON_ArrayForEach(it, vocab) {
        if (!as_id(it, id_max, &v64))
            return hr_err_set(L->err, HR_ERR_FORMAT,
                              "%s: vocab entry '%.64s' has id that is not "
                              "an integer in [0, %lld]",
                              L->name, it->string ? it->string : "", (long long)id_max);
        if (v64 > max_id)
            max_id = v64;
    }
    cJSON_ArrayForEach(it, added) {
        if (!as_id(get(it, "id"), id_max, &v64) || !get_str(it, "content"))
            return hr_err_set(L->err, HR_ERR_FORMAT,
                              "%s: added token without an integer id in range or a content",
                              L->name);
        if (v64 > max_id)
            max_id = v64;
    }
    if (max_id < 0)
        return hr_err_set(L->err, HR_ERR_FORMAT, "%s: empty vocabulary", L->name);
    HR_TRY(vocab_alloc(&t->v, (int32_t)max_id + 1, L->err));
    tok_vocab *v = &t->v;
    t->byte_fallback = get_bool(model, "byte_fallback", false);
    cJSON_ArrayForEach(it, vocab) {
        as_id(it, id_max, &v64);
        const char *s = it->string ? it->string : "";
        size_t len = strlen(s);
        if (v->tokens[v64].len > 0)
            return hr_err_set(L->err, HR_ERR_FORMAT, "%s: id %lld is used by two vocab entries",
                              L->name, (long long)v64);
        tok_type ty = t->byte_fallback && is_byte_piece(s, len) ? TOK_TYPE_BYTE : TOK_TYPE_NORMAL;
        HR_TRY(vocab_set(v, (int32_t)v64, s, len, 0.0f, ty, L->err));
    }
    cJSON_ArrayForEach(it, added) {
        as_id(get(it, "id"), id_max, &v64);
        const char *s = get_str(it, "content");
        size_t len = strlen(s);
        tok_token *tk = &v->tokens[v64];
        if (tk->len != len || memcmp(tk->text, s, len) != 0)
            HR_TRY(vocab_set(v, (int32_t)v64, s, len, 0.0f, TOK_TYPE_NORMAL, L->err));
        tk->type = get_bool(it, "special", false) ? TOK_TYPE_CONTROL : TOK_TYPE_USER_DEFINED;
        tk->attr =
            (uint8_t)(TOK_ATTR_ADDED | (get_bool(it, "lstrip", false) ? TOK_ATTR_LSTRIP : 0) |
                      (get_bool(it, "rstrip", false) ? TOK_ATTR_RSTRIP : 0));
    }
    t->added_list = true;
    HR_TRY(vocab_index(v, L->name, L->err));

    const char *unk = get_str(model, "unk_token");
    if (unk) {
        t->bpe_unk_id = vocab_find(v, unk, strlen(unk));
        if (t->bpe_unk_id >= 0) {
            v->unk_id = t->bpe_unk_id;
            v->tokens[t->bpe_unk_id].type = TOK_TYPE_UNKNOWN;
        }
    }
    t->fuse_unk = get_bool(model, "fuse_unk", false);
    t->ignore_merges = get_bool(model, "ignore_merges", false);

    int32_t rank = 0;
    cJSON_ArrayForEach(it, merges) {
        const char *a, *b;
        size_t na, nb;
        if (cJSON_IsString(it)) {
            const char *s = it->valuestring;
            const char *sp = *s ? strchr(s + 1, ' ') : NULL;
            if (!sp)
                return hr_err_set(L->err, HR_ERR_FORMAT, "%s: merge %d '%.64s' is not \"a b\"",
                                  L->name, rank, s);
            a = s, na = (size_t)(sp - s), b = sp + 1, nb = strlen(sp + 1);
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(it, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(it, 1))) {
            a = cJSON_GetArrayItem(it, 0)->valuestring, na = strlen(a);
            b = cJSON_GetArrayItem(it, 1)->valuestring, nb = strlen(b);
        } else {
            return hr_err_set(L->err, HR_ERR_FORMAT, "%s: merge %d is neither \"a b\" nor [a, b]",
                              L->name, rank);
        }
        HR_TRY(vocab_add_merge(v, a, na, b, nb, true, L->name, L->err));
        /* a token first made by merge r scores -r: an export as a
         * SentencePiece ("llama") vocabulary merges in the same order */
        int32_t res = v->merge_ids[v->n_merges - 1][2];
        if (v->tokens[res].score == 0.0f)
            v->tokens[res].score = -(float)(rank + 1);
        rank++;
    }
    return vocab_index_merges(v, L->err);
}

hr_status tokjson_load(hr_tokenizer *t, const char *text, size_t len, const char *name,
                       hr_error *err) {
    const char *at;
    bool nomem;
    cJSON *root = hr_json_parse(text, len, &at, &nomem);
    if (!root && nomem)
        return hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory parsing JSON", name);
    if (!root) {
        size_t off = at && at >= text && at <= text + len ? (size_t)(at - text) : 0;
        return hr_err_set(err, HR_ERR_FORMAT, "%s: not valid JSON (near byte %zu)", name, off);
    }
    json_load L = {.t = t, .name = name, .err = err, .tmpl_prefix = -1, .tmpl_suffix = -1};
    hr_status st = HR_OK;
    if (!cJSON_IsObject(root)) {
        st = hr_err_set(err, HR_ERR_FORMAT, "%s: top level is not a JSON object", name);
        goto done;
    }
    t->algo = TOK_ALGO_BPE;
    st = load_model(&L, root);
    if (st == HR_OK)
        st = parse_normalizer(&L, get(root, "normalizer"), 0);
    if (st == HR_OK)
        st = parse_pre(&L, get(root, "pre_tokenizer"), 0);
    if (st == HR_OK)
        st = parse_post(&L, get(root, "post_processor"), 0);
    if (st != HR_OK)
        goto done;
    parse_decoder(&L, get(root, "decoder"), 0);

    tok_vocab *v = &t->v;
    bool byte_level = L.dec_seen ? L.dec_byte_level : L.pre_byte_level;
    t->dec_byte_level = byte_level;
    t->dec_strip_space = !byte_level && L.dec_strip;
    strcpy(v->model, byte_level ? "gpt2" : "llama");
    const char *pre =
        byte_level ? pretok_guess_name(L.first_split_regex, L.pre_byte_level_regex) : "default";
    strncpy(v->pre, pre, sizeof v->pre - 1);
    v->add_space_prefix = !byte_level && t->dec_strip_space;
    v->add_bos = L.tmpl_prefix >= 0;
    v->add_eos = L.tmpl_suffix >= 0;
    t->prefix_id = L.tmpl_prefix;
    t->suffix_id = L.tmpl_suffix;
    if (L.tmpl_prefix >= 0)
        v->bos_id = L.tmpl_prefix;
done:
    cJSON_Delete(root);
    return st;
}

/* ---------------------------------------------------------------- configs */

static cJSON *read_json(const char *dir, const char *file, hr_error *err, hr_status *st) {
    char path[4096];
    *st = HR_OK;
    if (!hr_path_join(path, sizeof path, dir, file) || !hr_path_exists(path))
        return NULL;
    char *text = NULL;
    size_t len = 0;
    *st = hr_file_read_all(path, CONFIG_FILE_MAX, &text, &len, err);
    if (*st != HR_OK)
        return NULL;
    bool nomem;
    cJSON *root = hr_json_parse(text, len, NULL, &nomem);
    hr_free(text);
    if (!root && nomem) {
        *st = hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory parsing JSON", path);
        return NULL;
    }
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        *st = hr_err_set(err, HR_ERR_FORMAT, "%s: not a JSON object", path);
        return NULL;
    }
    return root;
}

/* "<s>" or {"content": "<s>", ...} -> id, -1 when absent or unknown. */
static int32_t token_field(const tok_vocab *v, const cJSON *cfg, const char *key) {
    const cJSON *f = get(cfg, key);
    const char *s = cJSON_IsString(f) ? f->valuestring : get_str(f, "content");
    return s ? vocab_find(v, s, strlen(s)) : -1;
}

/* An int or a list of ints: the first into *first, all into extra. */
static void id_list(const tok_vocab *v, const cJSON *f, int32_t *first, int32_t *extra,
                    int32_t *n_extra, int32_t cap) {
    int64_t id;
    if (cJSON_IsNumber(f) && as_id(f, v->n_tokens - 1, &id)) {
        if (first)
            *first = (int32_t)id;
        if (*n_extra < cap)
            extra[(*n_extra)++] = (int32_t)id;
        return;
    }
    const cJSON *it;
    bool got = false;
    cJSON_ArrayForEach(it, f) {
        if (!as_id(it, v->n_tokens - 1, &id))
            continue;
        if (first && !got)
            *first = (int32_t)id;
        got = true;
        if (*n_extra < cap)
            extra[(*n_extra)++] = (int32_t)id;
    }
}

#define MAX_EXTRA_EOG 32

hr_status tokjson_apply_configs(hr_tokenizer *t, const char *dir, bool has_json, hr_error *err) {
    tok_vocab *v = &t->v;
    hr_status st;
    int32_t extra[MAX_EXTRA_EOG];
    int32_t n_extra = 0;

    cJSON *cfg = read_json(dir, "config.json", err, &st);
    HR_TRY(st);
    if (cfg) {
        int32_t bos = -1, eos = -1, dummy[MAX_EXTRA_EOG], nd = 0;
        id_list(v, get(cfg, "bos_token_id"), &bos, dummy, &nd, MAX_EXTRA_EOG);
        id_list(v, get(cfg, "eos_token_id"), &eos, extra, &n_extra, MAX_EXTRA_EOG);
        if (bos >= 0)
            v->bos_id = bos;
        if (eos >= 0)
            v->eos_id = eos;
        cJSON_Delete(cfg);
    }
    cfg = read_json(dir, "generation_config.json", err, &st);
    HR_TRY(st);
    if (cfg) {
        id_list(v, get(cfg, "eos_token_id"), NULL, extra, &n_extra, MAX_EXTRA_EOG);
        cJSON_Delete(cfg);
    }

    cfg = read_json(dir, "tokenizer_config.json", err, &st);
    HR_TRY(st);
    if (cfg) {
        const cJSON *atd = get(cfg, "added_tokens_decoder"), *it;
        /* tokenizer.model knows only its own piece types: the config marks
         * which ids are added (special or not) tokens */
        if (!has_json && cJSON_IsObject(atd)) {
            cJSON_ArrayForEach(it, atd) {
                char *end = NULL;
                long id = it->string ? strtol(it->string, &end, 10) : -1;
                const char *content = get_str(it, "content");
                if (!end || *end || id < 0 || id >= v->n_tokens || !content)
                    continue;
                const tok_token *tk = &v->tokens[id];
                if (tk->len != strlen(content) || memcmp(tk->text, content, tk->len) != 0) {
                    HR_LOG_W("%s: added token %ld '%.40s' is not that id in tokenizer.model; "
                             "ignored",
                             dir, id, content);
                    continue;
                }
                v->tokens[id].type =
                    get_bool(it, "special", false)
                        ? (v->tokens[id].type == TOK_TYPE_UNKNOWN ? TOK_TYPE_UNKNOWN
                                                                  : TOK_TYPE_CONTROL)
                        : TOK_TYPE_USER_DEFINED;
                v->tokens[id].attr =
                    (uint8_t)((get_bool(it, "lstrip", false) ? TOK_ATTR_LSTRIP : 0) |
                              (get_bool(it, "rstrip", false) ? TOK_ATTR_RSTRIP : 0));
            }
        }
        int32_t id;
        if ((id = token_field(v, cfg, "bos_token")) >= 0)
            v->bos_id = id;
        if ((id = token_field(v, cfg, "eos_token")) >= 0)
            v->eos_id = id;
        if ((id = token_field(v, cfg, "unk_token")) >= 0)
            v->unk_id = id;
        if ((id = token_field(v, cfg, "pad_token")) >= 0)
            v->pad_id = id;
        const cJSON *b = get(cfg, "add_bos_token");
        const cJSON *cls = get(cfg, "tokenizer_class");
        if (cJSON_IsBool(b)) {
            v->add_bos = cJSON_IsTrue(b);
            t->prefix_id = v->add_bos ? v->bos_id : -1;
        } else if (cJSON_IsString(cls) && strncmp(cls->valuestring, "LlamaTokenizer", 14) == 0) {
            /* transformers' Llama tokenizer classes add BOS unless told not to,
             * whatever the post-processor in tokenizer.json says (transformers 5
             * saves one without it and rebuilds it from the class default) */
            v->add_bos = true;
            t->prefix_id = v->bos_id;
        }
        b = get(cfg, "add_eos_token");
        if (cJSON_IsBool(b)) {
            v->add_eos = cJSON_IsTrue(b);
            t->suffix_id = v->add_eos ? v->eos_id : -1;
        }
        if (!has_json) {
            t->spm_legacy = get_bool(cfg, "legacy", true);
            b = get(cfg, "add_prefix_space");
            if (cJSON_IsBool(b))
                v->add_space_prefix = cJSON_IsTrue(b);
        }
        cJSON_Delete(cfg);
    }
    if (v->add_bos && v->bos_id < 0)
        v->add_bos = false;
    if (v->add_eos && v->eos_id < 0)
        v->add_eos = false;
    return tokenizer_finish(t, extra, n_extra, err);
}
