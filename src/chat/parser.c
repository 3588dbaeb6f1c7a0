/*
 * parser.c — tokens to an AST, by recursive descent mirroring jinja2's
 * Parser so that precedence and the odd corners agree:
 *
 *   expression := or ("if" or ["else" expression])*
 *   or         := and ("or" and)*        and := not ("and" not)*
 *   not        := "not" not | compare
 *   compare    := math1 (("=="|"!="|"<"|"<="|">"|">="|"in"|"not in") math1)*
 *   math1      := concat (("+"|"-") concat)*
 *   concat     := math2 ("~" math2)*
 *   math2      := pow (("*"|"/"|"//"|"%") pow)*
 *   pow        := unary ("**" unary)*
 *   unary      := ("-"|"+") unary-without-filters | primary postfix filters
 *   postfix    := ("." name | "." int | "[" subscript "]" | "(" args ")")*
 *   filters    := ("|" name ["(" args ")"] | "is" ["not"] name [arg] | "(" args ")")*
 *
 * so "-x|abs" is abs(-x) and "a ~ b + c" is (a ~ b) + c as in Jinja.
 * Filter and test names are resolved here: an unknown one is an error at
 * parse time (Jinja's TemplateAssertionError), naming it and its position.
 * Depth is bounded (CHAT_MAX_NESTING) so hostile input cannot exhaust the
 * C stack.
 */
#include "chat/chat_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    const chat_token *t;
    size_t n, i;
    chat_arena *a;
    hr_error *err;
    hr_status st; /* HR_OK until the first error */
    int depth;
    int loops; /* for-loops enclosing the current statement (break/continue) */
} parser;

static const chat_token *cur(const parser *P) { return &P->t[P->i < P->n ? P->i : P->n - 1]; }
static const chat_token *peek(const parser *P, size_t k) {
    return &P->t[P->i + k < P->n ? P->i + k : P->n - 1];
}
static void next(parser *P) {
    if (P->i + 1 < P->n)
        P->i++;
}

static void *fail(parser *P, const chat_token *at, hr_status st, const char *fmt, ...)
    HR_PRINTF(4, 5);
static void *fail(parser *P, const chat_token *at, hr_status st, const char *fmt, ...) {
    if (P->st != HR_OK)
        return NULL;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    P->st = hr_err_set(P->err, st, "chat template %d:%d: %s", at->line, at->col, msg);
    return NULL;
}

static void *nomem(parser *P) {
    if (P->st != HR_OK)
        return NULL;
    P->st = hr_err_set(P->err, P->a->failed == CHAT_ARENA_LIMIT ? HR_ERR_INVALID : HR_ERR_NOMEM,
                       "chat template: out of memory while parsing");
    return NULL;
}

static bool is_name(const chat_token *t, const char *s) {
    return t->type == TK_NAME && t->n == strlen(s) && memcmp(t->s, s, t->n) == 0;
}
static bool is_op(const chat_token *t, int op) { return t->type == TK_OP && t->op == op; }

static const char *tok_desc(const chat_token *t, char *buf, size_t cap) {
    static const char *const op_text[] = {
        "+", "-",  "*",  "/", "//", "%", "**", "~", "[", "]", "(", ")", "{",
        "}", "==", "!=", ">", ">=", "<", "<=", "=", ".", ":", "|", ",", ";",
    };
    switch (t->type) {
    case TK_EOF: return "end of template";
    case TK_TEXT: return "template text";
    case TK_VAR_BEGIN: return "'{{'";
    case TK_VAR_END: return "'}}'";
    case TK_BLOCK_BEGIN: return "'{%'";
    case TK_BLOCK_END: return "'%}'";
    case TK_STRING: return "a string";
    case TK_INT:
    case TK_FLOAT: return "a number";
    case TK_NAME: snprintf(buf, cap, "'%.*s'", (int)(t->n < 40 ? t->n : 40), t->s); return buf;
    case TK_OP:
        snprintf(buf, cap, "'%s'",
                 t->op < sizeof op_text / sizeof op_text[0] ? op_text[t->op] : "?");
        return buf;
    }
    return "?";
}

static void *unexpected(parser *P, const char *wanted) {
    char buf[64];
    return fail(P, cur(P), HR_ERR_FORMAT, "expected %s, found %s", wanted,
                tok_desc(cur(P), buf, sizeof buf));
}

static bool expect_op(parser *P, int op, const char *what) {
    if (!is_op(cur(P), op)) {
        unexpected(P, what);
        return false;
    }
    next(P);
    return true;
}

static chat_ast *node(parser *P, int kind, const chat_token *at) {
    chat_ast *n = chat_arena_alloc(P->a, sizeof *n);
    if (!n)
        return nomem(P);
    memset(n, 0, sizeof *n);
    n->kind = (uint8_t)kind;
    n->line = at->line;
    n->col = at->col;
    return n;
}

/* A growing array of node pointers (and, for keywords, names). */
typedef struct {
    chat_ast **v;
    chat_name *names;
    int n, cap;
} vec;

static bool vec_push(parser *P, vec *v, chat_ast *x, const chat_name *name) {
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 4;
        chat_ast **nv = chat_arena_alloc(P->a, (size_t)cap * sizeof *nv);
        chat_name *nn = chat_arena_alloc(P->a, (size_t)cap * sizeof *nn);
        if (!nv || !nn) {
            nomem(P);
            return false;
        }
        if (v->n) {
            memcpy(nv, v->v, (size_t)v->n * sizeof *nv);
            memcpy(nn, v->names, (size_t)v->n * sizeof *nn);
        }
        v->v = nv;
        v->names = nn;
        v->cap = cap;
    }
    v->v[v->n] = x;
    v->names[v->n] = name ? *name : (chat_name){0};
    v->n++;
    return true;
}

static bool enter(parser *P) {
    if (++P->depth > CHAT_MAX_NESTING) {
        fail(P, cur(P), HR_ERR_INVALID, "nested deeper than %d levels", CHAT_MAX_NESTING);
        return false;
    }
    return true;
}
static void leave(parser *P) { P->depth--; }

static chat_ast *parse_expression(parser *P, bool with_condexpr);
static chat_ast *parse_or(parser *P);
static chat_ast *parse_unary(parser *P, bool with_filter);
static chat_ast *parse_body(parser *P, const char *const *ends, int *which);

/* ---------------------------------------------------------------- primaries */

/* Items up to close (list, tuple in parentheses, call arguments). */
static chat_ast *parse_tuple(parser *P, bool with_condexpr, bool explicit_parens,
                             const char *extra_end) {
    const chat_token *start = cur(P);
    vec items = {0};
    bool is_tuple = false;
    for (;;) {
        if (items.n && !expect_op(P, CHAT_OP_COMMA, "','"))
            return NULL;
        const chat_token *t = cur(P);
        if (t->type == TK_VAR_END || t->type == TK_BLOCK_END || is_op(t, CHAT_OP_RPAREN) ||
            (extra_end && is_name(t, extra_end)))
            break;
        chat_ast *x = with_condexpr ? parse_expression(P, true) : parse_or(P);
        if (!x || !vec_push(P, &items, x, NULL))
            return NULL;
        if (is_op(cur(P), CHAT_OP_COMMA))
            is_tuple = true;
        else
            break;
    }
    if (!is_tuple) {
        if (items.n)
            return items.v[0];
        if (!explicit_parens)
            return fail(P, start, HR_ERR_FORMAT, "expected an expression");
    }
    chat_ast *n = node(P, AST_TUPLE, start);
    if (!n)
        return NULL;
    n->kids = items.v;
    n->n_kids = items.n;
    return n;
}

static chat_ast *parse_list(parser *P) {
    chat_ast *n = node(P, AST_LIST, cur(P));
    if (!n)
        return NULL;
    next(P); /* [ */
    vec items = {0};
    while (!is_op(cur(P), CHAT_OP_RBRACKET)) {
        if (items.n && !expect_op(P, CHAT_OP_COMMA, "',' or ']'"))
            return NULL;
        if (is_op(cur(P), CHAT_OP_RBRACKET))
            break;
        chat_ast *x = parse_expression(P, true);
        if (!x || !vec_push(P, &items, x, NULL))
            return NULL;
    }
    next(P);
    n->kids = items.v;
    n->n_kids = items.n;
    return n;
}

static chat_ast *parse_dict(parser *P) {
    chat_ast *n = node(P, AST_DICT, cur(P));
    if (!n)
        return NULL;
    next(P); /* { */
    vec items = {0};
    while (!is_op(cur(P), CHAT_OP_RBRACE)) {
        if (items.n && !expect_op(P, CHAT_OP_COMMA, "',' or '}'"))
            return NULL;
        if (is_op(cur(P), CHAT_OP_RBRACE))
            break;
        chat_ast *k = parse_expression(P, true);
        if (!k || !expect_op(P, CHAT_OP_COLON, "':'"))
            return NULL;
        chat_ast *v = parse_expression(P, true);
        if (!v || !vec_push(P, &items, k, NULL) || !vec_push(P, &items, v, NULL))
            return NULL;
    }
    next(P);
    n->kids = items.v;
    n->n_kids = items.n;
    return n;
}

static chat_ast *parse_primary(parser *P) {
    const chat_token *t = cur(P);
    chat_ast *n;
    switch (t->type) {
    case TK_NAME:
        n = node(P, AST_CONST, t);
        if (!n)
            return NULL;
        if (is_name(t, "true") || is_name(t, "True")) {
            n->val = cv_bool(true);
        } else if (is_name(t, "false") || is_name(t, "False")) {
            n->val = cv_bool(false);
        } else if (is_name(t, "none") || is_name(t, "None")) {
            n->val = cv_none();
        } else {
            n->kind = AST_NAME;
            n->name = (chat_name){t->s, t->n};
        }
        next(P);
        return n;
    case TK_STRING: {
        n = node(P, AST_CONST, t);
        if (!n)
            return NULL;
        if (peek(P, 1)->type != TK_STRING) {
            n->val = cv_str(t->s, t->n);
            next(P);
            return n;
        }
        chat_buf b; /* adjacent literals concatenate: 'a' 'b' */
        chat_buf_init(&b, P->a);
        while (cur(P)->type == TK_STRING) {
            chat_buf_put(&b, cur(P)->s, cur(P)->n);
            next(P);
        }
        if (!chat_buf_put(&b, "", 0))
            return nomem(P);
        n->val = cv_str(b.p, b.n);
        return n;
    }
    case TK_INT:
    case TK_FLOAT:
        n = node(P, AST_CONST, t);
        if (!n)
            return NULL;
        n->val = t->type == TK_INT ? cv_int(t->i) : cv_float(t->f);
        next(P);
        return n;
    case TK_OP:
        if (t->op == CHAT_OP_LPAREN) {
            next(P);
            n = parse_tuple(P, true, true, NULL);
            if (!n || !expect_op(P, CHAT_OP_RPAREN, "')'"))
                return NULL;
            return n;
        }
        if (t->op == CHAT_OP_LBRACKET)
            return parse_list(P);
        if (t->op == CHAT_OP_LBRACE)
            return parse_dict(P);
        break;
    default: break;
    }
    return unexpected(P, "an expression");
}

/* Call arguments after '(' up to ')': positional, then keyword. */
static bool parse_args(parser *P, chat_ast *n) {
    next(P); /* ( */
    vec pos = {0}, kw = {0};
    while (!is_op(cur(P), CHAT_OP_RPAREN)) {
        if ((pos.n || kw.n) && !expect_op(P, CHAT_OP_COMMA, "',' or ')'"))
            return false;
        if (is_op(cur(P), CHAT_OP_RPAREN))
            break;
        if (is_op(cur(P), CHAT_OP_MUL) || is_op(cur(P), CHAT_OP_POW)) {
            fail(P, cur(P), HR_ERR_UNSUPPORTED, "*args and **kwargs in calls are not supported");
            return false;
        }
        if (cur(P)->type == TK_NAME && is_op(peek(P, 1), CHAT_OP_ASSIGN)) {
            chat_name name = {cur(P)->s, cur(P)->n};
            next(P);
            next(P);
            chat_ast *v = parse_expression(P, true);
            if (!v || !vec_push(P, &kw, v, &name))
                return false;
        } else {
            if (kw.n) {
                fail(P, cur(P), HR_ERR_FORMAT, "positional argument after a keyword argument");
                return false;
            }
            chat_ast *v = parse_expression(P, true);
            if (!v || !vec_push(P, &pos, v, NULL))
                return false;
        }
    }
    next(P); /* ) */
    n->kids = pos.v;
    n->n_kids = pos.n;
    n->kw = kw.v;
    n->kw_names = kw.names;
    n->n_kw = kw.n;
    return true;
}

static chat_ast *parse_call(parser *P, chat_ast *callee) {
    chat_ast *n = node(P, AST_CALL, cur(P));
    if (!n)
        return NULL;
    n->a = callee;
    n->line = callee->line; /* errors point at what is called */
    n->col = callee->col;
    return parse_args(P, n) ? n : NULL;
}

/* One slice part or index inside [ ]. */
static chat_ast *parse_subscribed(parser *P) {
    const chat_token *start = cur(P);
    chat_ast *parts[3] = {NULL, NULL, NULL};
    if (is_op(cur(P), CHAT_OP_COLON)) {
        next(P);
    } else {
        chat_ast *x = parse_expression(P, true);
        if (!x)
            return NULL;
        if (!is_op(cur(P), CHAT_OP_COLON))
            return x;
        next(P);
        parts[0] = x;
    }
    if (!is_op(cur(P), CHAT_OP_COLON) && !is_op(cur(P), CHAT_OP_RBRACKET) &&
        !is_op(cur(P), CHAT_OP_COMMA)) {
        if (!(parts[1] = parse_expression(P, true)))
            return NULL;
    }
    if (is_op(cur(P), CHAT_OP_COLON)) {
        next(P);
        if (!is_op(cur(P), CHAT_OP_RBRACKET) && !is_op(cur(P), CHAT_OP_COMMA) &&
            !(parts[2] = parse_expression(P, true)))
            return NULL;
    }
    chat_ast *n = node(P, AST_SLICE, start);
    if (!n)
        return NULL;
    n->a = parts[0];
    n->b = parts[1];
    n->c = parts[2];
    return n;
}

static chat_ast *parse_subscript(parser *P, chat_ast *obj) {
    const chat_token *t = cur(P);
    if (is_op(t, CHAT_OP_DOT)) {
        next(P);
        const chat_token *a = cur(P);
        chat_ast *n;
        if (a->type == TK_NAME) {
            if (!(n = node(P, AST_GETATTR, a)))
                return NULL;
            n->name = (chat_name){a->s, a->n};
        } else if (a->type == TK_INT) { /* x.0 is x[0] */
            chat_ast *k = node(P, AST_CONST, a);
            if (!k || !(n = node(P, AST_GETITEM, a)))
                return NULL;
            k->val = cv_int(a->i);
            n->b = k;
        } else {
            return unexpected(P, "an attribute name after '.'");
        }
        next(P);
        n->a = obj;
        return n;
    }
    next(P); /* [ */
    vec idx = {0};
    while (!is_op(cur(P), CHAT_OP_RBRACKET)) {
        if (idx.n && !expect_op(P, CHAT_OP_COMMA, "',' or ']'"))
            return NULL;
        if (is_op(cur(P), CHAT_OP_RBRACKET))
            break;
        chat_ast *x = parse_subscribed(P);
        if (!x || !vec_push(P, &idx, x, NULL))
            return NULL;
    }
    next(P); /* x[] indexes with an empty tuple, as in jinja2 */
    chat_ast *n = node(P, AST_GETITEM, t);
    if (!n)
        return NULL;
    n->a = obj;
    if (idx.n == 1) {
        n->b = idx.v[0];
    } else { /* x[a, b] indexes with a tuple */
        chat_ast *tup = node(P, AST_TUPLE, t);
        if (!tup)
            return NULL;
        tup->kids = idx.v;
        tup->n_kids = idx.n;
        n->b = tup;
    }
    return n;
}

static chat_ast *parse_postfix(parser *P, chat_ast *n) {
    for (;;) {
        if (!n)
            return NULL;
        if (is_op(cur(P), CHAT_OP_DOT) || is_op(cur(P), CHAT_OP_LBRACKET))
            n = parse_subscript(P, n);
        else if (is_op(cur(P), CHAT_OP_LPAREN))
            n = parse_call(P, n);
        else
            return n;
    }
}

static chat_ast *parse_filter(parser *P, chat_ast *operand) {
    next(P); /* | */
    const chat_token *t = cur(P);
    if (t->type != TK_NAME)
        return unexpected(P, "a filter name after '|'");
    int id = chat_filter_id(t->s, t->n);
    if (id < 0)
        return fail(P, t, HR_ERR_UNSUPPORTED, "unknown or unsupported filter '%.*s'",
                    (int)(t->n < 60 ? t->n : 60), t->s);
    chat_ast *n = node(P, AST_FILTER, t);
    if (!n)
        return NULL;
    n->op = (uint8_t)id;
    n->a = operand;
    n->name = (chat_name){t->s, t->n};
    next(P);
    if (is_op(cur(P), CHAT_OP_DOT))
        return fail(P, cur(P), HR_ERR_UNSUPPORTED, "dotted filter names are not supported");
    if (is_op(cur(P), CHAT_OP_LPAREN) && !parse_args(P, n))
        return NULL;
    return n;
}

static chat_ast *parse_test(parser *P, chat_ast *operand) {
    next(P); /* is */
    bool negate = false;
    if (is_name(cur(P), "not")) {
        negate = true;
        next(P);
    }
    const chat_token *t = cur(P);
    if (t->type != TK_NAME)
        return unexpected(P, "a test name after 'is'");
    int id = chat_test_id(t->s, t->n);
    if (id < 0)
        return fail(P, t, HR_ERR_UNSUPPORTED, "unknown or unsupported test '%.*s'",
                    (int)(t->n < 60 ? t->n : 60), t->s);
    chat_ast *n = node(P, AST_TEST, t);
    if (!n)
        return NULL;
    n->op = (uint8_t)id;
    n->negate = negate;
    n->a = operand;
    n->name = (chat_name){t->s, t->n};
    next(P);
    const chat_token *u = cur(P);
    if (is_op(u, CHAT_OP_LPAREN)) {
        if (!parse_args(P, n))
            return NULL;
    } else if ((u->type == TK_NAME || u->type == TK_STRING || u->type == TK_INT ||
                u->type == TK_FLOAT || is_op(u, CHAT_OP_LBRACKET) || is_op(u, CHAT_OP_LBRACE)) &&
               !is_name(u, "else") && !is_name(u, "or") && !is_name(u, "and")) {
        if (is_name(u, "is"))
            return fail(P, u, HR_ERR_FORMAT, "tests cannot be chained with 'is'");
        /* one argument without parentheses: "x is divisibleby 3" */
        chat_ast *arg = parse_postfix(P, parse_primary(P));
        if (!arg)
            return NULL;
        n->kids = chat_arena_alloc(P->a, sizeof *n->kids);
        if (!n->kids)
            return nomem(P);
        n->kids[0] = arg;
        n->n_kids = 1;
    }
    return n;
}

static chat_ast *parse_filter_expr(parser *P, chat_ast *n) {
    for (;;) {
        if (!n)
            return NULL;
        if (is_op(cur(P), CHAT_OP_PIPE))
            n = parse_filter(P, n);
        else if (is_name(cur(P), "is"))
            n = parse_test(P, n);
        else if (is_op(cur(P), CHAT_OP_LPAREN))
            n = parse_call(P, n);
        else
            return n;
    }
}

/* ---------------------------------------------------------------- operators */

static chat_ast *binary(parser *P, int kind, int op, const chat_token *at, chat_ast *l,
                        chat_ast *r) {
    if (!l || !r)
        return NULL;
    chat_ast *n = node(P, kind, at);
    if (!n)
        return NULL;
    n->op = (uint8_t)op;
    n->a = l;
    n->b = r;
    return n;
}

static chat_ast *parse_unary(parser *P, bool with_filter) {
    const chat_token *t = cur(P);
    chat_ast *n;
    if (is_op(t, CHAT_OP_SUB) || is_op(t, CHAT_OP_ADD)) {
        if (!enter(P))
            return NULL;
        next(P);
        chat_ast *x = parse_unary(P, false);
        leave(P);
        if (!x || !(n = node(P, AST_UNARY, t)))
            return NULL;
        n->op = is_op(t, CHAT_OP_SUB) ? CHAT_OP_NEG : CHAT_OP_POS;
        n->a = x;
    } else {
        n = parse_primary(P);
    }
    n = parse_postfix(P, n);
    return with_filter ? parse_filter_expr(P, n) : n;
}

static chat_ast *parse_pow(parser *P) {
    chat_ast *l = parse_unary(P, true);
    while (l && is_op(cur(P), CHAT_OP_POW)) {
        const chat_token *t = cur(P);
        next(P);
        l = binary(P, AST_BINARY, CHAT_OP_POW, t, l, parse_unary(P, true));
    }
    return l;
}

static chat_ast *parse_math2(parser *P) {
    chat_ast *l = parse_pow(P);
    while (l && cur(P)->type == TK_OP &&
           (cur(P)->op == CHAT_OP_MUL || cur(P)->op == CHAT_OP_DIV ||
            cur(P)->op == CHAT_OP_FLOORDIV || cur(P)->op == CHAT_OP_MOD)) {
        const chat_token *t = cur(P);
        next(P);
        l = binary(P, AST_BINARY, t->op, t, l, parse_pow(P));
    }
    return l;
}

static chat_ast *parse_concat(parser *P) {
    chat_ast *l = parse_math2(P);
    while (l && is_op(cur(P), CHAT_OP_TILDE)) {
        const chat_token *t = cur(P);
        next(P);
        l = binary(P, AST_BINARY, CHAT_OP_TILDE, t, l, parse_math2(P));
    }
    return l;
}

static chat_ast *parse_math1(parser *P) {
    chat_ast *l = parse_concat(P);
    while (l && (is_op(cur(P), CHAT_OP_ADD) || is_op(cur(P), CHAT_OP_SUB))) {
        const chat_token *t = cur(P);
        next(P);
        l = binary(P, AST_BINARY, t->op, t, l, parse_concat(P));
    }
    return l;
}

static chat_ast *parse_compare(parser *P) {
    const chat_token *start = cur(P);
    chat_ast *first = parse_math1(P);
    if (!first)
        return NULL;
    vec kids = {0};
    uint8_t ops[CHAT_MAX_NESTING];
    int n_ops = 0;
    for (;;) {
        const chat_token *t = cur(P);
        int op = -1;
        if (t->type == TK_OP &&
            (t->op == CHAT_OP_EQ || t->op == CHAT_OP_NE || t->op == CHAT_OP_LT ||
             t->op == CHAT_OP_LE || t->op == CHAT_OP_GT || t->op == CHAT_OP_GE)) {
            op = t->op;
            next(P);
        } else if (is_name(t, "in")) {
            op = CHAT_OP_IN;
            next(P);
        } else if (is_name(t, "not") && is_name(peek(P, 1), "in")) {
            op = CHAT_OP_NOT_IN;
            next(P);
            next(P);
        } else {
            break;
        }
        if (n_ops == CHAT_MAX_NESTING)
            return fail(P, t, HR_ERR_INVALID, "more than %d chained comparisons", CHAT_MAX_NESTING);
        if (!kids.n && !vec_push(P, &kids, first, NULL))
            return NULL;
        chat_ast *r = parse_math1(P);
        if (!r || !vec_push(P, &kids, r, NULL))
            return NULL;
        ops[n_ops++] = (uint8_t)op;
    }
    if (!n_ops)
        return first;
    chat_ast *n = node(P, AST_COMPARE, start);
    if (!n || !(n->ops = chat_arena_alloc(P->a, (size_t)n_ops)))
        return n ? nomem(P) : NULL;
    memcpy(n->ops, ops, (size_t)n_ops);
    n->kids = kids.v;
    n->n_kids = kids.n;
    return n;
}

static chat_ast *parse_not(parser *P) {
    const chat_token *t = cur(P);
    if (!is_name(t, "not"))
        return parse_compare(P);
    if (!enter(P))
        return NULL;
    next(P);
    chat_ast *x = parse_not(P);
    leave(P);
    chat_ast *n = x ? node(P, AST_UNARY, t) : NULL;
    if (!n)
        return NULL;
    n->op = CHAT_OP_NOT;
    n->a = x;
    return n;
}

static chat_ast *parse_and(parser *P) {
    chat_ast *l = parse_not(P);
    while (l && is_name(cur(P), "and")) {
        const chat_token *t = cur(P);
        next(P);
        l = binary(P, AST_AND, 0, t, l, parse_not(P));
    }
    return l;
}

static chat_ast *parse_or(parser *P) {
    chat_ast *l = parse_and(P);
    while (l && is_name(cur(P), "or")) {
        const chat_token *t = cur(P);
        next(P);
        l = binary(P, AST_OR, 0, t, l, parse_and(P));
    }
    return l;
}

static chat_ast *parse_expression(parser *P, bool with_condexpr) {
    if (!enter(P))
        return NULL;
    chat_ast *x = parse_or(P);
    while (with_condexpr && x && is_name(cur(P), "if")) {
        const chat_token *t = cur(P);
        next(P);
        chat_ast *cond = parse_or(P), *alt = NULL;
        if (cond && is_name(cur(P), "else")) {
            next(P);
            alt = parse_expression(P, true);
            if (!alt)
                cond = NULL;
        }
        chat_ast *n = cond ? node(P, AST_COND, t) : NULL;
        if (!n) {
            x = NULL;
            break;
        }
        n->a = x;
        n->b = cond;
        n->c = alt;
        x = n;
    }
    leave(P);
    return x;
}

/* ---------------------------------------------------------------- statements */

static bool expect_block_end(parser *P) {
    if (cur(P)->type != TK_BLOCK_END) {
        unexpected(P, "'%}'");
        return false;
    }
    next(P);
    return true;
}

/* After a body stopped at "{% name": consume "{% name" and check "%}" when
 * the tag takes nothing more. */
static bool end_tag(parser *P) {
    next(P); /* {% */
    next(P); /* name */
    return expect_block_end(P);
}

/* Assignment targets: name, or names separated by commas (a tuple), or
 * (when allow_attr) one ns.attr. */
static bool parse_targets(parser *P, chat_ast *n, bool allow_attr, const char *end_name) {
    vec names = {0};
    bool paren = is_op(cur(P), CHAT_OP_LPAREN);
    if (paren)
        next(P);
    for (;;) {
        const chat_token *t = cur(P);
        if (t->type != TK_NAME || is_name(t, "in")) {
            unexpected(P, "a variable name");
            return false;
        }
        chat_name name = {t->s, t->n};
        next(P);
        if (allow_attr && !names.n && !paren && is_op(cur(P), CHAT_OP_DOT)) {
            next(P);
            if (cur(P)->type != TK_NAME) {
                unexpected(P, "an attribute name");
                return false;
            }
            n->name = name;
            n->attr = (chat_name){cur(P)->s, cur(P)->n};
            next(P);
            return true;
        }
        if (!vec_push(P, &names, NULL, &name))
            return false;
        if (!is_op(cur(P), CHAT_OP_COMMA))
            break;
        next(P);
        if ((paren && is_op(cur(P), CHAT_OP_RPAREN)) || (end_name && is_name(cur(P), end_name)) ||
            is_op(cur(P), CHAT_OP_ASSIGN))
            break; /* trailing comma */
    }
    if (paren && !expect_op(P, CHAT_OP_RPAREN, "')'"))
        return false;
    n->kw_names = names.names;
    n->n_kw = names.n;
    n->negate = names.n > 1 || paren; /* unpack even a single name in (x,) */
    return true;
}

static chat_ast *parse_if(parser *P, const chat_token *at) {
    chat_ast *n = node(P, AST_IF, at);
    /* jinja2: parse_tuple(with_condexpr=False), so "if a if b else c" is an error */
    if (!n || !(n->a = parse_tuple(P, false, false, NULL)) || !expect_block_end(P))
        return NULL;
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    int which;
    if (!(n->b = parse_body(P, ends, &which)))
        return NULL;
    if (which == 0) { /* elif: an if in the else branch */
        next(P);
        const chat_token *t = cur(P);
        next(P);
        n->c = parse_if(P, t);
        return n->c ? n : NULL;
    }
    if (which == 1) {
        if (!end_tag(P))
            return NULL;
        static const char *const ends2[] = {"endif", NULL};
        if (!(n->c = parse_body(P, ends2, &which)))
            return NULL;
    }
    return end_tag(P) ? n : NULL;
}

static chat_ast *parse_for(parser *P, const chat_token *at) {
    chat_ast *n = node(P, AST_FOR, at);
    if (!n || !parse_targets(P, n, false, "in"))
        return NULL;
    if (!is_name(cur(P), "in"))
        return unexpected(P, "'in'");
    next(P);
    if (!(n->a = parse_tuple(P, false, false, "recursive")))
        return NULL;
    if (is_name(cur(P), "if")) {
        next(P);
        if (!(n->c = parse_expression(P, true)))
            return NULL;
    }
    if (is_name(cur(P), "recursive"))
        return fail(P, cur(P), HR_ERR_UNSUPPORTED, "recursive loops are not supported");
    if (!expect_block_end(P))
        return NULL;
    static const char *const ends[] = {"endfor", "else", NULL};
    int which;
    P->loops++;
    n->b = parse_body(P, ends, &which);
    P->loops--;
    if (!n->b)
        return NULL;
    if (which == 1) {
        if (!end_tag(P))
            return NULL;
        static const char *const ends2[] = {"endfor", NULL};
        if (!(n->d = parse_body(P, ends2, &which)))
            return NULL;
    }
    return end_tag(P) ? n : NULL;
}

static chat_ast *parse_set(parser *P, const chat_token *at) {
    chat_ast *n = node(P, AST_SET, at);
    if (!n || !parse_targets(P, n, true, NULL))
        return NULL;
    if (is_op(cur(P), CHAT_OP_ASSIGN)) {
        next(P);
        if (!(n->a = parse_tuple(P, true, false, NULL)) || !expect_block_end(P))
            return NULL;
        return n;
    }
    /* {% set x %}...{% endset %} */
    if (n->attr.s || n->n_kw != 1)
        return unexpected(P, "'='");
    if (is_op(cur(P), CHAT_OP_PIPE))
        return fail(P, cur(P), HR_ERR_UNSUPPORTED, "filters on a block set are not supported");
    if (!expect_block_end(P))
        return NULL;
    n->kind = AST_SET_BLOCK;
    static const char *const ends[] = {"endset", NULL};
    int which;
    if (!(n->b = parse_body(P, ends, &which)))
        return NULL;
    return end_tag(P) ? n : NULL;
}

static chat_ast *parse_macro(parser *P, const chat_token *at) {
    chat_ast *n = node(P, AST_MACRO, at);
    if (!n)
        return NULL;
    if (cur(P)->type != TK_NAME)
        return unexpected(P, "a macro name");
    n->name = (chat_name){cur(P)->s, cur(P)->n};
    next(P);
    if (!expect_op(P, CHAT_OP_LPAREN, "'('"))
        return NULL;
    vec params = {0};
    while (!is_op(cur(P), CHAT_OP_RPAREN)) {
        if (params.n && !expect_op(P, CHAT_OP_COMMA, "',' or ')'"))
            return NULL;
        if (is_op(cur(P), CHAT_OP_RPAREN))
            break;
        const chat_token *t = cur(P);
        if (t->type != TK_NAME)
            return unexpected(P, "a parameter name");
        if (is_name(t, "varargs") || is_name(t, "kwargs") || is_name(t, "caller"))
            return fail(P, t, HR_ERR_UNSUPPORTED, "macro parameter '%.*s' is not supported",
                        (int)t->n, t->s);
        chat_name name = {t->s, t->n};
        next(P);
        chat_ast *def = NULL;
        if (is_op(cur(P), CHAT_OP_ASSIGN)) {
            next(P);
            if (!(def = parse_expression(P, true)))
                return NULL;
        }
        if (!vec_push(P, &params, def, &name))
            return NULL;
    }
    next(P);
    if (!expect_block_end(P))
        return NULL;
    n->kw = params.v;
    n->kw_names = params.names;
    n->n_kw = params.n;
    static const char *const ends[] = {"endmacro", NULL};
    int which, loops = P->loops;
    P->loops = 0; /* break inside a macro does not reach an outer loop */
    n->b = parse_body(P, ends, &which);
    P->loops = loops;
    if (!n->b)
        return NULL;
    return end_tag(P) ? n : NULL;
}

static chat_ast *parse_filter_block(parser *P, const chat_token *at) {
    chat_ast *n = node(P, AST_FILTER_BLOCK, at);
    if (!n)
        return NULL;
    /* the filters apply to the rendered body, standing in for a NULL operand */
    chat_ast *chain = NULL;
    do {
        if (chain && !is_op(cur(P), CHAT_OP_PIPE))
            break;
        if (!chain) { /* the first name has no '|' before it: fake one */
            P->i--;
        }
        chain = parse_filter(P, chain);
        if (!chain)
            return NULL;
    } while (is_op(cur(P), CHAT_OP_PIPE));
    if (!expect_block_end(P))
        return NULL;
    n->a = chain;
    static const char *const ends[] = {"endfilter", NULL};
    int which;
    if (!(n->b = parse_body(P, ends, &which)))
        return NULL;
    return end_tag(P) ? n : NULL;
}

static chat_ast *parse_statement(parser *P) {
    next(P); /* {% */
    const chat_token *t = cur(P);
    if (t->type != TK_NAME)
        return unexpected(P, "a tag name after '{%'");
    if (!enter(P))
        return NULL;
    next(P);
    chat_ast *n = NULL;
    if (is_name(t, "if")) {
        n = parse_if(P, t);
    } else if (is_name(t, "for")) {
        n = parse_for(P, t);
    } else if (is_name(t, "set")) {
        n = parse_set(P, t);
    } else if (is_name(t, "macro")) {
        n = parse_macro(P, t);
    } else if (is_name(t, "filter")) {
        n = parse_filter_block(P, t);
    } else if (is_name(t, "generation")) {
        /* transformers' assistant-mask tag: renders its body unchanged */
        static const char *const ends[] = {"endgeneration", NULL};
        int which;
        if (expect_block_end(P) && (n = parse_body(P, ends, &which)) && !end_tag(P))
            n = NULL;
    } else if (is_name(t, "break") || is_name(t, "continue")) {
        if (!P->loops) {
            n = fail(P, t, HR_ERR_FORMAT, "'%.*s' outside a for loop", (int)t->n, t->s);
        } else if ((n = node(P, is_name(t, "break") ? AST_BREAK : AST_CONTINUE, t)) &&
                   !expect_block_end(P)) {
            n = NULL;
        }
    } else {
        static const char *const unsupported[] = {"include",    "import", "from",      "extends",
                                                  "block",      "call",   "with",      "do",
                                                  "autoescape", "trans",  "pluralize", NULL};
        for (int k = 0; unsupported[k]; k++)
            if (is_name(t, unsupported[k]))
                n = fail(P, t, HR_ERR_UNSUPPORTED, "the '%s' tag is not supported", unsupported[k]);
        if (P->st == HR_OK)
            n = fail(P, t, HR_ERR_FORMAT, "unexpected tag '%.*s'", (int)(t->n < 40 ? t->n : 40),
                     t->s);
    }
    leave(P);
    return n;
}

/* Statements until EOF (ends == NULL) or "{% <one of ends>"; *which is the
 * index of the end met. */
static chat_ast *parse_body(parser *P, const char *const *ends, int *which) {
    const chat_token *start = cur(P);
    chat_ast *body = node(P, AST_BODY, start);
    if (!body)
        return NULL;
    vec stmts = {0};
    for (;;) {
        const chat_token *t = cur(P);
        if (t->type == TK_EOF) {
            if (ends) {
                char want[160] = "";
                for (int k = 0; ends[k]; k++)
                    snprintf(want + strlen(want), sizeof want - strlen(want), "%s'{%% %s %%}'",
                             k ? " or " : "", ends[k]);
                return fail(P, start, HR_ERR_FORMAT,
                            "block opened here is never closed: "
                            "expected %s",
                            want);
            }
            break;
        }
        chat_ast *s = NULL;
        if (t->type == TK_TEXT) {
            if ((s = node(P, AST_TEXT, t)))
                s->val = cv_str(t->s, t->n);
            next(P);
        } else if (t->type == TK_VAR_BEGIN) {
            next(P);
            s = node(P, AST_OUTPUT, t);
            if (s && !(s->a = parse_tuple(P, true, false, NULL)))
                return NULL;
            if (s && cur(P)->type != TK_VAR_END)
                return unexpected(P, "'}}'");
            next(P);
        } else if (t->type == TK_BLOCK_BEGIN) {
            const chat_token *name = peek(P, 1);
            if (ends && name->type == TK_NAME)
                for (int k = 0; ends[k]; k++)
                    if (is_name(name, ends[k])) {
                        *which = k;
                        body->kids = stmts.v;
                        body->n_kids = stmts.n;
                        return body;
                    }
            static const char *const closers[] = {
                "endif",         "endfor", "endset", "endmacro", "endfilter",
                "endgeneration", "elif",   "else",   "endraw",   NULL};
            for (int k = 0; closers[k]; k++)
                if (is_name(name, closers[k]))
                    return fail(P, name, HR_ERR_FORMAT, "unexpected '{%% %s %%}'", closers[k]);
            s = parse_statement(P);
        } else {
            return unexpected(P, "template text or a tag");
        }
        if (!s || !vec_push(P, &stmts, s, NULL))
            return NULL;
    }
    body->kids = stmts.v;
    body->n_kids = stmts.n;
    return body;
}

hr_status chat_parse(const chat_token *toks, size_t n_toks, chat_arena *a, chat_ast **out,
                     hr_error *err) {
    parser P = {.t = toks, .n = n_toks, .a = a, .err = err};
    chat_ast *root = parse_body(&P, NULL, NULL);
    if (!root)
        return P.st != HR_OK ? P.st : hr_err_set(err, HR_ERR_FORMAT, "chat template: parse error");
    *out = root;
    return HR_OK;
}
