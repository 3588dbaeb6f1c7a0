/*
 * builtins.c — what a template reaches through names and dots: attributes
 * (jinja2 tries the attribute, then the item: `message.role` is the key,
 * `message.items` the method), the methods of dicts, lists and the loop
 * object, call arguments, and the globals transformers defines (range,
 * namespace, dict, raise_exception, strftime_now). Mutating methods
 * (append, update, pop...) are refused, as transformers'
 * ImmutableSandboxedEnvironment refuses them.
 */
#include "chat/chat_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

const char *const chat_fn_names[CHAT_FN_COUNT] = {
    [CHAT_FN_RANGE] = "range",
    [CHAT_FN_NAMESPACE] = "namespace",
    [CHAT_FN_DICT] = "dict",
    [CHAT_FN_RAISE] = "raise_exception",
    [CHAT_FN_STRFTIME] = "strftime_now",
};

/* ---------------------------------------------------------------- arguments */

bool chat_name_is(chat_name nm, const char *s) {
    return nm.n == strlen(s) && memcmp(nm.s, s, nm.n) == 0;
}

/* Positional argument idx or keyword name (NULL name: positional only). */
const cv *chat_arg(const chat_args *a, int idx, const char *name) {
    if (idx >= 0 && idx < a->n_pos)
        return &a->pos[idx];
    if (name)
        for (int k = 0; k < a->n_kw; k++)
            if (chat_name_is(a->kw_names[k], name))
                return &a->kw[k];
    return NULL;
}

/* At most max_pos positional arguments, and keywords only from names. */
bool chat_check_args(chat_ctx *c, const chat_ast *at, const chat_args *a, int max_pos,
                     const char *const *names, const char *what) {
    if (a->n_pos > max_pos)
        return chat_fail(c, at, HR_ERR_INVALID, "%s takes at most %d argument(s), got %d", what,
                         max_pos, a->n_pos);
    for (int k = 0; k < a->n_kw; k++) {
        bool known = false;
        for (int j = 0; names && names[j] && !known; j++)
            known = chat_name_is(a->kw_names[k], names[j]);
        if (!known)
            return chat_fail(c, at, HR_ERR_INVALID, "%s got an unexpected keyword argument '%.*s'",
                             what, (int)a->kw_names[k].n, a->kw_names[k].s);
    }
    return true;
}

bool chat_want_str(chat_ctx *c, const chat_ast *at, const cv *v, const char *what) {
    if (v->type == CV_STR)
        return true;
    return chat_fail(c, at, HR_ERR_INVALID, "%s: expected a string, got %s", what, cv_type_name(v));
}

bool chat_want_int(chat_ctx *c, const chat_ast *at, const cv *v, const char *what, int64_t *out) {
    if (v->type == CV_INT || v->type == CV_BOOL) {
        *out = v->type == CV_INT ? v->i : v->b;
        return true;
    }
    return chat_fail(c, at, HR_ERR_INVALID, "%s: expected an integer, got %s", what,
                     cv_type_name(v));
}

bool chat_str_result(chat_ctx *c, const chat_ast *at, chat_buf *b, cv *out) {
    if (!chat_buf_put(b, "", 0))
        return chat_fail_mem(c, at);
    *out = cv_str(b->p, b->n);
    return true;
}

/* ---------------------------------------------------------------- attributes */

static const char *const str_methods[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith", "upper",
    "lower", "title", "capitalize", "swapcase", "replace", "find", "rfind", "index", "count",
    "join", "isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper",
    /* Python has these; calling them is refused as unsupported */
    "format", "format_map", "center", "ljust", "rjust", "zfill", "encode", "partition",
    "rpartition", "expandtabs", "casefold", "isnumeric", "isdecimal", "isidentifier", "isprintable",
    "istitle", "removeprefix", "removesuffix", "rindex", "translate", NULL};
static const char *const dict_methods[] = {"items",      "keys",  "values",  "get",
                                           "copy",       "pop",   "popitem", "update",
                                           "setdefault", "clear", NULL};
static const char *const list_methods[] = {"index",   "count",  "copy",  "append",
                                           "extend",  "insert", "pop",   "remove",
                                           "reverse", "sort",   "clear", NULL};

static bool in_names(const char *const *names, const char *s, size_t n) {
    for (int k = 0; names[k]; k++)
        if (strlen(names[k]) == n && memcmp(names[k], s, n) == 0)
            return true;
    return false;
}

static bool method(chat_ctx *c, const chat_ast *at, const cv *obj, const char *s, size_t n,
                   cv *out) {
    cv *self = chat_arena_alloc(chat_ctx_arena(c), sizeof *self);
    if (!self)
        return chat_fail_mem(c, at);
    *self = *obj;
    cv m = {.type = CV_METHOD};
    m.s = s;
    m.n = n;
    m.self = self;
    *out = m;
    return true;
}

static cv undef_attr(const char *s, size_t n) {
    cv u = {.type = CV_UNDEF};
    u.s = s;
    u.n = n;
    return u;
}

static bool loop_attr(chat_ctx *c, const chat_ast *at, const cv *obj, const char *s, size_t n,
                      cv *out) {
    const cv_loop *L = obj->loop;
    size_t len = L->items->n, i = L->i;
    chat_name nm = {s, n};
    if (chat_name_is(nm, "index"))
        *out = cv_int((int64_t)i + 1);
    else if (chat_name_is(nm, "index0"))
        *out = cv_int((int64_t)i);
    else if (chat_name_is(nm, "revindex"))
        *out = cv_int((int64_t)(len - i));
    else if (chat_name_is(nm, "revindex0"))
        *out = cv_int((int64_t)(len - i - 1));
    else if (chat_name_is(nm, "first"))
        *out = cv_bool(i == 0);
    else if (chat_name_is(nm, "last"))
        *out = cv_bool(i + 1 == len);
    else if (chat_name_is(nm, "length"))
        *out = cv_int((int64_t)len);
    else if (chat_name_is(nm, "depth"))
        *out = cv_int(1);
    else if (chat_name_is(nm, "depth0"))
        *out = cv_int(0);
    else if (chat_name_is(nm, "previtem"))
        *out = i > 0 ? L->items->v[i - 1] : undef_attr(s, n);
    else if (chat_name_is(nm, "nextitem"))
        *out = i + 1 < len ? L->items->v[i + 1] : undef_attr(s, n);
    else if (chat_name_is(nm, "cycle") || chat_name_is(nm, "changed"))
        return method(c, at, obj, s, n, out);
    else
        *out = undef_attr(s, n);
    return true;
}

bool chat_getattr(chat_ctx *c, const chat_ast *at, const cv *obj, const char *s, size_t n,
                  cv *out) {
    switch ((cv_type)obj->type) {
    case CV_DICT: {
        /* jinja2 tries the attribute first: d.items is the method */
        if (in_names(dict_methods, s, n))
            return method(c, at, obj, s, n, out);
        const cv *v = cv_dict_get_str(obj->dict, s, n);
        *out = v ? *v : undef_attr(s, n);
        return true;
    }
    case CV_NS: {
        const cv *v = cv_dict_get_str(obj->dict, s, n);
        *out = v ? *v : undef_attr(s, n);
        return true;
    }
    case CV_STR:
        if (in_names(str_methods, s, n))
            return method(c, at, obj, s, n, out);
        break;
    case CV_LIST:
        if (!(obj->flags & CV_F_TUPLE)
                ? in_names(list_methods, s, n)
                : (n == 5 && !memcmp(s, "index", 5)) || (n == 5 && !memcmp(s, "count", 5)))
            return method(c, at, obj, s, n, out);
        break;
    case CV_LOOP: return loop_attr(c, at, obj, s, n, out);
    default: break;
    }
    *out = undef_attr(s, n);
    return true;
}

bool chat_dict_items(chat_ctx *c, const chat_ast *at, const cv_dict *d, int what, cv *out) {
    chat_arena *ar = chat_ctx_arena(c);
    cv_list *l = cv_list_new(ar, d->n);
    if (!l)
        return chat_fail_mem(c, at);
    for (size_t k = 0; k < d->n; k++) {
        if (what == 0) {
            cv_list *pair = cv_list_new(ar, 2);
            if (!pair)
                return chat_fail_mem(c, at);
            pair->v[0] = d->keys[k];
            pair->v[1] = d->vals[k];
            pair->n = 2;
            l->v[l->n++] = cv_of_list(pair, true);
        } else {
            l->v[l->n++] = what == 1 ? d->keys[k] : d->vals[k];
        }
    }
    *out = cv_of_list(l, false);
    return true;
}

bool chat_call_method(chat_ctx *c, const chat_ast *at, const cv *self, const char *s, size_t n,
                      const chat_args *a, cv *out) {
    chat_name m = {s, n};
    switch ((cv_type)self->type) {
    case CV_STR: return chat_str_method(c, at, self, m, a, out);
    case CV_DICT:
        if (chat_name_is(m, "items") || chat_name_is(m, "keys") || chat_name_is(m, "values"))
            return chat_no_args(c, at, a, "this method") &&
                   chat_dict_items(c, at, self->dict,
                                   chat_name_is(m, "items")  ? 0
                                   : chat_name_is(m, "keys") ? 1
                                                             : 2,
                                   out);
        if (chat_name_is(m, "get")) {
            if (!chat_check_args(c, at, a, 2, NULL, "get()"))
                return false;
            const cv *key = chat_arg(a, 0, NULL), *def = chat_arg(a, 1, NULL);
            if (!key)
                return chat_fail(c, at, HR_ERR_INVALID, "get() takes at least one argument");
            const cv *v = cv_dict_get(self->dict, key);
            *out = v ? *v : def ? *def : cv_none();
            return true;
        }
        if (chat_name_is(m, "copy")) {
            cv_dict *d = cv_dict_new(chat_ctx_arena(c), self->dict->n);
            if (!d)
                return chat_fail_mem(c, at);
            chat_copy(d->keys, self->dict->keys, self->dict->n * sizeof *d->keys);
            chat_copy(d->vals, self->dict->vals, self->dict->n * sizeof *d->vals);
            d->n = self->dict->n;
            *out = cv_of_dict(d);
            return true;
        }
        break;
    case CV_LIST:
        if (chat_name_is(m, "index") || chat_name_is(m, "count")) {
            const cv *x = chat_arg(a, 0, NULL);
            if (!chat_check_args(c, at, a, 1, NULL, "this method") || !x)
                return x ? false : chat_fail(c, at, HR_ERR_INVALID, "takes one argument");
            int64_t count = 0;
            for (size_t k = 0; k < self->list->n; k++) {
                bool eq;
                if (!cv_equal(c, at, &self->list->v[k], x, &eq))
                    return false;
                if (eq && chat_name_is(m, "index")) {
                    *out = cv_int((int64_t)k);
                    return true;
                }
                count += eq;
            }
            if (chat_name_is(m, "index"))
                return chat_fail(c, at, HR_ERR_INVALID, "value is not in list");
            *out = cv_int(count);
            return true;
        }
        if (chat_name_is(m, "copy")) {
            cv_list *l = cv_list_new(chat_ctx_arena(c), self->list->n);
            if (!l)
                return chat_fail_mem(c, at);
            chat_copy(l->v, self->list->v, self->list->n * sizeof *l->v);
            l->n = self->list->n;
            *out = cv_of_list(l, false);
            return true;
        }
        break;
    case CV_LOOP:
        if (chat_name_is(m, "cycle")) {
            if (a->n_kw || !a->n_pos)
                return chat_fail(c, at, HR_ERR_INVALID,
                                 "loop.cycle() takes values to cycle through");
            *out = a->pos[self->loop->i % (size_t)a->n_pos];
            return true;
        }
        return chat_fail(c, at, HR_ERR_UNSUPPORTED, "loop.%.*s() is not supported", (int)n, s);
    default: break;
    }
    return chat_fail(c, at, HR_ERR_INVALID,
                     "%s.%.*s() is not allowed: templates cannot change "
                     "values (transformers' sandbox refuses it too)",
                     cv_type_name(self), (int)n, s);
}

/* ---------------------------------------------------------------- globals */

static bool kw_into_dict(chat_ctx *c, const chat_ast *at, const chat_args *a, cv_dict *d,
                         bool namespace) {
    for (int k = 0; k < a->n_kw; k++) {
        if (namespace && a->kw_names[k].n && a->kw_names[k].s[0] == '_')
            return chat_fail(c, at, HR_ERR_INVALID,
                             "namespace attributes cannot start with '_' (transformers)");
        if (!cv_dict_set(c, d, cv_str(a->kw_names[k].s, a->kw_names[k].n), a->kw[k]))
            return false;
    }
    return true;
}

/* dict(mapping) / dict(pairs) / namespace(mapping) initial contents. */
static bool init_dict(chat_ctx *c, const chat_ast *at, const cv *src, cv_dict *d) {
    if (src->type == CV_DICT || src->type == CV_NS) {
        for (size_t k = 0; k < src->dict->n; k++)
            if (!cv_dict_set(c, d, src->dict->keys[k], src->dict->vals[k]))
                return false;
        return true;
    }
    cv_list *items;
    if (!cv_iterate(c, at, src, &items))
        return false;
    for (size_t k = 0; k < items->n; k++) {
        const cv *p = &items->v[k];
        if (p->type != CV_LIST || p->list->n != 2)
            return chat_fail(c, at, HR_ERR_INVALID,
                             "dictionary update sequence element #%zu "
                             "is not a pair",
                             k);
        if (!cv_dict_set(c, d, p->list->v[0], p->list->v[1]))
            return false;
    }
    return true;
}

/* strftime with the C locale's names (Python's on Linux), a fixed subset. */
static bool strftime_now(chat_ctx *c, const chat_ast *at, const cv *fmt, cv *out) {
    static const char *const days[] = {"Sunday",   "Monday", "Tuesday", "Wednesday",
                                       "Thursday", "Friday", "Saturday"};
    static const char *const months[] = {"January",   "February", "March",    "April",
                                         "May",       "June",     "July",     "August",
                                         "September", "October",  "November", "December"};
    time_t t = (time_t)chat_ctx_now(c);
    struct tm tm;
    bool ok = chat_ctx_now(c) ? gmtime_r(&t, &tm) != NULL
                              : (t = time(NULL), localtime_r(&t, &tm) != NULL);
    if (!ok)
        return chat_fail(c, at, HR_ERR_INVALID, "strftime_now: the clock cannot be read");
    chat_buf b;
    chat_buf_init(&b, chat_ctx_arena(c));
    for (size_t i = 0; i < fmt->n; i++) {
        if (fmt->s[i] != '%') {
            chat_buf_putc(&b, fmt->s[i]);
            continue;
        }
        bool no_pad = i + 1 < fmt->n && fmt->s[i + 1] == '-'; /* glibc's %-d */
        if (no_pad)
            i++;
        if (i + 1 >= fmt->n)
            return chat_fail(c, at, HR_ERR_INVALID, "strftime_now: format ends with '%%'");
        char d = fmt->s[++i];
        int num = -1, width = 2;
        switch (d) {
        case 'a': chat_buf_put(&b, days[tm.tm_wday], 3); break;
        case 'A': chat_buf_puts(&b, days[tm.tm_wday]); break;
        case 'b':
        case 'h': chat_buf_put(&b, months[tm.tm_mon], 3); break;
        case 'B': chat_buf_puts(&b, months[tm.tm_mon]); break;
        case 'd': num = tm.tm_mday; break;
        case 'e': chat_buf_printf(&b, no_pad ? "%d" : "%2d", tm.tm_mday); break;
        case 'H': num = tm.tm_hour; break;
        case 'I': num = tm.tm_hour % 12 ? tm.tm_hour % 12 : 12; break;
        case 'j':
            num = tm.tm_yday + 1;
            width = 3;
            break;
        case 'm': num = tm.tm_mon + 1; break;
        case 'M': num = tm.tm_min; break;
        case 'S': num = tm.tm_sec; break;
        case 'p': chat_buf_puts(&b, tm.tm_hour < 12 ? "AM" : "PM"); break;
        case 'y': num = tm.tm_year % 100; break;
        case 'Y': chat_buf_printf(&b, "%d", tm.tm_year + 1900); break;
        case 'w': chat_buf_printf(&b, "%d", tm.tm_wday); break;
        case 'F':
            chat_buf_printf(&b, "%d-%02d-%02d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
            break;
        case 'T': chat_buf_printf(&b, "%02d:%02d:%02d", tm.tm_hour, tm.tm_min, tm.tm_sec); break;
        case '%': chat_buf_putc(&b, '%'); break;
        default:
            return chat_fail(c, at, HR_ERR_UNSUPPORTED, "strftime_now: '%%%c' is not supported", d);
        }
        if (num >= 0)
            chat_buf_printf(&b, no_pad ? "%d" : "%0*d", no_pad ? num : width, num);
    }
    return chat_str_result(c, at, &b, out);
}

bool chat_call_global(chat_ctx *c, const chat_ast *at, int fn, const chat_args *a, cv *out) {
    chat_arena *ar = chat_ctx_arena(c);
    switch (fn) {
    case CHAT_FN_RANGE: {
        if (a->n_kw || a->n_pos < 1 || a->n_pos > 3)
            return chat_fail(c, at, HR_ERR_INVALID, "range() takes 1 to 3 integers");
        int64_t v[3] = {0, 0, 1};
        for (int k = 0; k < a->n_pos; k++)
            if (!chat_want_int(c, at, &a->pos[k], "range()", &v[a->n_pos == 1 ? 1 : k]))
                return false;
        if (v[2] == 0)
            return chat_fail(c, at, HR_ERR_INVALID, "range() arg 3 must not be zero");
        /* element count in 128-bit-safe steps */
        double span = ((double)v[1] - (double)v[0]) / (double)v[2];
        if (span > CHAT_MAX_STEPS)
            return chat_fail(c, at, HR_ERR_INVALID, "range() of more than %d items",
                             CHAT_MAX_STEPS);
        cv_list *l = cv_list_new(ar, span > 0 ? (size_t)ceil(span) : 0);
        if (!l)
            return chat_fail_mem(c, at);
        for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2]) {
            l->v[l->n++] = cv_int(i);
            if (l->n == l->cap)
                break;
        }
        *out = cv_of_list(l, false);
        return true;
    }
    case CHAT_FN_NAMESPACE:
    case CHAT_FN_DICT: {
        if (a->n_pos > 1)
            return chat_fail(c, at, HR_ERR_INVALID, "%s() takes at most one positional argument",
                             chat_fn_names[fn]);
        cv_dict *d = cv_dict_new(ar, 0);
        if (!d)
            return chat_fail_mem(c, at);
        if (a->n_pos && !init_dict(c, at, &a->pos[0], d))
            return false;
        if (fn == CHAT_FN_NAMESPACE)
            for (size_t k = 0; k < d->n; k++)
                if (d->keys[k].type == CV_STR && d->keys[k].n && d->keys[k].s[0] == '_')
                    return chat_fail(c, at, HR_ERR_INVALID,
                                     "namespace attributes cannot start with '_' (transformers)");
        if (!kw_into_dict(c, at, a, d, fn == CHAT_FN_NAMESPACE))
            return false;
        cv v = {.type = fn == CHAT_FN_NAMESPACE ? CV_NS : CV_DICT};
        v.dict = d;
        *out = v;
        return true;
    }
    case CHAT_FN_RAISE: {
        cv msg = cv_str("", 0);
        if (a->n_pos && !cv_to_string(c, at, &a->pos[0], &msg))
            return false;
        return chat_fail(c, at, HR_ERR_INVALID, "raise_exception: %.*s",
                         (int)(msg.n < 300 ? msg.n : 300), msg.s);
    }
    case CHAT_FN_STRFTIME: {
        const cv *f = chat_arg(a, 0, "format");
        if (!f || !chat_want_str(c, at, f, "strftime_now()"))
            return f ? false : chat_fail(c, at, HR_ERR_INVALID, "strftime_now() takes a format");
        return strftime_now(c, at, f, out);
    }
    default: break;
    }
    return chat_fail(c, at, HR_ERR_INVALID, "not a function");
}
