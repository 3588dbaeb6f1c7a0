/*
 * tests.c — Jinja's tests (`x is defined`, `x is none`, `n is odd`...), as
 * jinja2/tests.py defines them: `is number` is true for booleans (a Python
 * bool is a Number), `is integer` is not; `is iterable` and `is sequence`
 * are true for undefined, which iterates as empty.
 */
#include "chat/chat_internal.h"

#include <math.h>
#include <string.h>

enum {
    T_DEFINED,
    T_UNDEFINED,
    T_NONE,
    T_BOOLEAN,
    T_TRUE,
    T_FALSE,
    T_STRING,
    T_NUMBER,
    T_INTEGER,
    T_FLOAT,
    T_MAPPING,
    T_ITERABLE,
    T_SEQUENCE,
    T_CALLABLE,
    T_SAMEAS,
    T_EQ,
    T_EQUALTO,
    T_EQEQ,
    T_NE,
    T_NEQ,
    T_LT,
    T_LESSTHAN,
    T_LTS,
    T_LE,
    T_LES,
    T_GT,
    T_GREATERTHAN,
    T_GTS,
    T_GE,
    T_GES,
    T_IN,
    T_ODD,
    T_EVEN,
    T_DIVISIBLEBY,
    T_LOWER,
    T_UPPER,
    T_N
};

static const char *const test_names[T_N] = {
    [T_DEFINED] = "defined",
    [T_UNDEFINED] = "undefined",
    [T_NONE] = "none",
    [T_BOOLEAN] = "boolean",
    [T_TRUE] = "true",
    [T_FALSE] = "false",
    [T_STRING] = "string",
    [T_NUMBER] = "number",
    [T_INTEGER] = "integer",
    [T_FLOAT] = "float",
    [T_MAPPING] = "mapping",
    [T_ITERABLE] = "iterable",
    [T_SEQUENCE] = "sequence",
    [T_CALLABLE] = "callable",
    [T_SAMEAS] = "sameas",
    [T_EQ] = "eq",
    [T_EQUALTO] = "equalto",
    [T_EQEQ] = "==",
    [T_NE] = "ne",
    [T_NEQ] = "!=",
    [T_LT] = "lt",
    [T_LESSTHAN] = "lessthan",
    [T_LTS] = "<",
    [T_LE] = "le",
    [T_LES] = "<=",
    [T_GT] = "gt",
    [T_GREATERTHAN] = "greaterthan",
    [T_GTS] = ">",
    [T_GE] = "ge",
    [T_GES] = ">=",
    [T_IN] = "in",
    [T_ODD] = "odd",
    [T_EVEN] = "even",
    [T_DIVISIBLEBY] = "divisibleby",
    [T_LOWER] = "lower",
    [T_UPPER] = "upper",
};

int chat_test_id(const char *s, size_t n) { return chat_find_name(test_names, T_N, s, n); }

bool chat_apply_test(chat_ctx *c, const chat_ast *at, int id, const cv *v, const chat_args *a,
                     bool *out) {
    const cv *x = chat_arg(a, 0, NULL);
    bool needs_arg = id == T_SAMEAS || (id >= T_EQ && id <= T_IN) || id == T_DIVISIBLEBY;
    if (a->n_kw || a->n_pos > (needs_arg ? 1 : 0) || (needs_arg && !x))
        return chat_fail(c, at, HR_ERR_INVALID, "test '%s' takes %s", test_names[id],
                         needs_arg ? "one argument" : "no arguments");
    int cmp;
    switch (id) {
    case T_DEFINED: *out = v->type != CV_UNDEF; return true;
    case T_UNDEFINED: *out = v->type == CV_UNDEF; return true;
    case T_NONE: *out = v->type == CV_NONE; return true;
    case T_BOOLEAN: *out = v->type == CV_BOOL; return true;
    case T_TRUE: *out = v->type == CV_BOOL && v->b; return true;
    case T_FALSE: *out = v->type == CV_BOOL && !v->b; return true;
    case T_STRING: *out = v->type == CV_STR; return true;
    case T_NUMBER:
        *out = v->type == CV_INT || v->type == CV_FLOAT || v->type == CV_BOOL;
        return true;
    case T_INTEGER: *out = v->type == CV_INT; return true;
    case T_FLOAT: *out = v->type == CV_FLOAT; return true;
    case T_MAPPING: *out = v->type == CV_DICT; return true;
    case T_ITERABLE:
        *out = v->type == CV_STR || v->type == CV_LIST || v->type == CV_DICT || v->type == CV_UNDEF;
        return true;
    case T_SEQUENCE:
        *out = v->type == CV_STR || v->type == CV_LIST || v->type == CV_DICT || v->type == CV_UNDEF;
        return true;
    case T_CALLABLE:
        *out = v->type == CV_FUNC || v->type == CV_MACRO || v->type == CV_METHOD;
        return true;
    case T_SAMEAS:
        if (v->type != x->type) {
            *out = false;
            return true;
        }
        if (v->type == CV_LIST || v->type == CV_DICT || v->type == CV_NS) {
            *out = v->list == x->list;
            return true;
        }
        return cv_equal(c, at, v, x, out);
    case T_EQ:
    case T_EQUALTO:
    case T_EQEQ: return cv_equal(c, at, v, x, out);
    case T_NE:
    case T_NEQ:
        if (!cv_equal(c, at, v, x, out))
            return false;
        *out = !*out;
        return true;
    case T_IN: return chat_contains(c, at, v, x, out);
    case T_ODD:
    case T_EVEN:
    case T_DIVISIBLEBY: { /* jinja2: value % 2 == 1, value % 2 == 0, value % num == 0 */
        cv two = cv_int(2);
        const cv *d = id == T_DIVISIBLEBY ? x : &two;
        bool num = (v->type == CV_INT || v->type == CV_BOOL || v->type == CV_FLOAT) &&
                   (d->type == CV_INT || d->type == CV_BOOL || d->type == CV_FLOAT);
        if (!num)
            return chat_fail(c, at, HR_ERR_INVALID, "test '%s' needs numbers, got %s and %s",
                             test_names[id], cv_type_name(v), cv_type_name(d));
        if (v->type != CV_FLOAT && d->type != CV_FLOAT) {
            int64_t p = v->type == CV_INT ? v->i : v->b, q = d->type == CV_INT ? d->i : d->b;
            if (q == 0)
                return chat_fail(c, at, HR_ERR_INVALID, "integer division or modulo by zero");
            int64_t m = q == -1 ? 0 : p % q;
            if (m != 0 && ((m < 0) != (q < 0)))
                m += q;
            *out = id == T_ODD ? m == 1 : m == 0;
            return true;
        }
        double p = v->type == CV_FLOAT ? v->f : v->type == CV_INT ? (double)v->i : v->b;
        double q = d->type == CV_FLOAT ? d->f : d->type == CV_INT ? (double)d->i : d->b;
        if (q == 0.0)
            return chat_fail(c, at, HR_ERR_INVALID, "float modulo by zero");
        double m = fmod(p, q);
        if (m != 0.0 && ((m < 0) != (q < 0)))
            m += q;
        *out = id == T_ODD ? m == 1.0 : m == 0.0;
        return true;
    }
    case T_LOWER:
    case T_UPPER: { /* jinja2: str(value).islower() */
        cv s;
        if (!cv_to_string(c, at, v, &s))
            return false;
        *out = chat_str_is(&s, id == T_LOWER ? 4 : 5);
        return true;
    }
    default: break;
    }
    /* the ordering tests */
    if (!cv_compare(c, at, v, x, &cmp))
        return false;
    switch (id) {
    case T_LT:
    case T_LESSTHAN:
    case T_LTS: *out = cmp == -1; break;
    case T_LE:
    case T_LES: *out = cmp == -1 || cmp == 0; break;
    case T_GT:
    case T_GREATERTHAN:
    case T_GTS: *out = cmp == 1; break;
    default: *out = cmp == 1 || cmp == 0; break;
    }
    return true;
}
