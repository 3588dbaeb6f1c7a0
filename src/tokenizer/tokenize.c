/*
 * tokenize.c — hr_tokenize and the public tokenizer API: loading by path,
 * splitting text on added/special tokens, running each fragment through the
 * pipeline, BOS/EOS.
 *
 * Special tokens are found leftmost-longest (Hugging Face's added-vocabulary
 * matcher): at each position the longest added token that matches wins. The
 * candidates are grouped by first byte, longest first, so a position whose
 * byte starts no token costs one table lookup. With parse_special false only
 * user-defined (non-special added) tokens are split out, as both llama.cpp
 * and Hugging Face do. lstrip/rstrip tokens swallow the White_Space next to
 * them. llama.cpp instead takes each token in turn, longest first, over the
 * whole text; the two differ only when added tokens overlap in the text, and
 * the single left-to-right scan is cheaper.
 *
 * hr_tokenize's add_bos: 0 adds no special tokens at all (llama.cpp's
 * add_special false), 1 forces BOS (and EOS when configured), -1 does what
 * the tokenizer says (add_bos_token / the post-processor template).
 *
 * The SentencePiece dummy prefix: in legacy mode (llama.cpp, and
 * transformers' default) every text fragment gets it, also after a special
 * token; otherwise only a fragment at the very start of the text does.
 */
#include "tokenizer/tok_impl.h"

#include "tokenizer/unicode.h"
#include "util/alloc.h"
#include "util/file.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- context */

void tok_ctx_init(tok_ctx *c, const hr_tokenizer *t, hr_error *err) {
    memset(c, 0, sizeof *c);
    c->tok = t;
    c->err = err;
}

void tok_ctx_free(tok_ctx *c) {
    hr_free(c->ids);
    tok_match_data_free(c->md);
    hr_free(c->pa.sp);
    hr_free(c->pb.sp);
    hr_free(c->tb[0]);
    hr_free(c->tb[1]);
    hr_free(c->seg);
    hr_free(c->nbuf[0]);
    hr_free(c->nbuf[1]);
    hr_free(c->sbuf);
    hr_free(c->sym);
    hr_free(c->heap);
}

hr_status tok_reserve(tok_ctx *c, void **buf, size_t *cap, size_t need, size_t elem_bytes) {
    if (need <= *cap && *buf)
        return HR_OK;
    size_t n = *cap ? *cap : 64;
    while (n < need) {
        if (n > SIZE_MAX / 2 / elem_bytes)
            return hr_err_set(c->err, HR_ERR_NOMEM, "tokenizer scratch of %zu elements", need);
        n *= 2;
    }
    void *p = hr_realloc(*buf, n * elem_bytes);
    if (!p)
        return hr_err_set(c->err, HR_ERR_NOMEM, "out of memory while tokenizing");
    *buf = p;
    *cap = n;
    return HR_OK;
}

hr_status tok_push(tok_ctx *c, int32_t id) {
    if (c->n_ids == c->cap_ids)
        HR_TRY(tok_reserve(c, (void **)&c->ids, &c->cap_ids, c->n_ids + 1, sizeof(int32_t)));
    c->ids[c->n_ids++] = id;
    return HR_OK;
}

/* ---------------------------------------------------------------- lifetime */

hr_tokenizer *tokenizer_new(const char *name) {
    hr_tokenizer *t = hr_calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->name = hr_strdup(name ? name : "tokenizer");
    if (!t->name) {
        hr_free(t);
        return NULL;
    }
    t->v.bos_id = t->v.eos_id = t->v.unk_id = t->v.pad_id = -1;
    t->v.sep_id = t->v.eot_id = t->v.eom_id = -1;
    t->bpe_unk_id = -1;
    t->prefix_id = t->suffix_id = -1;
    t->spm_escape_ws = true;
    t->spm_legacy = true;
    return t;
}

void hr_tokenizer_free(hr_tokenizer *tok) {
    if (!tok)
        return;
    vocab_free(&tok->v);
    norm_free_ops(tok);
    pretok_free_ops(tok);
    hr_free(tok->special_ids);
    hr_free(tok->piece);
    hr_free(tok->piece_len);
    hr_free(tok->name);
    hr_free(tok);
}

const tok_vocab *tokenizer_vocab(const hr_tokenizer *t) { return &t->v; }

/* ---------------------------------------------------------------- finish */

typedef struct {
    uint8_t first;
    uint32_t len;
    int32_t id;
} special_key;

static int cmp_special(const void *a, const void *b) {
    const special_key *x = a, *y = b;
    if (x->first != y->first)
        return x->first < y->first ? -1 : 1;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static bool is_split(const hr_tokenizer *t, const tok_token *tk) {
    if (tk->len == 0)
        return false;
    if (t->added_list)
        return tk->attr & TOK_ATTR_ADDED;
    return tk->type == TOK_TYPE_CONTROL || tk->type == TOK_TYPE_USER_DEFINED ||
           tk->type == TOK_TYPE_UNKNOWN;
}

static hr_status build_special_index(hr_tokenizer *t, hr_error *err) {
    const tok_vocab *v = &t->v;
    int32_t n = 0;
    for (int32_t i = 0; i < v->n_tokens; i++)
        if (is_split(t, &v->tokens[i]))
            n++;
    hr_free(t->special_ids);
    t->special_ids = NULL;
    t->n_special = n;
    memset(t->special_start, 0, sizeof t->special_start);
    if (n == 0)
        return HR_OK;
    special_key *keys = hr_malloc((size_t)n * sizeof *keys);
    t->special_ids = hr_malloc((size_t)n * sizeof *t->special_ids);
    if (!keys || !t->special_ids) {
        hr_free(keys);
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory for the special-token index");
    }
    n = 0;
    for (int32_t i = 0; i < v->n_tokens; i++)
        if (is_split(t, &v->tokens[i]))
            keys[n++] = (special_key){(uint8_t)v->tokens[i].text[0], v->tokens[i].len, i};
    qsort(keys, (size_t)n, sizeof *keys, cmp_special);
    for (int32_t i = 0; i < n; i++)
        t->special_ids[i] = keys[i].id;
    hr_free(keys);
    /* special_start[b] .. special_start[b + 1]: tokens whose first byte is b */
    uint32_t k = 0;
    for (int b = 0; b < 256; b++) {
        t->special_start[b] = k;
        while (k < (uint32_t)n && (uint8_t)v->tokens[t->special_ids[k]].text[0] == b)
            k++;
    }
    t->special_start[256] = k;
    return HR_OK;
}

static bool has_mark_after_char(const tok_token *tk) {
    for (uint32_t p = 1; p + 3 <= tk->len; p++)
        if ((uint8_t)tk->text[p] == 0xE2 && (uint8_t)tk->text[p + 1] == 0x96 &&
            (uint8_t)tk->text[p + 2] == 0x81 &&
            !(p >= 3 && (uint8_t)tk->text[p - 3] == 0xE2 && (uint8_t)tk->text[p - 2] == 0x96 &&
              (uint8_t)tk->text[p - 1] == 0x81))
            return true;
    return false;
}

hr_status tokenizer_finish(hr_tokenizer *t, const int32_t *extra_eog, int32_t n_extra_eog,
                           hr_error *err) {
    tok_vocab *v = &t->v;
    HR_TRY(vocab_finish_specials(v, extra_eog, n_extra_eog, err));

    for (int b = 0; b < 256; b++) {
        t->byte_ids[b] = -1;
        if (t->algo == TOK_ALGO_BPE && t->gguf_bpe) {
            char one = (char)b;
            t->byte_ids[b] = vocab_find(v, &one, 1);
        } else if (t->byte_fallback) {
            static const char hex[] = "0123456789ABCDEF";
            char name[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
            t->byte_ids[b] = vocab_find(v, name, sizeof name);
        }
    }
    for (uint32_t cp = 0; cp < 512; cp++) {
        char s[4];
        size_t n = uni_encode(cp, s);
        t->cp_ids[cp] = vocab_find(v, s, n);
    }
    t->word_chunks = true;
    for (int32_t i = 0; i < v->n_tokens && t->word_chunks; i++)
        if (has_mark_after_char(&v->tokens[i]))
            t->word_chunks = false;

    if (t->algo == TOK_ALGO_SPM)
        t->dec_strip_space = v->add_space_prefix; /* undo the dummy prefix */
    if (!v->add_bos)
        t->prefix_id = -1;
    else if (t->prefix_id < 0)
        t->prefix_id = v->bos_id;
    if (!v->add_eos)
        t->suffix_id = -1;
    else if (t->suffix_id < 0)
        t->suffix_id = v->eos_id;

    HR_TRY(build_special_index(t, err));
    return detok_build_pieces(t, err);
}

/* ---------------------------------------------------------------- encode */

static hr_status encode_text(tok_ctx *c, const char *text, size_t n, size_t frag_off) {
    const hr_tokenizer *t = c->tok;
    if (t->algo == TOK_ALGO_SPM) {
        bool prefix = t->v.add_space_prefix && (t->spm_legacy || frag_off == 0);
        return spm_encode_fragment(c, text, n, prefix);
    }
    const char *norm;
    size_t norm_len;
    HR_TRY(norm_run(c, text, n, &norm, &norm_len));
    if (t->n_pre == 0) {
        if (!t->word_chunks)
            return bpe_encode_word(c, norm, norm_len);
        for (size_t start = 0; start < norm_len;) {
            size_t end = tok_next_chunk(norm, norm_len, start);
            HR_TRY(bpe_encode_word(c, norm + start, end - start));
            start = end;
        }
        return HR_OK;
    }
    const tok_pieces *p;
    HR_TRY(pretok_run(c, norm, norm_len, frag_off == 0, &p));
    for (size_t i = 0; i < p->n; i++)
        HR_TRY(bpe_encode_word(c, p->base + p->sp[i].off, p->sp[i].len));
    return HR_OK;
}

static size_t prev_char_start(const char *s, size_t i) {
    size_t k = i - 1;
    while (k > 0 && ((uint8_t)s[k] & 0xC0) == 0x80)
        k--;
    return k;
}

/* Splits s on added tokens and encodes every piece between them. */
static hr_status encode_all(tok_ctx *c, const char *s, size_t n, bool parse_special) {
    const hr_tokenizer *t = c->tok;
    const tok_vocab *v = &t->v;
    size_t text_start = 0, pos = 0;
    while (pos < n) {
        uint8_t b = (uint8_t)s[pos];
        uint32_t lo = t->special_start[b], hi = t->special_start[b + 1];
        int32_t hit = -1;
        /* matches start and end on character boundaries, even for a token
         * whose text is not well-formed: the pieces must stay valid UTF-8 */
        if ((b & 0xC0) == 0x80)
            lo = hi;
        for (uint32_t k = lo; k < hi; k++) {
            const tok_token *tk = &v->tokens[t->special_ids[k]];
            /* off: only non-special added tokens split (llama.cpp, transformers) */
            if (!parse_special && tk->type != TOK_TYPE_USER_DEFINED)
                continue;
            if (tk->len <= n - pos && memcmp(s + pos, tk->text, tk->len) == 0 &&
                (pos + tk->len == n || ((uint8_t)s[pos + tk->len] & 0xC0) != 0x80)) {
                hit = t->special_ids[k];
                break;
            }
        }
        if (hit < 0) {
            pos++;
            continue;
        }
        const tok_token *tk = &v->tokens[hit];
        size_t ms = pos, me = pos + tk->len;
        if (tk->attr & TOK_ATTR_LSTRIP)
            while (ms > text_start) {
                size_t k = prev_char_start(s, ms);
                uint32_t cp;
                uni_next(s + k, ms - k, &cp);
                if (!uni_is_space(cp))
                    break;
                ms = k;
            }
        if (tk->attr & TOK_ATTR_RSTRIP)
            while (me < n) {
                uint32_t cp;
                size_t l = uni_next(s + me, n - me, &cp);
                if (!uni_is_space(cp))
                    break;
                me += l;
            }
        if (ms > text_start)
            HR_TRY(encode_text(c, s + text_start, ms - text_start, text_start));
        HR_TRY(tok_push(c, hit));
        pos = text_start = me;
    }
    if (n > text_start)
        HR_TRY(encode_text(c, s + text_start, n - text_start, text_start));
    return HR_OK;
}

hr_tokenize_params hr_tokenize_params_default(void) {
    hr_tokenize_params p = {.add_bos = -1, .parse_special = true};
    return p;
}

hr_status hr_tokenize(const hr_tokenizer *tok, const char *text, size_t len,
                      const hr_tokenize_params *params, int32_t *ids, size_t cap, size_t *n_out,
                      hr_error *err) {
    if (!tok || !n_out || (!text && len > 0) || (!ids && cap > 0))
        return hr_err_set(err, HR_ERR_INVALID, "hr_tokenize: NULL argument");
    hr_tokenize_params p = params ? *params : hr_tokenize_params_default();
    if (p.add_bos == 1 && tok->v.bos_id < 0)
        return hr_err_set(err, HR_ERR_INVALID, "%s: add_bos requested but the tokenizer has no BOS",
                          tok->name);

    tok_ctx c;
    tok_ctx_init(&c, tok, err);
    hr_status st = HR_OK;
    char *clean = NULL;
    const char *s = text;
    if (len > 0 && !uni_valid(text, len)) {
        if (len > SIZE_MAX / 3) {
            st = hr_err_set(err, HR_ERR_INVALID, "hr_tokenize: %zu bytes is too long", len);
            goto done;
        }
        clean = hr_malloc(uni_sanitize_bound(len));
        if (!clean) {
            st = hr_err_set(err, HR_ERR_NOMEM, "out of memory for %zu bytes of text", len);
            goto done;
        }
        len = uni_sanitize(text, len, clean);
        s = clean;
    }

    /* add_bos 0 adds no special tokens at all; 1 forces BOS; -1 follows the
     * tokenizer (BOS/EOS or its post-processor template) */
    if (p.add_bos == 1)
        st = tok_push(&c, tok->v.bos_id);
    else if (p.add_bos < 0 && tok->prefix_id >= 0)
        st = tok_push(&c, tok->prefix_id);
    if (st == HR_OK && len > 0)
        st = encode_all(&c, s, len, p.parse_special);
    if (st == HR_OK && p.add_bos != 0 && tok->suffix_id >= 0)
        st = tok_push(&c, tok->suffix_id);
    if (st != HR_OK)
        goto done;

    *n_out = c.n_ids;
    if (c.n_ids > cap) {
        st =
            hr_err_set(err, HR_ERR_INVALID, "hr_tokenize: %zu ids do not fit in %zu", c.n_ids, cap);
        goto done;
    }
    if (c.n_ids)
        memcpy(ids, c.ids, c.n_ids * sizeof *ids);
done:
    hr_free(clean);
    tok_ctx_free(&c);
    return st;
}

/* ---------------------------------------------------------------- accessors */

int32_t hr_tokenizer_n_vocab(const hr_tokenizer *tok) { return tok ? tok->v.n_tokens : 0; }

int32_t hr_tokenizer_bos(const hr_tokenizer *tok) { return tok ? tok->v.bos_id : -1; }

int32_t hr_tokenizer_eos(const hr_tokenizer *tok) { return tok ? tok->v.eos_id : -1; }

bool hr_tokenizer_is_eog(const hr_tokenizer *tok, int32_t id) {
    return tok && id >= 0 && vocab_is_eog(&tok->v, id);
}

/* ---------------------------------------------------------------- loading */

/* tokenizer.json / tokenizer.model files are read whole; the largest
 * tokenizer.json files in use are a few tens of MB (Gemma's ~33 MB). */
#define TOKENIZER_FILE_MAX ((size_t)256 << 20)

static hr_status load_json_file(hr_tokenizer *t, const char *path, hr_error *err) {
    char *text = NULL;
    size_t len = 0;
    HR_TRY(hr_file_read_all(path, TOKENIZER_FILE_MAX, &text, &len, err));
    hr_status st = tokjson_load(t, text, len, path, err);
    hr_free(text);
    return st;
}

static hr_status load_model_file(hr_tokenizer *t, const char *path, hr_error *err) {
    hr_mapped_file m;
    HR_TRY(hr_file_map(path, &m, err));
    hr_status st = sp_model_load(t, m.data, m.size, path, err);
    hr_file_unmap(&m);
    return st;
}

hr_status tokenizer_from_dir(const char *dir, hr_tokenizer **out, hr_error *err) {
    char path[4096];
    hr_tokenizer *t = tokenizer_new(dir);
    if (!t)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory for a tokenizer");
    hr_status st;
    bool has_json = false;
    if (hr_path_join(path, sizeof path, dir, "tokenizer.json") && hr_path_exists(path)) {
        has_json = true;
        st = load_json_file(t, path, err);
    } else if (hr_path_join(path, sizeof path, dir, "tokenizer.model") && hr_path_exists(path)) {
        st = load_model_file(t, path, err);
    } else {
        st = hr_err_set(err, HR_ERR_IO, "%s: no tokenizer.json or tokenizer.model in this folder",
                        dir);
    }
    if (st == HR_OK)
        st = tokjson_apply_configs(t, dir, has_json, err);
    if (st != HR_OK) {
        hr_tokenizer_free(t);
        return st;
    }
    *out = t;
    return HR_OK;
}

hr_status hr_tokenizer_load(const char *path, hr_tokenizer **out, hr_error *err) {
    if (!path || !out)
        return hr_err_set(err, HR_ERR_INVALID, "hr_tokenizer_load: NULL argument");
    if (hr_path_is_dir(path))
        return tokenizer_from_dir(path, out, err);
    if (!hr_path_exists(path))
        return hr_err_set(err, HR_ERR_IO, "%s: no such file or folder", path);
    if (hr_path_has_suffix(path, ".gguf")) {
        gguf_file *g = NULL;
        HR_TRY(gguf_open(path, &g, err));
        hr_status st = tokenizer_from_gguf(g, out, err);
        gguf_free(g);
        return st;
    }
    hr_tokenizer *t = tokenizer_new(path);
    if (!t)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory for a tokenizer");
    hr_status st = hr_path_has_suffix(path, ".json") ? load_json_file(t, path, err)
                                                     : load_model_file(t, path, err);
    if (st == HR_OK)
        st = tokenizer_finish(t, NULL, 0, err);
    if (st != HR_OK) {
        hr_tokenizer_free(t);
        return st;
    }
    *out = t;
    return HR_OK;
}
