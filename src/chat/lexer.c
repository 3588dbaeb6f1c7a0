/*
 * lexer.c — template source to tokens, the way jinja2's Lexer does it with
 * transformers' settings (trim_blocks=True, lstrip_blocks=True,
 * keep_trailing_newline=False).
 *
 * Text is split at the first "{{", "{%" or "{#"; the text before a tag is
 * trimmed here rather than in the parser because the rules depend on the
 * raw characters:
 *   "{%-" / "{{-" / "{#-"  strip all whitespace before the tag;
 *   lstrip_blocks          a "{%" or "{#" (not "{{", not "{%+") alone on its
 *                          line so far loses the spaces before it;
 *   "-%}" / "-}}" / "-#}"  strip all whitespace after;
 *   trim_blocks            "%}" and "#}" (not "+%}") eat one newline.
 * Inside a tag, the end delimiter only counts while brackets are balanced
 * ("{{ {'a': {'b': 1}} }}"), as in Jinja. String literals are decoded with
 * Python's escapes (jinja2 decodes them with "unicode-escape").
 * Comments vanish; {% raw %} bodies become text.
 */
#include "chat/chat_internal.h"

#include <stdio.h>
#include <string.h>

enum { TAG_VAR, TAG_BLOCK, TAG_COMMENT };

typedef struct {
    const char *src;
    size_t len;
    chat_arena *a;
    hr_error *err;
    chat_token *v;
    size_t n, cap;
    /* line:col of byte offset `at`, advanced monotonically */
    size_t at;
    int line, col;
} lexer;

static void where(lexer *L, size_t pos, int *line, int *col) {
    if (pos < L->at) { /* rare (errors only): restart from the top */
        L->at = 0;
        L->line = 1;
        L->col = 1;
    }
    for (; L->at < pos; L->at++) {
        if (L->src[L->at] == '\n') {
            L->line++;
            L->col = 1;
        } else if (((unsigned char)L->src[L->at] & 0xC0) != 0x80) {
            L->col++; /* columns count characters */
        }
    }
    *line = L->line;
    *col = L->col;
}

static hr_status lex_fail(lexer *L, size_t pos, hr_status st, const char *msg, const char *arg) {
    int line, col;
    where(L, pos, &line, &col);
    return hr_err_set(L->err, st, "chat template %d:%d: %s%s", line, col, msg, arg ? arg : "");
}

static chat_token *push(lexer *L, int type, size_t pos) {
    if (L->n == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        chat_token *v = chat_arena_alloc(L->a, cap * sizeof *v);
        if (!v)
            return NULL;
        if (L->n)
            memcpy(v, L->v, L->n * sizeof *v);
        L->v = v;
        L->cap = cap;
    }
    chat_token *t = &L->v[L->n++];
    memset(t, 0, sizeof *t);
    t->type = (uint8_t)type;
    where(L, pos, &t->line, &t->col);
    return t;
}

static hr_status nomem(lexer *L) {
    return hr_err_set(L->err, L->a->failed == CHAT_ARENA_LIMIT ? HR_ERR_INVALID : HR_ERR_NOMEM,
                      "chat template: out of memory while reading the template");
}

/* Python whitespace at src[i] (its byte length in *k), for \s and strip(). */
static bool ws_at(const lexer *L, size_t i, size_t *k) {
    uint32_t cp;
    *k = chat_utf8_next(L->src + i, L->len - i, &cp);
    return chat_py_space(cp);
}

static size_t skip_ws(const lexer *L, size_t i) {
    size_t k;
    while (i < L->len && ws_at(L, i, &k))
        i += k;
    return i;
}

/* End of text [s, e) after Python's rstrip(). */
static size_t rstrip_end(const lexer *L, size_t s, size_t e) {
    size_t keep = s, k;
    for (size_t i = s; i < e; i += k)
        if (!ws_at(L, i, &k))
            keep = i + k;
    return keep;
}

static bool all_ws(const lexer *L, size_t s, size_t e) {
    size_t k;
    if (s >= e)
        return false; /* jinja2's \s+ needs one */
    for (size_t i = s; i < e; i += k)
        if (!ws_at(L, i, &k))
            return false;
    return true;
}

static hr_status emit_text(lexer *L, size_t s, size_t e) {
    if (e <= s)
        return HR_OK;
    chat_token *t = push(L, TK_TEXT, s);
    if (!t)
        return nomem(L);
    t->s = L->src + s;
    t->n = e - s;
    return HR_OK;
}

/* ---------------------------------------------------------------- literals */

static int hexval(char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Decodes the body of a string literal [s, e) into the arena. */
static hr_status decode_string(lexer *L, size_t s, size_t e, chat_token *t) {
    chat_buf b;
    chat_buf_init(&b, L->a);
    for (size_t i = s; i < e;) {
        char c = L->src[i];
        if (c != '\\') {
            size_t j = i + 1;
            while (j < e && L->src[j] != '\\')
                j++;
            chat_buf_put(&b, L->src + i, j - i);
            i = j;
            continue;
        }
        /* a backslash; the literal's regex guarantees a character follows */
        char d = L->src[i + 1];
        size_t used = 2;
        uint32_t cp = 0;
        int digits = 0;
        switch (d) {
        case '\n': break; /* line continuation */
        case '\\': chat_buf_putc(&b, '\\'); break;
        case '\'': chat_buf_putc(&b, '\''); break;
        case '"': chat_buf_putc(&b, '"'); break;
        case 'a': chat_buf_putc(&b, '\a'); break;
        case 'b': chat_buf_putc(&b, '\b'); break;
        case 'f': chat_buf_putc(&b, '\f'); break;
        case 'n': chat_buf_putc(&b, '\n'); break;
        case 'r': chat_buf_putc(&b, '\r'); break;
        case 't': chat_buf_putc(&b, '\t'); break;
        case 'v': chat_buf_putc(&b, '\v'); break;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        case 'N':
            return lex_fail(L, i, HR_ERR_UNSUPPORTED, "\\N{...} escapes are not supported", NULL);
        default:
            if (d >= '0' && d <= '7') {
                used = 1;
                while (used <= 3 && i + used < e && L->src[i + used] >= '0' &&
                       L->src[i + used] <= '7')
                    cp = cp * 8 + (uint32_t)(L->src[i + used++] - '0');
                char u8[4];
                chat_buf_put(&b, u8, chat_utf8_encode(cp, u8));
            } else if ((unsigned char)d >= 0x80) {
                /* Python sees "\\" then the character's backslashreplace form */
                uint32_t ch;
                used = 1 + chat_utf8_next(L->src + i + 1, e - i - 1, &ch);
                chat_buf_printf(&b,
                                ch <= 0xFF     ? "\\x%02x"
                                : ch <= 0xFFFF ? "\\u%04x"
                                               : "\\U%08x",
                                (unsigned)ch);
            } else { /* unknown escapes stay as they are */
                chat_buf_putc(&b, '\\');
                chat_buf_putc(&b, d);
            }
            break;
        }
        if (digits) {
            for (int k = 0; k < digits; k++) {
                int h = i + 2 + (size_t)k < e ? hexval(L->src[i + 2 + (size_t)k]) : -1;
                if (h < 0)
                    return lex_fail(L, i, HR_ERR_FORMAT,
                                    "truncated \\x, \\u or \\U escape in a string", NULL);
                cp = cp * 16 + (uint32_t)h;
            }
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
                return lex_fail(L, i, HR_ERR_FORMAT,
                                "escape gives a surrogate or a code point past U+10FFFF", NULL);
            used = 2 + (size_t)digits;
            char u8[4];
            chat_buf_put(&b, u8, chat_utf8_encode(cp, u8));
        }
        i += used;
    }
    if (!chat_buf_put(&b, "", 0))
        return nomem(L);
    t->s = b.p;
    t->n = b.n;
    return HR_OK;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_name0(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool is_name1(char c) { return is_name0(c) || is_digit(c); }

/* Digits with single underscores between them ("1_000"); returns the end. */
static size_t scan_digits(const lexer *L, size_t i) {
    while (i < L->len && is_digit(L->src[i])) {
        i++;
        if (i + 1 < L->len && L->src[i] == '_' && is_digit(L->src[i + 1]))
            i++;
    }
    return i;
}

static hr_status lex_number(lexer *L, size_t *pi) {
    size_t s = *pi, i = scan_digits(L, s);
    bool is_float = false;
    if (s == 0 || L->src[s - 1] != '.') { /* jinja2's float rule: (?<!\.) */
        size_t j = i;
        if (j + 1 < L->len && L->src[j] == '.' && is_digit(L->src[j + 1])) {
            j = scan_digits(L, j + 1);
            is_float = true;
        }
        if (j < L->len && (L->src[j] == 'e' || L->src[j] == 'E')) {
            size_t k = j + 1;
            if (k < L->len && (L->src[k] == '+' || L->src[k] == '-'))
                k++;
            if (k < L->len && is_digit(L->src[k])) {
                j = scan_digits(L, k);
                is_float = true;
            }
        }
        if (is_float)
            i = j;
    }
    char tmp[128];
    size_t m = 0;
    for (size_t k = s; k < i && m + 1 < sizeof tmp; k++)
        if (L->src[k] != '_')
            tmp[m++] = L->src[k];
    tmp[m] = '\0';
    if (i - s >= sizeof tmp - 1)
        return lex_fail(L, s, HR_ERR_UNSUPPORTED, "number literal too long", NULL);
    chat_token *t = push(L, is_float ? TK_FLOAT : TK_INT, s);
    if (!t)
        return nomem(L);
    if (is_float) {
        t->f = chat_strtod(tmp, NULL);
    } else {
        int64_t v = 0;
        for (size_t k = 0; k < m; k++) {
            if (v > (INT64_MAX - (tmp[k] - '0')) / 10)
                return lex_fail(L, s, HR_ERR_UNSUPPORTED,
                                "integer literal past 64 bits (Python's are unbounded)", NULL);
            v = v * 10 + (tmp[k] - '0');
        }
        t->i = v;
    }
    *pi = i;
    return HR_OK;
}

static const struct {
    const char *s;
    uint8_t op;
} ops[] = {
    {"//", CHAT_OP_FLOORDIV}, {"**", CHAT_OP_POW},      {"==", CHAT_OP_EQ},
    {"!=", CHAT_OP_NE},       {">=", CHAT_OP_GE},       {"<=", CHAT_OP_LE},
    {"+", CHAT_OP_ADD},       {"-", CHAT_OP_SUB},       {"/", CHAT_OP_DIV},
    {"*", CHAT_OP_MUL},       {"%", CHAT_OP_MOD},       {"~", CHAT_OP_TILDE},
    {"[", CHAT_OP_LBRACKET},  {"]", CHAT_OP_RBRACKET},  {"(", CHAT_OP_LPAREN},
    {")", CHAT_OP_RPAREN},    {"{", CHAT_OP_LBRACE},    {"}", CHAT_OP_RBRACE},
    {">", CHAT_OP_GT},        {"<", CHAT_OP_LT},        {"=", CHAT_OP_ASSIGN},
    {".", CHAT_OP_DOT},       {":", CHAT_OP_COLON},     {"|", CHAT_OP_PIPE},
    {",", CHAT_OP_COMMA},     {";", CHAT_OP_SEMICOLON},
};

static bool starts(const lexer *L, size_t i, const char *s) {
    size_t n = strlen(s);
    return L->len - i >= n && memcmp(L->src + i, s, n) == 0;
}

/* ---------------------------------------------------------------- tags */

/* Tokens of a {{ }} or {% %} body from *pi to its end delimiter; *end_sign
 * is '-', '+' or 0 and *pi ends after the delimiter. */
static hr_status lex_tag(lexer *L, int kind, size_t open_pos, size_t *pi, char *end_sign) {
    char stack[CHAT_MAX_NESTING];
    int depth = 0;
    size_t i = *pi;
    for (;;) {
        if (i >= L->len)
            return lex_fail(L, open_pos, HR_ERR_FORMAT,
                            kind == TAG_VAR ? "unterminated '{{' (no '}}' follows)"
                                            : "unterminated '{%' (no '%}' follows)",
                            NULL);
        if (depth == 0) {
            const char *close = kind == TAG_VAR ? "}}" : "%}";
            char sign = 0;
            size_t at = i;
            if (kind == TAG_BLOCK && starts(L, i, "+%}"))
                sign = '+', at = i + 1;
            else if (starts(L, i, kind == TAG_VAR ? "-}}" : "-%}"))
                sign = '-', at = i + 1;
            if (starts(L, at, close)) {
                chat_token *t = push(L, kind == TAG_VAR ? TK_VAR_END : TK_BLOCK_END, i);
                if (!t)
                    return nomem(L);
                *pi = at + 2;
                *end_sign = sign;
                return HR_OK;
            }
        }
        char c = L->src[i];
        size_t k;
        if (ws_at(L, i, &k)) {
            i += k;
        } else if (is_digit(c)) {
            hr_status st = lex_number(L, &i);
            if (st != HR_OK)
                return st;
        } else if (is_name0(c)) {
            size_t s = i;
            while (i < L->len && is_name1(L->src[i]))
                i++;
            chat_token *t = push(L, TK_NAME, s);
            if (!t)
                return nomem(L);
            t->s = L->src + s;
            t->n = i - s;
        } else if (c == '\'' || c == '"') {
            size_t s = i++;
            while (i < L->len && L->src[i] != c)
                i += L->src[i] == '\\' && i + 1 < L->len ? 2 : 1;
            if (i >= L->len)
                return lex_fail(L, s, HR_ERR_FORMAT, "unterminated string literal", NULL);
            chat_token *t = push(L, TK_STRING, s);
            if (!t)
                return nomem(L);
            hr_status st = decode_string(L, s + 1, i, t);
            if (st != HR_OK)
                return st;
            i++;
        } else {
            size_t o = 0, n_ops = sizeof ops / sizeof ops[0];
            while (o < n_ops && !starts(L, i, ops[o].s))
                o++;
            if (o == n_ops) {
                char what[16];
                uint32_t cp;
                chat_utf8_next(L->src + i, L->len - i, &cp);
                snprintf(what, sizeof what, "U+%04X", (unsigned)cp);
                return lex_fail(L, i, HR_ERR_FORMAT, "unexpected character ", what);
            }
            uint8_t op = ops[o].op;
            if (op == CHAT_OP_LBRACE || op == CHAT_OP_LPAREN || op == CHAT_OP_LBRACKET) {
                if (depth == CHAT_MAX_NESTING)
                    return lex_fail(L, i, HR_ERR_INVALID, "brackets nested too deep", NULL);
                stack[depth++] = op == CHAT_OP_LBRACE ? '}' : op == CHAT_OP_LPAREN ? ')' : ']';
            } else if (op == CHAT_OP_RBRACE || op == CHAT_OP_RPAREN || op == CHAT_OP_RBRACKET) {
                char want[2] = {ops[o].s[0], 0};
                if (depth == 0)
                    return lex_fail(L, i, HR_ERR_FORMAT, "unexpected ", want);
                if (stack[--depth] != ops[o].s[0]) {
                    char msg[48];
                    snprintf(msg, sizeof msg, "unexpected '%c', expected '%c'", ops[o].s[0],
                             stack[depth]);
                    return lex_fail(L, i, HR_ERR_FORMAT, msg, NULL);
                }
            }
            chat_token *t = push(L, TK_OP, i);
            if (!t)
                return nomem(L);
            t->op = op;
            i += strlen(ops[o].s);
        }
    }
}

/* After an end delimiter: whitespace control to the right. */
static size_t after_end(const lexer *L, size_t i, char sign, bool trim_newline) {
    if (sign == '-')
        return skip_ws(L, i);
    if (sign != '+' && trim_newline && i < L->len && L->src[i] == '\n')
        return i + 1;
    return i;
}

/* "{% raw %}" at pos (with sign and spaces)? Returns the body start or 0. */
static size_t raw_begin(const lexer *L, size_t i) {
    i = skip_ws(L, i);
    if (!starts(L, i, "raw"))
        return 0;
    i = skip_ws(L, i + 3);
    if (starts(L, i, "-%}"))
        return skip_ws(L, i + 3);
    if (starts(L, i, "%}"))
        return i + 2;
    return 0;
}

/* The next "{% endraw %}" from i: its start, the body end is the same;
 * *after is past it, *sign its left sign. 0 when there is none. */
static size_t find_endraw(const lexer *L, size_t i, size_t *after, char *lsign) {
    for (; i + 1 < L->len; i++) {
        if (L->src[i] != '{' || L->src[i + 1] != '%')
            continue;
        size_t j = i + 2;
        char s = 0;
        if (j < L->len && (L->src[j] == '-' || L->src[j] == '+'))
            s = L->src[j++];
        j = skip_ws(L, j);
        if (!starts(L, j, "endraw"))
            continue;
        j = skip_ws(L, j + 6);
        char rs = 0;
        if (starts(L, j, "+%}") || starts(L, j, "-%}"))
            rs = L->src[j++];
        if (!starts(L, j, "%}"))
            continue;
        *after = after_end(L, j + 2, rs, true);
        *lsign = s;
        return i;
    }
    return 0;
}

/* Whitespace control of the text [s, e) before a tag whose left sign is
 * sign; returns the new end. */
static size_t trim_before(const lexer *L, size_t s, size_t e, char sign, bool lstrip,
                          bool line_starting) {
    if (sign == '-')
        return rstrip_end(L, s, e);
    if (sign == '+' || !lstrip)
        return e;
    size_t l = e;
    while (l > s && L->src[l - 1] != '\n')
        l--;
    if ((l > s || line_starting) && all_ws(L, l, e))
        return l;
    return e;
}

hr_status chat_lex(const char *src, size_t len, chat_arena *a, chat_token **out, size_t *n_out,
                   hr_error *err) {
    lexer L = {.src = src, .len = len, .a = a, .err = err, .line = 1, .col = 1};
    size_t pos = 0;
    bool line_starting = true;
    while (pos < len) {
        /* the next tag: the first "{{", "{%" or "{#" */
        size_t t = pos;
        int kind = -1;
        for (; t + 1 < len; t++) {
            if (src[t] != '{')
                continue;
            char d = src[t + 1];
            kind = d == '{' ? TAG_VAR : d == '%' ? TAG_BLOCK : d == '#' ? TAG_COMMENT : -1;
            if (kind >= 0)
                break;
        }
        if (kind < 0) {
            hr_status st = emit_text(&L, pos, len);
            if (st != HR_OK)
                return st;
            break;
        }
        size_t body = t + 2;
        char sign = 0;
        if (body < len && (src[body] == '-' || src[body] == '+'))
            sign = src[body++];
        size_t text_end = trim_before(&L, pos, t, sign, kind != TAG_VAR, line_starting);
        hr_status st = emit_text(&L, pos, text_end);
        if (st != HR_OK)
            return st;

        size_t raw_body = kind == TAG_BLOCK ? raw_begin(&L, body) : 0;
        if (raw_body) {
            size_t after = 0;
            char esign = 0;
            size_t e = find_endraw(&L, raw_body, &after, &esign);
            if (!e)
                return lex_fail(&L, t, HR_ERR_FORMAT, "{% raw %} without {% endraw %}", NULL);
            bool ls = src[raw_body - 1] == '\n';
            st = emit_text(&L, raw_body, trim_before(&L, raw_body, e, esign, true, ls));
            if (st != HR_OK)
                return st;
            pos = after;
            line_starting = src[after - 1] == '\n';
            continue;
        }
        if (kind == TAG_COMMENT) {
            size_t j = body;
            while (j + 1 < len && !(src[j] == '#' && src[j + 1] == '}'))
                j++;
            if (j + 1 >= len)
                return lex_fail(&L, t, HR_ERR_FORMAT, "unterminated comment (no '#}' follows)",
                                NULL);
            char es = j > body && (src[j - 1] == '-' || src[j - 1] == '+') ? src[j - 1] : 0;
            pos = after_end(&L, j + 2, es, true);
            line_starting = src[pos - 1] == '\n';
            continue;
        }
        chat_token *bt = push(&L, kind == TAG_VAR ? TK_VAR_BEGIN : TK_BLOCK_BEGIN, t);
        if (!bt)
            return nomem(&L);
        size_t i = body;
        char esign = 0;
        st = lex_tag(&L, kind, t, &i, &esign);
        if (st != HR_OK)
            return st;
        pos = after_end(&L, i, esign, kind == TAG_BLOCK);
        line_starting = src[pos - 1] == '\n';
    }
    if (!push(&L, TK_EOF, len))
        return nomem(&L);
    *out = L.v;
    *n_out = L.n;
    return HR_OK;
}
