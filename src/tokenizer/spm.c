/*
 * spm.c — SentencePiece BPE, as Llama 2, Mistral and Phi-3 use it
 * (llama.cpp's "llama" vocabulary type, sentencepiece's bpe_model.cc).
 *
 * Front end: spaces become U+2581 and a dummy U+2581 goes in front when the
 * caller says so (the first fragment; after special tokens too in legacy
 * mode). Model: the text starts as one symbol per character; every adjacent
 * pair whose concatenation is a piece (normal, user-defined or unused: the
 * types sentencepiece lets merges produce) enters a priority queue keyed by
 * that piece's score, highest first, leftmost on ties. Popping a pair whose
 * symbols have changed since it was queued is skipped (their byte length no
 * longer adds up). A finished symbol that is an unused piece is split back
 * into the two symbols it was merged from; one that is not a piece becomes
 * its bytes as <0xXX> tokens (byte fallback), or the unknown token.
 *
 * Speed: a queue over a whole megabyte thrashes the cache, so when no
 * piece has U+2581 after another character (checked at load; true of Llama 2
 * and Phi-3) no merge can cross a word start and each word runs on its own,
 * which gives the same result. A quadratic "find the best pair"
 * scan was rejected: long words of CJK or byte-fallback text would make it
 * slow.
 */
#include "tokenizer/tok_impl.h"

#include "tokenizer/unicode.h"
#include "util/alloc.h"

#include <string.h>

#define SPACE_MARK "\xe2\x96\x81" /* U+2581, SentencePiece's visible space */
#define SPACE_MARK_BYTES 3

/* Orders scores so that a min-heap pops the highest score first. */
static uint32_t score_key(float s) {
    if (s == 0.0f)
        s = 0.0f; /* -0 and +0 compare equal in sentencepiece */
    uint32_t u;
    memcpy(&u, &s, sizeof u);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* ascending with the float */
    return ~u;
}

static bool mergeable(uint8_t type) {
    return type == TOK_TYPE_NORMAL || type == TOK_TYPE_USER_DEFINED || type == TOK_TYPE_UNUSED;
}

typedef struct {
    int32_t id;
    uint32_t l_off, l_len, r_len; /* right part starts at l_off + l_len */
} rev_merge;

typedef struct {
    tok_ctx *c;
    const char *text;
    tok_sym *sym;
    tok_heap_item *heap;
    size_t n_heap;
    rev_merge *rev; /* unused pieces: what they were merged from (latest wins) */
    size_t n_rev, cap_rev;
} spm_run;

static hr_status try_pair(spm_run *r, int32_t left, int32_t right) {
    if (left < 0 || right < 0)
        return HR_OK;
    const tok_vocab *v = &r->c->tok->v;
    const tok_sym *l = &r->sym[left], *rt = &r->sym[right];
    uint32_t size = l->len + rt->len;
    int32_t id = vocab_find(v, r->text + l->off, size);
    if (id < 0 || !mergeable(v->tokens[id].type))
        return HR_OK;
    tok_heap_item it = {((uint64_t)score_key(v->tokens[id].score) << 32) | (uint32_t)left, right,
                        (int32_t)size};
    tok_heap_push(r->heap, &r->n_heap, it);
    if (v->tokens[id].type == TOK_TYPE_UNUSED) {
        for (size_t i = 0; i < r->n_rev; i++)
            if (r->rev[i].id == id) {
                r->rev[i] = (rev_merge){id, l->off, l->len, rt->len};
                return HR_OK;
            }
        if (r->n_rev == r->cap_rev) {
            size_t cap = r->cap_rev ? r->cap_rev * 2 : 16;
            rev_merge *p = hr_realloc(r->rev, cap * sizeof *p);
            if (!p)
                return hr_err_set(r->c->err, HR_ERR_NOMEM, "out of memory while tokenizing");
            r->rev = p;
            r->cap_rev = cap;
        }
        r->rev[r->n_rev++] = (rev_merge){id, l->off, l->len, rt->len};
    }
    return HR_OK;
}

/* Emits the tokens of a symbol that is not a piece: its bytes, else unk. */
static hr_status emit_unknown(spm_run *r, uint32_t off, uint32_t len) {
    const hr_tokenizer *t = r->c->tok;
    bool all = true;
    for (uint32_t i = 0; i < len && all; i++)
        all = t->byte_ids[(uint8_t)r->text[off + i]] >= 0;
    if (all) {
        for (uint32_t i = 0; i < len; i++)
            HR_TRY(tok_push(r->c, t->byte_ids[(uint8_t)r->text[off + i]]));
        return HR_OK;
    }
    if (t->v.unk_id >= 0)
        return tok_push(r->c, t->v.unk_id);
    return HR_OK;
}

/* Emits a finished symbol, splitting unused pieces back into their parts.
 * An explicit stack: a hostile vocabulary could chain unused pieces deep. */
static hr_status emit_symbol(spm_run *r, uint32_t off, uint32_t len) {
    const tok_vocab *v = &r->c->tok->v;
    int32_t id = vocab_find(v, r->text + off, len);
    if (id >= 0 && (v->tokens[id].type != TOK_TYPE_UNUSED || r->n_rev == 0))
        return tok_push(r->c, id);
    if (id < 0)
        return emit_unknown(r, off, len);

    size_t cap = 16, n = 0;
    uint32_t *stack = hr_malloc(cap * 2 * sizeof *stack);
    if (!stack)
        return hr_err_set(r->c->err, HR_ERR_NOMEM, "out of memory while tokenizing");
    hr_status st = HR_OK;
    stack[n * 2] = off;
    stack[n * 2 + 1] = len;
    n++;
    while (n > 0 && st == HR_OK) {
        n--;
        uint32_t o = stack[n * 2], l = stack[n * 2 + 1];
        int32_t pid = vocab_find(v, r->text + o, l);
        const rev_merge *rm = NULL;
        if (pid >= 0 && v->tokens[pid].type == TOK_TYPE_UNUSED)
            for (size_t i = 0; i < r->n_rev; i++)
                if (r->rev[i].id == pid) {
                    rm = &r->rev[i];
                    break;
                }
        if (!rm || rm->l_len == 0 || rm->r_len == 0) {
            st = pid >= 0 ? tok_push(r->c, pid) : emit_unknown(r, o, l);
            continue;
        }
        if (n + 2 > cap) {
            cap *= 2;
            uint32_t *p = hr_realloc(stack, cap * 2 * sizeof *p);
            if (!p) {
                st = hr_err_set(r->c->err, HR_ERR_NOMEM, "out of memory while tokenizing");
                break;
            }
            stack = p;
        }
        /* the recorded parts have the same bytes as this symbol (same piece),
         * so they apply at o; right part pushed first so the left pops first */
        stack[n * 2] = o + rm->l_len;
        stack[n * 2 + 1] = rm->r_len;
        n++;
        stack[n * 2] = o;
        stack[n * 2 + 1] = rm->l_len;
        n++;
    }
    hr_free(stack);
    return st;
}

/* Merges text[0..n) (already escaped and prefixed) and emits its tokens. */
static hr_status spm_merge(spm_run *r, const char *text, size_t n) {
    /* rev entries hold offsets into this chunk's text: start afresh */
    tok_ctx *c = r->c;
    r->text = text;
    size_t n_sym = 0;
    for (size_t i = 0; i < n; i += uni_seq_len((uint8_t)text[i]))
        n_sym++;
    HR_TRY(tok_reserve(c, &c->sym, &c->sym_cap, n_sym, sizeof(tok_sym)));
    /* each merge queues at most two pairs: n-1 + 2(n-1) entries in all */
    HR_TRY(tok_reserve(c, &c->heap, &c->heap_cap, 3 * n_sym + 1, sizeof(tok_heap_item)));
    r->sym = c->sym;
    r->heap = c->heap;
    r->n_heap = 0;
    r->n_rev = 0;

    size_t k = 0;
    for (size_t i = 0; i < n; k++) {
        size_t len = uni_seq_len((uint8_t)text[i]);
        if (len > n - i)
            len = n - i;
        r->sym[k] = (tok_sym){(int32_t)k - 1, k + 1 < n_sym ? (int32_t)k + 1 : -1, (uint32_t)i,
                              (uint32_t)len, -1};
        i += len;
    }
    for (size_t i = 1; i < n_sym; i++)
        HR_TRY(try_pair(r, (int32_t)i - 1, (int32_t)i));

    while (r->n_heap > 0) {
        tok_heap_item top = tok_heap_pop(r->heap, &r->n_heap);
        int32_t left = (int32_t)(uint32_t)top.key, right = top.a;
        tok_sym *l = &r->sym[left], *rt = &r->sym[right];
        if (l->len == 0 || rt->len == 0 || l->len + rt->len != (uint32_t)top.b)
            continue; /* stale: one side merged since */
        l->len += rt->len;
        rt->len = 0;
        l->next = rt->next;
        if (rt->next >= 0)
            r->sym[rt->next].prev = left;
        HR_TRY(try_pair(r, l->prev, left));
        HR_TRY(try_pair(r, left, l->next));
    }
    for (int32_t i = n_sym ? 0 : -1; i >= 0; i = r->sym[i].next)
        HR_TRY(emit_symbol(r, r->sym[i].off, r->sym[i].len));
    return HR_OK;
}

hr_status spm_encode_fragment(tok_ctx *c, const char *text, size_t n, bool prefix) {
    const hr_tokenizer *t = c->tok;
    /* worst case: every byte a space (3 bytes each) plus the prefix */
    HR_TRY(tok_reserve(c, (void **)&c->sbuf, &c->scap, n * SPACE_MARK_BYTES + SPACE_MARK_BYTES, 1));
    char *o = c->sbuf;
    size_t m = 0;
    size_t i = 0, end = n;
    if (t->spm_remove_extra_ws) {
        while (i < end && text[i] == ' ')
            i++;
        while (end > i && text[end - 1] == ' ')
            end--;
    }
    if (i == end)
        return HR_OK;
    if (prefix) {
        if (t->spm_escape_ws) {
            memcpy(o, SPACE_MARK, SPACE_MARK_BYTES);
            m = SPACE_MARK_BYTES;
        } else {
            o[m++] = ' ';
        }
    }
    for (; i < end; i++) {
        char ch = text[i];
        if (ch == ' ') {
            if (t->spm_remove_extra_ws && i > 0 && text[i - 1] == ' ')
                continue;
            if (t->spm_escape_ws) {
                memcpy(o + m, SPACE_MARK, SPACE_MARK_BYTES);
                m += SPACE_MARK_BYTES;
                continue;
            }
        }
        o[m++] = ch;
    }

    spm_run r = {.c = c};
    hr_status st = HR_OK;
    if (!t->word_chunks) {
        st = spm_merge(&r, o, m);
    } else {
        for (size_t start = 0; start < m && st == HR_OK;) {
            size_t stop = tok_next_chunk(o, m, start);
            st = spm_merge(&r, o + start, stop - start);
            start = stop;
        }
    }
    hr_free(r.rev);
    return st;
}
