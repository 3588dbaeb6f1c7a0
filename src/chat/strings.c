/*
 * strings.c — Python's str methods as templates call them (strip, split,
 * startswith, replace, title...), on UTF-8 with code point semantics:
 * indexes, find() results and lengths count characters, as Python's do.
 * Whitespace is Python's str.isspace set (Unicode spaces included: trim
 * and strip remove U+00A0 and U+3000). Case mapping is ASCII only (a
 * documented difference: Python maps all of Unicode).
 */
#include "chat/chat_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------- strings */

static uint32_t ascii_upper(uint32_t cp) { return cp >= 'a' && cp <= 'z' ? cp - 32 : cp; }
static uint32_t ascii_lower(uint32_t cp) { return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp; }
bool chat_ascii_cased(uint32_t cp) { return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z'); }

bool chat_change_case(chat_ctx *c, const chat_ast *at, const cv *s, int how, cv *out) {
    chat_buf b;
    chat_buf_init(&b, chat_ctx_arena(c));
    bool prev_cased = false, first = true;
    for (size_t i = 0; i < s->n;) {
        uint32_t cp, r = 0;
        size_t k = chat_utf8_next(s->s + i, s->n - i, &cp);
        switch (how) {
        case CHAT_CASE_UPPER: r = ascii_upper(cp); break;
        case CHAT_CASE_LOWER: r = ascii_lower(cp); break;
        case CHAT_CASE_SWAP: r = cp >= 'a' && cp <= 'z' ? cp - 32 : ascii_lower(cp); break;
        case CHAT_CASE_TITLE: r = prev_cased ? ascii_lower(cp) : ascii_upper(cp); break;
        default: r = first ? ascii_upper(cp) : ascii_lower(cp); break;
        }
        prev_cased = chat_ascii_cased(cp);
        first = false;
        if (r == cp)
            chat_buf_put(&b, s->s + i, k);
        else
            chat_buf_putc(&b, (char)r);
        i += k;
    }
    return chat_str_result(c, at, &b, out);
}

/* Jinja's title filter: words start after '-', whitespace, '(', '{', '[',
 * '<'; each word is item[0].upper() + item[1:].lower(). */
bool chat_jinja_title(chat_ctx *c, const chat_ast *at, const cv *s, cv *out) {
    chat_buf b;
    chat_buf_init(&b, chat_ctx_arena(c));
    bool start = true;
    for (size_t i = 0; i < s->n;) {
        uint32_t cp;
        size_t k = chat_utf8_next(s->s + i, s->n - i, &cp);
        bool sep =
            cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || chat_py_space(cp);
        uint32_t r = sep ? cp : start ? ascii_upper(cp) : ascii_lower(cp);
        if (r == cp)
            chat_buf_put(&b, s->s + i, k);
        else
            chat_buf_putc(&b, (char)r);
        start = sep;
        i += k;
    }
    return chat_str_result(c, at, &b, out);
}

/* Is cp in the strip set (NULL: Python whitespace)? */
static bool in_set(const cv *chars, uint32_t cp) {
    if (!chars)
        return chat_py_space(cp);
    for (size_t i = 0; i < chars->n;) {
        uint32_t x;
        i += chat_utf8_next(chars->s + i, chars->n - i, &x);
        if (x == cp)
            return true;
    }
    return false;
}

/* str.strip / lstrip / rstrip: which 1 left, 2 right, 3 both. */
cv chat_strip(const cv *s, const cv *chars, int which) {
    size_t b = 0, e = s->n;
    if (which & 1)
        while (b < e) {
            uint32_t cp;
            size_t k = chat_utf8_next(s->s + b, e - b, &cp);
            if (!in_set(chars, cp))
                break;
            b += k;
        }
    if (which & 2) {
        size_t keep = b;
        for (size_t i = b; i < e;) {
            uint32_t cp;
            size_t k = chat_utf8_next(s->s + i, e - i, &cp);
            i += k;
            if (!in_set(chars, cp))
                keep = i;
        }
        e = keep;
    }
    return cv_str(s->s + b, e - b);
}

bool chat_strip_args(chat_ctx *c, const chat_ast *at, const chat_args *a, const char *what,
                     const cv **chars) {
    static const char *const names[] = {"chars", NULL};
    if (!chat_check_args(c, at, a, 1, names, what))
        return false;
    *chars = chat_arg(a, 0, "chars");
    if (*chars && (*chars)->type == CV_NONE)
        *chars = NULL;
    return !*chars || chat_want_str(c, at, *chars, what);
}

size_t chat_find_bytes(const cv *s, size_t from, const cv *sub) {
    if (sub->n == 0)
        return from;
    for (size_t i = from; i + sub->n <= s->n; i++)
        if (memcmp(s->s + i, sub->s, sub->n) == 0)
            return i;
    return SIZE_MAX;
}

/* str.split / rsplit. */
static bool split(chat_ctx *c, const chat_ast *at, const cv *s, const chat_args *a, bool right,
                  cv *out) {
    static const char *const names[] = {"sep", "maxsplit", NULL};
    if (!chat_check_args(c, at, a, 2, names, right ? "rsplit()" : "split()"))
        return false;
    const cv *sep = chat_arg(a, 0, "sep"), *mx = chat_arg(a, 1, "maxsplit");
    int64_t maxsplit = -1;
    if (mx && !chat_want_int(c, at, mx, "split()", &maxsplit))
        return false;
    if (sep && sep->type == CV_NONE)
        sep = NULL;
    if (sep && !chat_want_str(c, at, sep, "split()"))
        return false;
    if (sep && sep->n == 0)
        return chat_fail(c, at, HR_ERR_INVALID, "split(): empty separator");
    chat_arena *ar = chat_ctx_arena(c);
    cv_list *l = cv_list_new(ar, 0);
    if (!l)
        return chat_fail_mem(c, at);
    /* fields as byte ranges, collected left to right (rsplit reverses at the end) */
    if (sep) {
        if (!right) {
            size_t from = 0;
            for (;;) {
                size_t j = maxsplit != 0 ? chat_find_bytes(s, from, sep) : SIZE_MAX;
                if (j == SIZE_MAX) {
                    if (!cv_list_push(ar, l, cv_str(s->s + from, s->n - from)))
                        return chat_fail_mem(c, at);
                    break;
                }
                if (!cv_list_push(ar, l, cv_str(s->s + from, j - from)))
                    return chat_fail_mem(c, at);
                from = j + sep->n;
                if (maxsplit > 0)
                    maxsplit--;
            }
        } else {
            size_t end = s->n;
            for (;;) {
                size_t j = SIZE_MAX;
                if (maxsplit != 0)
                    for (size_t i = end; i >= sep->n; i--)
                        if (memcmp(s->s + i - sep->n, sep->s, sep->n) == 0) {
                            j = i - sep->n;
                            break;
                        }
                if (j == SIZE_MAX) {
                    if (!cv_list_push(ar, l, cv_str(s->s, end)))
                        return chat_fail_mem(c, at);
                    break;
                }
                if (!cv_list_push(ar, l, cv_str(s->s + j + sep->n, end - j - sep->n)))
                    return chat_fail_mem(c, at);
                end = j;
                if (maxsplit > 0)
                    maxsplit--;
            }
        }
    } else if (!right) {
        size_t i = 0;
        for (;;) {
            uint32_t cp;
            size_t k = 0;
            while (i < s->n && (k = chat_utf8_next(s->s + i, s->n - i, &cp), chat_py_space(cp)))
                i += k;
            if (i >= s->n)
                break;
            if (maxsplit == 0) { /* the rest, trailing spaces and all */
                if (!cv_list_push(ar, l, cv_str(s->s + i, s->n - i)))
                    return chat_fail_mem(c, at);
                break;
            }
            size_t j = i;
            while (j < s->n && (k = chat_utf8_next(s->s + j, s->n - j, &cp), !chat_py_space(cp)))
                j += k;
            if (!cv_list_push(ar, l, cv_str(s->s + i, j - i)))
                return chat_fail_mem(c, at);
            i = j;
            if (maxsplit > 0)
                maxsplit--;
        }
    } else {
        /* rsplit(None): fields from the right; starts of code points first */
        size_t end = s->n;
        for (;;) {
            size_t i = end;
            uint32_t cp;
            while (i > 0) { /* skip trailing whitespace */
                size_t p = i - 1;
                while (p > 0 && ((unsigned char)s->s[p] & 0xC0) == 0x80)
                    p--;
                chat_utf8_next(s->s + p, s->n - p, &cp);
                if (!chat_py_space(cp))
                    break;
                i = p;
            }
            if (i == 0)
                break;
            end = i;
            if (maxsplit == 0) {
                if (!cv_list_push(ar, l, cv_str(s->s, end)))
                    return chat_fail_mem(c, at);
                break;
            }
            size_t j = end;
            while (j > 0) {
                size_t p = j - 1;
                while (p > 0 && ((unsigned char)s->s[p] & 0xC0) == 0x80)
                    p--;
                chat_utf8_next(s->s + p, s->n - p, &cp);
                if (chat_py_space(cp))
                    break;
                j = p;
            }
            if (!cv_list_push(ar, l, cv_str(s->s + j, end - j)))
                return chat_fail_mem(c, at);
            end = j;
            if (maxsplit > 0)
                maxsplit--;
        }
    }
    if (right) /* collected right to left */
        for (size_t k = 0; k < l->n / 2; k++) {
            cv t = l->v[k];
            l->v[k] = l->v[l->n - 1 - k];
            l->v[l->n - 1 - k] = t;
        }
    *out = cv_of_list(l, false);
    return true;
}

/* Python's str.splitlines line boundaries. */
static size_t line_break(const char *s, size_t n, size_t i) {
    uint32_t cp;
    size_t k = chat_utf8_next(s + i, n - i, &cp);
    if (cp == '\r')
        return i + 1 < n && s[i + 1] == '\n' ? 2 : 1;
    if (cp == '\n' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D || cp == 0x1E ||
        cp == 0x85 || cp == 0x2028 || cp == 0x2029)
        return k;
    return 0;
}

bool chat_splitlines(chat_ctx *c, const chat_ast *at, const char *s, size_t n, bool keepends,
                     cv_list **out) {
    chat_arena *ar = chat_ctx_arena(c);
    cv_list *l = cv_list_new(ar, 0);
    if (!l)
        return chat_fail_mem(c, at);
    size_t start = 0;
    for (size_t i = 0; i < n;) {
        size_t br = line_break(s, n, i);
        if (!br) {
            uint32_t cp;
            i += chat_utf8_next(s + i, n - i, &cp);
            continue;
        }
        if (!cv_list_push(ar, l, cv_str(s + start, (keepends ? i + br : i) - start)))
            return chat_fail_mem(c, at);
        i += br;
        start = i;
    }
    if (start < n && !cv_list_push(ar, l, cv_str(s + start, n - start)))
        return chat_fail_mem(c, at);
    *out = l;
    return true;
}

bool chat_replace(chat_ctx *c, const chat_ast *at, const cv *s, const cv *old, const cv *rep,
                  int64_t count, cv *out) {
    chat_buf b;
    chat_buf_init(&b, chat_ctx_arena(c));
    if (old->n == 0) { /* Python inserts rep before every character and at the end */
        for (size_t i = 0; i <= s->n;) {
            if (count != 0) {
                chat_buf_put(&b, rep->s, rep->n);
                if (count > 0)
                    count--;
            }
            if (i == s->n)
                break;
            uint32_t cp;
            size_t k = chat_utf8_next(s->s + i, s->n - i, &cp);
            chat_buf_put(&b, s->s + i, k);
            i += k;
        }
        return chat_str_result(c, at, &b, out);
    }
    size_t from = 0;
    while (count != 0) {
        size_t j = chat_find_bytes(s, from, old);
        if (j == SIZE_MAX)
            break;
        chat_buf_put(&b, s->s + from, j - from);
        chat_buf_put(&b, rep->s, rep->n);
        from = j + old->n;
        if (count > 0)
            count--;
    }
    chat_buf_put(&b, s->s + from, s->n - from);
    return chat_str_result(c, at, &b, out);
}

/* startswith / endswith with a str or a tuple of str. */
static bool affix(chat_ctx *c, const chat_ast *at, const cv *s, const chat_args *a, bool end,
                  cv *out) {
    if (!chat_check_args(c, at, a, 1, NULL, end ? "endswith()" : "startswith()"))
        return false;
    const cv *p = chat_arg(a, 0, NULL);
    if (!p)
        return chat_fail(c, at, HR_ERR_INVALID, "%s takes one argument",
                         end ? "endswith()" : "startswith()");
    const cv *opts = p;
    size_t n_opts = 1;
    if (p->type == CV_LIST && p->flags & CV_F_TUPLE) {
        opts = p->list->v;
        n_opts = p->list->n;
    }
    for (size_t k = 0; k < n_opts; k++) {
        if (!chat_want_str(c, at, &opts[k], end ? "endswith()" : "startswith()"))
            return false;
        const cv *x = &opts[k];
        if (x->n <= s->n && memcmp(end ? s->s + s->n - x->n : s->s, x->s, x->n) == 0) {
            *out = cv_bool(true);
            return true;
        }
    }
    *out = cv_bool(false);
    return true;
}

/* ---------------------------------------------------------------- methods */

bool chat_no_args(chat_ctx *c, const chat_ast *at, const chat_args *a, const char *what) {
    return chat_check_args(c, at, a, 0, NULL, what);
}

/* Code point index of byte offset off in s. */
static int64_t cp_index(const cv *s, size_t off) { return (int64_t)chat_utf8_count(s->s, off); }

bool chat_str_is(const cv *s, int kind) {
    if (!s->n)
        return false;
    bool any_cased = false;
    for (size_t i = 0; i < s->n;) {
        uint32_t cp;
        i += chat_utf8_next(s->s + i, s->n - i, &cp);
        bool digit = cp >= '0' && cp <= '9';
        bool alpha = chat_ascii_cased(cp) || (cp >= 0xC0 && !chat_py_space(cp));
        switch (kind) {
        case 0:
            if (!digit)
                return false;
            break;
        case 1:
            if (!alpha)
                return false;
            break;
        case 2:
            if (!alpha && !digit)
                return false;
            break;
        case 3:
            if (!chat_py_space(cp))
                return false;
            break;
        case 4:
            if (cp >= 'A' && cp <= 'Z')
                return false;
            any_cased |= chat_ascii_cased(cp);
            break;
        default:
            if (cp >= 'a' && cp <= 'z')
                return false;
            any_cased |= chat_ascii_cased(cp);
            break;
        }
    }
    return kind < 4 || any_cased;
}

bool chat_str_method(chat_ctx *c, const chat_ast *at, const cv *s, chat_name m, const chat_args *a,
                     cv *out) {
    const cv *chars;
    if (chat_name_is(m, "strip") || chat_name_is(m, "lstrip") || chat_name_is(m, "rstrip")) {
        if (!chat_strip_args(c, at, a, "strip()", &chars))
            return false;
        *out = chat_strip(s, chars,
                          chat_name_is(m, "strip")    ? 3
                          : chat_name_is(m, "lstrip") ? 1
                                                      : 2);
        return true;
    }
    if (chat_name_is(m, "split") || chat_name_is(m, "rsplit"))
        return split(c, at, s, a, chat_name_is(m, "rsplit"), out);
    if (chat_name_is(m, "splitlines")) {
        static const char *const names[] = {"keepends", NULL};
        cv_list *l;
        if (!chat_check_args(c, at, a, 1, names, "splitlines()"))
            return false;
        const cv *ke = chat_arg(a, 0, "keepends");
        if (!chat_splitlines(c, at, s->s, s->n, ke && cv_truthy(ke), &l))
            return false;
        *out = cv_of_list(l, false);
        return true;
    }
    if (chat_name_is(m, "startswith") || chat_name_is(m, "endswith"))
        return affix(c, at, s, a, chat_name_is(m, "endswith"), out);
    if (chat_name_is(m, "upper") || chat_name_is(m, "lower") || chat_name_is(m, "title") ||
        chat_name_is(m, "capitalize") || chat_name_is(m, "swapcase")) {
        int how = chat_name_is(m, "upper")      ? CHAT_CASE_UPPER
                  : chat_name_is(m, "lower")    ? CHAT_CASE_LOWER
                  : chat_name_is(m, "title")    ? CHAT_CASE_TITLE
                  : chat_name_is(m, "swapcase") ? CHAT_CASE_SWAP
                                                : CHAT_CASE_CAPITALIZE;
        return chat_no_args(c, at, a, "this method") && chat_change_case(c, at, s, how, out);
    }
    if (chat_name_is(m, "replace")) {
        static const char *const names[] = {"count", NULL};
        if (!chat_check_args(c, at, a, 3, names, "replace()"))
            return false;
        const cv *old = chat_arg(a, 0, NULL), *rep = chat_arg(a, 1, NULL),
                 *cnt = chat_arg(a, 2, "count");
        int64_t count = -1;
        if (!old || !rep)
            return chat_fail(c, at, HR_ERR_INVALID, "replace() takes at least 2 arguments");
        if (!chat_want_str(c, at, old, "replace()") || !chat_want_str(c, at, rep, "replace()") ||
            (cnt && !chat_want_int(c, at, cnt, "replace()", &count)))
            return false;
        return chat_replace(c, at, s, old, rep, count, out);
    }
    if (chat_name_is(m, "find") || chat_name_is(m, "rfind") || chat_name_is(m, "index") ||
        chat_name_is(m, "count")) {
        if (!chat_check_args(c, at, a, 1, NULL, "this method"))
            return false;
        const cv *sub = chat_arg(a, 0, NULL);
        if (!sub)
            return chat_fail(c, at, HR_ERR_INVALID,
                             "%.*s() takes one argument (start and end "
                             "are not supported)",
                             (int)m.n, m.s);
        if (!chat_want_str(c, at, sub, "find()"))
            return false;
        if (chat_name_is(m, "count")) {
            if (!sub->n) {
                *out = cv_int((int64_t)chat_utf8_count(s->s, s->n) + 1);
                return true;
            }
            int64_t k = 0;
            for (size_t from = 0, j; (j = chat_find_bytes(s, from, sub)) != SIZE_MAX;
                 from = j + sub->n)
                k++;
            *out = cv_int(k);
            return true;
        }
        size_t j = SIZE_MAX;
        if (chat_name_is(m, "rfind")) {
            for (size_t i = s->n - (sub->n <= s->n ? sub->n : s->n) + 1; i-- > 0;)
                if (sub->n <= s->n - i && memcmp(s->s + i, sub->s, sub->n) == 0) {
                    j = i;
                    break;
                }
        } else {
            j = chat_find_bytes(s, 0, sub);
        }
        if (j == SIZE_MAX && chat_name_is(m, "index"))
            return chat_fail(c, at, HR_ERR_INVALID, "substring not found");
        *out = cv_int(j == SIZE_MAX ? -1 : cp_index(s, j));
        return true;
    }
    if (chat_name_is(m, "join")) {
        cv_list *items;
        const cv *it = chat_arg(a, 0, NULL);
        if (!chat_check_args(c, at, a, 1, NULL, "join()") || !it)
            return it ? false : chat_fail(c, at, HR_ERR_INVALID, "join() takes one argument");
        if (!cv_iterate(c, at, it, &items))
            return false;
        chat_buf b;
        chat_buf_init(&b, chat_ctx_arena(c));
        for (size_t k = 0; k < items->n; k++) {
            if (!chat_want_str(c, at, &items->v[k], "join()"))
                return false;
            if (k)
                chat_buf_put(&b, s->s, s->n);
            chat_buf_put(&b, items->v[k].s, items->v[k].n);
        }
        return chat_str_result(c, at, &b, out);
    }
    static const char *const is_names[] = {"isdigit", "isalpha", "isalnum", "isspace",
                                           "islower", "isupper", NULL};
    for (int k = 0; is_names[k]; k++)
        if (chat_name_is(m, is_names[k])) {
            if (!chat_no_args(c, at, a, is_names[k]))
                return false;
            *out = cv_bool(chat_str_is(s, k));
            return true;
        }
    return chat_fail(c, at, HR_ERR_UNSUPPORTED, "str.%.*s() is not supported", (int)m.n, m.s);
}
