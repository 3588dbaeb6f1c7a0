/*
 * detok.c — ids back to text: hr_token_to_piece and the streaming
 * detokenizer.
 *
 * Each token's bytes are computed once at load (llama.cpp keeps the same
 * cache): SentencePiece-style pieces turn U+2581 into a space and <0xXX>
 * tokens into their byte; byte-level pieces map every GPT-2 character back
 * to its byte (a piece with a character outside the map is used as is, as
 * Hugging Face's ByteLevel decoder does); control and unknown tokens keep
 * their text, shown only when asked; unused and undefined tokens give
 * nothing (llama.cpp).
 *
 * The stream holds at most 3 bytes: the start of a UTF-8 sequence that the
 * next token may complete. Everything else goes out at once, with each
 * maximal ill-formed subpart as U+FFFD, so a caller never sees half a
 * character. A push that does not fit the caller's buffer changes nothing
 * and returns -(bytes needed); the stream's buffer is allocated at creation
 * so decoding allocates nothing per token.
 */
#include "tokenizer/tok_impl.h"

#include "tokenizer/unicode.h"
#include "util/alloc.h"

#include <string.h>

#define SPACE_MARK "\xe2\x96\x81"

static int hexval(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* The decoded bytes of a token into out (capacity >= its len: decoding never
 * grows a piece). */
static size_t decode_token(const hr_tokenizer *t, const tok_token *tk, char *out) {
    switch (tk->type) {
    case TOK_TYPE_UNUSED:
    case TOK_TYPE_UNDEFINED: return 0;
    case TOK_TYPE_BYTE:
        if (tk->len == 6 && memcmp(tk->text, "<0x", 3) == 0 && tk->text[5] == '>' &&
            hexval(tk->text[3]) >= 0 && hexval(tk->text[4]) >= 0) {
            out[0] = (char)(hexval(tk->text[3]) * 16 + hexval(tk->text[4]));
            return 1;
        }
        break;
    case TOK_TYPE_NORMAL:
        if (t->dec_byte_level) {
            size_t m = 0;
            for (size_t i = 0; i < tk->len;) {
                uint32_t cp;
                i += uni_next(tk->text + i, tk->len - i, &cp);
                int b = uni_cp_to_byte(cp);
                if (b < 0) {
                    m = SIZE_MAX;
                    break;
                }
                out[m++] = (char)b;
            }
            if (m != SIZE_MAX)
                return m;
            break;
        } else {
            size_t m = 0;
            for (size_t i = 0; i < tk->len;) {
                if (i + 3 <= tk->len && memcmp(tk->text + i, SPACE_MARK, 3) == 0) {
                    out[m++] = ' ';
                    i += 3;
                } else {
                    out[m++] = tk->text[i++];
                }
            }
            return m;
        }
    default: break;
    }
    memcpy(out, tk->text, tk->len);
    return tk->len;
}

hr_status detok_build_pieces(hr_tokenizer *t, hr_error *err) {
    tok_vocab *v = &t->v;
    hr_free(t->piece);
    hr_free(t->piece_len);
    t->piece = hr_calloc((size_t)v->n_tokens, sizeof *t->piece);
    t->piece_len = hr_calloc((size_t)v->n_tokens, sizeof *t->piece_len);
    char *tmp = hr_malloc((size_t)v->max_token_len + 1);
    if (!t->piece || !t->piece_len || !tmp) {
        hr_free(tmp);
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory for the detokenizer cache");
    }
    t->max_piece_len = 0;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        const tok_token *tk = &v->tokens[i];
        size_t n = decode_token(t, tk, tmp);
        if (n == tk->len && memcmp(tmp, tk->text, n) == 0) {
            t->piece[i] = tk->text;
        } else {
            char *p = vocab_strdup(v, tmp, n);
            if (!p) {
                hr_free(tmp);
                return hr_err_set(err, HR_ERR_NOMEM, "out of memory for the detokenizer cache");
            }
            t->piece[i] = p;
        }
        t->piece_len[i] = (uint32_t)n;
        if (n > t->max_piece_len)
            t->max_piece_len = (uint32_t)n;
    }
    hr_free(tmp);
    return HR_OK;
}

/* The piece of id as the stream and hr_token_to_piece see it. */
static bool piece_of(const hr_tokenizer *t, int32_t id, bool render_special, const char **p,
                     uint32_t *n) {
    if (!t || id < 0 || id >= t->v.n_tokens)
        return false;
    uint8_t ty = t->v.tokens[id].type;
    if (!render_special && (ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNKNOWN)) {
        *p = "";
        *n = 0;
        return true;
    }
    *p = t->piece[id];
    *n = t->piece_len[id];
    return true;
}

int32_t hr_token_to_piece(const hr_tokenizer *tok, int32_t id, bool render_special, char *buf,
                          int32_t cap) {
    const char *p;
    uint32_t n;
    if (!piece_of(tok, id, render_special, &p, &n))
        return 0;
    if (n > (uint32_t)INT32_MAX)
        n = INT32_MAX;
    if (!buf || cap < 0 || (uint32_t)cap < n)
        return -(int32_t)n;
    memcpy(buf, p, n);
    return (int32_t)n;
}

/* ---------------------------------------------------------------- stream */

struct hr_detok {
    const hr_tokenizer *tok;
    bool started; /* a token with text has been seen (dummy space handled) */
    uint32_t n_pend;
    char *work; /* (max_piece_len + 4) bytes: held bytes + the new piece */
};

hr_status hr_detok_create(const hr_tokenizer *tok, hr_detok **out, hr_error *err) {
    if (!tok || !out)
        return hr_err_set(err, HR_ERR_INVALID, "hr_detok_create: NULL argument");
    hr_detok *d = hr_calloc(1, sizeof *d);
    char *w = hr_malloc((size_t)tok->max_piece_len + 4);
    if (!d || !w) {
        hr_free(d);
        hr_free(w);
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory for a detokenizer");
    }
    d->tok = tok;
    d->work = w;
    *out = d;
    return HR_OK;
}

void hr_detok_free(hr_detok *d) {
    if (!d)
        return;
    hr_free(d->work);
    hr_free(d);
}

/* Walks work[0..n): returns the bytes the complete part gives (invalid
 * subparts as U+FFFD), writing them to out when out is non-NULL; *done is
 * where the held tail (an unfinished sequence) begins. */
static size_t drain(const char *work, size_t n, char *out, size_t *done) {
    const uint8_t *u = (const uint8_t *)work;
    size_t i = 0, m = 0;
    while (i < n) {
        uint32_t cp;
        int r = uni_decode(u + i, n - i, &cp);
        if (r > 0) {
            if (out)
                memcpy(out + m, work + i, (size_t)r);
            m += (size_t)r;
            i += (size_t)r;
            continue;
        }
        size_t k = (size_t)-r;
        if (i + k == n && u[i] >= 0xC2 && u[i] <= 0xF4)
            break; /* a sequence still open at the end: hold it */
        if (out)
            uni_encode(UNI_REPLACEMENT, out + m);
        m += 3;
        i += k;
    }
    *done = i;
    return m;
}

int32_t hr_detok_push(hr_detok *d, int32_t id, char *buf, int32_t cap) {
    if (!d)
        return 0;
    const char *p;
    uint32_t n;
    if (!piece_of(d->tok, id, false, &p, &n))
        return 0;
    bool strip = false;
    if (!d->started && n > 0) {
        strip = d->tok->dec_strip_space && p[0] == ' ';
        if (strip) {
            p++;
            n--;
        }
    }
    size_t total = d->n_pend + n;
    memcpy(d->work + d->n_pend, p, n);
    size_t done;
    size_t need = drain(d->work, total, NULL, &done);
    if (need > (size_t)INT32_MAX)
        need = INT32_MAX;
    if (!buf || cap < 0 || (size_t)cap < need)
        return -(int32_t)need; /* held bytes are untouched: work[0..n_pend) */
    drain(d->work, total, buf, &done);
    memmove(d->work, d->work + done, total - done);
    d->n_pend = (uint32_t)(total - done);
    if (n > 0 || strip)
        d->started = true;
    return (int32_t)need;
}

int32_t hr_detok_flush(hr_detok *d, char *buf, int32_t cap) {
    if (!d || d->n_pend == 0)
        return 0;
    /* the held bytes are one unfinished sequence: one U+FFFD, as Python's
     * decode("utf-8", "replace") gives for a truncated sequence */
    if (!buf || cap < 3)
        return -3;
    uni_encode(UNI_REPLACEMENT, buf);
    d->n_pend = 0;
    return 3;
}
