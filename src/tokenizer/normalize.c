/*
 * normalize.c — tokenizer.json normalizers, applied to each text fragment
 * (the text between added tokens) before pre-tokenization.
 *
 * Supported: Prepend (text in front of a non-empty fragment: Llama 2's "▁"),
 * Replace (literal or regex -> content: Llama 2's " " -> "▁"), Strip
 * (White_Space at either end), NFC/NFD (unicode_norm.c), and
 * Sequence of these (flattened by the loader). Each op reads one buffer and
 * writes the other of a pair held by the call's context; a fragment with no
 * ops is passed through untouched.
 */
#include "tokenizer/tok_impl.h"

#include "tokenizer/unicode.h"
#include "util/alloc.h"

#include <string.h>

typedef struct {
    tok_ctx *c;
    int slot;
    size_t len;
} out_buf;

static hr_status out_put(out_buf *o, const char *s, size_t n) {
    tok_ctx *c = o->c;
    size_t need = o->len + n + 1;
    if (need > c->ncap[o->slot]) {
        size_t cap = c->ncap[o->slot] ? c->ncap[o->slot] : 256;
        while (cap < need)
            cap *= 2;
        char *p = hr_realloc(c->nbuf[o->slot], cap);
        if (!p)
            return hr_err_set(c->err, HR_ERR_NOMEM, "out of memory while normalizing");
        c->nbuf[o->slot] = p;
        c->ncap[o->slot] = cap;
    }
    memcpy(c->nbuf[o->slot] + o->len, s, n);
    o->len += n;
    return HR_OK;
}

typedef struct {
    out_buf *o;
    const tok_norm_op *op;
    const char *src;
    size_t prev;
} replace_state;

static hr_status on_replace(void *user, size_t start, size_t end) {
    replace_state *r = user;
    HR_TRY(out_put(r->o, r->src + r->prev, start - r->prev));
    HR_TRY(out_put(r->o, r->op->content, r->op->content_len));
    r->prev = end;
    return HR_OK;
}

static hr_status run_replace(tok_ctx *c, const tok_norm_op *op, const char *s, size_t n,
                             out_buf *o) {
    replace_state r = {o, op, s, 0};
    if (op->re) {
        HR_TRY(tok_regex_each(c, op->re, s, n, on_replace, &r));
    } else if (op->text_len > 0) {
        for (size_t i = 0; i + op->text_len <= n;) {
            if (s[i] == op->text[0] && memcmp(s + i, op->text, op->text_len) == 0) {
                HR_TRY(on_replace(&r, i, i + op->text_len));
                i += op->text_len;
            } else {
                i++;
            }
        }
    }
    return out_put(o, s + r.prev, n - r.prev);
}

static void strip_bounds(const char *s, size_t n, bool left, bool right, size_t *b, size_t *e) {
    size_t i = 0, j = n;
    if (left)
        while (i < j) {
            uint32_t cp;
            size_t l = uni_next(s + i, j - i, &cp);
            if (!uni_is_space(cp))
                break;
            i += l;
        }
    if (right)
        while (j > i) {
            size_t k = j - 1;
            while (k > i && ((uint8_t)s[k] & 0xC0) == 0x80)
                k--;
            uint32_t cp;
            uni_next(s + k, j - k, &cp);
            if (!uni_is_space(cp))
                break;
            j = k;
        }
    *b = i;
    *e = j;
}

hr_status norm_run(tok_ctx *c, const char *text, size_t n, const char **out, size_t *out_len) {
    const hr_tokenizer *t = c->tok;
    const char *cur = text;
    size_t cur_len = n;
    int slot = 0;
    for (int32_t i = 0; i < t->n_norm; i++) {
        const tok_norm_op *op = &t->norm[i];
        out_buf o = {c, slot, 0};
        switch (op->kind) {
        case TOK_NORM_PREPEND:
            if (cur_len == 0)
                continue;
            HR_TRY(out_put(&o, op->text, op->text_len));
            HR_TRY(out_put(&o, cur, cur_len));
            break;
        case TOK_NORM_REPLACE: HR_TRY(run_replace(c, op, cur, cur_len, &o)); break;
        case TOK_NORM_STRIP: {
            size_t b, e;
            strip_bounds(cur, cur_len, op->left, op->right, &b, &e);
            HR_TRY(out_put(&o, cur + b, e - b));
            break;
        }
        case TOK_NORM_NFC:
        case TOK_NORM_NFD: {
            const char *res;
            size_t rl;
            HR_TRY(norm_unicode(c, op->kind, cur, cur_len, &res, &rl, slot));
            if (res != cur)
                slot ^= 1;
            cur = res;
            cur_len = rl;
            continue;
        }
        }
        HR_TRY(out_put(&o, "", 0)); /* buffer exists even for empty output */
        cur = c->nbuf[slot];
        cur_len = o.len;
        slot ^= 1;
    }
    *out = cur;
    *out_len = cur_len;
    return HR_OK;
}

hr_status norm_add(hr_tokenizer *t, const tok_norm_op *op, hr_error *err) {
    tok_norm_op *p = hr_realloc(t->norm, (size_t)(t->n_norm + 1) * sizeof *p);
    if (!p) {
        tok_regex_free(op->re);
        hr_free(op->text);
        hr_free(op->content);
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory for the normalizer");
    }
    t->norm = p;
    t->norm[t->n_norm++] = *op;
    return HR_OK;
}

void norm_free_ops(hr_tokenizer *t) {
    for (int32_t i = 0; i < t->n_norm; i++) {
        tok_regex_free(t->norm[i].re);
        hr_free(t->norm[i].text);
        hr_free(t->norm[i].content);
    }
    hr_free(t->norm);
    t->norm = NULL;
    t->n_norm = 0;
}
