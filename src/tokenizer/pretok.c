/*
 * pretok.c — pre-tokenizers: splitting a text fragment into the words the
 * BPE model sees, with PCRE2 regexes (UTF + UCP, JIT when available).
 *
 * Ops run in order over a list of spans, as Hugging Face's pre-tokenizers
 * do: SPLIT (regex or literal, with a SplitDelimiterBehavior and invert),
 * BYTE_LEVEL (optional prefix space, optional GPT-2 regex split, then every
 * byte becomes its GPT-2 character), METASPACE (' ' -> U+2581, prepend,
 * optional split before each U+2581), FIXED_LENGTH (pieces of n code points)
 * and SCRIPTS (a piece per run of one Unicode script, by Hugging Face's
 * UnicodeScripts rules). Empty pieces are dropped after every op. SPLIT,
 * FIXED_LENGTH and SCRIPTS only re-slice the text; BYTE_LEVEL and METASPACE
 * rewrite it into one of two scratch buffers (whichever the input is not in).
 *
 * GGUF files name their pre-tokenizer (tokenizer.ggml.pre); the table below
 * gives the regex list llama.cpp (src/llama-vocab.cpp) applies for each name,
 * each regex splitting the previous pieces with matches and gaps both kept
 * (Isolated). Where llama.cpp rewrote a tokenizer.json regex for std::regex
 * (no \p{Lu} classes, no (?i:)), the original is used, since PCRE2 runs it.
 *
 * Regex dialect: tokenizer.json regexes are Oniguruma's (Ruby syntax). PCRE2
 * agrees on everything these files use except \s and \w: PCRE2's \s lacks
 * U+0085 and its \w lacks marks, so both are rewritten to the Unicode
 * White_Space set and to [\p{L}\p{M}\p{Nd}\p{Pc}]. Empty matches follow
 * Oniguruma's iterator: one that ends where the previous match ended is
 * skipped.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/tok_impl.h"

#include "tokenizer/unicode.h"
#include "tokenizer/unicode_scripts.h"
#include "util/alloc.h"

#include <pcre2.h>
#include <string.h>

/* Hugging Face's ByteLevel regex (GPT-2's, with the final \s+). */
const char tok_gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ---------------------------------------------------------------- regexes */

#define WS_CLASS_BODY "\\t-\\r\\x{85}\\p{Z}"
#define WORD_CLASS_BODY "\\p{L}\\p{M}\\p{Nd}\\p{Pc}"

/* Appends s to the growing pattern buffer. */
static bool pat_put(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = (*cap ? *cap : 64);
        while (c < *len + n + 1)
            c *= 2;
        char *p = hr_realloc(*buf, c);
        if (!p)
            return false;
        *buf = p;
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = '\0';
    return true;
}

/* Rewrites \s \S \w \W into Oniguruma's meaning (see the file comment). */
static char *rewrite_pattern(const char *p, size_t n) {
    char *out = NULL;
    size_t len = 0, cap = 0;
    bool in_class = false, ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        char ch = p[i];
        if (ch == '\\' && i + 1 < n) {
            char e = p[i + 1];
            const char *rep = NULL;
            if (!in_class) {
                if (e == 's')
                    rep = "[" WS_CLASS_BODY "]";
                else if (e == 'S')
                    rep = "[^" WS_CLASS_BODY "]";
                else if (e == 'w')
                    rep = "[" WORD_CLASS_BODY "]";
                else if (e == 'W')
                    rep = "[^" WORD_CLASS_BODY "]";
            } else {
                if (e == 's')
                    rep = WS_CLASS_BODY;
                else if (e == 'w')
                    rep = WORD_CLASS_BODY;
            }
            if (rep)
                ok = pat_put(&out, &len, &cap, rep, strlen(rep));
            else
                ok = pat_put(&out, &len, &cap, p + i, 2);
            i++;
            continue;
        }
        if (!in_class && ch == '[') {
            in_class = true;
            ok = pat_put(&out, &len, &cap, p + i, 1);
            /* "[^]...]" and "[]...]": a leading ']' is a literal */
            if (i + 1 < n && p[i + 1] == '^') {
                ok = ok && pat_put(&out, &len, &cap, p + i + 1, 1);
                i++;
            }
            if (i + 1 < n && p[i + 1] == ']') {
                ok = ok && pat_put(&out, &len, &cap, p + i + 1, 1);
                i++;
            }
            continue;
        }
        if (in_class && ch == '[' && i + 1 < n && p[i + 1] == ':') {
            /* POSIX class [:alpha:] inside a class: copy through ":]" */
            const char *end = NULL;
            for (size_t k = i + 2; k + 1 < n; k++)
                if (p[k] == ':' && p[k + 1] == ']') {
                    end = p + k + 2;
                    break;
                }
            if (end) {
                ok = pat_put(&out, &len, &cap, p + i, (size_t)(end - (p + i)));
                i = (size_t)(end - p) - 1;
                continue;
            }
        }
        if (in_class && ch == ']')
            in_class = false;
        ok = pat_put(&out, &len, &cap, p + i, 1);
    }
    if (ok && !out)
        ok = pat_put(&out, &len, &cap, "", 0);
    if (!ok) {
        hr_free(out);
        return NULL;
    }
    return out;
}

static void *pcre_alloc(size_t n, void *user) {
    (void)user;
    return hr_malloc(n);
}

static void pcre_free(void *p, void *user) {
    (void)user;
    hr_free(p);
}

/* flags: extra PCRE2 compile options */
static hr_status regex_compile_opts(const char *pattern, size_t len, const char *name,
                                    uint32_t flags, pcre2_code **out, hr_error *err) {
    if (!uni_valid(pattern, len))
        return hr_err_set(err, HR_ERR_FORMAT, "%s: regex is not valid UTF-8", name);
    char *pat = rewrite_pattern(pattern, len);
    if (!pat)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory compiling a regex");
    pcre2_general_context *gc = pcre2_general_context_create(pcre_alloc, pcre_free, NULL);
    pcre2_compile_context *cc = gc ? pcre2_compile_context_create(gc) : NULL;
    if (!cc) {
        pcre2_general_context_free(gc);
        hr_free(pat);
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory compiling a regex");
    }
    int ec = 0;
    PCRE2_SIZE eo = 0;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | flags, &ec, &eo, cc);
    pcre2_compile_context_free(cc);
    pcre2_general_context_free(gc);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        hr_status st = ec == PCRE2_ERROR_HEAP_FAILED || ec == PCRE2_ERROR_NOMEMORY
                           ? HR_ERR_NOMEM
                           : HR_ERR_UNSUPPORTED;
        hr_err_set(err, st, "%s: regex '%.80s' does not compile at offset %zu: %s", name, pattern,
                   (size_t)eo, (const char *)msg);
        hr_free(pat);
        return st;
    }
    hr_free(pat);
    /* The JIT is an optimisation: without it (no JIT support, or no
     * executable memory) matching still works, slower. */
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    *out = re;
    return HR_OK;
}

hr_status tok_regex_compile(const char *pattern, size_t len, const char *name,
                            struct pcre2_real_code_8 **out, hr_error *err) {
    /* tokenizer.json regexes are Ruby-syntax: ^ and $ are line anchors */
    return regex_compile_opts(pattern, len, name, PCRE2_MULTILINE, out, err);
}

void tok_regex_free(struct pcre2_real_code_8 *re) { pcre2_code_free(re); }

void tok_match_data_free(struct pcre2_real_match_data_8 *md) { pcre2_match_data_free(md); }

hr_status tok_regex_each(tok_ctx *c, const struct pcre2_real_code_8 *re, const char *s, size_t n,
                         tok_match_fn fn, void *user) {
    if (!c->md) {
        /* one ovector pair is enough: only the whole match is used (rc 0 on
         * a match means "ovector too small", which is fine) */
        c->md = pcre2_match_data_create(1, NULL);
        if (!c->md)
            return hr_err_set(c->err, HR_ERR_NOMEM, "out of memory for regex matching");
    }
    pcre2_match_data *md = c->md;
    size_t start = 0, last_end = SIZE_MAX;
    uint32_t opts = PCRE2_NO_UTF_CHECK; /* the text was made well-formed up front */
    while (start <= n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, start, opts, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0 && !(opts & PCRE2_NO_JIT)) {
            /* JIT stack exhausted on a long input: the interpreter keeps its
             * backtracking state on the heap */
            opts |= PCRE2_NO_JIT;
            continue;
        }
        if (rc < 0) {
            PCRE2_UCHAR msg[120];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return hr_err_set(
                c->err,
                rc == PCRE2_ERROR_NOMEMORY || rc == PCRE2_ERROR_HEAPLIMIT ? HR_ERR_NOMEM
                                                                          : HR_ERR_INVALID,
                "pre-tokenizer regex failed on a %zu-byte piece: %s", n, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me < ms) /* \K tricks can report such matches; not in tokenizer regexes */
            me = ms;
        if (ms == me && me == last_end) {
            if (start >= n)
                break;
            start += uni_seq_len((uint8_t)s[start]);
            continue;
        }
        HR_TRY(fn(user, ms, me));
        last_end = me;
        start = me;
    }
    return HR_OK;
}

/* ---------------------------------------------------------------- spans */

static hr_status span_push(tok_ctx *c, tok_pieces *p, size_t off, size_t len, bool at_start) {
    if (len == 0)
        return HR_OK;
    if (p->n == p->cap_sp) {
        size_t cap = p->cap_sp ? p->cap_sp * 2 : 64;
        tok_span *sp = hr_realloc(p->sp, cap * sizeof *sp);
        if (!sp)
            return hr_err_set(c->err, HR_ERR_NOMEM, "out of memory while pre-tokenizing");
        p->sp = sp;
        p->cap_sp = cap;
    }
    p->sp[p->n++] = (tok_span){off, len, at_start};
    return HR_OK;
}

typedef struct {
    size_t start, end;
    bool match;
} seg;

typedef struct {
    tok_ctx *c;
    size_t n, prev;
} seg_state;

static hr_status seg_push(tok_ctx *c, size_t *n, size_t start, size_t end, bool match) {
    HR_TRY(tok_reserve(c, &c->seg, &c->seg_cap, *n + 1, sizeof(seg)));
    ((seg *)c->seg)[(*n)++] = (seg){start, end, match};
    return HR_OK;
}

static hr_status on_match(void *user, size_t start, size_t end) {
    seg_state *s = user;
    if (start != s->prev)
        HR_TRY(seg_push(s->c, &s->n, s->prev, start, false));
    HR_TRY(seg_push(s->c, &s->n, start, end, true));
    s->prev = end;
    return HR_OK;
}

/* Hugging Face's find_matches: alternating (gap, match) segments covering
 * the whole text. */
static hr_status find_segments(tok_ctx *c, const tok_pre_op *op, const char *s, size_t n,
                               size_t *n_seg) {
    seg_state st = {c, 0, 0};
    if (op->re) {
        HR_TRY(tok_regex_each(c, op->re, s, n, on_match, &st));
    } else if (op->lit_len > 0) {
        size_t i = 0;
        while (i + op->lit_len <= n) {
            const char *hit = NULL;
            for (size_t k = i; k + op->lit_len <= n; k++)
                if (s[k] == op->lit[0] && memcmp(s + k, op->lit, op->lit_len) == 0) {
                    hit = s + k;
                    break;
                }
            if (!hit)
                break;
            size_t at = (size_t)(hit - s);
            HR_TRY(on_match(&st, at, at + op->lit_len));
            i = at + op->lit_len;
        }
    }
    if (st.prev != n || st.n == 0)
        HR_TRY(seg_push(c, &st.n, st.prev, n, false));
    *n_seg = st.n;
    return HR_OK;
}

/* Splits every span of in into out (same text) by op's pattern and behavior. */
static hr_status op_split(tok_ctx *c, const tok_pre_op *op, const tok_pieces *in, tok_pieces *out) {
    out->base = in->base;
    out->n = 0;
    for (size_t k = 0; k < in->n; k++) {
        tok_span sp = in->sp[k];
        size_t n_seg;
        HR_TRY(find_segments(c, op, in->base + sp.off, sp.len, &n_seg));
        seg *sg = c->seg;
        if (op->invert)
            for (size_t i = 0; i < n_seg; i++)
                sg[i].match = !sg[i].match;
        /* merge per behavior, in place: the kept segments with "remove" in .match */
        size_t m = 0;
        bool prev_match = false;
        switch (op->behavior) {
        case TOK_SPLIT_REMOVED:
            for (size_t i = 0; i < n_seg; i++)
                sg[m++] = sg[i]; /* .match = remove */
            break;
        case TOK_SPLIT_ISOLATED:
            for (size_t i = 0; i < n_seg; i++)
                sg[m++] = (seg){sg[i].start, sg[i].end, false};
            break;
        case TOK_SPLIT_MERGED_WITH_PREVIOUS:
            for (size_t i = 0; i < n_seg; i++) {
                bool is_match = sg[i].match;
                if (is_match && !prev_match && m > 0)
                    sg[m - 1].end = sg[i].end;
                else
                    sg[m++] = (seg){sg[i].start, sg[i].end, false};
                prev_match = is_match;
            }
            break;
        case TOK_SPLIT_MERGED_WITH_NEXT: {
            /* right to left, then the result reversed in place */
            for (size_t i = n_seg; i-- > 0;) {
                bool is_match = sg[i].match;
                seg cur = {sg[i].start, sg[i].end, false};
                if (is_match && !prev_match && m > 0)
                    sg[n_seg - m].start = cur.start; /* grow the last pushed (leftmost so far) */
                else {
                    /* push at the right end of the array, growing leftwards */
                    m++;
                    sg[n_seg - m] = cur;
                }
                prev_match = is_match;
            }
            memmove(sg, sg + n_seg - m, m * sizeof *sg);
            break;
        }
        case TOK_SPLIT_CONTIGUOUS:
            for (size_t i = 0; i < n_seg; i++) {
                bool is_match = sg[i].match;
                if (is_match == prev_match && m > 0)
                    sg[m - 1].end = sg[i].end;
                else
                    sg[m++] = (seg){sg[i].start, sg[i].end, false};
                prev_match = is_match;
            }
            break;
        }
        for (size_t i = 0; i < m; i++)
            if (!sg[i].match)
                HR_TRY(span_push(c, out, sp.off + sg[i].start, sg[i].end - sg[i].start,
                                 sp.at_start && sg[i].start == 0));
    }
    return HR_OK;
}

/* FIXED_LENGTH: every span of in cut into pieces of op->length code points
 * (the last may be shorter), as Hugging Face's FixedLength. */
static hr_status op_fixed_length(tok_ctx *c, const tok_pre_op *op, const tok_pieces *in,
                                 tok_pieces *out) {
    out->base = in->base;
    out->n = 0;
    for (size_t k = 0; k < in->n; k++) {
        tok_span sp = in->sp[k];
        const char *s = in->base + sp.off;
        size_t start = 0, i = 0;
        uint32_t n_cp = 0;
        while (i < sp.len) {
            i += uni_seq_len((uint8_t)s[i]);
            if (i > sp.len) /* a truncated sequence at the end (the text is
                               validated before, this keeps the span inside) */
                i = sp.len;
            if (++n_cp == op->length || i >= sp.len) {
                HR_TRY(span_push(c, out, sp.off + start, i - start, sp.at_start && start == 0));
                start = i;
                n_cp = 0;
            }
        }
    }
    return HR_OK;
}

/* Hugging Face's fixed_script (the rules of SentencePiece's Unigram
 * IsValidSentencePiece): the prolonged sound mark U+30FC and all Hiragana
 * and Katakana count as Han, so Japanese text stays in one piece; ' ' and
 * the code points the table lacks are "any" (-1): they never start a piece
 * and stay with the piece before them. Other spaces are Common. */
static int fixed_script(uint32_t cp) {
    if (cp == 0x30FC)
        return UNI_SCRIPT_HAN;
    if (cp == ' ')
        return -1;
    int s = uni_script(cp);
    if (s == UNI_SCRIPT_HIRAGANA || s == UNI_SCRIPT_KATAKANA)
        return UNI_SCRIPT_HAN;
    return s == UNI_SCRIPT_UNKNOWN ? -1 : s;
}

/* SCRIPTS: a piece starts at each character whose script is not "any" and
 * differs from the last script seen that was not. Common and Inherited are
 * scripts like any other here (a combining mark after a letter is a piece
 * of its own). As in Hugging Face, what precedes the first piece (leading
 * spaces) is dropped, and a span of only "any" characters vanishes. */
static hr_status op_scripts(tok_ctx *c, const tok_pieces *in, tok_pieces *out) {
    out->base = in->base;
    out->n = 0;
    for (size_t k = 0; k < in->n; k++) {
        tok_span sp = in->sp[k];
        const char *s = in->base + sp.off;
        size_t i = 0, start = SIZE_MAX;
        int last = -1;
        while (i < sp.len) {
            uint32_t cp;
            size_t l = uni_next(s + i, sp.len - i, &cp);
            int sc = fixed_script(cp);
            if (sc >= 0 && sc != last) {
                if (start != SIZE_MAX)
                    HR_TRY(span_push(c, out, sp.off + start, i - start,
                                     sp.at_start && start == 0));
                start = i;
                last = sc;
            }
            i += l;
        }
        if (start != SIZE_MAX)
            HR_TRY(span_push(c, out, sp.off + start, sp.len - start, sp.at_start && start == 0));
    }
    return HR_OK;
}

/* The scratch text buffer that in does not point into. */
static int free_text_slot(const tok_ctx *c, const tok_pieces *in) {
    return in->base == c->tb[0] && c->tb[0] ? 1 : 0;
}

/* BYTE_LEVEL's prefix space / METASPACE's rewrite: copy every span of in to
 * out, rewritten, into the free scratch buffer. */
static hr_status op_rewrite(tok_ctx *c, const tok_pre_op *op, const tok_pieces *in,
                            tok_pieces *out) {
    size_t need = 0;
    for (size_t k = 0; k < in->n; k++)
        need += in->sp[k].len;
    /* worst cases: every byte grows to a 2-byte GPT-2 character (byte map);
     * every space grows to the replacement (Metaspace, <= 4 bytes) */
    size_t per = op->kind == TOK_PRE_METASPACE ? (op->repl_len > 2 ? op->repl_len : 2) : 2;
    size_t extra = op->kind == TOK_PRE_METASPACE ? op->repl_len : 1;
    int slot = free_text_slot(c, in);
    HR_TRY(
        tok_reserve(c, (void **)&c->tb[slot], &c->tbcap[slot], need * per + in->n * extra + 1, 1));
    char *o = c->tb[slot];
    size_t m = 0;
    out->base = o;
    out->n = 0;
    for (size_t k = 0; k < in->n; k++) {
        const char *s = in->base + in->sp[k].off;
        size_t n = in->sp[k].len, start = m;
        if (op->kind == TOK_PRE_BYTE_LEVEL) {
            /* here only the prefix space; the byte map is op_byte_map */
            if (op->add_prefix_space && (n == 0 || s[0] != ' '))
                o[m++] = ' ';
            memcpy(o + m, s, n);
            m += n;
        } else {
            for (size_t i = 0; i < n; i++) {
                if (s[i] == ' ') {
                    memcpy(o + m, op->repl, op->repl_len);
                    m += op->repl_len;
                } else {
                    o[m++] = s[i];
                }
            }
            bool starts =
                m - start >= op->repl_len && memcmp(o + start, op->repl, op->repl_len) == 0;
            bool prepend = !starts && (op->prepend == TOK_PREPEND_ALWAYS ||
                                       (op->prepend == TOK_PREPEND_FIRST && in->sp[k].at_start));
            if (prepend) {
                memmove(o + start + op->repl_len, o + start, m - start);
                memcpy(o + start, op->repl, op->repl_len);
                m += op->repl_len;
            }
        }
        HR_TRY(span_push(c, out, start, m - start, in->sp[k].at_start));
    }
    return HR_OK;
}

/* Every byte -> its GPT-2 character. */
static hr_status op_byte_map(tok_ctx *c, const tok_pieces *in, tok_pieces *out) {
    size_t need = 0;
    for (size_t k = 0; k < in->n; k++)
        need += in->sp[k].len;
    int slot = free_text_slot(c, in);
    HR_TRY(tok_reserve(c, (void **)&c->tb[slot], &c->tbcap[slot], need * 2 + 1, 1));
    char *o = c->tb[slot];
    size_t m = 0;
    out->base = o;
    out->n = 0;
    for (size_t k = 0; k < in->n; k++) {
        const uint8_t *s = (const uint8_t *)in->base + in->sp[k].off;
        size_t start = m;
        for (size_t i = 0; i < in->sp[k].len; i++)
            m += uni_encode(uni_byte_to_cp(s[i]), o + m);
        HR_TRY(span_push(c, out, start, m - start, in->sp[k].at_start));
    }
    return HR_OK;
}

hr_status pretok_run(tok_ctx *c, const char *text, size_t n, bool at_start,
                     const tok_pieces **out) {
    const hr_tokenizer *t = c->tok;
    tok_pieces *in = &c->pa, *nx = &c->pb;
    in->base = text;
    in->n = 0;
    HR_TRY(span_push(c, in, 0, n, at_start));
    for (int32_t i = 0; i < t->n_pre; i++) {
        const tok_pre_op *op = &t->pre[i];
        tok_pieces *tmp;
        switch (op->kind) {
        case TOK_PRE_SPLIT: HR_TRY(op_split(c, op, in, nx)); break;
        case TOK_PRE_BYTE_LEVEL:
            if (op->add_prefix_space) {
                HR_TRY(op_rewrite(c, op, in, nx));
                tmp = in, in = nx, nx = tmp;
            }
            if (op->re) {
                tok_pre_op split = {
                    .kind = TOK_PRE_SPLIT, .behavior = TOK_SPLIT_ISOLATED, .re = op->re};
                HR_TRY(op_split(c, &split, in, nx));
                tmp = in, in = nx, nx = tmp;
            }
            HR_TRY(op_byte_map(c, in, nx));
            break;
        case TOK_PRE_METASPACE:
            HR_TRY(op_rewrite(c, op, in, nx));
            if (op->split) {
                tmp = in, in = nx, nx = tmp;
                tok_pre_op split = {.kind = TOK_PRE_SPLIT,
                                    .behavior = TOK_SPLIT_MERGED_WITH_NEXT,
                                    .lit = (char *)op->repl,
                                    .lit_len = op->repl_len};
                HR_TRY(op_split(c, &split, in, nx));
            }
            break;
        case TOK_PRE_FIXED_LENGTH: HR_TRY(op_fixed_length(c, op, in, nx)); break;
        case TOK_PRE_SCRIPTS: HR_TRY(op_scripts(c, in, nx)); break;
        }
        tmp = in, in = nx, nx = tmp;
    }
    *out = in;
    return HR_OK;
}

/* ---------------------------------------------------------------- op list */

hr_status pretok_add(hr_tokenizer *t, const tok_pre_op *op, hr_error *err) {
    tok_pre_op *p = hr_realloc(t->pre, (size_t)(t->n_pre + 1) * sizeof *p);
    if (!p) {
        tok_regex_free(op->re);
        hr_free(op->lit);
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory for the pre-tokenizer");
    }
    t->pre = p;
    t->pre[t->n_pre++] = *op;
    return HR_OK;
}

void pretok_free_ops(hr_tokenizer *t) {
    for (int32_t i = 0; i < t->n_pre; i++) {
        tok_regex_free(t->pre[i].re);
        hr_free(t->pre[i].lit);
    }
    hr_free(t->pre);
    t->pre = NULL;
    t->n_pre = 0;
}

/* ---------------------------------------------------------------- GGUF names */

#define GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define CONTRACTIONS_CI "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
#define LLAMA3                                                                                     \
    CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"   \
                    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define QWEN2                                                                                      \
    CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"        \
                    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define GPT4O_WORDS                                                                                \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"    \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"                                                               \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"    \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
#define GPT4O                                                                                      \
    GPT4O_WORDS "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define CJK_DS "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"
#define PORO " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{0964}\\x{06D4}\\x{060C})]+"

static const char *const pats_default[] = {"[\\p{P}\\$\\+<=>\\^~\\|]+", GPT2, "\\p{N}+",
                                           "[0-9][0-9][0-9]", NULL};
static const char *const pats_gpt2[] = {GPT2, NULL};
static const char *const pats_llama3[] = {LLAMA3, NULL};
static const char *const pats_jais2[] = {
    CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                    "\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|"
                    "\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|"
                    "\\s{1,2}(?!\\S)|\\s{1}",
    NULL};
static const char *const pats_qwen2[] = {QWEN2, NULL};
static const char *const pats_qwen35[] = {
    CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+"
                    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const pats_deepseek_llm[] = {
    "[\\r\\n]",
    "\\s?[\\x{41}-\\x{5A}\\x{61}-\\x{7A}\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}"
    "\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}"
    "\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}"
    "\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}"
    "\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}"
    "\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"
    "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}"
    "\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}"
    "\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}"
    "\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}"
    "\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}"
    "\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}"
    "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}"
    "\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}"
    "\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}"
    "\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}"
    "\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}"
    "\\x{1E900}-\\x{1E943}]+",
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
    "\\s+$",
    CJK_DS,
    "\\p{N}+",
    NULL};
static const char *const pats_deepseek_coder[] = {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+",
                                                  CJK_DS,     "\\p{N}",      NULL};
static const char *const pats_deepseek3[] = {
    "\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?"
    "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const pats_falcon[] = {"[\\p{P}\\$\\+<=>\\^~\\|`]+", GPT2, "[0-9][0-9][0-9]",
                                          NULL};
static const char *const pats_starcoder[] = {"\\p{N}", GPT2, NULL};
static const char *const pats_poro[] = {PORO, NULL};
static const char *const pats_viking[] = {PORO, "\\p{N}", NULL};
static const char *const pats_tekken[] = {
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const pats_chameleon[] = {"<sentinel:[0-9]+>",
                                             "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
                                             "([\\t\\n]|    |  )",
                                             "\\p{N}",
                                             "[\\p{P}!-/:-@\\[-`{-~]",
                                             GPT2,
                                             NULL};
static const char *const pats_gpt4o[] = {GPT4O, NULL};
static const char *const pats_tiny_aya[] = {"\\d{1,3}(?=(?:\\d{3})*\\b)", GPT4O, NULL};
static const char *const pats_superbpe[] = {"\\p{N}+", "(?=(\\d{3})+(?!\\d))", NULL};
static const char *const pats_bailingmoe[] = {
    "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|"
    "\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const pats_seed_coder[] = {
    CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|"
                    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const pats_minicpm5[] = {
    "\\p{N}{1,3}",
    CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const pats_ufakzeka[] = {
    "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+",
    NULL};
static const char *const pats_exaone_moe[] = {
    CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}|"
                    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
    NULL};

typedef struct {
    const char *name;
    const char *const *pats;
    bool ignore_merges;
    bool add_bos;
    bool no_bos; /* the model has no BOS (llama.cpp clears it) */
} pre_preset;

static const pre_preset k_presets[] = {
    {"default", pats_default, false, false, false},
    {"llama-bpe", pats_llama3, true, true, false},
    {"llama3", pats_llama3, true, true, false},
    {"llama-v3", pats_llama3, true, true, false},
    {"falcon3", pats_llama3, true, true, false},
    {"falcon-h1", pats_llama3, true, true, false},
    {"pixtral", pats_llama3, true, true, false},
    {"midm-2.0", pats_llama3, true, true, false},
    {"lfm2", pats_llama3, true, true, false},
    {"jina-v5-nano", pats_llama3, true, true, false},
    {"dbrx", pats_llama3, false, false, false},
    {"smaug-bpe", pats_llama3, false, false, false},
    {"glm4", pats_llama3, false, false, true},
    {"chatglm-bpe", pats_llama3, false, false, true},
    {"jais-2", pats_jais2, false, false, false},
    {"deepseek-llm", pats_deepseek_llm, false, false, false},
    {"deepseek-coder", pats_deepseek_coder, false, false, false},
    {"deepseek-v3", pats_deepseek3, false, false, false},
    {"falcon", pats_falcon, false, false, false},
    {"starcoder", pats_starcoder, false, false, false},
    {"refact", pats_starcoder, false, false, false},
    {"command-r", pats_starcoder, false, false, false},
    {"smollm", pats_starcoder, false, false, false},
    {"codeshell", pats_starcoder, false, false, false},
    {"exaone", pats_starcoder, false, false, false},
    {"minerva-7b", pats_starcoder, false, false, false},
    {"mellum2", pats_starcoder, false, false, false},
    {"gpt-2", pats_gpt2, false, false, false},
    {"phi-2", pats_gpt2, false, false, false},
    {"mpt", pats_gpt2, false, false, false},
    {"olmo", pats_gpt2, false, false, false},
    {"jais", pats_gpt2, false, false, false},
    {"jina-es", pats_gpt2, false, false, false},
    {"jina-de", pats_gpt2, false, false, false},
    {"jina-v2-es", pats_gpt2, false, false, false},
    {"jina-v2-de", pats_gpt2, false, false, false},
    {"jina-v1-en", pats_gpt2, false, false, false},
    {"jina-v2-code", pats_gpt2, false, false, false},
    {"roberta-bpe", pats_gpt2, false, false, false},
    {"gigachat", pats_gpt2, false, false, false},
    {"a.x-4.0", pats_gpt2, false, false, false},
    {"mellum", pats_gpt2, false, false, false},
    {"modern-bert", pats_gpt2, false, false, false},
    {"exaone4", pats_gpt2, false, false, false},
    {"trillion", pats_gpt2, false, false, false},
    {"granite-docling", pats_gpt2, false, false, false},
    {"qwen2", pats_qwen2, false, false, false},
    {"deepseek-r1-qwen", pats_qwen2, false, false, false},
    {"kormo", pats_qwen2, false, false, false},
    {"f2llmv2", pats_qwen2, false, false, false},
    {"stablelm2", pats_qwen2, false, false, false},
    {"megrez", pats_qwen2, false, false, false},
    {"hunyuan", pats_qwen2, false, false, false},
    {"solar-open", pats_qwen2, false, false, false},
    {"grok-2", pats_qwen2, false, false, false},
    {"qwen35", pats_qwen35, false, false, false},
    {"poro-chat", pats_poro, false, false, false},
    {"bloom", pats_poro, false, false, false},
    {"gpt3-finnish", pats_poro, false, false, false},
    {"viking", pats_viking, false, false, false},
    {"tekken", pats_tekken, true, true, false},
    {"chameleon", pats_chameleon, false, true, false},
    {"gpt-4o", pats_gpt4o, false, false, false},
    {"llama4", pats_gpt4o, false, false, false},
    {"kanana2", pats_gpt4o, false, false, false},
    {"talkie", pats_gpt4o, false, false, false},
    {"minimax-m2", pats_gpt4o, false, false, false},
    {"tiny_aya", pats_tiny_aya, false, false, false},
    {"cohere2moe", pats_tiny_aya, false, false, false},
    {"superbpe", pats_superbpe, false, false, false},
    {"bailingmoe", pats_bailingmoe, false, false, false},
    {"bailingmoe2", pats_bailingmoe, false, false, false},
    {"llada-moe", pats_bailingmoe, false, false, false},
    {"seed-coder", pats_seed_coder, false, false, false},
    {"minicpm5", pats_minicpm5, true, false, false},
    {"ufakzeka", pats_ufakzeka, false, false, false},
    {"exaone-moe", pats_exaone_moe, false, false, false},
};

const char *pretok_guess_name(const char *pattern, bool byte_level_regex) {
    if (byte_level_regex)
        return "gpt-2";
    if (!pattern)
        return "default";
    for (size_t i = 0; i < sizeof k_presets / sizeof k_presets[0]; i++)
        if (k_presets[i].pats[1] == NULL && strcmp(k_presets[i].pats[0], pattern) == 0)
            return k_presets[i].name;
    return "default";
}

hr_status pretok_from_gguf_name(hr_tokenizer *t, const char *name, bool *add_bos, hr_error *err) {
    const pre_preset *p = NULL;
    for (size_t i = 0; i < sizeof k_presets / sizeof k_presets[0]; i++)
        if (strcmp(k_presets[i].name, name) == 0) {
            p = &k_presets[i];
            break;
        }
    if (!p)
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "%s: unknown pre-tokenizer '%s' (tokenizer.ggml.pre); headroom knows "
                          "the names llama.cpp uses, e.g. 'llama-bpe', 'qwen2', 'gpt-2'",
                          t->name, name);
    for (int i = 0; p->pats[i]; i++) {
        tok_pre_op op = {.kind = TOK_PRE_SPLIT, .behavior = TOK_SPLIT_ISOLATED};
        /* llama.cpp's regexes run under std::regex rules: $ is the end of
         * the text only */
        HR_TRY(regex_compile_opts(p->pats[i], strlen(p->pats[i]), t->name, PCRE2_DOLLAR_ENDONLY,
                                  &op.re, err));
        HR_TRY(pretok_add(t, &op, err));
    }
    tok_pre_op bl = {.kind = TOK_PRE_BYTE_LEVEL};
    HR_TRY(pretok_add(t, &bl, err));
    t->ignore_merges = p->ignore_merges;
    *add_bos = p->add_bos;
    if (p->no_bos)
        t->v.bos_id = -1;
    return HR_OK;
}
