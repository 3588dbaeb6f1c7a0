/*
 * value.c — the values templates compute with, behaving as the Python
 * objects jinja2 would hold: truthiness, == and < across types, str() and
 * repr() (lists print as ['a', 1]), and transformers' tojson, which is
 * json.dumps(x, ensure_ascii=False, indent=None, separators=None,
 * sort_keys=False): ", " and ": " separators, or "," and ": " with indent.
 * Floats print as Python's repr (the shortest text that reads back the
 * same, "1e+16" from 16 digits on). Dicts keep insertion order and find
 * keys by linear search: message dicts have two keys.
 */
#include "chat/chat_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const char *cv_type_name(const cv *v) {
    switch ((cv_type)v->type) {
    case CV_UNDEF: return "Undefined";
    case CV_NONE: return "NoneType";
    case CV_BOOL: return "bool";
    case CV_INT: return "int";
    case CV_FLOAT: return "float";
    case CV_STR: return "str";
    case CV_LIST: return v->flags & CV_F_TUPLE ? "tuple" : "list";
    case CV_DICT: return "dict";
    case CV_NS: return "Namespace";
    case CV_FUNC: return "function";
    case CV_MACRO: return "Macro";
    case CV_METHOD: return "method";
    case CV_LOOP: return "LoopContext";
    }
    return "object";
}

bool cv_truthy(const cv *v) {
    switch ((cv_type)v->type) {
    case CV_UNDEF:
    case CV_NONE: return false;
    case CV_BOOL: return v->b;
    case CV_INT: return v->i != 0;
    case CV_FLOAT: return v->f != 0.0;
    case CV_STR: return v->n != 0;
    case CV_LIST: return v->list->n != 0;
    case CV_DICT: return v->dict->n != 0;
    default: return true;
    }
}

static bool is_num(const cv *v) {
    return v->type == CV_BOOL || v->type == CV_INT || v->type == CV_FLOAT;
}
static int64_t num_i(const cv *v) {
    return v->type == CV_INT ? v->i : v->type == CV_BOOL ? v->b : 0;
}

/* Python compares int and float exactly; (double)i would round big ints. */
static int cmp_int_float(int64_t i, double f) {
    if (isnan(f))
        return 2; /* unordered */
    if (f >= 9223372036854775808.0)
        return -1;
    if (f < -9223372036854775808.0)
        return 1;
    double t = trunc(f);
    int64_t ti = (int64_t)t;
    if (i != ti)
        return i < ti ? -1 : 1;
    return f > t ? -1 : f < t ? 1 : 0;
}

static int num_cmp(const cv *x, const cv *y) {
    if (x->type != CV_FLOAT && y->type != CV_FLOAT) {
        int64_t a = num_i(x), b = num_i(y);
        return a < b ? -1 : a > b;
    }
    if (x->type != CV_FLOAT)
        return cmp_int_float(num_i(x), y->f);
    if (y->type != CV_FLOAT) {
        int r = cmp_int_float(num_i(y), x->f);
        return r == 2 ? 2 : -r;
    }
    if (isnan(x->f) || isnan(y->f))
        return 2;
    return x->f < y->f ? -1 : x->f > y->f;
}

static int str_cmp(const cv *x, const cv *y) {
    /* UTF-8 byte order is code point order, which is Python's */
    size_t n = x->n < y->n ? x->n : y->n;
    int r = n ? memcmp(x->s, y->s, n) : 0;
    if (r)
        return r < 0 ? -1 : 1;
    return x->n < y->n ? -1 : x->n > y->n;
}

bool cv_equal(chat_ctx *c, const chat_ast *at, const cv *x, const cv *y, bool *eq) {
    if (is_num(x) && is_num(y)) {
        *eq = num_cmp(x, y) == 0;
        return true;
    }
    if (x->type != y->type) {
        *eq = false;
        return true;
    }
    switch ((cv_type)x->type) {
    case CV_UNDEF: /* jinja2's Undefined.__eq__: same type */
    case CV_NONE: *eq = true; return true;
    case CV_STR: *eq = x->n == y->n && (x->n == 0 || memcmp(x->s, y->s, x->n) == 0); return true;
    case CV_LIST:
        if ((x->flags & CV_F_TUPLE) != (y->flags & CV_F_TUPLE) || x->list->n != y->list->n) {
            *eq = false;
            return true;
        }
        if (!chat_enter(c, at))
            return false;
        *eq = true;
        for (size_t k = 0; k < x->list->n && *eq; k++)
            if (!cv_equal(c, at, &x->list->v[k], &y->list->v[k], eq)) {
                chat_leave(c);
                return false;
            }
        chat_leave(c);
        return true;
    case CV_DICT:
        if (x->dict->n != y->dict->n) {
            *eq = false;
            return true;
        }
        if (!chat_enter(c, at))
            return false;
        *eq = true;
        for (size_t k = 0; k < x->dict->n && *eq; k++) {
            const cv *other = cv_dict_get(y->dict, &x->dict->keys[k]);
            if (!other)
                *eq = false;
            else if (!cv_equal(c, at, &x->dict->vals[k], other, eq)) {
                chat_leave(c);
                return false;
            }
        }
        chat_leave(c);
        return true;
    case CV_NS: *eq = x->dict == y->dict; return true;
    case CV_FUNC: *eq = x->i == y->i; return true;
    case CV_MACRO: *eq = x->macro == y->macro; return true;
    default: *eq = false; return true; /* methods, loops: identity, never shared */
    }
}

bool cv_compare(chat_ctx *c, const chat_ast *at, const cv *x, const cv *y, int *cmp) {
    if (is_num(x) && is_num(y)) {
        *cmp = num_cmp(x, y);
        return true; /* 2 (NaN) makes every ordering false, as in Python */
    }
    if (x->type == CV_STR && y->type == CV_STR) {
        *cmp = str_cmp(x, y);
        return true;
    }
    if (x->type == CV_LIST && y->type == CV_LIST &&
        (x->flags & CV_F_TUPLE) == (y->flags & CV_F_TUPLE)) {
        if (!chat_enter(c, at))
            return false;
        size_t n = x->list->n < y->list->n ? x->list->n : y->list->n;
        for (size_t k = 0; k < n; k++) {
            bool eq;
            if (!cv_equal(c, at, &x->list->v[k], &y->list->v[k], &eq)) {
                chat_leave(c);
                return false;
            }
            if (!eq) {
                bool ok = cv_compare(c, at, &x->list->v[k], &y->list->v[k], cmp);
                chat_leave(c);
                return ok;
            }
        }
        chat_leave(c);
        *cmp = x->list->n < y->list->n ? -1 : x->list->n > y->list->n;
        return true;
    }
    return chat_fail(c, at, HR_ERR_INVALID, "cannot order %s and %s", cv_type_name(x),
                     cv_type_name(y));
}

/* ---------------------------------------------------------------- numbers */

size_t chat_fmt_float(double d, char *out) {
    if (isnan(d))
        return (size_t)sprintf(out, "nan");
    if (isinf(d))
        return (size_t)sprintf(out, d < 0 ? "-inf" : "inf");
    /* the shortest %e that reads back as d */
    char tmp[40];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, d);
        if (chat_strtod(tmp, NULL) == d)
            break;
    }
    if (p > 17)
        p = 17;
    snprintf(tmp, sizeof tmp, "%.*e", p - 1, d);
    /* tmp: [-]D[.DDD]e(+|-)XX, with the locale's decimal point */
    char digits[24];
    int nd = 0, exp10 = 0;
    bool neg = tmp[0] == '-';
    const char *s = tmp + neg;
    for (; *s && *s != 'e'; s++)
        if (*s >= '0' && *s <= '9')
            digits[nd++] = *s;
    if (*s == 'e')
        exp10 = (int)strtol(s + 1, NULL, 10);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    char *o = out;
    if (neg)
        *o++ = '-';
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            *o++ = '0';
            *o++ = '.';
            for (int k = 0; k < -exp10 - 1; k++)
                *o++ = '0';
            for (int k = 0; k < nd; k++)
                *o++ = digits[k];
        } else {
            for (int k = 0; k <= exp10; k++)
                *o++ = k < nd ? digits[k] : '0';
            *o++ = '.';
            if (nd > exp10 + 1)
                for (int k = exp10 + 1; k < nd; k++)
                    *o++ = digits[k];
            else
                *o++ = '0';
        }
    } else {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            for (int k = 1; k < nd; k++)
                *o++ = digits[k];
        }
        o += sprintf(o, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    }
    *o = '\0';
    return (size_t)(o - out);
}

/* ---------------------------------------------------------------- str / repr */

static bool buf_ok(chat_ctx *c, const chat_ast *at, chat_buf *b) {
    return b->failed ? chat_fail_mem(c, at) : true;
}

/* Python's repr of a str. Non-printable means control characters and the
 * Unicode separators/format characters Python escapes (an approximation of
 * str.isprintable beyond Latin-1: unassigned code points print as is). */
static bool printable(uint32_t cp) {
    if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD)
        return false;
    if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
        (cp >= 0x205F && cp <= 0x2064) || cp == 0x3000 || cp == 0xFEFF ||
        (cp >= 0xE000 && cp <= 0xF8FF) || (cp >= 0xFFF9 && cp <= 0xFFFB))
        return false;
    return true;
}

static void repr_str(chat_buf *b, const char *s, size_t n) {
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    chat_buf_putc(b, q);
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = chat_utf8_next(s + i, n - i, &cp);
        if (cp == (uint32_t)q || cp == '\\') {
            chat_buf_putc(b, '\\');
            chat_buf_putc(b, (char)cp);
        } else if (cp == '\n') {
            chat_buf_puts(b, "\\n");
        } else if (cp == '\r') {
            chat_buf_puts(b, "\\r");
        } else if (cp == '\t') {
            chat_buf_puts(b, "\\t");
        } else if (!printable(cp)) {
            chat_buf_printf(b,
                            cp <= 0xFF     ? "\\x%02x"
                            : cp <= 0xFFFF ? "\\u%04x"
                                           : "\\U%08x",
                            (unsigned)cp);
        } else {
            chat_buf_put(b, s + i, k);
        }
        i += k;
    }
    chat_buf_putc(b, q);
}

static bool repr_or_str(chat_ctx *c, const chat_ast *at, const cv *v, chat_buf *b, bool repr) {
    char num[40];
    switch ((cv_type)v->type) {
    case CV_UNDEF:
        if (repr)
            chat_buf_puts(b, "Undefined");
        break;
    case CV_NONE: chat_buf_puts(b, "None"); break;
    case CV_BOOL: chat_buf_puts(b, v->b ? "True" : "False"); break;
    case CV_INT: chat_buf_printf(b, "%lld", (long long)v->i); break;
    case CV_FLOAT: chat_buf_put(b, num, chat_fmt_float(v->f, num)); break;
    case CV_STR:
        if (repr)
            repr_str(b, v->s, v->n);
        else
            chat_buf_put(b, v->s, v->n);
        break;
    case CV_LIST: {
        bool tuple = v->flags & CV_F_TUPLE;
        if (!chat_enter(c, at))
            return false;
        chat_buf_putc(b, tuple ? '(' : '[');
        for (size_t k = 0; k < v->list->n; k++) {
            if (k)
                chat_buf_puts(b, ", ");
            if (!repr_or_str(c, at, &v->list->v[k], b, true)) {
                chat_leave(c);
                return false;
            }
        }
        if (tuple && v->list->n == 1)
            chat_buf_putc(b, ',');
        chat_buf_putc(b, tuple ? ')' : ']');
        chat_leave(c);
        break;
    }
    case CV_DICT:
    case CV_NS: {
        if (!chat_enter(c, at))
            return false;
        if (v->type == CV_NS)
            chat_buf_puts(b, "<Namespace ");
        chat_buf_putc(b, '{');
        for (size_t k = 0; k < v->dict->n; k++) {
            if (k)
                chat_buf_puts(b, ", ");
            if (!repr_or_str(c, at, &v->dict->keys[k], b, true) || !chat_buf_puts(b, ": ") ||
                !repr_or_str(c, at, &v->dict->vals[k], b, true)) {
                chat_leave(c);
                return false;
            }
        }
        chat_buf_putc(b, '}');
        if (v->type == CV_NS)
            chat_buf_putc(b, '>');
        chat_leave(c);
        break;
    }
    case CV_FUNC: chat_buf_printf(b, "<function %s>", chat_fn_names[v->i]); break;
    case CV_MACRO:
        chat_buf_puts(b, "<Macro '");
        chat_buf_put(b, v->macro->name.s, v->macro->name.n);
        chat_buf_puts(b, "'>");
        break;
    case CV_METHOD:
        chat_buf_puts(b, "<built-in method ");
        chat_buf_put(b, v->s, v->n);
        chat_buf_putc(b, '>');
        break;
    case CV_LOOP:
        chat_buf_printf(b, "<LoopContext %zu/%zu>", v->loop->i + 1, v->loop->items->n);
        break;
    }
    return buf_ok(c, at, b);
}

bool cv_str_into(chat_ctx *c, const chat_ast *at, const cv *v, chat_buf *b) {
    return repr_or_str(c, at, v, b, false);
}

bool cv_repr_into(chat_ctx *c, const chat_ast *at, const cv *v, chat_buf *b) {
    return repr_or_str(c, at, v, b, true);
}

bool cv_to_string(chat_ctx *c, const chat_ast *at, const cv *v, cv *out) {
    if (v->type == CV_STR) {
        *out = *v;
        return true;
    }
    if (v->type == CV_UNDEF) {
        *out = cv_str("", 0);
        return true;
    }
    chat_buf b;
    chat_buf_init(&b, chat_ctx_arena(c));
    if (!cv_str_into(c, at, v, &b) || !chat_buf_put(&b, "", 0))
        return b.failed ? chat_fail_mem(c, at) : false;
    *out = cv_str(b.p, b.n);
    return true;
}

bool cv_new_str(chat_ctx *c, const chat_ast *at, const char *s, size_t n, cv *out) {
    char *p = chat_arena_alloc(chat_ctx_arena(c), n + 1);
    if (!p)
        return chat_fail_mem(c, at);
    if (n)
        memcpy(p, s, n);
    p[n] = '\0';
    *out = cv_str(p, n);
    return true;
}

/* ---------------------------------------------------------------- tojson */

static void json_str(chat_buf *b, const char *s, size_t n, bool ascii) {
    chat_buf_putc(b, '"');
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = chat_utf8_next(s + i, n - i, &cp);
        switch (cp) {
        case '"': chat_buf_puts(b, "\\\""); break;
        case '\\': chat_buf_puts(b, "\\\\"); break;
        case '\n': chat_buf_puts(b, "\\n"); break;
        case '\r': chat_buf_puts(b, "\\r"); break;
        case '\t': chat_buf_puts(b, "\\t"); break;
        case '\b': chat_buf_puts(b, "\\b"); break;
        case '\f': chat_buf_puts(b, "\\f"); break;
        default:
            if (cp < 0x20 || (ascii && cp >= 0x7F)) {
                if (cp > 0xFFFF) { /* a surrogate pair, as json.dumps writes it */
                    uint32_t v = cp - 0x10000;
                    chat_buf_printf(b, "\\u%04x\\u%04x", (unsigned)(0xD800 | v >> 10),
                                    (unsigned)(0xDC00 | (v & 0x3FF)));
                } else {
                    chat_buf_printf(b, "\\u%04x", (unsigned)cp);
                }
            } else {
                chat_buf_put(b, s + i, k);
            }
        }
        i += k;
    }
    chat_buf_putc(b, '"');
}

static void json_float(chat_buf *b, double f) {
    char num[40];
    if (isnan(f))
        chat_buf_puts(b, "NaN");
    else if (isinf(f))
        chat_buf_puts(b, f < 0 ? "-Infinity" : "Infinity");
    else
        chat_buf_put(b, num, chat_fmt_float(f, num));
}

static void json_newline(chat_buf *b, const chat_json_opts *o, int level) {
    chat_buf_putc(b, '\n');
    for (int k = 0; k < o->indent * level; k++)
        chat_buf_putc(b, ' ');
}

/* A dict key as json.dumps converts it; false for keys it refuses. */
static bool json_key(chat_ctx *c, const chat_ast *at, const cv *k, chat_buf *b, bool ascii) {
    char num[40];
    switch ((cv_type)k->type) {
    case CV_STR: json_str(b, k->s, k->n, ascii); return true;
    case CV_INT: chat_buf_printf(b, "\"%lld\"", (long long)k->i); return true;
    case CV_FLOAT: {
        chat_buf tmp;
        chat_buf_init(&tmp, chat_ctx_arena(c));
        json_float(&tmp, k->f);
        json_str(b, tmp.p ? tmp.p : "", tmp.n, false);
        return true;
    }
    case CV_BOOL: chat_buf_puts(b, k->b ? "\"true\"" : "\"false\""); return true;
    case CV_NONE: chat_buf_puts(b, "\"null\""); return true;
    default:
        (void)num;
        return chat_fail(c, at, HR_ERR_INVALID,
                         "tojson: keys must be str, int, float, bool or "
                         "None, not %s",
                         cv_type_name(k));
    }
}

bool cv_tojson_into(chat_ctx *c, const chat_ast *at, const cv *v, const chat_json_opts *o,
                    chat_buf *b, int level) {
    switch ((cv_type)v->type) {
    case CV_NONE: chat_buf_puts(b, "null"); break;
    case CV_BOOL: chat_buf_puts(b, v->b ? "true" : "false"); break;
    case CV_INT: chat_buf_printf(b, "%lld", (long long)v->i); break;
    case CV_FLOAT: json_float(b, v->f); break;
    case CV_STR: json_str(b, v->s, v->n, o->ensure_ascii); break;
    case CV_LIST: {
        if (!v->list->n) {
            chat_buf_puts(b, "[]");
            break;
        }
        if (!chat_enter(c, at))
            return false;
        chat_buf_putc(b, '[');
        for (size_t k = 0; k < v->list->n; k++) {
            if (k)
                chat_buf_put(b, o->item_sep, o->item_sep_n);
            if (o->indent >= 0)
                json_newline(b, o, level + 1);
            if (!cv_tojson_into(c, at, &v->list->v[k], o, b, level + 1)) {
                chat_leave(c);
                return false;
            }
        }
        if (o->indent >= 0)
            json_newline(b, o, level);
        chat_buf_putc(b, ']');
        chat_leave(c);
        break;
    }
    case CV_DICT: {
        const cv_dict *d = v->dict;
        if (!d->n) {
            chat_buf_puts(b, "{}");
            break;
        }
        if (!chat_enter(c, at))
            return false;
        /* sort_keys: an index order by key (keys must then be comparable) */
        size_t *order = chat_arena_alloc(chat_ctx_arena(c), d->n * sizeof *order);
        if (!order) {
            chat_leave(c);
            return chat_fail_mem(c, at);
        }
        for (size_t k = 0; k < d->n; k++)
            order[k] = k;
        if (o->sort_keys) {
            for (size_t k = 1; k < d->n; k++) { /* insertion sort: stable, small dicts */
                size_t x = order[k], j = k;
                for (; j > 0; j--) {
                    int cmp;
                    if (!cv_compare(c, at, &d->keys[order[j - 1]], &d->keys[x], &cmp)) {
                        chat_leave(c);
                        return false;
                    }
                    if (cmp <= 0)
                        break;
                    order[j] = order[j - 1];
                }
                order[j] = x;
            }
        }
        chat_buf_putc(b, '{');
        for (size_t k = 0; k < d->n; k++) {
            if (k)
                chat_buf_put(b, o->item_sep, o->item_sep_n);
            if (o->indent >= 0)
                json_newline(b, o, level + 1);
            if (!json_key(c, at, &d->keys[order[k]], b, o->ensure_ascii)) {
                chat_leave(c);
                return false;
            }
            chat_buf_put(b, o->key_sep, o->key_sep_n);
            if (!cv_tojson_into(c, at, &d->vals[order[k]], o, b, level + 1)) {
                chat_leave(c);
                return false;
            }
        }
        if (o->indent >= 0)
            json_newline(b, o, level);
        chat_buf_putc(b, '}');
        chat_leave(c);
        break;
    }
    default:
        return chat_fail(c, at, HR_ERR_INVALID,
                         "tojson: object of type %s is not JSON "
                         "serializable",
                         cv_type_name(v));
    }
    return buf_ok(c, at, b);
}

/* ---------------------------------------------------------------- containers */

cv_list *cv_list_new(chat_arena *a, size_t cap) {
    cv_list *l = chat_arena_alloc(a, sizeof *l);
    if (!l)
        return NULL;
    l->n = 0;
    l->cap = cap;
    l->v = cap ? chat_arena_alloc(a, cap * sizeof *l->v) : NULL;
    return cap && !l->v ? NULL : l;
}

bool cv_list_push(chat_arena *a, cv_list *l, cv v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        if (cap > SIZE_MAX / sizeof *l->v)
            return false;
        cv *nv = chat_arena_alloc(a, cap * sizeof *nv);
        if (!nv)
            return false;
        if (l->n)
            memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
    return true;
}

cv_dict *cv_dict_new(chat_arena *a, size_t cap) {
    cv_dict *d = chat_arena_alloc(a, sizeof *d);
    if (!d)
        return NULL;
    d->n = 0;
    d->cap = cap;
    d->keys = cap ? chat_arena_alloc(a, cap * sizeof *d->keys) : NULL;
    d->vals = cap ? chat_arena_alloc(a, cap * sizeof *d->vals) : NULL;
    return cap && (!d->keys || !d->vals) ? NULL : d;
}

static bool key_eq(const cv *x, const cv *y) {
    if (is_num(x) && is_num(y))
        return num_cmp(x, y) == 0; /* 1, 1.0 and True are one key */
    if (x->type != y->type)
        return false;
    if (x->type == CV_STR)
        return x->n == y->n && (x->n == 0 || memcmp(x->s, y->s, x->n) == 0);
    return x->type == CV_NONE;
}

cv *cv_dict_get(const cv_dict *d, const cv *key) {
    for (size_t k = 0; k < d->n; k++)
        if (key_eq(&d->keys[k], key))
            return &d->vals[k];
    return NULL;
}

cv *cv_dict_get_str(const cv_dict *d, const char *s, size_t n) {
    cv key = cv_str(s, n);
    return cv_dict_get(d, &key);
}

bool cv_dict_set(chat_ctx *c, cv_dict *d, cv key, cv val) {
    if (key.type != CV_STR && key.type != CV_NONE && !is_num(&key) &&
        !(key.type == CV_LIST && key.flags & CV_F_TUPLE))
        return chat_fail(c, NULL, HR_ERR_INVALID, "unhashable type: '%s'", cv_type_name(&key));
    cv *have = cv_dict_get(d, &key);
    if (have) {
        *have = val;
        return true;
    }
    if (d->n == d->cap) {
        chat_arena *a = chat_ctx_arena(c);
        size_t cap = d->cap ? d->cap * 2 : 4;
        cv *nk = chat_arena_alloc(a, cap * sizeof *nk), *nv = chat_arena_alloc(a, cap * sizeof *nv);
        if (!nk || !nv)
            return chat_fail_mem(c, NULL);
        if (d->n) {
            memcpy(nk, d->keys, d->n * sizeof *nk);
            memcpy(nv, d->vals, d->n * sizeof *nv);
        }
        d->keys = nk;
        d->vals = nv;
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
    return true;
}

bool cv_iterate(chat_ctx *c, const chat_ast *at, const cv *v, cv_list **out) {
    chat_arena *a = chat_ctx_arena(c);
    switch ((cv_type)v->type) {
    case CV_LIST: *out = v->list; return true;
    case CV_UNDEF:
        if (!(*out = cv_list_new(a, 0)))
            return chat_fail_mem(c, at);
        return true;
    case CV_DICT:
    case CV_NS: {
        if (v->type == CV_NS)
            break;
        cv_list *l = cv_list_new(a, v->dict->n);
        if (!l)
            return chat_fail_mem(c, at);
        for (size_t k = 0; k < v->dict->n; k++)
            l->v[l->n++] = v->dict->keys[k];
        *out = l;
        return true;
    }
    case CV_STR: {
        cv_list *l = cv_list_new(a, chat_utf8_count(v->s, v->n));
        if (!l)
            return chat_fail_mem(c, at);
        for (size_t i = 0; i < v->n;) {
            uint32_t cp;
            size_t k = chat_utf8_next(v->s + i, v->n - i, &cp);
            l->v[l->n++] = cv_str(v->s + i, k);
            i += k;
        }
        *out = l;
        return true;
    }
    default: break;
    }
    return chat_fail(c, at, HR_ERR_INVALID, "'%s' object is not iterable", cv_type_name(v));
}

bool cv_length(chat_ctx *c, const chat_ast *at, const cv *v, int64_t *n) {
    switch ((cv_type)v->type) {
    case CV_UNDEF: *n = 0; return true;
    case CV_STR: *n = (int64_t)chat_utf8_count(v->s, v->n); return true;
    case CV_LIST: *n = (int64_t)v->list->n; return true;
    case CV_DICT: *n = (int64_t)v->dict->n; return true;
    default: break;
    }
    return chat_fail(c, at, HR_ERR_INVALID, "object of type '%s' has no len()", cv_type_name(v));
}
