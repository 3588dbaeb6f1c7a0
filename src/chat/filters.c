/*
 * filters.c — Jinja's filters (jinja2/filters.py, as transformers sets them
 * up: tojson is json.dumps with ensure_ascii=False). Names resolve to ids at
 * parse time, as Jinja checks them when it compiles; an unknown name is an
 * error naming it.
 *
 * The corners templates rely on are kept: `undefined | length` is 0,
 * `x | default(y)` replaces only undefined (or falsy with boolean=true),
 * `'1.5' | int` is 1, `sort` and `unique` compare strings case-insensitively
 * unless asked, `round` rounds half to even like Python.
 */
#include "chat/chat_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------- names */

enum {
    F_ABS,
    F_ATTR,
    F_CAPITALIZE,
    F_COUNT,
    F_D,
    F_DEFAULT,
    F_FIRST,
    F_FLOAT,
    F_INDENT,
    F_INT,
    F_ITEMS,
    F_JOIN,
    F_LAST,
    F_LENGTH,
    F_LIST,
    F_LOWER,
    F_MAP,
    F_MAX,
    F_MIN,
    F_REJECT,
    F_REJECTATTR,
    F_REPLACE,
    F_REVERSE,
    F_ROUND,
    F_SAFE,
    F_SELECT,
    F_SELECTATTR,
    F_SORT,
    F_STRING,
    F_SUM,
    F_TITLE,
    F_TOJSON,
    F_TRIM,
    F_UNIQUE,
    F_UPPER,
    F_WORDCOUNT,
    F_N
};

static const char *const filter_names[F_N] = {
    [F_ABS] = "abs",
    [F_ATTR] = "attr",
    [F_CAPITALIZE] = "capitalize",
    [F_COUNT] = "count",
    [F_D] = "d",
    [F_DEFAULT] = "default",
    [F_FIRST] = "first",
    [F_FLOAT] = "float",
    [F_INDENT] = "indent",
    [F_INT] = "int",
    [F_ITEMS] = "items",
    [F_JOIN] = "join",
    [F_LAST] = "last",
    [F_LENGTH] = "length",
    [F_LIST] = "list",
    [F_LOWER] = "lower",
    [F_MAP] = "map",
    [F_MAX] = "max",
    [F_MIN] = "min",
    [F_REJECT] = "reject",
    [F_REJECTATTR] = "rejectattr",
    [F_REPLACE] = "replace",
    [F_REVERSE] = "reverse",
    [F_ROUND] = "round",
    [F_SAFE] = "safe",
    [F_SELECT] = "select",
    [F_SELECTATTR] = "selectattr",
    [F_SORT] = "sort",
    [F_STRING] = "string",
    [F_SUM] = "sum",
    [F_TITLE] = "title",
    [F_TOJSON] = "tojson",
    [F_TRIM] = "trim",
    [F_UNIQUE] = "unique",
    [F_UPPER] = "upper",
    [F_WORDCOUNT] = "wordcount",
};

int chat_find_name(const char *const *names, int n_names, const char *s, size_t n) {
    for (int k = 0; k < n_names; k++)
        if (names[k] && strlen(names[k]) == n && memcmp(names[k], s, n) == 0)
            return k;
    return -1;
}

int chat_filter_id(const char *s, size_t n) { return chat_find_name(filter_names, F_N, s, n); }
const char *chat_filter_name(int id) { return id >= 0 && id < F_N ? filter_names[id] : "?"; }
/* ---------------------------------------------------------------- filters */

/* item.attr.attr2 the way jinja2's make_attrgetter reads it (getitem,
 * integers for digit parts). */
static bool attr_path(chat_ctx *c, const chat_ast *at, const cv *item, const cv *path, cv *out) {
    if (path->type == CV_INT) {
        cv_list *l;
        if (item->type != CV_LIST && item->type != CV_STR) {
            *out = cv_undef(NULL);
            return true;
        }
        if (!cv_iterate(c, at, item, &l))
            return false;
        int64_t i = path->i < 0 ? path->i + (int64_t)l->n : path->i;
        *out = i >= 0 && (size_t)i < l->n ? l->v[i] : cv_undef(NULL);
        return true;
    }
    if (!chat_want_str(c, at, path, "attribute"))
        return false;
    cv cur = *item;
    for (size_t s = 0; s <= path->n;) {
        size_t e = s;
        while (e < path->n && path->s[e] != '.')
            e++;
        bool digits = e > s;
        int64_t idx = 0;
        for (size_t k = s; k < e && digits; k++) {
            digits = path->s[k] >= '0' && path->s[k] <= '9';
            idx = idx * 10 + (path->s[k] - '0');
            if (idx > (1 << 30))
                digits = false;
        }
        if (cur.type == CV_UNDEF)
            break;
        if (digits && cur.type == CV_LIST) {
            cur = (size_t)idx < cur.list->n ? cur.list->v[idx] : cv_undef(NULL);
        } else if (cur.type == CV_DICT) {
            const cv *v = cv_dict_get_str(cur.dict, path->s + s, e - s);
            if (v)
                cur = *v;
            else if (!chat_getattr(c, at, &cur, path->s + s, e - s, &cur))
                return false;
        } else if (!chat_getattr(c, at, &cur, path->s + s, e - s, &cur)) {
            return false;
        }
        s = e + 1;
    }
    *out = cur;
    return true;
}

/* select / reject / selectattr / rejectattr */
static bool select_items(chat_ctx *c, const chat_ast *at, const cv *v, const chat_args *a,
                         bool by_attr, bool keep, cv *out) {
    cv_list *items, *res;
    if (a->n_kw)
        return chat_fail(c, at, HR_ERR_INVALID, "select filters take no keyword arguments");
    if (!cv_iterate(c, at, v, &items))
        return false;
    if (!(res = cv_list_new(chat_ctx_arena(c), 0)))
        return chat_fail_mem(c, at);
    int first = by_attr ? 1 : 0;
    if (by_attr && a->n_pos < 1)
        return chat_fail(c, at, HR_ERR_INVALID, "selectattr/rejectattr need an attribute");
    int test = -1;
    if (a->n_pos > first) {
        if (!chat_want_str(c, at, &a->pos[first], "test name"))
            return false;
        test = chat_test_id(a->pos[first].s, a->pos[first].n);
        if (test < 0)
            return chat_fail(c, at, HR_ERR_UNSUPPORTED, "unknown test '%.*s'", (int)a->pos[first].n,
                             a->pos[first].s);
    }
    chat_args targs = {a->pos + first + 1, a->n_pos > first + 1 ? a->n_pos - first - 1 : 0, NULL,
                       NULL, 0};
    for (size_t k = 0; k < items->n; k++) {
        cv x = items->v[k];
        if (by_attr && !attr_path(c, at, &items->v[k], &a->pos[0], &x))
            return false;
        bool r;
        if (test >= 0) {
            if (!chat_apply_test(c, at, test, &x, &targs, &r))
                return false;
        } else {
            r = cv_truthy(&x);
        }
        if (r == keep && !cv_list_push(chat_ctx_arena(c), res, items->v[k]))
            return chat_fail_mem(c, at);
    }
    *out = cv_of_list(res, false);
    return true;
}

static bool do_tojson(chat_ctx *c, const chat_ast *at, const cv *v, const chat_args *a, cv *out) {
    static const char *const names[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
    if (!chat_check_args(c, at, a, 4, names, "tojson"))
        return false;
    const cv *ea = chat_arg(a, 0, "ensure_ascii"), *ind = chat_arg(a, 1, "indent"),
             *sep = chat_arg(a, 2, "separators"), *sk = chat_arg(a, 3, "sort_keys");
    chat_json_opts o = {
        .indent = -1, .ensure_ascii = ea && cv_truthy(ea), .sort_keys = sk && cv_truthy(sk)};
    if (ind && ind->type != CV_NONE) {
        int64_t n = 0;
        if (!chat_want_int(c, at, ind, "tojson indent", &n))
            return false;
        o.indent = n < 0 ? 0 : n > 64 ? 64 : (int)n;
    }
    o.item_sep = o.indent >= 0 ? "," : ", ";
    o.item_sep_n = strlen(o.item_sep);
    o.key_sep = ": ";
    o.key_sep_n = 2;
    if (sep && sep->type != CV_NONE) {
        if (sep->type != CV_LIST || sep->list->n != 2 || sep->list->v[0].type != CV_STR ||
            sep->list->v[1].type != CV_STR)
            return chat_fail(c, at, HR_ERR_INVALID, "tojson separators must be two strings");
        o.item_sep = sep->list->v[0].s;
        o.item_sep_n = sep->list->v[0].n;
        o.key_sep = sep->list->v[1].s;
        o.key_sep_n = sep->list->v[1].n;
    }
    chat_buf b;
    chat_buf_init(&b, chat_ctx_arena(c));
    return cv_tojson_into(c, at, v, &o, &b, 0) && chat_str_result(c, at, &b, out);
}

/* Python float(str): strips whitespace, accepts underscores between
 * digits, inf and nan. */
static bool parse_float(const cv *s, double *out) {
    cv t = chat_strip(s, NULL, 3);
    char tmp[128];
    size_t m = 0;
    if (!t.n || t.n >= sizeof tmp)
        return false;
    for (size_t k = 0; k < t.n; k++) {
        char ch = t.s[k];
        if (ch == '_') {
            if (k == 0 || k + 1 == t.n || !(t.s[k - 1] >= '0' && t.s[k - 1] <= '9') ||
                !(t.s[k + 1] >= '0' && t.s[k + 1] <= '9'))
                return false;
            continue;
        }
        if ((unsigned char)ch >= 0x80 || ch == 'x' || ch == 'X' || ch == 'p' || ch == 'P')
            return false; /* no hex floats, unlike strtod */
        tmp[m++] = ch;
    }
    tmp[m] = '\0';
    char *end;
    double d = chat_strtod(tmp, &end);
    if (*end != '\0')
        return false;
    *out = d;
    return true;
}

static bool parse_int(const cv *s, int64_t base, int64_t *out) {
    cv t = chat_strip(s, NULL, 3);
    size_t k = 0;
    bool neg = false;
    if (k < t.n && (t.s[k] == '+' || t.s[k] == '-'))
        neg = t.s[k++] == '-';
    if (k == t.n)
        return false;
    /* int('0x1A', 16) accepts the prefix of its base, and an underscore after it */
    bool prev_digit = false;
    if (k + 1 < t.n && t.s[k] == '0') {
        char p = (char)(t.s[k + 1] | 0x20);
        if ((base == 16 && p == 'x') || (base == 8 && p == 'o') || (base == 2 && p == 'b')) {
            k += 2;
            prev_digit = true;
            if (k == t.n)
                return false;
        }
    }
    uint64_t v = 0;
    bool any = false;
    for (; k < t.n; k++) {
        char ch = t.s[k];
        if (ch == '_' && prev_digit && k + 1 < t.n) {
            prev_digit = false;
            continue;
        }
        int d = ch >= '0' && ch <= '9'   ? ch - '0'
                : ch >= 'a' && ch <= 'z' ? ch - 'a' + 10
                : ch >= 'A' && ch <= 'Z' ? ch - 'A' + 10
                                         : 99;
        if (d >= base || v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base)
            return false;
        v = v * (uint64_t)base + (uint64_t)d;
        prev_digit = any = true;
    }
    if (!any || !prev_digit || v > (uint64_t)INT64_MAX + neg)
        return false;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

/* Merge sort of items by key (stable, as Python's sort). */
typedef struct {
    chat_ctx *c;
    const chat_ast *at;
    bool case_sensitive;
    bool failed;
} sort_ctx;

static int sort_cmp(sort_ctx *s, const cv *x, const cv *y) {
    if (s->failed)
        return 0;
    cv a = *x, b = *y;
    if (!s->case_sensitive && a.type == CV_STR && b.type == CV_STR) {
        if (!chat_change_case(s->c, s->at, &a, CHAT_CASE_LOWER, &a) ||
            !chat_change_case(s->c, s->at, &b, CHAT_CASE_LOWER, &b)) {
            s->failed = true;
            return 0;
        }
    }
    int cmp;
    if (!cv_compare(s->c, s->at, &a, &b, &cmp)) {
        s->failed = true;
        return 0;
    }
    return cmp == 2 ? 0 : cmp;
}

static void merge_sort(sort_ctx *s, cv *v, cv *keys, cv *tmp, cv *tmpk, size_t n) {
    if (n < 2 || s->failed)
        return;
    size_t h = n / 2;
    merge_sort(s, v, keys, tmp, tmpk, h);
    merge_sort(s, v + h, keys + h, tmp, tmpk, n - h);
    size_t i = 0, j = h, o = 0;
    while (i < h && j < n)
        if (sort_cmp(s, &keys[j], &keys[i]) < 0) {
            tmp[o] = v[j];
            tmpk[o++] = keys[j++];
        } else {
            tmp[o] = v[i];
            tmpk[o++] = keys[i++];
        }
    while (i < h) {
        tmp[o] = v[i];
        tmpk[o++] = keys[i++];
    }
    while (j < n) {
        tmp[o] = v[j];
        tmpk[o++] = keys[j++];
    }
    chat_copy(v, tmp, n * sizeof *v);
    chat_copy(keys, tmpk, n * sizeof *keys);
}

static bool sort_items(chat_ctx *c, const chat_ast *at, const cv_list *items, bool reverse,
                       bool case_sensitive, const cv *attribute, cv_list **out) {
    chat_arena *ar = chat_ctx_arena(c);
    size_t n = items->n;
    cv_list *l = cv_list_new(ar, n);
    cv *keys = chat_arena_alloc(ar, (n + 1) * sizeof *keys);
    cv *tmp = chat_arena_alloc(ar, (n + 1) * sizeof *tmp);
    cv *tmpk = chat_arena_alloc(ar, (n + 1) * sizeof *tmpk);
    if (!l || !keys || !tmp || !tmpk)
        return chat_fail_mem(c, at);
    for (size_t k = 0; k < n; k++) {
        l->v[k] = items->v[k];
        keys[k] = items->v[k];
        if (attribute && !attr_path(c, at, &items->v[k], attribute, &keys[k]))
            return false;
    }
    l->n = n;
    sort_ctx s = {c, at, case_sensitive, false};
    if (reverse) /* Python sorts reverse=True stably too: reverse, sort, reverse */
        for (size_t k = 0; k < n / 2; k++) {
            cv t = l->v[k], tk = keys[k];
            l->v[k] = l->v[n - 1 - k];
            keys[k] = keys[n - 1 - k];
            l->v[n - 1 - k] = t;
            keys[n - 1 - k] = tk;
        }
    merge_sort(&s, l->v, keys, tmp, tmpk, n);
    if (s.failed)
        return false;
    if (reverse)
        for (size_t k = 0; k < n / 2; k++) {
            cv t = l->v[k];
            l->v[k] = l->v[n - 1 - k];
            l->v[n - 1 - k] = t;
        }
    *out = l;
    return true;
}

static bool do_indent(chat_ctx *c, const chat_ast *at, const cv *s, const chat_args *a, cv *out) {
    static const char *const names[] = {"width", "first", "blank", NULL};
    if (!chat_check_args(c, at, a, 3, names, "indent"))
        return false;
    const cv *w = chat_arg(a, 0, "width"), *fi = chat_arg(a, 1, "first"),
             *bl = chat_arg(a, 2, "blank");
    chat_buf ind;
    chat_buf_init(&ind, chat_ctx_arena(c));
    if (w && w->type == CV_STR) {
        chat_buf_put(&ind, w->s, w->n);
    } else {
        int64_t n = 4;
        if (w && !chat_want_int(c, at, w, "indent", &n))
            return false;
        for (int64_t k = 0; k < n && k < 1024; k++)
            chat_buf_putc(&ind, ' ');
    }
    if (!chat_buf_put(&ind, "", 0))
        return chat_fail_mem(c, at);
    /* jinja2 appends "\n" before splitlines (so a final empty line counts) */
    chat_buf src;
    chat_buf_init(&src, chat_ctx_arena(c));
    chat_buf_put(&src, s->s, s->n);
    if (!chat_buf_put(&src, "\n", 1))
        return chat_fail_mem(c, at);
    cv_list *lines;
    if (!chat_splitlines(c, at, src.p, src.n, false, &lines))
        return false;
    chat_buf b;
    chat_buf_init(&b, chat_ctx_arena(c));
    bool blank = bl && cv_truthy(bl);
    for (size_t k = 0; k < lines->n; k++) {
        const cv *ln = &lines->v[k];
        if (k)
            chat_buf_putc(&b, '\n');
        if (k && (blank || ln->n))
            chat_buf_put(&b, ind.p, ind.n);
        chat_buf_put(&b, ln->s, ln->n);
    }
    if (fi && cv_truthy(fi)) {
        chat_buf f;
        chat_buf_init(&f, chat_ctx_arena(c));
        chat_buf_put(&f, ind.p, ind.n);
        chat_buf_put(&f, b.p ? b.p : "", b.n);
        return chat_str_result(c, at, &f, out);
    }
    return chat_str_result(c, at, &b, out);
}

bool chat_apply_filter(chat_ctx *c, const chat_ast *at, int id, const cv *v, const chat_args *a,
                       cv *out) {
    chat_arena *ar = chat_ctx_arena(c);
    const char *name = filter_names[id];
    cv s;
    cv_list *items;
    /* these call int(), float(), abs(), round() or += on the value, which
     * jinja2's Undefined refuses */
    if (v->type == CV_UNDEF &&
        (id == F_ABS || id == F_FLOAT || id == F_INT || id == F_ROUND || id == F_INDENT))
        return chat_undefined_error(c, at, v);
    switch (id) {
    case F_ABS:
        if (!chat_check_args(c, at, a, 0, NULL, name))
            return false;
        if (v->type == CV_FLOAT) {
            *out = cv_float(fabs(v->f));
            return true;
        }
        if (v->type == CV_INT || v->type == CV_BOOL) {
            int64_t i = v->type == CV_INT ? v->i : v->b;
            if (i == INT64_MIN)
                return chat_fail(c, at, HR_ERR_UNSUPPORTED, "integer overflow");
            *out = cv_int(i < 0 ? -i : i);
            return true;
        }
        return chat_fail(c, at, HR_ERR_INVALID, "bad operand type for abs(): '%s'",
                         cv_type_name(v));
    case F_ATTR: {
        const cv *nm = chat_arg(a, 0, NULL);
        if (!chat_check_args(c, at, a, 1, NULL, name) || !nm || !chat_want_str(c, at, nm, name))
            return nm ? false : chat_fail(c, at, HR_ERR_INVALID, "attr takes a name");
        if (v->type == CV_DICT || v->type == CV_NS) { /* attributes only, not items */
            *out = cv_undef(NULL);
            return true;
        }
        return chat_getattr(c, at, v, nm->s, nm->n, out);
    }
    case F_CAPITALIZE:
    case F_LOWER:
    case F_UPPER:
    case F_TITLE:
        if (!chat_check_args(c, at, a, 0, NULL, name) || !cv_to_string(c, at, v, &s))
            return false;
        if (id == F_TITLE)
            return chat_jinja_title(c, at, &s, out);
        return chat_change_case(c, at, &s,
                                id == F_UPPER   ? CHAT_CASE_UPPER
                                : id == F_LOWER ? CHAT_CASE_LOWER
                                                : CHAT_CASE_CAPITALIZE,
                                out);
    case F_COUNT:
    case F_LENGTH: {
        int64_t n;
        if (!chat_check_args(c, at, a, 0, NULL, name) || !cv_length(c, at, v, &n))
            return false;
        *out = cv_int(n);
        return true;
    }
    case F_D:
    case F_DEFAULT: {
        static const char *const names[] = {"default_value", "boolean", NULL};
        if (!chat_check_args(c, at, a, 2, names, name))
            return false;
        const cv *def = chat_arg(a, 0, "default_value"), *boolean = chat_arg(a, 1, "boolean");
        bool use = v->type == CV_UNDEF || (boolean && cv_truthy(boolean) && !cv_truthy(v));
        *out = use ? (def ? *def : cv_str("", 0)) : *v;
        return true;
    }
    case F_FIRST:
    case F_LAST:
        if (!chat_check_args(c, at, a, 0, NULL, name) || !cv_iterate(c, at, v, &items))
            return false;
        *out = items->n ? items->v[id == F_FIRST ? 0 : items->n - 1] : cv_undef(NULL);
        return true;
    case F_FLOAT: {
        static const char *const names[] = {"default", NULL};
        if (!chat_check_args(c, at, a, 1, names, name))
            return false;
        const cv *def = chat_arg(a, 0, "default");
        double d;
        if (v->type == CV_FLOAT)
            d = v->f;
        else if (v->type == CV_INT || v->type == CV_BOOL)
            d = v->type == CV_INT ? (double)v->i : v->b;
        else if (!(v->type == CV_STR && parse_float(v, &d))) {
            *out = def ? *def : cv_float(0.0);
            return true;
        }
        *out = cv_float(d);
        return true;
    }
    case F_INT: {
        static const char *const names[] = {"default", "base", NULL};
        if (!chat_check_args(c, at, a, 2, names, name))
            return false;
        const cv *def = chat_arg(a, 0, "default"), *base = chat_arg(a, 1, "base");
        int64_t b = 10, i;
        if (base && !chat_want_int(c, at, base, name, &b))
            return false;
        if (b < 2 || b > 36)
            return chat_fail(c, at, HR_ERR_UNSUPPORTED, "int base must be 2..36");
        if (v->type == CV_INT || v->type == CV_BOOL) {
            *out = cv_int(v->type == CV_INT ? v->i : v->b);
            return true;
        }
        if (v->type == CV_STR && parse_int(v, b, &i)) {
            *out = cv_int(i);
            return true;
        }
        double d = NAN;
        if (v->type == CV_FLOAT)
            d = v->f;
        else if (v->type == CV_STR && !parse_float(v, &d))
            d = NAN;
        if (isnan(d)) { /* int(nan) and bad strings: ValueError, the default */
            *out = def ? *def : cv_int(0);
            return true;
        }
        if (isinf(d)) /* OverflowError, which jinja2 lets through */
            return chat_fail(c, at, HR_ERR_INVALID, "int: cannot convert float infinity");
        if (fabs(d) >= 9223372036854775808.0)
            return chat_fail(c, at, HR_ERR_UNSUPPORTED,
                             "int: %g is past 64 bits (Python's integers are unbounded)", d);
        *out = cv_int((int64_t)d);
        return true;
    }
    case F_INDENT: /* jinja2 appends "\n" to the value: strings only */
        if (v->type != CV_STR)
            return chat_fail(c, at, HR_ERR_INVALID, "indent: expected a string, got %s",
                             cv_type_name(v));
        return do_indent(c, at, v, a, out);
    case F_ITEMS:
        if (!chat_check_args(c, at, a, 0, NULL, name))
            return false;
        if (v->type == CV_UNDEF) {
            cv_list *l = cv_list_new(ar, 0);
            if (!l)
                return chat_fail_mem(c, at);
            *out = cv_of_list(l, false);
            return true;
        }
        if (v->type != CV_DICT)
            return chat_fail(c, at, HR_ERR_INVALID,
                             "items: can only get item pairs from a "
                             "mapping, not %s",
                             cv_type_name(v));
        return chat_dict_items(c, at, v->dict, 0, out);
    case F_JOIN: {
        static const char *const names[] = {"d", "attribute", NULL};
        if (!chat_check_args(c, at, a, 2, names, name) || !cv_iterate(c, at, v, &items))
            return false;
        const cv *sep = chat_arg(a, 0, "d"), *attr = chat_arg(a, 1, "attribute");
        cv sep_s = cv_str("", 0);
        if (sep && !cv_to_string(c, at, sep, &sep_s))
            return false;
        chat_buf b;
        chat_buf_init(&b, ar);
        for (size_t k = 0; k < items->n; k++) {
            cv x = items->v[k];
            if (attr && !attr_path(c, at, &items->v[k], attr, &x))
                return false;
            if (k)
                chat_buf_put(&b, sep_s.s, sep_s.n);
            if (!cv_str_into(c, at, &x, &b))
                return false;
        }
        return chat_str_result(c, at, &b, out);
    }
    case F_LIST:
        if (!chat_check_args(c, at, a, 0, NULL, name) || !cv_iterate(c, at, v, &items))
            return false;
        *out = cv_of_list(items, false);
        if (v->type == CV_LIST) { /* a copy, never the same list */
            cv_list *l = cv_list_new(ar, items->n);
            if (!l)
                return chat_fail_mem(c, at);
            chat_copy(l->v, items->v, items->n * sizeof *l->v);
            l->n = items->n;
            *out = cv_of_list(l, false);
        }
        return true;
    case F_MAP: {
        if (!cv_iterate(c, at, v, &items))
            return false;
        cv_list *l = cv_list_new(ar, items->n);
        if (!l)
            return chat_fail_mem(c, at);
        const cv *attr = chat_arg(a, -1, "attribute");
        if (attr) {
            static const char *const names[] = {"attribute", "default", NULL};
            if (!chat_check_args(c, at, a, 0, names, name))
                return false;
            const cv *def = chat_arg(a, -1, "default");
            for (size_t k = 0; k < items->n; k++) {
                cv x;
                if (!attr_path(c, at, &items->v[k], attr, &x))
                    return false;
                l->v[l->n++] = x.type == CV_UNDEF && def ? *def : x;
            }
        } else {
            if (a->n_pos < 1 || !chat_want_str(c, at, &a->pos[0], "map"))
                return a->n_pos < 1 ? chat_fail(c, at, HR_ERR_INVALID,
                                                "map needs a filter name or "
                                                "attribute=")
                                    : false;
            int f = chat_filter_id(a->pos[0].s, a->pos[0].n);
            if (f < 0)
                return chat_fail(c, at, HR_ERR_UNSUPPORTED, "map: unknown filter '%.*s'",
                                 (int)a->pos[0].n, a->pos[0].s);
            chat_args fa = {a->pos + 1, a->n_pos - 1, a->kw_names, a->kw, a->n_kw};
            for (size_t k = 0; k < items->n; k++)
                if (!chat_apply_filter(c, at, f, &items->v[k], &fa, &l->v[l->n++]))
                    return false;
        }
        *out = cv_of_list(l, false);
        return true;
    }
    case F_MAX:
    case F_MIN: {
        static const char *const names[] = {"case_sensitive", "attribute", NULL};
        if (!chat_check_args(c, at, a, 2, names, name) || !cv_iterate(c, at, v, &items))
            return false;
        const cv *cs = chat_arg(a, 0, "case_sensitive"), *attr = chat_arg(a, 1, "attribute");
        if (!items->n) {
            *out = cv_undef(NULL);
            return true;
        }
        cv_list *sorted;
        if (!sort_items(c, at, items, false, cs && cv_truthy(cs), attr, &sorted))
            return false;
        /* Python's max keeps the first of equal maxima: the sort is stable */
        if (id == F_MIN) {
            *out = sorted->v[0];
        } else {
            size_t k = sorted->n - 1;
            sort_ctx sc = {c, at, cs && cv_truthy(cs), false};
            while (k > 0) {
                cv ka = sorted->v[k - 1], kb = sorted->v[k];
                if (attr && (!attr_path(c, at, &sorted->v[k - 1], attr, &ka) ||
                             !attr_path(c, at, &sorted->v[k], attr, &kb)))
                    return false;
                if (sort_cmp(&sc, &ka, &kb) != 0)
                    break;
                k--;
            }
            if (sc.failed)
                return false;
            *out = sorted->v[k];
        }
        return true;
    }
    case F_REJECT:
    case F_SELECT: return select_items(c, at, v, a, false, id == F_SELECT, out);
    case F_REJECTATTR:
    case F_SELECTATTR: return select_items(c, at, v, a, true, id == F_SELECTATTR, out);
    case F_REPLACE: {
        static const char *const names[] = {"old", "new", "count", NULL};
        if (!chat_check_args(c, at, a, 3, names, name) || !cv_to_string(c, at, v, &s))
            return false;
        const cv *old = chat_arg(a, 0, "old"), *rep = chat_arg(a, 1, "new"),
                 *cnt = chat_arg(a, 2, "count");
        cv old_s, rep_s;
        int64_t count = -1;
        if (!old || !rep)
            return chat_fail(c, at, HR_ERR_INVALID, "replace takes old and new strings");
        if (!cv_to_string(c, at, old, &old_s) || !cv_to_string(c, at, rep, &rep_s) ||
            (cnt && cnt->type != CV_NONE && !chat_want_int(c, at, cnt, name, &count)))
            return false;
        return chat_replace(c, at, &s, &old_s, &rep_s, count, out);
    }
    case F_REVERSE:
        if (!chat_check_args(c, at, a, 0, NULL, name))
            return false;
        if (v->type == CV_STR) {
            chat_buf b;
            chat_buf_init(&b, ar);
            for (size_t e = v->n; e > 0;) {
                size_t p = e - 1;
                while (p > 0 && ((unsigned char)v->s[p] & 0xC0) == 0x80)
                    p--;
                chat_buf_put(&b, v->s + p, e - p);
                e = p;
            }
            return chat_str_result(c, at, &b, out);
        }
        if (!cv_iterate(c, at, v, &items))
            return false;
        {
            cv_list *l = cv_list_new(ar, items->n);
            if (!l)
                return chat_fail_mem(c, at);
            for (size_t k = items->n; k-- > 0;)
                l->v[l->n++] = items->v[k];
            *out = cv_of_list(l, false);
        }
        return true;
    case F_ROUND: {
        static const char *const names[] = {"precision", "method", NULL};
        if (!chat_check_args(c, at, a, 2, names, name))
            return false;
        const cv *pr = chat_arg(a, 0, "precision"), *me = chat_arg(a, 1, "method");
        int64_t p = 0;
        if (pr && !chat_want_int(c, at, pr, name, &p))
            return false;
        if (v->type != CV_FLOAT && v->type != CV_INT && v->type != CV_BOOL)
            return chat_fail(c, at, HR_ERR_INVALID, "round: expected a number, got %s",
                             cv_type_name(v));
        double x = v->type == CV_FLOAT ? v->f : v->type == CV_INT ? (double)v->i : v->b;
        double scale = pow(10.0, (double)(p < -300 ? -300 : p > 300 ? 300 : p));
        if (!me || (me->type == CV_STR && me->n == 6 && !memcmp(me->s, "common", 6))) {
            if (v->type != CV_FLOAT) { /* Python's round of an int stays an int */
                *out = cv_int(v->type == CV_INT ? v->i : v->b);
                return true;
            }
            *out = cv_float(nearbyint(x * scale) / scale); /* half to even, as Python */
        } else if (me->type == CV_STR && me->n == 4 && !memcmp(me->s, "ceil", 4)) {
            *out = cv_float(ceil(x * scale) / scale);
        } else if (me->type == CV_STR && me->n == 5 && !memcmp(me->s, "floor", 5)) {
            *out = cv_float(floor(x * scale) / scale);
        } else {
            return chat_fail(c, at, HR_ERR_INVALID, "round: method must be common, ceil or floor");
        }
        return true;
    }
    case F_SAFE: *out = *v; return chat_check_args(c, at, a, 0, NULL, name);
    case F_SORT: {
        static const char *const names[] = {"reverse", "case_sensitive", "attribute", NULL};
        if (!chat_check_args(c, at, a, 3, names, name) || !cv_iterate(c, at, v, &items))
            return false;
        const cv *rev = chat_arg(a, 0, "reverse"), *cs = chat_arg(a, 1, "case_sensitive"),
                 *attr = chat_arg(a, 2, "attribute");
        cv_list *l;
        if (!sort_items(c, at, items, rev && cv_truthy(rev), cs && cv_truthy(cs), attr, &l))
            return false;
        *out = cv_of_list(l, false);
        return true;
    }
    case F_STRING: return chat_check_args(c, at, a, 0, NULL, name) && cv_to_string(c, at, v, out);
    case F_SUM: {
        static const char *const names[] = {"attribute", "start", NULL};
        if (!chat_check_args(c, at, a, 2, names, name) || !cv_iterate(c, at, v, &items))
            return false;
        const cv *attr = chat_arg(a, 0, "attribute"), *start = chat_arg(a, 1, "start");
        cv acc = start ? *start : cv_int(0);
        for (size_t k = 0; k < items->n; k++) {
            cv x = items->v[k];
            if (attr && !attr_path(c, at, &items->v[k], attr, &x))
                return false;
            bool fl = acc.type == CV_FLOAT || x.type == CV_FLOAT;
            if ((acc.type != CV_INT && acc.type != CV_FLOAT && acc.type != CV_BOOL) ||
                (x.type != CV_INT && x.type != CV_FLOAT && x.type != CV_BOOL))
                return chat_fail(c, at, HR_ERR_INVALID, "sum: unsupported operand types %s and %s",
                                 cv_type_name(&acc), cv_type_name(&x));
            if (fl) {
                double fa = acc.type == CV_FLOAT ? acc.f
                            : acc.type == CV_INT ? (double)acc.i
                                                 : acc.b;
                double fx = x.type == CV_FLOAT ? x.f : x.type == CV_INT ? (double)x.i : x.b;
                acc = cv_float(fa + fx);
            } else {
                int64_t r, ia = acc.type == CV_INT ? acc.i : acc.b,
                           ix = x.type == CV_INT ? x.i : x.b;
                if (__builtin_add_overflow(ia, ix, &r))
                    return chat_fail(c, at, HR_ERR_UNSUPPORTED, "integer overflow");
                acc = cv_int(r);
            }
        }
        *out = acc;
        return true;
    }
    case F_TOJSON: return do_tojson(c, at, v, a, out);
    case F_TRIM: {
        const cv *chars;
        if (!chat_strip_args(c, at, a, name, &chars) || !cv_to_string(c, at, v, &s))
            return false;
        *out = chat_strip(&s, chars, 3);
        return true;
    }
    case F_UNIQUE: {
        static const char *const names[] = {"case_sensitive", "attribute", NULL};
        if (!chat_check_args(c, at, a, 2, names, name) || !cv_iterate(c, at, v, &items))
            return false;
        const cv *cs = chat_arg(a, 0, "case_sensitive"), *attr = chat_arg(a, 1, "attribute");
        cv_list *l = cv_list_new(ar, items->n), *keys = cv_list_new(ar, items->n);
        if (!l || !keys)
            return chat_fail_mem(c, at);
        for (size_t k = 0; k < items->n; k++) {
            cv key = items->v[k];
            if (attr && !attr_path(c, at, &items->v[k], attr, &key))
                return false;
            if (!(cs && cv_truthy(cs)) && key.type == CV_STR &&
                !chat_change_case(c, at, &key, CHAT_CASE_LOWER, &key))
                return false;
            bool seen = false;
            for (size_t j = 0; j < keys->n && !seen; j++)
                if (!cv_equal(c, at, &keys->v[j], &key, &seen))
                    return false;
            if (!seen) {
                keys->v[keys->n++] = key;
                l->v[l->n++] = items->v[k];
            }
        }
        *out = cv_of_list(l, false);
        return true;
    }
    case F_WORDCOUNT: {
        if (!chat_check_args(c, at, a, 0, NULL, name) || !cv_to_string(c, at, v, &s))
            return false;
        int64_t words = 0;
        bool in_word = false;
        for (size_t i = 0; i < s.n;) {
            uint32_t cp;
            i += chat_utf8_next(s.s + i, s.n - i, &cp);
            bool w = (cp >= '0' && cp <= '9') || chat_ascii_cased(cp) || cp == '_' ||
                     (cp >= 0xC0 && !chat_py_space(cp));
            words += w && !in_word;
            in_word = w;
        }
        *out = cv_int(words);
        return true;
    }
    default: break;
    }
    return chat_fail(c, at, HR_ERR_UNSUPPORTED, "filter '%s' is not supported", name);
}
