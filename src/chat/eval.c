/*
 * eval.c — runs a template: statements append to the output (expressions
 * are expr.c's). Rendering a template is chat_template_render (template.c)
 * calling chat_eval_template here.
 *
 * Scopes follow what jinja2's compiler gives: a for loop gets a scope of its
 * own that starts afresh on every iteration (a `set` inside a loop never
 * leaks out, nor into the next iteration), `if` has none, a macro body runs
 * in a scope whose parent is where the macro was defined. namespace()
 * objects are the one way to carry a value out of a loop, as in Jinja.
 *
 * Errors: every function returns false after chat_fail recorded the first
 * error; callers only propagate. Time, memory, output and recursion are
 * bounded (chat_internal.h).
 */
#include "chat/chat_internal.h"

#include "util/alloc.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------- errors */

bool chat_fail(chat_ctx *c, const chat_ast *at, hr_status st, const char *fmt, ...) {
    if (c->st != HR_OK)
        return false;
    if (!at)
        at = c->at;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (at)
        c->st = hr_err_set(c->err, st, "chat template %d:%d: %s", at->line, at->col, msg);
    else
        c->st = hr_err_set(c->err, st, "chat template: %s", msg);
    return false;
}

bool chat_fail_mem(chat_ctx *c, const chat_ast *at) {
    if (c->arena.failed == CHAT_ARENA_LIMIT)
        return chat_fail(c, at, HR_ERR_INVALID, "rendering needs more than the %zu MiB allowed",
                         CHAT_MAX_MEMORY_BYTES >> 20);
    return chat_fail(c, at, HR_ERR_NOMEM, "out of memory");
}

chat_arena *chat_ctx_arena(chat_ctx *c) { return &c->arena; }
int64_t chat_ctx_now(const chat_ctx *c) { return c->now; }

bool chat_enter(chat_ctx *c, const chat_ast *at) {
    if (++c->value_depth > CHAT_MAX_NESTING) {
        c->value_depth--;
        return chat_fail(c, at, HR_ERR_INVALID, "values nested deeper than %d levels",
                         CHAT_MAX_NESTING);
    }
    return true;
}
void chat_leave(chat_ctx *c) { c->value_depth--; }

/* ---------------------------------------------------------------- output */

static bool emit(chat_ctx *c, const chat_ast *at, const char *s, size_t n) {
    if (n > CHAT_MAX_OUTPUT_BYTES - c->out_n)
        return chat_fail(c, at, HR_ERR_INVALID, "output longer than the %zu MiB allowed",
                         CHAT_MAX_OUTPUT_BYTES >> 20);
    if (c->out_cap - c->out_n < n + 1) {
        size_t cap = c->out_cap ? c->out_cap : 4096;
        while (cap - c->out_n < n + 1)
            cap *= 2; /* stays far below SIZE_MAX: the output is capped */
        char *p = hr_realloc(c->out, cap);
        if (!p)
            return chat_fail(c, at, HR_ERR_NOMEM, "out of memory");
        c->out = p;
        c->out_cap = cap;
    }
    if (n)
        memcpy(c->out + c->out_n, s, n);
    c->out_n += n;
    c->out[c->out_n] = '\0';
    return true;
}

/* ---------------------------------------------------------------- scopes */

static chat_scope *scope_new(chat_ctx *c, chat_scope *parent) {
    chat_scope *s = chat_arena_alloc(&c->arena, sizeof *s);
    if (!s) {
        chat_fail_mem(c, NULL);
        return NULL;
    }
    memset(s, 0, sizeof *s);
    s->parent = parent;
    return s;
}

static bool name_eq(chat_name a, const char *s, size_t n) {
    return a.n == n && memcmp(a.s, s, n) == 0;
}

cv *chat_lookup(chat_ctx *c, const char *s, size_t n) {
    for (chat_scope *sc = c->scope; sc; sc = sc->parent)
        for (size_t k = sc->n; k-- > 0;)
            if (name_eq(sc->v[k].name, s, n))
                return &sc->v[k].val;
    return NULL;
}

static bool chat_scope_set(chat_ctx *c, chat_scope *sc, const char *s, size_t n, cv val) {
    for (size_t k = 0; k < sc->n; k++)
        if (name_eq(sc->v[k].name, s, n)) {
            sc->v[k].val = val;
            return true;
        }
    if (sc->n == sc->cap) {
        size_t cap = sc->cap ? sc->cap * 2 : 8;
        chat_var *v = chat_arena_alloc(&c->arena, cap * sizeof *v);
        if (!v)
            return chat_fail_mem(c, NULL);
        if (sc->n)
            memcpy(v, sc->v, sc->n * sizeof *v);
        sc->v = v;
        sc->cap = cap;
    }
    sc->v[sc->n++] = (chat_var){{s, n}, val};
    return true;
}

static bool assign(chat_ctx *c, chat_name name, cv val) {
    return chat_scope_set(c, c->scope, name.s, name.n, val);
}

static bool exec_body(chat_ctx *c, const chat_ast *body);

/* Renders body into a string value instead of the output. */
static bool capture(chat_ctx *c, const chat_ast *body, cv *out) {
    size_t start = c->out_n;
    if (!exec_body(c, body))
        return false;
    bool ok = cv_new_str(c, body, c->out ? c->out + start : "", c->out_n - start, out);
    c->out_n = start;
    if (c->out)
        c->out[start] = '\0';
    return ok;
}

static bool call_macro(chat_ctx *c, const chat_ast *at, const cv *fn, const cv *args, int n_args,
                       const chat_name *kw_names, const cv *kw, int n_kw, cv *out) {
    const chat_ast *m = fn->macro;
    if (n_args > m->n_kw)
        return chat_fail(c, at, HR_ERR_INVALID, "macro '%.*s' takes not more than %d argument(s)",
                         (int)m->name.n, m->name.s, m->n_kw);
    if (c->call_depth >= CHAT_MAX_CALL_DEPTH)
        return chat_fail(c, at, HR_ERR_INVALID, "macro calls nested deeper than %d",
                         CHAT_MAX_CALL_DEPTH);
    chat_scope *sc = scope_new(c, fn->scope);
    if (!sc)
        return false;
    for (int k = 0; k < n_kw; k++) {
        int p = 0;
        while (p < m->n_kw && !name_eq(m->kw_names[p], kw_names[k].s, kw_names[k].n))
            p++;
        if (p == m->n_kw)
            return chat_fail(c, at, HR_ERR_INVALID, "macro '%.*s' has no parameter '%.*s'",
                             (int)m->name.n, m->name.s, (int)kw_names[k].n, kw_names[k].s);
        if (p < n_args)
            return chat_fail(c, at, HR_ERR_INVALID, "macro '%.*s' got '%.*s' twice", (int)m->name.n,
                             m->name.s, (int)kw_names[k].n, kw_names[k].s);
    }
    chat_scope *saved = c->scope;
    int saved_ctl = c->loop_ctl;
    c->scope = sc;
    c->call_depth++;
    bool ok = true;
    for (int p = 0; ok && p < m->n_kw; p++) {
        cv v = chat_undef_named(m->kw_names[p]);
        if (p < n_args) {
            v = args[p];
        } else {
            int k = 0;
            while (k < n_kw && !name_eq(m->kw_names[p], kw_names[k].s, kw_names[k].n))
                k++;
            if (k < n_kw)
                v = kw[k];
            else if (m->kw[p])
                ok = chat_eval(c, m->kw[p], &v);
        }
        ok = ok && chat_scope_set(c, sc, m->kw_names[p].s, m->kw_names[p].n, v);
    }
    ok = ok && capture(c, m->b, out);
    c->call_depth--;
    c->scope = saved;
    c->loop_ctl = saved_ctl;
    return ok;
}

bool chat_call_value(chat_ctx *c, const chat_ast *at, const cv *fn, const cv *args, int n_args,
                     const chat_name *kw_names, const cv *kw, int n_kw, cv *out) {
    chat_args a = {args, n_args, kw_names, kw, n_kw};
    switch ((cv_type)fn->type) {
    case CV_MACRO: return call_macro(c, at, fn, args, n_args, kw_names, kw, n_kw, out);
    case CV_FUNC: return chat_call_global(c, at, (int)fn->i, &a, out);
    case CV_METHOD: return chat_call_method(c, at, fn->self, fn->s, fn->n, &a, out);
    case CV_UNDEF: return chat_undefined_error(c, at, fn);
    default: break;
    }
    return chat_fail(c, at, HR_ERR_INVALID, "'%s' object is not callable", cv_type_name(fn));
}

/* Python's index normalization: negative counts from the end. */
/* ---------------------------------------------------------------- statements */

static bool exec(chat_ctx *c, const chat_ast *n);

static bool step(chat_ctx *c, const chat_ast *at) {
    if (++c->steps > CHAT_MAX_STEPS)
        return chat_fail(c, at, HR_ERR_INVALID,
                         "more than %d steps (statements and loop "
                         "iterations): a runaway loop?",
                         CHAT_MAX_STEPS);
    return true;
}

static bool exec_body(chat_ctx *c, const chat_ast *body) {
    for (int k = 0; k < body->n_kids; k++) {
        if (!exec(c, body->kids[k]))
            return false;
        if (c->loop_ctl)
            return true;
    }
    return true;
}

/* Binds one value to the targets of a for or set (unpacking tuples). */
static bool bind_targets(chat_ctx *c, const chat_ast *n, const cv *v) {
    if (!n->negate)
        return assign(c, n->kw_names[0], *v);
    cv_list *items;
    if (v->type == CV_UNDEF || !cv_iterate(c, n, v, &items)) {
        if (v->type == CV_UNDEF)
            return chat_undefined_error(c, n, v);
        return false;
    }
    if (items->n != (size_t)n->n_kw)
        return chat_fail(c, n, HR_ERR_INVALID, "%s values to unpack (expected %d, got %zu)",
                         items->n > (size_t)n->n_kw ? "too many" : "not enough", n->n_kw, items->n);
    for (int k = 0; k < n->n_kw; k++)
        if (!assign(c, n->kw_names[k], items->v[k]))
            return false;
    return true;
}

static bool exec_for(chat_ctx *c, const chat_ast *n) {
    cv seq;
    cv_list *items;
    if (!chat_eval(c, n->a, &seq))
        return false;
    if (seq.type == CV_NONE || !cv_iterate(c, n->a, &seq, &items))
        return seq.type == CV_NONE
                   ? chat_fail(c, n->a, HR_ERR_INVALID, "'NoneType' object is not iterable")
                   : false;
    chat_scope *outer = c->scope, *sc = scope_new(c, outer);
    if (!sc)
        return false;
    c->scope = sc;
    bool ok = true;
    if (n->c) { /* the loop's `if`: filtered first, so loop.length counts what is kept */
        cv_list *kept = cv_list_new(&c->arena, 0);
        ok = kept != NULL || chat_fail_mem(c, n);
        for (size_t k = 0; ok && k < items->n; k++) {
            cv cond;
            sc->n = 0;
            ok = step(c, n) && bind_targets(c, n, &items->v[k]) && chat_eval(c, n->c, &cond);
            if (ok && cv_truthy(&cond) && !cv_list_push(&c->arena, kept, items->v[k]))
                ok = chat_fail_mem(c, n);
        }
        items = kept;
    }
    cv_loop *loop = ok ? chat_arena_alloc(&c->arena, sizeof *loop) : NULL;
    if (ok && !loop)
        ok = chat_fail_mem(c, n);
    if (ok) {
        loop->items = items;
        loop->cycle_pos = 0;
    }
    for (size_t k = 0; ok && k < items->n; k++) {
        sc->n = 0; /* each iteration starts afresh */
        loop->i = k;
        cv lv = {.type = CV_LOOP};
        lv.loop = loop;
        ok = step(c, n) && bind_targets(c, n, &items->v[k]) &&
             assign(c, (chat_name){"loop", 4}, lv) && exec_body(c, n->b);
        if (c->loop_ctl == CTL_BREAK) {
            c->loop_ctl = CTL_NONE;
            break;
        }
        c->loop_ctl = CTL_NONE;
    }
    if (ok && items->n == 0 && n->d) {
        sc->n = 0;
        ok = exec_body(c, n->d);
    }
    c->scope = outer;
    return ok;
}

static bool exec(chat_ctx *c, const chat_ast *n) {
    if (!step(c, n))
        return false;
    c->at = n;
    switch ((chat_ast_kind)n->kind) {
    case AST_TEXT: return emit(c, n, n->val.s, n->val.n);
    case AST_OUTPUT: {
        cv v;
        if (!chat_eval(c, n->a, &v))
            return false;
        if (v.type == CV_STR)
            return emit(c, n, v.s, v.n);
        chat_buf b;
        chat_buf_init(&b, &c->arena);
        return cv_str_into(c, n, &v, &b) && emit(c, n, b.p ? b.p : "", b.n);
    }
    case AST_IF: {
        cv cond;
        if (!chat_eval(c, n->a, &cond))
            return false;
        if (cv_truthy(&cond))
            return exec_body(c, n->b);
        if (!n->c)
            return true;
        return n->c->kind == AST_IF ? exec(c, n->c) : exec_body(c, n->c);
    }
    case AST_FOR: return exec_for(c, n);
    case AST_SET: {
        cv v;
        if (!chat_eval(c, n->a, &v))
            return false;
        if (n->attr.s) {
            cv *ns = chat_lookup(c, n->name.s, n->name.n);
            if (!ns || ns->type != CV_NS)
                return chat_fail(c, n, HR_ERR_INVALID,
                                 "cannot assign attribute on non-namespace object '%.*s'",
                                 (int)n->name.n, n->name.s);
            if (n->attr.n && n->attr.s[0] == '_')
                return chat_fail(c, n, HR_ERR_INVALID,
                                 "namespace attributes cannot start with '_' (transformers)");
            return cv_dict_set(c, ns->dict, cv_str(n->attr.s, n->attr.n), v);
        }
        return bind_targets(c, n, &v);
    }
    case AST_SET_BLOCK: {
        cv v;
        return capture(c, n->b, &v) && assign(c, n->kw_names[0], v);
    }
    case AST_MACRO: {
        cv m = {.type = CV_MACRO};
        m.macro = n;
        m.scope = c->scope;
        return assign(c, n->name, m);
    }
    case AST_FILTER_BLOCK: {
        cv body, v;
        if (!capture(c, n->b, &body) || !chat_filter_chain(c, n->a, &body, &v))
            return false;
        chat_buf b;
        chat_buf_init(&b, &c->arena);
        return cv_str_into(c, n, &v, &b) && emit(c, n, b.p ? b.p : "", b.n);
    }
    case AST_BREAK: c->loop_ctl = CTL_BREAK; return true;
    case AST_CONTINUE: c->loop_ctl = CTL_CONTINUE; return true;
    case AST_BODY: return exec_body(c, n);
    default: break;
    }
    return chat_fail(c, n, HR_ERR_FORMAT, "an expression where a statement belongs");
}

/* ---------------------------------------------------------------- render */

hr_status chat_eval_template(const chat_ast *root, const chat_eval_var *vars, int n_vars,
                             int64_t now, char **out, size_t *out_len, hr_error *err) {
    chat_ctx *c = hr_calloc(1, sizeof *c);
    if (!c)
        return hr_err_set(err, HR_ERR_NOMEM, "chat template: out of memory");
    c->err = err;
    c->now = now;
    chat_arena_init(&c->arena, CHAT_MAX_MEMORY_BYTES);
    chat_scope *globals = scope_new(c, NULL);
    bool ok = globals != NULL;
    for (int k = 0; ok && k < CHAT_FN_COUNT; k++) {
        cv f = {.type = CV_FUNC};
        f.i = k;
        ok = chat_scope_set(c, globals, chat_fn_names[k], strlen(chat_fn_names[k]), f);
    }
    chat_scope *top = ok ? scope_new(c, globals) : NULL;
    ok = ok && top;
    for (int k = 0; ok && k < n_vars; k++) {
        cv v;
        ok = vars[k].make(c, vars[k].arg, &v) &&
             chat_scope_set(c, top, vars[k].name, strlen(vars[k].name), v);
    }
    if (ok) {
        c->scope = top;
        ok = exec_body(c, root);
    }
    /* the output buffer must exist even when empty */
    if (ok && !c->out)
        ok = emit(c, root, "", 0);
    hr_status st = ok ? HR_OK : c->st;
    if (ok) {
        *out = c->out;
        if (out_len)
            *out_len = c->out_n;
    } else {
        hr_free(c->out);
    }
    chat_arena_free(&c->arena);
    hr_free(c);
    return st;
}
