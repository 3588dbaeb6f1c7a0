/*
 * expr.c — expression evaluation, with Python's semantics for the
 * operators: // and % floor (toward negative infinity), / always gives a
 * float, + joins strings and lists but never a string and a number, ~
 * joins the str() of anything, comparisons chain (a < b < c), `and`/`or`
 * return an operand. obj.x and obj[x] follow jinja2's getattr / getitem
 * (attribute then item, or item then attribute; undefined when neither),
 * indexes and slices count characters of strings, and out-of-range
 * indexes give undefined rather than an error, as in Jinja. Integers are
 * 64-bit: an overflow is an error, where Python would grow.
 */
#include "chat/chat_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static bool ev(chat_ctx *c, const chat_ast *n, cv *out);

cv chat_undef_named(chat_name name) {
    cv u = {.type = CV_UNDEF};
    u.s = name.s;
    u.n = name.n;
    return u;
}

bool chat_undefined_error(chat_ctx *c, const chat_ast *at, const cv *u) {
    if (u->n)
        return chat_fail(c, at, HR_ERR_INVALID, "'%.*s' is undefined", (int)(u->n < 80 ? u->n : 80),
                         u->s);
    return chat_fail(c, at, HR_ERR_INVALID, "an undefined value was used");
}

bool chat_eval_args(chat_ctx *c, const chat_ast *n, cv **pos, cv **kw) {
    *pos = *kw = NULL;
    if (n->n_kids) {
        *pos = chat_arena_alloc(&c->arena, (size_t)n->n_kids * sizeof **pos);
        if (!*pos)
            return chat_fail_mem(c, n);
        for (int k = 0; k < n->n_kids; k++)
            if (!ev(c, n->kids[k], &(*pos)[k]))
                return false;
    }
    if (n->n_kw) {
        *kw = chat_arena_alloc(&c->arena, (size_t)n->n_kw * sizeof **kw);
        if (!*kw)
            return chat_fail_mem(c, n);
        for (int k = 0; k < n->n_kw; k++)
            if (!ev(c, n->kw[k], &(*kw)[k]))
                return false;
    }
    return true;
}

static bool norm_index(int64_t i, size_t len, size_t *out) {
    if (i < 0)
        i += (int64_t)len;
    if (i < 0 || (uint64_t)i >= len)
        return false;
    *out = (size_t)i;
    return true;
}

static bool slice_part(chat_ctx *c, const chat_ast *n, bool *given, int64_t *v) {
    *given = false;
    if (!n)
        return true;
    cv x;
    if (!chat_eval(c, n, &x))
        return false;
    if (x.type == CV_NONE)
        return true;
    if (x.type != CV_INT && x.type != CV_BOOL)
        return chat_fail(c, n, HR_ERR_INVALID, "slice indices must be integers or None, not %s",
                         cv_type_name(&x));
    *given = true;
    *v = x.type == CV_INT ? x.i : x.b;
    return true;
}

/* Python's slice.indices(len) and the positions it selects. */
static bool eval_slice(chat_ctx *c, const chat_ast *n, const cv *obj, cv *out) {
    /* jinja2 compiles a slice to Python's own obj[a:b:c] (not its getitem,
     * which would turn errors into undefined): type errors are errors */
    bool has[3];
    int64_t start = 0, stop = 0, step = 1;
    if (!slice_part(c, n->a, &has[0], &start) || !slice_part(c, n->b, &has[1], &stop) ||
        !slice_part(c, n->c, &has[2], &step))
        return false;
    if (!has[2])
        step = 1;
    if (obj->type != CV_LIST && obj->type != CV_STR)
        return chat_fail(c, n, HR_ERR_INVALID, "'%s' object is not subscriptable with a slice",
                         cv_type_name(obj));
    if (step == 0)
        return chat_fail(c, n, HR_ERR_INVALID, "slice step cannot be zero");
    /* code point offsets of a string (one past the end included) */
    size_t len;
    size_t *offs = NULL;
    if (obj->type == CV_STR) {
        len = chat_utf8_count(obj->s, obj->n);
        offs = chat_arena_alloc(&c->arena, (len + 1) * sizeof *offs);
        if (!offs)
            return chat_fail_mem(c, n);
        size_t k = 0;
        for (size_t i = 0; i < obj->n; i++)
            if (((unsigned char)obj->s[i] & 0xC0) != 0x80)
                offs[k++] = i;
        offs[len] = obj->n;
    } else {
        len = obj->list->n;
    }
    int64_t L = (int64_t)len;
    int64_t lo = step < 0 ? -1 : 0, hi = step < 0 ? L - 1 : L;
    if (!has[0]) {
        start = step < 0 ? hi : lo;
    } else {
        if (start < 0)
            start += L;
        start = start < lo ? lo : start > hi ? hi : start;
    }
    if (!has[1]) {
        stop = step < 0 ? lo : hi;
    } else {
        if (stop < 0)
            stop += L;
        stop = stop < lo ? lo : stop > hi ? hi : stop;
    }
    if (obj->type == CV_STR) {
        if (step == 1) {
            *out = start < stop ? cv_str(obj->s + offs[start], offs[stop] - offs[start])
                                : cv_str("", 0);
            return true;
        }
        chat_buf b;
        chat_buf_init(&b, &c->arena);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
            chat_buf_put(&b, obj->s + offs[i], offs[i + 1] - offs[i]);
        if (!chat_buf_put(&b, "", 0))
            return chat_fail_mem(c, n);
        *out = cv_str(b.p, b.n);
        return true;
    }
    cv_list *l = cv_list_new(&c->arena, 0);
    if (!l)
        return chat_fail_mem(c, n);
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
        if (!cv_list_push(&c->arena, l, obj->list->v[i]))
            return chat_fail_mem(c, n);
    *out = cv_of_list(l, obj->flags & CV_F_TUPLE);
    return true;
}

/* obj[key] as jinja2's Environment.getitem: the item, else (for a string
 * key) the attribute, else undefined. */
static bool getitem(chat_ctx *c, const chat_ast *at, const cv *obj, const cv *key, cv *out) {
    if (obj->type == CV_UNDEF)
        return chat_undefined_error(c, at, obj);
    int64_t i = 0;
    bool int_key = key->type == CV_INT || key->type == CV_BOOL;
    if (int_key)
        i = key->type == CV_INT ? key->i : key->b;
    size_t k;
    switch ((cv_type)obj->type) {
    case CV_LIST:
        if (int_key && norm_index(i, obj->list->n, &k)) {
            *out = obj->list->v[k];
            return true;
        }
        break;
    case CV_STR:
        if (int_key && norm_index(i, chat_utf8_count(obj->s, obj->n), &k)) {
            size_t at_b = 0;
            for (size_t cp = 0; cp < k; cp++) {
                uint32_t u;
                at_b += chat_utf8_next(obj->s + at_b, obj->n - at_b, &u);
            }
            uint32_t u;
            *out = cv_str(obj->s + at_b, chat_utf8_next(obj->s + at_b, obj->n - at_b, &u));
            return true;
        }
        break;
    case CV_DICT: {
        const cv *v = cv_dict_get(obj->dict, key);
        if (v) {
            *out = *v;
            return true;
        }
        break;
    }
    default: break;
    }
    if (key->type == CV_STR)
        return chat_getattr(c, at, obj, key->s, key->n, out);
    *out = cv_undef(NULL);
    return true;
}

static bool arith_error(chat_ctx *c, const chat_ast *at, const char *op, const cv *x, const cv *y) {
    if (x->type == CV_UNDEF)
        return chat_undefined_error(c, at, x);
    if (y->type == CV_UNDEF)
        return chat_undefined_error(c, at, y);
    return chat_fail(c, at, HR_ERR_INVALID, "unsupported operand type(s) for %s: '%s' and '%s'", op,
                     cv_type_name(x), cv_type_name(y));
}

static bool overflow(chat_ctx *c, const chat_ast *at) {
    return chat_fail(c, at, HR_ERR_UNSUPPORTED,
                     "integer overflow (64-bit here; Python's integers are unbounded)");
}

static bool is_number(const cv *v) {
    return v->type == CV_INT || v->type == CV_FLOAT || v->type == CV_BOOL;
}
static double as_f(const cv *v) {
    return v->type == CV_FLOAT ? v->f : v->type == CV_INT ? (double)v->i : v->b;
}
static int64_t as_i(const cv *v) {
    return v->type == CV_INT ? v->i : v->type == CV_BOOL ? v->b : 0;
}

/* seq * count for strings and lists. */
static bool repeat(chat_ctx *c, const chat_ast *at, const cv *seq, int64_t count, cv *out) {
    if (count < 0)
        count = 0;
    if (seq->type == CV_STR) {
        if (seq->n && (uint64_t)count > CHAT_MAX_MEMORY_BYTES / seq->n)
            return chat_fail(c, at, HR_ERR_INVALID, "string repetition too large");
        size_t total = seq->n * (size_t)count;
        char *p = chat_arena_alloc(&c->arena, total + 1);
        if (!p)
            return chat_fail_mem(c, at);
        for (int64_t k = 0; k < count; k++)
            chat_copy(p + (size_t)k * seq->n, seq->s, seq->n);
        p[total] = '\0';
        *out = cv_str(p, total);
        return true;
    }
    size_t n = seq->list->n;
    if (n && (uint64_t)count > CHAT_MAX_MEMORY_BYTES / sizeof(cv) / n)
        return chat_fail(c, at, HR_ERR_INVALID, "list repetition too large");
    cv_list *l = cv_list_new(&c->arena, n * (size_t)count);
    if (!l)
        return chat_fail_mem(c, at);
    for (int64_t k = 0; k < count; k++)
        for (size_t j = 0; j < n; j++)
            l->v[l->n++] = seq->list->v[j];
    *out = cv_of_list(l, seq->flags & CV_F_TUPLE);
    return true;
}

static bool binary(chat_ctx *c, const chat_ast *n, const cv *x, const cv *y, cv *out) {
    int op = n->op;
    if (op == CHAT_OP_TILDE) {
        chat_buf b;
        chat_buf_init(&b, &c->arena);
        if (!cv_str_into(c, n, x, &b) || !cv_str_into(c, n, y, &b) || !chat_buf_put(&b, "", 0))
            return b.failed ? chat_fail_mem(c, n) : false;
        *out = cv_str(b.p, b.n);
        return true;
    }
    static const char *const names[] = {
        [CHAT_OP_ADD] = "+",           [CHAT_OP_SUB] = "-",       [CHAT_OP_MUL] = "*",
        [CHAT_OP_DIV] = "/",           [CHAT_OP_FLOORDIV] = "//", [CHAT_OP_MOD] = "%",
        [CHAT_OP_POW] = "** or pow()",
    };
    const char *name = op < (int)(sizeof names / sizeof names[0]) && names[op] ? names[op] : "?";
    if (is_number(x) && is_number(y)) {
        bool fl = x->type == CV_FLOAT || y->type == CV_FLOAT;
        int64_t a = as_i(x), b = as_i(y), r;
        double fa = as_f(x), fb = as_f(y);
        switch (op) {
        case CHAT_OP_ADD:
            if (fl) {
                *out = cv_float(fa + fb);
                return true;
            }
            if (__builtin_add_overflow(a, b, &r))
                return overflow(c, n);
            *out = cv_int(r);
            return true;
        case CHAT_OP_SUB:
            if (fl) {
                *out = cv_float(fa - fb);
                return true;
            }
            if (__builtin_sub_overflow(a, b, &r))
                return overflow(c, n);
            *out = cv_int(r);
            return true;
        case CHAT_OP_MUL:
            if (fl) {
                *out = cv_float(fa * fb);
                return true;
            }
            if (__builtin_mul_overflow(a, b, &r))
                return overflow(c, n);
            *out = cv_int(r);
            return true;
        case CHAT_OP_DIV:
            if (fb == 0.0)
                return chat_fail(c, n, HR_ERR_INVALID, "division by zero");
            *out = cv_float(fa / fb);
            return true;
        case CHAT_OP_FLOORDIV:
        case CHAT_OP_MOD:
            if (fl ? fb == 0.0 : b == 0)
                return chat_fail(c, n, HR_ERR_INVALID, "integer division or modulo by zero");
            if (fl) { /* Python's float_divmod */
                double m = fmod(fa, fb), d = (fa - m) / fb, q;
                if (m != 0.0) {
                    if ((fb < 0) != (m < 0)) {
                        m += fb;
                        d -= 1.0;
                    }
                } else {
                    m = copysign(0.0, fb);
                }
                if (d != 0.0) {
                    q = floor(d);
                    if (d - q > 0.5)
                        q += 1.0;
                } else {
                    q = copysign(0.0, fa / fb);
                }
                *out = cv_float(op == CHAT_OP_MOD ? m : q);
                return true;
            }
            if (a == INT64_MIN && b == -1)
                return overflow(c, n);
            {
                int64_t q = a / b, m = a % b;
                if (m != 0 && ((m < 0) != (b < 0))) {
                    q--;
                    m += b;
                }
                *out = cv_int(op == CHAT_OP_MOD ? m : q);
            }
            return true;
        case CHAT_OP_POW:
            if (!fl && b >= 0) {
                int64_t acc = 1, base = a;
                for (int64_t e = b; e > 0; e >>= 1) {
                    if ((e & 1) && __builtin_mul_overflow(acc, base, &acc))
                        return overflow(c, n);
                    if (e > 1 && __builtin_mul_overflow(base, base, &base))
                        return overflow(c, n);
                }
                *out = cv_int(acc);
                return true;
            }
            if (fa == 0.0 && fb < 0)
                return chat_fail(c, n, HR_ERR_INVALID, "0.0 cannot be raised to a negative power");
            *out = cv_float(pow(fa, fb));
            if (isinf(out->f) && isfinite(fa) && isfinite(fb)) /* Python raises */
                return chat_fail(c, n, HR_ERR_INVALID, "numerical result out of range");
            return true;
        default: break;
        }
    }
    if (op == CHAT_OP_ADD && x->type == CV_STR && y->type == CV_STR) {
        char *p = chat_arena_alloc(&c->arena, x->n + y->n + 1);
        if (!p)
            return chat_fail_mem(c, n);
        chat_copy(p, x->s, x->n);
        chat_copy(p + x->n, y->s, y->n);
        p[x->n + y->n] = '\0';
        *out = cv_str(p, x->n + y->n);
        return true;
    }
    if (op == CHAT_OP_ADD && x->type == CV_LIST && y->type == CV_LIST &&
        (x->flags & CV_F_TUPLE) == (y->flags & CV_F_TUPLE)) {
        cv_list *l = cv_list_new(&c->arena, x->list->n + y->list->n);
        if (!l)
            return chat_fail_mem(c, n);
        for (size_t k = 0; k < x->list->n; k++)
            l->v[l->n++] = x->list->v[k];
        for (size_t k = 0; k < y->list->n; k++)
            l->v[l->n++] = y->list->v[k];
        *out = cv_of_list(l, x->flags & CV_F_TUPLE);
        return true;
    }
    if (op == CHAT_OP_MUL && (x->type == CV_STR || x->type == CV_LIST) &&
        (y->type == CV_INT || y->type == CV_BOOL))
        return repeat(c, n, x, as_i(y), out);
    if (op == CHAT_OP_MUL && (y->type == CV_STR || y->type == CV_LIST) &&
        (x->type == CV_INT || x->type == CV_BOOL))
        return repeat(c, n, y, as_i(x), out);
    if (op == CHAT_OP_MOD && x->type == CV_STR)
        return chat_fail(c, n, HR_ERR_UNSUPPORTED,
                         "printf-style string formatting ('%%') is not "
                         "supported");
    return arith_error(c, n, name, x, y);
}

static bool contains(chat_ctx *c, const chat_ast *at, const cv *item, const cv *seq, bool *r) {
    switch ((cv_type)seq->type) {
    case CV_UNDEF: *r = false; return true;
    case CV_STR:
        if (item->type != CV_STR)
            return chat_fail(c, at, HR_ERR_INVALID,
                             "'in <string>' requires string as left operand, "
                             "not %s",
                             cv_type_name(item));
        if (item->n == 0) {
            *r = true;
            return true;
        }
        *r = false;
        for (size_t i = 0; i + item->n <= seq->n && !*r; i++)
            *r = memcmp(seq->s + i, item->s, item->n) == 0;
        return true;
    case CV_LIST:
        *r = false;
        for (size_t k = 0; k < seq->list->n && !*r; k++)
            if (!cv_equal(c, at, item, &seq->list->v[k], r))
                return false;
        return true;
    case CV_DICT: *r = cv_dict_get(seq->dict, item) != NULL; return true;
    default: break;
    }
    return chat_fail(c, at, HR_ERR_INVALID, "argument of type '%s' is not iterable",
                     cv_type_name(seq));
}

bool chat_contains(chat_ctx *c, const chat_ast *at, const cv *item, const cv *seq, bool *r) {
    return contains(c, at, item, seq, r);
}

static bool compare(chat_ctx *c, const chat_ast *n, cv *out) {
    cv left;
    if (!ev(c, n->kids[0], &left))
        return false;
    for (int k = 1; k < n->n_kids; k++) {
        cv right;
        if (!ev(c, n->kids[k], &right))
            return false;
        bool r;
        int cmp;
        switch (n->ops[k - 1]) {
        case CHAT_OP_EQ:
        case CHAT_OP_NE:
            if (!cv_equal(c, n, &left, &right, &r))
                return false;
            if (n->ops[k - 1] == CHAT_OP_NE)
                r = !r;
            break;
        case CHAT_OP_IN:
        case CHAT_OP_NOT_IN:
            if (!contains(c, n, &left, &right, &r))
                return false;
            if (n->ops[k - 1] == CHAT_OP_NOT_IN)
                r = !r;
            break;
        default:
            if (left.type == CV_UNDEF || right.type == CV_UNDEF)
                return chat_undefined_error(c, n, left.type == CV_UNDEF ? &left : &right);
            if (!cv_compare(c, n, &left, &right, &cmp))
                return false;
            switch (n->ops[k - 1]) {
            case CHAT_OP_LT: r = cmp == -1; break;
            case CHAT_OP_LE: r = cmp == -1 || cmp == 0; break;
            case CHAT_OP_GT: r = cmp == 1; break;
            default: r = cmp == 1 || cmp == 0; break;
            }
        }
        if (!r) {
            *out = cv_bool(false);
            return true;
        }
        left = right;
    }
    *out = cv_bool(true);
    return true;
}

/* The filters of a chain applied to v (filter blocks pass the rendered
 * body; an expression's chain starts from its innermost operand). */
static bool apply_filter_node(chat_ctx *c, const chat_ast *f, const cv *v, cv *out) {
    cv *pos, *kw;
    if (!chat_eval_args(c, f, &pos, &kw))
        return false;
    chat_args a = {pos, f->n_kids, f->kw_names, kw, f->n_kw};
    return chat_apply_filter(c, f, f->op, v, &a, out);
}

bool chat_filter_chain(chat_ctx *c, const chat_ast *f, const cv *input, cv *out) {
    cv v;
    if (f->a) {
        if (!chat_filter_chain(c, f->a, input, &v))
            return false;
    } else {
        v = *input;
    }
    return apply_filter_node(c, f, &v, out);
}

static bool ev(chat_ctx *c, const chat_ast *n, cv *out) {
    switch ((chat_ast_kind)n->kind) {
    case AST_CONST: *out = n->val; return true;
    case AST_NAME: {
        const cv *v = chat_lookup(c, n->name.s, n->name.n);
        *out = v ? *v : chat_undef_named(n->name);
        return true;
    }
    case AST_LIST:
    case AST_TUPLE: {
        cv_list *l = cv_list_new(&c->arena, (size_t)n->n_kids);
        if (!l)
            return chat_fail_mem(c, n);
        for (int k = 0; k < n->n_kids; k++)
            if (!ev(c, n->kids[k], &l->v[l->n++]))
                return false;
        *out = cv_of_list(l, n->kind == AST_TUPLE);
        return true;
    }
    case AST_DICT: {
        cv_dict *d = cv_dict_new(&c->arena, (size_t)n->n_kids / 2);
        if (!d)
            return chat_fail_mem(c, n);
        for (int k = 0; k + 1 < n->n_kids; k += 2) {
            cv key, val;
            if (!ev(c, n->kids[k], &key) || !ev(c, n->kids[k + 1], &val) ||
                !cv_dict_set(c, d, key, val))
                return false;
        }
        *out = cv_of_dict(d);
        return true;
    }
    case AST_GETATTR: {
        cv obj;
        if (!ev(c, n->a, &obj))
            return false;
        if (obj.type == CV_UNDEF)
            return chat_undefined_error(c, n, &obj);
        return chat_getattr(c, n, &obj, n->name.s, n->name.n, out);
    }
    case AST_GETITEM: {
        cv obj, key;
        if (!ev(c, n->a, &obj))
            return false;
        if (n->b->kind == AST_SLICE) {
            if (obj.type == CV_UNDEF)
                return chat_undefined_error(c, n, &obj);
            return eval_slice(c, n->b, &obj, out);
        }
        return ev(c, n->b, &key) && getitem(c, n, &obj, &key, out);
    }
    case AST_CALL: {
        cv fn, *pos, *kw;
        if (!ev(c, n->a, &fn) || !chat_eval_args(c, n, &pos, &kw))
            return false;
        return chat_call_value(c, n, &fn, pos, n->n_kids, n->kw_names, kw, n->n_kw, out);
    }
    case AST_FILTER: {
        cv v;
        if (!ev(c, n->a, &v))
            return false;
        return apply_filter_node(c, n, &v, out);
    }
    case AST_TEST: {
        cv v, *pos, *kw;
        bool r;
        if (!ev(c, n->a, &v) || !chat_eval_args(c, n, &pos, &kw))
            return false;
        chat_args a = {pos, n->n_kids, n->kw_names, kw, n->n_kw};
        if (!chat_apply_test(c, n, n->op, &v, &a, &r))
            return false;
        *out = cv_bool(r != n->negate);
        return true;
    }
    case AST_UNARY: {
        cv v;
        if (!ev(c, n->a, &v))
            return false;
        if (n->op == CHAT_OP_NOT) {
            *out = cv_bool(!cv_truthy(&v));
            return true;
        }
        if (v.type == CV_UNDEF)
            return chat_undefined_error(c, n, &v);
        if (v.type == CV_FLOAT) {
            *out = cv_float(n->op == CHAT_OP_NEG ? -v.f : v.f);
            return true;
        }
        if (v.type == CV_INT || v.type == CV_BOOL) {
            int64_t i = as_i(&v);
            if (n->op == CHAT_OP_NEG && i == INT64_MIN)
                return overflow(c, n);
            *out = cv_int(n->op == CHAT_OP_NEG ? -i : i);
            return true;
        }
        return chat_fail(c, n, HR_ERR_INVALID, "bad operand type for unary %s: '%s'",
                         n->op == CHAT_OP_NEG ? "-" : "+", cv_type_name(&v));
    }
    case AST_BINARY: {
        cv x, y;
        return ev(c, n->a, &x) && ev(c, n->b, &y) && binary(c, n, &x, &y, out);
    }
    case AST_AND:
    case AST_OR: {
        if (!ev(c, n->a, out))
            return false;
        if (cv_truthy(out) == (n->kind == AST_OR))
            return true;
        return ev(c, n->b, out);
    }
    case AST_COMPARE: return compare(c, n, out);
    case AST_COND: {
        cv cond;
        if (!ev(c, n->b, &cond))
            return false;
        if (cv_truthy(&cond))
            return ev(c, n->a, out);
        if (n->c)
            return ev(c, n->c, out);
        *out = cv_undef(NULL);
        return true;
    }
    case AST_SLICE: return chat_fail(c, n, HR_ERR_FORMAT, "a slice outside '[]'");
    default: break;
    }
    return chat_fail(c, n, HR_ERR_FORMAT, "a statement where an expression belongs");
}

bool chat_eval(chat_ctx *c, const chat_ast *n, cv *out) { return ev(c, n, out); }
