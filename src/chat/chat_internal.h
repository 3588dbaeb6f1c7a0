/*
 * chat_internal.h — what the files of src/chat/ share.
 *
 * Pipeline: lexer.c turns the template source into tokens (text runs, tag
 * delimiters, expression tokens), applying Jinja's whitespace rules
 * (trim_blocks, lstrip_blocks, '-' and '+' markers); parser.c builds an AST
 * from them; eval.c runs the statements and expr.c the expressions, on the
 * values of value.c, with the filters of filters.c, the tests of tests.c,
 * the str methods of strings.c and the attributes, methods and globals of
 * builtins.c. template.c is the API. Everything a parse or a render
 * allocates comes from one arena (util.c), freed at once: no value has an
 * owner, and an error anywhere just unwinds.
 *
 * The subset, chosen from what the chat templates of the common model
 * families use (Llama 2/3/3.1/3.2, Mistral, ChatML/Qwen, SmolLM, Zephyr,
 * Phi-3, Gemma, DeepSeek, Command-R, Granite...):
 *   statements  if/elif/else, for (tuple targets, `if` filter, else,
 *               loop.*, break/continue), set (names, tuples, ns.attr,
 *               block set), macro (positional/keyword params, defaults),
 *               filter blocks, raw, generation (transformers' tag), comments
 *   expressions literals (str, int, float, bool, none, list, tuple, dict),
 *               names, .attr, [index], [a:b:c], calls with keyword args,
 *               + - * / // % ** ~, comparisons (chained), in / not in,
 *               and/or/not, is [not] test, x if c else y, filters
 *   filters     abs attr capitalize count default/d first float int items
 *               join last length list lower map max min reject rejectattr
 *               replace reverse round safe select selectattr sort string
 *               sum title tojson trim unique upper wordcount indent
 *   tests       defined undefined none boolean true false string number
 *               integer float mapping iterable sequence callable sameas
 *               eq/equalto/== ne/!= lt/< le/<= gt/> ge/>= in odd even
 *               divisibleby lower upper
 *   methods     str: strip lstrip rstrip split rsplit splitlines startswith
 *               endswith upper lower title capitalize swapcase replace find
 *               rfind index count join isdigit isalpha isalnum isspace
 *               islower isupper; dict: items keys values get; loop: cycle
 *   globals     range namespace dict raise_exception strftime_now
 * Not supported (a clear error naming it): include/import/extends/block,
 * call blocks, with, *args and **kwargs, macro varargs/caller, recursive
 * loops, loop.changed, '%' string formatting, Python integers beyond 64
 * bits, mutating methods (the sandbox refuses them too).
 * Known differences from jinja2, none met by real chat templates: case
 * mapping (upper, lower, title, capitalize) changes ASCII letters only;
 * range() is a list (prints as [0, 1], Python prints range(0, 2)); filters
 * that jinja2 makes lazy generators (unique, reverse, items, select...)
 * give lists, so printing one or testing it before `| list` differs; Jinja
 * folds constant expressions at compile time, turning errors such as
 * (7)[1:] into undefined, where here they stay errors.
 *
 * Limits are the CHAT_MAX_* below: exceeding one is an error, never a crash.
 */
#ifndef HR_CHAT_INTERNAL_H
#define HR_CHAT_INTERNAL_H

#include "chat/template.h"
#include "util/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Real templates are 0.2-20 KB; 1 MiB is generous and bounds the parse. */
#define CHAT_MAX_SOURCE_BYTES ((size_t)1 << 20)
/* Parser recursion (nested brackets, operators, blocks) and values nested
 * in values (repr, tojson and == walk them recursively): bounds C stack use
 * at a few hundred bytes a level. Real templates nest under 15 deep. */
#define CHAT_MAX_NESTING 128
/* Macros calling macros (recursion included). */
#define CHAT_MAX_CALL_DEPTH 64
/* Rendered text: 64 MiB is ~16M tokens, far past any context window. */
#define CHAT_MAX_OUTPUT_BYTES ((size_t)64 << 20)
/* Memory of one render (strings, lists, scopes). */
#define CHAT_MAX_MEMORY_BYTES ((size_t)256 << 20)
/* Statements executed plus loop iterations of one render: bounds the time
 * a hostile template can take (about a second at this count). */
#define CHAT_MAX_STEPS 20000000
/* Messages a render accepts. */
#define CHAT_MAX_MESSAGES 1000000

/* ---------------------------------------------------------------- arena */

typedef struct chat_chunk chat_chunk;
typedef struct {
    chat_chunk *head;
    size_t used_bytes;  /* all chunks together */
    size_t limit_bytes; /* 0: no limit */
    int failed;         /* CHAT_ARENA_NOMEM or CHAT_ARENA_LIMIT after a NULL */
} chat_arena;

enum { CHAT_ARENA_OK, CHAT_ARENA_NOMEM, CHAT_ARENA_LIMIT };

void chat_arena_init(chat_arena *a, size_t limit_bytes);
void *chat_arena_alloc(chat_arena *a, size_t n_bytes); /* 8-aligned, NULL on failure */
void chat_arena_free(chat_arena *a);

/* A growing byte string inside an arena (old blocks are left behind: the
 * waste is at most the final size). */
typedef struct {
    chat_arena *a;
    char *p;
    size_t n, cap;
    bool failed;
} chat_buf;

void chat_buf_init(chat_buf *b, chat_arena *a);
bool chat_buf_put(chat_buf *b, const char *s, size_t n);
bool chat_buf_putc(chat_buf *b, char c);
bool chat_buf_puts(chat_buf *b, const char *s);
bool chat_buf_printf(chat_buf *b, const char *fmt, ...) HR_PRINTF(2, 3);

/* memcpy that accepts NULL pointers when n is 0 (empty lists have none). */
static inline void chat_copy(void *dst, const void *src, size_t n) {
    if (n)
        memcpy(dst, src, n);
}

/* ---------------------------------------------------------------- UTF-8 */

/* Decodes one code point of valid UTF-8 (checked at the input boundary). */
size_t chat_utf8_next(const char *s, size_t n, uint32_t *cp);
size_t chat_utf8_encode(uint32_t cp, char *out);
/* Byte offset of the first invalid sequence, or n when s is valid. */
size_t chat_utf8_check(const char *s, size_t n);
size_t chat_utf8_count(const char *s, size_t n);
/* Python's str.isspace for one code point. */
bool chat_py_space(uint32_t cp);
/* strtod that ignores LC_NUMERIC (Python does). */
double chat_strtod(const char *s, char **end);

/* ---------------------------------------------------------------- values */

typedef enum {
    CV_UNDEF, /* Jinja's default Undefined: "", false, empty; s = what was missing */
    CV_NONE,
    CV_BOOL,
    CV_INT,
    CV_FLOAT,
    CV_STR,    /* s, n: UTF-8, not NUL-terminated */
    CV_LIST,   /* list (CV_F_TUPLE: a tuple) */
    CV_DICT,   /* insertion-ordered */
    CV_NS,     /* namespace(): a dict whose attributes can be set */
    CV_FUNC,   /* a global function: i = CHAT_FN_* */
    CV_MACRO,  /* macro: macro = its node, scope = where it was defined */
    CV_METHOD, /* bound method: self, s/n = method name */
    CV_LOOP,   /* the loop variable of a for */
} cv_type;

#define CV_F_TUPLE 1u

typedef struct cv_list cv_list;
typedef struct cv_dict cv_dict;
typedef struct cv_loop cv_loop;
typedef struct chat_ast chat_ast;
typedef struct chat_scope chat_scope;
typedef struct cv cv;

struct cv {
    uint8_t type;
    uint8_t flags;
    union {
        bool b;
        int64_t i;
        double f;
        size_t n; /* CV_STR, CV_METHOD, CV_UNDEF: bytes at s */
    };
    union {
        const char *s;
        cv_list *list;
        cv_dict *dict;
        cv_loop *loop;
        const chat_ast *macro;
    };
    union {
        chat_scope *scope; /* CV_MACRO */
        const cv *self;    /* CV_METHOD */
    };
};

struct cv_list {
    cv *v;
    size_t n, cap;
};

struct cv_dict {
    cv *keys, *vals;
    size_t n, cap;
};

struct cv_loop {
    const cv_list *items; /* after the loop's `if` filter */
    size_t i;             /* index0 */
    size_t cycle_pos;
};

static inline cv cv_undef(const char *what) {
    cv v = {.type = CV_UNDEF};
    v.s = what;
    v.n = what ? strlen(what) : 0;
    return v;
}
static inline cv cv_none(void) { return (cv){.type = CV_NONE}; }
static inline cv cv_bool(bool b) {
    cv v = {.type = CV_BOOL};
    v.b = b;
    return v;
}
static inline cv cv_int(int64_t i) {
    cv v = {.type = CV_INT};
    v.i = i;
    return v;
}
static inline cv cv_float(double f) {
    cv v = {.type = CV_FLOAT};
    v.f = f;
    return v;
}
static inline cv cv_str(const char *s, size_t n) {
    cv v = {.type = CV_STR};
    v.s = s;
    v.n = n;
    return v;
}

/* ---------------------------------------------------------------- lexer */

typedef enum {
    TK_EOF,
    TK_TEXT,        /* s, n: template text after whitespace control */
    TK_VAR_BEGIN,   /* {{ */
    TK_VAR_END,     /* }} */
    TK_BLOCK_BEGIN, /* {% */
    TK_BLOCK_END,   /* %} */
    TK_NAME,
    TK_STRING, /* s, n: the decoded value */
    TK_INT,
    TK_FLOAT,
    TK_OP, /* op: CHAT_OP_* */
} chat_tk_type;

typedef enum {
    CHAT_OP_ADD,
    CHAT_OP_SUB,
    CHAT_OP_MUL,
    CHAT_OP_DIV,
    CHAT_OP_FLOORDIV,
    CHAT_OP_MOD,
    CHAT_OP_POW,
    CHAT_OP_TILDE,
    CHAT_OP_LBRACKET,
    CHAT_OP_RBRACKET,
    CHAT_OP_LPAREN,
    CHAT_OP_RPAREN,
    CHAT_OP_LBRACE,
    CHAT_OP_RBRACE,
    CHAT_OP_EQ,
    CHAT_OP_NE,
    CHAT_OP_GT,
    CHAT_OP_GE,
    CHAT_OP_LT,
    CHAT_OP_LE,
    CHAT_OP_ASSIGN,
    CHAT_OP_DOT,
    CHAT_OP_COLON,
    CHAT_OP_PIPE,
    CHAT_OP_COMMA,
    CHAT_OP_SEMICOLON,
    /* not tokens: operators the parser adds */
    CHAT_OP_IN,
    CHAT_OP_NOT_IN,
    CHAT_OP_NOT,
    CHAT_OP_NEG,
    CHAT_OP_POS,
} chat_op;

typedef struct {
    uint8_t type;
    uint8_t op;
    int line, col;
    const char *s;
    size_t n;
    int64_t i;
    double f;
} chat_token;

/* Tokens of a whole template (into the arena); src is the newline-normalized
 * source, which the tokens point into. */
hr_status chat_lex(const char *src, size_t len, chat_arena *a, chat_token **out, size_t *n_out,
                   hr_error *err);

/* ---------------------------------------------------------------- AST */

typedef enum {
    /* expressions */
    AST_CONST,   /* val */
    AST_NAME,    /* name */
    AST_LIST,    /* kids: items */
    AST_TUPLE,   /* kids: items */
    AST_DICT,    /* kids: key, value, key, value... */
    AST_GETATTR, /* a . name */
    AST_GETITEM, /* a [ b ]; b may be AST_SLICE */
    AST_SLICE,   /* a : b : c, each may be NULL */
    AST_CALL,    /* a ( kids, kw ) */
    AST_FILTER,  /* a | name ( kids, kw ); op = filter id */
    AST_TEST,    /* a is [not] name ( kids ); op = test id, negate */
    AST_UNARY,   /* op a */
    AST_BINARY,  /* a op b */
    AST_AND,     /* a and b */
    AST_OR,      /* a or b */
    AST_COMPARE, /* kids[0] ops[0] kids[1] ops[1] kids[2]... */
    AST_COND,    /* a if b else c (c may be NULL) */
    /* statements */
    AST_BODY,         /* kids: statements */
    AST_TEXT,         /* val (a string) */
    AST_OUTPUT,       /* {{ a }} */
    AST_IF,           /* if a: b (AST_BODY) else c (AST_BODY or AST_IF or NULL) */
    AST_FOR,          /* for targets in a [if c]: b else d */
    AST_SET,          /* set targets = a; or name.attr = a (attr set) */
    AST_SET_BLOCK,    /* set name: b rendered */
    AST_MACRO,        /* macro name(params = kw defaults): b */
    AST_FILTER_BLOCK, /* filter a (an AST_FILTER whose a is NULL): b */
    AST_BREAK,
    AST_CONTINUE,
} chat_ast_kind;

typedef struct {
    const char *s;
    size_t n;
} chat_name;

struct chat_ast {
    uint8_t kind;
    uint8_t op;
    bool negate;
    int line, col;
    cv val;
    chat_name name; /* names; AST_SET with attr: the namespace variable */
    chat_name attr; /* AST_SET of ns.attr */
    chat_ast *a, *b, *c, *d;
    chat_ast **kids; /* arguments, items, statements */
    int n_kids;
    uint8_t *ops;        /* AST_COMPARE: n_kids - 1 operators */
    chat_name *kw_names; /* keyword arguments, macro parameters, for/set targets */
    chat_ast **kw;       /* their values (NULL: a parameter without default) */
    int n_kw;
};

hr_status chat_parse(const chat_token *toks, size_t n_toks, chat_arena *a, chat_ast **out,
                     hr_error *err);

struct chat_template {
    chat_arena arena; /* the normalized source, tokens and AST */
    chat_ast *root;
};

/* ---------------------------------------------------------------- eval */

typedef struct chat_ctx chat_ctx;

typedef struct {
    chat_name name;
    cv val;
} chat_var;

struct chat_scope {
    chat_scope *parent;
    chat_var *v;
    size_t n, cap;
};

enum { CTL_NONE, CTL_BREAK, CTL_CONTINUE };

/* One render: its arena, output and the innermost scope. */
struct chat_ctx {
    chat_arena arena;
    hr_error *err;
    hr_status st;
    char *out; /* hr_realloc'd: becomes the result */
    size_t out_n, out_cap;
    chat_scope *scope;
    int value_depth, call_depth;
    int64_t steps;
    int64_t now;
    int loop_ctl;
    const chat_ast *at; /* the statement being run, for errors without a node */
};

/* The variable name is bound to, innermost scope first; NULL if none. */
cv *chat_lookup(chat_ctx *c, const char *s, size_t n);
cv chat_undef_named(chat_name name);
/* The error for using an undefined value where Jinja raises. */
bool chat_undefined_error(chat_ctx *c, const chat_ast *at, const cv *u);
/* Positional and keyword arguments of a call, filter or test node. */
bool chat_eval_args(chat_ctx *c, const chat_ast *n, cv **pos, cv **kw);
/* The filters of chain f applied to input (innermost first). */
bool chat_filter_chain(chat_ctx *c, const chat_ast *f, const cv *input, cv *out);

/* Records the first error (with the node's line:col) and returns false. */
bool chat_fail(chat_ctx *c, const chat_ast *at, hr_status st, const char *fmt, ...) HR_PRINTF(4, 5);
/* Out of memory / over the memory limit, reported from the arena's state. */
bool chat_fail_mem(chat_ctx *c, const chat_ast *at);
chat_arena *chat_ctx_arena(chat_ctx *c);
int64_t chat_ctx_now(const chat_ctx *c);
/* Enter / leave one level of value recursion (repr, tojson, compare). */
bool chat_enter(chat_ctx *c, const chat_ast *at);
void chat_leave(chat_ctx *c);
/* Calls a macro or global function with evaluated arguments. */
bool chat_call_value(chat_ctx *c, const chat_ast *at, const cv *fn, const cv *args, int n_args,
                     const chat_name *kw_names, const cv *kw, int n_kw, cv *out);

/* Evaluates an expression node. */
bool chat_eval(chat_ctx *c, const chat_ast *n, cv *out);
/* Python's `item in seq`. */
bool chat_contains(chat_ctx *c, const chat_ast *at, const cv *item, const cv *seq, bool *r);

/* A variable of the top scope, made inside the render's arena. */
typedef struct {
    const char *name;
    bool (*make)(chat_ctx *c, const void *arg, cv *out);
    const void *arg;
} chat_eval_var;

/* Runs a parsed template; *out is hr_malloc'd (NUL-terminated). */
hr_status chat_eval_template(const chat_ast *root, const chat_eval_var *vars, int n_vars,
                             int64_t now, char **out, size_t *out_len, hr_error *err);

/* ---------------------------------------------------------------- values */

const char *cv_type_name(const cv *v); /* Python's names: "str", "int", "dict"... */
bool cv_truthy(const cv *v);
/* Python ==; depth-limited through chat_enter. */
bool cv_equal(chat_ctx *c, const chat_ast *at, const cv *x, const cv *y, bool *eq);
/* Python <, <=... as -1/0/1; false (with an error) for unordered types. */
bool cv_compare(chat_ctx *c, const chat_ast *at, const cv *x, const cv *y, int *cmp);
/* Python str(v) appended to b (undefined: nothing). */
bool cv_str_into(chat_ctx *c, const chat_ast *at, const cv *v, chat_buf *b);
bool cv_repr_into(chat_ctx *c, const chat_ast *at, const cv *v, chat_buf *b);
/* str(v) as a value (strings are returned as they are). */
bool cv_to_string(chat_ctx *c, const chat_ast *at, const cv *v, cv *out);
/* Python's repr of a float. */
size_t chat_fmt_float(double d, char *out); /* out: at least 32 bytes */

typedef struct {
    int indent; /* < 0: none */
    const char *item_sep, *key_sep;
    size_t item_sep_n, key_sep_n;
    bool ensure_ascii, sort_keys;
} chat_json_opts;
bool cv_tojson_into(chat_ctx *c, const chat_ast *at, const cv *v, const chat_json_opts *o,
                    chat_buf *b, int level);

cv_list *cv_list_new(chat_arena *a, size_t cap);
bool cv_list_push(chat_arena *a, cv_list *l, cv v);
cv_dict *cv_dict_new(chat_arena *a, size_t cap);
/* Sets key (replacing an equal string/number key). */
bool cv_dict_set(chat_ctx *c, cv_dict *d, cv key, cv val);
/* Finds a key (strings and numbers compare as Python does); NULL if absent. */
cv *cv_dict_get(const cv_dict *d, const cv *key);
cv *cv_dict_get_str(const cv_dict *d, const char *s, size_t n);
static inline cv cv_of_list(cv_list *l, bool tuple) {
    cv v = {.type = CV_LIST, .flags = tuple ? CV_F_TUPLE : 0};
    v.list = l;
    return v;
}
static inline cv cv_of_dict(cv_dict *d) {
    cv v = {.type = CV_DICT};
    v.dict = d;
    return v;
}
/* The items a for loop (or list()) sees: list items, dict keys, string
 * characters; undefined gives none. Errors for other types. */
bool cv_iterate(chat_ctx *c, const chat_ast *at, const cv *v, cv_list **out);
/* len(); false with an error for types without one. */
bool cv_length(chat_ctx *c, const chat_ast *at, const cv *v, int64_t *n);
/* A new string value copied into the arena. */
bool cv_new_str(chat_ctx *c, const chat_ast *at, const char *s, size_t n, cv *out);

/* ---------------------------------------------------------------- builtins */

typedef enum {
    CHAT_FN_RANGE,
    CHAT_FN_NAMESPACE,
    CHAT_FN_DICT,
    CHAT_FN_RAISE,
    CHAT_FN_STRFTIME,
    CHAT_FN_COUNT
} chat_fn;

extern const char *const chat_fn_names[CHAT_FN_COUNT];

/* Filter / test names to ids (resolved at parse time, as Jinja does);
 * -1 when unknown. */
int chat_filter_id(const char *s, size_t n);
int chat_find_name(const char *const *names, int n_names, const char *s, size_t n);
int chat_test_id(const char *s, size_t n);
const char *chat_filter_name(int id);

typedef struct {
    const cv *pos;
    int n_pos;
    const chat_name *kw_names;
    const cv *kw;
    int n_kw;
} chat_args;

/* Argument handling shared by filters, methods and globals (builtins.c). */
bool chat_name_is(chat_name nm, const char *s);
/* Positional argument idx (-1: none) or keyword name (NULL: none); NULL if absent. */
const cv *chat_arg(const chat_args *a, int idx, const char *name);
/* At most max_pos positional arguments, and keywords only from names. */
bool chat_check_args(chat_ctx *c, const chat_ast *at, const chat_args *a, int max_pos,
                     const char *const *names, const char *what);
bool chat_want_str(chat_ctx *c, const chat_ast *at, const cv *v, const char *what);
bool chat_want_int(chat_ctx *c, const chat_ast *at, const cv *v, const char *what, int64_t *out);
/* The buffer's text as a string value. */
bool chat_str_result(chat_ctx *c, const chat_ast *at, chat_buf *b, cv *out);
/* dict.items() (what 0), keys() (1), values() (2) as a list. */
bool chat_dict_items(chat_ctx *c, const chat_ast *at, const cv_dict *d, int what, cv *out);

/* String operations (strings.c). */
enum { CHAT_CASE_UPPER, CHAT_CASE_LOWER, CHAT_CASE_SWAP, CHAT_CASE_TITLE, CHAT_CASE_CAPITALIZE };
bool chat_ascii_cased(uint32_t cp);
bool chat_change_case(chat_ctx *c, const chat_ast *at, const cv *s, int how, cv *out);
bool chat_jinja_title(chat_ctx *c, const chat_ast *at, const cv *s, cv *out);
/* strip: which 1 left, 2 right, 3 both; chars NULL strips whitespace. */
cv chat_strip(const cv *s, const cv *chars, int which);
bool chat_strip_args(chat_ctx *c, const chat_ast *at, const chat_args *a, const char *what,
                     const cv **chars);
size_t chat_find_bytes(const cv *s, size_t from, const cv *sub); /* SIZE_MAX: absent */
bool chat_splitlines(chat_ctx *c, const chat_ast *at, const char *s, size_t n, bool keepends,
                     cv_list **out);
bool chat_replace(chat_ctx *c, const chat_ast *at, const cv *s, const cv *old, const cv *rep,
                  int64_t count, cv *out);
bool chat_no_args(chat_ctx *c, const chat_ast *at, const chat_args *a, const char *what);
/* str.isdigit (0), isalpha (1), isalnum (2), isspace (3), islower (4), isupper (5). */
bool chat_str_is(const cv *s, int kind);
bool chat_str_method(chat_ctx *c, const chat_ast *at, const cv *s, chat_name m, const chat_args *a,
                     cv *out);

bool chat_apply_filter(chat_ctx *c, const chat_ast *at, int id, const cv *v, const chat_args *a,
                       cv *out);
bool chat_apply_test(chat_ctx *c, const chat_ast *at, int id, const cv *v, const chat_args *a,
                     bool *out);
/* obj.name: an attribute, a bound method or undefined. */
bool chat_getattr(chat_ctx *c, const chat_ast *at, const cv *obj, const char *name, size_t n,
                  cv *out);
bool chat_call_method(chat_ctx *c, const chat_ast *at, const cv *self, const char *name, size_t n,
                      const chat_args *a, cv *out);
bool chat_call_global(chat_ctx *c, const chat_ast *at, int fn, const chat_args *a, cv *out);

#endif
