/*
 * util.c — the chat module's arena, growing strings and UTF-8 helpers.
 *
 * One arena per parsed template and one per render: values, scopes and AST
 * nodes are never freed one by one, so error paths need no cleanup and a
 * render's memory is capped by the arena's limit (chat_internal.h).
 * Chunks come from hr_malloc, so the allocation fault hook reaches here.
 */
#include "chat/chat_internal.h"

#include "util/alloc.h"
#include "util/utf8.h"

#include <locale.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 64 KiB chunks: a typical render fits in one or two; bigger requests get a
 * chunk of their own. */
#define CHAT_CHUNK_BYTES ((size_t)64 << 10)

struct chat_chunk {
    chat_chunk *next;
    size_t used, cap;
    max_align_t data[]; /* cap bytes */
};

void chat_arena_init(chat_arena *a, size_t limit_bytes) {
    memset(a, 0, sizeof *a);
    a->limit_bytes = limit_bytes;
}

void *chat_arena_alloc(chat_arena *a, size_t n_bytes) {
    if (a->failed)
        return NULL;
    size_t need = (n_bytes + 7) & ~(size_t)7;
    if (need < n_bytes) {
        a->failed = CHAT_ARENA_LIMIT;
        return NULL;
    }
    chat_chunk *c = a->head;
    if (!c || c->cap - c->used < need) {
        size_t cap = need > CHAT_CHUNK_BYTES ? need : CHAT_CHUNK_BYTES;
        if (cap > SIZE_MAX - sizeof *c ||
            (a->limit_bytes && (cap > a->limit_bytes || a->used_bytes > a->limit_bytes - cap))) {
            a->failed = CHAT_ARENA_LIMIT;
            return NULL;
        }
        c = hr_malloc(sizeof *c + cap);
        if (!c) {
            a->failed = CHAT_ARENA_NOMEM;
            return NULL;
        }
        c->cap = cap;
        c->used = 0;
        /* a big one-off chunk goes behind the current one, which keeps its room */
        if (a->head && need > CHAT_CHUNK_BYTES) {
            c->next = a->head->next;
            a->head->next = c;
        } else {
            c->next = a->head;
            a->head = c;
        }
        a->used_bytes += cap;
    }
    void *p = (char *)c->data + c->used;
    c->used += need;
    return p;
}

void chat_arena_free(chat_arena *a) {
    chat_chunk *c = a->head;
    while (c) {
        chat_chunk *next = c->next;
        hr_free(c);
        c = next;
    }
    a->head = NULL;
    a->used_bytes = 0;
}

/* ---------------------------------------------------------------- chat_buf */

void chat_buf_init(chat_buf *b, chat_arena *a) {
    memset(b, 0, sizeof *b);
    b->a = a;
}

bool chat_buf_put(chat_buf *b, const char *s, size_t n) {
    if (b->failed)
        return false;
    if (b->cap - b->n < n + 1) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap - b->n < n + 1) {
            if (cap > SIZE_MAX / 2) {
                b->failed = true;
                return false;
            }
            cap *= 2;
        }
        char *p = chat_arena_alloc(b->a, cap);
        if (!p) {
            b->failed = true;
            return false;
        }
        if (b->n)
            memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return true;
}

bool chat_buf_putc(chat_buf *b, char c) { return chat_buf_put(b, &c, 1); }

bool chat_buf_puts(chat_buf *b, const char *s) { return chat_buf_put(b, s, strlen(s)); }

bool chat_buf_printf(chat_buf *b, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        b->failed = true; /* only short numbers go through here */
        return false;
    }
    return chat_buf_put(b, tmp, (size_t)n);
}

/* ---------------------------------------------------------------- UTF-8 */

size_t chat_utf8_next(const char *s, size_t n, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)s;
    unsigned c = u[0];
    size_t k = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (k > n) { /* cannot happen on checked text; stay in bounds anyway */
        *cp = 0xFFFD;
        return 1;
    }
    uint32_t v = k == 1 ? c : k == 2 ? c & 0x1F : k == 3 ? c & 0x0F : c & 0x07;
    for (size_t j = 1; j < k; j++)
        v = v << 6 | (u[j] & 0x3F);
    *cp = v;
    return k;
}

size_t chat_utf8_encode(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | cp >> 6);
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | cp >> 12);
        o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | cp >> 18);
    o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t chat_utf8_check(const char *s, size_t n) { return hr_utf8_valid_prefix(s, n); }

size_t chat_utf8_count(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

bool chat_py_space(uint32_t cp) {
    /* Python's str.isspace: bidi classes WS, B, S and category Zs */
    if (cp <= 0x20)
        return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

double chat_strtod(const char *s, char **end) {
    /* the text has a '.'; the C library wants the locale's separator */
    const char *dp = localeconv()->decimal_point;
    if (!dp || (dp[0] == '.' && dp[1] == '\0'))
        return strtod(s, end);
    char tmp[128];
    size_t n = strlen(s);
    if (n >= sizeof tmp || strlen(dp) != 1)
        return strtod(s, end);
    memcpy(tmp, s, n + 1);
    char *dot = strchr(tmp, '.');
    if (dot)
        *dot = dp[0];
    char *e;
    double d = strtod(tmp, &e);
    if (end)
        *end = (char *)s + (e - tmp);
    return d;
}
